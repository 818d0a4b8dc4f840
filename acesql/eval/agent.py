"""Evaluating the agent on debugging tasks: success per category, turns, tokens; paired
comparison of two evaluations.

    metrics = evaluate_agent(engine, tokenizer, tasks, replicas, out=Path("results/agent/base"))
    acesql debug eval --model models/base --tasks data/debug/test_ood.jsonl --out DIR
    acesql debug compare DIR_A DIR_B

One greedy trajectory per task. `out/rows.jsonl` gets one row per task as soon as its chunk
ends (a killed evaluation resumes from them), `out/trajectories.jsonl` the whole
trajectories, `out/metrics.json` the summary, `out/report.html` the report
(`acesql.eval.agent_report`). Rates carry a 95% Wilson interval; a
comparison is paired on the tasks both sides scored: B - A with a bootstrap interval and the
exact McNemar p-value (`acesql.paired`).
"""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path

from acesql.agent.episode import run_episodes
from acesql.agent.tasks import DebugAgentTask
from acesql.debug.task import DebugTask
from acesql.errors import DataError
from acesql.eval.agent_report import write_agent_report
from acesql.paired import paired_difference
from acesql.sql.replicas import Replicas


def evaluate_agent(
    engine,
    tokenizer,
    tasks: list[DebugTask],
    replicas: Replicas,
    out: Path,
    max_turns: int = 5,
    max_new_tokens: int = 256,
    chunk: int = 8,
    progress: Callable[[int], None] | None = None,
) -> dict:
    """Run (or resume) the evaluation of `tasks` into `out`; return the metrics."""
    out.mkdir(parents=True, exist_ok=True)
    rows_path, trajectories_path = out / "rows.jsonl", out / "trajectories.jsonl"
    done = {row["task_id"] for row in read_rows(out)} if rows_path.exists() else set()
    todo = [t for t in tasks if t.task_id not in done]
    if progress and done:
        progress(len(tasks) - len(todo))
    for start in range(0, len(todo), chunk):
        part = todo[start : start + chunk]
        groups = run_episodes(
            engine,
            tokenizer,
            [DebugAgentTask(t) for t in part],
            replicas,
            n=1,
            max_turns=max_turns,
            temperature=0.0,
            max_new_tokens=max_new_tokens,
            progress=progress,
        )
        with (
            trajectories_path.open("a", encoding="utf-8") as full,
            rows_path.open("a", encoding="utf-8") as short,
        ):
            for task, (trajectory,) in zip(part, groups):
                full.write(json.dumps(trajectory.to_dict(), ensure_ascii=False) + "\n")
                short.write(json.dumps(_row(task, trajectory), ensure_ascii=False) + "\n")
    wanted = {t.task_id for t in tasks}
    rows = [r for r in read_rows(out) if r["task_id"] in wanted]
    metrics = summarize(rows)
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    trajectories = [json.loads(line) for line in trajectories_path.read_text().splitlines() if line]
    write_agent_report(out / "report.html", metrics, rows, trajectories)
    return metrics


def _row(task: DebugTask, trajectory) -> dict:
    return {
        "task_id": task.task_id,
        "category": task.category,
        "bug": task.bug,
        "passed": trajectory.passed,
        "finish": trajectory.finish,
        "turns": len(trajectory.turns),
        "probes": sum(t.action.kind == "sql" for t in trajectory.turns),
        "malformed": sum(t.action.kind == "none" for t in trajectory.turns),
        "tokens": sum(len(t.completion.token_ids) for t in trajectory.turns),
        "verdict": trajectory.verdict,
    }


def read_rows(out: Path) -> list[dict]:
    """The rows of an evaluation folder (the last row of a task wins)."""
    path = Path(out) / "rows.jsonl"
    if not path.is_file():
        raise DataError(f"no agent evaluation in {out} (no rows.jsonl)")
    rows = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            rows[row["task_id"]] = row
    return list(rows.values())


def summarize(rows: list[dict]) -> dict:
    """Success (with its Wilson interval), turns and tokens, overall and per category."""

    def block(part: list[dict]) -> dict:
        n = len(part)
        passed = sum(r["passed"] for r in part)
        low, high = wilson_interval(passed, n)
        return {
            "n": n,
            "success": passed / n if n else math.nan,
            "success_95": [low, high],
            "submitted": sum(r["finish"] == "submitted" for r in part) / n if n else math.nan,
            "mean_turns": sum(r["turns"] for r in part) / n if n else math.nan,
            "mean_probes": sum(r["probes"] for r in part) / n if n else math.nan,
            "mean_tokens": sum(r["tokens"] for r in part) / n if n else math.nan,
            "malformed_turn_share": (
                sum(r["malformed"] for r in part) / max(1, sum(r["turns"] for r in part))
            ),
        }

    by_category = defaultdict(list)
    for row in rows:
        by_category[row["category"]].append(row)
    return {
        **block(rows),
        "by_category": {c: block(v) for c, v in sorted(by_category.items())},
        "finish": dict(Counter(r["finish"] for r in rows)),
    }


def compare(rows_a: list[dict], rows_b: list[dict]) -> dict:
    """B - A on the tasks both scored, overall and per category (paired)."""
    a = {r["task_id"]: r for r in rows_a}
    b = {r["task_id"]: r for r in rows_b}
    common = sorted(set(a) & set(b))
    out = {}
    groups = {"all": common}
    for task_id in common:
        groups.setdefault(a[task_id]["category"], []).append(task_id)
    for name, ids in groups.items():
        r = paired_difference(
            [float(a[i]["passed"]) for i in ids], [float(b[i]["passed"]) for i in ids]
        )
        out[name] = {
            "n": r.n,
            "a": r.mean_a,
            "b": r.mean_b,
            "b_minus_a": r.diff,
            "interval_95": [r.low, r.high],
            "a_only": r.only_a,
            "b_only": r.only_b,
            "mcnemar_p": r.p_value,
        }
    return out


def is_agent_evaluation(path) -> bool:
    """Whether `path` is a folder this module evaluated into (finished or not)."""
    return (Path(path) / "trajectories.jsonl").is_file()


def compare_table(paired: dict, name_a: str, name_b: str) -> str:
    """`compare`'s result as text: one line per group of tasks (all, then each category).

    >>> print(compare_table({"all": {"n": 4, "a": 0.25, "b": 0.5, "b_minus_a": 0.25,
    ...     "interval_95": [0.0, 0.75], "a_only": 0, "b_only": 1, "mcnemar_p": 1.0}}, "x", "y"))
    A: x
    B: y
    tasks              n       A       B   B - A [95%]            A only / B only   McNemar p
    all                4   25.0%   50.0%   +25.0 [+0.0, +75.0]    0 / 1             1
    """
    lines = [
        f"A: {name_a}",
        f"B: {name_b}",
        f"{'tasks':<16}{'n':>4}{'A':>8}{'B':>8}   {'B - A [95%]':<23}"
        f"{'A only / B only':<18}McNemar p",
    ]
    for group, r in paired.items():
        low, high = r["interval_95"]
        diff = f"{100 * r['b_minus_a']:+.1f} [{100 * low:+.1f}, {100 * high:+.1f}]"
        lines.append(
            f"{group:<16}{r['n']:>4}{100 * r['a']:>7.1f}%{100 * r['b']:>7.1f}%   {diff:<23}"
            f"{str(r['a_only']) + ' / ' + str(r['b_only']):<18}{r['mcnemar_p']:.2g}"
        )
    return "\n".join(lines)


def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The 95% Wilson score interval of a rate.

    >>> [round(x, 3) for x in wilson_interval(5, 10)]
    [0.237, 0.763]
    """
    if n == 0:
        return (math.nan, math.nan)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))
