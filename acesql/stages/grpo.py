"""The `grpo` stage: joint dual-role GRPO from the SFT model (the ACE-SQL paper, section 3.3).

    python -m acesql.stages.grpo [--params params.yaml]

With `distributed.processes` (times `nodes`) above 1 the stage relaunches itself under
`torchrun`; each process rolls out its share of every step (`acesql.grpo.trainer`).

Reads `base`, `base_model`, `prompt`, `grpo` and `distributed`; `{models_dir}/sft`,
`{data_dir}/grpo/train.jsonl` and `{data_dir}/grpo/initial_pool.json`; validates on a fixed
slice of the prepared `grpo.eval_split`. Writes the model to `{models_dir}/grpo` (the best
validated one under `best/`, checkpoints under `checkpoints/`, pool snapshots under `pool/`,
per-step records in `steps.jsonl`, curves in `curves.png`) and
`{models_dir}/grpo_metrics.json`. A killed run resumes from its last checkpoint, in the same
MLflow run.
"""

from __future__ import annotations

import shutil
import sys

from acesql.data.filtering import filter_examples
from acesql.data.loaders import read_prepared
from acesql.distributed import close, init_from_env
from acesql.errors import DataError
from acesql.grpo.pool import EmpiricalPool
from acesql.grpo.trainer import GrpoTrainer, latest_checkpoint, run_fingerprint
from acesql.stages.common import relaunch, run_stage, write_metrics
from acesql.staging import replace_dir

SECTIONS = ("base", "base_model", "prompt", "grpo", "distributed")


def _inputs(s: dict):

    base = s["base"]
    model_dir = base.models_dir / "sft"
    if not model_dir.is_dir():
        raise DataError(f"{model_dir} not found: run the sft stage first (dvc repro sft)")
    questions_dir = base.data_dir / "grpo"
    if not (questions_dir / "train.jsonl").is_file():
        raise DataError(f"{questions_dir / 'train.jsonl'} not found: run dvc repro grpo_data first")
    examples = read_prepared(questions_dir / "train.jsonl")
    pool = EmpiricalPool.load(questions_dir / "initial_pool.json")
    pool.gamma = s["grpo"].gamma
    return model_dir, examples, pool


def _resume_run(s: dict) -> str | None:

    try:
        model_dir, examples, pool = _inputs(s)
    except DataError:
        return None
    fp = run_fingerprint(model_dir, s["base"].seed, s["grpo"], examples, pool)
    found = latest_checkpoint(s["base"].models_dir / "grpo" / "checkpoints", fp)
    return found.state.get("tracker_run_id") if found else None


def _no_questions(model_dir, out_dir, metrics_path) -> dict:
    """Nothing to learn from: the output is the SFT model, and the metrics say why."""
    print(
        "warning: data/grpo/train.jsonl holds no question: the SFT model solved every rolled-out "
        "question always or never (see data/grpo_metrics.json). GRPO is skipped and models/grpo "
        "is the SFT model; roll out more questions or widen grpo_data's bounds.",
        file=sys.stderr,
    )
    with replace_dir(out_dir) as new:
        shutil.copytree(
            model_dir, new, ignore=shutil.ignore_patterns("checkpoints"), dirs_exist_ok=True
        )
    summary = {"steps": 0, "stop_reason": "no_rl_questions", "questions": 0}
    write_metrics(metrics_path, summary, "grpo")
    return summary


def work(s: dict, tracker) -> dict:
    from acesql.eval.end_to_end import Validation

    base, cfg, d = s["base"], s["grpo"], s["distributed"]
    model_dir, examples, pool = _inputs(s)
    dist = init_from_env(d.sharding, d.backend, d.timeout_s)
    if not examples and not dist.is_main:
        return {}
    if not examples:
        return _no_questions(
            model_dir, base.models_dir / "grpo", base.models_dir / "grpo_metrics.json"
        )
    eval_examples = []
    eval_path = base.data_dir / "prepared" / f"{cfg.eval_split}.jsonl"
    if eval_path.is_file():
        eval_examples = filter_examples(
            read_prepared(eval_path), max_examples=cfg.eval_questions, seed=base.seed
        )
    trainer = GrpoTrainer(
        model_dir,
        examples,
        pool,
        base.models_dir / "grpo",
        cfg,
        seed=base.seed,
        reasoning=s["base_model"].reasoning,
        sample_values=s["prompt"].sample_values,
        sql_format=s["prompt"].sql_format,
        eval_examples=eval_examples,
        validation=Validation(cfg.match_mode, cfg.generation.max_new_tokens, base.seed),
        tracker=tracker,
        dist=dist,
    )
    trainer.state.tracker_run_id = tracker.run_id
    try:
        summary = trainer.train()
    finally:
        trainer.close()
        close(dist)
    if dist.is_main:
        write_metrics(base.models_dir / "grpo_metrics.json", summary, "grpo")
    return summary


def main(argv=None) -> None:
    relaunch("grpo", argv)
    run_stage("grpo", __doc__, SECTIONS, work, argv, resume_run=_resume_run)


if __name__ == "__main__":
    main()
