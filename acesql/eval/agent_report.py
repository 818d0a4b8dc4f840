"""The agent evaluation's report: one HTML file, readable offline.

    write_agent_report("results/agent/base/report.html", metrics, rows, trajectories)

What it shows: success per category with its 95% interval (a bar chart and a table), how
trajectories ended and how many turns they took, success per bug, and a few whole
trajectories per category (each turn's action and what came back), failed ones first, so a
reader sees how the agent works and where it goes wrong.
"""

from __future__ import annotations

import html
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from acesql.eval.report import _image  # noqa: E402

TRAJECTORIES_PER_CATEGORY = 3


def write_agent_report(
    path: str | Path, metrics: dict, rows: list[dict], trajectories: list[dict]
) -> None:
    by_id = {t["task_id"]: t for t in trajectories}
    parts = [
        "<!doctype html><meta charset='utf-8'><title>Agent evaluation</title>",
        "<style>body{font-family:sans-serif;max-width:1000px;margin:2em auto}"
        "td,th{padding:2px 8px;text-align:right}td:first-child{text-align:left}"
        "pre{background:#f4f4f4;padding:6px;white-space:pre-wrap}</style>",
        f"<h1>Agent evaluation: {metrics['n']} tasks</h1>",
        f"<p>Success {_pct(metrics['success'])} (95% {_interval(metrics['success_95'])}); "
        f"submitted {_pct(metrics['submitted'])}; {metrics['mean_turns']:.2f} turns and "
        f"{metrics['mean_tokens']:.0f} tokens per task; malformed turns "
        f"{_pct(metrics['malformed_turn_share'])}. Endings: "
        f"{html.escape(str(metrics['finish']))}.</p>",
        _image(category_figure(metrics)),
        _category_table(metrics),
        _bug_table(rows),
        "<h2>Trajectories</h2>",
    ]
    by_category = defaultdict(list)
    for row in sorted(rows, key=lambda r: r["passed"]):
        by_category[row["category"]].append(row)
    for category, group in sorted(by_category.items()):
        parts.append(f"<h3>{html.escape(category)}</h3>")
        for row in group[:TRAJECTORIES_PER_CATEGORY]:
            if row["task_id"] in by_id:
                parts.append(_trajectory(row, by_id[row["task_id"]]))
    Path(path).write_text("\n".join(parts), encoding="utf-8")


def category_figure(metrics: dict):
    names = list(metrics["by_category"])
    values = [100 * metrics["by_category"][n]["success"] for n in names]
    lows = [100 * metrics["by_category"][n]["success_95"][0] for n in names]
    highs = [100 * metrics["by_category"][n]["success_95"][1] for n in names]
    fig, ax = plt.subplots(figsize=(5, 3))
    errors = [[v - lo for v, lo in zip(values, lows)], [hi - v for v, hi in zip(values, highs)]]
    ax.bar(names, values, color="#3b6fb6", yerr=errors, capsize=4)
    ax.set_ylabel("success (%)")
    ax.set_ylim(0, 100)
    ax.set_title("Success per category, 95% Wilson interval")
    fig.tight_layout()
    return fig


def _category_table(metrics: dict) -> str:
    lines = [
        "<table><tr><th>category</th><th>n</th><th>success</th><th>95%</th>"
        "<th>submitted</th><th>turns</th><th>probes</th><th>tokens</th></tr>"
    ]
    for name, m in metrics["by_category"].items():
        lines.append(
            f"<tr><td>{html.escape(name)}</td><td>{m['n']}</td><td>{_pct(m['success'])}</td>"
            f"<td>{_interval(m['success_95'])}</td><td>{_pct(m['submitted'])}</td>"
            f"<td>{m['mean_turns']:.2f}</td><td>{m['mean_probes']:.2f}</td>"
            f"<td>{m['mean_tokens']:.0f}</td></tr>"
        )
    return "\n".join(lines) + "</table>"


def _bug_table(rows: list[dict]) -> str:
    by_bug = defaultdict(list)
    for row in rows:
        by_bug[row.get("bug") or "(none)"].append(row["passed"])
    lines = ["<h2>By bug</h2><table><tr><th>bug</th><th>n</th><th>solved</th></tr>"]
    for bug, passed in sorted(by_bug.items()):
        lines.append(
            f"<tr><td>{html.escape(bug)}</td><td>{len(passed)}</td><td>{sum(passed)}</td></tr>"
        )
    return "\n".join(lines) + "</table>"


def _trajectory(row: dict, trajectory: dict) -> str:
    head = (
        f"<p><b>{html.escape(row['task_id'])}</b> ({html.escape(row.get('bug') or '')}): "
        f"{'passed' if row['passed'] else 'failed'}, {html.escape(trajectory['finish'])}; "
        f"{html.escape(trajectory['verdict'])}</p>"
    )
    turns = []
    for i, turn in enumerate(trajectory["turns"], 1):
        text = f"turn {i} [{turn['action']}]\n{turn['completion']}"
        if turn["observation"]:
            text += f"\n--- observation ---\n{turn['observation']}"
        turns.append(f"<pre>{html.escape(text)}</pre>")
    return head + "".join(turns)


def _pct(value) -> str:
    return f"{100 * value:.1f}%" if value == value else "-"


def _interval(bounds) -> str:
    low, high = bounds
    return f"[{100 * low:.1f}, {100 * high:.1f}]" if low == low else "-"
