"""The product's answer: the pipeline's, the full schema's, or a rule per question.

The pipeline (retriever -> pruned schema -> generator) is the paper's method; the generator
asked once with every column (the paper's Figure 1 (a)) is what a user would do without it.
Which one a question gets is a policy, chosen on a dev split and never on a test set:

- `pipeline`: the pipeline's answer (greedy, or the one `selection.method` chose);
- `full_schema`: the generator's greedy answer on the whole schema;
- `pipeline_else_full`: the pipeline's, unless it did not run (no SQL, an error, a timeout),
  then the full schema's; `full_else_pipeline`: the converse;
- `by_size`: the full schema's while its prompt has at most `full_schema_tokens` tokens,
  else the pipeline's (pruning pays where schemas are wide).

    side = answer_side("pipeline_else_full", Sides(pipeline_ran=False, full_ran=True,
                                                    full_tokens=900), full_schema_tokens=1024)
    # 'full_schema'

`policy_table(rows)` scores every policy on an evaluation's rows, paired against the
pipeline, and `chosen_policy` names the one to set: `acesql eval --answers RUN`.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass

from acesql.config.section import AnswerPolicy
from acesql.paired import paired_difference

POLICIES: tuple[str, ...] = typing.get_args(AnswerPolicy)
SIDES = ("pipeline", "full_schema")


@dataclass(frozen=True)
class Sides:
    """What a policy may look at before the gold answer is known."""

    pipeline_ran: bool  # the pipeline's SQL ran without an error or a timeout
    full_ran: bool  # so did the full schema's
    full_tokens: int  # tokens of the full-schema prompt


def answer_side(policy: str, sides: Sides, full_schema_tokens: int = 1024) -> str:
    """'pipeline' or 'full_schema': whose answer `policy` gives this question.

    >>> answer_side("pipeline_else_full", Sides(False, True, 500))
    'full_schema'
    >>> answer_side("full_else_pipeline", Sides(True, True, 500))
    'full_schema'
    >>> answer_side("by_size", Sides(True, True, 1500), full_schema_tokens=1024)
    'pipeline'
    """
    if policy == "pipeline":
        return "pipeline"
    if policy == "full_schema":
        return "full_schema"
    if policy == "pipeline_else_full":
        return "pipeline" if sides.pipeline_ran or not sides.full_ran else "full_schema"
    if policy == "full_else_pipeline":
        return "full_schema" if sides.full_ran or not sides.pipeline_ran else "pipeline"
    if policy == "by_size":
        return "full_schema" if sides.full_tokens <= full_schema_tokens else "pipeline"
    raise ValueError(f"unknown answer policy {policy!r}: {' | '.join(POLICIES)}")


# the row fields of the pipeline's answer under each selection method
_PIPELINE_FIELDS = {
    "greedy": ("pred_sql", "pipeline_match"),
    "maj": ("maj_sql", "maj_match"),
    "r3": ("r3_sql", "r3_match"),
    "r3rs": ("r3rs_sql", "r3rs_match"),
    "prm": ("prm_sql", "prm_match"),
}


def answer_fields(row: dict, policy: str, full_schema_tokens: int, method: str = "greedy") -> dict:
    """`answer_from`, `answer_sql` and `answer_match` of one evaluated row under `policy`;
    `method` names the selection whose answer is the pipeline's (`r3rs` after resampling).
    Empty for a row without a full-schema answer (written before it existed)."""
    if row.get("full_match") is None:
        return {}
    sql_field, match_field = _PIPELINE_FIELDS[method]
    if method == "greedy":
        pipeline_ran = bool(row.get("pipeline_ran"))
    else:  # a chosen candidate belongs to a group of results that ran, when there is one
        pipeline_ran = row.get(sql_field) is not None
    sides = Sides(pipeline_ran, bool(row["full_ran"]), int(row["full_tokens"]))
    side = answer_side(policy, sides, full_schema_tokens)
    if side == "pipeline":
        sql, match = row.get(sql_field), bool(row.get(match_field))
    else:
        sql, match = row.get("full_sql"), bool(row["full_match"])
    return {"answer_from": side, "answer_sql": sql, "answer_match": match}


def candidate_policies(rows: list[dict]) -> list[tuple[str, int]]:
    """(policy, full_schema_tokens) pairs worth scoring on `rows`: every fixed policy, and
    `by_size` at each full-schema prompt length seen (between two lengths nothing changes)."""
    fixed = [(p, 0) for p in POLICIES if p != "by_size"]
    lengths = sorted({int(r["full_tokens"]) for r in rows if r.get("full_tokens") is not None})
    return fixed + [("by_size", n) for n in lengths]


def policy_table(rows: list[dict], method: str = "greedy") -> list[dict]:
    """Every candidate policy's EX on `rows` (usable rows with a full-schema answer), each
    paired against the pipeline's answer (`acesql.paired`)."""
    rows = [r for r in rows if r.get("usable") and r.get("full_match") is not None]
    base = [answer_fields(r, "pipeline", 0, method)["answer_match"] for r in rows]
    table = []
    for policy, tokens in candidate_policies(rows):
        got = [answer_fields(r, policy, tokens, method)["answer_match"] for r in rows]
        paired = paired_difference(base, got)
        table.append(
            {
                "policy": policy,
                "full_schema_tokens": tokens or None,
                "n": len(rows),
                "correct": sum(got),
                "ex": round(sum(got) / len(rows), 4) if rows else 0.0,
                "gain": paired.diff,
                "low": paired.low,
                "high": paired.high,
                "p": paired.p_value,
            }
        )
    return table


def chosen_policy(table: list[dict]) -> dict:
    """The row of `table` to ship: the highest EX; on a tie the policy listed first (the
    pipeline before any rule, a smaller `by_size` threshold before a larger one).

    >>> chosen_policy([{"policy": "pipeline", "ex": 0.4}, {"policy": "full_schema", "ex": 0.5},
    ...                {"policy": "by_size", "ex": 0.5}])["policy"]
    'full_schema'
    """
    return max(enumerate(table), key=lambda item: (item[1]["ex"], -item[0]))[1]


def policy_text(table: list[dict]) -> str:
    """`policy_table` as a plain-text table, a row per policy (by_size once per threshold)."""
    lines = [f"{'policy':<34}{'EX':>8}{'- pipeline':>12}{'95% interval':>18}{'McNemar p':>11}"]
    for t in table:
        name = t["policy"]
        if t["full_schema_tokens"]:
            name += f" <= {t['full_schema_tokens']} tokens"
        interval = f"[{100 * t['low']:+.1f}, {100 * t['high']:+.1f}]"
        lines.append(
            f"{name:<34}{100 * t['ex']:>7.1f}%{100 * t['gain']:>+12.1f}{interval:>18}"
            f"{t['p']:>11.3g}"
        )
    return "\n".join(lines)
