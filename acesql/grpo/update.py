"""The dual-role update: two losses, two backward passes, PCGrad, one optimizer step.

    update = DualRoleUpdate(model, optimizer, scheduler, ref_model, clip_eps=0.2, beta=0.001)
    stats = update({"retriever": [ScoredSequence(...), ...], "generator": [...]}, lam=0.5)

1. the retriever's token-mean loss is back-propagated; its gradient is copied into a buffer
   (allocated once, reused every step: the only extra gradient copy);
2. lambda x the generator's loss is back-propagated into the now-zeroed `.grad`;
3. PCGrad combines the two in place in `.grad` (`acesql.grpo.pcgrad.pcgrad_`);
4. the global grad norm is clipped and the optimizer steps once.

Old-policy log-probs are the current ones, detached: one update per rollout (see the
trainer's doc). With lambda 0 the generator's backward pass is skipped: its gradient is zero.

Across processes (`dist`), each holds its own questions' sequences. Each role's loss is the
token mean over *all* processes' tokens (each process weights its pieces by its tokens over
the global count), and gradients are summed: replicated (`sharding: none`) by an all-reduce
after each role's backward pass, so PCGrad sees the global gradients; sharded (FSDP) by FSDP's
reduce-scatter, with PCGrad on the local slices and one all-reduce of its scalars. Under FSDP
every process runs the same number of forward/backward pieces (padding with zero-weight
ones), as FSDP's collectives require. The step equals the one-process step on all the
sequences, to float tolerance.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch

from acesql.distributed import SINGLE, Dist
from acesql.grpo.loss import grpo_loss
from acesql.grpo.pcgrad import pcgrad_
from acesql.models.base_model import load_policy, load_tokenizer
from acesql.models.freezing import train_top_layers
from acesql.models.logits import shared_prompt_logprobs, token_logprobs
from acesql.models.precision import bf16_autocast_enabled

BUCKET = 1 << 24  # numbers per gradient all-reduce (64 MiB of fp32)


@dataclass
class ScoredSequence:
    """One sampled output, ready to be scored: prompt ids + completion ids and its advantage."""

    prompt_ids: list[int]
    completion_ids: list[int]
    advantage: float


class DualRoleUpdate:
    def __init__(
        self,
        model,
        optimizer,
        scheduler=None,
        ref_model=None,
        *,
        clip_eps: float = 0.2,
        beta: float = 0.001,
        grad_clip: float = 1.0,
        pcgrad: bool = True,
        granularity: str = "tensor",
        micro_batch_size: int = 8,
        pad_id: int = 0,
        bf16_autocast: bool | str = True,
        share_prompts: bool = True,
        dist: Dist = SINGLE,
    ):
        self.model, self.optimizer, self.scheduler, self.ref = (
            model,
            optimizer,
            scheduler,
            ref_model,
        )
        self.clip_eps, self.beta, self.grad_clip = clip_eps, beta, grad_clip
        self.pcgrad, self.granularity = pcgrad, granularity
        self.micro_batch_size, self.pad_id = micro_batch_size, pad_id
        self.share_prompts = share_prompts
        self.dist = dist
        self.device = next(model.parameters()).device
        self.autocast = torch.autocast(
            self.device.type,
            dtype=torch.bfloat16,
            enabled=bf16_autocast_enabled(bf16_autocast, self.device),
        )
        self.params = [p for p in model.parameters() if p.requires_grad]
        self._ret_grads: list[torch.Tensor | None] = [None] * len(self.params)

    def __call__(self, seqs: dict[str, list[ScoredSequence]], lam: float) -> dict:
        params = self.params
        self.optimizer.zero_grad(set_to_none=True)
        ret = self.backward(seqs["retriever"], 1.0)
        g_ret: list[torch.Tensor | None] = [None] * len(params)
        if ret["tokens"]:
            for i, p in enumerate(params):
                if p.grad is None:
                    continue
                grad = _local(p.grad)
                if self._ret_grads[i] is None:  # allocated once, reused every step
                    self._ret_grads[i] = torch.empty_like(grad)
                self._ret_grads[i].copy_(grad)
                p.grad.zero_()
                g_ret[i] = self._ret_grads[i]
        gen = {"loss": 0.0, "kl": 0.0, "clip_fraction": 0.0, "tokens": 0}
        if lam > 0:
            gen = self.backward(seqs["generator"], lam)
        for p, r in zip(params, g_ret):  # a parameter only the retriever reached needs a .grad
            if p.grad is None and r is not None:
                p.grad = torch.zeros_like(p)
        stats = pcgrad_(
            g_ret,
            [None if p.grad is None else _local(p.grad) for p in params],
            granularity=self.granularity,
            project=self.pcgrad,
            reduce=self.dist.sum if self.dist.sharded else None,
        )
        stepped = any(p.grad is not None for p in params)
        grad_norm = 0.0
        if stepped:
            grad_norm = _scalar(torch.nn.utils.clip_grad_norm_(params, self.grad_clip))
            self.optimizer.step()
        if self.scheduler is not None:
            with warnings.catch_warnings():  # a step without an update still moves the schedule
                warnings.simplefilter("ignore", UserWarning)
                self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return {
            "retriever/loss": ret["loss"],
            "generator/loss": gen["loss"],
            "retriever/kl": ret["kl"],
            "generator/kl": gen["kl"],
            "kl": _mix(ret, gen, "kl"),
            "clip_fraction": _mix(ret, gen, "clip_fraction"),
            "retriever/grad_norm": stats.norm_ret,
            "generator/grad_norm": stats.norm_gen,  # of lambda * g_gen, as combined
            "grad_cosine": stats.cosine,
            "conflict_ratio": stats.conflict_ratio,
            "grad_norm": grad_norm,
            "updated": float(stepped),
            "retriever/update_tokens": ret["tokens"],
            "generator/update_tokens": gen["tokens"],
        }

    def single_role(self, seqs: list[ScoredSequence]) -> dict:
        """One optimizer step on one role's sequences (no second role, no PCGrad): the
        agent's update."""
        self.optimizer.zero_grad(set_to_none=True)
        stats = self.backward(seqs, 1.0)
        stepped = any(p.grad is not None for p in self.params)
        grad_norm = 0.0
        if stepped:
            grad_norm = _scalar(torch.nn.utils.clip_grad_norm_(self.params, self.grad_clip))
            self.optimizer.step()
        if self.scheduler is not None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return {
            "loss": stats["loss"],
            "kl": stats["kl"],
            "clip_fraction": stats["clip_fraction"],
            "grad_norm": grad_norm,
            "updated": float(stepped),
            "update_tokens": stats["tokens"],
        }

    def backward(self, seqs: list[ScoredSequence], weight: float) -> dict:
        """Back-propagate `weight` x the role's token-mean loss, piece by piece.

        With `share_prompts`, the outputs of one prompt are scored together on top of a
        single pass over the prompt (`shared_prompt_logprobs`): a group of N retriever
        outputs costs one schema-length forward and backward instead of N. Otherwise,
        sequences are right-padded into micro-batches of `micro_batch_size`. Across processes
        the mean is over every process's tokens and the returned numbers are global.
        """
        dist = self.dist
        local = sum(len(s.completion_ids) for s in seqs)
        chunks = self._chunks(seqs)
        total, n_pieces = local, len(chunks)
        if dist.enabled:
            total = int(dist.sum([local])[0])
            if dist.sharded:  # FSDP needs the same number of passes on every process
                n_pieces = int(dist.all_reduce_(torch.tensor([len(chunks)]), "max").item())
        out = {"loss": 0.0, "kl": 0.0, "clip_fraction": 0.0, "tokens": total}
        if not total:
            return out
        # FSDP averages gradients over processes: scaled by their number, they are sums
        scale = weight * (dist.world_size if dist.sharded else 1)
        padding = [[ScoredSequence([self.pad_id], [self.pad_id], 0.0)]] * (n_pieces - len(chunks))
        for k, chunk in enumerate(chunks + padding):
            adv = torch.tensor([s.advantage for s in chunk], device=self.device)
            with self.autocast:
                logp, mask = self._logprobs(self.model, chunk)
                ref = None
                if self.ref is not None and self.beta > 0:
                    with torch.no_grad():
                        ref, _ = self._logprobs(self.ref, chunk)
            loss, st = grpo_loss(
                logp, logp.detach(), adv, mask, ref, clip_eps=self.clip_eps, beta=self.beta
            )
            share = st.n_tokens / total if k < len(chunks) else 0.0
            (loss * share * scale).backward()
            out["loss"] += st.loss * share
            out["kl"] += st.kl * share
            out["clip_fraction"] += st.clip_fraction * share
        if dist.enabled:
            out["loss"], out["kl"], out["clip_fraction"] = dist.sum(
                [out["loss"], out["kl"], out["clip_fraction"]]
            )
            if not dist.sharded:
                self._sum_gradients()
        return out

    def _sum_gradients(self) -> None:
        """Replicated training: every process's `.grad` becomes the sum over processes; a
        parameter no process reached keeps None (as in one process: AdamW skips it)."""
        reached = torch.tensor([p.grad is not None for p in self.params], dtype=torch.int32)
        self.dist.all_reduce_(reached, "max")
        grads = []
        for p, any_rank in zip(self.params, reached.tolist()):
            if any_rank and p.grad is None:
                p.grad = torch.zeros_like(p)
            if any_rank:
                grads.append(p.grad)
        bucket: list[torch.Tensor] = []
        for g in grads + [None]:  # a few collectives of <= BUCKET numbers, not one per tensor
            if bucket and (g is None or sum(b.numel() for b in bucket) + g.numel() > BUCKET):
                flat = self.dist.all_reduce_(torch.cat([b.reshape(-1) for b in bucket]))
                offset = 0
                for b in bucket:
                    b.copy_(flat[offset : offset + b.numel()].view_as(b))
                    offset += b.numel()
                bucket = []
            if g is not None:
                bucket.append(g)

    def _chunks(self, seqs: list[ScoredSequence]) -> list[list[ScoredSequence]]:
        mb = self.micro_batch_size
        if self.share_prompts:
            groups: dict[tuple[int, ...], list[ScoredSequence]] = {}
            for s in seqs:
                groups.setdefault(tuple(s.prompt_ids), []).append(s)
            return [g[i : i + mb] for g in groups.values() for i in range(0, len(g), mb)]
        order = sorted(seqs, key=lambda s: len(s.prompt_ids) + len(s.completion_ids))
        return [order[i : i + mb] for i in range(0, len(order), mb)]

    def _logprobs(self, model, chunk: list[ScoredSequence]) -> tuple[torch.Tensor, torch.Tensor]:
        """(logprobs, mask) over the completions of `chunk`, (rows, longest completion)."""
        if self.share_prompts:
            return shared_prompt_logprobs(
                model, chunk[0].prompt_ids, [s.completion_ids for s in chunk], self.device
            )
        ids, attn, mask = collate(chunk, self.pad_id, self.device)
        logp = token_logprobs(model, ids, attn, mask)
        # keep each row's completion positions only, left-aligned like the shared path
        width = max(len(s.completion_ids) for s in chunk)
        out = torch.zeros((len(chunk), width), dtype=logp.dtype, device=logp.device)
        cmask = torch.zeros((len(chunk), width), dtype=torch.bool, device=logp.device)
        for row, s in enumerate(chunk):
            p, c = len(s.prompt_ids), len(s.completion_ids)
            out[row, :c] = logp[row, p : p + c]
            cmask[row, :c] = True
        return out, cmask


def single_role_training(model_dir, cfg, device, *, micro_batch_size: int, share_prompts: bool):
    """(tokenizer, policy, reference, optimizer, update) of a one-role RL stage: the policy in
    fp32 with its top `cfg.train_layers` blocks trainable, a frozen reference when
    `cfg.beta > 0`, AdamW at `cfg.learning_rate`, and the clipped update with the k3 KL.
    `cfg` has learning_rate, clip_eps, beta, grad_clip, train_layers and bf16_autocast (the
    agent's and the ranker's sections)."""

    tokenizer = load_tokenizer(model_dir)
    model, ref = load_policy(model_dir, str(device), cfg.beta > 0)
    optimizer = torch.optim.AdamW(train_top_layers(model, cfg.train_layers), lr=cfg.learning_rate)
    update = DualRoleUpdate(
        model,
        optimizer,
        None,
        ref,
        clip_eps=cfg.clip_eps,
        beta=cfg.beta,
        grad_clip=cfg.grad_clip,
        micro_batch_size=micro_batch_size,
        pad_id=tokenizer.pad_token_id or 0,
        bf16_autocast=cfg.bf16_autocast,
        share_prompts=share_prompts,
    )
    return tokenizer, model, ref, optimizer, update


def _local(grad: torch.Tensor) -> torch.Tensor:
    """This process's slice of a sharded (DTensor) gradient; a plain tensor as it is."""
    return grad.to_local() if hasattr(grad, "to_local") else grad


def _scalar(value) -> float:
    """A norm as a float, gathered first when it is a sharded (DTensor) value."""
    return float(value.full_tensor() if hasattr(value, "full_tensor") else value)


def _mix(a: dict, b: dict, key: str) -> float:
    n = a["tokens"] + b["tokens"]
    return (a[key] * a["tokens"] + b[key] * b["tokens"]) / n if n else 0.0


def collate(seqs: list[ScoredSequence], pad_id: int, device) -> tuple[torch.Tensor, ...]:
    """(input_ids, attention_mask, completion mask), right-padded."""
    width = max(len(s.prompt_ids) + len(s.completion_ids) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    attn = torch.zeros((len(seqs), width), dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.bool)
    for row, s in enumerate(seqs):
        p, c = len(s.prompt_ids), len(s.completion_ids)
        ids[row, : p + c] = torch.tensor(s.prompt_ids + s.completion_ids)
        attn[row, : p + c] = 1
        mask[row, p : p + c] = True
    return ids.to(device), attn.to(device), mask.to(device)
