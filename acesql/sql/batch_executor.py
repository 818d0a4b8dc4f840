"""Batch execution and verification of many SQL strings on worker processes.

    with BatchExecutor(workers=2, timeout_s=5) as ex:
        results = ex.execute_many([(db_path, sql), ...])             # ExecResult per item
        verdicts = ex.match_many([(db_path, pred, gold), ...], "bird")  # Verdict per item

Each worker keeps its own connections open (one per database file) and a cache of gold
results keyed by (db, sql), and jobs that share a gold query are routed to the worker that
already holds it, so a question's 8 candidates cost one gold execution, not 8.

A statement that SQLite does not stop at its deadline (one long call, such as a LIKE over
a long string: see `acesql.sql.host`) has its worker killed `host.KILL_GRACE_S` later; the
job comes back timed out, as if SQLite had stopped it. A worker that dies (killed, or stuck
past its hard deadline outside SQLite) never hangs the batch: the job it was running comes
back as an error, the jobs queued behind it are re-sent, and a fresh worker takes its
place. SQL never runs in the calling process, which could not stop such a call:
`workers=0` means one worker, as 1 does.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import time
from collections import deque
from multiprocessing.connection import wait

from tqdm import tqdm

from acesql.sql.columns import has_order_by
from acesql.sql.host import kill_time
from acesql.sql.matching import MATCH_MODES, execution_match
from acesql.sql.sandbox import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_ROWS,
    DEFAULT_TIMEOUT_S,
    ExecResult,
    check_timeout,
    deterministic,
)
from acesql.sql.worker import Verdict, failed, killed, worker_main

__all__ = ["BatchExecutor", "Verdict"]

PREFETCH_CHUNKS = 2  # chunks of jobs sent ahead to each worker
MAX_CHUNK = 32  # jobs per message at most
MAX_AFFINITY_KEYS = 200_000


class _Worker:
    def __init__(self, ctx, settings):
        self.conn, child = ctx.Pipe()
        self.progress = ctx.RawArray("d", 2)
        self.slot = ctx.RawArray("d", 2)  # the running statement's deadline; if killed, how
        self.process = ctx.Process(
            target=worker_main,
            args=(child, self.progress, self.slot, settings, os.getpid()),
            daemon=True,
        )
        self.process.start()
        child.close()
        self.inflight: deque[list[int]] = deque()  # chunks sent, oldest first

    def running_for(self, now: float) -> float:
        started = self.progress[1]
        return now - started if self.inflight and started > 0 else 0.0

    def kill_time(self) -> float | None:
        """When the statement this worker runs is overdue (None: it runs none)."""
        return kill_time(self.slot) if self.inflight else None

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
        self.n_workers = max(1, self.n_workers)
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

    # ---------------------------------------------------------------- public
    def execute_many(self, items) -> list[ExecResult]:
        """Execute `(db, sql)` pairs; results in input order."""
        jobs = [("exec", str(db), sql) for db, sql in items]
        return self._run(jobs, [(job[1],) for job in jobs], "execute")

    def match_many(self, items, mode: str = "multiset", keep_rows: bool = False) -> list[Verdict]:
        """Check `(db, pred_sql, gold_sql)` triples under `mode`; verdicts in input order."""
        if mode not in MATCH_MODES:
            execution_match(ExecResult(ok=True), ExecResult(ok=True), mode)  # raises ConfigError
        items = [(str(db), pred, gold) for db, pred, gold in items]
        # Worked out here, once per gold query: the workers do not parse SQL.
        ordered = (
            {gold: has_order_by(gold) for gold in {g for _, _, g in items}}
            if mode == "spider"
            else {}
        )
        jobs = [
            ("match", db, pred, gold, mode, ordered.get(gold, False), keep_rows)
            for db, pred, gold in items
        ]
        # a prediction repeated for the same question (sampled candidates often are) is
        # checked once; SQL whose result may change between runs is checked every time
        seen: dict[tuple, int] = {}
        unique, position = [], []
        for job in jobs:
            key = job if deterministic(job[2]) else None
            at = seen.get(key) if key is not None else None
            if at is None:
                at = len(unique)
                unique.append(job)
                if key is not None:
                    seen[key] = at
            position.append(at)
        results = self._run(unique, [(job[1], job[3]) for job in unique], "verify")
        return [results[at] for at in position]

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
            due = [t for t in (w.kill_time() for w in self._workers) if t is not None]
            timeout = min([0.5, *(t - time.monotonic() for t in due)])
            for i in sorted(set(handles[h] for h in wait(list(handles), max(0.0, timeout)))):
                worker = self._workers[i]
                remaining -= self._collect(worker, results, bar)
                if not worker.process.is_alive():
                    remaining -= self._replace(i, jobs, queues, results, bar, "died")
            now = time.monotonic()
            for i, worker in enumerate(self._workers):
                due = worker.kill_time()
                if due is not None and now >= due:
                    deadline = worker.slot[0]
                    worker.process.kill()
                    worker.process.join()
                    remaining -= self._collect(worker, results, bar)
                    # the statement may have ended just before the kill: then the job
                    # running at death is not at fault, and goes back to the queue
                    how = "timed_out" if worker.slot[0] == deadline else "requeue"
                    remaining -= self._replace(i, jobs, queues, results, bar, how)
                elif worker.running_for(now) > self.hard_deadline_s:
                    worker.process.kill()
                    worker.process.join()
                    remaining -= self._collect(worker, results, bar)
                    remaining -= self._replace(i, jobs, queues, results, bar, "was stuck")
        return results

    def _feed(self, jobs, queues, chunk_size) -> None:
        n = len(self._workers)
        for i, worker in enumerate(self._workers):
            while len(worker.inflight) < PREFETCH_CHUNKS:
                own = queues[i]
                source = own if own else max(queues, key=len)
                if not source:
                    break
                # chunks shrink as the work runs out, so no worker is left with a long
                # chunk while the others idle at the end
                queued = sum(len(q) for q in queues)
                take = min(chunk_size, len(source), max(1, queued // (2 * n * PREFETCH_CHUNKS)))
                chunk = [own.popleft() if own else source.pop() for _ in range(take)]
                try:
                    worker.conn.send([(idx, jobs[idx]) for idx in chunk])
                except OSError:  # the worker died since the last look: it is replaced, and
                    own.extendleft(reversed(chunk))  # its successor takes this chunk
                    break
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
        """Replace worker i; the job it was running fails (`how` says why; "timed_out": it
        times out, "requeue": it runs again), the rest of its work is re-queued."""
        old = self._workers[i]
        done = 0
        if old.inflight:
            head = old.inflight.popleft()
            position = int(old.progress[0]) if old.progress[1] > 0 else -1
            if 0 <= position < len(head) and how != "requeue":
                culprit = head.pop(position)
                if how == "timed_out":
                    timeout_s = self.settings["timeout_s"]
                    elapsed = time.monotonic() - (old.slot[0] - timeout_s)
                    results[culprit] = killed(jobs[culprit], int(old.slot[1]), timeout_s, elapsed)
                else:
                    message = (
                        f"SQL worker {how} (exit code {old.process.exitcode}) while running "
                        "this item"
                    )
                    results[culprit] = failed(jobs[culprit], message)
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
