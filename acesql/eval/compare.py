"""Two evaluations side by side: `acesql eval --compare A B`.

An evaluation is a result folder (a `metrics.json`, or sub-folders each holding one, as the
`evaluate` stage writes per split) or an MLflow run id of an `evaluate` stage run (its metrics
are logged as `split/metric` and `split/level/metric`). Both become
`{split: {"metric" or "level/metric": value}}`, and the table lines them up.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from acesql.errors import DataError
from acesql.eval.metrics import COUNTS, SCORE_LABELS, level_key

LEVEL_ROWS = ("usable", "pipeline_ex", "maj_ex", "generator_ex")
RUN_ID = re.compile(r"^[0-9a-f]{32}$")


def load_evaluation(ref: str, tracking_uri: str | None = None) -> dict[str, dict[str, float]]:
    """`{split: {metric: value}}` from a result folder or an MLflow run id."""
    path = Path(ref)
    if path.exists():
        return _from_folder(path)
    if RUN_ID.match(ref):
        return _from_run(ref, tracking_uri)
    raise DataError(f"{ref!r} is neither a result folder nor an MLflow run id")


def _from_folder(path: Path) -> dict[str, dict[str, float]]:
    files = [path] if path.is_file() else [path / "metrics.json"]
    if not files[0].is_file():
        files = sorted(path.glob("*/metrics.json"))
    if not files:
        raise DataError(f"{path} holds no metrics.json (nor sub-folders with one)")
    splits = {}
    for file in files:
        try:
            summary = json.loads(file.read_text())
        except json.JSONDecodeError as exc:
            raise DataError(f"{file} is not JSON: {exc.msg}") from exc
        split = summary.get("split") or file.parent.name
        splits[split] = flat_summary(summary)
    return splits


def _from_run(run_id: str, tracking_uri: str | None) -> dict[str, dict[str, float]]:
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    try:
        metrics = MlflowClient(tracking_uri).get_run(run_id).data.metrics
    except MlflowException as exc:
        raise DataError(f"no MLflow run {run_id} at {tracking_uri}: {exc.message}") from exc
    splits: dict[str, dict[str, float]] = {}
    for key, value in metrics.items():
        split, _, rest = key.partition("/")
        if rest:
            splits.setdefault(split, {})[rest] = value
    if not splits:
        raise DataError(f"MLflow run {run_id} has no evaluation metrics (split/metric keys)")
    return splits


def flat_summary(summary: dict) -> dict[str, float]:
    """A metrics.json summary's numbers as `{metric: v, "level/metric": v, "failures/c": n}`.

    >>> flat_summary({"pipeline_ex": 0.5, "model": "m", "failures": {"timeout": 1},
    ...               "by_complexity": {"simple": {"pipeline_ex": 1.0}}})
    {'pipeline_ex': 0.5, 'failures/timeout': 1, 'simple/pipeline_ex': 1.0}
    """
    flat = {k: v for k, v in summary.items() if _number(v)}
    flat.update({f"failures/{k}": v for k, v in summary.get("failures", {}).items()})
    for level, scores in summary.get("by_complexity", {}).items():
        flat.update({f"{level}/{k}": v for k, v in scores.items() if _number(v)})
    return flat


def compare_table(a: dict, b: dict, name_a: str = "A", name_b: str = "B") -> str:
    """A plain-text table of two evaluations, per split: A, B and B - A, then per level."""
    lines = [f"A = {name_a}", f"B = {name_b}"]
    for split in sorted(set(a) | set(b)):
        left, right = a.get(split, {}), b.get(split, {})
        lines += ["", f"{split:<28}{'A':>10}{'B':>10}{'B - A':>10}"]
        for key, label in SCORE_LABELS:
            if key in left or key in right:
                lines.append(_line(label, left.get(key), right.get(key), key not in COUNTS))
        levels = {k.split("/")[0] for k in (*left, *right) if "/" in k} - {"failures"}
        levels = sorted(levels, key=level_key)
        for level in levels:
            for key in LEVEL_ROWS:
                full = f"{level}/{key}"
                if full in left or full in right:
                    label = f"  {level}: {dict(SCORE_LABELS)[key]}"
                    lines.append(_line(label, left.get(full), right.get(full), key not in COUNTS))
    return "\n".join(lines)


def _line(label: str, x, y, share: bool) -> str:
    def cell(v):
        if v is None:
            return "-"
        return f"{100 * v:.1f}%" if share else f"{v:g}"

    if x is None or y is None:
        delta = "-"
    else:
        delta = f"{100 * (y - x):+.1f}" if share else f"{y - x:+g}"
    return f"{label:<28}{cell(x):>10}{cell(y):>10}{delta:>10}"


def _number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
