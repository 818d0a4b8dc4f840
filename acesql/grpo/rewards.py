"""Rewards of the two roles (the ACE-SQL paper, section 3.3.2 and appendix 11).

Both roles earn `1 - length_penalty` when they succeed and 0 otherwise: an unmatched output
gets nothing whatever its length, so a short wrong answer is never worth more than a long one.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

ROLES = ("retriever", "generator")


def length_penalty(
    n_tokens: int, low: int = 512, high: int = 2048, max_penalty: float = 0.5
) -> float:
    """`max_penalty * clip((n_tokens - low) / (high - low), 0, 1)`.

    >>> length_penalty(512), length_penalty(1280), length_penalty(4096)
    (0.0, 0.25, 0.5)
    """
    if high <= low:
        raise ValueError(f"length penalty bounds need low < high, got {low} and {high}")
    return max_penalty * min(1.0, max(0.0, (n_tokens - low) / (high - low)))


def generator_reward(matched: bool, n_tokens: int, **penalty) -> float:
    """`1 - p(o)` when the SQL's execution matches the gold's, else 0."""
    return 1.0 - length_penalty(n_tokens, **penalty) if matched else 0.0


def retriever_reward(
    columns: Collection[str] | None, targets: Iterable[Collection[str]], n_tokens: int, **penalty
) -> float:
    """Sparse reward: `1 - p(o)` when the column set equals one of the targets, else 0.

    `columns` is None for an output that did not parse; it earns 0. With the empirical
    target the targets are the pool's maximal sets; with the gold target, the gold set alone.
    """
    if columns is None:
        return 0.0
    chosen = frozenset(columns)
    if any(chosen == frozenset(t) for t in targets):
        return 1.0 - length_penalty(n_tokens, **penalty)
    return 0.0


def dense_retriever_reward(
    columns: Collection[str] | None, support: Iterable[Collection[str]], noise_weight: float = 0.5
) -> float:
    """Dense variant: best coverage of a pool set minus `noise_weight` x the noise share.

    coverage = max over pool sets S of |C & S| / |S|; noise = |C - U| / |C| with U the union
    of the pool's sets (the ACE-SQL paper, appendix 11). An empty or unparsed selection earns 0; so
    does every selection while the pool is empty.
    """
    support = [frozenset(s) for s in support if s]
    if not columns or not support:
        return 0.0
    chosen = frozenset(columns)
    coverage = max(len(chosen & s) / len(s) for s in support)
    union = frozenset().union(*support)
    noise = len(chosen - union) / len(chosen)
    return coverage - noise_weight * noise
