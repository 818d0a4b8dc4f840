"""Training checkpoints shared by the SFT and GRPO trainers: atomic, pruned, resumed by run.

    ckpts = Checkpoints(out_dir / "checkpoints", state_file="state.json", keep=2)
    found = ckpts.latest(fingerprint)        # newest complete checkpoint of this run, or None
    if found:
        path, state = found                  # restore from the folder, continue at state
    ...
    ckpts.save(step, state, write)           # write(tmp) fills a temp folder; then renamed

On disk, under `root`: one folder per checkpoint, `step-000025/` (six digits, so names sort as
steps do), holding whatever the trainer writes and, last, `state_file`, the JSON of its
state. A checkpoint is written into `.tmp-step-000025/` and renamed into place only once
`state_file` is in it: a run killed mid-save leaves at most a `.tmp-*` folder, which is never
read as a checkpoint and is cleared by the next save of that step. After each save only the
newest `keep` `step-*` folders stay (by name, whichever run wrote them).

A run is told apart by its fingerprint (`fingerprint`): a digest of what makes two runs the
same run (model, data, settings less those that only pace or log it), stored in the state
under the key `fingerprint`. `latest(fp)` skips every checkpoint of another run, or a partial
one, and returns the newest left; a changed run thus starts over rather than resuming
another's weights.

What each caller chooses:
- `state_file`: `trainer_state.json` (SFT, next to accelerate's `save_state` files) or
  `state.json` (GRPO).
- single process: `save(step, state, write)`. Several processes writing one checkpoint
  (SFT under `accelerate launch`): the main process calls `begin(step)`, every process writes
  into `staging(step)` between barriers, then the main process calls `commit(step, state)`.
- `latest(None)` takes the newest complete checkpoint of any run (what inspecting a folder
  wants); both trainers pass their fingerprint.

Before a trainer starts it checks the room its saves need (`require_free_space`): a run
that fills the disk dies at its next save, after the work since the last one is done;
short of room, it stops before the first step with a message that says how much is missing.

    need = saves_bytes(model, ckpts, saves, models=1)  # the checkpoints to come, the final model
    require_free_space(out_dir, need, "GRPO")

The final model goes next to the checkpoints with `save_model(model, tokenizer, out_dir)`: its
files are written into a hidden staging folder first and then moved in one by one with
atomic renames, so a kill mid-save never leaves a truncated weights file behind.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import NamedTuple

from acesql.errors import DiskSpaceError
from acesql.staging import scratch_dir

KEEP = 2
PREFIX = "step-"
TMP_PREFIX = ".tmp-"


class Checkpoint(NamedTuple):
    """A complete checkpoint: its folder and the state saved in it."""

    path: Path
    state: dict


class Checkpoints:
    """The checkpoint folders under `root` (see the module docstring)."""

    def __init__(self, root: str | Path, *, state_file: str = "state.json", keep: int = KEEP):
        if keep < 1:
            raise ValueError(f"keep must be at least 1, got {keep}")
        self.root = Path(root)
        self.state_file = state_file
        self.keep = keep

    def path(self, step: int) -> Path:
        """The folder of the checkpoint at `step`: `root/step-000025`."""
        return self.root / f"{PREFIX}{step:06d}"

    def staging(self, step: int) -> Path:
        """The temp folder a checkpoint is written into: `root/.tmp-step-000025`."""
        return self.root / f"{TMP_PREFIX}{PREFIX}{step:06d}"

    def begin(self, step: int) -> Path:
        """Clear and create the temp folder of `step` (a killed save's leftovers go); return it."""
        tmp = self.staging(step)
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        return tmp

    def commit(self, step: int, state: dict) -> Path:
        """Write `state_file` last, rename the temp folder into place, prune; return the folder."""
        tmp, final = self.staging(step), self.path(step)
        (tmp / self.state_file).write_text(json.dumps(state))
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        self.prune()
        return final

    def save(self, step: int, state: dict, write: Callable[[Path], None]) -> Path:
        """`begin`, `write(temp folder)`, `commit`: a failing `write` leaves no checkpoint."""
        write(self.begin(step))
        return self.commit(step, state)

    def prune(self) -> list[Path]:
        """Remove all but the newest `keep` checkpoint folders; return the removed ones."""
        old = self.folders()[: -self.keep]
        for path in old:
            shutil.rmtree(path, ignore_errors=True)
        return old

    def bytes_needed(self, checkpoint_bytes: int, saves: int) -> int:
        """The most room the next `saves` checkpoints of `checkpoint_bytes` take beyond the
        folders already here: the newest is written before the oldest is pruned, so up to
        `keep + 1` stand at once."""
        held = len(self.folders())
        return max(0, min(self.keep + 1, held + saves) - held) * checkpoint_bytes

    def folders(self) -> list[Path]:
        """Every `step-*` folder, oldest first (complete or not, of any run)."""
        return sorted(self.root.glob(f"{PREFIX}*"))

    def latest(self, fingerprint: str | None = None) -> Checkpoint | None:
        """The newest complete checkpoint whose state has this `fingerprint` (None: any run)."""
        for path in reversed(self.folders()):
            state_file = path / self.state_file
            if not state_file.is_file():  # written last: without it the checkpoint is partial
                continue
            state = json.loads(state_file.read_text())
            if fingerprint is None or state.get("fingerprint") == fingerprint:
                return Checkpoint(path, state)
        return None


def fingerprint(
    identity: list, settings: dict, *, paced: Iterable[str] = (), data: Iterable[str] = ()
) -> str:
    """16 hex digits of SHA-256 over what makes two runs the same run.

    `identity` (e.g. `[str(model_dir), seed]`) and `settings` less the keys in `paced`
    (settings that only pace or log a run: time budget, checkpoint interval) are hashed as
    sorted-key JSON, then each string of `data` (prompts, questions, a pool) in order.
    """
    paced = set(paced)
    kept = {k: v for k, v in settings.items() if k not in paced}
    digest = hashlib.sha256(json.dumps([*identity, kept], sort_keys=True).encode())
    for chunk in data:
        digest.update(chunk.encode())
    return digest.hexdigest()[:16]


def save_model(model, tokenizer, out_dir: Path, state_dict: dict | None = None) -> None:
    """`save_pretrained` of `model` and `tokenizer` into `out_dir`, file by file atomically
    (other files in `out_dir`, such as `checkpoints/`, stay)."""
    out_dir = Path(out_dir)
    with scratch_dir(out_dir, "model") as staging:
        model.save_pretrained(staging, state_dict=state_dict, safe_serialization=True)
        tokenizer.save_pretrained(staging)
        for path in sorted(staging.iterdir()):
            os.replace(path, out_dir / path.name)


def weights_bytes(parameters: Iterable) -> int:
    """Bytes of `parameters` as held (what `save_pretrained` writes of them)."""
    return sum(p.numel() * p.element_size() for p in parameters)


def checkpoint_bytes(model, trainable: Iterable) -> int:
    """A checkpoint's size: the whole model's weights and AdamW's two moments per trainable
    parameter (in the parameter's dtype)."""
    return weights_bytes(model.parameters()) + 2 * weights_bytes(trainable)


def saves_bytes(model, ckpts: Checkpoints, saves: int, *, models: int = 1) -> int:
    """The room a run's next `saves` checkpoints and `models` copies of its weights (the final
    model, `best/`) take; `model`'s parameters that require grad are the trainable ones."""
    trainable = [p for p in model.parameters() if p.requires_grad]
    checkpoint = checkpoint_bytes(model, trainable)
    return models * weights_bytes(model.parameters()) + ckpts.bytes_needed(checkpoint, saves)


def require_free_space(folder: str | Path, need: int, what: str) -> None:
    """Raise `DiskSpaceError` when the disk under `folder` has less than `need` bytes free."""
    probe = Path(folder).absolute()
    while not probe.exists():  # the folder itself may not be made yet
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if free < need:
        raise DiskSpaceError(
            f"{what} will write about {_gb(need)} (its checkpoints and final model) under "
            f"{folder}, and the disk holds {_gb(free)} free: free {_gb(need - free)} or more "
            "(old checkpoints and workspaces; `dvc gc` clears the DVC cache of old versions) "
            "and run it again"
        )


def _gb(n: int) -> str:
    return f"{n / 1e9:.1f} GB"
