"""Execution match between a predicted and a gold result, in three modes.

- `multiset`: rows as a bag, floats rounded to 6 digits, column order kept. The RL reward.
- `bird`: rows as a set, values compared as they are. The official BIRD metric.
- `spider`: rows as a bag, as a list when the gold query has an outer ORDER BY, and any
  permutation of the predicted columns may line up with the gold ones. The Spider
  test-suite rule.

A gold query that fails, times out or was truncated makes the example unusable: it is
never a match, and `usable` is False so that it leaves the denominator.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass

from acesql.errors import ConfigError
from acesql.sql.sandbox import ExecResult

FLOAT_DIGITS = 6
MAX_PERMUTATIONS = 20_000  # column permutations tried in spider mode before giving up


@dataclass(frozen=True)
class MatchResult:
    match: bool
    reason: str  # "match", or why not: "gold_error", "pred_timeout", "different_rows", ...
    usable: bool = True  # False when the gold result cannot serve as a reference
    gold_empty: bool = False  # empty gold results give false-positive rewards: flag them

    def to_dict(self) -> dict:
        return asdict(self)


def execution_match(
    pred: ExecResult, gold: ExecResult, mode: str = "multiset", *, ordered: bool = False
) -> MatchResult:
    """Compare two execution results under `mode`.

    `ordered` matters in spider mode only: whether the gold query has an outer ORDER BY
    (`acesql.sql.columns.has_order_by`).

    >>> a = ExecResult(ok=True, columns=["x"], rows=[(1,), (2,)])
    >>> b = ExecResult(ok=True, columns=["y"], rows=[(2,), (1.0,)])
    >>> execution_match(b, a).match, execution_match(b, a, "spider", ordered=True).match
    (True, False)
    """
    equal = MATCH_MODES.get(mode)
    if equal is None:
        raise ConfigError(f"unknown match mode {mode!r}; choose one of {sorted(MATCH_MODES)}")
    if not gold.ok:
        reason = "gold_timeout" if gold.timed_out else "gold_error"
        return MatchResult(False, reason, usable=False)
    if gold.truncated:
        return MatchResult(False, "gold_truncated", usable=False)
    gold_empty = not gold.rows
    if not pred.ok:
        reason = "pred_timeout" if pred.timed_out else "pred_error"
        return MatchResult(False, reason, gold_empty=gold_empty)
    if pred.truncated:
        return MatchResult(False, "pred_truncated", gold_empty=gold_empty)
    reason = equal(pred.rows, gold.rows, ordered)
    return MatchResult(reason is None, reason or "match", gold_empty=gold_empty)


def _normalize(value):
    if isinstance(value, float):
        value = round(value, FLOAT_DIGITS)
        return 0.0 if value == 0 else value
    return value


def _multiset_difference(pred: list[tuple], gold: list[tuple], ordered: bool) -> str | None:
    if len(pred) != len(gold):
        return "different_row_count"
    bag = lambda rows: Counter(tuple(_normalize(v) for v in row) for row in rows)  # noqa: E731
    return None if bag(pred) == bag(gold) else "different_rows"


def _set_difference(pred: list[tuple], gold: list[tuple], ordered: bool) -> str | None:
    return None if set(pred) == set(gold) else "different_rows"


def _spider_difference(pred: list[tuple], gold: list[tuple], ordered: bool) -> str | None:
    if not pred and not gold:
        return None
    if len(pred) != len(gold):
        return "different_row_count"
    width = len(gold[0])
    if len(pred[0]) != width:
        return "different_columns"
    gold_sets = [{row[i] for row in gold} for i in range(width)]
    pred_sets = [{row[j] for row in pred} for j in range(width)]
    candidates = [[j for j in range(width) if pred_sets[j] == gold_sets[i]] for i in range(width)]
    if any(not c for c in candidates):
        return "different_rows"
    gold_bag = gold if ordered else Counter(gold)
    for perm in _permutations(candidates, MAX_PERMUTATIONS):
        permuted = [tuple(row[j] for j in perm) for row in pred]
        if (permuted if ordered else Counter(permuted)) == gold_bag:
            return None
    return "different_order" if ordered and Counter(pred) == Counter(gold) else "different_rows"


def _permutations(candidates: list[list[int]], limit: int):
    """Assignments gold column i -> distinct pred column, each drawn from candidates[i]."""
    chosen: list[int] = []
    used: set[int] = set()
    count = 0

    def walk(i):
        nonlocal count
        if count >= limit:
            return
        if i == len(candidates):
            count += 1
            yield tuple(chosen)
            return
        for j in candidates[i]:
            if j not in used:
                used.add(j)
                chosen.append(j)
                yield from walk(i + 1)
                chosen.pop()
                used.discard(j)

    yield from walk(0)


# mode -> (pred rows, gold rows, ordered) -> None when equal, else the reason they differ
MATCH_MODES: dict[str, Callable[[list, list, bool], str | None]] = {
    "multiset": _multiset_difference,
    "bird": _set_difference,
    "spider": _spider_difference,
}
