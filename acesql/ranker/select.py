"""R3-style selection among n candidates: group by execution result, rank the groups, answer
with the best member of the top group.

    choice = select_groupwise(context, sqls, results, judge, mode="multiset")
    choice.sql, choice.ranked, choice.judged_pairs, choice.preferences

Failed SQL forms no group; empty results form their own group, flagged (`empty`), since an
empty answer is often a wrong filter. Only group representatives are compared pairwise (one
judgment per pair of groups, both orders), every member is scored pointwise.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from acesql.config import SelectionSection
from acesql.ranker.judge import Candidate, Context
from acesql.ranker.rank import GroupScore, rank_groups
from acesql.sql.majority import group_results
from acesql.sql.sandbox import ExecResult

_DEFAULT = SelectionSection.model_fields  # the `selection` section's defaults


@dataclass
class Choice:
    sql: str | None  # None when no candidate executed
    index: int | None
    ranked: list[GroupScore] = field(default_factory=list)
    empty: list[bool] = field(default_factory=list)  # per ranked group: its result has no rows
    judged_pairs: int = 0
    preferences: list[float] = field(default_factory=list)  # per judged pair: P(first is right)


def select_groupwise(
    context: Context,
    sqls: list[str],
    results: list[ExecResult],
    judge,
    mode: str = "multiset",
    tau: float = _DEFAULT["tau"].default,
) -> Choice:
    """The chosen candidate (see the module doc); `judge` has `pairwise_many` and
    `pointwise_many` (`acesql.ranker.judge.LetterJudge`)."""
    groups = group_results(sqls, results, mode)
    if not groups:
        return Choice(None, None)
    candidates = [Candidate(sql, result) for sql, result in zip(sqls, results)]
    reps = [g[0] for g in groups]
    pairs = [(a, b) for i, a in enumerate(reps) for b in reps[i + 1 :]]
    preference = dict(
        zip(pairs, judge.pairwise_many(context, [(candidates[a], candidates[b]) for a, b in pairs]))
    )
    members = [i for g in groups for i in g]
    points = dict(zip(members, judge.pointwise_many(context, [candidates[i] for i in members])))
    ranked = rank_groups(groups, lambda a, b: preference[(a, b)], points.__getitem__, tau)
    top = ranked[0].best
    empty = [not results[g.members[0]].rows for g in ranked]
    return Choice(sqls[top], top, ranked, empty, len(pairs), [preference[p] for p in pairs])


@dataclass
class Drawn:
    """New candidates from a resampler."""

    sqls: list[str]
    results: list[ExecResult]
    context: Context | None = None  # set when drawn on a wider schema: what to judge them in


@dataclass
class Resampled:
    choice: Choice
    fired: bool  # the auditor found no likely-correct SQL and new candidates were drawn
    audit: float  # the auditor's P(yes) on the first pool
    generated: int  # candidates generated in all (n, or n + m when it fired)
    kept: list[int] = field(default_factory=list)  # the ranked pool: indices over old + new


def select_with_resampling(
    context: Context,
    sqls: list[str],
    results: list[ExecResult],
    judge,
    resample,
    m: int,
    threshold: float = _DEFAULT["audit_threshold"].default,
    mode: str = "multiset",
    tau: float = _DEFAULT["tau"].default,
    ranked: str = _DEFAULT["resample_ranked"].default,
) -> Resampled:
    """Groupwise selection with agentic resampling.

    The auditor reads the pool (`judge.audit`); when P(a likely-correct SQL is present) is
    under `threshold`, `resample(m)` draws m new candidates (a `Drawn`), and the n best by
    pointwise score are kept and ranked again: the n best of the m new with `ranked="new"`
    (R3-SQL's: the first n are discarded), of the n old and m new together with
    `ranked="both"`. `m` should exceed n. When the new candidates were written on a wider
    schema (`Drawn.context`), they are judged in it. `choice.index` counts the old
    candidates then the new; the ranked groups' members count the kept ones.
    """
    if ranked not in ("new", "both"):
        raise ValueError(f"unknown resample_ranked {ranked!r}: new | both")
    n = len(sqls)
    groups = group_results(sqls, results, mode)
    first = [[Candidate(sqls[i], results[i]) for i in g] for g in groups]
    audit = judge.audit(context, first) if first else 0.0
    if audit >= threshold:
        return Resampled(
            select_groupwise(context, sqls, results, judge, mode, tau),
            False,
            audit,
            n,
            list(range(n)),
        )
    drawn = resample(m)
    context = drawn.context or context
    all_sqls, all_results = [*sqls, *drawn.sqls], [*results, *drawn.results]
    start = n if ranked == "new" else 0
    runnable = [
        i
        for i in range(start, len(all_sqls))
        if all_sqls[i] and all_results[i].ok and not all_results[i].truncated
    ]
    scores = judge.pointwise_many(
        context, [Candidate(all_sqls[i], all_results[i]) for i in runnable]
    )
    keep = [i for _, i in sorted(zip(scores, runnable), key=lambda x: (-x[0], x[1]))[:n]]
    keep.sort()
    kept_sqls, kept_results = [all_sqls[i] for i in keep], [all_results[i] for i in keep]
    choice = select_groupwise(context, kept_sqls, kept_results, judge, mode, tau)
    if choice.index is not None:
        choice.index = keep[choice.index]
    return Resampled(choice, True, audit, n + len(drawn.sqls), keep)
