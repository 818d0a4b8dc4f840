"""What a run's numbers depend on besides its inputs: the CPU, its bf16 support, the torch build.

Every stage tags its MLflow run with `host_tags()`, so two runs of the same code and data
that disagree can be told apart by where they ran (`bf16_autocast: auto` computes in bf16 on
one CPU and in fp32 on another, and greedy decoding flips on near-ties).

    host_tags()  # {"host.cpu": "AMD EPYC", "host.cpu_native_bf16": "true", ...}
    host_facts()  # the same without the prefix, as an evaluation's metrics.json records them
"""

from __future__ import annotations

import platform
from functools import cache
from pathlib import Path

NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16")


@cache
def cpu_has_native_bf16() -> bool:
    """Whether this CPU computes in bf16 natively (Linux: read from /proc/cpuinfo)."""
    return not _cpu_flags().isdisjoint(NATIVE_BF16_FLAGS)


@cache
def host_tags() -> dict[str, str]:
    """The host facts a stage's MLflow run is tagged with (`host.*`)."""
    import torch  # the stages that never touch a model still say which build they ran beside

    names = (
        line.split(":", 1)[1].strip()
        for line in _cpuinfo().splitlines()
        if ":" in line and line.startswith("model name")
    )
    return {
        "host.cpu": next(names, "") or platform.machine(),
        "host.cpu_native_bf16": str(cpu_has_native_bf16()).lower(),
        # AMX computes bf16 matrix products otherwise than AVX-512 BF16 alone: two hosts that
        # both say "Intel Xeon" and native bf16 train different weights when one has it
        "host.cpu_amx": str("amx_bf16" in _cpu_flags()).lower(),
        "host.torch": torch.__version__,
        "host.cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none",
    }


def _cpu_flags() -> set[str]:
    """The words of /proc/cpuinfo, its flags among them (read once, by `_cpuinfo`)."""
    return set(_cpuinfo().split())


@cache
def _cpuinfo() -> str:
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""


def host_facts() -> dict[str, str]:
    """`host_tags()` without the `host.` prefix: what an evaluation's metrics.json records."""
    return {key.removeprefix("host."): value for key, value in host_tags().items()}
