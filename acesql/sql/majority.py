"""maj@n: n sampled SQLs vote with their execution results; the largest group wins.

Two results fall into one group when they are equal under the match mode that scores the
benchmark (`acesql.sql.matching`): the vote counts answers, not spellings. Each group is
represented by its first member; a candidate joins the first group whose representative it
equals. SQL that fails, times out or is truncated never votes. Ties go to the group whose
first member was sampled first, so the outcome is a pure function of the samples' order.
"""

from __future__ import annotations

from dataclasses import dataclass

from acesql.sql.columns import has_order_by
from acesql.sql.matching import MATCH_MODES
from acesql.sql.sandbox import ExecResult


@dataclass(frozen=True)
class Vote:
    """The outcome of one maj@n vote."""

    winner: int | None  # index of the winning SQL among the candidates; None: no valid SQL
    votes: int  # size of the winning group
    valid: int  # candidates that executed and voted
    groups: int  # distinct results among them


def same_result(a: ExecResult, b: ExecResult, mode: str, ordered: bool = False) -> bool:
    """Whether two successful results are one answer under `mode`.

    >>> r = lambda *rows: ExecResult(ok=True, rows=list(rows))
    >>> same_result(r((1,), (2,)), r((2,), (1.0000001,)), "multiset")
    True
    >>> swapped = r((1, "a")), r(("a", 1))
    >>> same_result(*swapped, "multiset"), same_result(*swapped, "spider")
    (False, True)
    """
    return MATCH_MODES[mode](a.rows, b.rows, ordered) is None


def group_results(sqls: list[str], results: list[ExecResult], mode: str) -> list[list[int]]:
    """Indices of the candidates grouped by execution result under `mode`, groups in the
    order their first member was sampled; SQL that failed, timed out or was truncated is in
    no group.

    >>> ok = lambda v: ExecResult(ok=True, rows=[(v,)])
    >>> group_results(["a", "b", "c", ""], [ok(1), ok(2), ok(1), ok(1)], "multiset")
    [[0, 2], [1]]
    """
    if len(sqls) != len(results):
        raise ValueError(f"{len(sqls)} SQLs but {len(results)} results")
    groups: list[list[int]] = []
    for i, result in enumerate(results):
        if not sqls[i] or not result.ok or result.truncated:
            continue
        for group in groups:
            first = group[0]
            ordered = mode == "spider" and has_order_by(sqls[first])
            if same_result(result, results[first], mode, ordered):
                group.append(i)
                break
        else:
            groups.append([i])
    return groups


def majority_vote(sqls: list[str], results: list[ExecResult], mode: str) -> Vote:
    """Pick the SQL whose execution result most candidates share.

    >>> ok = lambda v: ExecResult(ok=True, rows=[(v,)])
    >>> bad = ExecResult(ok=False, error="no such column")
    >>> majority_vote(["a", "b", "c", "d"], [ok(1), ok(2), ok(2), bad], "multiset")
    Vote(winner=1, votes=2, valid=3, groups=2)
    >>> majority_vote(["a", "b"], [ok(1), ok(2)], "multiset").winner  # a tie: sampled first wins
    0
    >>> majority_vote(["x"], [bad], "multiset").winner is None
    True
    """
    groups = group_results(sqls, results, mode)
    if not groups:
        return Vote(None, 0, 0, 0)
    best = max(groups, key=lambda g: (len(g), -g[0]))
    return Vote(best[0], len(best), sum(len(g) for g in groups), len(groups))
