"""PCGrad for two role gradients, symmetric, with at most one extra gradient copy.

When `g_ret . g_gen < 0`, each gradient is projected onto the normal plane of the other's
*original* gradient and the two projections are summed:

    g_ret' = g_ret - (d / |g_gen|^2) g_gen,   g_gen' = g_gen - (d / |g_ret|^2) g_ret
    g      = g_ret' + g_gen' = (1 - d / |g_ret|^2) g_ret + (1 - d / |g_gen|^2) g_gen

The sum is a linear combination of the two originals with two scalars, so it is written in
place into the tensor that held g_gen; no projected copy is ever made. With `tensor`
granularity (the default, as the authors' released code) d and the norms are taken per
parameter tensor; with `global`, over the whole flattened gradient (the original PCGrad).

Sharded gradients (FSDP: each process holds a slice of every tensor's gradient): every dot
product and squared norm is a sum over slices, so each process computes its partial sums,
one all-reduce of that vector of scalars (`reduce`) makes them global, and each process
projects its own slices with the global coefficients. No process ever holds a full gradient.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

GRANULARITIES = ("tensor", "global")
_TINY = 1e-20


@dataclass
class PcgradStats:
    conflict_ratio: float  # share of tensors (tensor) or 0/1 (global) with a negative dot
    cosine: float  # cosine of the two whole gradients, before projection
    norm_ret: float
    norm_gen: float
    n_conflicts: int
    n_tensors: int


def _dot(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.dot(a.reshape(-1).double(), b.reshape(-1).double()))


def pcgrad_(
    g_ret: Sequence[torch.Tensor | None],
    g_gen: Sequence[torch.Tensor | None],
    granularity: str = "tensor",
    project: bool = True,
    reduce: Callable[[list[float]], list[float]] | None = None,
) -> PcgradStats:
    """Combine in place: `g_gen[i]` becomes the combined gradient; `g_ret` is left as it was.

    A None entry stands for a zero gradient: None in both (a parameter neither role
    reached) is skipped, and a generator gradient with no retriever one already is the
    combined gradient. A retriever gradient with a None generator entry has no tensor to be
    written into, so it raises ValueError instead of being lost: the caller gives such a
    parameter a zero generator gradient first (as `DualRoleUpdate` and `pcgrad` do).
    `project` False is the plain sum (the no-PCGrad ablation), with the same statistics.
    `reduce`, for sharded gradients, sums a list of partial scalars over the processes (every
    process must pass tensors in the same order and with the same None entries).
    """
    if granularity not in GRANULARITIES:
        raise ValueError(f"granularity must be one of {GRANULARITIES}, got {granularity!r}")
    if len(g_ret) != len(g_gen):
        raise ValueError(f"{len(g_ret)} retriever gradients but {len(g_gen)} generator gradients")
    orphans = [i for i, (r, g) in enumerate(zip(g_ret, g_gen)) if r is not None and g is None]
    if orphans:
        raise ValueError(
            f"retriever gradients at positions {orphans[:5]} have no generator gradient to be "
            "combined into (None): give those parameters a zero generator gradient"
        )
    pairs = [(r, g) for r, g in zip(g_ret, g_gen) if r is not None and g is not None]
    # a tensor only the generator touched adds its squared norm without any dot product
    gen_only = [g for r, g in zip(g_ret, g_gen) if r is None and g is not None]
    partial = (
        [_dot(r, g) for r, g in pairs]
        + [_dot(r, r) for r, _ in pairs]
        + [_dot(g, g) for _, g in pairs]
        + [sum(_dot(g, g) for g in gen_only)]
    )
    if reduce is not None:
        partial = reduce(partial)
    n = len(pairs)
    dots, rr, gg = partial[:n], partial[n : 2 * n], partial[2 * n : 3 * n]
    rr_total = sum(rr)
    gg_total = sum(gg) + partial[3 * n]
    dot_total = sum(dots)
    cosine = dot_total / max((rr_total * gg_total) ** 0.5, _TINY)
    if granularity == "global":
        conflicts = [dot_total < 0] * len(pairs)
        coefs = [(dot_total, rr_total, gg_total)] * len(pairs)
    else:
        conflicts = [d < 0 for d in dots]
        coefs = list(zip(dots, rr, gg))
    for (r, g), conflict, (d, r2, g2) in zip(pairs, conflicts, coefs):
        if project and conflict:
            a = 1.0 - d / max(r2, _TINY)  # weight of g_ret
            b = 1.0 - d / max(g2, _TINY)  # weight of g_gen
            g.mul_(b).add_(r, alpha=a)
        else:
            g.add_(r)
    n_conflicts = sum(conflicts) if granularity == "tensor" else int(dot_total < 0)
    n_units = len(pairs) if granularity == "tensor" else 1
    return PcgradStats(
        conflict_ratio=n_conflicts / n_units if n_units and pairs else 0.0,
        cosine=cosine,
        norm_ret=rr_total**0.5,
        norm_gen=gg_total**0.5,
        n_conflicts=n_conflicts,
        n_tensors=len(pairs),
    )


def pcgrad(
    g_ret: Sequence[torch.Tensor | None],
    g_gen: Sequence[torch.Tensor | None],
    granularity: str = "tensor",
) -> tuple[list[torch.Tensor | None], PcgradStats]:
    """PCGrad of two gradient lists -> (combined gradients, stats); the inputs are untouched.

    >>> out, stats = pcgrad([torch.tensor([1.0, 0.0])], [torch.tensor([-1.0, 1.0])])
    >>> out[0].tolist(), stats.conflict_ratio
    ([0.5, 1.5], 1.0)
    """
    combined = [
        None if g is None and r is None else (g.clone() if g is not None else torch.zeros_like(r))
        for r, g in zip(g_ret, g_gen)
    ]
    stats = pcgrad_(g_ret, combined, granularity)
    return combined, stats
