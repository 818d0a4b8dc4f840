"""Paired comparison of two evaluations on the same questions: is B's gain more than noise?

Two models scored on the same questions are compared question by question, which is far
more sensitive than comparing two accuracies: most questions are solved by both or by
neither and carry no information about the difference.

- the difference `mean(b) - mean(a)` with a 95% percentile-bootstrap interval over questions
  (questions resampled with replacement, the pairs kept together; seeded, so reproducible);
- for right/wrong scores, the exact McNemar test: under "no difference" the questions that
  only one model solves split between the two like fair coin flips, so the two-sided p-value
  is a binomial tail on those discordant questions alone.

    result = paired_difference(a_correct, b_correct)
    result.diff, result.low, result.high, result.p_value
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

BOOTSTRAP_SAMPLES = 10_000


@dataclass(frozen=True)
class PairedResult:
    n: int  # questions scored by both
    mean_a: float
    mean_b: float
    diff: float  # mean_b - mean_a
    low: float  # 95% bootstrap interval of diff
    high: float
    only_a: int | None  # questions A gets right and B wrong (binary scores only)
    only_b: int | None
    p_value: float | None  # exact McNemar, two-sided (binary scores only)


def mcnemar_exact(only_a: int, only_b: int) -> float:
    """Two-sided exact McNemar p-value from the discordant counts.

    >>> mcnemar_exact(0, 5)
    0.0625
    >>> mcnemar_exact(1, 9)
    0.021484375
    >>> mcnemar_exact(3, 3), mcnemar_exact(0, 0)
    (1.0, 1.0)
    """
    n = only_a + only_b
    if n == 0:
        return 1.0
    k = min(only_a, only_b)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return min(1.0, 2 * tail)


def bootstrap_interval(
    diffs: Sequence[float], samples: int = BOOTSTRAP_SAMPLES, seed: int = 0
) -> tuple[float, float]:
    """95% percentile-bootstrap interval of the mean of paired differences.

    >>> bootstrap_interval([1.0] * 10)
    (1.0, 1.0)
    >>> low, high = bootstrap_interval([0.0] * 50 + [1.0] * 50)
    >>> 0.39 < low < 0.42 and 0.58 < high < 0.61
    True
    """
    d = np.asarray(diffs, dtype=float)
    if d.size == 0:
        return (math.nan, math.nan)
    rng = np.random.default_rng(seed)
    means = np.empty(samples)
    for start in range(0, samples, 1000):  # 1000 resamples at a time: bounded memory
        stop = min(samples, start + 1000)
        means[start:stop] = d[rng.integers(0, d.size, (stop - start, d.size))].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return float(low), float(high)


def paired_difference(
    a: Sequence[float | bool], b: Sequence[float | bool], seed: int = 0
) -> PairedResult:
    """B minus A on the same questions (`a[i]` and `b[i]` score question i).

    Scores that are all 0/1 (or bools) also get the McNemar counts and p-value.

    >>> r = paired_difference([0, 0, 1, 1, 0], [1, 1, 1, 0, 1])
    >>> r.n, r.diff, r.only_a, r.only_b, r.p_value
    (5, 0.4, 1, 3, 0.625)
    """
    if len(a) != len(b):
        raise ValueError(f"paired scores need equal lengths, got {len(a)} and {len(b)}")
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    n = int(x.size)
    if n == 0:
        return PairedResult(0, math.nan, math.nan, math.nan, math.nan, math.nan, None, None, None)
    low, high = bootstrap_interval(y - x, seed=seed)
    binary = bool(np.isin(x, (0.0, 1.0)).all() and np.isin(y, (0.0, 1.0)).all())
    only_a = int(((x == 1) & (y == 0)).sum()) if binary else None
    only_b = int(((x == 0) & (y == 1)).sum()) if binary else None
    return PairedResult(
        n=n,
        mean_a=float(x.mean()),
        mean_b=float(y.mean()),
        diff=round(float(y.mean() - x.mean()), 12),
        low=low,
        high=high,
        only_a=only_a,
        only_b=only_b,
        p_value=mcnemar_exact(only_a, only_b) if binary else None,
    )
