"""A child process that runs untrusted SQL for its parent, killed when a statement outlives
its deadline.

SQLite's progress handler, which enforces the sandbox's deadline, runs between instructions
of SQLite's virtual machine, and one instruction can run for minutes: a LIKE of a 20,000-
character pattern over a 1 MB string, `printf('%.*c', 2000000000, 'x')`. No thread can stop
it; the kernel can stop a process. So SQL that a model or a user wrote runs in a child that
publishes each statement's deadline in shared memory (`sandbox.publish_deadlines`), and its
parent kills it `KILL_GRACE_S` past that deadline if SQLite has not stopped the statement by
then. `BatchExecutor`'s workers are such children; `SqlHost` is one for a caller that keeps
state in the child between calls (the transactions of `Replicas`).

    host = SqlHost(functools.partial(SomeServer, ...))
    value = host.call("method", arg)   # or a `Stopped` when the child had to be killed
    host.close()

The child is started with `spawn` (it imports the SQL modules only) on the first call and
again after a kill; `generation` counts the starts, so that a caller knows its state in the
child is gone. It ends with its parent: it reads the parent's pid before each call and ends
when the pipe closes.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import time
import traceback
from dataclasses import dataclass

from acesql.sql.sandbox import publish_deadlines

KILL_GRACE_S = 0.2  # past a statement's deadline, before its process is killed
IDLE_POLL_S = 0.05  # how often the parent looks at a child that runs no statement


def kill_time(slot) -> float | None:
    """When a process publishing deadlines into `slot` is due to be killed, or None while it
    runs no statement."""
    deadline = slot[0]
    return deadline + KILL_GRACE_S if deadline > 0 else None


@dataclass(frozen=True)
class Stopped:
    """What `SqlHost.call` returns when the child did not answer: `timed_out` when it was
    killed past a statement's deadline, else it died (exit code `exitcode`)."""

    timed_out: bool
    exitcode: int | None


class SqlHost:
    """Runs the methods of one object in a child process, one call at a time; see the module
    doc. `factory`, called without arguments in the child, builds the object; it must be
    picklable (a class, or a `functools.partial` of one)."""

    def __init__(self, factory):
        self.factory = factory
        self.generation = 0  # children started so far
        self._ctx = mp.get_context("spawn")
        self._process = None
        self._conn = None
        self._slot = None

    @property
    def running(self) -> bool:
        """Whether a child runs now (none before the first call, and after a kill)."""
        return self._process is not None

    def call(self, method: str, *args):
        """`method(*args)` on the object in the child: its value, or `Stopped`. An exception
        in the child is a bug of the object's code: it raises RuntimeError here, with the
        child's traceback."""
        if self._process is None:
            self._start()
        try:
            self._conn.send((method, args))
        except OSError:
            return self._stop(timed_out=False)
        try:
            return self._answer(method)
        except BaseException:  # interrupted (Ctrl-C, SIGTERM): the child's state is unknown
            if self._process is not None:
                self._stop(timed_out=False)
            raise

    def _answer(self, method: str):
        while True:
            due = kill_time(self._slot)
            now = time.monotonic()
            if due is not None and now >= due:
                return self._stop(timed_out=True)
            wait = IDLE_POLL_S if due is None else min(due - now, IDLE_POLL_S * 10)
            try:
                if not self._conn.poll(wait):
                    if not self._process.is_alive():
                        return self._stop(timed_out=False)
                    continue
                status, value = self._conn.recv()
            except (EOFError, OSError):
                return self._stop(timed_out=False)
            if status == "error":
                raise RuntimeError(f"SQL host: {method} failed in the child:\n{value}")
            return value

    def close(self) -> None:
        """End the child (its state is lost); a later call starts a new one."""
        if self._process is None:
            return
        with contextlib.suppress(OSError):
            self._conn.send(None)
        self._process.join(timeout=2)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()
        self._conn.close()
        self._process = self._conn = None

    def _start(self) -> None:
        self._conn, child = self._ctx.Pipe()
        self._slot = self._ctx.RawArray("d", 1)
        self._process = self._ctx.Process(
            target=host_main,
            args=(child, self._slot, self.factory, os.getpid()),
            daemon=True,
        )
        self._process.start()
        child.close()
        self.generation += 1

    def _stop(self, timed_out: bool) -> Stopped:
        self._process.kill()
        self._process.join()
        exitcode = self._process.exitcode
        self._conn.close()
        self._process = self._conn = None
        return Stopped(timed_out, exitcode)


def host_main(conn, slot, factory, parent: int) -> None:
    """The child's loop: build the object, then answer calls until the pipe closes."""
    publish_deadlines(slot)
    target = factory()
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message is None or os.getppid() != parent:
            return
        method, args = message
        try:
            reply = ("ok", getattr(target, method)(*args))
        except Exception:  # noqa: BLE001 - reported to the parent, which raises it
            reply = ("error", traceback.format_exc())
        try:
            conn.send(reply)
        except (EOFError, OSError):
            return
