"""The evaluation's numbers, computed from per-example rows (one row per question).

Each score comes with the count it is a share of. Overall and per complexity level:

- `pipeline_ex`: greedy retriever -> generator, execution match; `maj_ex`: maj@n on the same
  pruned schema (when k > 0), with `oracle_ex` (candidate recall: any of the k correct) and
  `maj_given_recall` (maj@n's accuracy on the questions with a correct candidate); with the
  r3 selection also `point_ex` (pointwise best-of-n), `r3_ex` (groupwise ranking),
  `r3_given_recall`, `r3_point_spread`, `r3_tie_rate` (judged pairs of groups the ranker
  called a tie), `r3_by_preference` (questions with several groups whose answer the pairwise
  preference chose, not utility) and, with resampling, `r3rs_ex`, `r3rs_fired`,
  `r3rs_generated` (candidates per question), `r3rs_oracle_ex` (recall of the pool ranked)
  and `r3rs_drawn_oracle` (recall of the new candidates, on the questions where it fired);
  with the prm selection `prm_ex` (PRM best-of-n), `prm_given_recall`, `prm_vote_ex` (the
  PRM-weighted vote) and `prm_auc_within` (AUC of R_proc, right against wrong candidates of
  one question);
  `generator_ex`: the generator on the gold columns' schema; `full_schema_ex`: the generator
  on the whole schema, one greedy call (the paper's Figure 1 (a)), with `full_agree_rate`
  (questions where both answers ran and returned the same result, over those where both ran)
  and `full_prompt_tokens` (mean tokens of the full-schema prompt); `answer_ex`: the
  product's answer under the answer policy (`acesql.selection.answer`), with
  `answer_full_share` (questions it answered from the full schema);
- retriever: recall, precision, exact set match of the chosen columns against the gold SQL's,
  and `covers_gold` (every gold column chosen);
- `first_table_share`: share of the chosen columns that belong to the table the schema shows
  first, beside `gold_first_table_share`, the gold columns' share there (a retriever that
  leans on position names that table far more often than the gold SQL uses it);
- `non_gold_ratio`: share of correct pipeline predictions whose columns differ from the gold
  SQL's (the ACE-SQL paper, Table 3), over the correct predictions whose columns could be resolved;
- output tokens per query, retriever + generator.

Failures are sorted into categories a reader can act on (`failure_category`).
"""

from __future__ import annotations

from collections import Counter, defaultdict

from acesql.prm.quality import auc_within

# what a failed pipeline prediction did wrong, in the order the report lists them
FAILURE_CATEGORIES = (
    "no_sql",  # no SQL block in the generator's answer
    "syntax_error",  # SQLite could not parse it
    "schema_error",  # names a table or column the database does not have
    "other_error",  # refused or failed for another reason (e.g. not a SELECT)
    "timeout",  # ran past the execution timeout
    "wrong_columns",  # ran, wrong rows, and used other columns than the gold SQL
    "wrong_result",  # ran, wrong rows, with the gold SQL's columns (or unknown columns)
)
# the scores a table shows, in order: (key, label); counts are plain numbers, the rest shares
SCORE_LABELS = (
    ("usable", "questions"),
    ("answer_ex", "answer EX (shipped)"),
    ("pipeline_ex", "pipeline EX"),
    ("full_schema_ex", "full-schema EX"),
    ("maj_ex", "maj@n"),
    ("point_ex", "pointwise best-of-n"),
    ("r3_ex", "r3 ranking"),
    ("r3rs_ex", "r3 + resampling"),
    ("prm_ex", "PRM best-of-n"),
    ("prm_vote_ex", "PRM-weighted vote"),
    ("oracle_ex", "candidate recall"),
    ("generator_ex", "generator EX"),
    ("retriever_recall", "recall"),
    ("retriever_precision", "precision"),
    ("retriever_exact", "exact set"),
    ("covers_gold", "covers gold"),
    ("first_table_share", "named from 1st table"),
    ("gold_first_table_share", "gold in 1st table"),
    ("non_gold_ratio", "non-gold"),
    ("tokens_per_query", "tokens / query"),
)
COUNTS = {"usable", "tokens_per_query"}
CORRECT_OF = {"pipeline_ex": "pipeline_correct", "maj_ex": "maj_correct"}
CORRECT_OF |= {"point_ex": "point_correct", "r3_ex": "r3_correct", "r3rs_ex": "r3rs_correct"}
CORRECT_OF["oracle_ex"] = "oracle_correct"
CORRECT_OF |= {"prm_ex": "prm_correct", "prm_vote_ex": "prm_vote_correct"}
CORRECT_OF["generator_ex"] = "generator_correct"
CORRECT_OF |= {"full_schema_ex": "full_schema_correct", "answer_ex": "answer_correct"}

# difficulty labels of the synthetic data, Spider and BIRD, easiest first; others sort after
LEVEL_ORDER = (
    "simple",
    "moderate",
    "complex",
    "highly complex",
    "easy",
    "medium",
    "hard",
    "extra",
    "challenging",
)
_SYNTAX = ("syntax error", "incomplete input", "unrecognized token", "empty sql")
_SCHEMA = ("no such column", "no such table", "ambiguous column", "no such function")


def failure_category(row: dict) -> str:
    """'correct', 'unusable', or one of FAILURE_CATEGORIES for a pipeline row.

    >>> failed = {"usable": True, "pipeline_match": False}
    >>> failure_category({**failed, "pipeline_reason": "pred_error",
    ...                   "pred_error": 'near "FORM": syntax error'})
    'syntax_error'
    >>> failure_category({**failed, "pipeline_reason": "different_rows",
    ...                   "pred_columns": ["t.a"], "gold_columns": ["t.b"]})
    'wrong_columns'
    """
    if not row["usable"]:
        return "unusable"
    if row["pipeline_match"]:
        return "correct"
    reason = row["pipeline_reason"]
    if reason == "no_sql":
        return "no_sql"
    if reason == "pred_timeout":
        return "timeout"
    if reason == "pred_error":
        error = (row.get("pred_error") or "").lower()
        if any(s in error for s in _SYNTAX):
            return "syntax_error"
        if any(s in error for s in _SCHEMA):
            return "schema_error"
        return "other_error"
    pred, gold = row.get("pred_columns"), row.get("gold_columns")
    if pred is not None and gold is not None and set(pred) != set(gold):
        return "wrong_columns"
    return "wrong_result"


def summarize(rows: list[dict]) -> dict:
    """Scores over the usable rows, overall and `by_complexity`, plus failure counts."""
    usable = [r for r in rows if r["usable"]]
    levels = defaultdict(list)
    for r in usable:
        levels[r["complexity"]].append(r)
    summary = {"n": len(rows), **scores(usable)}
    summary["unusable"] = len(rows) - len(usable)
    summary["failures"] = failure_counts(rows)
    summary["by_complexity"] = {k: scores(levels[k]) for k in sorted(levels, key=level_key)}
    return summary


def level_key(level: str) -> tuple:
    """Sort key putting difficulty levels easiest first.

    >>> sorted(["highly complex", "simple", "zeta", "complex"], key=level_key)
    ['simple', 'complex', 'highly complex', 'zeta']
    """
    known = level in LEVEL_ORDER
    return (not known, LEVEL_ORDER.index(level) if known else 0, level)


def failure_counts(rows: list[dict]) -> dict[str, int]:
    counts = Counter(failure_category(r) for r in rows)
    return {c: counts[c] for c in FAILURE_CATEGORIES if counts[c]}


def scores(rows: list[dict]) -> dict:
    """The scores of one group of usable rows (see the module docstring)."""
    n = len(rows)
    scored = [r for r in rows if r["recall"] is not None]
    correct = [r for r in rows if r["pipeline_match"]]
    resolved = [r for r in correct if r.get("non_gold") is not None]
    voted = [r for r in rows if r.get("maj_match") is not None]
    out = {
        "usable": n,
        "pipeline_correct": len(correct),
        "pipeline_ex": _mean(rows, "pipeline_match"),
        "generator_correct": sum(bool(r["generator_match"]) for r in rows),
        "generator_ex": _mean(rows, "generator_match"),
        "retriever_scored": len(scored),
        "retriever_recall": _mean(scored, "recall"),
        "retriever_precision": _mean(scored, "precision"),
        "retriever_exact": _mean(scored, "exact_columns"),
        "covers_gold": _mean(scored, "covers_gold"),
        "retriever_fallback_rate": _mean(rows, "retriever_fallback"),
        # rows written before salvaging existed have no such field: nothing was salvaged
        "retriever_salvaged_rate": _share_of(rows, "retriever_salvaged"),
        "non_gold_ratio": _mean(resolved, "non_gold"),
        "non_gold_of": len(resolved),
        "no_sql_rate": round(sum(r["pred_sql"] is None for r in rows) / n, 4) if n else 0.0,
        "retriever_tokens": _mean(rows, "retriever_tokens", 1),
        "generator_tokens": _mean(rows, "generator_tokens", 1),
        "tokens_per_query": round(
            sum(r["retriever_tokens"] + r["generator_tokens"] for r in rows) / n, 1
        )
        if n
        else 0.0,
    }
    placed = [r for r in scored if r.get("gold_first_table") is not None]
    if placed:  # rows written before these counts existed have none
        out["first_table_share"] = _share(placed, "retrieved_first_table", "retrieved_columns")
        out["gold_first_table_share"] = _share(placed, "gold_first_table", "gold_columns")
    out |= _full_schema_scores(rows)
    if voted:
        out["candidates"] = voted[0]["candidates"]
        out |= _selection_scores(voted)
    return out


def _full_schema_scores(rows: list[dict]) -> dict:
    """Full-schema EX and the shipped answer's, on the rows that have them (rows written
    before they existed have neither)."""
    out = {}
    full = [r for r in rows if r.get("full_match") is not None]
    if full:
        out["full_schema_correct"] = sum(bool(r["full_match"]) for r in full)
        out["full_schema_ex"] = _mean(full, "full_match")
        both_ran = [r for r in full if r.get("full_agrees") is not None]
        out["full_agree_rate"] = _mean(both_ran, "full_agrees")
        out["full_prompt_tokens"] = _mean(full, "full_tokens", 1)
    answered = [r for r in rows if r.get("answer_match") is not None]
    if answered:
        out["answer_correct"] = sum(bool(r["answer_match"]) for r in answered)
        out["answer_ex"] = _mean(answered, "answer_match")
        from_full = sum(r["answer_from"] == "full_schema" for r in answered)
        out["answer_full_share"] = round(from_full / len(answered), 4)
    return out


def _selection_scores(voted: list[dict]) -> dict:
    """maj@n and, where the rows have them, r3's choices, each as EX and correct count, and
    as accuracy on the questions with a correct candidate (selection given recall)."""
    out = {}
    fields = (("maj", "maj_match"), ("point", "point_match"), ("r3", "r3_match"))
    for prefix, field in (*fields, ("prm", "prm_match"), ("prm_vote", "prm_vote_match")):
        chosen = [r for r in voted if r.get(field) is not None]
        if not chosen:
            continue
        out[f"{prefix}_correct"] = sum(bool(r[field]) for r in chosen)
        out[f"{prefix}_ex"] = _mean(chosen, field)
        if prefix != "point" and any("oracle_match" in r for r in chosen):
            out[f"{prefix}_given_recall"] = _mean(
                [r for r in chosen if r.get("oracle_match")], field
            )
    if any("oracle_match" in r for r in voted):
        out["oracle_correct"] = sum(bool(r.get("oracle_match")) for r in voted)
        out["oracle_ex"] = _mean(voted, "oracle_match")
    # how well R_proc orders the right against the wrong candidates of one question
    scored = [
        (reward, right, r["index"])
        for r in voted
        for reward, right in zip(r.get("prm_rewards") or (), r.get("prm_candidate_match") or ())
        if reward is not None
    ]
    within = auc_within(*map(list, zip(*scored))) if scored else None
    if within is not None:
        out["prm_auc_within"] = round(within, 4)
    spreads = [r for r in voted if r.get("r3_point_spread") is not None]
    if spreads:
        out["r3_point_spread"] = _mean(spreads, "r3_point_spread")
    out |= _r3_decisions(voted)
    resampled = [r for r in voted if r.get("r3rs_match") is not None]
    if resampled:
        out["r3rs_correct"] = sum(bool(r["r3rs_match"]) for r in resampled)
        out["r3rs_ex"] = _mean(resampled, "r3rs_match")
        out["r3rs_fired"] = _mean(resampled, "r3rs_fired")
        out["r3rs_generated"] = _mean(resampled, "r3rs_generated", 2)
        out["r3rs_oracle_ex"] = _mean(resampled, "r3rs_oracle")
        drawn = [r for r in resampled if r.get("r3rs_drawn_oracle") is not None]
        if drawn:
            out["r3rs_drawn_oracle"] = _mean(drawn, "r3rs_drawn_oracle")
    return out


def _r3_decisions(rows: list[dict]) -> dict:
    """How often the ranker's pairwise calls decided: its tie rate over judged pairs and the
    share of questions with several groups that preference, not utility, settled."""
    judged = [r for r in rows if r.get("r3_ties") is not None and r.get("r3_judged_pairs")]
    out = {}
    if judged:
        pairs = sum(r["r3_judged_pairs"] for r in judged)
        out["r3_tie_rate"] = round(sum(r["r3_ties"] for r in judged) / pairs, 4)
        by_preference = sum(r.get("r3_decided_by") == "preference" for r in judged)
        out["r3_by_preference"] = round(by_preference / len(judged), 4)
    return out


def _share(rows: list[dict], part: str, whole: str) -> float:
    """Sum of `part` over the summed lengths of the `whole` lists (0 when they are empty)."""
    total = sum(len(r[whole]) for r in rows)
    return round(sum(r[part] for r in rows) / total, 4) if total else 0.0


def _share_of(rows: list[dict], key: str) -> float:
    """The share of rows whose `key` is true; a row without it counts as false."""
    return round(sum(bool(r.get(key)) for r in rows) / len(rows), 4) if rows else 0.0


def _mean(rows: list[dict], key: str, digits: int = 4) -> float:
    return round(sum(float(r[key]) for r in rows) / len(rows), digits) if rows else 0.0
