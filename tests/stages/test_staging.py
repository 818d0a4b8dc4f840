import json
from pathlib import Path

import pytest

from acesql.checkpoint import save_model
from acesql.staging import replace_dir, write_atomic


def _old(tmp_path: Path) -> Path:
    out = tmp_path / "out"
    out.mkdir()
    (out / "a.txt").write_text("old")
    return out


def test_a_finished_block_replaces_the_folder_whole(tmp_path):
    out = _old(tmp_path)
    with replace_dir(out) as new:
        assert new != out and list(new.iterdir()) == []
        (new / "b.txt").write_text("new")
        assert (out / "a.txt").read_text() == "old"  # untouched until the block ends
    assert sorted(p.name for p in out.iterdir()) == ["b.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_failed_block_keeps_the_old_folder(tmp_path):
    out = _old(tmp_path)
    with pytest.raises(ValueError, match="half way"), replace_dir(out) as new:
        (new / "b.txt").write_text("half")
        raise ValueError("half way")
    assert sorted(p.name for p in out.iterdir()) == ["a.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_killed_run_leaves_a_hidden_folder_the_next_run_removes(tmp_path):
    (tmp_path / ".out.partial-killed" / "new").mkdir(parents=True)
    with replace_dir(tmp_path / "out") as new:
        (new / "b.txt").write_text("new")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_write_atomic_leaves_no_temporary_file(tmp_path):
    path = tmp_path / "sub" / "metrics.json"
    write_atomic(path, "{}\n")
    write_atomic(path, '{"n": 1}\n')
    assert path.read_text() == '{"n": 1}\n'
    assert [p.name for p in path.parent.iterdir()] == ["metrics.json"]


class _Saves:
    """Writes `names` as save_pretrained would, raising after `fail_after` files."""

    def __init__(self, names, fail_after=None):
        self.names, self.fail_after = names, fail_after

    def save_pretrained(self, folder, state_dict=None, safe_serialization=True):
        for i, name in enumerate(self.names):
            if i == self.fail_after:
                raise OSError("disk full")
            (Path(folder) / name).write_text("new " + name)


def test_save_model_moves_files_in_only_after_a_full_save(tmp_path):
    out = tmp_path / "sft"
    (out / "checkpoints").mkdir(parents=True)
    (out / "model.safetensors").write_text("old weights")
    with pytest.raises(OSError, match="disk full"):
        save_model(_Saves(["config.json", "model.safetensors"], fail_after=1), _Saves([]), out)
    assert (out / "model.safetensors").read_text() == "old weights"
    assert not (out / "config.json").exists()
    save_model(_Saves(["config.json", "model.safetensors"]), _Saves(["tokenizer.json"]), out)
    assert (out / "model.safetensors").read_text() == "new model.safetensors"
    assert sorted(p.name for p in out.iterdir()) == [
        "checkpoints",
        "config.json",
        "model.safetensors",
        "tokenizer.json",
    ]


def test_a_stage_metrics_file_comes_with_its_headline(tmp_path):
    """The headline holds the stage's `HEADLINES` numbers, flat; the details keep everything."""
    from acesql.stages.common import write_metrics
    from acesql.stages.headlines import HEADLINES

    metrics = {"considered": 12, "kept": 3, "kept_rate": 0.25, "reasons": {"too_hard": 9}}
    write_metrics(tmp_path / "grpo_metrics.json", metrics, "grpo_data")
    assert json.loads((tmp_path / "grpo_metrics.json").read_text()) == metrics
    headline = json.loads((tmp_path / "grpo_headline.json").read_text())
    assert headline == {"considered": 12, "kept": 3, "kept_rate": 0.25}
    assert list(headline) == list(HEADLINES["grpo_data"])
    write_metrics(tmp_path / "base.json", {"x": 1})  # no stage: no headline
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "base.json",
        "grpo_headline.json",
        "grpo_metrics.json",
    ]
