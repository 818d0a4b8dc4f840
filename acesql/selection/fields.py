"""Choosing among one question's generator candidates, scored against the gold answer.

    fields = vote_fields(sqls, verdicts, mode)                  # maj@n and candidate recall
    fields |= ranked_fields(context, sqls, verdicts, judge, mode, section)    # r3
    fields |= prm_fields(sqls, verdicts, rewards, mode)                     # PRM best-of-n

Every candidate has already been executed and matched (`BatchExecutor.match_many`), so each
method's answer is scored by looking its verdict up; nothing is run twice. On the same n
candidates:

- `maj_*`: the largest group of equal results (maj@n, the ACE-SQL paper's test-time scaling);
- `oracle_match`: whether any candidate is correct (candidate recall: no selection can do
  better than this);
- `point_*`: pointwise best-of-n, the candidate with the ranker's highest P(right);
- `r3_*`: R3-SQL's groupwise ranking (`acesql.ranker.select`), with `r3_point_spread`, the
  mean spread (max - min) of pointwise scores inside groups of equal results: the
  inconsistency that judging groups instead of single candidates removes, `r3_ties` (judged
  pairs of groups the ranker could not tell apart, |P - 0.5| < tau) and `r3_decided_by`
  (`acesql.ranker.rank.decided_by`: what put the answer's group first); `r3_candidates` and
  `r3_candidates_match` keep the candidates and their verdicts, so another judge or a larger n can
  be scored on the same samples later (`acesql.eval.rescore`);
- `r3rs_*` (when `resample` is given): ranking after agentic resampling, with whether the
  auditor fired, how many candidates were generated, the recall of the pool ranked and,
  when it fired, of the new candidates alone (before the pointwise cut to n), and those
  candidates (`r3rs_drawn`, `r3rs_drawn_match`, and `r3rs_drawn_schema` when they were
  written on a wider schema);
- `prm_*`: PRM best-of-n (Reward-SQL's), each candidate's process reward and verdict, and
  the PRM-weighted vote (maj@n's groups, each vote worth its R_proc; ours).
"""

from __future__ import annotations

from collections.abc import Callable

from acesql.config import SelectionSection
from acesql.prm.select import best_of_n, weighted_vote
from acesql.ranker.judge import Context
from acesql.ranker.rank import decided_by
from acesql.ranker.select import Drawn, select_groupwise, select_with_resampling
from acesql.sql.majority import group_results, majority_vote

# Every field the functions below write is `oracle_match`, `candidates` or starts with one of these
# prefixes; rescoring (`acesql.eval.rescore`) drops such fields from a stored row and scores
# them again, and keeps the rest (the greedy pipeline's).
FIELD_PREFIXES = ("maj_", "point_", "r3_", "r3rs_", "prm_")


# row fields under the names rows were written with before these
RENAMED_FIELDS = {
    "r3_pool": "r3_candidates",
    "r3_pool_match": "r3_candidates_match",
    "maj_k": "candidates",
}


def present_names(row: dict) -> dict:
    """`row` with its fields under their present names (`RENAMED_FIELDS`).

    >>> present_names({"maj_k": 8, "maj_match": True})
    {'candidates': 8, 'maj_match': True}
    """
    if not any(old in row for old in RENAMED_FIELDS):
        return row
    return {RENAMED_FIELDS.get(key, key): value for key, value in row.items()}


def is_selection_field(key: str) -> bool:
    """Whether a row field is written by a selection (see FIELD_PREFIXES).

    >>> is_selection_field("r3rs_match"), is_selection_field("pipeline_match")
    (True, False)
    """
    return key.startswith(FIELD_PREFIXES) or key in ("oracle_match", "candidates")


# m -> (m new SQL, their verdicts, the context to judge them in or None for the first pool's):
# fresh candidates for one question, already matched
Resample = Callable[[int], tuple[list[str], list, Context | None]]


def vote_fields(sqls: list[str], verdicts: list, mode: str) -> dict:
    """maj@n of one question's candidates, and whether any of them is correct."""
    vote = majority_vote(sqls, [v.pred for v in verdicts], mode)
    return {
        "candidates": len(sqls),
        "maj_sql": sqls[vote.winner] if vote.winner is not None else None,
        "maj_match": bool(vote.winner is not None and verdicts[vote.winner].match.match),
        "maj_votes": vote.votes,
        "maj_valid": vote.valid,
        "maj_groups": vote.groups,
        "oracle_match": any(v.match.match for v in verdicts),
    }


def prm_fields(sqls: list[str], verdicts: list, rewards: list, mode: str) -> dict:
    """PRM best-of-n and the PRM-weighted vote of one question's candidates, from their
    process rewards (`acesql.prm.select`; None for a candidate it could not score)."""
    best = best_of_n(rewards)
    groups = group_results(sqls, [v.pred for v in verdicts], mode)
    voted = weighted_vote(groups, rewards)
    return {
        "prm_sql": sqls[best] if best is not None else None,
        "prm_match": bool(best is not None and verdicts[best].match.match),
        "prm_scored": sum(r is not None for r in rewards),
        "prm_rewards": [None if r is None else round(r, 4) for r in rewards],
        "prm_candidate_match": [v.match.match for v in verdicts],
        # candidates sharing the pick's result: 1 is an answer no other sample gave
        "prm_votes": next((len(g) for g in groups if best in g), 0),
        "prm_vote_sql": sqls[voted] if voted is not None else None,
        "prm_vote_match": bool(voted is not None and verdicts[voted].match.match),
    }


def ranked_fields(
    context: Context,
    sqls: list[str],
    verdicts: list,
    judge,
    mode: str,
    settings: SelectionSection | None = None,
    resample: Resample | None = None,
) -> dict:
    """Pointwise best-of-n, groupwise ranking and, with `resample`, ranking after agentic
    resampling, each scored by its candidate's verdict (see the module doc). `judge` is a
    `LetterJudge`; its cache makes the resampling pass reuse the first pass's judgments.
    `settings` (the `selection` section) gives tau and the resampling's sizes and pool."""
    settings = settings or SelectionSection(method="r3")
    tau = settings.tau
    results = [v.pred for v in verdicts]
    choice = select_groupwise(context, sqls, results, judge, mode, tau)
    points = {i: p for g in choice.ranked for i, p in g.pointwise.items()}
    best = max(points, key=lambda i: (points[i], -i)) if points else None
    spreads = [
        max(g.pointwise.values()) - min(g.pointwise.values())
        for g in choice.ranked
        if len(g.members) > 1
    ]
    fields = {
        "point_sql": sqls[best] if best is not None else None,
        "point_match": bool(best is not None and verdicts[best].match.match),
        "r3_sql": choice.sql,
        "r3_match": bool(choice.index is not None and verdicts[choice.index].match.match),
        "r3_groups": len(choice.ranked),
        "r3_judged_pairs": choice.judged_pairs,
        "r3_ties": sum(abs(p - 0.5) < tau for p in choice.preferences),
        "r3_decided_by": decided_by(choice.ranked),
        "r3_point_spread": round(sum(spreads) / len(spreads), 4) if spreads else None,
        "r3_candidates": list(sqls),
        "r3_candidates_match": [bool(v.match.match) for v in verdicts],
    }
    if resample is None:
        return fields
    drawn_sqls: list[str] = []
    drawn_verdicts: list = []
    drawn_contexts: list[Context] = []

    def draw(m: int) -> Drawn:
        new_sqls, new_verdicts, new_context = resample(m)
        drawn_sqls.extend(new_sqls)
        drawn_verdicts.extend(new_verdicts)
        drawn_contexts.extend([new_context] if new_context else [])
        return Drawn(new_sqls, [v.pred for v in new_verdicts], new_context)

    out = select_with_resampling(
        context,
        sqls,
        results,
        judge,
        draw,
        settings.resample_candidates,
        settings.audit_threshold,
        mode,
        tau,
        settings.resample_ranked,
    )
    every = [*verdicts, *drawn_verdicts]
    fields.update(
        r3rs_sql=out.choice.sql,
        r3rs_match=bool(out.choice.index is not None and every[out.choice.index].match.match),
        r3rs_fired=out.fired,
        r3rs_audit=round(out.audit, 4),
        r3rs_generated=out.generated,
        r3rs_oracle=any(every[i].match.match for i in out.kept),
        r3rs_drawn_oracle=any(v.match.match for v in drawn_verdicts) if out.fired else None,
        r3rs_drawn=drawn_sqls,
        r3rs_drawn_match=[bool(v.match.match) for v in drawn_verdicts],
    )
    if drawn_contexts:
        fields["r3rs_drawn_schema"] = drawn_contexts[0].schema
    return fields
