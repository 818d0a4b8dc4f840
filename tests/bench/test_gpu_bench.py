"""bench/gpu_bench.py at its smoke size on the CPU: both variants run and report."""

from __future__ import annotations

import importlib.util
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "gpu_bench.py"


def test_smoke_run_reports_both_variants(capsys):
    spec = importlib.util.spec_from_file_location("acesql_gpu_bench", BENCH)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    argv = ["--small", "--device", "cpu", "--steps", "1", "--max-new-tokens", "4"]
    results = bench.main([*argv, "--retriever-prompt", "32"])
    for variant in ("fp32", "bf16"):
        update, sample = results[variant]["update"], results[variant]["sample"]
        assert update["finite"] and update["s_per_update"] > 0 and update["peak_mib"] is None
        assert 8 <= sample["tokens"] <= 8 * 8 * 4 and sample["tokens_per_s"] > 0
    assert results["bf16_update_speedup"] > 0 and "bf16 weights / fp32" in capsys.readouterr().out
