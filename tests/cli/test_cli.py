"""The `acesql` command line, run as a user would run it."""

import json
import os
import sqlite3
import subprocess
import sys

import pytest

from acesql.cli import cli


def acesql(*args, check=True):
    proc = subprocess.run(
        [sys.executable, "-m", "acesql.cli", *map(str, args)], capture_output=True, text=True
    )
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def _commands(group, prefix=()):
    for name, command in group.commands.items():
        yield (*prefix, name)
        if hasattr(command, "commands"):
            yield from _commands(command, (*prefix, name))


@pytest.mark.parametrize("command", [(), *_commands(cli)], ids=lambda c: " ".join(c) or "acesql")
def test_every_command_has_help(command):
    from click.testing import CliRunner

    result = CliRunner().invoke(cli, [*command, "--help"])
    assert result.exit_code == 0 and "Usage:" in result.output


def test_sql_exec(school_db):
    out = json.loads(
        acesql("sql", "exec", "--db", school_db, "SELECT count(*) FROM student").stdout
    )
    assert out["ok"] and out["rows"] == [[60]] and out["columns"] == ["count(*)"]
    bad = json.loads(acesql("sql", "exec", "--db", school_db, "DROP TABLE student").stdout)
    assert not bad["ok"] and bad["error"]
    slow = "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM r) SELECT count(*) FROM r"
    out = json.loads(acesql("sql", "exec", "--db", school_db, "--timeout", "0.3", slow).stdout)
    assert out["timed_out"] and out["elapsed_s"] < 0.5


def test_sql_columns(school_db):
    sql = 'SELECT T2."Dept Name", count(*) FROM student T1 JOIN Department T2 USING (dept_id)'
    out = json.loads(acesql("sql", "columns", "--db", school_db, sql).stdout)
    assert out == ["department.dept name", "department.dept_id", "student.dept_id"]
    proc = acesql("sql", "columns", "--db", school_db, "SELECT ghost FROM student", check=False)
    assert proc.returncode == 1 and "ghost" in json.loads(proc.stdout)["error"]


def test_sql_match(school_db):
    gold = "SELECT name, age FROM student ORDER BY age"
    pred = "SELECT age, name FROM student ORDER BY age"
    spider = acesql(
        "sql", "match", "--db", school_db, "--mode", "spider", "--pred", pred, "--gold", gold
    )
    assert json.loads(spider.stdout)["match"] is True
    strict = acesql("sql", "match", "--db", school_db, "--pred", pred, "--gold", gold)
    assert json.loads(strict.stdout) == {
        "match": False,
        "reason": "different_rows",
        "usable": True,
        "gold_empty": False,
    }


def test_evaluate_sql(sample_dir, tmp_path):
    preds = tmp_path / "preds.jsonl"
    questions = json.loads((sample_dir / "dev.json").read_text())
    preds.write_text(
        "\n".join(json.dumps({"index": i, "sql": q["query"]}) for i, q in enumerate(questions[:-1]))
    )
    out = tmp_path / "rows.jsonl"
    proc = acesql(
        "evaluate-sql",
        "--dataset",
        sample_dir,
        "--format",
        "spider",
        "--predictions",
        preds,
        "--mode",
        "bird",
        "--workers",
        "1",
        "--out",
        out,
        "--no-progress",
    )
    summary = json.loads(proc.stdout)
    assert (summary["n"], summary["usable"], summary["correct"]) == (14, 14, 13)
    assert summary["ex"] == pytest.approx(13 / 14, abs=1e-6)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 14 and rows[-1]["reason"] == "no_prediction"


def test_clear_error_for_bad_input(sample_dir, tmp_path):
    broken = tmp_path / "preds.jsonl"
    broken.write_text("{oops\n")
    proc = acesql(
        "evaluate-sql",
        "--dataset",
        sample_dir,
        "--format",
        "spider",
        "--predictions",
        broken,
        check=False,
    )
    assert proc.returncode == 2 and "error:" in proc.stderr and "Traceback" not in proc.stderr
    proc = acesql("sql", "exec", "--db", tmp_path / "missing.sqlite", "SELECT 1", check=False)
    assert proc.returncode == 2 and "does not exist" in proc.stderr


def test_check_gold_sql_on_the_sample_dataset(tmp_path):
    proc = acesql("check-gold-sql", "--sample", "--out", tmp_path / "out", "--workers", 1)
    report = json.loads(proc.stdout)
    assert all(report[m]["ex"] == 1.0 for m in ("multiset", "bird", "spider"))
    assert (tmp_path / "out" / "summary.json").is_file()
    assert "deprecated" not in proc.stderr


def test_the_self_check_fails_loudly(tmp_path):
    # a folder given by hand that is not there is an error, not the sample in its place
    typo = acesql("check-gold-sql", "--spider", tmp_path / "spidr", check=False)
    assert typo.returncode == 2 and "no tables.json in" in typo.stderr
    # a dataset whose every gold query fails has nothing usable: exit 1, said why
    data = tmp_path / "broken"
    (data / "database" / "d").mkdir(parents=True)
    sqlite3.connect(data / "database" / "d" / "d.sqlite").execute("CREATE TABLE t (a INT)")
    tables = [
        {
            "db_id": "d",
            "table_names_original": ["t"],
            "column_names_original": [[-1, "*"], [0, "a"]],
            "column_types": ["text", "number"],
            "primary_keys": [],
            "foreign_keys": [],
        }
    ]
    (data / "tables.json").write_text(json.dumps(tables))
    (data / "dev.json").write_text(
        json.dumps([{"db_id": "d", "question": "?", "query": "SELECT nope FROM t"}])
    )
    failed = acesql("check-gold-sql", "--spider", data, "--out", tmp_path / "o", check=False)
    assert (
        failed.returncode == 1 and "self-check failed: multiset: no usable example" in failed.stderr
    )


def test_the_self_check_is_named_for_what_it_does(tmp_path):
    """`make run` is the main job (README); the SQL engine's self-check was `acesql run`, a
    name that still works, saying which one to use."""
    listing = acesql("--help").stdout
    assert "check-gold-sql" in listing and "main job" not in listing
    assert "run " not in listing.split("Commands:")[1]
    old = acesql("run", "--sample", "--out", tmp_path / "out")
    assert json.loads(old.stdout)["spider"]["ex"] == 1.0
    assert "'run' is deprecated" in old.stderr and "acesql check-gold-sql" in old.stderr


def test_python_dash_m_acesql_is_the_command_line():
    proc = subprocess.run(
        [sys.executable, "-m", "acesql", "--help"], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("Usage: python -m acesql")


def test_every_option_of_ask_says_what_it_is_for():
    import click

    params = cli.commands["ask"].params
    undescribed = [p.opts[0] for p in params if isinstance(p, click.Option) and not p.help]
    assert undescribed == []


def test_data_synth(tmp_path):
    out = tmp_path / "synth"
    args = ["data", "synth", "--out", out, "--dbs", 4, "--questions-per-db", 3, "--profile", "tiny"]
    summary = json.loads(acesql(*args, "--no-progress").stdout)
    assert summary["n_databases"] == 4 and summary["n_examples"] == 12
    assert (out / "tables.json").is_file() and len(list((out / "databases").iterdir())) == 4
    proc = acesql(*args, "--ood-domains", "atlantis", check=False)
    assert proc.returncode == 2 and "not domains" in proc.stderr


def test_pool_replay_cli(tmp_path):
    events = tmp_path / "events.jsonl"
    lines = [
        {"question": "q", "matched": [["t.b", "t.a"], ["t.a", "t.b"], ["t.a"]]},
        {"question": "q", "matched": [["t.a"], ["t.a"]]},
        {"question": "r", "matched": [["t.z"]]},
        {"question": "q", "matched": [["t.c"], ["t.b", "t.a"]]},
    ]
    events.write_text("\n".join(json.dumps(e) for e in lines) + "\n\n")
    out = json.loads(acesql("pool", "replay", "--gamma", "0.5", "--events", events).stdout)
    assert out["q"] == {
        "weights": [[["t.a"], 1.25], [["t.a", "t.b"], 1.5], [["t.c"], 1.0]],
        "targets": [["t.a", "t.b"]],
    }
    assert out["r"] == {"weights": [[["t.z"], 1.0]], "targets": [["t.z"]]}
    # gamma 1: plain counts
    out = json.loads(acesql("pool", "replay", "--gamma", "1", "--events", events).stdout)
    assert out["q"]["weights"] == [[["t.a"], 3.0], [["t.a", "t.b"], 3.0], [["t.c"], 1.0]]


def test_pool_replay_cli_bad_input(tmp_path):
    events = tmp_path / "events.jsonl"
    events.write_text('{"question": "q", "matched": [["t.a"]]}\nnot json\n')
    result = acesql("pool", "replay", "--events", events, check=False)
    assert result.returncode == 2 and ":2: not JSON" in result.stderr


def _strict_json(text):
    def refuse(constant):
        raise ValueError(f"not JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def test_sql_exec_prints_valid_json_that_tells_values_apart(school_db):
    sql = "SELECT 1e999, -1e999, X'4142', 'b''AB''', NULL"
    out = _strict_json(acesql("sql", "exec", "--db", school_db, sql).stdout)
    assert out["rows"] == [[{"real": "inf"}, {"real": "-inf"}, {"blob": "4142"}, "b'AB'", None]]


def test_sql_columns_of_deeply_nested_sql_is_an_error_not_a_crash(school_db):
    sql = "SELECT " + "(" * 48 + "age" + ")" * 48 + " FROM student"
    proc = acesql("sql", "columns", "--db", school_db, sql, check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "RecursionError" in json.loads(proc.stdout)["error"]


@pytest.mark.parametrize("command", ["exec", "match"])
@pytest.mark.parametrize("timeout", ["nan", "inf", "0", "-1"])
def test_sql_timeout_must_be_finite_and_positive(school_db, command, timeout):
    from click.testing import CliRunner

    args = ["SELECT 1"] if command == "exec" else ["--pred", "SELECT 1", "--gold", "SELECT 1"]
    result = CliRunner().invoke(
        cli, ["sql", command, "--db", str(school_db), "--timeout", timeout, *args]
    )
    assert result.exit_code == 2 and "finite number of seconds > 0" in result.output


def test_a_fifo_as_database_is_refused_at_once(tmp_path):
    fifo = tmp_path / "db.sqlite"
    os.mkfifo(fifo)
    proc = subprocess.run(
        [sys.executable, "-m", "acesql.cli", "sql", "exec", "--db", str(fifo), "SELECT 1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "not a regular file" in proc.stderr


@pytest.mark.parametrize("command", ["evaluate-sql", "pool"])
def test_a_fifo_as_input_file_is_refused_at_once(tmp_path, sample_dir, command):
    fifo = tmp_path / "input.jsonl"
    os.mkfifo(fifo)
    args = {
        "evaluate-sql": ["evaluate-sql", "--dataset", str(sample_dir), "--format", "spider"]
        + ["--predictions", str(fifo)],
        "pool": ["pool", "replay", "--events", str(fifo)],
    }[command]
    proc = subprocess.run(
        [sys.executable, "-m", "acesql.cli", *args], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2 and "not a regular file" in proc.stderr


def test_evaluate_sql_with_a_lone_surrogate_and_with_bad_utf8(sample_dir, tmp_path):
    questions = json.loads((sample_dir / "dev.json").read_text())
    lines = [json.dumps({"index": i, "sql": q["query"]}) for i, q in enumerate(questions)]
    lines[2] = '{"index": 2, "sql": "SELECT \'\\ud800\'"}'  # a JSON escape of a lone surrogate
    preds, out = tmp_path / "preds.jsonl", tmp_path / "rows.jsonl"
    preds.write_text("\n".join(lines))
    base = ["evaluate-sql", "--dataset", sample_dir, "--format", "spider", "--workers", "0"]
    proc = acesql(*base, "--predictions", preds, "--out", out, "--no-progress")
    assert json.loads(proc.stdout)["n"] == len(questions)
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert len(rows) == len(questions)
    assert rows[2]["pred"] == "SELECT '\ud800'" and rows[2]["match"] is False

    preds.write_bytes(b'{"index": 0, "sql": "SELECT \xff"}\n')
    out.unlink()
    proc = acesql(*base, "--predictions", preds, "--out", out, check=False)
    assert proc.returncode == 2 and "not UTF-8" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not out.exists()


def test_rows_file_is_written_whole_or_not_at_all(tmp_path):
    from acesql.cli.options import write_jsonl

    out = tmp_path / "rows.jsonl"
    out.write_text("old\n")

    def rows():
        yield {"a": 1}
        raise RuntimeError("killed mid-way")

    with pytest.raises(RuntimeError):
        write_jsonl(out, rows())
    assert out.read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == ["rows.jsonl"]


@pytest.mark.parametrize(
    "args",
    [
        ["check-gold-sql", "--workers", "-1"],
        ["evaluate-sql", "--workers", "-1"],
        ["eval", "--chunk-size", "0"],
        ["eval", "--chunk-size", "-1"],
        ["eval", "--retriever-samples", "0"],
        ["eval", "--vote-threshold", "0"],
        ["eval", "--vote-threshold", "1.5"],
        ["eval", "--max-new-tokens", "0"],
        ["eval", "--limit", "0"],
        ["eval", "--limit", "-3"],
        ["eval", "--candidates", "1"],
        ["eval", "--resample-candidates", "0"],
        ["eval", "--audit-threshold", "1"],
        ["eval", "--resample-from", "retriever"],
        ["ask", "--resample-ranked", "old"],
        ["ask", "--resample-pool", "old"],
        ["ask", "--candidates", "0"],
        ["eval", "--batch-size", "0"],
        ["data", "synth", "--dbs", "0"],
        ["sql", "exec", "--max-rows", "-1"],
        ["eval", "--temperature", "nan"],
        ["eval", "--temperature", "inf"],
        ["eval", "--temperature", "-1"],
        ["pool", "replay", "--gamma", "nan"],
    ],
    ids=" ".join,
)
def test_bad_counts_are_one_line_errors(args, sample_dir, school_db, tmp_path):
    from click.testing import CliRunner

    preds = tmp_path / "preds.jsonl"
    preds.write_text("")
    rest = {
        "check-gold-sql": ["--spider", str(sample_dir), "--out", str(tmp_path / "out")],
        "evaluate-sql": ["--dataset", str(sample_dir), "--format", "spider"]
        + ["--predictions", str(preds)],
        "eval": ["--model", str(tmp_path), "--dataset", str(sample_dir), "--format", "spider"],
        "data": ["--out", str(tmp_path / "synth")],
        "sql": ["--db", str(school_db), "SELECT 1"],
        "pool": ["--events", str(preds)],
        "ask": ["--model", str(tmp_path), "--db", str(school_db), "How many?"],
    }[args[0]]
    result = CliRunner().invoke(cli, [*args, *rest])
    assert result.exit_code == 2, result.output
    assert f"Invalid value for '{args[-2]}'" in result.output


@pytest.mark.parametrize("model", ["./no-such-model", "models/no-such", "~/no-such-model"])
def test_a_missing_model_folder_is_a_local_error(model, sample_dir):
    from click.testing import CliRunner

    args = ["eval", "--model", model, "--dataset", str(sample_dir), "--format", "spider"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2 and "no such model folder" in result.output


def test_a_bare_model_name_may_still_be_a_hub_id():
    from acesql.cli.options import model_folder

    assert model_folder(None, None, "gpt2") == "gpt2"


def test_evaluate_sql_with_no_usable_gold_says_nothing_scorable(sample_dir, tmp_path):
    import shutil

    junk = tmp_path / "junk"
    shutil.copytree(sample_dir, junk)
    for db in junk.glob("database/*/*.sqlite"):
        db.write_text("not a database")
    preds, out = tmp_path / "preds.jsonl", tmp_path / "rows.jsonl"
    preds.write_text('{"index": 0, "sql": "SELECT 1"}\n')
    base = ["evaluate-sql", "--dataset", junk, "--format", "spider", "--workers", "0"]
    proc = acesql(*base, "--predictions", preds, "--out", out, "--no-progress", check=False)
    assert (
        proc.returncode == 2 and "error: nothing scorable: none of the 14 questions" in proc.stderr
    )
    assert json.loads(proc.stdout)["usable"] == 0
    assert len(out.read_text().splitlines()) == 14  # the rows say why, question by question


@pytest.mark.parametrize(
    "line",
    [
        '{"index": true, "sql": "SELECT 1"}',
        '{"index": 0, "sql": null}',
        '{"index": "0", "sql": "x"}',
    ],
)
def test_prediction_lines_are_not_coerced(tmp_path, line):
    from acesql.errors import DataError
    from acesql.eval.sql_eval import load_predictions

    preds = tmp_path / "preds.jsonl"
    preds.write_text(line + "\n")
    with pytest.raises(DataError, match=r"preds.jsonl:1: expected"):
        load_predictions(preds)


def test_bird_predictions_keep_their_database(tmp_path):
    from acesql.eval.sql_eval import load_predictions

    preds = tmp_path / "predict_dev.json"
    preds.write_text(json.dumps({"3": "SELECT 1\t----- bird -----\tschool"}))
    loaded = load_predictions(preds)
    assert loaded == {3: "SELECT 1"} and loaded.db_ids == {3: "school"}


def test_data_synth_replaces_an_existing_folder_whole(tmp_path):
    out = tmp_path / "synth"
    args = ["data", "synth", "--out", out, "--profile", "tiny", "--questions-per-db", "2"]
    acesql(*args, "--dbs", "6", "--no-progress")
    acesql(*args, "--dbs", "4", "--no-progress")
    tables = json.loads((out / "tables.json").read_text())
    assert len(list((out / "databases").iterdir())) == len(tables) == 4
    assert [p.name for p in tmp_path.iterdir()] == ["synth"]


def test_metrics_prints_each_stages_headline_numbers_one_per_line(tmp_path):
    import yaml
    from click.testing import CliRunner

    (tmp_path / "models").mkdir()
    (tmp_path / "results" / "dev").mkdir(parents=True)
    (tmp_path / "models" / "sft_metrics.json").write_text('{"final_loss": 0.25, "steps": 21}')
    (tmp_path / "results" / "dev" / "metrics.json").write_text(
        '{"pipeline_ex": 0.5, "n": 4, "by_complexity": {"simple": {"pipeline_ex": 1.0}}}'
    )
    lock = {
        "stages": {
            "evaluate@dev": {"outs": [{"path": "results/dev/metrics.json", "md5": "a"}]},
            "sft": {"outs": [{"path": "models/sft_metrics.json", "md5": "b"}]},
            "data": {"outs": [{"path": "data/metrics.json", "md5": "c"}]},  # not written here
        }
    }
    (tmp_path / "dvc.lock").write_text(yaml.safe_dump(lock))
    args = ["metrics", "--lock", str(tmp_path / "dvc.lock")]
    shown = CliRunner().invoke(cli, args)
    assert shown.exit_code == 0, shown.output
    *numbers, last = shown.output.splitlines()
    assert [line.split() for line in numbers] == [  # pipeline order, whatever dvc.lock's
        ["sft", "steps", "21"],
        ["sft", "final_loss", "0.25"],
        ["evaluate", "dev.n", "4"],
        ["evaluate", "dev.pipeline_ex", "0.5"],
    ]
    assert last.startswith("no outputs here for: data (dvc.lock records them")
    every = json.loads(CliRunner().invoke(cli, [*args, "--all", "--json"]).output)
    assert every["evaluate"]["dev.by_complexity.simple.pipeline_ex"] == 1.0
    assert every["data"] == {}
    missing = CliRunner().invoke(cli, ["metrics", "--lock", str(tmp_path / "nope.lock")])
    assert missing.exit_code == 2 and "run the pipeline first" in missing.output


def test_the_old_resample_flag_still_works_and_says_its_new_name(tmp_path):
    from click.testing import CliRunner

    result = CliRunner().invoke(
        cli, ["ask", "--resample-pool", "both", "--model", str(tmp_path / "none"), "db", "q"]
    )
    assert "--resample-pool is now --resample-ranked" in result.stderr
    assert "does not exist" in result.output  # parsed on to the next check
