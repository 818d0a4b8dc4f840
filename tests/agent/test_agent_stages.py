"""The debug_data and agent_sft stages, run as DVC runs them (a subprocess on a params file)."""

from __future__ import annotations

import json
import shutil

import pytest
import yaml

from acesql.debug.task import read_tasks
from tests.helpers import run_stage, write_prepared


def _project(tmp_path, synth_dir, tiny_model_dir):
    data = tmp_path / "data"
    write_prepared(data, synth_dir, ("train", "test_ood"))
    shutil.copytree(tiny_model_dir, tmp_path / "models" / "grpo")
    params = {
        "base": {
            "data_dir": str(data),
            "models_dir": str(tmp_path / "models"),
            "tracking_uri": f"sqlite:///{tmp_path / 'mlflow.db'}",
        },
        "debug_data": {"tasks_per_db": 4},
        "reasoning_sft": {"model": str(tmp_path / "models" / "not-made-yet")},
        "reasoning_grpo": {"model": str(tmp_path / "models" / "not-made-yet")},
        "agent_sft": {
            "model": str(tmp_path / "models" / "grpo"),
            "max_tasks": 3,
            "question_ratio": 1.0,
            "training": {"batch_size": 2, "max_length": 4096, "time_budget_minutes": 2},
        },
        "agent_grpo": {
            "model": str(tmp_path / "models" / "agent_sft"),
            "max_tasks": 2,
            "steps": 1,
            "tasks_per_step": 1,
            "group_size": 2,
            "max_turns": 1,
            "max_new_tokens": 4,
            "train_layers": None,
        },
    }
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    return path


def _debug_data(tmp_path, synth_dir, tiny_model_dir):
    params = _project(tmp_path, synth_dir, tiny_model_dir)
    proc = run_stage("debug_data", params)
    assert proc.returncode == 0, proc.stderr[-2000:]
    metrics = json.loads((tmp_path / "data" / "debug_metrics.json").read_text())
    train = read_tasks(tmp_path / "data" / "debug" / "train.jsonl")
    assert metrics["by_split"]["train"] == len(train) > 0
    assert set(metrics["splits"]) == {"train", "test_ood"}  # no prepared dev: none written
    assert not (tmp_path / "data" / "debug" / "dev.jsonl").exists()
    return params


@pytest.mark.slow  # a whole stage (or several) in subprocesses
def test_debug_data_stage(tmp_path, synth_dir, tiny_model_dir):
    _debug_data(tmp_path, synth_dir, tiny_model_dir)


@pytest.mark.slow
@pytest.mark.timeout(900)  # two training stages in subprocesses
def test_agent_sft_stage_trains_on_demonstrations(tmp_path, synth_dir, tiny_model_dir):
    params = _debug_data(tmp_path, synth_dir, tiny_model_dir)
    proc = run_stage("agent_sft", params)
    assert proc.returncode == 0, proc.stderr[-2000:]
    metrics = json.loads((tmp_path / "models" / "agent_sft_metrics.json").read_text())
    assert metrics["debug_tasks"] == 3 and metrics["questions"] == 3
    # 3 tasks over 3 turns, some also in 1, and 3 questions over 2: records per turn
    assert metrics["records"] >= 3 * 2 + 3 * 2
    assert metrics["steps"] >= 1
    assert (tmp_path / "models" / "agent_sft" / "config.json").is_file()

    proc = run_stage("agent_grpo", params)
    assert proc.returncode == 0, proc.stderr[-2000:]
    metrics = json.loads((tmp_path / "models" / "agent_grpo_metrics.json").read_text())
    assert metrics["steps"] == 1 and metrics["debug_tasks"] == 2 and metrics["questions"] == 1
    assert len(metrics["history"]) == 1 and "reward_mean" in metrics["history"][0]
    assert (tmp_path / "models" / "agent_grpo" / "config.json").is_file()


@pytest.mark.slow  # a whole stage (or several) in subprocesses
def test_agent_sft_says_what_is_missing(tmp_path, synth_dir, tiny_model_dir):
    params = _project(tmp_path, synth_dir, tiny_model_dir)
    proc = run_stage("agent_sft", params)
    assert proc.returncode == 2 and "run the debug_data stage first" in proc.stderr


@pytest.mark.slow  # a whole stage (or several) in subprocesses
def test_each_curriculum_stage_names_the_model_it_needs(tmp_path, synth_dir, tiny_model_dir):
    params = _project(tmp_path, synth_dir, tiny_model_dir)
    for name in ("reasoning_sft", "reasoning_grpo"):
        proc = run_stage(name, params)
        assert proc.returncode == 2, proc.stderr[-2000:]
        assert f"or set {name}.model" in proc.stderr
