"""The evaluation report: one HTML file with its plots embedded, readable offline.

    write_report("results/dev/report.html", summary, rows)

What it shows: the headline scores with their counts; the three schemas the generator can
be shown (the whole one, the retriever's pruned one, the gold columns') and the shipped
answer, each paired against the whole schema (the paper's Figure 1 (a)); EX by complexity
(pipeline, full schema, maj@n, generator ability); pipeline EX against retriever recall;
output tokens per query; the failure categories with a few examples each, so a reader sees
what went wrong.
"""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from acesql.eval.metrics import CORRECT_OF, COUNTS, FAILURE_CATEGORIES, SCORE_LABELS  # noqa: E402
from acesql.paired import paired_difference  # noqa: E402

EXAMPLES_PER_CATEGORY = 3
COLORS = {"pipeline": "#3b6fb6", "maj": "#8a5cc2", "r3": "#2f9e7a", "generator": "#e08a2c"}
COLORS["full"] = "#9a9a9a"
# the answers of one question on each schema, against the whole schema's (Figure 1 (a))
SCHEMA_ROWS = (
    ("full_match", "full schema, one call"),
    ("pipeline_match", "pipeline (retriever's columns)"),
    ("generator_match", "gold columns (generator ability)"),
    ("answer_match", "shipped answer"),
)
FAILURE_HELP = {
    "no_sql": "The generator's answer holds no SQL block.",
    "syntax_error": "SQLite could not parse the SQL.",
    "schema_error": "The SQL names a table or column the database does not have.",
    "other_error": "The SQL was refused or failed for another reason.",
    "timeout": "The SQL ran past the execution timeout.",
    "wrong_columns": "It ran, but returned other rows, using other columns than the gold SQL.",
    "wrong_result": "It ran with the gold SQL's columns, but returned other rows.",
}
RECALL_BUCKETS = (("0", 0.0, 0.0), ("(0, .5)", 0.0, 0.5), ("[.5, 1)", 0.5, 1.0), ("1", 1.0, 1.0))


def write_report(path: str | Path, summary: dict, rows: list[dict]) -> None:
    """Write the report for one evaluation (`summary` from `acesql.eval.metrics`)."""
    usable = [r for r in rows if r.get("usable")]
    sections = [
        _header(summary),
        _cards(summary),
        _schemas_table(usable),
        "<h2>Execution accuracy by complexity</h2>",
        _image(ex_by_complexity_figure(summary)),
        _complexity_table(summary),
        "<h2>Retriever recall and pipeline EX</h2>",
        "<p>Questions bucketed by the share of the gold SQL's columns the retriever chose; "
        "bars: pipeline EX of each bucket, labels: correct / questions.</p>",
        _image(recall_figure(usable)),
        "<h2>Output tokens per query</h2>",
        _image(tokens_figure(usable)),
        "<h2>Failures</h2>",
        _failure_table(summary, usable),
    ]
    page = _PAGE.format(title=html.escape(_title(summary)), body="\n".join(sections))
    Path(path).write_text(page)


# ------------------------------------------------------------------------------ figures
def _groups(summary: dict) -> dict:
    """Each complexity level and overall; just overall when the data has no levels."""
    levels = summary.get("by_complexity", {})
    if set(levels) <= {"unlabeled"}:
        return {"overall": summary}
    return {**levels, "overall": summary}


def ex_by_complexity_figure(summary: dict):
    """Grouped bars: pipeline EX, maj@n and r3 ranking (when run) and generator EX per level
    and overall."""
    groups = _groups(summary)
    series = [("pipeline", "pipeline_ex", "pipeline_correct", "pipeline EX")]
    if "full_schema_ex" in summary:
        series.append(("full", "full_schema_ex", "full_schema_correct", "full schema"))
    if "maj_ex" in summary:
        series.append(("maj", "maj_ex", "maj_correct", f"maj@{summary['candidates']}"))
    if "r3_ex" in summary:
        series.append(("r3", "r3_ex", "r3_correct", f"r3 ranking of {summary['candidates']}"))
    series.append(("generator", "generator_ex", "generator_correct", "generator (gold columns)"))
    width = 0.8 / len(series)
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(groups) + 2), 3.8))
    for s, (color, key, count, label) in enumerate(series):
        xs = [i + (s - (len(series) - 1) / 2) * width for i in range(len(groups))]
        values = [100 * g.get(key, 0.0) for g in groups.values()]
        bars = ax.bar(xs, values, width, color=COLORS[color], label=label)
        texts = [f"{g.get(count, 0)}/{g.get('usable', 0)}" for g in groups.values()]
        ax.bar_label(bars, texts, fontsize=7, padding=2)
    ax.set_xticks(range(len(groups)), list(groups))
    ax.set_ylabel("EX (%)")
    ax.set_ylim(0, 110)
    ax.legend(fontsize=8, loc="upper right", ncols=len(series))
    ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    return fig


def recall_figure(rows: list[dict]):
    """Pipeline EX per bucket of retriever recall."""
    scored = [r for r in rows if r.get("recall") is not None]
    labels, values, texts = [], [], []
    for label, low, high in RECALL_BUCKETS:
        if low == high:
            members = [r for r in scored if r["recall"] == low]
        else:
            members = [r for r in scored if low <= r["recall"] < high and 0 < r["recall"] < 1]
        correct = sum(bool(r["pipeline_match"]) for r in members)
        labels.append(label)
        values.append(100 * correct / len(members) if members else 0.0)
        texts.append(f"{correct}/{len(members)}")
    fig, ax = plt.subplots(figsize=(6, 3.4))
    bars = ax.bar(labels, values, color=COLORS["pipeline"])
    ax.bar_label(bars, texts, fontsize=8, padding=2)
    ax.set_xlabel("retriever recall of the gold columns")
    ax.set_ylabel("pipeline EX (%)")
    ax.set_ylim(0, 110)
    ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    return fig


def tokens_figure(rows: list[dict]):
    """Histograms of each role's output tokens per query, side by side."""
    retriever = [r["retriever_tokens"] for r in rows]
    generator = [r["generator_tokens"] for r in rows]
    fig, ax = plt.subplots(figsize=(6, 3.4))
    if rows:
        ax.hist(
            [retriever, generator],
            bins=20,
            color=[COLORS["pipeline"], COLORS["generator"]],
            label=["retriever", "generator"],
        )
        ax.legend(fontsize=8)
    ax.set_xlabel("output tokens per query, each role (greedy pipeline)")
    ax.set_ylabel("questions")
    ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    return fig


def _image(fig) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110)
    plt.close(fig)
    data = base64.b64encode(buffer.getvalue()).decode()
    return f'<img alt="plot" src="data:image/png;base64,{data}">'


# --------------------------------------------------------------------------------- html
def _title(summary: dict) -> str:
    return f"acesql evaluation: {summary.get('split', '')} of {summary.get('dataset', '')}"


def _header(summary: dict) -> str:
    facts = [
        ("model", summary.get("model")),
        ("dataset", summary.get("dataset")),
        ("split", summary.get("split")),
        ("match mode", summary.get("mode")),
        ("questions", f"{summary.get('n', 0)} ({summary.get('unusable', 0)} unusable)"),
        ("time", f"{summary.get('seconds', 0)} s"),
    ]
    items = "".join(
        f"<dt>{k}</dt><dd>{html.escape(str(v))}</dd>" for k, v in facts if v is not None
    )
    return f"<h1>{html.escape(_title(summary))}</h1><dl class='facts'>{items}</dl>"


def _cards(summary: dict) -> str:
    n = summary.get("usable", 0)
    cards = [
        ("pipeline EX", _pct(summary.get("pipeline_ex")), f"{summary.get('pipeline_correct')}/{n}")
    ]
    if "full_schema_ex" in summary:
        cards.append(
            (
                "full-schema EX",
                _pct(summary["full_schema_ex"]),
                f"{summary['full_schema_correct']}/{n}; one call, every column",
            )
        )
    if "answer_ex" in summary:
        cards.insert(
            0,
            (
                "answer EX (shipped)",
                _pct(summary["answer_ex"]),
                f"{summary['answer_correct']}/{n}; policy {summary.get('answer', 'pipeline')}",
            ),
        )
    if "maj_ex" in summary:
        cards.append(
            (
                f"maj@{summary['candidates']} EX",
                _pct(summary["maj_ex"]),
                f"{summary['maj_correct']}/{n}",
            )
        )
    if "r3_ex" in summary:
        recall = f"candidate recall {_pct(summary.get('oracle_ex'))}"
        cards.append(
            ("r3 ranking EX", _pct(summary["r3_ex"]), f"{summary['r3_correct']}/{n}; {recall}")
        )
    cards += [
        (
            "generator ability",
            _pct(summary.get("generator_ex")),
            f"{summary.get('generator_correct')}/{n}",
        ),
        (
            "retriever recall",
            _pct(summary.get("retriever_recall")),
            f"covers gold {_pct(summary.get('covers_gold'))}",
        ),
        (
            "non-gold ratio",
            _pct(summary.get("non_gold_ratio") if summary.get("non_gold_of") else None),
            f"of {summary.get('non_gold_of', 0)} correct with resolved columns",
        ),
        ("tokens / query", f"{summary.get('tokens_per_query', 0)}", "retriever + generator"),
    ]
    return (
        "<div class='cards'>"
        + "".join(
            f"<div class='card'><div class='label'>{html.escape(label)}</div>"
            f"<div class='value'>{value}</div><div class='sub'>{html.escape(sub)}</div></div>"
            for label, value, sub in cards
        )
        + "</div>"
    )


def _schemas_table(rows: list[dict]) -> str:
    """The paper's Figure 1 (a) on this evaluation: EX on each schema and the shipped answer,
    each paired against the whole schema on the same questions."""
    rows = [r for r in rows if r.get("full_match") is not None]
    if not rows:
        return ""
    base = [bool(r["full_match"]) for r in rows]
    body = ""
    for field, label in SCHEMA_ROWS:
        got = [bool(r.get(field)) for r in rows]
        paired = paired_difference(base, got)
        cells = [f"{_pct(paired.mean_b)} <span class='n'>({sum(got)})</span>"]
        if field == "full_match":
            cells += ["", "", ""]
        else:
            cells += [
                f"{100 * paired.diff:+.1f}",
                f"[{100 * paired.low:+.1f}, {100 * paired.high:+.1f}]",
                f"{paired.only_a} / {paired.only_b}, p {paired.p_value:.2g}",
            ]
        body += f"<tr><th>{html.escape(label)}</th>" + "".join(f"<td>{c}</td>" for c in cells)
        body += "</tr>"
    policy = next((r["answer_from"] for r in rows if r.get("answer_from")), None)
    shipped = sum(r.get("answer_from") == "full_schema" for r in rows)
    note = (
        f"<p>{len(rows)} questions. The shipped answer came from the full schema on {shipped} "
        "of them.</p>"
        if policy
        else f"<p>{len(rows)} questions.</p>"
    )
    return (
        "<h2>Which schema the generator sees</h2>"
        "<p>The same generator prompt with every column, with the retriever's columns and "
        "with the gold SQL's columns; differences in points against the full schema, paired "
        "on the same questions (95% bootstrap interval; questions only the full schema / "
        "only the other gets right, exact McNemar p).</p>"
        "<table><tr><th>generator shown</th><th>EX</th><th>- full schema</th>"
        f"<th>95% interval</th><th>one side alone</th></tr>{body}</table>{note}"
    )


def _complexity_table(summary: dict) -> str:
    groups = _groups(summary)
    columns = [(k, label) for k, label in SCORE_LABELS if k in summary]
    head = "".join(f"<th>{_label(k, label, summary)}</th>" for k, label in columns)
    body = ""
    for name, g in groups.items():
        cells = []
        for key, _ in columns:
            value = g.get(key, 0)
            if key in COUNTS:
                cells.append(f"<td>{value}</td>")
            elif key == "non_gold_ratio" and not g.get("non_gold_of"):
                cells.append("<td>n/a</td>")
            elif key in CORRECT_OF:
                count = g.get(CORRECT_OF[key], 0)
                cells.append(f"<td>{_pct(value)} <span class='n'>({count})</span></td>")
            else:
                cells.append(f"<td>{_pct(value)}</td>")
        body += f"<tr><th>{html.escape(name)}</th>{''.join(cells)}</tr>"
    return f"<table><tr><th>level</th>{head}</tr>{body}</table>"


def _label(key: str, label: str, summary: dict) -> str:
    return f"maj@{summary['candidates']}" if key == "maj_ex" else label


def _failure_table(summary: dict, rows: list[dict]) -> str:
    counts = summary.get("failures", {})
    total = sum(counts.values())
    if not total:
        return "<p>No failures.</p>"
    parts = [
        f"<p>{total} of {summary.get('usable', 0)} usable questions failed in the pipeline; "
        "by category, most common first, with up to "
        f"{EXAMPLES_PER_CATEGORY} examples each.</p>",
        "<table class='failures'><tr><th>category</th><th>count</th><th>share</th>"
        "<th>what it means</th></tr>",
    ]
    ordered = sorted(counts, key=lambda c: (-counts[c], FAILURE_CATEGORIES.index(c)))
    for category in ordered:
        parts.append(
            f"<tr><th>{category}</th><td>{counts[category]}</td>"
            f"<td>{_pct(counts[category] / total)}</td><td>{FAILURE_HELP[category]}</td></tr>"
        )
    parts.append("</table>")
    for category in ordered:
        examples = [r for r in rows if r.get("category") == category][:EXAMPLES_PER_CATEGORY]
        parts.append(f"<h3>{category}</h3>")
        parts.extend(_example(r) for r in examples)
    return "\n".join(parts)


def _example(row: dict) -> str:
    missing = sorted(set(row.get("gold_columns") or []) - set(row.get("retrieved_columns") or []))
    # SQLite's message when there is one; else the match's reason code, said in words
    detail = row.get("pred_error") or str(row.get("pipeline_reason", "")).replace("_", " ")
    lines = [
        ("question", html.escape(row["question"])),
        ("database", html.escape(str(row["db_id"]))),
        ("gold SQL", f"<code>{html.escape(row['gold_sql'])}</code>"),
        ("predicted", f"<code>{html.escape(row.get('pred_sql') or '(no SQL)')}</code>"),
        ("outcome", html.escape(str(detail))),
    ]
    if missing:
        lines.append(("gold columns not retrieved", html.escape(", ".join(missing))))
    items = "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in lines)
    return f"<dl class='example'>{items}</dl>"


def _pct(value) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font: 14px/1.45 system-ui, sans-serif; color: #222; max-width: 1100px;
       margin: 2em auto; padding: 0 1.5em; }}
h1 {{ font-size: 1.5em; margin-bottom: .3em; }}
h2 {{ font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ddd; padding-bottom: .2em; }}
h3 {{ font-size: 1em; margin: 1.2em 0 .4em; }}
dl.facts {{ display: grid; grid-template-columns: max-content 1fr; gap: .1em 1em;
            color: #555; margin: 0; }}
dl.facts dt {{ font-weight: 600; }}
dl.facts dd {{ margin: 0; word-break: break-all; }}
.cards {{ display: flex; flex-wrap: wrap; gap: .8em; margin: 1.5em 0; }}
.card {{ border: 1px solid #ddd; border-radius: 6px; padding: .6em 1em; min-width: 9em; }}
.card .label {{ color: #666; font-size: .85em; }}
.card .value {{ font-size: 1.6em; font-weight: 600; }}
.card .sub {{ color: #888; font-size: .8em; }}
table {{ border-collapse: collapse; margin: 1em 0; }}
th, td {{ border: 1px solid #ddd; padding: .3em .6em; text-align: right; }}
th {{ background: #f6f6f6; }}
tr th:first-child {{ text-align: left; }}
table.failures tr > :last-child {{ text-align: left; }}
span.n {{ color: #888; font-size: .85em; }}
img {{ max-width: 100%; }}
dl.example {{ display: grid; grid-template-columns: 12em 1fr; gap: .15em 1em;
              border-left: 3px solid #ddd; padding: .3em .8em; margin: .6em 0; }}
dl.example dt {{ color: #666; }}
dl.example dd {{ margin: 0; }}
code {{ font: 12.5px ui-monospace, monospace; white-space: pre-wrap; word-break: break-word; }}
</style></head>
<body>
{body}
</body></html>
"""
