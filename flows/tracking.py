"""The flows' MLflow tasks: the pipeline's parent run, DVC hashes on stage runs, the registry.

The pipeline flow opens one parent run (`pipeline <time>`) and hands its id to every stage
process (`ACESQL_PARENT_RUN_ID`, read by `acesql.tracking.make_tracker`), so each stage's run
is its child. After `dvc repro <stage>`, `tag_stage` copies what DVC recorded in dvc.lock onto
the stage's run (found by its `stage` and `prefect.flow_run_id` tags) and onto the parent.
After the evaluate stage, `register_model` registers the evaluated model (`evaluate.model`)
with each split's metrics and report (`results/<split>/`) and, for a GRPO model, its pools.

Registering copies no weights by default: the version's source is the parent run's `model/`
artifact folder, holding the model folder's small files (config, tokenizer, chat template)
and `weights.json`, which names the weight files and the DVC output hash that `dvc pull` at
the run's commit restores them from. A `file://` source pointing at the model folder itself
would be free but does not work: a tracking server refuses a local path outside the run's
artifacts as a source, and the folder is overwritten by the next run. `log_weights=True`
copies the weights too (the default model is ~540 MB), for a version that loads on its own.

These tasks talk to the tracking store, so they retry when it (or the artifact store behind
it) is unreachable or overloaded, and never on an error that would repeat.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

import yaml
from botocore.exceptions import ClientError, HTTPClientError
from botocore.exceptions import ConnectionError as BotoConnectionError
from mlflow.exceptions import MlflowException
from prefect import get_run_logger, task
from prefect.runtime import flow_run
from prefect.tasks import exponential_backoff
from requests.exceptions import ConnectionError as RequestsConnectionError
from requests.exceptions import Timeout

from acesql.config import load_section
from acesql.errors import DataError
from acesql.stages.headlines import stage_headlines
from acesql.tracking import FLOW_RUN_TAG, PARENT_RUN_TAG
from flows.runs import NullRuns, dvc_out_md5, dvc_stage_tags, pipeline_runs

PARAMS = Path("params.yaml")
LOCK = Path("dvc.lock")
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")
EVAL_NUMBERS = ("pipeline_ex", "maj_ex", "generator_ex")  # per split, in the version's tags
# MLflow's codes for a server that is there but cannot answer now
TRANSIENT_MLFLOW_CODES = {"TEMPORARILY_UNAVAILABLE", "REQUEST_LIMIT_EXCEEDED", "DEADLINE_EXCEEDED"}
TRANSIENT_S3_CODES = {
    "RequestTimeout",
    "SlowDown",
    "Throttling",
    "ThrottlingException",
    "InternalError",
    "ServiceUnavailable",
}


def is_transient(error: BaseException | None) -> bool:
    """Whether `error` says a store was unreachable or overloaded (worth retrying later).

    MLflow's REST client already retries a request a few times; an `API request to ...`
    error with no more specific code is what it raises once it has given up on the server.
    """
    if isinstance(error, ConnectionError | TimeoutError | RequestsConnectionError | Timeout):
        return True
    if isinstance(error, BotoConnectionError | HTTPClientError):  # refused, closed, timed out
        return True
    if isinstance(error, ClientError):
        return error.response.get("Error", {}).get("Code") in TRANSIENT_S3_CODES
    if isinstance(error, MlflowException):
        message = str(error)
        return (
            error.error_code in TRANSIENT_MLFLOW_CODES
            or (error.error_code == "INTERNAL_ERROR" and message.startswith("API request to"))
            or "database is locked" in message  # sqlite store, another writer
        )
    return False


def _retry_if_transient(task, task_run, state) -> bool:
    """Prefect's retry condition: retry only when the failure was a transient store error."""
    return is_transient(state.result(raise_on_failure=False))


tracking_task = task(
    retries=3,
    retry_delay_seconds=exponential_backoff(backoff_factor=10),
    retry_jitter_factor=0.5,
    retry_condition_fn=_retry_if_transient,
)


def _tracker() -> NullRuns:
    return pipeline_runs(load_section(PARAMS, "base"))


@tracking_task(task_run_name="open the pipeline's MLflow run")
def open_pipeline_run(options: dict) -> str | None:
    """The parent run of this pipeline: params.yaml as written, and the flow's `options`.

    None when tracking is off (`base.tracking_uri: null`). The file is not validated here:
    each stage checks its own sections, and fails on them alone.
    """
    params = {**(yaml.safe_load(PARAMS.read_text()) or {}), "flow": options}
    tags = {"stage": "pipeline", FLOW_RUN_TAG: str(flow_run.id)}
    run_id = _tracker().open_run(f"pipeline {time.strftime('%Y-%m-%d %H:%M:%S')}", params, tags)
    if run_id:
        get_run_logger().info("MLflow parent run %s", run_id)
    return run_id


@tracking_task(task_run_name="close the pipeline's MLflow run ({status})")
def close_pipeline_run(run_id: str | None, status: str) -> None:
    _tracker().close_run(run_id, status)


def end_killed_pipeline_run(run_id: str | None) -> None:
    """End the pipeline's run, and the stage runs under it still running, as KILLED.

    A plain function: a cancelled flow calls it while it is torn down.
    """
    if run_id is None:
        return
    tracker = _tracker()
    for child in tracker.find_runs({PARENT_RUN_TAG: run_id}, status="RUNNING"):
        tracker.close_run(child, "KILLED")
    tracker.close_run(run_id, "KILLED")


@tracking_task(task_run_name="tag {stage}'s MLflow runs with dvc.lock")
def tag_stage(stage: str, parent_run_id: str | None) -> None:
    """Tag the stage's runs of this flow run, and the parent run, with its dvc.lock entry.

    A stage DVC skipped (nothing changed) has no run here: the parent's tags still name the
    cached outputs the pipeline used. The parent also gets the stage's headline numbers
    (`flows.runs.HEADLINES`), so two pipeline runs compare in MLflow without their children.
    """
    tags = dvc_stage_tags(LOCK, stage)
    tracker = _tracker()
    for run_id in tracker.find_runs({"stage": stage, FLOW_RUN_TAG: str(flow_run.id)}):
        tracker.set_tags(run_id, tags)
    if parent_run_id:
        tracker.set_tags(
            parent_run_id, {f"dvc.{stage}.{k.removeprefix('dvc.')}": v for k, v in tags.items()}
        )
        tracker.log_metrics(parent_run_id, stage_headlines(LOCK, stage))


@tracking_task(task_run_name="log {stage}'s wall time on the pipeline's MLflow run")
def log_stage_time(parent_run_id: str | None, stage: str, seconds: float) -> None:
    """`wall_s.<stage>`: how long the stage took in this pipeline (a skipped one: DVC's check)."""
    if parent_run_id:
        _tracker().log_metrics(parent_run_id, {f"wall_s.{stage}": round(seconds, 1)})


@tracking_task(task_run_name="register the evaluated model")
def register_model(parent_run_id: str | None, name: str, log_weights: bool = False) -> str | None:
    """Register `evaluate.model` under `name` with its eval metrics; the version, or None.

    A model whose evaluate stage is unchanged since a registered version (same dvc.lock
    entries, same weights choice) is not registered twice: the parent run is tagged with
    that version instead.
    """
    if parent_run_id is None:
        return None
    logger = get_run_logger()
    base, evaluate = load_section(PARAMS, "base"), load_section(PARAMS, "evaluate")
    model_dir = Path(evaluate.model)
    if not model_dir.is_dir():
        raise DataError(f"{model_dir}/ not found: evaluate.model names no model folder")
    metrics = read_eval_metrics(base.results_dir, evaluate.splits)
    key = {
        "dvc.evaluate.stage_md5": dvc_stage_tags(LOCK, "evaluate").get("dvc.stage_md5", ""),
        "acesql.weights": "artifact" if log_weights else "dvc",
    }
    tracker = _tracker()
    version = tracker.find_model_version(name, key)
    if version:
        logger.info("%s version %s is this model, evaluated the same way: kept", name, version)
    else:
        out = dvc_out_md5(LOCK, model_dir)
        tags = {**key, **eval_tags(metrics), "acesql.model": str(model_dir)}
        if out:
            tags.update({"dvc.model_out": out[0], "dvc.model_md5": out[1]})
        with tempfile.TemporaryDirectory() as staging:
            folder = stage_model_folder(
                Path(staging), model_dir, base.results_dir, list(metrics), out, log_weights
            )
            description = eval_description(str(model_dir), metrics)
            version = tracker.register_model(name, parent_run_id, folder, tags, description)
        logger.info("registered %s version %s from %s", name, version, model_dir)
    tracker.set_tags(parent_run_id, {"acesql.registered_model": f"{name}/{version}"})
    return version


def read_eval_metrics(results_dir: Path, splits: list[str]) -> dict[str, dict]:
    """The evaluate stage's summary of each split (`<results_dir>/<split>/metrics.json`)."""
    metrics = {}
    for split in splits:
        path = results_dir / split / "metrics.json"
        if not path.is_file():
            raise DataError(f"{path} not found: the evaluate stage writes it (dvc repro evaluate)")
        metrics[split] = json.loads(path.read_text())
    return metrics


def stage_model_folder(
    staging: Path,
    model_dir: Path,
    results_dir: Path,
    splits: list[str],
    dvc_out: tuple[str, str] | None,
    log_weights: bool,
) -> Path:
    """The folder a version's source is made of, as links in `staging`.

    The model folder's top-level files (a GRPO model's final pool, `pool.json`, among them;
    its checkpoints are left out), without the weights unless `log_weights` (then
    `weights.json` says where they are); `eval/<split>/`: the split's metrics and, when the
    evaluate stage wrote one, its `report.html`; `pool/`: a GRPO model's latest pool snapshot.
    """
    folder = staging / "model"
    folder.mkdir()
    weights = {}
    for path in sorted(model_dir.iterdir()):
        if not path.is_file():
            continue
        if path.suffix in WEIGHT_SUFFIXES and not log_weights:
            weights[path.name] = path.stat().st_size
        else:
            _link(path, folder / path.name)
    if weights:
        manifest = {
            "path": str(model_dir),
            "files": weights,
            "dvc_out": dvc_out[0] if dvc_out else None,
            "dvc_md5": dvc_out[1] if dvc_out else None,
        }
        (folder / "weights.json").write_text(json.dumps(manifest, indent=2) + "\n")
    for split in splits:
        for name in ("metrics.json", "report.html"):
            if (results_dir / split / name).is_file():
                _link(results_dir / split / name, folder / "eval" / split / name)
    snapshots = sorted((model_dir / "pool").glob("step-*.json"))
    if snapshots:
        _link(snapshots[-1], folder / "pool" / snapshots[-1].name)
    return folder


def eval_tags(metrics: dict[str, dict]) -> dict[str, str]:
    """`eval.<split>.<number>` of each split's summary.

    >>> eval_tags({"dev": {"pipeline_ex": 0.5, "generator_ex": 0.6, "n": 9}})
    {'eval.dev.pipeline_ex': '0.5', 'eval.dev.generator_ex': '0.6'}
    """
    return {
        f"eval.{split}.{number}": str(summary[number])
        for split, summary in metrics.items()
        for number in EVAL_NUMBERS
        if number in summary
    }


def eval_description(model: str, metrics: dict[str, dict]) -> str:
    """One line per split: the numbers a reader of the registry compares versions by.

    >>> print(eval_description("models/grpo", {"dev": {"pipeline_ex": 0.5, "generator_ex": 0.6}}))
    models/grpo, execution accuracy per split:
    dev: pipeline 0.5, generator 0.6
    """
    lines = [f"{model}, execution accuracy per split:"]
    for split, summary in metrics.items():
        numbers = [
            f"{number.removesuffix('_ex')} {summary[number]}"
            for number in EVAL_NUMBERS
            if number in summary
        ]
        lines.append(f"{split}: {', '.join(numbers)}")
    return "\n".join(lines)


def _link(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    target.symlink_to(source.resolve())
