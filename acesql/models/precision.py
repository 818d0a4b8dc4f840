"""When bf16 autocast pays: on CPUs with native bf16 arithmetic, and for training on GPUs.

Autocast runs fp32 weights with bf16 matrix products. A CPU without bf16 instructions
(AVX512-BF16 or AMX) emulates them, and on such a CPU (an AVX2 AMD EPYC, 2 cores) a prefill
of 291 tokens on Qwen2.5-Coder-0.5B took 16.1 s under autocast against 3.7 s in fp32, and
greedy generation of 8 prompts 145 s against 36 s. The `auto` setting asks the hardware.

    enabled = bf16_autocast_enabled("auto", torch.device("cpu"))

On a GPU, `auto` turns autocast on for training and off for generation. On an H200, at
Qwen2.5-Coder-0.5B's shape (`bench/gpu_bench.py`: 8 prompts x 8 samples, 128 new tokens),
sampling under autocast ran at 642 tokens/s against 1,664 in fp32: a decoding step of a
small model is bound by kernel launches, and autocast adds a cast before every matrix
product. A GRPO update of one question (16 sequences) took 0.675 s against 0.683 s.

`auto` makes a run's numbers depend on the host: the same `sft_data` stage, same inputs,
wrote 55 targets per role in fp32 and 53 under bf16 autocast (greedy decoding flips on
near ties). Every stage's MLflow run carries `acesql.host.host_tags()`, so two runs can be
told apart; set `bf16_autocast: false` where outputs must match across machines.
"""

from __future__ import annotations

import torch

from acesql.host import cpu_has_native_bf16


def bf16_autocast_enabled(
    setting: bool | str, device: torch.device | str, *, generation: bool = False
) -> bool:
    """The answer to a `bf16_autocast` setting (true, false or "auto") on `device`; with
    `generation`, for a rollout engine (on a GPU, `auto` then means fp32).

    >>> bf16_autocast_enabled("auto", "cuda", generation=True)
    False
    """
    if isinstance(setting, bool):
        return setting
    if setting != "auto":
        raise ValueError(f"bf16_autocast must be true, false or 'auto', got {setting!r}")
    device = torch.device(device)
    if device.type == "cuda":
        if generation:
            return False
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    return device.type == "cpu" and cpu_has_native_bf16()
