"""Groupwise ranking: the order of execution-result groups, from judgments given as functions.

    order = rank_groups(groups, prefer, pointwise, n_candidates, tau=0.05)
    order[0].best  # the candidate to answer with
    decided_by(order)  # which signal put it first

`groups` are candidate indices grouped by execution result (`acesql.sql.majority.
group_results`); `prefer(a, b)` is P(the SQL of candidate a is right rather than b's), already
averaged over both orders by the judge; `pointwise(i)` is P(candidate i is right).

- Preference (the listwise signal): every pair of groups is judged once, on their
  representatives (each group's first member); a judgment with |P - 0.5| < tau is a tie, worth
  half a win to each side; otherwise the side above 0.5 wins. A group's preference score is
  its wins. Members of one group are never compared with each other.
- Utility: 0.5 x the best pointwise score in the group + 0.5 x the group's share of the
  candidates that executed (self-consistency). Both halves are in [0, 1], so neither can
  drown the other; a lone candidate the judge trusts and a large group it doubts can tie.
- Order: preference first, utility breaks ties, then the group sampled first. The answer is
  the top group's best-scored member.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from acesql.config import SelectionSection


@dataclass
class GroupScore:
    members: list[int]
    preference: float  # wins over the other groups (a tie is half a win)
    utility: float
    best: int  # the member with the highest pointwise score
    pointwise: dict[int, float]


def rank_groups(
    groups: list[list[int]],
    prefer: Callable[[int, int], float],
    pointwise: Callable[[int], float],
    tau: float = SelectionSection.model_fields["tau"].default,
) -> list[GroupScore]:
    """The groups in ranked order (see the module doc); empty when no group.

    >>> prefer = lambda a, b: {(0, 2): 0.9, (0, 3): 0.52, (2, 3): 0.2}[(a, b)]
    >>> point = {0: 0.6, 1: 0.8, 2: 0.3, 3: 0.5}.get
    >>> [(g.members, g.preference, g.best) for g in rank_groups([[0, 1], [2], [3]], prefer, point)]
    [([0, 1], 1.5, 1), ([3], 1.5, 3), ([2], 0.0, 2)]
    """
    n_valid = sum(len(g) for g in groups)
    scores = []
    for members in groups:
        points = {i: pointwise(i) for i in members}
        best = max(members, key=lambda i: (points[i], -i))
        utility = 0.5 * points[best] + 0.5 * len(members) / n_valid
        scores.append(GroupScore(list(members), 0.0, utility, best, points))
    for x in range(len(groups)):
        for y in range(x + 1, len(groups)):
            p = prefer(groups[x][0], groups[y][0])
            if abs(p - 0.5) < tau:
                scores[x].preference += 0.5
                scores[y].preference += 0.5
            elif p > 0.5:
                scores[x].preference += 1
            else:
                scores[y].preference += 1
    order = sorted(range(len(scores)), key=lambda k: (-scores[k].preference, -scores[k].utility, k))
    return [scores[k] for k in order]


def decided_by(ranked: list[GroupScore]) -> str | None:
    """Which signal put the top group first: "preference" (more wins than the runner-up),
    "utility" (level on wins, higher utility), "order" (level on both: sampled first) or
    "one group"; None when no group. A judge whose pairwise calls are all ties leaves every
    decision to utility, where the group's size weighs as much as the judge's pointwise score.

    >>> a, b = GroupScore([0], 1.0, 0.4, 0, {}), GroupScore([1], 0.0, 0.9, 1, {})
    >>> decided_by([a, b]), decided_by([a]), decided_by([])
    ('preference', 'one group', None)
    >>> decided_by([GroupScore([0], 0.5, 0.9, 0, {}), GroupScore([1], 0.5, 0.4, 1, {})])
    'utility'
    """
    if not ranked:
        return None
    if len(ranked) == 1:
        return "one group"
    top, second = ranked[0], ranked[1]
    if top.preference != second.preference:
        return "preference"
    return "utility" if top.utility != second.utility else "order"
