"""Experiment tracking: MLflow, or a null tracker that does nothing.

Library code and stages take a `Tracker` and log unconditionally; `make_tracker(base)` picks
the implementation from params (`base.tracking_uri: null` gives the null one). `MlflowTracker`
talks to the store through an explicit `MlflowClient`, never MLflow's process-wide active
run, so two trackers (or a test) never see each other's state.

    tracker = make_tracker(params.base)
    with tracker.start_run("data", params=params.data.model_dump(mode="json"), tags={}):
        tracker.log_metrics({"train.n": 1800})
        tracker.log_artifact("data/prepared/distribution.png")

Runs are tagged with the git commit of the working directory when there is one
(`mlflow.source.git.commit`, the tag MLflow's UI shows).
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

GIT_COMMIT_TAG = "mlflow.source.git.commit"
PARENT_RUN_TAG = "mlflow.parentRunId"


class Tracker:
    """What stages log through. The base class logs nothing; subclasses override every call."""

    @contextmanager
    def start_run(
        self,
        name: str,
        params: Mapping[str, Any] | None = None,
        tags: Mapping[str, str] | None = None,
        nested: bool = False,
        run_id: str | None = None,
    ) -> Iterator[None]:
        """A run around the block; nested dict params are flattened to `a.b.c` keys.

        `run_id` reopens that earlier run (a resumed training) instead of starting one.
        """
        yield

    @property
    def run_id(self) -> str | None:
        """The id of the run logs go to now (None outside a run, or when nothing is logged)."""
        return None

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        """Numeric metrics of the current run."""

    def log_artifact(self, path: str | Path) -> None:
        """A file of the current run."""

    def log_figure(self, figure, name: str) -> None:
        """A matplotlib figure, saved as the artifact `name` (e.g. "plots/loss.png")."""

    def log_dict(self, data: Mapping, name: str) -> None:
        """A JSON (or YAML, by `name`'s suffix) artifact."""


class NullTracker(Tracker):
    """Logs nothing: for tests, and for `tracking_uri: null`."""


class MlflowTracker(Tracker):
    """Logs to an MLflow store (`sqlite:///mlflow.db`, or a server URL) under one experiment."""

    def __init__(self, tracking_uri: str, experiment: str):
        from mlflow import MlflowClient

        self.client = MlflowClient(tracking_uri)
        found = self.client.get_experiment_by_name(experiment)
        self.experiment_id = (
            found.experiment_id if found else self.client.create_experiment(experiment)
        )
        self._runs: list[str] = []  # stack of open run ids; the last one receives the logs

    @contextmanager
    def start_run(self, name, params=None, tags=None, nested=False, run_id=None):
        run_tags = {k: str(v) for k, v in (tags or {}).items()}
        commit = git_commit()
        if commit:
            run_tags.setdefault(GIT_COMMIT_TAG, commit)
        if nested and self._runs:
            run_tags[PARENT_RUN_TAG] = self._runs[-1]
        if run_id is not None and self._reopen(run_id):
            params = None  # already logged by the run's first attempt
        else:
            run_id = self.client.create_run(
                self.experiment_id, run_name=name, tags=run_tags
            ).info.run_id
        self._runs.append(run_id)
        status = "FAILED"
        try:
            if params:
                self._log_params(run_id, flatten(params))
            yield
            status = "FINISHED"
        finally:
            self._runs.pop()
            self.client.set_terminated(run_id, status)

    @property
    def run_id(self):
        return self._runs[-1] if self._runs else None

    def _reopen(self, run_id: str) -> bool:
        from mlflow.exceptions import MlflowException

        try:
            run = self.client.get_run(run_id)
        except MlflowException:
            return False
        if run.info.experiment_id != self.experiment_id:
            return False
        self.client.update_run(run_id, status="RUNNING")
        self.client.set_tag(run_id, "resumed", "true")
        return True

    def log_metrics(self, metrics, step=None):
        from mlflow.entities import Metric

        now_ms = int(time.time() * 1000)
        batch = [Metric(k, float(v), now_ms, step or 0) for k, v in metrics.items()]
        self.client.log_batch(self._current(), metrics=batch)

    def log_artifact(self, path):
        self.client.log_artifact(self._current(), str(path))

    def log_figure(self, figure, name):
        self.client.log_figure(self._current(), figure, name)

    def log_dict(self, data, name):
        self.client.log_dict(self._current(), dict(data), name)

    def _log_params(self, run_id: str, params: dict[str, Any]) -> None:
        from mlflow.entities import Param

        self.client.log_batch(run_id, params=[Param(k, str(v)) for k, v in params.items()])

    def _current(self) -> str:
        if not self._runs:
            raise RuntimeError("log inside `with tracker.start_run(...)`")
        return self._runs[-1]


def make_tracker(base) -> Tracker:
    """The tracker a `BaseSection` asks for: MLflow at `tracking_uri`, or null when it is None."""
    if base.tracking_uri is None:
        return NullTracker()
    return MlflowTracker(base.tracking_uri, base.experiment)


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings as one level with dotted keys.

    >>> flatten({"data": {"synth": {"n": 2}, "source": "synth"}})
    {'data.synth.n': 2, 'data.source': 'synth'}
    """
    flat = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def git_commit(cwd: str | Path | None = None) -> str | None:
    """The commit checked out in `cwd` (default: the working directory), or None outside git."""
    try:
        proc = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None
