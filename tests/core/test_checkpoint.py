"""The checkpoint folders both trainers share: atomic saves, keep-N, fingerprints, resume."""

import json
import shutil
from collections import namedtuple

import pytest
import torch

from acesql.checkpoint import (
    Checkpoint,
    Checkpoints,
    checkpoint_bytes,
    fingerprint,
    require_free_space,
    saves_bytes,
    weights_bytes,
)
from acesql.errors import DiskSpaceError


def _write(text):
    def write(tmp):
        (tmp / "weights.bin").write_text(text)

    return write


def _save(ckpts, step, fp="run-a"):
    return ckpts.save(step, {"step": step, "fingerprint": fp}, _write(f"w{step}"))


def test_folder_names():
    ckpts = Checkpoints("out/checkpoints")
    assert str(ckpts.path(25)) == "out/checkpoints/step-000025"
    assert str(ckpts.staging(25)) == "out/checkpoints/.tmp-step-000025"


def test_save_writes_the_files_then_the_state_and_latest_reads_it_back(tmp_path):
    ckpts = Checkpoints(tmp_path, state_file="trainer_state.json")
    path = ckpts.save(3, {"step": 3, "fingerprint": "abc", "losses": [1.5, 1.25]}, _write("w"))
    assert path == tmp_path / "step-000003"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-000003"]  # no temp folder left
    assert sorted(p.name for p in path.iterdir()) == ["trainer_state.json", "weights.bin"]
    assert json.loads((path / "trainer_state.json").read_text()) == {
        "step": 3,
        "fingerprint": "abc",
        "losses": [1.5, 1.25],
    }
    found = ckpts.latest("abc")
    assert found == Checkpoint(path, {"step": 3, "fingerprint": "abc", "losses": [1.5, 1.25]})
    found_path, found_state = found  # unpacks like the (path, state) pair it replaced
    assert found_path == path and found_state["step"] == 3


def test_a_crash_mid_save_leaves_no_checkpoint(tmp_path):
    ckpts = Checkpoints(tmp_path)
    _save(ckpts, 2)

    def crash(tmp):
        (tmp / "weights.bin").write_text("half")
        raise KeyboardInterrupt  # killed while writing

    with pytest.raises(KeyboardInterrupt):
        ckpts.save(3, {"step": 3, "fingerprint": "run-a"}, crash)
    # the half-written folder is only a temp folder: never listed, never resumed from
    assert sorted(p.name for p in tmp_path.iterdir()) == [".tmp-step-000003", "step-000002"]
    assert [p.name for p in ckpts.folders()] == ["step-000002"]
    assert ckpts.latest("run-a").state == {"step": 2, "fingerprint": "run-a"}

    # the next save of that step starts from an empty temp folder
    def write(tmp):
        assert list(tmp.iterdir()) == []
        (tmp / "weights.bin").write_text("whole")

    path = ckpts.save(3, {"step": 3, "fingerprint": "run-a"}, write)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-000002", "step-000003"]
    assert (path / "weights.bin").read_text() == "whole"


def test_a_folder_without_its_state_file_is_partial(tmp_path):
    ckpts = Checkpoints(tmp_path)
    _save(ckpts, 1)
    (tmp_path / "step-000002").mkdir()  # e.g. killed between rename and a later write
    (tmp_path / "step-000002" / "weights.bin").write_text("w2")
    assert ckpts.latest("run-a").path == tmp_path / "step-000001"
    assert ckpts.latest().path == tmp_path / "step-000001"


@pytest.mark.parametrize(
    "keep, left", [(1, [5]), (2, [4, 5]), (3, [3, 4, 5]), (10, [1, 2, 3, 4, 5])]
)
def test_only_the_newest_keep_are_kept(tmp_path, keep, left):
    ckpts = Checkpoints(tmp_path, keep=keep)
    for step in range(1, 6):
        _save(ckpts, step)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"step-{s:06d}" for s in left]
    assert ckpts.latest("run-a").state["step"] == 5


def test_default_keep_is_two_and_saving_a_step_again_replaces_it(tmp_path):
    ckpts = Checkpoints(tmp_path)
    for step in (1, 2, 3):
        _save(ckpts, step)
    assert [p.name for p in ckpts.folders()] == ["step-000002", "step-000003"]
    ckpts.save(3, {"step": 3, "fingerprint": "run-a", "again": True}, _write("w3'"))
    assert [p.name for p in ckpts.folders()] == ["step-000002", "step-000003"]
    assert (tmp_path / "step-000003" / "weights.bin").read_text() == "w3'"
    assert ckpts.latest("run-a").state["again"] is True


def test_keep_must_be_positive():
    with pytest.raises(ValueError, match="keep must be at least 1, got 0"):
        Checkpoints("x", keep=0)


def test_latest_is_the_newest_of_the_same_run(tmp_path):
    ckpts = Checkpoints(tmp_path, keep=5)
    _save(ckpts, 1, "run-a")
    _save(ckpts, 2, "run-a")
    _save(ckpts, 3, "run-b")
    assert ckpts.latest("run-a").path.name == "step-000002"  # run-b's newer one is skipped
    assert ckpts.latest("run-b").path.name == "step-000003"
    assert ckpts.latest("run-c") is None  # another run's checkpoints: start over
    assert ckpts.latest().path.name == "step-000003"  # None: any run
    assert Checkpoints(tmp_path / "absent").latest("run-a") is None


def test_a_changed_run_prunes_by_name_whichever_run_wrote_them(tmp_path):
    ckpts = Checkpoints(tmp_path)  # keep 2, as both trainers
    _save(ckpts, 5, "run-a")
    _save(ckpts, 6, "run-a")
    _save(ckpts, 1, "run-b")  # a changed run starting over
    assert [p.name for p in ckpts.folders()] == ["step-000005", "step-000006"]  # its own went
    assert ckpts.latest("run-b") is None
    _save(ckpts, 7, "run-b")
    assert [p.name for p in ckpts.folders()] == ["step-000006", "step-000007"]
    assert ckpts.latest("run-a").path.name == "step-000006"


def test_fingerprint_digest():
    def fp(identity=("model", 0), lr=0.001, budget=5, data=("q1", "q2"), paced=("budget",)):
        return fingerprint(list(identity), {"lr": lr, "budget": budget}, paced=paced, data=data)

    assert fp() == "77780677c89373df"
    assert fp(budget=9) == "77780677c89373df"  # a paced setting does not change it
    # settings, identity and data (and its order) do
    changed = [fp(lr=0.002), fp(identity=("model", 1)), fp(data=("q2", "q1")), fp(paced=())]
    assert "77780677c89373df" not in changed and len(set(changed)) == 4


def test_sft_fingerprint_is_the_one_written_before_the_shared_module():
    """Digests match those of the trainers' own code before `acesql.checkpoint`: a run's
    checkpoints written then still resume."""
    from acesql.config import SftSection
    from acesql.sft.trainer import _fingerprint

    records = [
        {"prompt": "p1", "response": "r1", "role": "retriever"},
        {"prompt": "p2", "response": "SELECT 1", "role": "generator"},
    ]
    assert _fingerprint("models/base", records, SftSection(), 7) == "51d7bed92b39cb3f"
    paced = SftSection(time_budget_minutes=None, checkpoint_every=3, log_every=5)
    assert _fingerprint("models/base", records, paced, 7) == "51d7bed92b39cb3f"
    assert _fingerprint("models/base", records, SftSection(), 8) != "51d7bed92b39cb3f"
    assert _fingerprint("models/base", records, SftSection(epochs=2), 7) != "51d7bed92b39cb3f"


def test_grpo_fingerprint_is_the_one_written_before_the_shared_module():
    from acesql.config import GrpoSection
    from acesql.data.loaders import Example
    from acesql.grpo.pool import EmpiricalPool
    from acesql.grpo.trainer import run_fingerprint

    examples = [Example(0, "db1", "How many?", "SELECT count(*) FROM t", "x.sqlite")]
    pool = EmpiricalPool()
    pool.seed("k1", [["t.a", "t.b"]])
    assert run_fingerprint("models/sft", 3, GrpoSection(), examples, pool) == "615554f5524fec66"
    paced = GrpoSection(time_budget_minutes=5, checkpoint_every=1, eval_every=2)
    assert run_fingerprint("models/sft", 3, paced, examples, pool) == "615554f5524fec66"
    pool.seed("k2", [["t.a"]])
    assert run_fingerprint("models/sft", 3, GrpoSection(), examples, pool) != "615554f5524fec66"


# ------------------------------------------------------------------- room for the saves


@pytest.mark.parametrize(
    ("held", "saves", "keep", "checkpoints"),
    [
        (0, 5, 2, 3),  # the third is written before the first goes
        (0, 1, 2, 1),
        (0, 0, 2, 0),
        (2, 4, 2, 1),  # two already here: one more stands beside them at most
        (1, 3, 3, 3),
        (3, 1, 2, 0),  # more than keep already here: the next save prunes them
    ],
)
def test_bytes_needed_counts_the_checkpoints_that_stand_at_once(
    tmp_path, held, saves, keep, checkpoints
):
    ckpts = Checkpoints(tmp_path, keep=keep + 5)  # hold `held` folders without pruning them
    for step in range(1, held + 1):
        _save(ckpts, step)
    ckpts.keep = keep
    assert ckpts.bytes_needed(1000, saves) == checkpoints * 1000


def test_checkpoint_bytes_are_the_weights_and_two_moments_of_the_trainable_ones():
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2, dtype=torch.bfloat16))
    model[0].requires_grad_(False)
    trainable = [p for p in model.parameters() if p.requires_grad]
    assert weights_bytes(model.parameters()) == (12 + 4) * 4 + (8 + 2) * 2
    assert checkpoint_bytes(model, trainable) == 84 + 2 * (8 + 2) * 2


def test_saves_bytes_adds_the_weights_once_per_model_kept(tmp_path):
    model = torch.nn.Linear(3, 4)  # 16 float32 parameters, all trainable: 64 bytes
    ckpts = Checkpoints(tmp_path)  # keep 2: three checkpoints of 64 + 128 bytes at most
    assert saves_bytes(model, ckpts, 5) == 64 + 3 * 192
    assert saves_bytes(model, ckpts, 1, models=2) == 2 * 64 + 192


Usage = namedtuple("Usage", "total used free")


def test_require_free_space_says_how_much_is_missing(tmp_path, monkeypatch):
    seen = []

    def usage(path):
        seen.append(path)
        return Usage(10**12, 10**12 - 3 * 10**9, 3 * 10**9)

    monkeypatch.setattr(shutil, "disk_usage", usage)
    require_free_space(tmp_path / "models" / "grpo", 2 * 10**9, "GRPO")
    assert seen == [tmp_path]  # the nearest folder that exists
    with pytest.raises(
        DiskSpaceError, match=r"GRPO will write about 7.5 GB .* holds 3.0 GB free: free 4.5 GB"
    ):
        require_free_space(tmp_path, 7_500_000_000, "GRPO")
