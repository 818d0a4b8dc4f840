"""Debugging tasks: injected bugs, the fix check, intents, generation from synthetic data."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from acesql.data.loaders import load_dataset
from acesql.debug.bugs import QUERY_BUGS, inject
from acesql.debug.build import BuildConfig, build_tasks, summarize
from acesql.debug.check import check_fix
from acesql.debug.intents import MANAGEMENT, PERSONALIZATION
from acesql.debug.task import DebugTask, read_tasks, write_tasks
from acesql.errors import ConfigError, DataError
from acesql.sql.replicas import Replicas
from acesql.sql.sandbox import open_sandboxed
from acesql.sql.schema import Schema

BUG_CASES = json.loads((Path(__file__).parents[1] / "fixtures" / "debug_bugs.json").read_text())


@pytest.fixture()
def replicas(tmp_path):
    with Replicas(tmp_path / "replicas", timeout_s=10) as replicas:
        yield replicas


def task(db, category="query", **fields) -> DebugTask:
    base = {
        "task_id": "t1",
        "db_id": "school",
        "db_path": str(db),
        "category": category,
        "issue": "",
        "issue_sql": ["SELECT 1"],
        "solution_sql": ["SELECT name FROM student WHERE age > 20"],
    }
    return DebugTask(**(base | fields))


@pytest.mark.parametrize("case", BUG_CASES, ids=lambda c: f"{c['bug']}:{c['sql'][:40]}")
def test_injected_bugs(case, schemas):
    assert inject(case["sql"], case["bug"], schemas["school"], random.Random(0)) == case["expected"]


def test_every_bug_has_a_case_that_applies_and_one_that_does_not():
    applies = {c["bug"] for c in BUG_CASES if c["expected"]}
    skips = {c["bug"] for c in BUG_CASES if c["expected"] is None}
    assert applies == skips == set(QUERY_BUGS)


def test_an_unknown_bug_names_the_known_ones(schemas):
    with pytest.raises(ConfigError, match="wrong_join_key"):
        inject("SELECT 1", "typo", schemas["school"], random.Random(0))


def test_a_query_fix_passes_on_the_same_rows_in_any_column_order(replicas, school_db):
    t = task(school_db, solution_sql=["SELECT name, age FROM student WHERE age > 20"])
    assert check_fix(t, "SELECT age, name FROM student WHERE NOT age <= 20", replicas).passed
    wrong = check_fix(t, "SELECT name, age FROM student WHERE age >= 20", replicas)
    assert not wrong.passed and wrong.usable and wrong.reason != "pass"
    broken = check_fix(t, "SELECT nam FROM student", replicas)
    assert not broken.passed and broken.reason.startswith("fix_error (statement 1 of 1)")
    assert not check_fix(t, "  ", replicas).passed


def test_a_management_fix_is_checked_on_the_state_it_leaves(replicas, school_db):
    t = task(
        school_db,
        "management",
        solution_sql=["UPDATE student SET gpa = 0 WHERE age IS NOT NULL", "DELETE FROM course"],
    )
    same = "DELETE FROM course WHERE 1; UPDATE student SET gpa = 0.0 WHERE NOT age IS NULL"
    assert check_fix(t, same, replicas).passed
    checked = check_fix(
        t, ["UPDATE student SET gpa = 0 WHERE age <> NULL", "DELETE FROM course"], replicas
    )
    assert not checked.passed and checked.reason == "state: table student differs"
    extra = check_fix(t, [*t.solution_sql, "CREATE TABLE note (x)"], replicas)
    assert not extra.passed and "extra" in extra.reason


@pytest.mark.parametrize(
    "fix",
    [
        "CREATE TEMP VIEW student AS SELECT * FROM main.student WHERE NOT (age > 40)",
        "CREATE TEMP TABLE student AS SELECT * FROM main.student WHERE NOT (age > 40)",
        "CREATE TEMP TABLE note (x)",
    ],
    ids=["temp-view-hides-the-table", "temp-table-hides-the-table", "a-temp-table-beside"],
)
def test_a_temp_object_is_part_of_the_state_and_cannot_hide_a_table(replicas, school_db, fix):
    t = task(school_db, "management", solution_sql=["DELETE FROM student WHERE age > 40"])
    checked = check_fix(t, fix, replicas)
    assert not checked.passed and checked.reason.startswith("state: schema objects differ")
    assert "temp" in checked.reason


def test_checks_run_on_both_sides_after_the_fix(replicas, school_db):
    t = task(
        school_db,
        "personalization",
        preprocess_sql=["CREATE TABLE gone (id)"],
        solution_sql=[
            "CREATE TRIGGER log_gone AFTER DELETE ON course BEGIN "
            "INSERT INTO gone VALUES (OLD.course_id); END"
        ],
        checks=[
            "DELETE FROM course WHERE course_id IN (SELECT MIN(course_id) FROM course)",
            "SELECT id FROM gone",
        ],
    )
    assert check_fix(t, t.solution_sql, replicas).passed
    wrong = check_fix(t, [t.solution_sql[0].replace("AFTER DELETE", "AFTER UPDATE")], replicas)
    assert not wrong.passed and wrong.reason == "state: check 2 differs"
    assert wrong.checks[1][0].rows == [] and len(wrong.checks[1][1].rows) == 1


def test_a_task_whose_solution_fails_is_unusable(replicas, school_db):
    t = task(school_db, solution_sql=["SELECT nope FROM student"])
    checked = check_fix(t, "SELECT 1", replicas)
    assert not checked.passed and not checked.usable


def test_judging_never_touches_the_database(replicas, school_db):
    before = school_db.read_bytes()
    t = task(school_db, "management", solution_sql=["DELETE FROM student"])
    check_fix(t, "DROP TABLE student", replicas)
    assert school_db.read_bytes() == before


@pytest.mark.parametrize("name", sorted(MANAGEMENT) + sorted(PERSONALIZATION))
def test_intent_rules_give_working_solutions_and_broken_issues(
    name, replicas, school_db, synth_dir
):
    rule = {**MANAGEMENT, **PERSONALIZATION}[name]
    databases = [school_db, *sorted(synth_dir.glob("databases/*/*.sqlite"))]
    drafts = []
    for db in databases:
        conn = open_sandboxed(db)
        schema = Schema.from_sqlite(db, n_samples=0)
        drafts += [(db, rule(schema, conn, random.Random(seed))) for seed in range(3)]
        conn.close()
    drafts = [(db, d) for db, d in drafts if d is not None]
    assert drafts, f"{name} found nothing to do in {len(databases)} databases"
    broken_ones = 0
    for db, draft in drafts:
        t = task(
            db,
            draft.category,
            issue_sql=draft.issue_sql,
            solution_sql=draft.solution_sql,
            preprocess_sql=draft.preprocess_sql,
            checks=draft.checks,
        )
        assert check_fix(t, t.solution_sql, replicas).passed, draft
        broken = check_fix(t, t.issue_sql, replicas)
        assert broken.usable, draft
        broken_ones += not broken.passed
    assert broken_ones  # drafts whose issue changes nothing are dropped by the builder


def test_tasks_from_synthetic_data_are_verified_and_keep_their_split(replicas, synth_dir):
    config = BuildConfig(tasks_per_db=6, seed=0)
    examples = load_dataset(synth_dir, "synth", "test_ood").examples
    tasks, rejected = build_tasks(examples, "test_ood", replicas, config)
    assert tasks and {t.split for t in tasks} == {"test_ood"}
    assert {t.category for t in tasks} <= {"query", "management", "personalization"}
    for t in tasks:
        assert check_fix(t, t.solution_sql, replicas).passed
        assert not check_fix(t, t.issue_sql, replicas).passed
        assert t.issue_sql[0].rstrip(";") in t.issue
        assert t.solution_sql[0] not in t.issue
    again, _ = build_tasks(examples, "test_ood", replicas, config)
    assert [t.to_dict() for t in again] == [t.to_dict() for t in tasks]
    summary = summarize(tasks, rejected)
    assert summary["tasks"] == len(tasks) == sum(summary["by_category"].values())


def test_category_counts_follow_the_shares():
    assert BuildConfig(tasks_per_db=12).counts() == {
        "query": 6,
        "management": 4,
        "personalization": 2,
    }
    assert sum(BuildConfig(tasks_per_db=7, shares=(1, 1, 1)).counts().values()) == 7
    with pytest.raises(ConfigError):
        BuildConfig(tasks_per_db=0)


def test_tasks_round_trip_and_bad_lines_are_named(tmp_path, school_db):
    path = tmp_path / "tasks.jsonl"
    tasks = [task(school_db, task_id=f"t{i}") for i in range(3)]
    write_tasks(path, tasks)
    assert [t.to_dict() for t in read_tasks(path)] == [t.to_dict() for t in tasks]
    path.write_text(path.read_text() + '{"task_id": "x", "category": "query"}\n')
    with pytest.raises(DataError, match=r"tasks.jsonl:4"):
        read_tasks(path)
    with pytest.raises(DataError, match="category"):
        task(school_db, category="select")
    with pytest.raises(DataError, match="run the debug_data stage"):
        read_tasks(tmp_path / "missing.jsonl")


def test_bird_critic_records_become_checkable_tasks(replicas, school_db, tmp_path):
    from acesql.debug.bird_critic import load_bird_critic

    fixture = Path(__file__).parents[1] / "fixtures" / "bird_critic_sample.jsonl"
    tasks, skipped = load_bird_critic(fixture, school_db.parent.parent)
    assert [t.task_id for t in tasks] == ["0", "1", "2"]
    assert [t.category for t in tasks] == ["query", "management", "personalization"]
    assert skipped == {"database_missing": 1, "no_solution": 1, "transpile_failed": 1}
    assert tasks[1].solution_sql == ["UPDATE student SET gpa = 4.0 WHERE CAST(age AS INTEGER) > 25"]
    assert '"dept_id"' in tasks[0].solution_sql[0]  # MySQL backticks, translated
    for t in tasks:
        assert t.source == "bird-critic" and t.issue
        assert check_fix(t, t.solution_sql, replicas).passed
        assert not check_fix(t, t.issue_sql, replicas).passed
    bad = tmp_path / "bad.jsonl"
    bad.write_text(fixture.read_text() + '{"query": "no database"}\n')
    with pytest.raises(DataError, match=r"bad.jsonl:7: no selected_database"):
        load_bird_critic(bad, school_db.parent.parent)


def test_the_debug_commands(tmp_path, school_db):
    from click.testing import CliRunner

    from acesql.cli import cli

    tasks_file = tmp_path / "tasks.jsonl"
    write_tasks(tasks_file, [task(school_db, "management", solution_sql=["DELETE FROM course"])])
    run = CliRunner().invoke

    def judged(*fix):
        result = run(cli, ["debug", "check", "--tasks", str(tasks_file), "--id", "t1", *fix])
        assert result.exit_code == 0, result.output
        return json.loads(result.output)

    assert judged("--fix", "DELETE FROM course WHERE course_id > 0")["passed"]
    verdict = judged("--fix", "DELETE FROM student")
    assert not verdict["passed"] and verdict["reason"].startswith("state:")
    fix_file = tmp_path / "fix.sql"
    fix_file.write_text("DELETE FROM course; SELECT COUNT(*) FROM course;")
    assert judged("--fix-file", str(fix_file))["passed"]
    missing = run(cli, ["debug", "check", "--tasks", str(tasks_file), "--id", "nope", "--fix", "x"])
    assert missing.exit_code != 0 and "no task 'nope'" in missing.output
    shown = run(cli, ["debug", "show", "--tasks", str(tasks_file)])
    assert json.loads(shown.output)["by_category"] == {"management": 1}
    out = tmp_path / "critic.jsonl"
    fixture = Path(__file__).parents[1] / "fixtures" / "bird_critic_sample.jsonl"
    db_root = str(school_db.parent.parent)
    imported = run(
        cli,
        [
            "debug",
            "import-bird-critic",
            "--jsonl",
            str(fixture),
            "--db-root",
            db_root,
            "--out",
            str(out),
        ],
    )
    assert json.loads(imported.output)["tasks"] == 3 and len(read_tasks(out)) == 3


def _task_line(school_db, **fields) -> bytes:
    return (json.dumps(task(school_db).to_dict() | fields) + "\n").encode()


@pytest.mark.parametrize(
    "content,message",
    [
        (lambda db: b"[1]\n", "tasks.jsonl:1: not a JSON object (got list)"),
        (lambda db: b'{"task_id": "\xff"}\n', "tasks.jsonl is not UTF-8"),
        (
            lambda db: _task_line(db, solution_sql="DELETE FROM student"),
            "tasks.jsonl:1: task 't1': solution_sql must be a list of SQL statements, got a str",
        ),
        (
            lambda db: _task_line(db, preprocess_sql="DELETE FROM student"),
            "tasks.jsonl:1: task 't1': preprocess_sql must be a list of SQL statements, got a str",
        ),
    ],
    ids=["a-list", "not-utf8", "solution-a-string", "preprocess-a-string"],
)
def test_a_malformed_tasks_file_is_one_data_error_naming_the_line(
    tmp_path, school_db, content, message
):
    path = tmp_path / "tasks.jsonl"
    path.write_bytes(content(school_db))
    with pytest.raises(DataError) as refused:
        read_tasks(path)
    assert message in str(refused.value)


def test_a_fix_file_that_is_not_utf8_is_refused_in_one_line(
    tmp_path, school_db, monkeypatch, capsys
):
    import sys

    from acesql.cli import main

    tasks_file = tmp_path / "tasks.jsonl"
    write_tasks(tasks_file, [task(school_db)])
    fix = tmp_path / "fix.sql"
    fix.write_bytes(b"SELECT '\xff'")
    argv = ["acesql", "debug", "check", "--tasks", str(tasks_file), "--id", "t1"]
    monkeypatch.setattr(sys, "argv", [*argv, "--fix-file", str(fix)])
    with pytest.raises(SystemExit) as exited:
        main()
    output = capsys.readouterr().err
    assert exited.value.code == 2 and "fix.sql is not UTF-8" in output
    assert output.count("\n") == 1


@pytest.mark.parametrize(
    "line,message",
    [
        (
            b'{"selected_database": 5, "sol_sql": ["SELECT 1"]}',
            "bad.jsonl:1: selected_database must be a string, got 5",
        ),
        (
            b'{"db_id": "school", "sol_sql": 5, "issue_sql": ["SELECT 2"]}',
            "bad.jsonl:1: sol_sql must be a string or a list of strings, got 5",
        ),
        (b'{"db_id": "school", "query": "\xff"}', "bad.jsonl is not UTF-8"),
    ],
    ids=["database-a-number", "solution-a-number", "not-utf8"],
)
def test_a_malformed_bird_critic_record_is_one_data_error(tmp_path, school_db, line, message):
    from acesql.debug.bird_critic import load_bird_critic

    path = tmp_path / "bad.jsonl"
    path.write_bytes(line + b"\n")
    with pytest.raises(DataError) as refused:
        load_bird_critic(path, school_db.parent.parent)
    assert message in str(refused.value)


def test_a_statement_too_deep_to_translate_is_counted_not_fatal(tmp_path, school_db):
    from acesql.debug.bird_critic import load_bird_critic

    fixture = Path(__file__).parents[1] / "fixtures" / "bird_critic_sample.jsonl"
    deep = "SELECT " + "(" * 3000 + "1" + ")" * 3000
    record = {"db_id": "school", "dialect": "MySQL", "issue_sql": deep, "sol_sql": deep}
    path = tmp_path / "deep.jsonl"
    path.write_text(fixture.read_text() + json.dumps(record) + "\n")
    tasks, skipped = load_bird_critic(path, school_db.parent.parent)
    assert len(tasks) == 3 and skipped["transpile_failed"] == 2


def test_a_fix_check_stopped_by_sigterm_leaves_no_replica_behind(tmp_path, school_db):
    import os
    import signal
    import subprocess
    import sys
    import time

    tasks_file = tmp_path / "tasks.jsonl"
    write_tasks(tasks_file, [task(school_db, "management", solution_sql=["DELETE FROM course"])])
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    endless = (
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c"
    )
    command = [sys.executable, "-c", "from acesql.cli import main; main()", "debug", "check"]
    command += ["--tasks", str(tasks_file), "--id", "t1", "--timeout", "60", "--fix", endless]
    proc = subprocess.Popen(
        command, env=os.environ | {"TMPDIR": str(scratch)}, text=True, stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + 30
    while not list(scratch.glob("acesql-replicas-*/worker-0/*/*.sqlite")):
        assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read()
        time.sleep(0.1)
    time.sleep(0.5)  # the fix is running
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 130
    assert list(scratch.iterdir()) == []


def test_the_old_name_of_the_fix_check_still_runs_it(tmp_path, school_db):
    from click.testing import CliRunner

    from acesql.cli import cli

    tasks_file = tmp_path / "tasks.jsonl"
    write_tasks(tasks_file, [task(school_db, "management", solution_sql=["DELETE FROM course"])])
    args = ["--tasks", str(tasks_file), "--id", "t1", "--fix", "DELETE FROM student"]
    old = CliRunner().invoke(cli, ["debug", "judge", *args])
    new = CliRunner().invoke(cli, ["debug", "check", *args])
    assert "deprecated" in old.stderr and "acesql debug check" in old.stderr
    verdicts = [json.loads(result.stdout) for result in (old, new)]
    assert [v["passed"] for v in verdicts] == [False, False]
    assert verdicts[0]["reason"] == verdicts[1]["reason"]
