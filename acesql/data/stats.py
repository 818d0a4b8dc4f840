"""Counts and a picture of a prepared dataset: its splits by complexity and by domain or database,
and the shape of its schemas (tables and columns per database).

The counts go to `metrics.json` (and MLflow); the figure shows, in two panels, how complexity
labels and domains (synthetic data) or databases (real data) spread over the splits.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence

from acesql.data.loaders import Example

# Generator levels, then BIRD's extra one; other labels follow alphabetically.
COMPLEXITY_ORDER = ("simple", "moderate", "complex", "highly complex", "challenging")
UNLABELED = "unlabeled"
MAX_BARS = 25  # most databases (or domains) shown in the second panel, largest first
COLUMN_BAND = 40  # width of the bands that count databases by their columns


def split_counts(examples: Sequence[Example]) -> dict:
    """Examples, usable examples and databases of one split, with counts per complexity/domain.

    >>> e = Example(0, "db", "q", "SELECT 1", "", complexity="simple", domain="hotel")
    >>> split_counts([e, e])
    {'n': 2, 'usable': 2, 'databases': 1, 'by_complexity': {'simple': 2}, 'by_domain': {'hotel': 2}}
    """
    counts = {
        "n": len(examples),
        "usable": sum(e.unusable is None for e in examples),
        "databases": len({e.db_id for e in examples}),
        "by_complexity": _ordered(Counter(e.complexity or UNLABELED for e in examples)),
    }
    if any(e.domain for e in examples):
        counts["by_domain"] = dict(sorted(Counter(e.domain for e in examples).items()))
    return counts


def spread(values: Sequence[float]) -> dict:
    """Min, median, 90th percentile (nearest rank) and max of `values`.

    >>> spread([3, 1, 2, 10])
    {'min': 1, 'median': 2.5, 'p90': 10, 'max': 10}
    """
    ordered = sorted(values)
    if not ordered:
        raise ValueError("no values to spread")
    p90 = ordered[math.ceil(0.9 * len(ordered)) - 1]
    return {"min": ordered[0], "median": statistics.median(ordered), "p90": p90, "max": ordered[-1]}


def schema_shape(entries: Sequence[dict]) -> dict:
    """Tables and columns per database of tables.json entries (Spider's layout, BIRD's too):
    their spread, and how many databases have 0-39, 40-79, ... columns.

    >>> entry = {"table_names_original": ["a", "b"],
    ...          "column_names_original": [[-1, "*"], [0, "id"], [1, "id"], [1, "x"]]}
    >>> schema_shape([entry])["columns"]
    {'min': 3, 'median': 3, 'p90': 3, 'max': 3}
    """
    tables = [len(e["table_names_original"]) for e in entries]
    columns = [sum(t >= 0 for t, _ in e["column_names_original"]) for e in entries]
    bands = Counter(c // COLUMN_BAND for c in columns)
    return {
        "databases": len(entries),
        "tables": spread(tables),
        "columns": spread(columns),
        "columns_histogram": {
            f"{b * COLUMN_BAND}-{(b + 1) * COLUMN_BAND - 1}": bands[b]
            for b in range(max(bands) + 1)
        },
    }


def wide_split_shape(examples: Sequence[Example], tables: Sequence[dict]) -> dict:
    """Questions, their share with an evidence hint, and the schema shape of a split's databases
    (`tables`: tables.json entries of at least those databases)."""
    used = {e.db_id for e in examples}
    with_evidence = sum(bool(e.evidence) for e in examples)
    return {
        "questions": len(examples),
        "with_evidence": with_evidence,
        "evidence_share": round(with_evidence / len(examples), 3),
        "domains": len({e.domain for e in examples}),
        **schema_shape([t for t in tables if t["db_id"] in used]),
    }


def distribution_figure(splits: Mapping[str, Sequence[Example]]):
    """A two-panel matplotlib figure: complexity per split, then domain (or database) per split.

    Built on `matplotlib.figure.Figure`, not pyplot, so it needs no display and leaves
    matplotlib's global backend alone.
    """
    from matplotlib.figure import Figure

    fig = Figure(figsize=(13, 6), layout="constrained")
    left, right = fig.subplots(1, 2, width_ratios=[1, 1.3])
    complexity = {s: Counter(e.complexity or UNLABELED for e in ex) for s, ex in splits.items()}
    labels = list(_ordered(sum(complexity.values(), Counter())))
    width = 0.8 / max(len(splits), 1)
    for i, (split, counts) in enumerate(complexity.items()):
        xs = [j + i * width for j in range(len(labels))]
        left.bar(xs, [counts[c] for c in labels], width, label=f"{split} ({len(splits[split])})")
    left.set_xticks([j + width * (len(splits) - 1) / 2 for j in range(len(labels))], labels)
    left.set_title("Questions per complexity")
    left.set_ylabel("questions")
    left.legend()

    by_domain = any(e.domain for ex in splits.values() for e in ex)
    key = (lambda e: e.domain) if by_domain else (lambda e: e.db_id)
    groups = {s: Counter(key(e) for e in ex) for s, ex in splits.items()}
    totals = sum(groups.values(), Counter())
    names = [name for name, _ in totals.most_common(MAX_BARS)]
    lefts = [0] * len(names)
    for split, counts in groups.items():
        values = [counts[name] for name in names]
        right.barh(names, values, left=lefts, label=split)
        lefts = [a + b for a, b in zip(lefts, values)]
    right.invert_yaxis()  # largest first, at the top
    right.tick_params(axis="y", labelsize=8 if len(names) > 12 else 10)
    title = "Questions per " + ("domain" if by_domain else "database")
    if len(totals) > len(names):
        title += f" (top {len(names)} of {len(totals)})"
    right.set_title(title)
    right.set_xlabel("questions")
    right.legend()
    return fig


def _ordered(counts: Counter) -> dict:
    rank = {label: i for i, label in enumerate(COMPLEXITY_ORDER)}
    keys = sorted(counts, key=lambda c: (rank.get(c, len(rank)), c == UNLABELED, c))
    return {k: counts[k] for k in keys}

