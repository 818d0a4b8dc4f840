"""Selection scored again on the candidates an earlier r3 evaluation drew: another judge, or
more candidates, with nothing generated.

    stored = stored_candidates("results/r3-dev")   # {question index: row} (acesql.eval.session)
    selector = Selector(SelectionSection(method="r3"), engine=engine)  # or judge=judge
    summary, rows = rescore_examples(examples, stored, executor, selector, candidates=16,
                                     contexts=contexts, schemas=SchemaCache(0))
    # or Selector(SelectionSection(method="prm"), process_scorer=scorer)

`acesql eval --selection r3` keeps each question's candidates in its rows (`r3_candidates`, and
with resampling the drawn ones, `r3rs_drawn`). Rescoring reads them back: the greedy
pipeline's fields are the stored row's, the candidates run again against the gold, and
maj@n, candidate recall, pointwise best-of-n, groupwise ranking and (when asked) ranking after
resampling, or PRM best-of-n, are chosen by the selector and scored as
`acesql.selection.fields` scores them. Every
comparison with the stored run is then paired on the same samples, and a second judge (a
ranker trained apart, a process score model) costs its judgments only.

PRM best-of-n needs a score model of the direct view (`prm_data.sql_format: direct`): the rows
keep each candidate's SQL, not the text and token log-probabilities a chain-reading score
model weights its steps by.

- k up to the first list's size takes its first k candidates.
- A larger k goes on with the drawn candidates in the order they were drawn. They are more
  samples of the same generator on the same pruned schema only when the run drew from the
  generator: a row drawn on a wider schema (`resample_from: pipeline`) is refused, and so is
  a row with fewer than k candidates (its auditor did not fire).
- Resampling replays the stored draw: the judge's own auditor decides whether it fires, and
  what it draws is what the run drew. So it needs k equal to the first list's size and
  `resample_candidates` equal to the stored draw's size; a question where the judge fires and
  the run drew nothing is refused, naming it.

A candidate whose verdict now differs from the stored one (a changed database, a timeout) is
counted in the row's `rescore_changed`; the new verdict is the one scored.
"""

from __future__ import annotations

import sys

from acesql.data.loaders import Example
from acesql.errors import DataError
from acesql.eval.metrics import failure_category, summarize
from acesql.ranker.judge import Context
from acesql.selection.fields import is_selection_field, vote_fields
from acesql.selection.selector import Asked, Selector

# written again for every rescored row, beside the selections' own fields
RESCORED_FIELDS = {"category", "rescore_changed", "answer_from", "answer_sql", "answer_match"}


def matching_examples(examples: list[Example], stored: dict[int, dict], folder: str):
    """The examples that have stored candidates; a stored row for another question is an
    error (the wrong dataset or split), a question without one is left out and said."""
    kept = []
    for ex in examples:
        row = stored.get(ex.index)
        if row is None:
            continue
        if (row.get("question"), row.get("gold_sql")) != (ex.question, ex.sql):
            raise DataError(
                f"{folder} question {ex.index} is {row.get('question')!r}, here it is "
                f"{ex.question!r}: rescore on the dataset and split that run evaluated"
            )
        kept.append(ex)
    if len(kept) < len(examples):
        print(
            f"{len(examples) - len(kept)} of {len(examples)} questions have no stored "
            f"candidates in {folder}: left out",
            file=sys.stderr,
        )
    return kept


def rescore_examples(
    examples: list[Example],
    stored: dict[int, dict],
    executor,
    selector: Selector,
    *,
    contexts: list[Context],
    candidates: int = 8,
    schemas=None,
) -> tuple[dict, list[dict]]:
    """Score `examples` on their stored candidates (see the module doc); (summary, rows).
    `contexts[i]` is what the judge reads for `examples[i]`: its question and pruned schema;
    `selector` chooses (its match mode scores), `schemas` (`SchemaCache`) gives prm's
    process scorer each database's schema."""
    selector.check_stored()
    chosen_from, rows = [], []
    for ex in examples:
        row = stored[ex.index]
        sqls = _first_k(row, candidates, ex.index)
        if selector.resamples and candidates != len(row["r3_candidates"]):
            raise DataError(
                "resampling replays the stored draw, so it ranks as many first candidates as "
                f"were stored ({len(row['r3_candidates'])}), not {candidates}: drop --resample or "
                "--candidates"
            )
        chosen_from.append(sqls)
        rows.append({k: v for k, v in row.items() if not _is_selection(k)})
    mode = selector.mode
    checks = [(ex.db_path, sql, ex.sql) for ex, sqls in zip(examples, chosen_from) for sql in sqls]
    verdicts = executor.match_many(checks, mode, keep_rows=True)
    start = 0
    for ex, row, sqls, context in zip(examples, rows, chosen_from, contexts):
        mine, start = verdicts[start : start + len(sqls)], start + len(sqls)
        kept = stored[ex.index]
        drawn = kept.get("r3rs_drawn") or []
        was = [*kept["r3_candidates_match"], *(kept.get("r3rs_drawn_match") or [])]
        row["rescore_changed"] = sum(bool(v.match.match) != w for v, w in zip(mine, was))
        row.update(vote_fields(sqls, mine, mode))
        if len(sqls) == len(kept["r3_candidates"]) and "maj_tokens" in kept:
            row["maj_tokens"] = kept["maj_tokens"]  # the same samples' length
        if selector.judged:
            asked = Asked(context, ex.db_path, schemas(ex) if schemas is not None else None)
            replay = None
            if selector.resamples:
                replay = _replay(ex, drawn, kept.get("r3rs_drawn_schema"), executor, mode)
            row.update(selector.fields(asked, sqls, mine, resample=replay))
        row["category"] = failure_category(row)
    return summarize(rows), rows


def _is_selection(key: str) -> bool:
    return is_selection_field(key) or key in RESCORED_FIELDS


def _first_k(row: dict, k: int, index: int) -> list[str]:
    """The first k stored candidates of one question: its first list, then its draw."""
    first, drawn = row["r3_candidates"], row.get("r3rs_drawn") or []
    if k <= len(first):
        return first[:k]
    if row.get("r3rs_drawn_schema") is not None:
        raise DataError(
            f"question {index}: its drawn candidates were written on a wider schema "
            "(resample_from: pipeline), so they are not more samples of the first list: "
            f"rescore at most {len(first)} candidates"
        )
    if len(first) + len(drawn) < k:
        raise DataError(
            f"question {index} has {len(first) + len(drawn)} stored candidates, fewer than "
            f"{k}: rescore fewer, or draw on every question (a higher audit_threshold)"
        )
    return [*first, *drawn[: k - len(first)]]


def _replay(ex: Example, drawn: list[str], schema: str | None, executor, mode: str):
    """A resampler that returns what the stored run drew, run and matched again."""

    def resample(m: int):
        if not drawn:
            raise DataError(
                f"question {ex.index}: this judge's auditor fires where the stored run's did "
                "not, and that run drew nothing here to replay: rescore a run that drew on "
                "every question (a higher audit_threshold)"
            )
        if m != len(drawn):
            raise DataError(
                f"question {ex.index}: the stored run drew {len(drawn)} candidates, not {m}: "
                f"set resample_candidates to {len(drawn)}"
            )
        verdicts = executor.match_many(
            [(ex.db_path, s, ex.sql) for s in drawn], mode, keep_rows=True
        )
        context = Context(ex.question, schema, ex.evidence or "") if schema is not None else None
        return list(drawn), verdicts, context

    return resample
