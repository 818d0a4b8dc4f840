"""Batch execution and verification of many SQL strings on worker processes.

    with BatchExecutor(workers=2, timeout_s=5) as ex:
        results = ex.execute_many([(db_path, sql), ...])             # ExecResult per item
        verdicts = ex.match_many([(db_path, pred, gold), ...], "bird")  # Verdict per item

Each worker keeps its own connections open (one per database file) and a cache of gold
results keyed by (db, sql), and jobs that share a gold query are routed to the worker that
already holds it, so a question's 8 candidates cost one gold execution, not 8.

A worker that dies (killed, or stuck past its hard deadline) never hangs the batch: the job
it was running comes back as an error, the jobs queued behind it are re-sent, and a fresh
worker takes its place. `workers=0` runs everything in the calling process.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, replace
from multiprocessing.connection import wait

from tqdm import tqdm

from acesql.sql.columns import has_order_by
from acesql.sql.matching import MATCH_MODES, MatchResult, execution_match
from acesql.sql.sandbox import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_ROWS,
    DEFAULT_TIMEOUT_S,
    ExecResult,
    check_timeout,
    open_sandboxed,
    run_with_deadline,
    statement_problem,
)

PREFETCH_CHUNKS = 2  # chunks of jobs sent ahead to each worker
MAX_CHUNK = 32  # jobs per message at most
MAX_OPEN_CONNECTIONS = 64  # per worker
MAX_AFFINITY_KEYS = 200_000


@dataclass(frozen=True)
class Verdict:
    """The outcome of checking one predicted SQL against its gold SQL."""

    match: MatchResult
    pred: ExecResult  # rows dropped unless the batch asked to keep them

    def to_dict(self) -> dict:
        return {"match": self.match.to_dict(), "pred": self.pred.to_dict()}


class _Runner:
    """Runs jobs with a connection cache and a gold-result cache; lives in each worker."""

    def __init__(self, timeout_s, max_rows, max_bytes, gold_cache_size):
        self.timeout_s, self.max_rows, self.max_bytes = timeout_s, max_rows, max_bytes
        self.gold_cache_size = gold_cache_size
        self.connections: OrderedDict = OrderedDict()
        self.gold_cache: OrderedDict = OrderedDict()

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
        _, db, pred_sql, gold_sql, mode, keep_rows = job
        gold = self.gold(db, gold_sql)
        pred = self.execute(db, pred_sql)
        ordered = mode == "spider" and gold.ok and has_order_by(gold_sql)
        match = execution_match(pred, gold, mode, ordered=ordered)
        return Verdict(match, pred if keep_rows else replace(pred, rows=[]))


def _failed(job: tuple, message: str):
    pred = ExecResult(ok=False, error=message)
    if job[0] == "exec":
        return pred
    return Verdict(MatchResult(False, "worker_died"), pred)


def _worker_main(conn, progress, settings: dict, parent: int) -> None:
    """Run chunks of jobs; `progress` = [position in the chunk, start time of that job or 0].

    `parent` is the pid of the process that started the worker, passed in rather than read
    here: a parent killed while the worker is still starting would otherwise be missed (the
    worker would read its new parent's pid and run the whole queued chunk)."""
    runner = _Runner(**settings)
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
                result = _failed(job, f"internal error: {exc!r}")
            results.append((idx, result))
        progress[1] = 0.0
        conn.send(results)


class _Worker:
    def __init__(self, ctx, settings):
        self.conn, child = ctx.Pipe()
        self.progress = ctx.RawArray("d", 2)
        self.process = ctx.Process(
            target=_worker_main,
            args=(child, self.progress, settings, os.getpid()),
            daemon=True,
        )
        self.process.start()
        child.close()
        self.inflight: deque[list[int]] = deque()  # chunks sent, oldest first

    def running_for(self, now: float) -> float:
        started = self.progress[1]
        return now - started if self.inflight and started > 0 else 0.0

    def close(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            self.conn.send(None)

    def join(self) -> None:
        self.process.join(timeout=2)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self.conn.close()


class BatchExecutor:
    """A pool of SQL worker processes; see the module doc. Use it as a context manager."""

    def __init__(
        self,
        workers: int | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_rows: int = DEFAULT_MAX_ROWS,
        max_bytes: int = DEFAULT_MAX_BYTES,
        gold_cache_size: int = 4096,
        progress: bool = False,
    ):
        self.n_workers = (os.cpu_count() or 1) if workers is None else int(workers)
        if self.n_workers < 0:
            raise ValueError(f"workers must be >= 0, got {workers}")
        timeout_s = check_timeout(timeout_s)  # at once, not in a worker at the first job
        self.settings = dict(
            timeout_s=timeout_s,
            max_rows=int(max_rows),
            max_bytes=int(max_bytes),
            gold_cache_size=int(gold_cache_size),
        )
        # a job may run a gold and a prediction; past this a worker is presumed stuck
        self.hard_deadline_s = 2 * float(timeout_s) + 10.0
        self.progress = progress
        self.restarts = 0
        self._ctx = mp.get_context("spawn")
        self._workers: list[_Worker] = []
        self._affinity: dict = {}
        self._inline = _Runner(**self.settings) if self.n_workers == 0 else None

    # ---------------------------------------------------------------- public
    def execute_many(self, items) -> list[ExecResult]:
        """Execute `(db, sql)` pairs; results in input order."""
        jobs = [("exec", str(db), sql) for db, sql in items]
        return self._run(jobs, [(job[1],) for job in jobs], "execute")

    def match_many(self, items, mode: str = "multiset", keep_rows: bool = False) -> list[Verdict]:
        """Check `(db, pred_sql, gold_sql)` triples under `mode`; verdicts in input order."""
        if mode not in MATCH_MODES:
            execution_match(ExecResult(ok=True), ExecResult(ok=True), mode)  # raises ConfigError
        jobs = [("match", str(db), pred, gold, mode, keep_rows) for db, pred, gold in items]
        return self._run(jobs, [(job[1], job[3]) for job in jobs], "verify")

    def worker_pids(self) -> list[int]:
        return [w.process.pid for w in self._workers]

    def close(self) -> None:
        for worker in self._workers:
            worker.close()
        for worker in self._workers:
            worker.join()
        self._workers = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # --------------------------------------------------------------- private
    def _run(self, jobs: list[tuple], keys: list[tuple], label: str) -> list:
        bar = tqdm(total=len(jobs), desc=label, unit="sql", disable=not self.progress)
        try:
            if self._inline is not None:
                results = []
                for job in jobs:
                    results.append(self._inline.run(job))
                    bar.update()
                return results
            return self._dispatch(jobs, keys, bar)
        finally:
            bar.close()

    def _dispatch(self, jobs, keys, bar) -> list:
        while len(self._workers) < self.n_workers:
            self._workers.append(_Worker(self._ctx, self.settings))
        n = len(self._workers)
        # chunks amortize the message cost; small batches still spread over every worker
        chunk_size = max(1, min(MAX_CHUNK, len(jobs) // (n * 4)))
        queues = [deque() for _ in range(n)]
        if len(self._affinity) > MAX_AFFINITY_KEYS:
            self._affinity.clear()
        for idx, key in enumerate(keys):
            w = self._affinity.get(key)
            if w is None or w >= n:
                w = min(range(n), key=lambda i: len(queues[i]))
                self._affinity[key] = w
            queues[w].append(idx)
        results: list = [None] * len(jobs)
        remaining = len(jobs)
        while remaining:
            self._feed(jobs, queues, chunk_size)
            handles = {}
            for i, worker in enumerate(self._workers):
                handles[worker.conn] = handles[worker.process.sentinel] = i
            for i in sorted(set(handles[h] for h in wait(list(handles), timeout=0.5))):
                worker = self._workers[i]
                remaining -= self._collect(worker, results, bar)
                if not worker.process.is_alive():
                    remaining -= self._replace(i, jobs, queues, results, bar, "died")
            now = time.monotonic()
            for i, worker in enumerate(self._workers):
                if worker.running_for(now) > self.hard_deadline_s:
                    worker.process.kill()
                    worker.process.join()
                    remaining -= self._collect(worker, results, bar)
                    remaining -= self._replace(i, jobs, queues, results, bar, "was stuck")
        return results

    def _feed(self, jobs, queues, chunk_size) -> None:
        for i, worker in enumerate(self._workers):
            while len(worker.inflight) < PREFETCH_CHUNKS:
                own = queues[i]
                source = own if own else max(queues, key=len)
                if not source:
                    break
                take = min(chunk_size, len(source))
                chunk = [own.popleft() if own else source.pop() for _ in range(take)]
                worker.conn.send([(idx, jobs[idx]) for idx in chunk])
                worker.inflight.append(chunk)

    def _collect(self, worker: _Worker, results, bar) -> int:
        done = 0
        try:
            while worker.conn.poll():
                for idx, result in worker.conn.recv():
                    results[idx] = result
                    done += 1
                worker.inflight.popleft()
        except (EOFError, OSError):
            pass
        bar.update(done)
        return done

    def _replace(self, i, jobs, queues, results, bar, how: str) -> int:
        """Replace worker i; the job it was running fails, the rest of its work is re-queued."""
        old = self._workers[i]
        done = 0
        if old.inflight:
            head = old.inflight.popleft()
            position = int(old.progress[0]) if old.progress[1] > 0 else -1
            if 0 <= position < len(head):
                culprit = head.pop(position)
                message = (
                    f"SQL worker {how} (exit code {old.process.exitcode}) while running this item"
                )
                results[culprit] = _failed(jobs[culprit], message)
                done = 1
            requeue = head + [idx for chunk in old.inflight for idx in chunk]
            queues[i].extendleft(reversed(requeue))
        old.inflight.clear()
        old.close()
        old.join()
        self._workers[i] = _Worker(self._ctx, self.settings)
        self.restarts += 1
        bar.update(done)
        return done
