"""The process reward of a Chain-of-CTE trajectory (Reward-SQL, section 6).

    h = step_entropies(token_entropies_per_step)     # H(q_j): mean token entropy of step j
    w = inverse_entropy_weights(h)                   # IH(T<=j)
    r = process_reward(scores, w)                    # R_proc from R_phi(T<=j) and the weights
    composite = r + outcome                          # R_proc + R_out, the seed's GRPO reward

What the paper gives, and what we chose where its text (as we have it) leaves the formula
out, said plainly:

- The entropy of step j is the mean over its tokens of the policy's next-token entropy
  (the paper: the per-token entropy averaged over the step's |q_j| tokens).
- The entropy of the prefix T<=i is the sum of its steps' entropies, normalised by the
  largest prefix entropy of the trajectory: H~_i = H(T<=i) / max_i H(T<=i) (the paper).
- The inverse-entropy weight: ours is IH_i = exp(-H~_i), in [1/e, 1]: larger for a more
  certain prefix, as the paper asks, and bounded, where 1/H~_i would let a near-certain first
  step outweigh the whole rest of the chain. A trajectory whose every step has zero entropy
  gives each prefix weight 1.
- The process reward is the weighted mean of the prefixes' scores,
  R_proc = sum_i IH_i R_phi(T<=i) / sum_i IH_i, so it lies in [0, 1] like the outcome reward
  it is added to (the paper: "an uncertainty-reweighted sum of intermediate trajectory
  correctness").
"""

from __future__ import annotations

import math


def step_entropies(token_entropies: list[list[float]]) -> list[float]:
    """H(q_j) per step: the mean of its tokens' entropies (0 for a step with no token).

    >>> step_entropies([[1.0, 3.0], [0.5], []])
    [2.0, 0.5, 0.0]
    """
    return [sum(step) / len(step) if step else 0.0 for step in token_entropies]


def inverse_entropy_weights(entropies: list[float]) -> list[float]:
    """IH(T<=i) = exp(-H~_i) for each prefix, H~_i its cumulative entropy over the largest.

    >>> [round(w, 4) for w in inverse_entropy_weights([1.0, 1.0, 2.0])]  # H~ = .25, .5, 1
    [0.7788, 0.6065, 0.3679]
    >>> inverse_entropy_weights([0.0, 0.0])
    [1.0, 1.0]
    """
    if any(h < 0 or not math.isfinite(h) for h in entropies):
        raise ValueError(f"entropies must be finite and >= 0, got {entropies}")
    cumulative, total = [], 0.0
    for h in entropies:
        total += h
        cumulative.append(total)
    top = max(cumulative, default=0.0)
    if top == 0:
        return [1.0] * len(entropies)
    return [math.exp(-c / top) for c in cumulative]


def process_reward(scores: list[float], weights: list[float]) -> float:
    """R_proc: the prefixes' scores R_phi(T<=i) averaged with weights IH(T<=i); 0 for a
    trajectory without steps.

    >>> round(process_reward([0.9, 0.5, 0.2], [0.7788, 0.6065, 0.3679]), 4)
    0.6147
    """
    if len(scores) != len(weights):
        raise ValueError(f"{len(scores)} scores but {len(weights)} weights")
    total = sum(weights)
    return sum(s * w for s, w in zip(scores, weights)) / total if total else 0.0
