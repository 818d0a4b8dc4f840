"""The checkpoint folders both trainers share: atomic saves, keep-N, fingerprints, resume."""

import json

import pytest

from acesql.checkpoint import Checkpoint, Checkpoints, fingerprint


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
