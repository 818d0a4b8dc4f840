"""The token-level clipped GRPO surrogate with a KL penalty to a frozen reference.

For each response token t of output i, with ratio `rho = exp(logp - old_logp)`:

    surrogate = min(rho * A_i, clip(rho, 1 - eps, 1 + eps) * A_i)
    kl_k3     = exp(ref_logp - logp) - (ref_logp - logp) - 1      (>= 0, unbiased, low variance)
    loss      = -(surrogate - beta * kl_k3)

averaged over every unmasked token of the batch ("token-mean"): long and short outputs count
per token, not per output.

Where this departs from the paper: its Eq. 7 writes each role's objective as a mean over the
role's N outputs (each output's tokens averaged first, then the outputs). We take the token
mean over all of the role's tokens, as veRL's default `token-mean` aggregation does: one
long output weighs more than one short one, and a batch's loss does not depend on how its
tokens are split into outputs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class LossStats:
    loss: float
    kl: float  # token-mean k3 estimate
    clip_fraction: float  # share of tokens where the clipped branch was taken
    ratio_mean: float
    n_tokens: int


def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token `exp(ref - logp) - (ref - logp) - 1`, the k3 estimator of KL(pi || ref)."""
    delta = ref_logp - logp
    return torch.exp(delta) - delta - 1


def grpo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    ref_logp: torch.Tensor | None = None,
    clip_eps: float = 0.2,
    beta: float = 0.001,
) -> tuple[torch.Tensor, LossStats]:
    """Token-mean clipped surrogate loss of one role's batch.

    logp, old_logp, ref_logp and mask are (batch, len) tensors aligned on response tokens
    (mask True or 1 where a token counts); advantages is (batch,). `ref_logp` None (or
    beta 0) drops the KL term. Returns the scalar loss to back-propagate and its stats.
    """
    mask = mask.to(logp.dtype)
    n_tokens = mask.sum()
    adv = advantages.to(logp.dtype)[:, None]
    ratio = torch.exp(logp - old_logp)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1 - clip_eps, 1 + clip_eps) * adv
    per_token = -torch.min(unclipped, clipped)
    kl = torch.zeros_like(logp)
    if ref_logp is not None and beta:
        kl = k3_kl(logp, ref_logp)
        per_token = per_token + beta * kl
    denom = n_tokens.clamp(min=1)
    loss = (per_token * mask).sum() / denom
    with torch.no_grad():
        took_clip = (clipped < unclipped).to(logp.dtype)
        stats = LossStats(
            loss=float(loss.detach()),
            kl=float((kl * mask).sum() / denom),
            clip_fraction=float((took_clip * mask).sum() / denom),
            ratio_mean=float((ratio * mask).sum() / denom),
            n_tokens=int(n_tokens),
        )
    return loss, stats
