"""One long SQLite call (a huge LIKE, printf's repeat count) stops at its deadline on every
path that runs untrusted SQL, and comes back as `timed_out`."""

import json
import time

import pytest
from click.testing import CliRunner

from acesql.cli import cli
from acesql.sql.batch_executor import BatchExecutor
from acesql.sql.replicas import Replicas

TIMEOUT = 0.5
# past the deadline: the kill grace (0.2 s) and, on two busy shared cores, the scheduler
SLACK = 0.8
# one call each, which SQLite's progress handler never interrupts: 30 s and 7 s on their own
LONG_CALLS = {
    "like": "SELECT replace(hex(zeroblob(500000)),'0','a') LIKE "
    "'%' || replace(hex(zeroblob(10000)),'0','a') || 'b'",
    "printf": "SELECT printf('%.*c', 2000000000, 'x')",
}


@pytest.fixture(params=sorted(LONG_CALLS))
def long_call(request) -> str:
    return LONG_CALLS[request.param]


def _timed(run):
    start = time.monotonic()
    value = run()
    return value, time.monotonic() - start


@pytest.mark.parametrize("workers", [0, 2])
def test_executor_stops_one_long_call_at_its_deadline(school_db, long_call, workers):
    with BatchExecutor(workers=workers, timeout_s=TIMEOUT) as ex:
        ex.execute_many([(school_db, "SELECT 1")] * 2)  # workers started outside the timing
        (result, ok_after), wall = _timed(
            lambda: ex.execute_many([(school_db, long_call), (school_db, "SELECT 7")])
        )
    assert result.timed_out and not result.ok and "timeout after 0.5s" in result.error
    assert ok_after.ok and ok_after.rows == [(7,)]
    assert wall < TIMEOUT + SLACK


def test_a_verdict_says_which_side_timed_out(school_db, long_call):
    gold = "SELECT count(*) FROM student"
    with BatchExecutor(workers=1, timeout_s=TIMEOUT) as ex:
        pred_slow, gold_slow = ex.match_many(
            [(school_db, long_call, gold), (school_db, "SELECT 1", long_call)], "multiset"
        )
    assert pred_slow.match.reason == "pred_timeout" and pred_slow.pred.timed_out
    assert pred_slow.match.usable
    assert gold_slow.match.reason == "gold_timeout" and not gold_slow.match.usable


def test_sql_exec_and_match_stop_one_long_call(school_db, long_call):
    runner = CliRunner()
    args = ["--db", str(school_db), "--timeout", str(TIMEOUT)]
    out, wall = _timed(lambda: runner.invoke(cli, ["sql", "exec", *args, long_call]))
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["timed_out"] is True
    assert wall < TIMEOUT + SLACK + 1.0  # and a worker process's start
    gold = "SELECT count(*) FROM student"
    out, wall = _timed(
        lambda: runner.invoke(cli, ["sql", "match", *args, "--pred", long_call, "--gold", gold])
    )
    assert json.loads(out.output)["reason"] == "pred_timeout"
    assert wall < TIMEOUT + SLACK + 1.0


def test_a_replica_lease_stops_one_long_call_and_keeps_its_state(tmp_path, school_db, long_call):
    with Replicas(tmp_path / "r", timeout_s=TIMEOUT) as replicas:
        with replicas.lease(school_db) as db, replicas.lease(school_db) as other:
            assert db.execute("DELETE FROM student WHERE StudentID > 10").ok
            assert other.execute("DELETE FROM student WHERE StudentID > 20").ok
            result, wall = _timed(lambda: db.execute(long_call))
            assert result.timed_out and "timeout after 0.5s" in result.error
            assert wall < TIMEOUT + SLACK
            # both trajectories go on from their own state
            assert db.execute("SELECT count(*) FROM student").rows == [(10,)]
            assert other.execute("SELECT count(*) FROM student").rows == [(20,)]
        with replicas.lease(school_db) as db:
            assert db.execute("SELECT count(*) FROM student").rows == [(60,)]


def test_debug_check_stops_a_fix_with_one_long_call(tmp_path, school_db, long_call):
    from acesql.debug.check import check_fix
    from acesql.debug.task import DebugTask

    task = DebugTask(
        task_id="t",
        db_id="school",
        db_path=str(school_db),
        category="query",
        issue="count the students",
        issue_sql=["SELECT 1"],
        solution_sql=["SELECT count(*) FROM student"],
    )
    with Replicas(tmp_path / "r", timeout_s=TIMEOUT) as replicas:
        verdict, wall = _timed(lambda: check_fix(task, long_call, replicas))
    assert not verdict.passed and "timeout" in verdict.reason
    assert wall < TIMEOUT + SLACK + 0.5


def test_ask_stops_a_candidate_with_one_long_call(school_db, long_call):
    from acesql.config import SelectionSection
    from acesql.models.prompts import PromptBuilder
    from acesql.selection.ask import ask
    from tests.fakes import AskEngine, ChatTokenizer

    engine = AskEngine(long_call, ["SELECT COUNT(*) FROM student"])
    selection = SelectionSection(method="greedy", answer="pipeline")
    answer, wall = _timed(
        lambda: ask(
            engine, PromptBuilder(ChatTokenizer()), school_db, "?", selection, timeout_s=TIMEOUT
        )
    )
    assert answer.result.timed_out and wall < TIMEOUT + SLACK + 1.0  # and a worker's start
