"""Training past one process: torch.distributed set-up, the collectives the trainers use, and
failures that say what happened instead of hanging.

    dist = init_from_env(DistributedSection(...))   # under torchrun / accelerate launch
    mine = dist.shard(questions)                      # this rank's contiguous block
    sets = dist.gather_objects(local_sets)            # every rank's, in rank order
    dist.all_reduce_(tensor)                          # summed over ranks, in place

A stage started by `torchrun` or `accelerate launch` finds `RANK`, `WORLD_SIZE`,
`LOCAL_RANK` and `MASTER_ADDR`/`MASTER_PORT` in its environment; a stage started plainly gets
`SINGLE` (one process, every collective the identity), so the trainers have one code path.

Every collective runs under the process group's timeout (`timeout_s`): a rank that died or
hangs makes the others fail with `DistributedError` naming the operation, not wait forever.
The backend is gloo on CPU and nccl on CUDA unless set; the transport is torch's own.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

import torch

from acesql.errors import DistributedError

SHARDING = ("none", "fsdp")
LAUNCH_ENV = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


@dataclass(frozen=True)
class Dist:
    """This process's place in the job; `SINGLE` when there is no job."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    sharding: str = "none"  # "fsdp": parameters and gradients are split across ranks
    timeout_s: float = 600.0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def sharded(self) -> bool:
        return self.enabled and self.sharding == "fsdp"

    def shard(self, items: Sequence) -> list:
        """This rank's contiguous block of `items`; the blocks in rank order are `items`.

        >>> [Dist(rank=r, world_size=2).shard([1, 2, 3]) for r in (0, 1)]
        [[1, 2], [3]]
        """
        n, w = len(items), self.world_size
        start = self.rank * (n // w) + min(self.rank, n % w)
        size = n // w + (1 if self.rank < n % w else 0)
        return list(items[start : start + size])

    def all_reduce_(self, tensor: torch.Tensor, op: str = "sum") -> torch.Tensor:
        """Sum (or max) `tensor` over ranks in place; returns it."""
        if self.enabled:
            ops = {"sum": torch.distributed.ReduceOp.SUM, "max": torch.distributed.ReduceOp.MAX}
            self._run(f"all_reduce({op})", torch.distributed.all_reduce, tensor, op=ops[op])
        return tensor

    def sum(self, values: Sequence[float]) -> list[float]:
        """Each of `values` summed over ranks, in one collective (float64)."""
        if not self.enabled:
            return [float(v) for v in values]
        t = torch.tensor([float(v) for v in values], dtype=torch.float64, device=self.device)
        return self.all_reduce_(t).tolist()

    def any(self, flag: bool) -> bool:
        """Whether `flag` is true on any rank: one rank's decision to stop stops them all."""
        if not self.enabled:
            return flag
        t = torch.tensor([int(flag)], device=self.device)
        return bool(self.all_reduce_(t, "max").item())

    def gather_objects(self, obj) -> list:
        """Every rank's `obj` (picklable), in rank order, on every rank."""
        if not self.enabled:
            return [obj]
        out: list = [None] * self.world_size
        self._run("all_gather_object", torch.distributed.all_gather_object, out, obj)
        return out

    def broadcast_object(self, obj):
        """Rank 0's `obj` on every rank."""
        if not self.enabled:
            return obj
        box = [obj]
        self._run("broadcast_object_list", torch.distributed.broadcast_object_list, box, src=0)
        return box[0]

    def barrier(self) -> None:
        if self.enabled:
            self._run("barrier", torch.distributed.barrier)

    @property
    def device(self) -> torch.device:
        if self.enabled and torch.distributed.get_backend() == "nccl":
            return torch.device("cuda", self.local_rank)
        return torch.device("cpu")

    def _run(self, name: str, fn, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (RuntimeError, ValueError) as err:  # gloo / nccl report peers lost this way
            raise DistributedError(
                f"rank {self.rank} of {self.world_size}: {name} failed: another process "
                f"stopped or did not answer within {self.timeout_s:.0f} s (its log says why): "
                f"{str(err).splitlines()[0] if str(err) else type(err).__name__}"
            ) from err


SINGLE = Dist()


def launched() -> bool:
    """Whether this process was started by a launcher (torchrun, accelerate launch)."""
    return all(k in os.environ for k in LAUNCH_ENV) and int(os.environ["WORLD_SIZE"]) > 1


def process_rank() -> int:
    """This process's rank as the launcher set it (0 when there is no launcher)."""
    return int(os.environ.get("RANK", 0)) if launched() else 0


def launch_command(
    stage: str, argv: Sequence[str], settings, fsdp_config: str | None = None
) -> list[str] | None:
    """The `torchrun` command running stage `stage` with `settings`' processes (a
    `DistributedSection`), or None when one process is asked for or this is already a rank.
    A stage that shards through accelerate (sft) passes its FSDP config: with `sharding: fsdp`
    the command is then `accelerate launch` with that config.

    >>> from acesql.config import DistributedSection
    >>> launch_command("grpo", [], DistributedSection(processes=2))[3:]
    ['--nproc_per_node=2', '--nnodes=1', '--standalone', '-m', 'acesql.stages.grpo']
    """
    per_node = settings.processes or max(torch.cuda.device_count(), 1)
    if per_node * settings.nodes == 1 or launched():
        return None
    if settings.sharding == "fsdp" and fsdp_config:
        cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", fsdp_config]
        cmd += [f"--num_processes={per_node * settings.nodes}", f"--num_machines={settings.nodes}"]
        if settings.nodes > 1:
            host, port = settings.rendezvous.rsplit(":", 1)
            cmd += [f"--main_process_ip={host}", f"--main_process_port={port}"]
        return cmd + ["-m", f"acesql.stages.{stage}", *argv]
    cmd = [sys.executable, "-m", "torch.distributed.run"]
    cmd += [f"--nproc_per_node={per_node}", f"--nnodes={settings.nodes}"]
    if settings.nodes > 1:
        cmd += ["--rdzv_backend=c10d", f"--rdzv_endpoint={settings.rendezvous}"]
    else:
        cmd += ["--standalone"]
    return cmd + ["-m", f"acesql.stages.{stage}", *argv]


def init_from_env(sharding: str = "none", backend: str = "auto", timeout_s: float = 600) -> Dist:
    """Join the job the launcher described in the environment; `SINGLE` when there is none.

    `backend` "auto" is nccl with CUDA, gloo without. Each rank on CUDA uses device
    `LOCAL_RANK`.
    """
    if sharding not in SHARDING:
        raise ValueError(f"sharding must be one of {SHARDING}, got {sharding!r}")
    if not launched():
        return SINGLE
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
    if not torch.distributed.is_initialized():
        try:
            torch.distributed.init_process_group(backend, timeout=timedelta(seconds=timeout_s))
        except (RuntimeError, ValueError) as err:
            raise DistributedError(
                f"could not join the job at {os.environ['MASTER_ADDR']}:"
                f"{os.environ['MASTER_PORT']} as rank {os.environ['RANK']} of "
                f"{os.environ['WORLD_SIZE']} within {timeout_s:.0f} s: {err}"
            ) from err
    return Dist(
        rank=torch.distributed.get_rank(),
        world_size=torch.distributed.get_world_size(),
        local_rank=local_rank,
        sharding=sharding,
        timeout_s=timeout_s,
    )


def shard_model(model) -> None:
    """FSDP2 over `model` in place: each decoder block, then the rest, split across the
    processes. FSDP averages gradients over processes (a custom divide factor needs an op gloo
    lacks), so a trainer that wants sums scales its loss by the world size."""
    from torch.distributed.fsdp import fully_shard

    for block in model.model.layers:
        fully_shard(block)
    fully_shard(model)


def full_state_dict(model) -> dict:
    """The whole model's weights on every process (gathered under FSDP: a collective)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    if not _is_sharded(model):
        return model.state_dict()
    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))


def load_full_state(model, optimizer, weights: dict, optimizer_state: dict, dist: Dist) -> None:
    """Load whole weights and an optimizer state as saved from process 0, sliced under FSDP.

    A tied output head is not saved (`lm_head.weight` missing is expected); any other
    missing weight means a broken checkpoint.
    """
    if dist.sharded:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict

        set_state_dict(
            model,
            optimizer,
            model_state_dict=weights,
            optim_state_dict=optimizer_state,
            options=StateDictOptions(full_state_dict=True, strict=False),
        )
        return
    missing, _ = model.load_state_dict(weights, strict=False)
    if any(not k.endswith("lm_head.weight") for k in missing):
        raise RuntimeError(f"the checkpoint lacks weights: {missing[:3]}")
    optimizer.load_state_dict(optimizer_state)


def _is_sharded(model) -> bool:
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)


def close(dist: Dist) -> None:
    """Leave the job (a no-op for `SINGLE`)."""
    if dist.enabled and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
