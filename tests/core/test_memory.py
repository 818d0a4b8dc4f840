"""Giving freed heap pages back: the trim runs where glibc is the C library."""

import os
import platform

import pytest

from acesql.memory import release_free_heap


def anonymous_kb() -> int:
    with open(f"/proc/{os.getpid()}/smaps_rollup") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("Anonymous:"))


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_freed_small_blocks_go_back_to_the_system():
    # many blocks under glibc's mmap threshold, freed but for every 64th: the heap keeps them
    blocks = [bytearray(64 * 1024) for _ in range(4096)]
    kept = blocks[::64]
    del blocks
    held = anonymous_kb()
    assert release_free_heap() is True
    assert anonymous_kb() < held - 100_000  # over 100 MB of the 256 MB came back
    assert len(kept) == 64
