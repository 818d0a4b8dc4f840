"""bench/harness.py, the timing and reporting the benchmarks share, and a benchmark through it."""

from __future__ import annotations

import importlib
import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture
def bench(monkeypatch):
    """Import a benchmark script as its `python bench/x.py` run would (bench/ on the path)."""
    monkeypatch.syspath_prepend(str(BENCH))
    yield importlib.import_module
    for name in ("harness", "generate_bench", "rollout_bench"):
        sys.modules.pop(name, None)


class CountingEngine:
    """Writes `lengths[i]` tokens for prompt i, n times; counts its calls."""

    def __init__(self, lengths):
        self.lengths, self.calls = lengths, 0

    def generate(self, prompts, n=1, **options):
        self.calls += 1
        time.sleep(0.05)
        return [
            [SimpleNamespace(token_ids=list(range(self.lengths[i]))) for _ in range(n)]
            for i, _ in enumerate(prompts)
        ]


def test_a_timed_generation_counts_the_tokens_each_completion_keeps(bench):
    harness = bench("harness")
    engine = CountingEngine([3, 5])
    row, tokens = harness.timed_generation(engine, ["a", "b"], n=2, max_new_tokens=8)
    assert engine.calls == 1 and tokens == [[0, 1, 2]] * 2 + [[0, 1, 2, 3, 4]] * 2
    assert row["tokens"] == 16 and row["seconds"] >= 0
    assert row["seconds"] >= 0.05 and row["tokens_per_s"] == pytest.approx(
        16 / row["seconds"], rel=0.05
    )


def test_ratios_and_the_table_are_against_the_baseline(bench):
    harness = bench("harness")
    runs = {
        "slow": {"tokens": 10, "tokens_per_s": 2.0},
        "fast": {"tokens": 10, "tokens_per_s": 5.0},
    }
    assert harness.ratios(runs, "tokens_per_s") == {"fast_vs_slow": 2.5}
    assert harness.ratios(runs, "tokens_per_s", baseline="fast") == {"slow_vs_fast": 0.4}
    lines = harness.table(runs, "tokens_per_s").splitlines()
    assert lines[0].split() == ["run", "tokens", "tokens_per_s", "vs", "slow"]
    assert lines[1].split() == ["slow", "10", "2.00", "1.00x"]
    assert lines[2].split() == ["fast", "10", "5.00", "2.50x"]


def test_a_benchmark_reports_its_runs_as_a_table_and_one_json_line(bench, capsys):
    rollout = bench("rollout_bench")
    argv = ["--questions", "1", "--samples", "2", "--max-new-tokens", "2"]
    assert rollout.main([*argv, "--settings", "fp32-shared", "no-sharing"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    numbers = json.loads(out[-1])
    assert out[1].split()[0] == "run" and out[2].split()[0] == "fp32-shared"
    for name in ("fp32-shared", "no-sharing"):
        assert 2 <= numbers[name]["tokens"] <= 4 and numbers[name]["seconds"] > 0
    ratio = numbers["no-sharing"]["tokens_per_s"] / numbers["fp32-shared"]["tokens_per_s"]
    assert numbers["no-sharing_vs_fp32-shared"] == round(ratio, 2)


def test_the_harness_examples_hold(bench):
    import doctest

    result = doctest.testmod(bench("harness"))
    assert result.attempted >= 2 and result.failed == 0
