"""Chain-of-CTE outputs: parsing, step prefixes, and gold SQL rewritten into steps."""

import sqlite3
from pathlib import Path

import pytest

from acesql.data.loaders import load_dataset
from acesql.sql.cocte import parse_cocte, prefix_sql, render_cocte
from acesql.sql.sandbox import execute
from acesql.sql.schema import Schema
from acesql.sql.to_cocte import to_cocte

SPIDER = Path(__file__).resolve().parents[3] / "shared" / "data" / "spider"

CHAIN = """```sql
WITH
-- step: the concerts of 2014
concerts_2014 AS (SELECT stadium_id FROM concert WHERE year = 2014),
-- step: how many each stadium held
per_stadium AS (SELECT stadium_id, COUNT(*) AS n FROM concerts_2014 GROUP BY stadium_id)
-- final: the busiest stadium
SELECT stadium_id FROM per_stadium ORDER BY n DESC LIMIT 1
```"""


@pytest.fixture()
def concerts(tmp_path):
    path = tmp_path / "c.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE concert (concert_id INT, stadium_id INT, year INT)")
        rows = [(1, 10, 2014), (2, 10, 2014), (3, 11, 2014), (4, 11, 2015), (5, 12, 2014)]
        conn.executemany("INSERT INTO concert VALUES (?, ?, ?)", rows)
    return path


def test_a_chain_parses_into_named_steps_with_their_rationales():
    parsed = parse_cocte(CHAIN, ["concert", "stadium"])
    assert parsed.ok, parsed.problems
    assert [(s.name, s.rationale) for s in parsed.steps] == [
        ("concerts_2014", "the concerts of 2014"),
        ("per_stadium", "how many each stadium held"),
    ]
    assert parsed.steps[1].sql == (
        "SELECT stadium_id, COUNT(*) AS n FROM concerts_2014 GROUP BY stadium_id"
    )
    assert parsed.final_sql == "SELECT stadium_id FROM per_stadium ORDER BY n DESC LIMIT 1"
    assert parsed.final_rationale == "the busiest stadium"


def test_every_step_prefix_executes_to_its_intermediate_result(concerts):
    parsed = parse_cocte(CHAIN)
    first = execute(concerts, prefix_sql(parsed, 1))
    second = execute(concerts, prefix_sql(parsed, 2))
    assert sorted(first.rows) == [(10,), (10,), (11,), (12,)]
    assert sorted(second.rows) == [(10, 2), (11, 1), (12, 1)]
    assert execute(concerts, parsed.sql).rows == [(10,)]
    with pytest.raises(ValueError):
        prefix_sql(parsed, 3)


@pytest.mark.parametrize(
    "text, problem",
    [
        ("", "no SQL in the output"),
        ("SELECT 1", "no step: the statement has no WITH clause"),
        ("WITH a AS (SELEC", "the statement does not parse"),
        # a sampled output the tokenizer rejects (an unclosed quote) is malformed, not a crash
        ("WITH\n-- step: x\na AS (SELECT `x FROM t)\nSELECT * FROM a", "does not parse"),
        ("SELECT 'open FROM t", "does not parse"),
        ("WITH\n-- step: x\nconcert AS (SELECT 1)\nSELECT * FROM concert", "shadows a table"),
        (
            "WITH\n-- step: x\na AS (SELECT 1),\n-- step: y\na AS (SELECT 2)\nSELECT * FROM a",
            "step 2: the name 'a' is already a step",
        ),
        (
            "WITH\n-- step: x\na AS (SELECT * FROM b),\n-- step: y\nb AS (SELECT 1)\nSELECT 1",
            "step 1 (a) uses 'b', a step defined after it",
        ),
        ("WITH a AS (SELECT 1)\nSELECT * FROM a", "step 1 (a) has no rationale comment"),
        (
            "WITH RECURSIVE\n-- step: x\nn(i) AS (SELECT 1 UNION SELECT i + 1 FROM n)\nSELECT 1",
            "a recursive CTE is not a step",
        ),
    ],
)
def test_malformed_chains_are_reported_not_guessed(text, problem):
    parsed = parse_cocte(text, ["concert"])
    assert not parsed.ok
    assert any(problem in p for p in parsed.problems), parsed.problems


@pytest.mark.parametrize(
    "gold, names",
    [
        ("SELECT name FROM singer WHERE age > 30", ["singer_rows"]),
        ("SELECT name FROM singer WHERE age > (SELECT AVG(age) FROM singer)", ["avg_age"]),
        ("SELECT name FROM t WHERE id NOT IN (SELECT id FROM u)", ["id_set"]),
        ("SELECT a FROM t WHERE b > 1 INTERSECT SELECT a FROM t WHERE b < 0", ["a_set", "a_set_2"]),
        ("SELECT COUNT(*) FROM singer", ["answer"]),
        (
            "SELECT s.x FROM (SELECT id AS x FROM t WHERE id > (SELECT MIN(id) FROM t)) AS s",
            ["min_id", "s"],
        ),
    ],
)
def test_gold_sql_becomes_named_steps_by_rule(gold, names):
    chain = to_cocte(gold)
    parsed = parse_cocte(chain)
    assert parsed.ok, (chain, parsed.problems)
    assert [s.name for s in parsed.steps] == names
    assert all(s.rationale for s in parsed.steps)


def test_gold_sql_the_tokenizer_rejects_has_no_chain():
    assert to_cocte("SELECT `x FROM t") is None


def test_a_filtered_join_is_staged_with_its_columns_renamed(tmp_path):
    path = tmp_path / "j.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE singer (singer_id INT, name TEXT, age INT)")
        conn.execute("CREATE TABLE sings (singer_id INT, concert_id INT)")
        conn.executemany("INSERT INTO singer VALUES (?, ?, ?)", [(1, "a", 30), (2, "b", 40)])
        conn.executemany("INSERT INTO sings VALUES (?, ?)", [(1, 7), (1, 8), (2, 7)])
    gold = (
        "SELECT T1.name, COUNT(*) FROM singer AS T1 JOIN sings AS T2 "
        "ON T1.singer_id = T2.singer_id WHERE T1.age < 35 GROUP BY T1.name"
    )
    chain = to_cocte(gold, Schema.from_sqlite(path))
    parsed = parse_cocte(chain, ["singer", "sings"])
    assert [s.name for s in parsed.steps] == ["joined"]
    assert "t1_name" in parsed.steps[0].sql and "GROUP BY t1_name" in parsed.final_sql
    assert execute(path, chain).rows == execute(path, gold).rows == [("a", 2)]


def test_what_cannot_be_rewritten_says_none():
    assert to_cocte("SELEC name FRM") is None
    assert to_cocte("WITH RECURSIVE n(i) AS (SELECT 1 UNION SELECT i + 1 FROM n) SELECT 1") is None
    kept = parse_cocte(to_cocte("WITH a AS (SELECT 1 AS x) SELECT x + (SELECT 2) FROM a"))
    assert [s.name for s in kept.steps] == ["a", "part"]


def test_synthetic_gold_rewrites_execute_to_the_gold_result(synth_dir):
    examples = load_dataset(synth_dir, "synth", "train").examples
    for ex in examples:
        schema = Schema.from_sqlite(ex.db_path, n_samples=0)
        chain = to_cocte(ex.sql, schema)
        parsed = parse_cocte(chain, [t.name for t in schema.tables])
        assert parsed.ok, (ex.sql, chain, parsed.problems)
        gold, ours = execute(ex.db_path, ex.sql), execute(ex.db_path, chain)
        assert ours.ok and sorted(map(repr, ours.rows)) == sorted(map(repr, gold.rows)), chain
        for i in range(1, len(parsed.steps) + 1):
            assert execute(ex.db_path, prefix_sql(parsed, i)).ok


@pytest.mark.slow
@pytest.mark.spider
@pytest.mark.skipif(not (SPIDER / "dev.json").is_file(), reason="needs ../shared/data/spider")
def test_spider_dev_gold_rewrites_keep_the_gold_result():
    dev = load_dataset(SPIDER, "spider", "dev").examples
    checked = kept = 0
    for ex in dev:
        if not Path(ex.db_path).is_file():
            continue
        checked += 1
        schema = Schema.from_sqlite(ex.db_path, n_samples=0)
        chain = to_cocte(ex.sql, schema)
        gold, ours = execute(ex.db_path, ex.sql), execute(ex.db_path, chain)
        kept += ours.ok and sorted(map(repr, ours.rows)) == sorted(map(repr, gold.rows))
    assert checked > 900 and kept / checked > 0.99, (kept, checked)


def test_a_chain_renders_back_to_what_parses():
    parsed = parse_cocte(CHAIN)
    again = parse_cocte(render_cocte(parsed.steps, parsed.final_sql, parsed.final_rationale))
    assert again.steps == parsed.steps and again.final_sql == parsed.final_sql


def test_cold_start_targets_in_chain_form_are_kept_when_they_execute_as_the_gold(
    tiny_model_dir, synth_dir
):
    """sft_data's gold mode with `prompt.sql_format: cocte`: the generator is asked for steps
    and its target is the verified chain; a chain that does not execute as the gold (here a
    gold query broken on purpose, which no rewrite can match) leaves only the retriever's."""
    from dataclasses import replace

    from acesql.data.schemas import SchemaCache
    from acesql.models.base_model import load_tokenizer
    from acesql.models.prompts import PromptBuilder
    from acesql.sft.data import build_gold
    from acesql.sql.batch_executor import BatchExecutor
    from acesql.sql.parsing import parse_sql

    prompts = PromptBuilder(load_tokenizer(tiny_model_dir), sql_format="cocte")
    examples = load_dataset(synth_dir, "synth", "train").examples[:5]
    broken = replace(examples[0], sql="SELECT no_such_column FROM no_such_table")
    with BatchExecutor(workers=1) as executor:
        records, stats = build_gold(
            [broken, *examples[1:]], prompts, SchemaCache(0), 100_000, executor, "multiset"
        )
    generator = [r for r in records if r["role"] == "generator"]
    assert len(generator) == 4 and len(records) == 9
    assert stats.to_dict()["dropped"]["generator"] == {"cocte_not_equivalent": 1}
    for record in generator:
        assert "chain of steps" in record["prompt"]
        assert parse_cocte(record["response"]).ok
        ex = next(e for e in examples if e.index == record["index"])
        chain = parse_sql(record["response"])
        ours, gold = execute(ex.db_path, chain), execute(ex.db_path, ex.sql)
        assert sorted(map(repr, ours.rows)) == sorted(map(repr, gold.rows))
    with pytest.raises(ValueError, match="executor"):
        build_gold(examples, prompts, SchemaCache(0), 100_000)
