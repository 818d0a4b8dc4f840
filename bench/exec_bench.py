"""Benchmark: acesql's BatchExecutor against a BIRD-style evaluation pool on Spider dev.

What it measures
    For every usable Spider dev question it builds 8 candidate SQLs (the gold query and 7
    variants derived with sqlglot: wrong column, dropped filter, changed LIMIT, reordered
    projection, flipped ORDER BY, changed aggregate, broken syntax) and checks each candidate
    against its gold query under BIRD's rule (rows compared as sets), twice:

    - ours: `acesql.sql.batch_executor.BatchExecutor.match_many(..., "bird")`, timed from the
      creation of the executor (worker start-up included) to its shutdown;
    - baseline: the way the official BIRD evaluator works: a `multiprocessing.Pool` fed
      with one `apply_async` per (pred, gold, db) triple, a fresh `sqlite3.connect` per
      triple that runs the prediction and then the gold query again, a thread joined with
      a timeout standing in for `func_timeout`, results gathered by callbacks.

    Both use "spawn" processes and the same number of workers. The two sets of verdicts
    must be identical, pair by pair (exit status 1 otherwise).

    With `--official DIR` (a folder holding bird-bench/mini_dev's `evaluation/evaluation_ex.py`
    and `evaluation_utils.py`, unmodified), it also runs that script on the same pairs, with
    the same workers and timeout, and checks that its printed EX (per difficulty label, pair
    i labelled simple/moderate/challenging by i mod 3, and in total) equals ours.

    Ours is broken down into worker start-up, the SQL work itself timed in one process, and
    what dispatching it over the workers costs beyond a perfect split. It also measures how far past
    a 1 s timeout a runaway recursive query runs, through `acesql.sql.sandbox.execute`
    and through the BatchExecutor.

How to run
    make bench
    .venv/bin/python bench/exec_bench.py --spider ../shared/data/spider [--workers N]
        [--limit QUESTIONS] [--timeout SECONDS] [--official DIR]
    # the official script imports these at the top:
    .venv/bin/python -m pip install func-timeout psycopg2-binary pymysql

    It prints a table, then one JSON line with all the numbers. Without the Spider folder
    it says so and exits 0.

Target: ours at least 6x faster than the official evaluator with 2 workers on a 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import re
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

# acesql and sqlglot are imported inside the functions that need them, so that the
# baseline's spawned workers (which re-import this file) load only the standard library.

VARIANT_KINDS = (
    "wrong_column",
    "dropped_filter",
    "changed_limit",
    "reordered_select",
    "flipped_order",
    "aggregate_changed",
    "broken_syntax",
)
RUNAWAY_SQL = "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM r) SELECT count(*) FROM r"
SHOW_MISMATCHES = 5


# ------------------------------------------------------------------ variants
def make_variants(gold_sql: str, schema_columns: dict[str, list[str]] | None = None) -> list[str]:
    """Seven wrong-ish variants of `gold_sql`, one per entry of VARIANT_KINDS, in that order.

    `schema_columns` maps table name -> column names; it lets the wrong-column variant pick
    a real column. A transform that does not apply is replaced by another one; a query that
    sqlglot cannot parse gets seven textual variants. Never raises.

    >>> len(make_variants("SELECT name FROM singer WHERE age > 20"))
    7
    """
    text = gold_sql if isinstance(gold_sql, str) else str(gold_sql)
    try:
        return _tree_variants(text, schema_columns or {})
    except Exception:  # noqa: BLE001 - anything sqlglot throws means "use the text variants"
        return _text_variants(text)


def _tree_variants(sql: str, schema_columns: dict[str, list[str]]) -> list[str]:
    from acesql.sql.columns import parse_query

    tree = parse_query(sql)
    columns = {str(t).lower(): [str(c) for c in cols] for t, cols in schema_columns.items()}
    primary = [
        lambda t: _wrong_column(t, columns),
        _drop_filter,
        _change_limit,
        _reorder_select,
        _flip_order,
        _change_aggregate,
        _break_syntax,
    ]
    extras = [_negate_filter, _toggle_distinct, _limit_plus_two, _order_first_asc]
    produced = [_apply(f, tree, sql) for f in primary]
    used = {v for v in produced if v is not None}
    for i, value in enumerate(produced):
        if value is not None:
            continue
        options = [_apply(f, tree, sql) for f in extras + primary[:-1]]
        options = [o for o in options if o is not None]
        fresh = [o for o in options if o not in used]
        value = (fresh or options or [_text_variants(sql)[i]])[0]
        produced[i] = value
        used.add(value)
    return produced


def _apply(transform, tree, sql: str) -> str | None:
    try:
        return transform(tree.copy()) if transform is not _break_syntax else _break_syntax(sql)
    except Exception:  # noqa: BLE001 - a transform that fails simply does not apply
        return None


def _sql(tree) -> str:
    return tree.sql(dialect="sqlite")


def _outer_select(tree):
    from sqlglot import exp

    node = tree
    while isinstance(node, exp.SetOperation):
        node = node.this
    while isinstance(node, exp.Subquery):
        node = node.this
    return node if isinstance(node, exp.Select) else None


def _wrong_column(tree, columns: dict[str, list[str]]) -> str | None:
    from sqlglot import exp

    select = _outer_select(tree)
    if select is None or not select.expressions:
        return None
    sources = {}  # alias or name (lower) -> table name (lower)
    from_ = select.args.get("from_") or select.args.get("from")  # "from_" in newer sqlglot
    direct = [from_.this] if from_ is not None else []
    direct += [j.this for j in select.args.get("joins") or []]
    for source in direct:
        if isinstance(source, exp.Table):
            sources.setdefault(source.alias_or_name.lower(), source.name.lower())
    first_table = next(iter(sources.values()), None)

    first = select.expressions[0]
    if isinstance(first, exp.Star):
        choices = columns.get(first_table or "", [])
        real = [c for c in choices if c != "*"]
        if not real:
            return None
        first.replace(exp.column(real[0]))
        return _sql(tree)
    target = next(iter(first.find_all(exp.Column)), None)
    if target is None:
        for projection in select.expressions[1:]:
            target = next(iter(projection.find_all(exp.Column)), None)
            if target is not None:
                break
    if target is None or isinstance(target.this, exp.Star):
        return None
    name = target.name
    table = sources.get(target.table.lower()) if target.table else first_table
    choices = [c for c in columns.get(table or "", []) if c != "*" and c.lower() != name.lower()]
    if not choices:  # no schema: any other column name the query uses, else a made-up one
        others = {c.name for c in tree.find_all(exp.Column) if c.name.lower() != name.lower()}
        choices = sorted(o for o in others if o and o != "*") or [name + "_other"]
    target.set("this", exp.to_identifier(choices[0]))
    return _sql(tree)


def _drop_filter(tree) -> str | None:
    from sqlglot import exp

    where = tree.find(exp.Where)  # breadth first: the outermost WHERE
    if where is None:
        return None
    where.pop()
    return _sql(tree)


def _negate_filter(tree) -> str | None:
    from sqlglot import exp

    where = tree.find(exp.Where)
    if where is None:
        return None
    where.set("this", exp.Not(this=exp.Paren(this=where.this)))
    return _sql(tree)


def _limit_number(tree) -> int | None:
    from sqlglot import exp

    limit = tree.args.get("limit")
    if limit is None:
        return None
    value = limit.args.get("expression")
    if isinstance(value, exp.Literal) and value.is_int:
        return int(value.this)
    raise ValueError("non-numeric LIMIT")


def _set_limit(tree, n: int) -> str:
    from sqlglot import exp

    tree.set("limit", exp.Limit(expression=exp.Literal.number(n)))
    return _sql(tree)


def _change_limit(tree) -> str | None:
    n = _limit_number(tree)
    return _set_limit(tree, 1 if n is None else n + 1)


def _limit_plus_two(tree) -> str | None:
    n = _limit_number(tree)
    return _set_limit(tree, 2 if n is None else n + 2)


def _reorder_select(tree) -> str | None:
    select = _outer_select(tree)
    if select is None:
        return None
    if len(select.expressions) > 1:
        select.set("expressions", list(reversed(select.expressions)))
        return _sql(tree)
    return _toggle_distinct(tree)


def _toggle_distinct(tree) -> str | None:
    from sqlglot import exp

    select = _outer_select(tree)
    if select is None:
        return None
    select.set("distinct", None if select.args.get("distinct") else exp.Distinct())
    return _sql(tree)


def _flip_order(tree) -> str | None:
    from sqlglot import exp

    order = tree.args.get("order")
    if order is None:
        tree.set("order", exp.Order(expressions=[_ordered(1, desc=True)]))
        return _sql(tree)
    for item in order.expressions:
        if isinstance(item, exp.Ordered):
            desc = not item.args.get("desc")
            item.set("desc", desc)
            item.set("nulls_first", not desc)  # SQLite's default: NULLs sort as smallest
    return _sql(tree)


def _order_first_asc(tree) -> str | None:
    from sqlglot import exp

    tree.set("order", exp.Order(expressions=[_ordered(1, desc=False)]))
    return _sql(tree)


def _ordered(position: int, desc: bool):
    from sqlglot import exp

    return exp.Ordered(this=exp.Literal.number(position), desc=desc, nulls_first=not desc)


def _change_aggregate(tree) -> str | None:
    from sqlglot import exp

    select = _outer_select(tree)
    if select is None or not select.expressions:
        return None
    swaps = {exp.Sum: exp.Avg, exp.Avg: exp.Sum, exp.Max: exp.Min, exp.Min: exp.Max}
    for projection in select.expressions:
        agg = projection.find(exp.AggFunc)
        if agg is None:
            continue
        arg = agg.this
        if isinstance(agg, exp.Count):
            new = exp.Sum(this=exp.Literal.number(1) if isinstance(arg, exp.Star) else arg)
        elif type(agg) in swaps:
            new = swaps[type(agg)](this=arg)
        else:
            new = exp.Count(this=arg)
        agg.replace(new)
        return _sql(tree)
    first = select.expressions[0]
    inner = first.this if isinstance(first, exp.Alias) else first
    inner.replace(exp.Count(this=inner.copy()))
    return _sql(tree)


def _break_syntax(sql: str) -> str:
    """Mangle FROM (SQLite then sees two names in a row), else SELECT."""
    broken, n = re.subn(r"\bfrom\b", "FORM", sql, count=1, flags=re.I)
    if n:
        return broken
    broken, n = re.subn(r"\bselect\b", "SELCT", sql, count=1, flags=re.I)
    return broken if n else "SELCT " + sql


def _text_variants(sql: str) -> list[str]:
    """Seven variants made with regular expressions, for SQL that sqlglot cannot parse."""
    try:
        wrong = re.sub(r"(?i)(\bselect\s+)(?:distinct\s+)?([\w.]+)", r"\1\2_other", sql, count=1)
        dropped = re.sub(
            r"(?is)\s+where\s+.*?(?=\s+(?:group|order|limit|union|intersect|except)\b|$)",
            "",
            sql,
            count=1,
        )
        return [
            wrong,
            dropped,
            sql.rstrip("; \n") + " LIMIT 1",
            re.sub(r"(?i)\bselect\b", "SELECT DISTINCT", sql, count=1),
            sql.rstrip("; \n") + " ORDER BY 1 DESC",
            "SELECT count(*) FROM (" + sql.rstrip("; \n") + ")",
            _break_syntax(sql),
        ]
    except Exception:  # noqa: BLE001 - must never raise
        return [sql] * 6 + ["SELCT " + sql]


def schema_columns_of(tables_entry: dict | None) -> dict[str, list[str]]:
    """{table: [columns]} from a Spider tables.json entry."""
    if not tables_entry:
        return {}
    names = tables_entry.get("table_names_original") or tables_entry.get("table_names") or []
    out: dict[str, list[str]] = {name: [] for name in names}
    for table_idx, column in tables_entry.get("column_names_original") or []:
        if 0 <= table_idx < len(names):
            out[names[table_idx]].append(column)
    return out


# ------------------------------------------------------------------ baseline
def _compare(pred_sql: str, gold_sql: str, db_path: str) -> int:
    conn = sqlite3.connect(db_path)
    try:
        cursor = conn.cursor()
        cursor.execute(pred_sql)
        pred_rows = cursor.fetchall()
        cursor.execute(gold_sql)
        gold_rows = cursor.fetchall()
    finally:
        conn.close()
    return 1 if set(pred_rows) == set(gold_rows) else 0


def _with_timeout(timeout_s: float, func, *args) -> int:
    """Run func in a thread and give up after timeout_s (the `func_timeout` approach)."""
    box: dict = {}

    def target():
        try:
            box["value"] = func(*args)
        except BaseException as exc:  # noqa: BLE001 - reported to the caller as a 0
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive() or "error" in box:
        return 0
    return box["value"]


def _baseline_task(idx: int, pred_sql: str, gold_sql: str, db_path: str, timeout_s: float):
    try:
        res = _with_timeout(timeout_s, _compare, pred_sql, gold_sql, db_path)
    except Exception:  # noqa: BLE001
        res = 0
    return {"idx": idx, "res": res}


def run_baseline(triples: list[tuple[str, str, str]], workers: int, timeout_s: float) -> list:
    collected: list[dict] = []
    pool = mp.get_context("spawn").Pool(processes=workers)
    for idx, (db_path, pred, gold) in enumerate(triples):
        pool.apply_async(
            _baseline_task,
            args=(idx, pred, gold, db_path, timeout_s),
            callback=collected.append,
        )
    pool.close()
    pool.join()
    collected.sort(key=lambda r: r["idx"])
    return [r["res"] for r in collected]


# ------------------------------------------------------------------ the official evaluator
BIRD_SEPARATOR = "\t----- bird -----\t"
LEVELS = ("simple", "moderate", "challenging")


def run_official(
    folder: Path, triples, db_ids, workers: int, timeout_s: float, scratch: Path
) -> tuple[float, list[float], str]:
    """Run BIRD mini_dev's `evaluation_ex.py`, as shipped, on the pairs; (seconds, EX per
    level and in total as it prints them, its output). Pair i is labelled LEVELS[i % 3]:
    the script divides by the size of each level, so none may be empty."""
    preds = {
        str(i): f"{pred}{BIRD_SEPARATOR}{db}"
        for i, ((_, pred, _), db) in enumerate(zip(triples, db_ids))
    }
    (scratch / "predict.json").write_text(json.dumps(preds))
    (scratch / "gold.sql").write_text(
        "".join(f"{gold}\t{db}\n" for (_, _, gold), db in zip(triples, db_ids))
    )
    (scratch / "diff.jsonl").write_text(
        "".join(json.dumps({"difficulty": LEVELS[i % 3]}) + "\n" for i in range(len(triples)))
    )
    db_root = str(Path(triples[0][0]).resolve().parents[1]) + "/"  # <root>/<db>/<db>.sqlite
    command = [
        sys.executable,
        str(folder / "evaluation_ex.py"),
        *("--predicted_sql_path", str(scratch / "predict.json")),
        *("--ground_truth_path", str(scratch / "gold.sql")),
        *("--db_root_path", db_root),
        *("--num_cpus", str(workers)),
        *("--meta_time_out", str(timeout_s)),
        *("--diff_json_path", str(scratch / "diff.jsonl")),
        *("--sql_dialect", "SQLite"),
        *("--output_log_path", str(scratch / "official.log")),
    ]
    start = time.perf_counter()
    proc = subprocess.run(command, cwd=folder, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"evaluation_ex.py failed:\n{proc.stderr[-2000:]}")
    numbers = next(
        (line.split()[1:] for line in proc.stdout.splitlines() if line.startswith("EX ")), None
    )
    if numbers is None:
        raise RuntimeError(f"no EX line in evaluation_ex.py's output:\n{proc.stdout[-2000:]}")
    return seconds, [float(x) for x in numbers], proc.stdout


def ex_by_level(verdicts: list[int]) -> list[float]:
    """EX per level and in total, in percent, the way the official script computes them."""
    levels = [[v for i, v in enumerate(verdicts) if i % 3 == k] for k in range(3)]
    return [100 * sum(v) / len(v) for v in levels] + [100 * sum(verdicts) / len(verdicts)]


# ------------------------------------------------------------------ ours
def time_breakdown(triples, workers: int, timeout_s: float) -> dict:
    """Where our time goes: worker start-up, the SQL work itself (in this process), and
    what dispatching it over `workers` processes costs on top of a perfect split."""
    from acesql.sql.batch_executor import BatchExecutor

    db = triples[0][0]
    start = time.perf_counter()
    with BatchExecutor(workers=workers, timeout_s=timeout_s) as ex:
        ex.execute_many([(db, "SELECT 1")] * workers)
    startup_s = time.perf_counter() - start
    start = time.perf_counter()
    with BatchExecutor(workers=0, timeout_s=timeout_s) as ex:
        ex.match_many(triples, "bird")
    inline_s = time.perf_counter() - start
    return {"worker_startup_s": round(startup_s, 3), "in_process_s": round(inline_s, 3)}


def run_ours(triples: list[tuple[str, str, str]], workers: int, timeout_s: float) -> list[int]:
    from acesql.sql.batch_executor import BatchExecutor

    with BatchExecutor(workers=workers, timeout_s=timeout_s) as ex:
        verdicts = ex.match_many(triples, "bird")
    return [int(v.match.match) for v in verdicts]


def timeout_overshoot(db_path: str, tries: int = 3) -> dict:
    from acesql.sql.batch_executor import BatchExecutor
    from acesql.sql.sandbox import execute

    direct = [execute(db_path, RUNAWAY_SQL, timeout_s=1.0) for _ in range(tries)]
    with BatchExecutor(workers=1, timeout_s=1.0) as ex:
        ex.execute_many([(db_path, "SELECT 1")])  # start the worker outside the timing
        start = time.perf_counter()
        (batched,) = ex.execute_many([(db_path, RUNAWAY_SQL)])
        batch_wall = time.perf_counter() - start
    return {
        "timeout_overshoot_ms": round(1000 * max(r.elapsed_s - 1.0 for r in direct), 2),
        "timeout_timed_out": all(r.timed_out for r in direct),
        "batch_timeout_overshoot_ms": round(1000 * (batch_wall - 1.0), 2),
        "batch_timeout_reported_overshoot_ms": round(1000 * (batched.elapsed_s - 1.0), 2),
        "batch_timed_out": batched.timed_out,
    }


# ------------------------------------------------------------------ main
def build_pairs(dataset, limit: int | None):
    examples = dataset.usable[:limit] if limit is not None else dataset.usable
    triples, labels = [], []
    for ex in examples:
        variants = make_variants(ex.sql, schema_columns_of(dataset.tables.get(ex.db_id)))
        for kind, cand in zip(("gold", *VARIANT_KINDS), [ex.sql, *variants]):
            triples.append((ex.db_path, cand, ex.sql))
            labels.append((ex.index, kind))
    return examples, triples, labels


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Time acesql's BatchExecutor against a BIRD-style evaluation pool "
        "on Spider dev (8 candidates per question) and check that their verdicts agree."
    )
    parser.add_argument("--spider", default="../shared/data/spider", help="Spider folder")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="processes")
    parser.add_argument("--limit", type=int, default=None, help="questions (default: all)")
    parser.add_argument("--timeout", type=float, default=30.0, help="per-query timeout, s")
    parser.add_argument(
        "--official",
        type=Path,
        default=None,
        help="a folder holding BIRD mini_dev's evaluation_ex.py and evaluation_utils.py, as "
        "shipped (needs func_timeout, psycopg2 and pymysql importable): also time that script",
    )
    args = parser.parse_args(argv)
    if args.workers < 1:
        parser.error("--workers must be at least 1")

    root = Path(args.spider)
    if not (root / "dev.json").is_file():
        print(f"Spider dev not found at {root} (no dev.json); nothing to benchmark.")
        return 0
    from acesql.data.loaders import load_dataset
    from acesql.errors import AcesqlError

    try:
        dataset = load_dataset(root, "spider", "dev")
    except AcesqlError as exc:
        print(f"cannot load Spider dev from {root}: {exc}; nothing to benchmark.")
        return 0
    start = time.perf_counter()
    examples, triples, labels = build_pairs(dataset, args.limit)
    variants_s = time.perf_counter() - start
    if not triples:
        print(f"no usable Spider dev questions under {root}; nothing to benchmark.")
        return 0
    unique_golds = len({(db, gold) for db, _, gold in triples})
    print(
        f"{len(examples)} questions, {len(triples)} pairs, {args.workers} workers, "
        f"timeout {args.timeout:g}s (variants built in {variants_s:.2f}s)",
        flush=True,
    )

    start = time.perf_counter()
    ours = run_ours(triples, args.workers, args.timeout)
    ours_s = time.perf_counter() - start
    start = time.perf_counter()
    baseline = run_baseline(triples, args.workers, args.timeout)
    baseline_s = time.perf_counter() - start

    if len(baseline) != len(triples):
        print(f"baseline returned {len(baseline)} results for {len(triples)} pairs")
        return 1
    differ = [i for i, (a, b) in enumerate(zip(ours, baseline)) if a != b]
    if differ:
        print(f"verdicts differ on {len(differ)} of {len(triples)} pairs; first ones:")
        for i in differ[:SHOW_MISMATCHES]:
            question, kind = labels[i]
            db, cand, gold = triples[i]
            print(f"  question {question} ({kind}) ours={ours[i]} baseline={baseline[i]}")
            print(f"    db:   {db}\n    pred: {cand}\n    gold: {gold}")
        return 1

    official = None
    if args.official is not None:
        db_ids = [Path(db).parent.name for db, _, _ in triples]
        with tempfile.TemporaryDirectory() as scratch:
            official_s, official_ex, _ = run_official(
                args.official, triples, db_ids, args.workers, args.timeout, Path(scratch)
            )
        ours_ex = [round(x, 2) for x in ex_by_level(ours)]
        if [round(x, 2) for x in official_ex] != ours_ex:
            print(f"EX differs: official {official_ex}, ours {ours_ex}")
            return 1
        official = {
            "official_s": round(official_s, 3),
            "official_ex": official_ex,
            "speedup_vs_official": round(official_s / ours_s, 3),
        }
    breakdown = time_breakdown(triples, args.workers, args.timeout)
    n_workers = args.workers
    overshoot = timeout_overshoot(examples[0].db_path)
    speedup = baseline_s / ours_s if ours_s > 0 else float("inf")
    rows = [
        ("questions", f"{len(examples)}"),
        ("pairs", f"{len(triples)}"),
        ("unique golds", f"{unique_golds}"),
        ("matching pairs", f"{sum(ours)}"),
        ("workers", f"{args.workers}"),
        ("ours (s)", f"{ours_s:.2f}"),
        ("  worker start-up (s)", f"{breakdown['worker_startup_s']:.2f}"),
        ("  the SQL work in one process (s)", f"{breakdown['in_process_s']:.2f}"),
        (
            "  dispatch beyond a perfect split (s)",
            f"{ours_s - breakdown['worker_startup_s'] - breakdown['in_process_s'] / n_workers:.2f}",
        ),
        ("baseline (s)", f"{baseline_s:.2f}"),
        ("speedup baseline/ours", f"{speedup:.2f}x"),
        *(
            [
                ("official evaluation_ex.py (s)", f"{official['official_s']:.2f}"),
                ("speedup official/ours", f"{official['speedup_vs_official']:.2f}x"),
                ("EX, same on both sides", " / ".join(f"{x:.2f}" for x in official["official_ex"])),
            ]
            if official
            else []
        ),
        (
            "timeout overshoot, execute (ms)",
            f"{overshoot['timeout_overshoot_ms']:.1f} (timed_out={overshoot['timeout_timed_out']})",
        ),
        (
            "timeout overshoot, BatchExecutor (ms)",
            f"{overshoot['batch_timeout_overshoot_ms']:.1f} wall, "
            f"{overshoot['batch_timeout_reported_overshoot_ms']:.1f} reported "
            f"(timed_out={overshoot['batch_timed_out']})",
        ),
    ]
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
    summary = {
        "questions": len(examples),
        "pairs": len(triples),
        "unique_golds": unique_golds,
        "matching_pairs": sum(ours),
        "workers": args.workers,
        "timeout_s": args.timeout,
        "variants_s": round(variants_s, 3),
        "ours_s": round(ours_s, 3),
        "baseline_s": round(baseline_s, 3),
        "speedup": round(speedup, 3),
        "verdicts_identical": True,
        **breakdown,
        **(official or {}),
        **overshoot,
    }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
