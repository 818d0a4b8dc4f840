"""Outputs replaced whole, only on success: a failed or killed run leaves the old ones as they were.

    with replace_dir(Path("data/prepared")) as new:
        (new / "train.jsonl").write_text(...)   # build the new folder
    # here data/prepared is the new folder; had the block raised, it would be the old one

    write_atomic(Path("data/metrics.json"), text)

`replace_dir` builds in a hidden `.NAME.partial-*` sibling of the output (same file system, so
the final step is a rename). The yielded folder's parent is that private scratch folder: a
block may keep temporary files there (a download), and it is removed at the end. A run killed
mid-way leaves only the hidden sibling, which the next `replace_dir` on the same output removes.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def scratch_dir(parent: Path, name: str) -> Iterator[Path]:
    """A new hidden folder `.NAME.partial-*` in `parent`, removed at the end; folders of that
    name left by a killed run are removed first."""
    parent = Path(parent)
    parent.mkdir(parents=True, exist_ok=True)
    prefix = f".{name}.partial-"
    for stale in parent.glob(f"{prefix}*"):
        shutil.rmtree(stale, ignore_errors=True)
    scratch = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    try:
        yield scratch
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


@contextmanager
def replace_dir(out_dir: Path) -> Iterator[Path]:
    """Yield an empty folder; when the block returns, it becomes `out_dir` (the old one goes)."""
    out_dir = Path(out_dir)
    with scratch_dir(out_dir.parent, out_dir.name) as scratch:
        new = scratch / "new"
        new.mkdir()
        yield new
        if out_dir.exists():
            out_dir.rename(scratch / "previous")
        new.rename(out_dir)


def write_atomic(path: Path, text: str) -> None:
    """Write `text` to `path` through a temporary sibling: readers see the old or the new file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.partial-{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)
