"""Parsers of model output: SQL from the generator, a column list from the retriever."""

import pytest

from acesql.models.engine import Completion
from acesql.sql.column_vote import vote_columns
from acesql.sql.parsing import format_ok, parse_columns, parse_sql, strip_think


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


@pytest.mark.parametrize(
    "text, columns, unknown",
    [
        # a greedy loop cut by the token cap: the columns before the first repeat
        (
            "```\n[student.name, student.age, student.name, student.age, stu",
            ("student.name", "student.age"),
            (),
        ),
        # cut while still naming new columns: the item the cut ended is dropped
        ("[student.name, course.title, course.cre", ("student.name", "course.title"), ()),
        ("[student.name, nope.x, student.name, course.title, ", ("student.name",), ("nope.x",)),
        ("[student.name", (), ()),
    ],
)
def test_unclosed_list_is_rejected_or_salvaged(text, columns, unknown, schemas):
    strict = parse_columns(text, schemas["school"])
    assert (strict.ok, strict.columns, strict.salvaged) == (False, (), False)
    got = parse_columns(text, schemas["school"], salvage_unclosed=True)
    assert (got.ok, got.columns, got.unknown, got.salvaged) == (True, columns, unknown, True)


def test_salvage_leaves_a_closed_list_alone(schemas):
    text = "[course.title]\nthen [student.name, student.name, student.age"
    got = parse_columns(text, schemas["school"], salvage_unclosed=True)
    assert (got.columns, got.salvaged) == (("course.title",), False)


LONG = 100_000


# a guard, not a measure: each parses in milliseconds, backtracking took minutes (the thread
# method, as a signal cannot stop the regex engine)
@pytest.mark.timeout(10, method="thread")
@pytest.mark.parametrize(
    "text, columns, n_unknown",
    [
        ("```\n[" + "student.name, " * (LONG // 14) + "course.title]\n```", 2, 0),
        ("```json\n[" + "a." * (LONG // 2) + "]", 0, 1),  # one item of 50k dots
        ("```" + "x" * LONG + "\n[student.age]", 1, 0),  # a fence never closed
        ("``` " + " " * LONG + "[student.age]", 1, 0),
        ("[" * LONG + "student.age]", 1, 0),
        ("<think>" * (LONG // 7) + "[student.age]", 0, None),  # an unclosed thought hides all
    ],
    ids=["long-list", "dots", "open-fence-letters", "open-fence-blanks", "brackets", "thinks"],
)
def test_parse_columns_of_a_100k_character_output(schemas, text, columns, n_unknown):
    assert len(text) >= LONG
    got = parse_columns(text, schemas["school"])
    assert len(got.columns) == columns and got.ok is (n_unknown is not None)
    if n_unknown is not None:
        assert len(got.unknown) == n_unknown
    if columns == 2:
        assert got.columns == ("student.name", "course.title")


@pytest.mark.timeout(10, method="thread")
def test_parse_sql_of_a_100k_character_output():
    select = "SELECT name FROM student"
    assert parse_sql("```sql\n" + select + " " * LONG) == select
    assert parse_sql("```" + "x" * LONG) is None
    assert parse_sql("``` " + " " * LONG + "\n" + select) == select
    assert parse_sql("```" + "x" * LONG + "\n" + select) == select
    thoughts = "</think>" * (LONG // 8)
    assert not format_ok(Completion(thoughts, finish_reason="stop"), "generator", True)
    done = Completion(thoughts + "```sql\n" + select + "\n```", finish_reason="stop")
    assert format_ok(done, "generator", True)


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


# (text, finish reason, role, reasoning, may earn a reward): the generator's prompt asks for a
# closed ```sql block, so only that format is rewarded, with reasoning on or off
GATES = [
    ("```sql\nSELECT a FROM t\n```", "stop", "generator", False, True),
    ("```sqlite\nSELECT a FROM t\n```", "stop", "generator", False, True),
    ("SELECT a FROM t", "stop", "generator", False, False),
    ("```python\nSELECT a FROM t\n```", "stop", "generator", False, False),
    ("```sql\nSELECT a FROM t", "stop", "generator", False, False),
    ("```sql\nSELECT a FROM t\n```", "length", "generator", False, False),
    ("<think>x</think>\n```sql\nSELECT a\n```", "stop", "generator", True, True),
    ("```sql\nSELECT a\n```", "stop", "generator", True, False),
    ("```\n[t.a]\n```", "stop", "retriever", False, True),
    ("```\n[t.a]\n```", "length", "retriever", False, False),
]


@pytest.mark.parametrize("text, reason, role, reasoning, ok", GATES)
def test_the_format_gate_rewards_the_format_the_prompt_asks_for(text, reason, role, reasoning, ok):
    assert format_ok(Completion(text, finish_reason=reason), role, reasoning) is ok
