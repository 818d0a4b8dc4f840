"""Benchmark: how far past its deadline one long SQLite call runs, on every path that runs
untrusted SQL.

What it measures
    Two single calls that SQLite's progress handler never interrupts (a LIKE of a
    20,000-character pattern over a 1 MB string: 30 s alone; `printf('%.*c', 2000000000,
    'x')`: 7 s alone) run under a deadline on each path: `BatchExecutor` with 2 workers
    (`acesql eval`, `evaluate-sql`) and with 0 (`evaluate-sql --workers 0`, which is one
    worker), `acesql sql exec` and `sql match`, `ask`, a `Replicas` lease (agent episodes)
    and `acesql debug check`. The overshoot is the time from the call to its timed-out
    answer, less the deadline, with every worker or host already started. A CLI command's
    (and `ask`'s) own wall time on `SELECT 1`, a worker's start included, is taken off; what
    is left holds the start of the worker that replaces the killed one, which the command
    waits for as it exits. The check's is the fix statement's time as the check saw it.
    Each is the worst of `--tries` runs.

How to run
    .venv/bin/python bench/deadline_bench.py [--timeout 1.0] [--tries 3]

    It prints a table, then one JSON line with all the numbers.

Target: the executor's and the lease's overshoot under `acesql.sql.host.KILL_GRACE_S` plus
0.1 s; a command's, plus a worker's start.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

LONG_CALLS = {
    "like": "SELECT replace(hex(zeroblob(500000)),'0','a') LIKE "
    "'%' || replace(hex(zeroblob(10000)),'0','a') || 'b'",
    "printf": "SELECT printf('%.*c', 2000000000, 'x')",
}


def _wall(run) -> tuple[object, float]:
    start = time.monotonic()
    value = run()
    return value, time.monotonic() - start


def executor_path(db: str, sql: str, timeout: float, workers: int) -> float:
    """The wall time of `execute_many`, its workers started."""
    from acesql.sql.batch_executor import BatchExecutor

    with BatchExecutor(workers=workers, timeout_s=timeout) as ex:
        ex.execute_many([(db, "SELECT 1")] * max(1, workers))
        (result,), wall = _wall(lambda: ex.execute_many([(db, sql)]))
    assert result.timed_out, result
    return wall


def cli_path(db: str, sql: str, timeout: float, command: str) -> float:
    """The command's wall time, less its own (a worker's start) on `SELECT 1`."""
    from click.testing import CliRunner

    from acesql.cli import cli

    def invoke(query):
        args = ["sql", command, "--db", db, "--timeout", str(timeout)]
        if command == "exec":
            args.append(query)
        else:
            args += ["--pred", query, "--gold", "SELECT 1"]
        out = CliRunner().invoke(cli, args)
        assert out.exit_code == 0, out.output
        return json.loads(out.output)

    _, startup = _wall(lambda: invoke("SELECT 1"))
    answer, wall = _wall(lambda: invoke(sql))
    assert answer.get("timed_out") or answer.get("reason") == "pred_timeout", answer
    return wall - startup


def ask_path(db: str, sql: str, timeout: float) -> float:
    """`ask`'s wall time (a scripted model), less its own on `SELECT 1`."""
    from acesql.config import SelectionSection
    from acesql.models.engine import Completion
    from acesql.models.prompts import PromptBuilder
    from acesql.selection.ask import ask

    class Engine:
        def __init__(self, answer):
            self.answer = answer

        def generate(self, prompts, n=1, **options):
            return [[Completion(f"```sql\n{self.answer}\n```")]]

    class Tokenizer:
        def apply_chat_template(self, messages, tokenize=False, **options):
            return "\n".join(m["content"] for m in messages)

    selection = SelectionSection(method="greedy", answer="pipeline")
    prompts = PromptBuilder(Tokenizer())
    _, startup = _wall(lambda: ask(Engine("SELECT 1"), prompts, db, "?", selection))
    answer, wall = _wall(lambda: ask(Engine(sql), prompts, db, "?", selection, timeout_s=timeout))
    assert answer.result.timed_out, answer.result
    return wall - startup


def lease_path(db: str, sql: str, timeout: float, scratch: Path) -> float:
    """The wall time of `Lease.execute`, the host started."""
    from acesql.sql.replicas import Replicas

    with Replicas(scratch / "lease", timeout_s=timeout) as replicas, replicas.lease(db) as lease:
        lease.execute("SELECT 1")
        result, wall = _wall(lambda: lease.execute(sql))
    assert result.timed_out, result
    return wall


def check_path(db: str, sql: str, timeout: float, scratch: Path) -> float:
    """The fix statement's time to its timed-out answer, as the check saw it."""
    from acesql.debug.check import check_fix
    from acesql.debug.task import DebugTask
    from acesql.sql.replicas import Replicas

    task = DebugTask("t", "db", db, "query", "?", ["SELECT 1"], ["SELECT 1"])
    with Replicas(scratch / "check", timeout_s=timeout) as replicas:
        verdict = check_fix(task, sql, replicas)
    assert "timeout" in verdict.reason, verdict.reason
    return verdict.fix_results[-1].elapsed_s


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--timeout", type=float, default=1.0, help="the deadline, s")
    parser.add_argument("--tries", type=int, default=3, help="runs per path and call")
    args = parser.parse_args(argv)
    from acesql.data.sample import build_sample_dataset

    numbers: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as folder:
        scratch = Path(folder)
        sample = build_sample_dataset(scratch / "sample")
        db = str(sample / "database" / "school" / "school.sqlite")
        paths = {
            "BatchExecutor, 2 workers": partial(executor_path, workers=2),
            "BatchExecutor, workers=0": partial(executor_path, workers=0),
            "sql exec": partial(cli_path, command="exec"),
            "sql match": partial(cli_path, command="match"),
            "ask": ask_path,
            "Replicas lease": partial(lease_path, scratch=scratch),
            "debug check": partial(check_path, scratch=scratch),
        }
        for name, sql in LONG_CALLS.items():
            for path, run in paths.items():
                walls = [run(db, sql, args.timeout) for _ in range(args.tries)]
                overshoot = max(walls) - args.timeout
                numbers.setdefault(path, {})[name] = round(overshoot * 1000, 1)
                print(f"{path:28s} {name:7s} overshoot {overshoot * 1000:7.1f} ms", flush=True)
    print(json.dumps({"timeout_s": args.timeout, "tries": args.tries, "overshoot_ms": numbers}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
