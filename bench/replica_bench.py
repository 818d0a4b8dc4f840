"""Benchmark: trajectory-scoped replicas against a database copy per rollout.

What it measures
    A multi-turn workload of stateful SQL tasks on several synthetic databases (one per
    domain, rows multiplied by `--scale`): for each database, `--tasks` tasks of `--rollouts`
    trajectories each (a GRPO group: the trajectories of a task run side by side, turn by
    turn). A trajectory has 3 to 6 turns; `--write-share` of them write (UPDATE, DELETE,
    INSERT, CREATE TABLE AS, with reads in between that must see those writes), the rest
    only read. The same workload runs four ways, in this process, one after the other:

    - copy: each rollout copies the database file, runs its turns on the copy (autocommit),
      deletes it; the baseline;
    - rollback (acesql): `acesql.sql.replicas.Replicas`, a replica per concurrent
      trajectory made once, each trajectory's writes held in one transaction and rolled back
      on release;
    - backup: the same replicas, writes committed to them, and a replica that was written
      restored from the source with SQLite's backup API;
    - pages: the same, restored by reading the source and the replica page by page and
      rewriting only the pages that differ.

    Bytes are what the process and its children (the rollback arm's SQL host, which holds the
    replica views and sends results back over a pipe) read and wrote through system calls
    (`rchar` + `wchar` of /proc/<pid>/io, page-cache hits included), from the first replica or
    copy made to the last
    one removed or restored; wall time likewise. The rollback arm's one-time copy of each
    database is counted in its total, and also reported apart (BIRD-RL's Table 3 leaves it
    out). Every arm must observe exactly the same
    results, turn by turn (exit status 1 otherwise): a trajectory that saw another's writes,
    or a restore that left a trace, shows up there.

How to run
    make bench-replicas
    .venv/bin/python bench/replica_bench.py [--databases 6] [--tasks 16] [--rollouts 8]
        [--write-share 0.5] [--scale 20] [--seed 0] [--workdir DIR]

    It prints a table, then one JSON line with all the numbers.

Target: the copy arm's bytes per rollout at least 20x the rollback arm's.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

from acesql.data.synth.database import PROFILES, build_database, write_database
from acesql.data.synth.domain import load_domains
from acesql.sql.replicas import Replicas
from acesql.sql.schema import quote_identifier as q

TARGET_RATIO = 20.0


# ---------------------------------------------------------------------- databases
def make_databases(folder: Path, n: int, scale: int, seed: int) -> list[Path]:
    """`n` synthetic databases of distinct domains, each table's rows repeated `scale` times."""
    domains = load_domains()
    names = sorted(domains)[:n]
    paths = []
    for name in names:
        db = build_database(domains[name], name, random.Random(f"{seed}:{name}"), PROFILES["large"])
        path = write_database(db, folder / f"{name}.sqlite")
        _multiply_rows(path, scale)
        paths.append(path)
    return paths


def _multiply_rows(path: Path, scale: int) -> None:
    conn = sqlite3.connect(path)
    for table in _tables(conn):
        info = conn.execute(f"PRAGMA table_info({q(table)})").fetchall()
        last = conn.execute(f"SELECT MAX(rowid) FROM {q(table)}").fetchone()[0] or 0
        top = 10 ** len(str(last + 1))  # the copies' keys are the originals' + k * top
        for k in range(1, scale):
            cols = []
            for _, name, ctype, _, _, pk in info:
                if pk and "INT" in ctype.upper():
                    cols.append(f"{q(name)} + {k * top}")
                elif pk:
                    cols.append(f"{q(name)} || '#{k}'")
                else:
                    cols.append(q(name))
            conn.execute(
                f"INSERT OR IGNORE INTO {q(table)} SELECT {', '.join(cols)} FROM {q(table)} "
                f"WHERE rowid <= {last}"
            )
    conn.commit()
    conn.execute("VACUUM")
    conn.close()


def _tables(conn) -> list[str]:
    rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
    return [r[0] for r in rows]


# ---------------------------------------------------------------------- workload
def make_workload(paths: list[Path], tasks: int, rollouts: int, write_share: float, seed: int):
    """[(db path, [trajectory, ...] of one task)], a trajectory being a list of SQL turns."""
    work = []
    for path in paths:
        conn = sqlite3.connect(path)
        tables = []
        for table in _tables(conn):
            info = conn.execute(f"PRAGMA table_info({q(table)})").fetchall()
            pk = [r[1] for r in info if r[5] and "INT" in r[2].upper()]
            other = [r[1] for r in info if not r[5]]
            if pk and other:
                n = conn.execute(f"SELECT MAX({q(pk[0])}) FROM {q(table)}").fetchone()[0] or 1
                tables.append((table, pk[0], other, n))
        conn.close()
        for t in range(tasks):
            rng = random.Random(f"{seed}:{path.name}:{t}")
            table, pk, other, top = rng.choice(tables)
            group = [
                _trajectory(rng, table, pk, other, top, rng.random() < write_share)
                for _ in range(rollouts)
            ]
            work.append((path, group))
    return work


def _trajectory(rng, table, pk, other, top, writes: bool) -> list[str]:
    t, p = q(table), q(pk)

    def read() -> str:
        c = q(rng.choice(other))
        return rng.choice(
            [
                f"SELECT COUNT(*), MAX({p}) FROM {t}",
                f"SELECT * FROM {t} WHERE {p} = {rng.randint(1, top)}",
                f"SELECT {c}, COUNT(*) FROM {t} GROUP BY {c} ORDER BY 2 DESC, 1 LIMIT 10",
                f"SELECT * FROM {t} ORDER BY {p} DESC LIMIT 5",
            ]
        )

    def write() -> str:
        c, k = q(rng.choice(other)), rng.randint(0, 40)
        return rng.choice(
            [
                f"UPDATE {t} SET {c} = NULL WHERE {p} % 50 = {k}",
                f"DELETE FROM {t} WHERE {p} % 97 = {k}",
                f"INSERT INTO {t} ({c}) SELECT {c} FROM {t} ORDER BY {p} LIMIT 20",
                f"CREATE TABLE fix_{k} AS SELECT * FROM {t} WHERE {p} % 10 = 0",
            ]
        )

    turns = rng.randint(3, 6)
    if not writes:
        return [read() for _ in range(turns)]
    return [write() if i % 2 == 0 else read() for i in range(turns)]


# ---------------------------------------------------------------------- arms
def observe(ok, rows=(), affected=-1, error=None):
    return [bool(ok), [list(r) for r in rows], affected if affected >= 0 else -1, bool(error)]


def _plain(conn, sql):
    try:
        cursor = conn.execute(sql)
        rows = cursor.fetchall()
        return observe(True, rows, cursor.rowcount)
    except sqlite3.Error as exc:
        return observe(False, error=str(exc))


def run_copy(work, scratch: Path):
    record = []
    for path, group in work:
        copies = []
        for i in range(len(group)):
            copy = scratch / f"copy-{i}.sqlite"
            shutil.copyfile(path, copy)
            copies.append((copy, sqlite3.connect(copy, isolation_level=None)))
        record += _interleave(group, [lambda s, c=c: _plain(c, s) for _, c in copies])
        for copy, conn in copies:
            conn.close()
            copy.unlink()
    return record, {}


def run_rollback(work, scratch: Path):
    record = []
    with Replicas(scratch / "replicas", max_leases=max(len(g) for _, g in work)) as replicas:
        start = io_bytes()
        for path in dict.fromkeys(p for p, _ in work):  # the one-time materialisation
            replicas.lease(path).release()
        made_bytes = io_bytes() - start
        for path, group in work:
            leases = [replicas.lease(path) for _ in group]
            runners = [lambda s, d=d: _from_result(d.execute(s)) for d in leases]
            record += _interleave(group, runners)
            for lease in leases:
                lease.release()
        stats = {**replicas.stats.to_dict(), "materialise_bytes": made_bytes}
    return record, stats


def _from_result(result):
    return observe(result.ok, result.rows, result.rows_affected, result.error)


def run_committed(work, scratch: Path, restore):
    """Replicas made once; writes committed; a written replica restored by `restore`."""
    record, made, restored = [], {}, 0
    for path, group in work:
        replicas = []
        for i in range(len(group)):
            replica = scratch / f"{path.stem}-{i}.sqlite"
            if (path, i) not in made:
                shutil.copyfile(path, replica)
                made[(path, i)] = replica
            replicas.append(replica)
        conns = [sqlite3.connect(r, isolation_level=None) for r in replicas]
        changes = [False] * len(conns)
        runners = [
            lambda s, c=c, i=i, ch=changes: _committing(c, s, ch, i) for i, c in enumerate(conns)
        ]
        record += _interleave(group, runners)
        for i, conn in enumerate(conns):
            conn.close()
            if changes[i]:
                restore(path, replicas[i])
                restored += 1
    return record, {"made": len(made), "restored": restored}


def _committing(conn, sql, changes: list, i: int):
    """Run `sql` in autocommit; mark `changes[i]` when it changed the file."""
    before = conn.total_changes
    result = _plain(conn, sql)
    changes[i] |= conn.total_changes != before or sql.startswith("CREATE")
    return result


def restore_backup(source: Path, replica: Path) -> None:
    src = sqlite3.connect(f"{source.resolve().as_uri()}?mode=ro", uri=True)
    dst = sqlite3.connect(replica)
    src.backup(dst)
    dst.close()
    src.close()


def restore_pages(source: Path, replica: Path) -> None:
    page = 4096
    with open(source, "rb") as src, open(replica, "r+b") as dst:
        while True:
            want, have = src.read(page), dst.read(page)
            if not want:
                break
            if want != have:
                dst.seek(-len(have), 1)
                dst.write(want)
        dst.truncate(source.stat().st_size)


def _interleave(group, runners):
    """Run the group's trajectories turn by turn, side by side; the observations in order."""
    record = [[] for _ in group]
    for turn in range(max(len(t) for t in group)):
        for i, trajectory in enumerate(group):
            if turn < len(trajectory):
                record[i].append(runners[i](trajectory[turn]))
    return record


def io_bytes() -> int:
    """Bytes this process and its live children (the replica set's SQL host) read and wrote."""
    total = _process_io("self")
    me = str(os.getpid())
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if stat.read_text().rsplit(")", 1)[1].split()[1] == me:  # field 4: the parent
                total += _process_io(stat.parent.name)
        except (OSError, IndexError):
            continue  # it ended meanwhile
    return total


def _process_io(pid: str) -> int:
    text = Path(f"/proc/{pid}/io").read_text()
    fields = dict(line.split(": ") for line in text.splitlines())
    return int(fields["rchar"]) + int(fields["wchar"])


def measure(name, fn, work, scratch: Path):
    folder = scratch / name
    folder.mkdir()
    start_io, start = io_bytes(), time.perf_counter()
    record, extra = fn(work, folder)
    seconds, used = time.perf_counter() - start, io_bytes() - start_io
    shutil.rmtree(folder)
    return record, {"bytes": used, "seconds": seconds, **extra}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--databases", type=int, default=6)
    parser.add_argument("--tasks", type=int, default=16, help="tasks per database")
    parser.add_argument("--rollouts", type=int, default=8, help="trajectories per task")
    parser.add_argument("--write-share", type=float, default=0.5)
    parser.add_argument("--scale", type=int, default=20, help="multiply each table's rows")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", default=None, help="where databases and replicas go")
    args = parser.parse_args(argv)
    if not Path("/proc/self/io").exists():
        print("needs /proc/self/io (Linux) to count bytes", file=sys.stderr)
        return 2

    scratch = Path(tempfile.mkdtemp(prefix="replica-bench-", dir=args.workdir))
    try:
        paths = make_databases(scratch / "db", args.databases, args.scale, args.seed)
        work = make_workload(paths, args.tasks, args.rollouts, args.write_share, args.seed)
        arms = {
            "copy": run_copy,
            "rollback": run_rollback,
            "backup": lambda w, s: run_committed(w, s, restore_backup),
            "pages": lambda w, s: run_committed(w, s, restore_pages),
        }
        records, numbers = {}, {}
        for name, fn in arms.items():
            records[name], numbers[name] = measure(name, fn, work, scratch)
    finally:
        sizes = [p.stat().st_size for p in (scratch / "db").glob("*.sqlite")]
        shutil.rmtree(scratch, ignore_errors=True)

    rollouts = sum(len(g) for _, g in work)
    writing = sum(any(not s.startswith("SELECT") for s in t) for _, g in work for t in g)
    turns = sum(len(t) for _, g in work for t in g)
    same = all(records[name] == records["copy"] for name in arms)
    print(
        f"{len(sizes)} databases of {min(sizes) / 2**20:.1f}-{max(sizes) / 2**20:.1f} MiB, "
        f"{rollouts} rollouts ({writing} writing), {turns} turns"
    )
    print(f"{'arm':<10} {'KiB / rollout':>14} {'ms / rollout':>13} {'bytes vs copy':>14}")
    base = numbers["copy"]["bytes"]
    for name, n in numbers.items():
        ratio = base / max(1, n["bytes"])
        print(
            f"{name:<10} {n['bytes'] / rollouts / 1024:>14.1f} "
            f"{1000 * n['seconds'] / rollouts:>13.2f} {ratio:>13.1f}x"
        )
    online = numbers["rollback"]["bytes"] - numbers["rollback"]["materialise_bytes"]
    print(
        f"rollback without the one-time materialisation (as BIRD-RL's Table 3 counts): "
        f"{online / rollouts / 1024:.1f} KiB / rollout, {base / max(1, online):.1f}x"
    )
    ratio = base / max(1, numbers["rollback"]["bytes"])
    verdict = "met" if ratio >= TARGET_RATIO else "missed"
    print(f"copy / rollback bytes: {ratio:.1f}x (target {TARGET_RATIO:g}x: {verdict})")
    print(f"every arm observed the same results turn by turn: {same}")
    summary = {
        "databases": len(sizes),
        "database_bytes": sizes,
        "rollouts": rollouts,
        "writing_rollouts": writing,
        "turns": turns,
        "arms": numbers,
        "copy_over_rollback_bytes": round(ratio, 2),
        "copy_over_rollback_online_bytes": round(base / max(1, online), 2),
        "same_observations": same,
        "args": vars(args),
    }
    print(json.dumps(summary))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
