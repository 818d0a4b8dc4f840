"""The GRPO trainer and the grpo_data / grpo stages, on a tiny random model.

A scripted engine stands in for sampling where a test needs known outputs (a random model's
SQL never executes correctly, so every reward would be 0); it returns real token ids, so the
update runs the same code as with a real model.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import namedtuple

import pytest
import torch
import yaml

from acesql.data.loaders import load_dataset
from acesql.errors import DiskSpaceError
from acesql.eval.end_to_end import Validation
from acesql.grpo.pool import EmpiricalPool
from acesql.grpo.rollout import question_key
from acesql.grpo.trainer import GrpoTrainer, question_order
from acesql.grpo.update import ScoredSequence
from tests.fakes import RoleEngine, sql_answer
from tests.grpo_helpers import (
    SEQS,
    grpo_config,
    grpo_trainer,
    rl_project,
    scripted_engine,
    sgd_update,
    stage_project,
)


@pytest.fixture(scope="module")
def examples(synth_dir):
    return load_dataset(synth_dir, "synth", "train").examples[:4]


def test_question_order_is_deterministic_and_covers_epochs():
    steps = question_order(5, 2, 2, seed=0)
    assert steps == question_order(5, 2, 2, seed=0)
    flat = [i for s in steps for i in s]
    assert (
        len(flat) == 10
        and sorted(flat[:5]) == [0, 1, 2, 3, 4]
        and sorted(flat[5:]) == [0, 1, 2, 3, 4]
    )
    assert [len(s) for s in steps] == [2, 2, 2, 2, 2]
    assert len([i for s in question_order(4, 3, 0.5, 1) for i in s]) == 2


def _spy_pcgrad(monkeypatch) -> dict:
    """Copies of the two role gradients the update hands to PCGrad, before it combines them."""
    from acesql.grpo import update

    seen, real = {}, update.pcgrad_

    def spy(g_ret, g_gen, **kw):
        seen["ret"] = [None if t is None else t.detach().clone() for t in g_ret]
        seen["gen"] = [None if t is None else t.detach().clone() for t in g_gen]
        return real(g_ret, g_gen, **kw)

    monkeypatch.setattr(update, "pcgrad_", spy)
    return seen


def _dot(a, b) -> float:
    return float((a.double() * b.double()).sum())


def test_one_step_rewards_pool_and_update(tiny_model_dir, examples, tmp_path, monkeypatch):
    seen = _spy_pcgrad(monkeypatch)
    trainer = grpo_trainer(tiny_model_dir, examples, tmp_path, grpo_config(schedule=False))
    before = [p.detach().clone() for p in trainer.model.parameters()]
    record = trainer.step()
    # half of each group is right: rewards 1 for even samples, 0 for odd ones
    assert record["generator/match_rate"] == 0.5
    assert record["generator/reward_mean"] == 0.5
    assert record["retriever/match_rate"] == pytest.approx(0.5)  # gold set is the pool target
    assert record["lambda"] == 1.0 and record["updated"] == 1.0
    assert record["retriever/flat_groups"] == 0.0
    assert record["generator/update_tokens"] > 0 and record["retriever/update_tokens"] > 0
    # the statistics, recomputed from the gradients the step produced: per-tensor dot
    # products (tensor granularity) and the cosine of the two whole gradients
    pairs = [(r, g) for r, g in zip(seen["ret"], seen["gen"]) if r is not None]
    dots = [_dot(r, g) for r, g in pairs]
    norm_ret = sum(_dot(r, r) for r, _ in pairs) ** 0.5
    norm_gen = sum(_dot(g, g) for _, g in pairs) ** 0.5
    conflicts = sum(d < 0 for d in dots) / len(pairs)
    assert record["conflict_ratio"] == pytest.approx(conflicts, abs=1e-6)
    assert record["grad_cosine"] == pytest.approx(sum(dots) / (norm_ret * norm_gen), abs=1e-6)
    assert record["kl"] == pytest.approx(0.0, abs=1e-6)  # policy == reference before the step
    changed = sum(not torch.equal(a, b) for a, b in zip(before, trainer.model.parameters()))
    assert changed > 0
    # the pool: the gold set seeded with 1, decayed to 0.5, plus the 2 matched gold SQLs
    key = question_key(trainer.examples[trainer.steps[0][0]])
    assert trainer.pool.weights(key) == {
        frozenset(trainer.examples[trainer.steps[0][0]].gold_columns): 2.5
    }
    # a second step sees a KL above zero now that the policy moved
    record2 = trainer.step()
    assert record2["kl"] > 0
    trainer.close()


def test_retriever_is_scored_against_the_pool_before_the_update(tiny_model_dir, examples, tmp_path):
    wide = [e for e in examples if len(e.gold_columns) > 1][:2]
    assert len(wide) == 2, "the fixture needs questions with two or more gold columns"
    pool = EmpiricalPool()
    for ex in wide:  # the target before the step: the first gold column alone
        pool.seed(question_key(ex), [[ex.gold_columns[0]]])
    trainer = GrpoTrainer(
        tiny_model_dir,
        wide,
        pool,
        tmp_path / "grpo",
        grpo_config(schedule=False),
        progress=False,
        engine_factory=lambda model, tok: scripted_engine(wide, tok, 2),
    )
    seen = {}
    score = trainer.scoring.rewards

    def spy(rollouts, *args):
        seen["rewards"] = score(rollouts, *args)
        return seen["rewards"]

    trainer.scoring.rewards = spy
    record = trainer.step()
    # even samples name every gold column (the set the generator's 2 right SQLs used, which
    # becomes the target after the update: 2 > 0.5); odd samples name the old target alone
    for group in seen["rewards"]["retriever"]:
        assert group == [0.0, 1.0, 0.0, 1.0]
    assert record["retriever/match_rate"] == 0.5
    for ex in wide:
        assert trainer.pool.targets(question_key(ex)) == [frozenset(ex.gold_columns)]
    trainer.close()


def test_schedule_zero_lambda_means_retriever_only(tiny_model_dir, examples, tmp_path):
    trainer = grpo_trainer(tiny_model_dir, examples, tmp_path, grpo_config(schedule=True))
    record = trainer.step()
    assert record["lambda"] == 0.0
    assert record["generator/update_tokens"] == 0 and record["generator/grad_norm"] == 0.0
    assert record["retriever/grad_norm"] > 0
    trainer.close()


def test_all_wrong_groups_are_flat_and_can_be_skipped(tiny_model_dir, examples, tmp_path):
    trainer = grpo_trainer(
        tiny_model_dir,
        examples,
        tmp_path,
        grpo_config(skip_flat_groups=True),
        engine_right_every=None,
    )
    before = [p.detach().clone() for p in trainer.model.parameters()]
    record = trainer.step()
    assert record["generator/flat_groups"] == record["retriever/flat_groups"] == 1.0
    assert record["generator/reward_mean"] == record["retriever/reward_mean"] == 0.0
    assert record["generator/update_tokens"] == record["retriever/update_tokens"] == 0
    assert record["updated"] == 0.0
    assert all(torch.equal(a, b) for a, b in zip(before, trainer.model.parameters()))
    trainer.close()


class RecordingSGD(torch.optim.SGD):
    """SGD that keeps a copy of the gradients it steps with (the update clears them after)."""

    def step(self, closure=None):
        self.grads = [p.grad.clone() for group in self.param_groups for p in group["params"]]
        return super().step(closure)


def _dual_update(model_dir, **kw):
    from transformers import AutoModelForCausalLM

    from acesql.grpo.update import DualRoleUpdate

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    opt = RecordingSGD(model.parameters(), lr=0.1)
    # no KL term, no clipping: the gradient the optimizer sees is PCGrad's output itself
    return DualRoleUpdate(model, opt, beta=0.0, grad_clip=1e9, bf16_autocast=False, **kw)


def _role_gradients(model_dir, seqs):
    """g_ret and g_gen (each with weight 1), back-propagated separately on a fresh model."""
    update, grads = _dual_update(model_dir), []
    for role in ("retriever", "generator"):
        update.optimizer.zero_grad(set_to_none=True)
        update.backward(seqs[role], 1.0)
        grads.append([p.grad.clone() for p in update.params])
    return grads


def test_pcgrad_switch_changes_the_update(tiny_model_dir):
    # the same tokens with opposite advantages: lambda x g_gen = -lambda x g_ret, a conflict
    # in every tensor. PCGrad projects each gradient onto the other's normal plane, which
    # removes all of an antiparallel vector: the update is 0. The plain sum is (1 - lam) g_ret.
    same = (list(range(5, 20)), [40, 41, 42])
    seqs = {"retriever": [ScoredSequence(*same, 1.0)], "generator": [ScoredSequence(*same, -1.0)]}
    lam = 0.5
    [g_ret, _] = _role_gradients(tiny_model_dir, seqs)
    for on in (True, False):
        update = _dual_update(tiny_model_dir, pcgrad=on)
        stats = update(seqs, lam)
        assert stats["conflict_ratio"] == 1.0 and stats["grad_cosine"] == pytest.approx(-1.0)
        for got, r in zip(update.optimizer.grads, g_ret):
            expected = torch.zeros_like(r) if on else (1 - lam) * r
            torch.testing.assert_close(got, expected, atol=1e-6, rtol=1e-4)
    assert any(float(r.abs().max()) > 1e-3 for r in g_ret)  # g_ret != 0: 0 != (1 - lam) g_ret


def _pcgrad_by_hand(r, g):
    """PCGrad's definition: each projected onto the other's normal plane when they conflict."""
    d = _dot(r, g)
    if d >= 0:
        return r + g
    return (r - d / _dot(g, g) * g) + (g - d / _dot(r, r) * r)


def test_combined_gradient_is_pcgrad_of_the_weighted_generator_gradient(tiny_model_dir):
    lam = 0.3
    g_ret, g_gen = _role_gradients(tiny_model_dir, SEQS)
    update = _dual_update(tiny_model_dir)
    stats = update(SEQS, lam)
    conflicts = 0
    for got, r, g in zip(update.optimizer.grads, g_ret, g_gen):
        torch.testing.assert_close(got, _pcgrad_by_hand(r, lam * g), atol=1e-6, rtol=1e-4)
        conflicts += _dot(r, g) < 0
    # both branches of the formula were exercised: some tensors conflict, some do not
    assert 0 < conflicts < len(g_ret)
    assert stats["conflict_ratio"] == pytest.approx(conflicts / len(g_ret))
    assert stats["generator/grad_norm"] == pytest.approx(
        lam * sum(_dot(g, g) for g in g_gen) ** 0.5, rel=1e-4
    )


def test_train_writes_outputs_and_checkpoints(tiny_model_dir, examples, tmp_path):
    cfg = grpo_config(checkpoint_every=1, pool_snapshot_every=1, eval_every=1, max_steps=2)
    validation = Validation(cfg.match_mode, cfg.generation.max_new_tokens, 0)
    trainer = grpo_trainer(
        tiny_model_dir, examples, tmp_path, cfg, eval_examples=examples[:2], validation=validation
    )
    summary = trainer.train()
    trainer.close()
    out = tmp_path / "grpo"
    assert summary["steps"] == 2 and summary["stop_reason"] == "steps"
    assert (out / "model.safetensors").is_file() and (out / "best" / "model.safetensors").is_file()
    steps = [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps] == [1, 2]
    assert "val/pipeline_ex" in steps[0] and "val/full_schema_ex" in steps[0]
    # two steps: the first and last windows are one step each, not both steps twice
    assert summary["window_steps"] == 1
    for role in ("retriever", "generator"):
        assert summary[f"{role}_reward_mean_first5"] == round(steps[0][f"{role}/reward_mean"], 4)
        assert summary[f"{role}_reward_mean_last5"] == round(steps[1][f"{role}/reward_mean"], 4)
    assert (out / "curves.png").stat().st_size > 1000
    assert sorted(p.name for p in (out / "pool").iterdir()) == [
        "step-000001.json",
        "step-000002.json",
    ]
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step-000001", "step-000002"]
    assert EmpiricalPool.load(out / "pool.json").to_dict() == trainer.pool.to_dict()


def test_train_stops_before_the_first_step_when_the_disk_is_short(
    tiny_model_dir, examples, tmp_path, monkeypatch
):
    trainer = grpo_trainer(tiny_model_dir, examples, tmp_path, grpo_config(max_steps=2))
    stepped = []
    monkeypatch.setattr(trainer, "step", lambda: stepped.append(1))
    free = namedtuple("Usage", "total used free")(10**9, 10**9 - 1000, 1000)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: free)
    with pytest.raises(DiskSpaceError, match="GRPO will write about"):
        trainer.train()
    trainer.close()
    assert stepped == [] and not (tmp_path / "grpo" / "checkpoints").exists()


# ------------------------------------------------------------------- the stages, killed


def _run(module, params, **kw):
    env = dict(os.environ, MLFLOW_DISABLE_TELEMETRY="true", TOKENIZERS_PARALLELISM="false")
    return subprocess.Popen(
        [sys.executable, "-m", module, "--params", str(params)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        **kw,
    )


@pytest.mark.slow  # a whole stage (or several) in subprocesses
def test_grpo_data_stage_keeps_bounded_questions(tmp_path, tiny_model_dir, synth_dir, examples):
    params = stage_project(tmp_path, tiny_model_dir, synth_dir, examples, {})
    proc = _run("acesql.stages.grpo_data", params)
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err[-2000:]
    metrics = json.loads((tmp_path / "data" / "grpo_metrics.json").read_text())
    assert metrics["considered"] == len(examples)
    # a random model never matches: 0 correct of 2 is inside [0, 2] but seeds no column set
    assert metrics["correct_histogram"] == {"0": len(examples)}
    assert metrics["dropped"] == {"no_extractable_columns": len(examples)}
    assert metrics["kept"] == 0
    assert (tmp_path / "data" / "grpo" / "train.jsonl").read_text() == ""
    assert len(EmpiricalPool.load(tmp_path / "data" / "grpo" / "initial_pool.json")) == 0
    # bounds that cannot hold are refused with one message
    bad = yaml.safe_load(params.read_text())
    bad["grpo_data"]["min_correct"] = 3
    params.write_text(yaml.safe_dump(bad))
    proc = _run("acesql.stages.grpo_data", params)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2 and "min_correct <= max_correct" in err


def count_engine(examples, k) -> RoleEngine:
    """The retriever names the gold columns; the generator's first k[question] SQLs are gold."""

    def generator(ex, n, options):
        right = k[ex.question]
        return [sql_answer(ex.sql)] * right + [sql_answer("SELECT 1 WHERE 0")] * (n - right)

    return RoleEngine(examples, generator)


def test_grpo_data_keeps_questions_between_the_bounds(tiny_model_dir, examples):
    from acesql.data.schemas import SchemaCache
    from acesql.grpo.data import build_grpo_data
    from acesql.models.base_model import load_tokenizer
    from acesql.models.prompts import PromptBuilder
    from acesql.sql.batch_executor import BatchExecutor

    # question i gets i of 3 SQLs right; bounds [1, 2]: 0 is too hard, 3 too easy
    engine = count_engine(examples, {ex.question: i for i, ex in enumerate(examples)})
    prompts = PromptBuilder(load_tokenizer(tiny_model_dir))
    with BatchExecutor(workers=0) as executor:
        kept, pool, stats = build_grpo_data(
            examples,
            engine,
            prompts,
            SchemaCache(0),
            executor,
            n_retriever=2,
            n_generator=3,
            min_correct=1,
            max_correct=2,
        )
    assert [e.index for e in kept] == [examples[1].index, examples[2].index]
    assert stats.to_dict()["correct_histogram"] == {"0": 1, "1": 1, "2": 1, "3": 1}
    assert dict(stats.dropped) == {"too_hard": 1, "too_easy": 1} and stats.kept == 2
    # each kept question's pool: its gold column set, counted once per correct SQL
    assert sorted(pool.questions()) == sorted(question_key(e) for e in examples[1:3])
    for n, ex in ((1, examples[1]), (2, examples[2])):
        assert pool.weights(question_key(ex)) == {frozenset(ex.gold_columns): n}


@pytest.mark.slow
def test_grpo_stage_resumes_after_sigkill(tmp_path, tiny_model_dir, synth_dir, examples):
    grpo = dict(
        epochs=3,
        questions_per_step=2,
        samples=2,
        learning_rate=1e-4,
        checkpoint_every=1,
        eval_every=3,
        eval_questions=2,
        pool_snapshot_every=2,
        generation={"max_new_tokens": 12, "batch_size": 8},
    )
    params = rl_project(tmp_path, tiny_model_dir, synth_dir, examples, grpo)
    ckpts = tmp_path / "models" / "grpo" / "checkpoints"

    proc = _run("acesql.stages.grpo", params)
    deadline = time.time() + 300
    while time.time() < deadline and not (ckpts / "step-000002" / "state.json").is_file():
        assert proc.poll() is None, proc.stderr.read()[-2000:]
        time.sleep(0.2)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    killed_at = max(
        int(p.name.split("-")[1]) for p in ckpts.glob("step-*") if (p / "state.json").is_file()
    )
    assert 2 <= killed_at < 6
    pool_at_kill = EmpiricalPool.load(ckpts / f"step-{killed_at:06d}" / "pool.json").to_dict()

    proc = _run("acesql.stages.grpo", params)
    _, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err[-2000:]
    summary = json.loads((tmp_path / "models" / "grpo_metrics.json").read_text())
    assert summary["resumed_from_step"] == killed_at and summary["steps"] == 6
    lines = (tmp_path / "models" / "grpo" / "steps.jsonl").read_text().splitlines()
    steps = [json.loads(line)["step"] for line in lines]
    assert steps == [1, 2, 3, 4, 5, 6]
    state = json.loads((ckpts / "step-000006" / "state.json").read_text())
    assert state["history"][killed_at - 1]["step"] == killed_at
    # the resumed run continued from the checkpoint's pool: same questions, weights decayed on
    resumed_pool = EmpiricalPool.load(tmp_path / "models" / "grpo" / "pool.json")
    assert set(resumed_pool.questions()) >= set(pool_at_kill["questions"])

    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp = client.get_experiment_by_name("acesql")
    runs = client.search_runs([exp.experiment_id], filter_string="tags.stage = 'grpo'")
    assert len(runs) == 1  # the resumed attempt reopened the killed run
    history = client.get_metric_history(runs[0].info.run_id, "grpo/lambda")
    assert sorted(m.step for m in history) == [1, 2, 3, 4, 5, 6]  # each step exactly once


@pytest.mark.slow  # a whole stage (or several) in subprocesses
def test_grpo_stage_without_questions_keeps_the_sft_model(
    tmp_path, tiny_model_dir, synth_dir, examples
):
    params = stage_project(tmp_path, tiny_model_dir, synth_dir, examples, {})
    rl = tmp_path / "data" / "grpo"
    rl.mkdir(parents=True)
    (rl / "train.jsonl").write_text("")
    EmpiricalPool().save(rl / "initial_pool.json")
    proc = _run("acesql.stages.grpo", params)
    _, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err[-2000:]
    assert "GRPO is skipped" in err
    metrics = json.loads((tmp_path / "models" / "grpo_metrics.json").read_text())
    assert metrics["stop_reason"] == "no_rl_questions" and metrics["steps"] == 0
    sft = (tmp_path / "models" / "sft" / "model.safetensors").read_bytes()
    assert (tmp_path / "models" / "grpo" / "model.safetensors").read_bytes() == sft


def test_shared_prompt_update_equals_the_full_one(tiny_model_dir):
    results = []
    for share in (True, False):
        update = sgd_update(tiny_model_dir, share_prompts=share)
        stats = update(SEQS, 0.5)
        results.append((stats, [p.detach().clone() for p in update.model.parameters()]))
    (s1, p1), (s2, p2) = results
    for key in ("retriever/loss", "generator/loss", "retriever/grad_norm", "conflict_ratio"):
        assert s1[key] == pytest.approx(s2[key], rel=1e-4, abs=1e-6), key
    for a, b in zip(p1, p2):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize(
    ("reasoning", "text", "reason", "rewarded"),
    [
        (False, "```sql\n{sql}\n```", "stop", True),
        (False, "```sql\n{sql}\n```", "length", False),  # cut off: both roles earn nothing
        (True, "```sql\n{sql}\n```", "stop", False),  # reasoning on: no </think>
        (True, "<think>joins</think>\n```sql\n{sql}\n```", "stop", True),
        (True, "<think>joins</think>\n```sql\n{sql}", "stop", False),  # the block never closes
    ],
)
def test_format_gate_in_rollouts(tiny_model_dir, examples, reasoning, text, reason, rewarded):
    from acesql.data.schemas import SchemaCache
    from acesql.grpo.rollout import rollout
    from acesql.models.base_model import load_tokenizer
    from acesql.models.prompts import PromptBuilder
    from acesql.sql.batch_executor import BatchExecutor

    prompts = PromptBuilder(load_tokenizer(tiny_model_dir), reasoning=reasoning)
    with BatchExecutor(workers=0) as executor:
        [r] = rollout(
            examples[:1],
            RoleEngine(examples, lambda ex, n, o: [text.format(sql=ex.sql)] * n, reason=reason),
            prompts,
            SchemaCache(0),
            executor,
            n_retriever=2,
            n_generator=2,
        )
    assert r.matched == [rewarded, rewarded]
    assert (r.matched_sets != []) == rewarded
    if reason == "length":
        assert r.retrieved == [None, None] and r.fell_back
    else:
        assert r.retrieved == [frozenset(examples[0].gold_columns)] * 2
