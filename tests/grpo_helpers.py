"""What the GRPO tests share: a scripted engine, small configs, trainers and stage projects
on the tiny model. Used by test_grpo, test_prm, test_distributed, test_gpu and dist_worker."""

import json

import torch
import yaml

from acesql.config import GrpoSection
from acesql.grpo.pool import EmpiricalPool
from acesql.grpo.rollout import question_key
from acesql.grpo.trainer import GrpoTrainer
from acesql.grpo.update import ScoredSequence
from tests.fakes import RoleEngine, columns_answer, sql_answer


def scripted_engine(examples, tokenizer, right_every=2) -> RoleEngine:
    """Every `right_every`-th sample answers right (gold columns / gold SQL); None: none do."""

    def right(i):
        return right_every is not None and i % right_every == 0

    def retriever(ex, n, options):
        bad = columns_answer(ex.gold_columns[:1]) if len(ex.gold_columns) > 1 else "?"
        return [columns_answer(ex.gold_columns) if right(i) else bad for i in range(n)]

    def generator(ex, n, options):
        return [sql_answer(ex.sql if right(i) else "SELECT 1 WHERE 0") for i in range(n)]

    return RoleEngine(examples, generator, retriever, tokenizer=tokenizer)


SEQS = {  # hand-made sequences for the update: prompt ids, completion ids, advantage
    "retriever": [
        ScoredSequence(list(range(5, 30)), [40 + i, 41, 42][: 1 + i], a)
        for i, a in enumerate((1.0, -0.5, -0.5))
    ],
    "generator": [
        ScoredSequence(list(range(7, 19)), [50, 51 + i], a) for i, a in enumerate((0.7, -0.7))
    ],
}


def grpo_config(**over) -> GrpoSection:
    """A small GrpoSection for tiny-model tests; `over` replaces its fields."""
    base = dict(
        learning_rate=1e-3,
        warmup_ratio=0.0,
        epochs=1,
        questions_per_step=2,
        samples=4,
        micro_batch_size=4,
        eval_every=100,
        checkpoint_every=100,
        pool_snapshot_every=100,
        generation={"max_new_tokens": 16, "batch_size": 8},
    )
    base.update(over)
    return GrpoSection(**base)


def seeded_pool(examples) -> EmpiricalPool:
    """An empirical pool seeded with each example's gold column set."""
    pool = EmpiricalPool()
    for ex in examples:
        pool.seed(question_key(ex), [ex.gold_columns])
    return pool


def grpo_trainer(tiny_model_dir, examples, tmp_path, cfg, engine_right_every=2, **kw):
    """A GrpoTrainer on the tiny model sampling from `scripted_engine`."""
    return GrpoTrainer(
        tiny_model_dir,
        examples,
        seeded_pool(examples),
        tmp_path / "grpo",
        cfg,
        progress=False,
        engine_factory=lambda model, tok: scripted_engine(examples, tok, engine_right_every),
        **kw,
    )


def stage_project(tmp_path, tiny_model_dir, synth_dir, examples, grpo):
    """A project for the grpo_data and grpo stages: the tiny model as models/sft, `examples` as
    the prepared train split; returns its params.yaml."""
    import shutil

    from acesql.data.loaders import load_dataset

    models, data = tmp_path / "models", tmp_path / "data"
    shutil.copytree(tiny_model_dir, models / "sft")
    (data / "prepared").mkdir(parents=True)
    dev = load_dataset(synth_dir, "synth", "dev").examples[:2]
    (data / "prepared" / "dev.jsonl").write_text(
        "".join(json.dumps(e.to_dict()) + "\n" for e in dev)
    )
    (data / "prepared" / "train.jsonl").write_text(
        "".join(json.dumps(e.to_dict()) + "\n" for e in examples)
    )
    params = {
        "base": {
            "data_dir": str(data),
            "models_dir": str(models),
            "results_dir": str(tmp_path / "results"),
            "tracking_uri": f"sqlite:///{tmp_path / 'mlflow.db'}",
        },
        "grpo_data": {
            "retriever_samples": 2,
            "generator_samples": 2,
            "min_correct": 0,
            "max_correct": 2,
            "generation": {"max_new_tokens": 8},
        },
        "grpo": grpo,
        "base_model": {},
        "prompt": {},
    }
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    return path


def rl_project(tmp_path, tiny_model_dir, synth_dir, examples, grpo):
    """A grpo-ready project: `stage_project` plus grpo_data's outputs (every example, the pool
    seeded with its gold columns)."""
    params = stage_project(tmp_path, tiny_model_dir, synth_dir, examples, grpo)
    rl = tmp_path / "data" / "grpo"
    rl.mkdir(parents=True)
    (rl / "train.jsonl").write_text("".join(json.dumps(e.to_dict()) + "\n" for e in examples))
    seeded_pool(examples).save(rl / "initial_pool.json")
    return params


def sgd_update(model_dir, device="cpu", **kw):
    """A fresh fp32 policy and reference under one DualRoleUpdate by SGD (lr 0.1, beta 0.01);
    `kw` goes to DualRoleUpdate (bf16 autocast off unless given)."""
    from acesql.grpo.update import DualRoleUpdate
    from acesql.models.base_model import load_model

    torch.manual_seed(0)
    model = load_model(model_dir, dtype="float32", device=device)
    ref = load_model(model_dir, dtype="float32", device=device)
    options = dict(beta=0.01, bf16_autocast=False, micro_batch_size=2) | kw
    return DualRoleUpdate(model, torch.optim.SGD(model.parameters(), lr=0.1), None, ref, **options)
