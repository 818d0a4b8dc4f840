"""Column extraction, driven by fixture files of SQL -> expected columns and SQL that must fail."""

import json
from pathlib import Path

import pytest

from acesql.errors import SqlParseError
from acesql.sql.columns import extract_columns, has_order_by

FIXTURES = Path(__file__).parents[1] / "fixtures"

CASES = json.loads((FIXTURES / "columns_cases.json").read_text())
FAILURES = json.loads((FIXTURES / "columns_fail.json").read_text())


@pytest.mark.parametrize("case", CASES, ids=lambda c: c["sql"][:50])
def test_extract_columns(case, schemas):
    assert sorted(extract_columns(case["sql"], schemas[case["db"]])) == case["columns"]


@pytest.mark.parametrize("case", FAILURES, ids=lambda c: c["sql"][:40] or "empty")
def test_extract_columns_fails_cleanly(case, schemas):
    with pytest.raises(SqlParseError, match=case["error"] or None):
        extract_columns(case["sql"], schemas[case["db"]])


def test_columns_of_every_spider_dev_gold(spider_dir):
    from acesql.data.loaders import load_spider

    data = load_spider(spider_dir, "dev")
    for example in data.usable:
        columns = extract_columns(example.sql, data.schema(example.db_id, 0))
        assert columns <= set(data.schema(example.db_id, 0).column_ids)


@pytest.mark.parametrize(
    "sql, ordered",
    [
        ("SELECT a FROM t ORDER BY a", True),
        ("SELECT a FROM t", False),
        ("SELECT a FROM (SELECT a FROM t ORDER BY a LIMIT 3)", False),
        ("SELECT a FROM t UNION SELECT b FROM u ORDER BY 1", True),
        ("not sql at all order by", True),
        ("SELECT " + "(" * 300 + "a" + ")" * 300 + " FROM t ORDER BY a", True),  # too deep
    ],
    ids=lambda v: str(v)[:40],
)
def test_has_order_by(sql, ordered):
    assert has_order_by(sql) is ordered
