"""What the stage entry points share: params loading, a tracked run, errors as exit code 2."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from acesql.config import load_section
from acesql.distributed import launch_command, process_rank
from acesql.errors import AcesqlError
from acesql.host import host_tags
from acesql.stages.headlines import write_headline
from acesql.staging import write_atomic
from acesql.tracking import NullTracker, make_tracker


def run_stage(
    name: str,
    doc: str,
    sections: tuple[str, ...],
    work: Callable,
    argv=None,
    resume_run: Callable | None = None,
    run_name: str | None = None,
    tags: Callable | None = None,
) -> None:
    """Parse `--params`, load `sections`, open a tracked run named `name`, call `work`.

    `work(sections: dict, tracker) -> dict` returns the stage's metrics, printed as JSON.
    `resume_run(sections) -> run id or None` names an earlier run to continue (a training
    stage resuming from its checkpoint). `run_name` names the MLflow run when one stage has
    several DVC instances (`evaluate@dev`); the `stage` tag stays `name`. `tags(sections) ->
    dict` adds tags of the run's own (the data stage's `source`). Configuration and
    data errors print one `error:` line and exit with status 2; SIGTERM and Ctrl-C end the run
    as KILLED and exit with status 130.
    """
    parser = argparse.ArgumentParser(
        prog=f"python -m acesql.stages.{name}",
        description=doc,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--params", default="params.yaml", help="params file [params.yaml]")
    args = parser.parse_args(argv)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _interrupted)
    try:
        loaded = {s: load_section(args.params, s) for s in sections}
        # one MLflow run per stage, however many processes train in it
        tracker = make_tracker(loaded["base"]) if process_rank() == 0 else NullTracker()
        params = {s: section.model_dump(mode="json") for s, section in loaded.items()}
        run_id = resume_run(loaded) if resume_run else None
        run_tags = {"stage": name, **host_tags(), **(tags(loaded) if tags else {})}
        with tracker.start_run(run_name or name, params, tags=run_tags, run_id=run_id):
            metrics = work(loaded, tracker)
    except AcesqlError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt as exc:
        print(f"stopped: {exc or 'interrupted'}", file=sys.stderr)
        sys.exit(130)
    if process_rank() == 0:
        print(json.dumps(metrics, default=str))


def relaunch(name: str, argv=None, fsdp_config: str | None = None) -> None:
    """Replace this process by `torchrun` running the stage when the params file's
    `distributed` section asks for more than one process; return when it does not.
    `fsdp_config`: the accelerate config a stage shards with (`launch_command`)."""
    args = sys.argv[1:] if argv is None else list(argv)
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--params", default="params.yaml")
    known, _ = parser.parse_known_args(args)
    try:
        settings = load_section(known.params, "distributed")
        command = launch_command(name, args, settings, fsdp_config)
    except AcesqlError:
        return  # run_stage reports a broken params file in the stage's own words
    if command:
        print(f"{name}: {' '.join(command[1:])}", file=sys.stderr, flush=True)
        os.execv(command[0], command)


def _interrupted(signum, frame):
    """SIGTERM (a cancelled flow, a stopped worker) unwinds the stage like Ctrl-C: its run
    ends as KILLED and its temporary files are removed; checkpoints stay for a resume."""
    raise KeyboardInterrupt(f"signal {signum}")


def write_metrics(path: Path, metrics: dict, stage: str | None = None) -> None:
    """Write a stage's metrics file; with `stage`, also its headline (the DVC metric)."""
    write_atomic(path, json.dumps(metrics, indent=2, default=str) + "\n")
    if stage is not None:
        write_headline(stage, path, metrics)
