"""The orchestrator's side of MLflow: runs that span processes, tags, the model registry.

Stages log through `acesql.tracking` (a run around their own work). The flows need more: a
parent run opened by one task and closed by another, tags written on runs that have ended
(what DVC recorded for a stage in dvc.lock), runs found by their tags, and registered model
versions. `pipeline_runs(base)` gives `MlflowRuns` at the stages' tracking store, or
`NullRuns` when tracking is off (`base.tracking_uri: null`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path

from acesql.stages.headlines import lock_stages
from acesql.tracking import (
    GIT_COMMIT_TAG,
    MAX_PARAMS_PER_BATCH,
    flatten,
    git_commit,
    tracking_uri,
)
from acesql.tracking_store import experiment_id


class NullRuns:
    """Tracking is off: nothing is opened, tagged, found or registered."""

    def open_run(self, name: str, params: Mapping | None = None, tags: Mapping | None = None):
        return None

    def close_run(self, run_id: str | None, status: str = "FINISHED") -> None:
        pass

    def set_tags(self, run_id: str | None, tags: Mapping[str, str]) -> None:
        pass

    def find_runs(self, tags: Mapping[str, str], status: str | None = None) -> list[str]:
        return []

    def register_model(self, name, run_id, folder, tags=None, description="") -> str | None:
        return None

    def log_metrics(self, run_id: str | None, metrics: Mapping[str, float]) -> None:
        pass

    def find_model_version(self, name: str, tags: Mapping[str, str]) -> str | None:
        return None


class MlflowRuns(NullRuns):
    """The runs of one experiment of an MLflow store, through an explicit `MlflowClient`."""

    def __init__(self, uri: str, experiment: str):
        from mlflow import MlflowClient

        self.client = MlflowClient(uri)
        self.experiment_id = experiment_id(self.client, uri, experiment)

    def open_run(self, name, params=None, tags=None):
        """A run left open when this returns (one spanning processes); its id."""
        tags = {k: str(v) for k, v in (tags or {}).items()}
        commit = git_commit()
        if commit:
            tags.setdefault(GIT_COMMIT_TAG, commit)
        run_id = self.client.create_run(self.experiment_id, run_name=name, tags=tags).info.run_id
        if params:
            from mlflow.entities import Param

            batch = [Param(k, str(v)) for k, v in flatten(params).items()]
            for start in range(0, len(batch), MAX_PARAMS_PER_BATCH):
                self.client.log_batch(run_id, params=batch[start : start + MAX_PARAMS_PER_BATCH])
        return run_id

    def close_run(self, run_id, status="FINISHED"):
        """End a run of `open_run` as FINISHED, FAILED or KILLED."""
        self.client.set_terminated(run_id, status)

    def set_tags(self, run_id, tags):
        """Tags on any run of the experiment, open or ended."""
        from mlflow.entities import RunTag

        batch = [RunTag(k, str(v)) for k, v in tags.items()]
        if batch:
            self.client.log_batch(run_id, tags=batch)

    def log_metrics(self, run_id, metrics):
        """Numbers on any run of the experiment, open or ended (step 0)."""
        import time

        from mlflow.entities import Metric

        now_ms = int(time.time() * 1000)
        batch = [Metric(k, float(v), now_ms, 0) for k, v in metrics.items()]
        if batch:
            self.client.log_batch(run_id, metrics=batch)

    def find_runs(self, tags, status=None):
        """The runs of the experiment carrying all of `tags` (and in `status`), newest first."""
        query = _tag_filter(tags)
        if status:
            query += f" and attributes.status = {_quoted(status)}"
        runs = self.client.search_runs(
            [self.experiment_id],
            filter_string=query,
            order_by=["attributes.start_time DESC"],
        )
        return [run.info.run_id for run in runs]

    def register_model(self, name, run_id, folder, tags=None, description=""):
        """Log `folder` as the run's `model/` artifacts and register them as a new version of
        the registered model `name` (created on first use); the version."""
        from mlflow.exceptions import MlflowException

        self.client.log_artifacts(run_id, str(folder), "model")
        try:
            self.client.create_registered_model(name)
        except MlflowException as exc:
            if exc.error_code != "RESOURCE_ALREADY_EXISTS":
                raise
        # the run's artifact folder, not the local one: a tracking server refuses a local path
        # outside the run's artifacts as a version's source
        source = f"{self.client.get_run(run_id).info.artifact_uri}/model"
        version = self.client.create_model_version(
            name,
            source,
            run_id,
            tags={k: str(v) for k, v in (tags or {}).items()},
            description=description,
        )
        return str(version.version)

    def find_model_version(self, name, tags):
        """The newest version of the registered model `name` carrying all of `tags`, or None."""
        versions = self.client.search_model_versions(
            f"name = {_quoted(name)} and {_tag_filter(tags)}", order_by=["version_number DESC"]
        )
        return str(versions[0].version) if versions else None


def pipeline_runs(base) -> NullRuns:
    """The runs of a `BaseSection`'s tracking store and experiment; NullRuns when it is off."""
    uri = tracking_uri(base)
    return NullRuns() if uri is None else MlflowRuns(uri, base.experiment)


def dvc_stage_tags(lock: str | Path, stage: str) -> dict[str, str]:
    """Tags naming what DVC recorded for `stage` in `lock` (a dvc.lock); {} when it has none.

    `dvc.stage_md5` hashes the whole entry (command, deps, params, outs): two runs with the
    same value ran the same command on the same inputs. `dvc.deps_md5` and `dvc.params_md5`
    hash those parts alone; `dvc.out.<path>` is each output's md5, as `dvc pull` knows it. A
    `foreach` stage's entries (`evaluate@dev`, `evaluate@test_ood`) are hashed together.
    """
    named = {
        name: entry
        for name, entry in lock_stages(lock).items()
        if name == stage or name.startswith(f"{stage}@")
    }
    if not named:
        return {}
    parts = list(named.values())
    whole = parts[0] if set(named) == {stage} else named
    tags = {
        "dvc.stage_md5": _md5_of(whole),
        "dvc.deps_md5": _md5_of([p.get("deps", []) for p in parts]),
        "dvc.params_md5": _md5_of([p.get("params", {}) for p in parts]),
    }
    tags.update({f"dvc.out.{o['path']}": o["md5"] for p in parts for o in p.get("outs", [])})
    return tags


def dvc_out_md5(lock: str | Path, path: str | Path) -> tuple[str, str] | None:
    """(output path, md5) of the stage output in `lock` that holds `path`, or None.

    >>> import tempfile; lock = Path(tempfile.mkdtemp()) / "dvc.lock"
    >>> _ = lock.write_text("stages: {grpo: {outs: [{path: models/grpo, md5: ab.dir}]}}")
    >>> dvc_out_md5(lock, "models/grpo/best")
    ('models/grpo', 'ab.dir')
    """
    wanted = Path(path)
    for entry in lock_stages(lock).values():
        for out in entry.get("outs", []):
            if Path(out["path"]) in (wanted, *wanted.parents):
                return out["path"], out["md5"]
    return None


def _md5_of(value) -> str:
    return hashlib.md5(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()


def _tag_filter(tags: Mapping[str, str]) -> str:
    """An MLflow search filter matching all of `tags`."""
    return " and ".join(f"tags.`{key}` = {_quoted(value)}" for key, value in tags.items())


def _quoted(value) -> str:
    """`value` as a string literal of MLflow's search filters, which have no escapes."""
    if "'" in str(value):
        raise ValueError(f"{value!r} contains a quote: MLflow cannot search for it")
    return f"'{value}'"
