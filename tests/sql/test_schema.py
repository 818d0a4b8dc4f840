"""Schemas: introspection, tables.json entries, deterministic rendering, canonical ids."""

import json
import sqlite3

import pytest

from acesql.errors import DataError
from acesql.sql.schema import Schema, canonical_id, load_tables_json


def test_introspection(school_db):
    schema = Schema.from_sqlite(school_db)
    assert [t.name for t in schema.tables] == ["Department", "student", "course", "enrollment"]
    dept = schema.table("department")
    assert [c.name for c in dept.columns] == ["dept_id", "Dept Name", "building", "budget"]
    assert schema.column("department.dept name").type == "TEXT"
    assert [c.name for c in dept.primary_key] == ["dept_id"]
    assert [c.name for c in schema.table("enrollment").primary_key] == ["StudentID", "course_id"]
    assert ("student.dept_id", "department.dept_id") in [
        (f.column, f.references) for f in schema.foreign_keys
    ]
    samples = schema.column("department.dept name").samples
    assert 1 <= len(samples) <= 3 and all(isinstance(v, str) for v in samples)


def test_sample_values_are_bounded_and_distinct(tmp_path):
    db = tmp_path / "big.sqlite"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE t (a TEXT, b INTEGER, c TEXT)")
    conn.executemany(
        "INSERT INTO t VALUES (?, ?, ?)", [("x" * 100, i % 2, None) for i in range(50_000)]
    )
    conn.commit()
    conn.close()
    schema = Schema.from_sqlite(db, n_samples=5)
    assert schema.column("t.b").samples == (0, 1)
    assert schema.column("t.c").samples == ()
    (value,) = schema.column("t.a").samples
    assert len(value) <= 40 and value.endswith("...")


def test_tables_json_matches_introspection(sample_dir, school_db):
    entry = load_tables_json(sample_dir / "tables.json")["school"]
    from_json = Schema.from_tables_json(entry, school_db)
    from_db = Schema.from_sqlite(school_db, "school")
    assert from_json.column_ids == from_db.column_ids
    assert set(from_json.foreign_keys) == set(from_db.foreign_keys)
    assert from_json.render() == from_db.render()


def test_bird_style_composite_keys():
    entry = {
        "db_id": "x",
        "table_names_original": ["Orders", "Line Items"],
        "column_names_original": [[-1, "*"], [0, "OrderID"], [1, "OrderID"], [1, "Line No"]],
        "column_types": ["text", "integer", "integer", "integer"],
        "primary_keys": [1, [2, 3]],
        "foreign_keys": [[2, 1]],
    }
    schema = Schema.from_tables_json(entry)
    assert schema.column_ids == ("orders.orderid", "line items.orderid", "line items.line no")
    text = schema.render()
    assert 'PRIMARY KEY ("OrderID", "Line No")'.replace('"OrderID"', "OrderID") in text
    assert "FOREIGN KEY (OrderID) REFERENCES Orders(OrderID)" in text
    assert 'CREATE TABLE "Line Items"' in text


def test_render_is_deterministic_and_pruned_in_database_order(school_db):
    schema = Schema.from_sqlite(school_db)
    assert schema.render() == Schema.from_sqlite(school_db).render()
    a = schema.render(
        ["student.name", "department.dept name", "student.dept_id", "department.dept_id"]
    )
    b = schema.render(
        ["department.dept_id", "student.dept_id", "department.dept name", "student.name"]
    )
    assert a == b
    assert a.index("CREATE TABLE Department") < a.index("CREATE TABLE student")
    assert "course" not in a and "age" not in a and "gpa" not in a
    assert "FOREIGN KEY (dept_id) REFERENCES Department(dept_id)" in a
    assert '"Dept Name" TEXT' in a and "examples:" in a
    without_target = schema.render(["student.name", "student.dept_id"])
    assert "FOREIGN KEY" not in without_target


def test_render_golden(school_db):
    schema = Schema.from_sqlite(school_db, n_samples=0)
    assert schema.render(["department.dept_id", "department.dept name"]) == (
        'CREATE TABLE Department (\n  dept_id INTEGER PRIMARY KEY,\n  "Dept Name" TEXT\n);'
    )


@pytest.mark.parametrize(
    "text, cid",
    [
        ("student.name", "student.name"),
        ("STUDENT.NAME", "student.name"),
        ('"student"."name"', "student.name"),
        ("`Department`.`Dept Name`", "department.dept name"),
        ("[Department].[Dept Name]", "department.dept name"),
        ("department.dept name", "department.dept name"),
        ("  student . gpa ", "student.gpa"),
        ("gpa", "student.gpa"),  # bare and unique
        ("name", "student.name"),
        ("dept_id", None),  # bare and ambiguous
        ("student.salary", None),
        ("department.gpa", "student.gpa"),  # a real column under the wrong table, unique
        ('"Course"."GPA"', "student.gpa"),
        ("teacher.gpa", None),  # under a table the schema does not have
        ("enrollment.dept_id", None),  # wrong table, and two tables have the column
        ("", None),
        ("...", None),
    ],
)
def test_resolve(school_db, text, cid):
    assert Schema.from_sqlite(school_db, n_samples=0).resolve(text) == cid


def test_canonical_ids_map_back_to_real_identifiers(school_db):
    schema = Schema.from_sqlite(school_db, n_samples=0)
    column = schema.column(canonical_id("Department", "Dept Name"))
    assert (column.table, column.name) == ("Department", "Dept Name")


def test_round_trip_through_dict(school_db):
    schema = Schema.from_sqlite(school_db)
    again = Schema.from_dict(json.loads(json.dumps(schema.to_dict())))
    assert again == schema and again.render() == schema.render()


def test_missing_or_broken_database(tmp_path):
    with pytest.raises(DataError, match="not found"):
        Schema.from_sqlite(tmp_path / "none.sqlite")
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"this is not a database" * 100)
    with pytest.raises(DataError, match="cannot read"):
        Schema.from_sqlite(junk)


def test_foreign_keys_naming_missing_columns_are_dropped(tmp_path):
    import sqlite3

    path = tmp_path / "dangling.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript(
        "CREATE TABLE keyword (id INTEGER PRIMARY KEY, word TEXT);"
        "CREATE TABLE movie (mid INTEGER PRIMARY KEY, kid INTEGER REFERENCES keyword(kid),"
        " wid INTEGER REFERENCES keyword(id));"
    )
    conn.close()
    schema = Schema.from_sqlite(path)
    assert [(f.column, f.references) for f in schema.foreign_keys] == [("movie.wid", "keyword.id")]
    assert "REFERENCES keyword(id)" in schema.render()


def _database(tmp_path, *statements) -> str:
    path = tmp_path / "db.sqlite"
    conn = sqlite3.connect(path)
    for sql in statements:
        conn.execute(sql)
    conn.commit()
    conn.close()
    return str(path)


def test_a_column_named_like_a_keyword_is_quoted_where_sqlite_needs_it(tmp_path):
    db = _database(tmp_path, 'CREATE TABLE t ("select" INT, "current_date" TEXT, "key" INT)')
    text = Schema.from_sqlite(db, n_samples=0).render()
    assert '"select" INT' in text and '"current_date" TEXT' in text
    assert "\n  key INT" in text  # SQLite reads this one as a name: no quotes needed
    conn = sqlite3.connect(db)  # the rendered names, as SQL, read the columns
    conn.execute("INSERT INTO t VALUES (1, 'x', 2)")
    names = ", ".join(line.split()[0] for line in text.splitlines()[1:-1])
    assert conn.execute(f"SELECT {names} FROM t").fetchall() == [(1, "x", 2)]


def test_generated_columns_are_part_of_the_schema(tmp_path):
    db = _database(
        tmp_path,
        "CREATE TABLE t (a INT, b INT, c INT GENERATED ALWAYS AS (a + b), d AS (a * 2) STORED)",
    )
    assert Schema.from_sqlite(db, n_samples=0).column_ids == ("t.a", "t.b", "t.c", "t.d")


def test_dotted_names_that_read_alike_stay_apart(tmp_path):
    db = _database(tmp_path, 'CREATE TABLE "t.a" (b INT)', 'CREATE TABLE t ("a.b" INT)')
    schema = Schema.from_sqlite(db, n_samples=0)
    assert schema.column_ids == ('"t.a".b', 't."a.b"')
    assert schema.resolve('"t.a"."b"') == '"t.a".b' and schema.resolve('t."a.b"') == 't."a.b"'
    assert schema.column('"t.a".b').table == "t.a"
