"""Advisory folder locks: one writer per folder, the second refused at once, never queued.

    fd = lock_folder(out)          # None: another process holds `out/.lock`
    ...                            # the lock lasts until os.close(fd) or the process ends
    with folder_locked(out, DataError("out is busy")):   # or raise that error
        ...

The lock is `flock` on `folder/.lock` (POSIX), so a killed holder releases it with its file
descriptors: no stale lock is left to clear by hand. It guards against two processes of
this project writing one folder, not against other programs writing there.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

LOCK_FILE = ".lock"


def lock_folder(folder: str | Path) -> int | None:
    """Create `folder` if needed and lock it; the lock's file descriptor, or None if held.

    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> fd = lock_folder(folder)
    >>> fd is not None, lock_folder(folder) is None   # a second lock on it is refused
    (True, True)
    >>> os.close(fd)
    >>> again = lock_folder(folder); again is not None
    True
    >>> os.close(again)
    """
    import fcntl

    Path(folder).mkdir(parents=True, exist_ok=True)
    fd = os.open(Path(folder) / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


@contextmanager
def folder_locked(folder: str | Path, busy: Exception) -> Iterator[None]:
    """Hold `folder`'s lock for the block; raise `busy` if another process holds it."""
    fd = lock_folder(folder)
    if fd is None:
        raise busy
    try:
        yield
    finally:
        os.close(fd)
