"""Group-relative advantages: rewards normalised within one question's group of one role."""

from __future__ import annotations

import torch


def group_advantages(rewards, eps: float = 1e-6) -> torch.Tensor:
    """`(r - mean) / (std + eps)` over one group (sample standard deviation, as GRPO).

    A group whose rewards are all equal carries no signal and gets zeros.

    >>> [round(a, 4) for a in group_advantages([1.0, 0.0, 0.0, 0.0]).tolist()]  # mean .25, std .5
    [1.5, -0.5, -0.5, -0.5]
    """
    r = torch.as_tensor(rewards, dtype=torch.float32)
    if r.numel() < 2 or torch.all(r == r[0]):
        return torch.zeros_like(r)
    return (r - r.mean()) / (r.std() + eps)
