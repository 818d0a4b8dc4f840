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

An orchestrator hands tags down to the stage processes it starts through their environment
(`make_tracker` reads it): `ACESQL_PARENT_RUN_ID` makes each stage's run a child of the
pipeline's run, `ACESQL_FLOW_RUN_ID` names the flow run that started it. After `dvc repro`,
the orchestrator tags the stage's run with what DVC recorded in dvc.lock (`flows/runs.py`:
runs spanning processes and the model registry are the orchestrator's side, not the library's).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

GIT_COMMIT_TAG = "mlflow.source.git.commit"
PARENT_RUN_TAG = "mlflow.parentRunId"
FLOW_RUN_TAG = "prefect.flow_run_id"
PARENT_RUN_ENV = "ACESQL_PARENT_RUN_ID"  # the pipeline's run: stage runs become its children
FLOW_RUN_ENV = "ACESQL_FLOW_RUN_ID"  # the flow run that started the stage process
MAX_PARAMS_PER_BATCH = 100  # MLflow refuses larger log_batch calls
METRIC_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9_\-. :/]")  # what MLflow refuses in a name


def metric_name(key: str) -> str:
    """`key` as MLflow accepts it: each character it refuses becomes `_`, so a metric
    named after a range or a label never fails a stage at its last step.

    >>> metric_name("prm_data/sigma_histogram.(0,0.5)")
    'prm_data/sigma_histogram._0_0.5_'
    """
    return METRIC_NAME_UNSAFE.sub("_", key)


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
    """Logs to an MLflow store (`sqlite:///mlflow.db`, or a server URL) under one experiment.

    `run_tags` go on every top-level run this tracker starts (and on a reopened one, which
    moves under the pipeline run that resumed it): the tags an orchestrator handed down.
    """

    def __init__(
        self, tracking_uri: str, experiment: str, run_tags: Mapping[str, str] | None = None
    ):
        from mlflow import MlflowClient

        from acesql.tracking_store import experiment_id

        self.client = MlflowClient(tracking_uri)
        self.experiment_id = experiment_id(self.client, tracking_uri, experiment)
        self.run_tags = dict(run_tags or {})
        self._runs: list[str] = []  # stack of open run ids; the last one receives the logs

    @contextmanager
    def start_run(self, name, params=None, tags=None, nested=False, run_id=None):
        run_tags = {**self.run_tags} if not self._runs else {}
        run_tags.update({k: str(v) for k, v in (tags or {}).items()})
        if nested and self._runs:
            run_tags[PARENT_RUN_TAG] = self._runs[-1]
        if run_id is not None and self._reopen(run_id):
            self._set_tags(run_id, run_tags)
            params = None  # already logged by the run's first attempt
        else:
            run_id = self._create_run(name, run_tags)
        self._runs.append(run_id)
        status = "FAILED"
        try:
            if params:
                self._log_params(run_id, flatten(params))
            yield
            status = "FINISHED"
        except KeyboardInterrupt:  # Ctrl-C, or SIGTERM in a stage (acesql.stages.common)
            status = "KILLED"
            raise
        finally:
            self._runs.pop()
            self.client.set_terminated(run_id, status)

    @property
    def run_id(self):
        return self._runs[-1] if self._runs else None

    def _create_run(self, name: str, tags: dict[str, str]) -> str:
        commit = git_commit()
        if commit:
            tags.setdefault(GIT_COMMIT_TAG, commit)
        return self.client.create_run(self.experiment_id, run_name=name, tags=tags).info.run_id

    def _set_tags(self, run_id: str, tags: Mapping[str, str]) -> None:
        from mlflow.entities import RunTag

        batch = [RunTag(k, str(v)) for k, v in tags.items()]
        if batch:
            self.client.log_batch(run_id, tags=batch)

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
        batch = [Metric(metric_name(k), float(v), now_ms, step or 0) for k, v in metrics.items()]
        self.client.log_batch(self._current(), metrics=batch)

    def log_artifact(self, path):
        self.client.log_artifact(self._current(), str(path))

    def log_figure(self, figure, name):
        self.client.log_figure(self._current(), figure, name)

    def log_dict(self, data, name):
        self.client.log_dict(self._current(), dict(data), name)

    def _log_params(self, run_id: str, params: dict[str, Any]) -> None:
        from mlflow.entities import Param

        batch = [Param(k, str(v)) for k, v in params.items()]
        for start in range(0, len(batch), MAX_PARAMS_PER_BATCH):
            self.client.log_batch(run_id, params=batch[start : start + MAX_PARAMS_PER_BATCH])

    def _current(self) -> str:
        if not self._runs:
            raise RuntimeError("log inside `with tracker.start_run(...)`")
        return self._runs[-1]


def make_tracker(base, environ: Mapping[str, str] = os.environ) -> Tracker:
    """The tracker a `BaseSection` asks for: MLflow at `tracking_uri`, or null when it is None.

    Its top-level runs carry the tags an orchestrator handed down in `environ`.
    """
    uri = tracking_uri(base)
    if uri is None:
        return NullTracker()
    return MlflowTracker(uri, base.experiment, inherited_tags(environ))


def tracking_uri(base) -> str | None:
    """Where runs go: `MLFLOW_TRACKING_URI` when set, else `base.tracking_uri`; None: off.

    The variable lets a worker image point every stage at its team's server while the
    params file keeps the laptop's default. `tracking_uri: null` turns tracking off whatever
    the environment says.
    """
    if base.tracking_uri is None:
        return None
    return os.environ.get("MLFLOW_TRACKING_URI") or base.tracking_uri


def inherited_tags(environ: Mapping[str, str]) -> dict[str, str]:
    """The run tags named by `ACESQL_PARENT_RUN_ID` and `ACESQL_FLOW_RUN_ID` in `environ`.

    >>> inherited_tags({"ACESQL_PARENT_RUN_ID": "abc", "HOME": "/root"})
    {'mlflow.parentRunId': 'abc'}
    """
    names = {PARENT_RUN_ENV: PARENT_RUN_TAG, FLOW_RUN_ENV: FLOW_RUN_TAG}
    return {tag: environ[env] for env, tag in names.items() if environ.get(env)}


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
    """The commit checked out in `cwd` (default: the working directory), or None outside git.

    Read from the repository's files with dulwich (a DVC dependency) rather than by running
    `git`: no process per run, so a flow's only subprocesses are its stage commands.
    """
    from dulwich.errors import NotGitRepository
    from dulwich.repo import Repo

    try:
        with Repo.discover(str(cwd or ".")) as repo:
            return repo.head().decode()
    except (NotGitRepository, KeyError):  # KeyError: a repository without commits
        return None
