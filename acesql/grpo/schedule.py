"""The generator-weight schedule (the ACE-SQL paper, eq. 8)."""

from __future__ import annotations


def generator_weight(step: int, horizon: float) -> float:
    """`lambda_s = min(1, (step - 1) / horizon)`; steps count from 1. horizon <= 0 means 1.

    >>> [generator_weight(s, 4) for s in (1, 2, 5, 9)]
    [0.0, 0.25, 1.0, 1.0]
    """
    if step < 1:
        raise ValueError(f"steps count from 1, got {step}")
    if horizon <= 0:
        return 1.0
    return min(1.0, (step - 1) / horizon)


def schedule_horizon(total_steps: int, fraction: float = 0.25) -> float:
    """`S_lambda`: the first `fraction` of the run's steps (the paper: 25%)."""
    return fraction * total_steps
