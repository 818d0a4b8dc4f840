"""make_variants from bench/exec_bench.py: seven strings, a broken one, a dropped filter."""

from __future__ import annotations

import importlib.util
import sqlite3
from pathlib import Path

import pytest
import sqlglot
from sqlglot.errors import SqlglotError

BENCH = Path(__file__).resolve().parents[2] / "bench" / "exec_bench.py"


def _load_bench():
    spec = importlib.util.spec_from_file_location("acesql_exec_bench", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bench = _load_bench()
make_variants = bench.make_variants
BROKEN = bench.VARIANT_KINDS.index("broken_syntax")
DROPPED = bench.VARIANT_KINDS.index("dropped_filter")

SCHEMA = {
    "singer": ["singer_id", "name", "country", "age"],
    "concert": ["concert_id", "singer_id", "year"],
}
SIMPLE = "SELECT name FROM singer"
JOIN_WHERE = (
    "SELECT T1.name, T2.year FROM singer AS T1 JOIN concert AS T2 "
    "ON T1.singer_id = T2.singer_id WHERE T2.year > 2014"
)
ORDER_LIMIT = "SELECT name, age FROM singer ORDER BY age DESC LIMIT 3"
UNPARSEABLE = "this is ) not SQL ((("
QUERIES = [SIMPLE, JOIN_WHERE, ORDER_LIMIT, UNPARSEABLE]


@pytest.fixture(scope="module")
def db():
    conn = sqlite3.connect(":memory:")
    conn.executescript(
        "CREATE TABLE singer (singer_id INTEGER, name TEXT, country TEXT, age INTEGER);"
        "CREATE TABLE concert (concert_id INTEGER, singer_id INTEGER, year INTEGER);"
        "INSERT INTO singer VALUES (1, 'Ann', 'France', 30), (2, 'Bo', 'Peru', 41);"
        "INSERT INTO concert VALUES (1, 1, 2015), (2, 2, 2013);"
    )
    yield conn
    conn.close()


def _fails(sql: str, conn: sqlite3.Connection) -> bool:
    try:
        sqlglot.parse_one(sql, read="sqlite")
    except SqlglotError:
        return True
    try:
        conn.execute(sql).fetchall()
    except sqlite3.Error:
        return True
    return False


@pytest.mark.parametrize("sql", QUERIES)
@pytest.mark.parametrize("with_schema", [True, False])
def test_seven_strings(sql, with_schema):
    variants = make_variants(sql, SCHEMA if with_schema else None)
    assert len(variants) == 7
    assert all(isinstance(v, str) for v in variants)


@pytest.mark.parametrize("sql", [SIMPLE, JOIN_WHERE, ORDER_LIMIT])
def test_gold_runs_and_broken_variant_does_not(sql, db):
    db.execute(sql).fetchall()  # the fixture schema fits the queries
    assert _fails(make_variants(sql, SCHEMA)[BROKEN], db)


def test_broken_variant_of_unparseable_text_still_fails(db):
    assert _fails(make_variants(UNPARSEABLE)[BROKEN], db)


def test_dropped_filter_has_no_where(db):
    dropped = make_variants(JOIN_WHERE, SCHEMA)[DROPPED]
    assert sqlglot.parse_one(dropped, read="sqlite").find(sqlglot.exp.Where) is None
    assert len(db.execute(dropped).fetchall()) == 2  # the filter kept one row of two


def test_variants_differ_from_gold_and_each_other():
    variants = make_variants(JOIN_WHERE, SCHEMA)
    assert JOIN_WHERE not in variants
    assert len(set(variants)) == 7


def test_never_raises_on_odd_input():
    for odd in ["", "   ", "SELECT", "SELECT 1; SELECT 2", "DROP TABLE singer", None, 42]:
        variants = make_variants(odd)
        assert len(variants) == 7 and all(isinstance(v, str) for v in variants)


def test_ex_by_level_matches_the_official_scripts_arithmetic():
    # pairs 0,3 simple; 1,4 moderate; 2 challenging (i mod 3)
    assert bench.ex_by_level([1, 0, 1, 1, 1]) == [100.0, 50.0, 100.0, 80.0]


def test_run_official_feeds_the_script_its_three_files(tmp_path):
    """A stand-in for evaluation_ex.py that checks its inputs the way the real one reads
    them (prediction `SQL<sep>db`, gold `SQL\\tdb`, a difficulty per line) and prints EX."""
    folder = tmp_path / "official"
    folder.mkdir()
    (folder / "evaluation_ex.py").write_text(
        "import argparse, json\n"
        "p = argparse.ArgumentParser()\n"
        "for a in ('predicted_sql_path', 'ground_truth_path', 'db_root_path', 'num_cpus',\n"
        "          'meta_time_out', 'diff_json_path', 'sql_dialect', 'output_log_path'):\n"
        "    p.add_argument('--' + a)\n"
        "a = p.parse_args()\n"
        "preds = json.load(open(a.predicted_sql_path))\n"
        "golds = open(a.ground_truth_path).read().splitlines()\n"
        "levels = [json.loads(l)['difficulty'] for l in open(a.diff_json_path)]\n"
        "assert len(preds) == len(golds) == len(levels) == 4 and a.db_root_path.endswith('/')\n"
        "assert preds['1'] == 'SELECT 2\\t----- bird -----\\tschool', preds['1']\n"
        "assert golds[1] == 'SELECT 1\\tschool' and levels[:3] == ['simple', 'moderate', "
        "'challenging']\n"
        "print('EX                   50.00  0.00  100.00  50.00')\n"
    )
    db = tmp_path / "database" / "school" / "school.sqlite"
    triples = [(str(db), sql, "SELECT 1") for sql in ("SELECT 1", "SELECT 2", "SELECT 1", "x")]
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    seconds, ex, _ = bench.run_official(folder, triples, ["school"] * 4, 2, 5.0, scratch)
    assert ex == [50.0, 0.0, 100.0, 50.0] and seconds > 0
