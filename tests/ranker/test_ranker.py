"""The ranker role's training: pairs from candidates, the consistency reward, the trainer and
its two stages."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
import yaml

from acesql.config import RankerSection
from acesql.data.loaders import load_dataset
from acesql.ranker.pairs import RankerPair, build_pairs, read_pairs, write_pairs
from acesql.sql.batch_executor import BatchExecutor
from tests.fakes import RoleEngine, sql_answer
from tests.helpers import run_stage, write_prepared


def scripted(examples, answers) -> RoleEngine:
    """The retriever names the gold columns; generator sample i answers `answers(ex, i)`."""
    return RoleEngine(examples, lambda ex, n, o: [sql_answer(answers(ex, i)) for i in range(n)])


def render(context, a, b):
    return f"{context.question}|A={a.sql}|B={b.sql}"


@pytest.fixture(scope="module")
def prompts(tiny_model_dir):
    from acesql.models.base_model import load_tokenizer
    from acesql.models.prompts import PromptBuilder

    return PromptBuilder(load_tokenizer(tiny_model_dir))


def test_pairs_join_a_correct_and_a_wrong_group_in_both_orders(synth_dir, prompts):
    examples = load_dataset(synth_dir, "synth", "train").examples[:3]

    # sample 0: the gold; 1: another answer; 2: fails; 3: the gold again (same group as 0).
    # The last question's samples are all right: no wrong group, no pair.
    def answers(ex, i):
        if ex is examples[-1]:
            return ex.sql
        return [ex.sql, "SELECT 424242", "SELEC broken", ex.sql][i]

    with BatchExecutor(workers=0) as executor:
        pairs, stats = build_pairs(
            examples, scripted(examples, answers), prompts, render, executor, candidates=4
        )
    assert stats.to_dict() == {
        "questions": 3,
        "questions_with_pairs": 2,
        "pairs": 2,
        "skipped": {"all_right": 1, "unusable": 0},
    }
    for pair, ex in zip(pairs, examples):
        assert (pair.right_sql, pair.wrong_sql) == (ex.sql, "SELECT 424242")
        assert pair.right_first == f"{ex.question}|A={ex.sql}|B=SELECT 424242"
        assert pair.right_second == f"{ex.question}|A=SELECT 424242|B={ex.sql}"
        assert pair.key == f"{ex.db_id}#{ex.index}"


def test_pairs_round_trip_and_a_missing_file_names_the_stage(tmp_path):
    from acesql.errors import DataError

    pairs = [RankerPair("db#1", "SELECT 1", "SELECT 2", "first", "second")]
    write_pairs(tmp_path / "p.jsonl", pairs)
    assert read_pairs(tmp_path / "p.jsonl") == pairs
    with pytest.raises(DataError, match="run the ranker_data stage"):
        read_pairs(tmp_path / "none.jsonl")
    (tmp_path / "bad.jsonl").write_text('{"key": "x"}\n')
    with pytest.raises(DataError, match="does not hold ranker pairs"):
        read_pairs(tmp_path / "bad.jsonl")


def test_held_out_judgments_by_hand(monkeypatch):
    import acesql.ranker.trainer as trainer

    # P(A) per prompt, in order: pair 1 (right first, right second), pair 2 (same)
    p_a = torch.tensor([0.9, 0.2, 0.8, 0.7])
    vocab = torch.full((4, 5), -30.0)
    vocab[:, 1], vocab[:, 2] = p_a.log(), (1 - p_a).log()
    monkeypatch.setattr(trainer, "next_token_logprobs", lambda *a, **k: vocab)
    pairs = [RankerPair("k", "r", "w", "f", "s")] * 2
    scores = trainer.judge_pairs(None, None, pairs, (1, 2))
    # pair 1 right in both orders; pair 2 picks A twice (inconsistent) but averages to
    # 0.5 * (0.8 + 1 - 0.7) = 0.55 > 0.5; bias: mean(0.9, 0.2, 0.8, 0.7) - 0.5
    assert scores == {
        "pairs": 2,
        "consistent_accuracy": 0.5,
        "averaged_accuracy": 1.0,
        "position_bias": 0.15,
    }


def _pairs(n: int) -> list[RankerPair]:
    return [
        RankerPair(f"db#{i}", "SELECT 1", "SELECT 2", f"Q{i}: A is right?", f"Q{i}: B is right?")
        for i in range(n)
    ]


def test_the_trainer_samples_both_orders_updates_and_resumes(tiny_model_dir, tmp_path):
    from acesql.ranker.trainer import RankerTrainer

    cfg = RankerSection(
        steps=3,
        pairs_per_step=2,
        samples=4,
        temperature=50.0,  # near-uniform answers over a tiny vocabulary: letters come up
        learning_rate=1e-3,
        beta=0.0,
        eval_every=0,
        checkpoint_every=2,
    )
    trainer = RankerTrainer(tiny_model_dir, _pairs(5), cfg, held_out=_pairs(2), device="cpu")
    calls = []
    real_step = trainer.step

    def stop_at_third(batch, step):
        if step == 2:
            raise KeyboardInterrupt("killed")
        calls.append([p.key for p in batch])
        return real_step(batch, step)

    trainer.step = stop_at_third
    with pytest.raises(KeyboardInterrupt):
        trainer.train(tmp_path / "out")
    assert len(calls) == 2 and all(len(keys) == 2 for keys in calls)
    assert (tmp_path / "out" / "checkpoints" / "step-000002").is_dir()
    record = trainer.history[0]
    assert 0 <= record["reward_mean"] <= 1 and 0 <= record["letter_rate"] <= 1
    assert trainer.evaluations[0]["step"] == 0 and trainer.evaluations[0]["pairs"] == 2

    again = RankerTrainer(tiny_model_dir, _pairs(5), cfg, held_out=_pairs(2), device="cpu")
    summary = again.train(tmp_path / "out")
    assert summary["steps"] == 3 and again.history[:2] == trainer.history
    assert [e["step"] for e in summary["evaluations"]] == [0, 3]  # before, then after
    # three steps: the first and the last alone, never a window that shares a step
    assert summary["window_steps"] == 1
    assert summary["reward_mean_first5"] == round(again.history[0]["reward_mean"], 4)
    assert summary["reward_mean_last5"] == round(again.history[-1]["reward_mean"], 4)
    assert (tmp_path / "out" / "model.safetensors").is_file()
    assert set(again._batch(0)) | set(again._batch(1)) <= set(_pairs(5))


def test_an_all_equal_group_carries_no_signal(tiny_model_dir, monkeypatch):
    import acesql.ranker.trainer as trainer_module
    from acesql.ranker.trainer import RankerTrainer

    cfg = RankerSection(steps=1, pairs_per_step=1, samples=4, beta=0.0, eval_every=0)
    trainer = RankerTrainer(tiny_model_dir, _pairs(1), cfg, device="cpu")
    a, b = trainer.letters
    vocab = trainer.tokenizer.vocab_size if hasattr(trainer.tokenizer, "vocab_size") else 64
    always_a = torch.full((2, max(vocab, a + 1, b + 1)), -1e9)
    always_a[:, a] = 0.0  # both orders answer A: never consistent, reward 0 for all
    monkeypatch.setattr(trainer_module, "next_token_logprobs", lambda *x, **k: always_a)
    record = trainer.step(_pairs(1), 0)
    assert record["reward_mean"] == 0.0 and record["groups_with_signal"] == 0
    assert record["updated"] == 0.0 and record["letter_rate"] == 1.0


def _project(tmp_path, synth_dir, tiny_model_dir):
    data = tmp_path / "data"
    write_prepared(data, synth_dir, ("train", "dev"))
    shutil.copytree(tiny_model_dir, tmp_path / "models" / "grpo")
    model = str(tmp_path / "models" / "grpo")
    params = {
        "base": {
            "data_dir": str(data),
            "models_dir": str(tmp_path / "models"),
            "tracking_uri": f"sqlite:///{tmp_path / 'mlflow.db'}",
        },
        "base_model": {},
        "prompt": {},
        "ranker_data": {
            "model": model,
            "max_questions": 2,
            "eval_questions": 1,
            "candidates": 2,
            "generation": {"max_new_tokens": 4},
        },
        "ranker": {
            "model": model,
            "steps": 2,
            "pairs_per_step": 1,
            "samples": 2,
            "train_layers": None,
        },
    }
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    return path


@pytest.mark.slow  # a whole stage (or several) in subprocesses
def test_the_stages_say_when_no_pair_exists_and_train_on_given_pairs(
    tmp_path, synth_dir, tiny_model_dir
):
    params = _project(tmp_path, synth_dir, tiny_model_dir)
    # a random model writes no SQL: every question is "none_ran", and the stage says so
    proc = run_stage("ranker_data", params)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "no train question with both a correct and a wrong candidate" in proc.stderr
    assert "none_ran" in proc.stderr and not (tmp_path / "data" / "ranker").exists()
    proc = run_stage("ranker", params)
    assert proc.returncode == 2 and "run the ranker_data stage" in proc.stderr
    write_pairs(tmp_path / "data" / "ranker" / "train.jsonl", _pairs(3))
    write_pairs(tmp_path / "data" / "ranker" / "held_out.jsonl", _pairs(1))
    proc = run_stage("ranker", params)
    assert proc.returncode == 0, proc.stderr[-2000:]
    metrics = json.loads((tmp_path / "models" / "ranker_metrics.json").read_text())
    assert metrics["steps"] == 2 and len(metrics["history"]) == 2
    assert metrics["held_out_before/pairs"] == metrics["held_out_after/pairs"] == 1
    assert (tmp_path / "models" / "ranker" / "model.safetensors").is_file()
    assert (tmp_path / "models" / "grpo" / "model.safetensors").is_file()  # kept as it was
