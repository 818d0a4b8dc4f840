"""A small Spider-layout dataset built from code: two databases and hand-written questions.

It lets `acesql run` and the tests work where no benchmark is on disk. The databases are
built deterministically (same rows every time); names mix cases, spaces and quoting on
purpose, the way real schemas do.
"""

from __future__ import annotations

import json
import random
import sqlite3
from pathlib import Path
from acesql.sql.schema import Schema

_SCHOOL = """
CREATE TABLE Department (
    dept_id INTEGER PRIMARY KEY,
    "Dept Name" TEXT NOT NULL,
    building TEXT,
    budget REAL
);
CREATE TABLE student (
    StudentID INTEGER PRIMARY KEY,
    name TEXT,
    age INTEGER,
    dept_id INTEGER REFERENCES Department(dept_id),
    gpa REAL,
    enrolled_on TEXT
);
CREATE TABLE course (
    course_id INTEGER PRIMARY KEY,
    title TEXT,
    dept_id INTEGER REFERENCES Department(dept_id),
    credits INTEGER
);
CREATE TABLE enrollment (
    StudentID INTEGER REFERENCES student(StudentID),
    course_id INTEGER REFERENCES course(course_id),
    grade TEXT,
    PRIMARY KEY (StudentID, course_id)
);
"""

_SHOP = """
CREATE TABLE customers (
    id INTEGER PRIMARY KEY,
    full_name TEXT,
    city TEXT,
    signup_date TEXT
);
CREATE TABLE products (
    id INTEGER PRIMARY KEY,
    name TEXT,
    category TEXT,
    price REAL
);
CREATE TABLE orders (
    order_id INTEGER PRIMARY KEY,
    customer_id INTEGER REFERENCES customers(id),
    product_id INTEGER REFERENCES products(id),
    quantity INTEGER,
    status TEXT,
    order_date TEXT
);
"""

_QUESTIONS = [
    ("school", "How many students are there?", "SELECT count(*) FROM student"),
    ("school", "List the names of students older than 20.", "SELECT name FROM student WHERE age > 20"),
    (
        "school",
        "What is the name of each department and its budget, by budget descending?",
        'SELECT "Dept Name", budget FROM Department ORDER BY budget DESC',
    ),
    (
        "school",
        "How many students does each department have?",
        'SELECT T2."Dept Name", count(*) FROM student AS T1 JOIN Department AS T2 '
        "ON T1.dept_id = T2.dept_id GROUP BY T2.dept_id",
    ),
    (
        "school",
        "Which courses have more than 3 credits?",
        "SELECT title FROM course WHERE credits > 3",
    ),
    (
        "school",
        "What is the average GPA of students in the Physics department?",
        "SELECT avg(s.gpa) FROM student s JOIN Department d USING (dept_id) "
        "WHERE d.\"Dept Name\" = 'Physics'",
    ),
    (
        "school",
        "Names of students who earned an A in any course.",
        "SELECT DISTINCT name FROM student WHERE StudentID IN "
        "(SELECT StudentID FROM enrollment WHERE grade = 'A')",
    ),
    (
        "school",
        "The three students with the highest GPA.",
        "SELECT name, gpa FROM student ORDER BY gpa DESC LIMIT 3",
    ),
    ("shop", "How many orders were delivered?", "SELECT count(*) FROM orders WHERE status = 'delivered'"),
    ("shop", "List all product categories.", "SELECT DISTINCT category FROM products"),
    (
        "shop",
        "Total quantity ordered per customer city.",
        "SELECT c.city, sum(o.quantity) FROM orders o JOIN customers c ON o.customer_id = c.id "
        "GROUP BY c.city",
    ),
    (
        "shop",
        "Which products cost more than the average price?",
        "SELECT name FROM products WHERE price > (SELECT avg(price) FROM products)",
    ),
    (
        "shop",
        "Customers who never placed an order.",
        "SELECT full_name FROM customers EXCEPT SELECT c.full_name FROM customers c "
        "JOIN orders o ON o.customer_id = c.id",
    ),
    (
        "shop",
        "For each category, the most expensive price.",
        "WITH m AS (SELECT category, max(price) AS top FROM products GROUP BY category) "
        "SELECT category, top FROM m ORDER BY top DESC",
    ),
]

_FIRST = ["Ana", "Bo", "Chen", "Dara", "Eli", "Farah", "Gus", "Hana", "Ivo", "June", "Kai", "Lea"]
_LAST = ["Smith", "Garcia", "Okafor", "Tanaka", "Novak", "Silva", "Khan", "Meyer"]
_CITIES = ["Lisbon", "Osaka", "Lagos", "Denver", "Turin", "Pune"]


def _fill_school(conn, rng):
    depts = ["Physics", "History", "Biology", "Music", "Economics"]
    for i, d in enumerate(depts, 1):
        conn.execute(
            "INSERT INTO Department VALUES (?,?,?,?)",
            (i, d, f"Hall {rng.randint(1, 9)}", round(rng.uniform(1e5, 9e5), 2)),
        )
    for i in range(1, 61):
        name = f"{rng.choice(_FIRST)} {rng.choice(_LAST)}"
        conn.execute(
            "INSERT INTO student VALUES (?,?,?,?,?,?)",
            (
                i,
                name,
                rng.randint(17, 30),
                rng.randint(1, 5),
                round(rng.uniform(2, 4), 2),
                f"20{rng.randint(15, 24)}-0{rng.randint(1, 9)}-1{rng.randint(0, 9)}",
            ),
        )
    for i in range(1, 16):
        conn.execute(
            "INSERT INTO course VALUES (?,?,?,?)",
            (i, f"Course {i}", rng.randint(1, 5), rng.randint(1, 6)),
        )
    pairs = {(rng.randint(1, 60), rng.randint(1, 15)) for _ in range(150)}
    for s, c in sorted(pairs):
        conn.execute("INSERT INTO enrollment VALUES (?,?,?)", (s, c, rng.choice("ABCDF")))


def _fill_shop(conn, rng):
    for i in range(1, 41):
        conn.execute(
            "INSERT INTO customers VALUES (?,?,?,?)",
            (i, f"{rng.choice(_FIRST)} {rng.choice(_LAST)}", rng.choice(_CITIES), "2023-01-0%d" % rng.randint(1, 9)),
        )
    categories = ["toys", "books", "garden", "kitchen"]
    for i in range(1, 26):
        conn.execute(
            "INSERT INTO products VALUES (?,?,?,?)",
            (i, f"Item {i}", rng.choice(categories), round(rng.uniform(2, 200), 2)),
        )
    for i in range(1, 121):
        conn.execute(
            "INSERT INTO orders VALUES (?,?,?,?,?,?)",
            (
                i,
                rng.randint(1, 35),
                rng.randint(1, 25),
                rng.randint(1, 5),
                rng.choice(["delivered", "shipped", "cancelled"]),
                f"2024-0{rng.randint(1, 9)}-2{rng.randint(0, 8)}",
            ),
        )


def build_sample_dataset(out: str | Path, seed: int = 0) -> Path:
    """Write the sample dataset in Spider layout under `out` and return `out`."""
    out = Path(out)
    for db_id, ddl, fill in (("school", _SCHOOL, _fill_school), ("shop", _SHOP, _fill_shop)):
        db_dir = out / "database" / db_id
        db_dir.mkdir(parents=True, exist_ok=True)
        path = db_dir / f"{db_id}.sqlite"
        path.unlink(missing_ok=True)
        conn = sqlite3.connect(path)
        conn.executescript(ddl)
        fill(conn, random.Random(f"{seed}-{db_id}"))
        conn.commit()
        conn.close()
    questions = [{"db_id": d, "question": q, "query": s} for d, q, s in _QUESTIONS]
    (out / "dev.json").write_text(json.dumps(questions, indent=1))
    (out / "tables.json").write_text(json.dumps(_tables_entries(out), indent=1))
    return out


def _tables_entries(out: Path) -> list[dict]:
    """Spider-style tables.json entries, read back from the databases just written."""

    return [
        Schema.from_sqlite(out / "database" / db_id / f"{db_id}.sqlite", db_id).to_tables_json()
        for db_id in ("school", "shop")
    ]
