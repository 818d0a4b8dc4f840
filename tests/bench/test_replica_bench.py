"""bench/replica_bench.py on a small workload: every arm observes the same, restores are exact."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sqlite3
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "replica_bench.py"


def _load_bench():
    spec = importlib.util.spec_from_file_location("acesql_replica_bench", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bench = _load_bench()


def test_a_small_run_observes_the_same_in_every_arm(tmp_path, capsys):
    args = ["--databases", "2", "--tasks", "2", "--rollouts", "3", "--scale", "1"]
    assert bench.main([*args, "--workdir", str(tmp_path)]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["same_observations"] and summary["rollouts"] == 12
    assert summary["writing_rollouts"] > 0
    arms = summary["arms"]
    assert arms["rollback"]["made"] == 2 and arms["rollback"]["leases"] == 12 + 2
    assert 0 < arms["rollback"]["materialise_bytes"] < arms["rollback"]["bytes"]
    assert all(arms[name]["bytes"] > 0 for name in ("copy", "rollback", "backup", "pages"))
    assert not list(tmp_path.iterdir())  # the scratch folder is gone


def test_both_restores_give_back_the_source_byte_for_byte(tmp_path):
    source = tmp_path / "src.sqlite"
    conn = sqlite3.connect(source)
    conn.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT)")
    conn.executemany("INSERT INTO t VALUES (?, ?)", [(i, "v" * 50) for i in range(3000)])
    conn.commit()
    conn.close()
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    for restore in (bench.restore_pages, bench.restore_backup):
        replica = tmp_path / f"{restore.__name__}.sqlite"
        replica.write_bytes(source.read_bytes())
        conn = sqlite3.connect(replica)
        conn.execute("UPDATE t SET v = 'changed' WHERE k % 7 = 0")
        conn.execute("INSERT INTO t (v) SELECT v FROM t")  # the file grows
        conn.commit()
        conn.close()
        restore(source, replica)
        rows = sqlite3.connect(replica).execute("SELECT COUNT(*), MAX(v) FROM t").fetchone()
        assert rows == (3000, "v" * 50)
        if restore is bench.restore_pages:
            assert hashlib.sha256(replica.read_bytes()).hexdigest() == digest
