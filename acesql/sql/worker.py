"""What runs inside a SQL worker process: a job runner with its caches, and the worker loop.

A job is `("exec", db, sql)` or `("match", db, pred_sql, gold_sql, mode, ordered,
keep_rows)`; `ordered` (the gold has an outer ORDER BY, which the spider mode respects) is
worked out by the parent, which parses SQL anyway. So this module imports only the sandbox
and the matching rules, not sqlglot or tqdm: a spawned worker starts by importing it, and
every millisecond of that is paid again by each worker of each batch.

The worker publishes the deadline of the statement it runs (`sandbox.publish_deadlines`)
and, for a match job, the verdict the job gets if it is killed now (an index into
`KILLED_VERDICTS`), so that the parent can kill it inside one long SQLite call and still
report the job as timed out (`killed`).
"""

from __future__ import annotations

import os
import time
from collections import OrderedDict
from dataclasses import dataclass, replace

from acesql.sql.matching import MatchResult, execution_match
from acesql.sql.sandbox import (
    ExecResult,
    deterministic,
    open_sandboxed,
    publish_deadlines,
    run_with_deadline,
    statement_problem,
)

MAX_OPEN_CONNECTIONS = 64  # per worker
_TIMED_OUT = ExecResult(ok=False, timed_out=True)
# A match job's verdict when its worker is killed: the gold query was running (0), or the
# prediction was, and this is how it compares to the gold's result (all that
# `execution_match` can say of a prediction that timed out).
KILLED_VERDICTS = (
    MatchResult(False, "gold_timeout", usable=False),
    MatchResult(False, "pred_timeout"),
    MatchResult(False, "pred_timeout", gold_empty=True),
    MatchResult(False, "gold_error", usable=False),
    MatchResult(False, "gold_truncated", usable=False),
)


@dataclass(frozen=True)
class Verdict:
    """The outcome of checking one predicted SQL against its gold SQL."""

    match: MatchResult
    pred: ExecResult  # rows dropped unless the batch asked to keep them

    def to_dict(self) -> dict:
        return {"match": self.match.to_dict(), "pred": self.pred.to_dict()}


class Runner:
    """Runs jobs with a connection cache and a gold-result cache; lives in each worker."""

    def __init__(self, timeout_s, max_rows, max_bytes, gold_cache_size):
        self.timeout_s, self.max_rows, self.max_bytes = timeout_s, max_rows, max_bytes
        self.gold_cache_size = gold_cache_size
        self.connections: OrderedDict = OrderedDict()
        self.gold_cache: OrderedDict = OrderedDict()
        self.slot = None  # [deadline, index into KILLED_VERDICTS], in a worker process

    def execute(self, db: str, sql: str) -> ExecResult:
        start = time.monotonic()
        problem = statement_problem(sql)
        if problem:
            return ExecResult(ok=False, error=problem)
        conn = self.connections.get(db)
        if conn is None:
            try:
                conn = open_sandboxed(db, self.max_bytes)
            except Exception as exc:  # noqa: BLE001 - any failure to open is the item's error
                return ExecResult(ok=False, error=f"cannot open database: {exc}")
            self.connections[db] = conn
            if len(self.connections) > MAX_OPEN_CONNECTIONS:
                self.connections.popitem(last=False)[1].close()
        self.connections.move_to_end(db)
        return run_with_deadline(conn, sql, start, self.timeout_s, self.max_rows, self.max_bytes)

    def gold(self, db: str, sql: str) -> ExecResult:
        key = (db, sql)
        hit = self.gold_cache.get(key)
        if hit is not None:
            self.gold_cache.move_to_end(key)
            return hit
        result = self.execute(db, sql)
        # a missing file or a timeout under load may not last: only keep real answers
        if result.ok or not (result.timed_out or result.error.startswith("cannot open")):
            self.gold_cache[key] = result
            if len(self.gold_cache) > self.gold_cache_size:
                self.gold_cache.popitem(last=False)
        return result

    def run(self, job: tuple):
        kind = job[0]
        if kind == "exec":
            return self.execute(job[1], job[2])
        _, db, pred_sql, gold_sql, mode, ordered, keep_rows = job
        self._if_killed(0)
        gold = self.gold(db, gold_sql)
        self._if_killed(KILLED_VERDICTS.index(execution_match(_TIMED_OUT, gold, mode)))
        # the gold query itself, as a prediction: the same rows, unless it may vary
        same = pred_sql == gold_sql and deterministic(gold_sql)
        pred = gold if same else self.execute(db, pred_sql)
        match = execution_match(pred, gold, mode, ordered=ordered and gold.ok)
        return Verdict(match, pred if keep_rows else replace(pred, rows=[]))

    def _if_killed(self, verdict: int) -> None:
        if self.slot is not None:
            self.slot[1] = verdict


def failed(job: tuple, message: str):
    pred = ExecResult(ok=False, error=message)
    if job[0] == "exec":
        return pred
    return Verdict(MatchResult(False, "worker_died"), pred)


def killed(job: tuple, verdict: int, timeout_s: float, elapsed_s: float):
    """The result of a job whose worker was killed past a statement's deadline; `verdict`
    is what the worker published (see `KILLED_VERDICTS`)."""
    error = f"timeout after {timeout_s:g}s (stopped inside one SQLite call)"
    timed_out = ExecResult(ok=False, error=error, timed_out=True, elapsed_s=elapsed_s)
    if job[0] == "exec":
        return timed_out
    match = KILLED_VERDICTS[verdict]
    if verdict == 0:
        return Verdict(match, ExecResult(ok=False, error="not run: the gold query " + error))
    return Verdict(match, timed_out)


def worker_main(conn, progress, slot, settings: dict, parent: int) -> None:
    """Run chunks of jobs; `progress` = [position in the chunk, start time of that job or 0],
    `slot` = [deadline of the statement running or 0, index into KILLED_VERDICTS].

    `parent` is the pid of the process that started the worker, passed in rather than read
    here: a parent killed while the worker is still starting would otherwise be missed (the
    worker would read its new parent's pid and run the whole queued chunk)."""
    publish_deadlines(slot)
    runner = Runner(**settings)
    runner.slot = slot
    while True:
        try:
            chunk = conn.recv()
        except (EOFError, OSError):
            return
        if chunk is None:
            return
        results = []
        for position, (idx, job) in enumerate(chunk):
            if os.getppid() != parent:
                return  # the parent was killed: nobody waits for the rest of the chunk
            progress[0], progress[1] = position, time.monotonic()
            try:
                result = runner.run(job)
            except Exception as exc:  # noqa: BLE001 - a bug must not take the worker down
                result = failed(job, f"internal error: {exc!r}")
            results.append((idx, result))
        progress[1] = 0.0
        conn.send(results)
