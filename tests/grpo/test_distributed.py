"""Training across processes (gloo, CPU): one step on two processes equals the one-process
step on the same questions and seeds; a dead process fails the job instead of hanging.

The multi-process runs go through tests/dist_worker.py under `torchrun`; the one-process
reference runs the same script plainly.
"""

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from acesql.config import DistributedSection
from acesql.distributed import SINGLE, Dist, launch_command
from acesql.errors import ConfigError
from acesql.grpo.pcgrad import pcgrad, pcgrad_

WORKER = Path(__file__).parents[1] / "dist_worker.py"
ROOT = Path(__file__).resolve().parents[2]


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHONPATH"] = str(ROOT)
    return env


def _run(args: list[str], processes: int, out: Path) -> dict:
    if processes == 1:
        command = [sys.executable, str(WORKER)]
    else:
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
        command += [f"--nproc_per_node={processes}", str(WORKER)]
    proc = subprocess.run(
        command + [*args[:3], str(out), *args[3:]],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=280,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return torch.load(out, weights_only=False)


def _max_diff(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def _assert_same_records(one: list[dict], two: list[dict]) -> None:
    for r1, r2 in zip(one, two, strict=True):
        for key, value in r1.items():
            if not key.startswith("time/"):
                assert r2[key] == pytest.approx(value, rel=1e-4, abs=1e-6), key


@pytest.fixture(scope="module")
def initial(tiny_model_dir):
    from safetensors.torch import load_file

    return load_file(tiny_model_dir / "model.safetensors")


# --- one process: the pieces ------------------------------------------------------------


def test_blocks_of_questions_in_rank_order_are_the_questions():
    items = list(range(7))
    for world in (1, 2, 3, 4, 8):
        blocks = [Dist(rank=r, world_size=world).shard(items) for r in range(world)]
        assert [x for b in blocks for x in b] == items
        assert max(map(len, blocks)) - min(map(len, blocks)) <= 1


def test_single_process_collectives_are_the_identity():
    t = torch.tensor([1.0, 2.0])
    assert SINGLE.all_reduce_(t) is t and t.tolist() == [1.0, 2.0]
    assert SINGLE.sum([1, 2.5]) == [1.0, 2.5]
    assert SINGLE.gather_objects({"a": 1}) == [{"a": 1}]
    assert SINGLE.any(False) is False and SINGLE.any(True) is True


@pytest.mark.parametrize("granularity", ["tensor", "global"])
def test_pcgrad_on_slices_with_reduced_scalars_is_pcgrad_of_the_whole(granularity):
    """A gradient made of two equal halves: each half with doubled partial sums (what the
    all-reduce of two processes holding one half each gives) is its half of the result."""
    torch.manual_seed(0)
    halves_r = [torch.randn(3, 4), torch.randn(5)]
    halves_g = [-h + 0.3 * torch.randn_like(h) for h in halves_r]
    whole_r = [torch.cat([h, h]) for h in halves_r]
    whole_g = [torch.cat([h, h]) for h in halves_g]
    expected, stats = pcgrad(whole_r, whole_g, granularity)
    sliced = [h.clone() for h in halves_g]
    sliced_stats = pcgrad_(
        halves_r, sliced, granularity, reduce=lambda partial: [2 * x for x in partial]
    )
    assert stats.n_conflicts > 0
    for out, full in zip(sliced, expected):
        torch.testing.assert_close(out, full[: len(out)])
    assert sliced_stats.cosine == pytest.approx(stats.cosine)
    assert sliced_stats.norm_ret == pytest.approx(stats.norm_ret)


def test_launch_command_for_processes_and_nodes():
    assert launch_command("grpo", [], DistributedSection()) is None
    cmd = launch_command("grpo", ["--params", "p.yaml"], DistributedSection(processes=4))
    assert cmd[1:3] == ["-m", "torch.distributed.run"]
    assert cmd[-3:] == ["acesql.stages.grpo", "--params", "p.yaml"]
    two = DistributedSection(processes=8, nodes=2, rendezvous="head:29500")
    cmd = launch_command("grpo", [], two)
    assert "--nnodes=2" in cmd and "--rdzv_endpoint=head:29500" in cmd
    fsdp = DistributedSection(processes=2, sharding="fsdp")
    cmd = launch_command("sft", [], fsdp, fsdp_config="infra/accelerate/multi_gpu_fsdp.yaml")
    assert cmd[2] == "accelerate.commands.launch" and "--num_processes=2" in cmd


def test_nodes_need_a_rendezvous():
    with pytest.raises(ValueError, match="rendezvous"):
        DistributedSection(nodes=2)


def test_a_params_file_without_the_section_runs_one_process(tmp_path):
    from acesql.config import load_section

    path = tmp_path / "params.yaml"
    path.write_text("base: {}\n")
    assert load_section(path, "distributed").processes == 1
    path.write_text("base: {}\ndistributed: {processes: -1}\n")
    with pytest.raises(ConfigError, match="processes"):
        load_section(path, "distributed")


# --- two processes ---------------------------------------------------------------------


@pytest.mark.slow
def test_a_grpo_step_on_two_processes_equals_one_process(tiny_model_dir, synth_dir, tmp_path):
    """Replicated weights, PCGrad per tensor, prompts shared: the same parameters and the
    same logged numbers as one process on the four questions."""
    args = ["grpo", str(tiny_model_dir), str(synth_dir)]
    one = _run(args, 1, tmp_path / "one.pt")
    two = _run(args, 2, tmp_path / "two.pt")
    assert _max_diff(one["weights"], two["weights"]) < 1e-6
    _assert_same_records(one["records"], two["records"])
    record = one["records"][0]
    assert record["retriever/grad_norm"] > 0 and record["generator/grad_norm"] > 0


@pytest.mark.slow
@pytest.mark.parametrize("granularity", ["tensor", "global"])
def test_a_sharded_grpo_step_equals_one_process(
    tiny_model_dir, synth_dir, tmp_path, initial, granularity
):
    """FSDP2: PCGrad on each process's slices with the scalars all-reduced. One sequence per
    piece on both sides, so both sum the same numbers (how sequences are padded together
    moves a gradient by ~1e-5 relative, which Adam's first step turns into ~lr)."""
    args = ["grpo", str(tiny_model_dir), str(synth_dir)]
    same = ["--granularity", granularity, "--no-share", "--micro-batch-size", "1"]
    one = _run(args + same, 1, tmp_path / "one.pt")
    two = _run(args + same + ["--sharding", "fsdp"], 2, tmp_path / "fsdp.pt")
    assert _max_diff(one["weights"], two["weights"]) < 1e-6
    _assert_same_records(one["records"], two["records"])
    moved = {k: v for k, v in one["weights"].items() if k in initial}
    assert _max_diff(moved, {k: initial[k] for k in moved}) > 1e-4  # the step did something


@pytest.mark.slow
def test_sft_on_two_processes_follows_the_one_process_loss_curve(
    tiny_model_dir, synth_dir, tmp_path
):
    """Global batch 4: two micro-batches accumulated in one process, one in each of two."""
    args = ["sft", str(tiny_model_dir), str(synth_dir)]
    one = _run(args, 1, tmp_path / "one.pt")
    two = _run(args, 2, tmp_path / "two.pt")
    assert len(one["losses"]) == 3
    assert two["losses"] == pytest.approx(one["losses"], rel=1e-5)
    assert _max_diff(one["weights"], two["weights"]) < 1e-6


@pytest.mark.slow
def test_a_dead_process_fails_the_job_with_a_message(tiny_model_dir, synth_dir, tmp_path):
    """Rank 1 exits before the first collective; rank 0 fails within the job's timeout,
    naming the operation, instead of waiting forever."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for rank in (0, 1):
        env = _env() | {
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": "2",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
        }
        command = [sys.executable, str(WORKER), "hang", str(tiny_model_dir), str(synth_dir)]
        procs.append(
            subprocess.Popen(
                command + [str(tmp_path / "x"), "--timeout", "20"],
                env=env,
                stderr=subprocess.PIPE,
                text=True,
                cwd=ROOT,
            )
        )
    _, err0 = procs[0].communicate(timeout=120)
    procs[1].communicate(timeout=30)
    assert procs[1].returncode == 7
    assert procs[0].returncode != 0
    assert "DistributedError" in err0 and "rank 0 of 2: barrier failed" in err0, err0[-2000:]


@pytest.mark.slow
def test_the_grpo_stage_relaunches_itself_on_two_processes(tiny_model_dir, synth_dir, tmp_path):
    """`python -m acesql.stages.grpo` with `distributed.processes: 2`: torchrun, one MLflow
    run, the model and metrics written once, each process's RNG state in the checkpoint; run
    again, it resumes from that checkpoint; with one process it refuses it, naming why."""
    import json

    import yaml
    from mlflow import MlflowClient

    from acesql.data.loaders import load_dataset
    from tests.grpo_helpers import rl_project

    examples = load_dataset(synth_dir, "synth", "train").examples[:4]
    grpo = dict(
        epochs=1,
        questions_per_step=4,
        samples=2,
        checkpoint_every=1,
        eval_every=1,
        eval_questions=2,
        generation={"max_new_tokens": 8, "batch_size": 8},
    )
    params = rl_project(tmp_path, tiny_model_dir, synth_dir, examples, grpo)
    settings = yaml.safe_load(params.read_text())
    settings["distributed"] = {"processes": 2, "timeout_s": 120}
    params.write_text(yaml.safe_dump(settings))
    command = [sys.executable, "-m", "acesql.stages.grpo", "--params", str(params)]
    env = _env() | {"MLFLOW_DISABLE_TELEMETRY": "true", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "torch.distributed.run --nproc_per_node=2" in proc.stderr
    metrics = json.loads((tmp_path / "models" / "grpo_metrics.json").read_text())
    assert metrics["steps"] == 1 and metrics["questions"] == 4
    assert (tmp_path / "models" / "grpo" / "model.safetensors").is_file()
    checkpoint = tmp_path / "models" / "grpo" / "checkpoints" / "step-000001"
    assert (checkpoint / "rng-1.pt").is_file() and (checkpoint / "trainer.pt").is_file()
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("acesql")
    runs = client.search_runs([experiment.experiment_id], filter_string="tags.stage = 'grpo'")
    assert len(runs) == 1
    assert [m.step for m in client.get_metric_history(runs[0].info.run_id, "grpo/lambda")] == [1]

    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stderr[-3000:]  # the same processes resume it
    metrics = json.loads((tmp_path / "models" / "grpo_metrics.json").read_text())
    assert metrics["resumed_from_step"] == 1 and metrics["steps"] == 1

    settings["distributed"] = {"processes": 1}
    params.write_text(yaml.safe_dump(settings))
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=280)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "was written by 2 processes" in proc.stderr


def test_the_bench_counts_collective_bytes_as_a_ring_sends_them():
    import importlib.util

    spec = importlib.util.spec_from_file_location("dist_bench", ROOT / "bench" / "dist_bench.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    # 2 tensors: 7 float64 scalars, a ring all-reduce over 2 sends them once (2 x 1/2)
    assert bench.collective_bytes(2, 1000, 2) == (56, 2000)
    # over 4 processes: 2 x 3/4 of 56 bytes, and 3/4 of the 4000-byte gradient
    assert bench.collective_bytes(2, 1000, 4) == (84, 3000)
    same = {
        "weights": {"w": torch.ones(4)},
        "records": [{"grad_norm": 2.0, "retriever/grad_norm": 1.0, "generator/grad_norm": 1.0}],
    }
    other = {
        "weights": {"w": torch.tensor([1.0, 1.0, 1.0, 1.1])},
        "records": [{"grad_norm": 2.2, "retriever/grad_norm": 1.0, "generator/grad_norm": 1.0}],
    }
    assert bench.disagreement(same, same) == (0.0, 0.0)
    share, rel = bench.disagreement(same, other)
    assert share == 0.25 and rel == pytest.approx(0.1)
