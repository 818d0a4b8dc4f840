"""The tasks every flow shares: `dvc repro <stage>`, `dvc exp save`, the project folder's lock,
and the default a profile run returns the workspace to.

`flows/pipeline.py` runs the stages in order with them, `flows/stages.py` one stage each.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from datetime import datetime
from pathlib import Path

from prefect import get_run_logger, task
from prefect.runtime import flow_run
from prefect.tasks import exponential_backoff

from acesql.tracking import FLOW_RUN_ENV, PARENT_RUN_ENV

STDERR_TAIL = 20  # lines of stderr a failed stage reports
PROGRESS_EVERY_S = 30.0  # a progress bar's redraws reach the task log at most this often
STOP_GRACE_S = 10.0  # a stopped stage's time to end its MLflow run before SIGKILL
DVC_LOCK_BUSY = "Unable to acquire lock"  # dvc/lock.py: another DVC process holds the repo

PROJECT_LOCK = Path(".dvc/tmp/acesql-flow.lock")
# params.yaml and dvc.lock as they were before a profile's values were set, kept until the
# profile's run is saved as an experiment (a stopped run leaves them for its resumption)
DEFAULT_KEPT = Path(".dvc/tmp/acesql-default")
TRACKED = ("params.yaml", "dvc.lock")


@contextlib.contextmanager
def project_lock():
    """Hold the project folder for one flow's params write + `dvc repro` + tags.

    A stage flow given overrides writes them into params.yaml, and DVC reads params.yaml when
    its stage runs and again when it writes dvc.lock: a second run writing the file in between
    would have the first stage's lock entry record values it never ran with. Runs of one
    project folder therefore take turns here (an flock on a file in .dvc/tmp, released when
    the process dies). A GPU stage the pipeline hands to a deployment is not held: the
    deployment's own flow takes the lock when it runs, maybe on this machine. Not reentrant:
    take it once per stage, around tasks, never around another flow.
    """
    PROJECT_LOCK.parent.mkdir(parents=True, exist_ok=True)
    with PROJECT_LOCK.open("a") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            get_run_logger().info("another flow run holds %s: waiting for it", PROJECT_LOCK)
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def stop_group(proc: subprocess.Popen, grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM the process group `proc` leads (the stage ends its run as KILLED, leaving its
    last checkpoint to resume from), SIGKILL it after `grace_s`. Returns once every process
    of the group has ended: DVC can exit before the stage under it has finished unwinding."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        if _group_ends(proc, wait_s):
            return


def _group_ends(proc: subprocess.Popen, wait_s: float) -> bool:
    """Whether the group `proc` leads is empty within `wait_s` (the leader reaped too)."""
    deadline = time.monotonic() + wait_s
    while True:
        proc.poll()  # reap the leader, or it stays a zombie member of its group
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:  # a member now runs as another user: still there
            pass
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)


class ProgressLines:
    """Which lines of a stage's stderr to log: all but progress-bar redraws (tqdm's `\r`
    updates arrive as lines), of which one per `every_s` and each bar's last are kept.

    >>> bars = ProgressLines(every_s=60.0)
    >>> [bars.keep(f"sft: {p}%|#| {p // 10}/10") for p in (10, 20, 100)]
    [True, False, True]
    >>> bars.keep("Updating lock file 'dvc.lock'")
    True
    """

    BAR = re.compile(r"\d+%\|")

    def __init__(self, every_s: float = PROGRESS_EVERY_S):
        self.every_s = every_s
        self.last = -float("inf")

    def keep(self, line: str) -> bool:
        if not self.BAR.search(line) or "100%|" in line:
            return True
        now = time.monotonic()
        if now - self.last < self.every_s:
            return False
        self.last = now
        return True


class StageFailed(RuntimeError):
    """The stage's command exited non-zero: rerunning it as is would fail again."""


class DvcBusy(RuntimeError):
    """Another DVC process holds the repository lock: worth retrying a little later."""


def _retry_only_if_busy(task, task_run, state) -> bool:
    """Prefect's retry condition: retry only when the failure was a busy DVC lock."""
    return isinstance(state.result(raise_on_failure=False), DvcBusy)


@task(
    task_run_name="dvc repro {stage}",
    retries=3,
    retry_delay_seconds=exponential_backoff(backoff_factor=10),
    retry_jitter_factor=0.5,
    retry_condition_fn=_retry_only_if_busy,
)
def repro(stage: str, force: bool = False, parent_run_id: str | None = None) -> None:
    """`dvc repro <stage>` (and what it depends on, when stale), output sent to the task's log.

    With `force` the stage itself reruns even when nothing changed (`--force --single-item`);
    its upstream stages are left alone, since the flow runs each listed stage in turn. The
    stage's MLflow run becomes a child of `parent_run_id`, tagged with this flow run's id.
    """
    logger = get_run_logger()
    options = ["--force", "--single-item"] if force else []
    command = [sys.executable, "-m", "dvc", "repro", *options, stage]
    # the stages run with this interpreter (scripts/stage reads ACESQL_PYTHON; a bare `python`
    # in a stage command finds it first on PATH), whichever environment is active
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "ACESQL_PYTHON": sys.executable}
    env["PATH"] = f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"
    env[FLOW_RUN_ENV] = str(flow_run.id)
    env.pop(PARENT_RUN_ENV, None)
    if parent_run_id:
        env[PARENT_RUN_ENV] = parent_run_id
    logger.info("$ %s", " ".join(command[2:]))
    # its own process group: a cancelled flow stops DVC and the stage under it together
    proc = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    tail: deque[str] = deque(maxlen=STDERR_TAIL)

    progress = ProgressLines()

    def pump_stderr():
        for line in proc.stderr:
            line = line.rstrip()
            if progress.keep(line):
                tail.append(line)
                logger.info(line)

    reader = threading.Thread(target=pump_stderr, daemon=True)
    reader.start()
    try:
        for line in proc.stdout:
            logger.info(line.rstrip())
        reader.join()
        code = proc.wait()
    except BaseException:  # the flow is cancelled or killed while the stage runs
        stop_group(proc)
        raise
    if code != 0:
        message = f"dvc repro {stage} exited with {code}; last lines of stderr:\n" + "\n".join(tail)
        busy = any(DVC_LOCK_BUSY in line for line in tail)
        raise (DvcBusy if busy else StageFailed)(message)


def experiment_name(profile: str, now: datetime) -> str:
    """The DVC experiment name of a run with `profile` (a profiles/ name or a file).

    >>> experiment_name("profiles/wide.yaml", datetime(2026, 12, 6, 18, 30, 5))
    'wide-20261206-183005'
    """
    return f"{Path(profile).stem}-{now:%Y%m%d-%H%M%S}"


@task(task_run_name="dvc exp save {name}")
def save_experiment(name: str, stages: list[str], message: str) -> str | None:
    """Save the workspace as DVC experiment `name`: params.yaml, dvc.lock and the outputs of
    `stages` (DVC caches them), so `dvc exp show` lines the run up against others and `dvc exp
    apply <name>` brings it back. A run that cannot be saved (no git commit to hang it on) is
    said in the log and still succeeds: its outputs and dvc.lock are in the workspace."""
    logger = get_run_logger()
    command = [sys.executable, "-m", "dvc", "exp", "save", "--force", "-n", name, "-m", message]
    done = subprocess.run([*command, *stages], capture_output=True, text=True)
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or ["no message"])[-1]
        logger.warning("the run is not saved as a DVC experiment: %s", why)
        return None
    logger.info(
        "saved as DVC experiment %s: `make exps` compares it with the others, `dvc exp apply %s` "
        "brings its params, dvc.lock and outputs into the workspace",
        name,
        name,
    )
    return name


def keep_default() -> bool:
    """Copy params.yaml and dvc.lock aside before a profile changes them, so the finished run
    can put them back (`restore_default`); whether this call made the copies. A profile run
    that stopped part-way made them already: those, the default from before any profile, stay.
    """
    if DEFAULT_KEPT.is_dir():
        return False
    staging = DEFAULT_KEPT.with_name(DEFAULT_KEPT.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    for name in TRACKED:
        if Path(name).is_file():
            shutil.copyfile(name, staging / name)
    staging.rename(DEFAULT_KEPT)
    return True


@task(task_run_name="restore the default")
def restore_default(experiment: str) -> None:
    """Put params.yaml and dvc.lock back as `keep_default` found them and check their outputs
    out, as `dvc exp run --temp` leaves the workspace: the tracked files stay the default and
    the profile's run lives on as DVC experiment `experiment`."""
    logger = get_run_logger()
    for name in TRACKED:
        kept = DEFAULT_KEPT / name
        if kept.is_file():
            Path(name).write_bytes(kept.read_bytes())
        else:
            Path(name).unlink(missing_ok=True)  # the default had none
    forget_default()
    done = subprocess.run(
        [sys.executable, "-m", "dvc", "checkout", "--quiet"], capture_output=True, text=True
    )
    if done.returncode != 0:
        logger.warning(
            "params.yaml and dvc.lock are the default again, but DVC's cache lacks some of the "
            "default's outputs (never built here): `make run` builds them, `dvc exp apply %s` "
            "brings this run's back",
            experiment,
        )
        return
    logger.info(
        "params.yaml, dvc.lock and the outputs are the default again; `dvc exp apply %s` "
        "brings this run's back",
        experiment,
    )


def forget_default() -> None:
    """Drop the copies `keep_default` made (restored, or no longer wanted)."""
    shutil.rmtree(DEFAULT_KEPT, ignore_errors=True)


def profile_left_over() -> str | None:
    """What to say when params.yaml holds a stopped profile run's values, or None."""
    if not DEFAULT_KEPT.is_dir():
        return None
    return (
        "params.yaml holds the values of a profile whose run stopped (the default is kept in "
        f"{DEFAULT_KEPT}): the same `--profile` again resumes that run and then restores the "
        "default"
    )
