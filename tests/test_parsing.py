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


# (samples, threshold, expected columns, empty): the cutoff is ceil(threshold x N) over all
# N samples, unparseable (None) and empty ones included
VOTES = [
    (
        [["student.name", "student.age"], ["student.name"], ["student.name", "course.title"], None],
        0.5,
        {"student.name"},
        False,
    ),  # name 3 of 4 >= 2; age and title 1 of 4
    ([["student.name"], None, None, None], 0.5, set(), True),  # 1 of 4 < 2: malformed count
    ([["student.name"], [], [], ["student.name"]], 0.5, {"student.name"}, False),  # 2 of 4
    ([["student.name"], [], []], 0.5, set(), True),  # 1 of 3 < ceil(1.5) = 2
    (
        [["student.name", "course.title"], ["course.title"], None],
        0.3,
        {"student.name", "course.title"},
        False,
    ),  # ceil(0.9) = 1
    ([["a.b"], ["a.b"]], 0.5, set(), True),  # names that are no column never win
    ([["student.name"], ["student.age"]], 0.5, {"student.name", "student.age"}, False),  # 1 of 2
    ([None], 0.5, set(), True),
    ([], 0.5, set(), True),
]


@pytest.mark.parametrize(("samples", "threshold", "expected", "empty"), VOTES)
def test_vote_cutoff_counts_every_sample(schemas, samples, threshold, expected, empty):
    kept, was_empty = vote_columns(samples, schemas["school"], threshold)
    assert (set(kept), was_empty) == (expected, empty)


def test_empty_vote_can_fall_back_to_the_full_schema(schemas):
    schema = schemas["school"]
    kept, was_empty = vote_columns([None, []], schema, on_empty="full_schema")
    assert was_empty and kept == set(schema.column_ids)
    kept, was_empty = vote_columns([["student.name"]], schema, on_empty="full_schema")
    assert kept == {"student.name"} and not was_empty
    with pytest.raises(ValueError):
        vote_columns([["student.name"]], schema, threshold=0)
    with pytest.raises(ValueError):
        vote_columns([["student.name"]], schema, on_empty="everything")
