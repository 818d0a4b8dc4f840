"""Parsers of model output: SQL from the generator, a column list from the retriever."""

import pytest

from acesql.sql.parsing import parse_columns, parse_sql, strip_think
from acesql.sql.voting import vote_columns


@pytest.mark.parametrize(
    "text, sql",
    [
        ("```sql\nSELECT a FROM t\n```", "SELECT a FROM t"),
        ("```sql\nSELECT 1\n```\nbetter:\n```sql\nSELECT 2;\n```", "SELECT 2"),
        ("```SQL\nSELECT a FROM t;\n```", "SELECT a FROM t"),
        ("```\nSELECT a FROM t\n```", "SELECT a FROM t"),
        ("```sql\nSELECT a FROM t\n```\n```python\nprint(1)\n```", "SELECT a FROM t"),
        ("<think>```sql\nSELECT wrong\n```</think>\n```sql\nSELECT right\n```", "SELECT right"),
        (
            "<think>draft SELECT x</think>SELECT name FROM t WHERE a = 1",
            "SELECT name FROM t WHERE a = 1",
        ),
        ("Here:\n```sql\nSELECT a\nFROM t\nWHERE b > 2", "SELECT a\nFROM t\nWHERE b > 2"),
        (
            "The query is\nSELECT a FROM t\nORDER BY a\n\nThis returns a.",
            "SELECT a FROM t\nORDER BY a",
        ),
        ("```sql\nSELECT ';' AS s FROM t; DROP TABLE t\n```", "SELECT ';' AS s FROM t"),
        ("with c as (select 1) select * from c", "with c as (select 1) select * from c"),
        ("<think>I will never finish", None),
        ("I don't know.", None),
        ("```sql\n\n```", None),
        ("", None),
        (None, None),
    ],
)
def test_parse_sql(text, sql):
    assert parse_sql(text) == sql


def test_strip_think():
    assert strip_think("<think>a</think>b<THINK>c</THINK>d") == "bd"
    assert strip_think("reasoning without opening</think>answer") == "answer"


@pytest.mark.parametrize(
    "text, columns, unknown, ok",
    [
        ("```\n[student.name, student.age]\n```", ("student.name", "student.age"), (), True),
        (
            "```json\n[\"student.name\", 'course.title']\n```",
            ("student.name", "course.title"),
            (),
            True,
        ),
        (
            '```\n[\n  `Department`.`Dept Name`,\n  "student"."gpa"\n]\n```',
            ("department.dept name", "student.gpa"),
            (),
            True,
        ),
        ("```\n[student.name]\n```\nfinal:\n```\n[course.title]\n```", ("course.title",), (), True),
        (
            "```\n[student.name, student.salary, teacher.name]\n```",
            ("student.name",),
            ("student.salary", "teacher.name"),
            True,
        ),
        ("```\n[student.name, STUDENT.NAME]\n```", ("student.name",), (), True),
        ("<think>[course.title]</think>```\n[student.age]\n```", ("student.age",), (), True),
        ("Columns: [student.name, course.credits]", ("student.name", "course.credits"), (), True),
        ("```\n[]\n```", (), (), True),
        ("no list at all", (), (), False),
        ("<think>[student.name]", (), (), False),
    ],
)
def test_parse_columns(text, columns, unknown, ok, schemas):
    got = parse_columns(text, schemas["school"])
    assert (got.columns, got.unknown, got.ok) == (columns, unknown, ok)
    assert (got.error is None) is ok


def test_voting_threshold_and_fallback(schemas):
    schema = schemas["school"]
    samples = [
        ["student.name", "student.age"],
        ["student.name"],
        ["student.name", "course.title"],
        None,
    ]
    kept, fell_back = vote_columns(samples, schema)
    assert kept == {"student.name"} and not fell_back  # age and title: 1 of 3 parseable
    kept, _ = vote_columns(samples, schema, threshold=0.3)
    assert kept == {"student.name", "student.age", "course.title"}
    kept, fell_back = vote_columns([None, None], schema)
    assert fell_back and kept == set(schema.column_ids)
    kept, fell_back = vote_columns([["a.b"], ["c.d"]], schema)  # unknown columns never win
    assert fell_back
    kept, _ = vote_columns([["student.name"], ["student.age"]], schema)  # 1 of 2 is >= 0.5
    assert kept == {"student.name", "student.age"}
    with pytest.raises(ValueError):
        vote_columns(samples, schema, threshold=0)
