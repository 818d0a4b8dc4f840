"""Rewards of agent trajectories: the binary default and three variants, as pure functions.

- `binary`: 1 when the submission passes the task's test (BIRD-RL's default reward).
- `partial_correctness`: for a query, the F1 between the bags of rows the submission and
  the solution return (1 for a pass, 0 for an error); BIRD-RL's ablation (d) rewards partial
  correctness. Tasks judged on the state have no partial score here: binary.
- `column_set_match`: the Column-Set Matching Reward of Agentic-SQL, a dense score in [0, 1]
  for any executed query: the share of the expected result's columns (each taken as the bag
  of its values) that some column of the query's result reproduces. Order and names of the
  columns do not matter; rows must agree value for value within a column.
- `aggregated_trajectory_reward`: Agentic-SQL's Aggregated Trajectory Reward, read from its
  abstract (the paper's matrix is not public here): the final reward plus the step scores'
  changes weighted asymmetrically, a rise by `up` and a fall by `down` > `up`, averaged over
  the steps. A trajectory that improves and holds earns more than one that wavers to the same
  end, and no cycle of ups and downs earns anything (with down > up, every cycle costs).

    ATR = final + weight * (1 / T) * sum_t g(s_t - s_{t-1}),  s_0 = 0,
    g(x) = up * x if x > 0 else down * x
"""

from __future__ import annotations

from collections import Counter

from acesql.sql.matching import FLOAT_DIGITS
from acesql.sql.sandbox import ExecResult


def binary(passed: bool) -> float:
    return 1.0 if passed else 0.0


def partial_correctness(got: ExecResult | None, expected: ExecResult | None) -> float:
    """F1 of the row bags (floats to 6 digits); 0 when either side failed.

    >>> a = ExecResult(ok=True, rows=[(1,), (2,), (3,)])
    >>> b = ExecResult(ok=True, rows=[(2,), (3,), (4,), (5,)])
    >>> round(partial_correctness(a, b), 4)  # 2 shared rows: P 2/3, R 2/4
    0.5714
    """
    if got is None or expected is None or not got.ok or not expected.ok:
        return 0.0
    a, b = _bag(got.rows), _bag(expected.rows)
    if not a and not b:
        return 1.0
    shared = sum((a & b).values())
    if shared == 0:
        return 0.0
    precision, recall = shared / sum(a.values()), shared / sum(b.values())
    return 2 * precision * recall / (precision + recall)


def column_set_match(got: ExecResult | None, expected: ExecResult | None) -> float:
    """The share of `expected`'s columns that some column of `got` reproduces.

    >>> exp = ExecResult(ok=True, columns=["n", "c"], rows=[("a", 1), ("b", 2)])
    >>> column_set_match(ExecResult(ok=True, columns=["x"], rows=[(2,), (1,)]), exp)
    0.5
    >>> column_set_match(ExecResult(ok=True, columns=["c", "n"], rows=[(1, "a"), (2, "b")]), exp)
    1.0
    """
    if got is None or expected is None or not got.ok or not expected.ok or not expected.columns:
        return 0.0
    have = [_bag(col) for col in _columns(got)]
    want = [_bag(col) for col in _columns(expected)]
    matched, used = 0, set()
    for column in want:
        hit = next((i for i, c in enumerate(have) if i not in used and c == column), None)
        if hit is not None:
            used.add(hit)
            matched += 1
    return matched / len(want)


def aggregated_trajectory_reward(
    step_scores: list[float], final: float, weight: float = 0.5, up: float = 1.0, down: float = 2.0
) -> float:
    """ATR of a trajectory whose steps scored `step_scores` (see the module doc).

    >>> aggregated_trajectory_reward([0.5, 1.0], 1.0)  # rises 0.5 and 0.5: 1 + 0.5 * 0.5
    1.25
    >>> aggregated_trajectory_reward([1.0, 0.0, 1.0], 1.0)  # +1, -2, +1 over 3 steps: 1 + 0
    1.0
    """
    if not step_scores:
        return final
    total, previous = 0.0, 0.0
    for score in step_scores:
        change = score - previous
        total += up * change if change > 0 else down * change
        previous = score
    return final + weight * total / len(step_scores)


def _bag(values) -> Counter:
    return Counter(_normal(v) for v in values)


def _normal(value):
    if isinstance(value, tuple):
        return tuple(_normal(v) for v in value)
    return round(value, FLOAT_DIGITS) if isinstance(value, float) else value


def _columns(result: ExecResult) -> list[list]:
    width = len(result.columns)
    return [[row[i] for row in result.rows] for i in range(width)]
