"""What each auditor threshold would have cost and given, read from one r3 evaluation with
resampling, without running the model again.

    table = audit_sweep(rows)            # rows of `acesql eval --selection r3 --resample`
    print(sweep_table(table))
    pick = chosen_threshold(table)       # the cheapest, unless a dearer one is shown to pay

A run at `audit_threshold` T keeps, per question, the auditor's P (`r3rs_audit`), the ranking
without resampling (`r3_*`) and, where the auditor fired (P < T), the ranking after it
(`r3rs_*`). At any threshold t up to the smallest P of a question it did not fire on, the
outcome is known exactly: a question with P < t fires and answers with its resampled ranking,
the others keep the first. So run once where the auditor fires on (nearly) every pool, on a
split that is not the one you report, and choose t here. Higher thresholds are left out, as
the rows cannot tell them, and so are those above the first that fires on every pool.
"""

from __future__ import annotations

from dataclasses import dataclass

from acesql.paired import PairedResult, paired_difference

GRID = tuple(round(0.05 * i, 2) for i in range(1, 20))


@dataclass(frozen=True)
class SweepPoint:
    threshold: float
    fired: float  # share of the questions where the auditor fires
    candidates: float  # generated per question
    ex: float  # r3 with resampling at this threshold
    recall: float  # a correct SQL in the pool ranked
    gain: PairedResult  # against r3 without resampling, on the same questions
    answers: tuple[bool, ...]  # per question, right at this threshold


def audit_sweep(rows: list[dict], thresholds: tuple[float, ...] = GRID) -> list[SweepPoint]:
    """One point per threshold the rows can tell (see the module doc); [] when no row was
    ranked with resampling.

    >>> rows = [
    ...     {"r3rs_audit": 0.1, "r3rs_fired": True, "r3_match": False, "r3rs_match": True,
    ...      "oracle_match": False, "r3rs_oracle": True, "candidates": 8, "r3rs_generated": 24},
    ...     {"r3rs_audit": 0.4, "r3rs_fired": False, "r3_match": True, "r3rs_match": True,
    ...      "oracle_match": True, "r3rs_oracle": True, "candidates": 8, "r3rs_generated": 8},
    ... ]
    >>> [(p.threshold, p.fired, p.candidates, p.ex) for p in audit_sweep(rows, (0.05, 0.2, 0.5))]
    [(0.05, 0.0, 8.0, 0.5), (0.2, 0.5, 16.0, 1.0)]
    """
    ranked = [r for r in rows if r.get("r3rs_audit") is not None]
    if not ranked:
        return []
    unfired = [r["r3rs_audit"] for r in ranked if not r["r3rs_fired"]]
    ceiling = min(unfired) if unfired else 1.0
    first = [bool(r["r3_match"]) for r in ranked]
    points = []
    for t in thresholds:
        if t > ceiling:
            continue
        fires = [r["r3rs_audit"] < t for r in ranked]
        ex = [bool(r["r3rs_match"] if f else r["r3_match"]) for r, f in zip(ranked, fires)]
        recall = [bool(r["r3rs_oracle"] if f else r["oracle_match"]) for r, f in zip(ranked, fires)]
        spent = [r["r3rs_generated"] if f else r["candidates"] for r, f in zip(ranked, fires)]
        n = len(ranked)
        points.append(
            SweepPoint(
                t,
                sum(fires) / n,
                sum(spent) / n,
                sum(ex) / n,
                sum(recall) / n,
                paired_difference(first, ex),
                tuple(ex),
            )
        )
        if all(fires):  # every higher threshold fires on every pool too
            break
    return points


def chosen_threshold(points: list[SweepPoint]) -> SweepPoint | None:
    """The threshold to set: the lowest of the sweep (the fewest candidates), raised to a
    higher one only where that one's paired gain over the current choice has a 95% interval
    above zero. A highest-EX pick would chase single questions. None for an empty sweep.

    Choose it on a split you do not report: on the reported one it is tuned to its noise. If
    even the choice's `gain` over no resampling has an interval reaching zero, resampling did
    not pay on these questions at any threshold.

    >>> first = [False] * 30 + [True] * 10
    >>> def point(t, cand, right):
    ...     ex = [i < right or i >= 30 for i in range(40)]
    ...     return SweepPoint(t, 0.0, cand, sum(ex) / 40, 0.0, paired_difference(first, ex),
    ...                       tuple(ex))
    >>> chosen_threshold([point(0.1, 10, 0), point(0.3, 14, 1), point(0.5, 24, 8)]).threshold
    0.5
    >>> chosen_threshold([point(0.1, 10, 0), point(0.3, 14, 1)]).threshold  # one question: noise
    0.1
    """
    if not points:
        return None
    choice = points[0]
    for point in points[1:]:
        if paired_difference(list(choice.answers), list(point.answers)).low > 0:
            choice = point
    return choice


def sweep_table(points: list[SweepPoint]) -> str:
    """The sweep as aligned text: one line per threshold."""
    lines = [
        f"{'threshold':>9} {'fired':>6} {'cand/q':>6} {'EX':>6} {'recall':>6}  "
        "vs no resampling [95%]  only-before/only-after"
    ]
    for p in points:
        g = p.gain
        lines.append(
            f"{p.threshold:>9.2f} {p.fired:>6.1%} {p.candidates:>6.1f} {p.ex:>6.1%} "
            f"{p.recall:>6.1%}  {100 * g.diff:+.1f} [{100 * g.low:+.1f}, {100 * g.high:+.1f}]"
            f"  {g.only_a}/{g.only_b}"
        )
    return "\n".join(lines)
