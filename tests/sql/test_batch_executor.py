"""The batch executor: same answers as one-by-one execution, gold caching, dead workers."""

import os
import signal
import threading
import time

import pytest

from acesql.sql.batch_executor import BatchExecutor
from acesql.sql.sandbox import execute

SLOW = "SELECT count(*) FROM student a, student b, student c, student d, student e"
QUERIES = [
    "SELECT count(*) FROM student",
    "SELECT name FROM student WHERE age > 25 ORDER BY name",
    "SELECT nope FROM student",
    "DELETE FROM student",
    "SELECT title, credits FROM course ORDER BY credits DESC, title",
]


@pytest.fixture(scope="module")
def executor():
    with BatchExecutor(workers=2, timeout_s=5) as ex:
        yield ex


def test_execute_many_equals_sequential(executor, school_db, shop_db):
    items = [(school_db, q) for q in QUERIES] + [(shop_db, "SELECT count(*) FROM orders")]
    items += [("/no/such/file.sqlite", "SELECT 1")]
    results = executor.execute_many(items * 3)
    assert len(results) == len(items) * 3
    for (db, sql), got in zip(items * 3, results):
        want = execute(db, sql)
        assert (got.ok, got.rows, got.columns, got.error) == (
            want.ok,
            want.rows,
            want.columns,
            want.error,
        )


def test_match_many(executor, school_db):
    gold = "SELECT name FROM student WHERE age > 25"
    items = [
        (school_db, gold, gold),
        (school_db, "SELECT name FROM student WHERE 25 < age", gold),
        (school_db, "SELECT name FROM student WHERE age >= 25", gold),
        (school_db, "SELECT nothing", gold),
        (school_db, gold, "SELECT broken FROM"),
    ]
    verdicts = executor.match_many(items, "multiset")
    assert [v.match.match for v in verdicts] == [True, True, False, False, False]
    assert verdicts[3].match.reason == "pred_error" and verdicts[3].pred.error
    assert verdicts[4].match.usable is False
    assert verdicts[0].pred.rows == []  # rows are dropped unless asked for
    kept = executor.match_many(items[:1], "multiset", keep_rows=True)
    assert kept[0].pred.rows


def test_zero_workers_is_one_worker_process(school_db):
    items = [(school_db, q, QUERIES[1]) for q in QUERIES]
    with BatchExecutor(workers=0) as one, BatchExecutor(workers=2) as pool:
        a = [v.match for v in one.match_many(items, "spider")]
        b = [v.match for v in pool.match_many(items, "spider")]
        assert len(one.worker_pids()) == 1 and os.getpid() not in one.worker_pids()
    assert a == b and a[1].match


def _runner():
    from acesql.sql.worker import Runner

    return Runner(timeout_s=5, max_rows=1000, max_bytes=10**6, gold_cache_size=16)


def test_gold_is_executed_once(school_db):
    runner = _runner()
    gold = "SELECT count(*) FROM enrollment"
    for i in range(40):
        runner.run(("match", str(school_db), f"SELECT {i}", gold, "bird", False, False))
    assert list(runner.gold_cache) == [(str(school_db), gold)]


def test_killed_worker_neither_hangs_nor_drops_items(school_db):
    with BatchExecutor(workers=2, timeout_s=3) as ex:
        ex.execute_many([(school_db, "SELECT 1")] * 4)  # start the workers
        pids = ex.worker_pids()
        items = [(school_db, SLOW), (school_db, SLOW)] + [(school_db, QUERIES[0])] * 20

        def kill():
            for pid in pids:
                os.kill(pid, signal.SIGKILL)

        timer = threading.Timer(0.7, kill)
        timer.start()
        start = time.monotonic()
        results = ex.execute_many(items)
        timer.join()
        assert time.monotonic() - start < 15
        assert all(r is not None for r in results)
        died = [r for r in results if r.error and "worker died" in r.error]
        assert 1 <= len(died) <= 2
        assert all(not r.ok for r in results[:2])  # killed, or timed out after a re-send
        assert all(r.ok and r.rows == [(60,)] for r in results[2:])
        assert ex.restarts == 2
        assert set(ex.worker_pids()).isdisjoint(pids)
        again = ex.execute_many([(school_db, QUERIES[0])] * 4)
        assert all(r.ok for r in again)


def test_unknown_mode_fails_before_any_work(executor, school_db):
    from acesql.errors import ConfigError

    with pytest.raises(ConfigError):
        executor.match_many([(school_db, "SELECT 1", "SELECT 1")], "approximately")


@pytest.mark.parametrize("timeout", [float("nan"), float("inf"), 0, -2])
def test_a_bad_timeout_is_refused_before_any_worker_starts(timeout):
    from acesql.errors import ConfigError

    with pytest.raises(ConfigError, match="finite number of seconds > 0"):
        BatchExecutor(workers=0, timeout_s=timeout)


def test_stuck_worker_is_replaced(school_db):
    with BatchExecutor(workers=1, timeout_s=30) as ex:
        ex.hard_deadline_s = 0.5  # stands in for a worker wedged outside SQLite
        results = ex.execute_many([(school_db, SLOW), (school_db, QUERIES[0])])
        assert "was stuck" in results[0].error
        assert results[1].ok and ex.restarts == 1


@pytest.mark.parametrize("delay", [0.0, 0.5], ids=["while-the-worker-starts", "mid-query"])
def test_workers_stop_when_their_parent_is_killed(school_db, tmp_path, delay):
    """A killed evaluation must not leave SQL workers grinding through their queue, even
    when the parent dies before the worker has finished starting."""
    import os
    import signal
    import subprocess
    import sys
    import time

    script = tmp_path / "parent.py"
    script.write_text(
        "import threading, time\n"
        "from acesql.sql.batch_executor import BatchExecutor\n"
        "def report(ex):\n"
        "    while not ex.worker_pids():\n"
        "        time.sleep(0.05)\n"
        "    print(ex.worker_pids()[0], flush=True)\n"
        "if __name__ == '__main__':\n"
        "    ex = BatchExecutor(workers=1, timeout_s=1.0)\n"
        "    threading.Thread(target=report, args=(ex,), daemon=True).start()\n"
        "    endless = 'WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) '\n"
        "    endless += 'SELECT count(*) FROM c'\n"
        f"    ex.execute_many([({str(school_db)!r}, endless)] * 200)\n"
    )
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    worker = int(proc.stdout.readline())
    time.sleep(delay)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 4  # the job running when the parent died ends by timeout
    while time.monotonic() < deadline:
        try:
            os.kill(worker, 0)
        except ProcessLookupError:
            break
        with open(f"/proc/{worker}/stat") as fh:
            if fh.read().split(")")[-1].split()[0] == "Z":
                break  # exited; only its (dead) parent could reap it
        time.sleep(0.1)
    else:
        os.kill(worker, signal.SIGKILL)
        pytest.fail("the SQL worker outlived its killed parent by 4 s")


def test_repeated_predictions_and_the_gold_itself_run_once_unless_volatile(school_db, monkeypatch):
    from acesql.sql.worker import Runner

    ran = []
    real = Runner.execute

    def counting(self, db, sql):
        ran.append(sql)
        return real(self, db, sql)

    monkeypatch.setattr(Runner, "execute", counting)
    runner = _runner()  # what a worker runs, here, where the calls can be counted
    monkeypatch.setattr(BatchExecutor, "_run", lambda self, jobs, *_: list(map(runner.run, jobs)))
    gold = "SELECT count(*) FROM student"
    items = [(school_db, "SELECT 1", gold)] * 3 + [(school_db, gold, gold)]
    items += [(school_db, "SELECT abs(random()) >= 0", gold)] * 2
    with BatchExecutor(workers=1) as ex:
        verdicts = ex.match_many(items, "multiset", keep_rows=True)
    assert [v.match.match for v in verdicts] == [False, False, False, True, False, False]
    assert verdicts[3].pred.rows == [(60,)] and verdicts[0].pred.rows == [(1,)]
    # the gold once (the candidate equal to it reuses it), "SELECT 1" once, random() twice
    assert sorted(ran) == sorted([gold, "SELECT 1", *["SELECT abs(random()) >= 0"] * 2])


def test_a_worker_dead_before_the_batch_starts_is_replaced_not_written_to(school_db):
    with BatchExecutor(workers=2, timeout_s=3) as ex:
        ex.execute_many([(school_db, "SELECT 1")] * 4)  # start the workers
        dead = ex._workers[0].process
        os.kill(dead.pid, signal.SIGKILL)
        dead.join()  # gone, and its end of the pipe closed, before the next batch
        results = ex.execute_many([(school_db, QUERIES[0])] * 40)
        assert all(r.ok and r.rows == [(60,)] for r in results)
        assert ex.restarts == 1 and dead.pid not in ex.worker_pids()
