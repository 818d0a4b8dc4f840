"""Score a file of predicted SQL against a dataset's gold SQL by execution.

Predictions are JSON lines `{"index": i, "sql": "..."}` (index = position in the questions
file) or BIRD's official `predict_dev.json` mapping `{"i": "SQL\\t----- bird -----\\tdb_id"}`.
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from pathlib import Path

from acesql.data.loaders import Dataset
from acesql.errors import DataError
from acesql.sql.batch_executor import BatchExecutor

BIRD_SEPARATOR = "\t----- bird -----\t"


class Predictions(dict):
    """`{index: sql}`; `db_ids` holds the database a BIRD-format file names for each index."""

    def __init__(self, *args, db_ids: dict[int, str] | None = None):
        super().__init__(*args)
        self.db_ids = db_ids or {}


def load_predictions(path: str | Path) -> Predictions:
    """Read predictions into `{index: sql}`, from JSON lines or a BIRD mapping.

    Strict about types: an index is an integer (not 0.9, not true), SQL is a string (not
    null), and a BIRD value is `SQL<separator>db_id`; anything else is a DataError naming
    the line or key."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise DataError(f"predictions file not found: {path}") from exc
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not UTF-8 text (byte {exc.start}: {exc.reason})") from exc
    if text.lstrip().startswith("{"):
        try:
            mapping = json.loads(text, object_pairs_hook=_pairs)
        except json.JSONDecodeError:
            mapping = None  # JSON lines also start with "{"
        if isinstance(mapping, _Pairs) and "sql" not in mapping:
            return _from_bird_mapping(mapping, path)
    predictions = Predictions()
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        expected = f'{path}:{lineno}: expected {{"index": int, "sql": str}}, got {line[:80]!r}'
        try:
            record = json.loads(line)
            index, sql = record["index"], record["sql"]
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise DataError(f"{expected} ({exc})") from exc
        if type(index) is not int or not isinstance(sql, str):
            raise DataError(expected)
        if index in predictions:
            raise DataError(f"{path}:{lineno}: index {index} predicted twice")
        predictions[index] = sql
    return predictions


def write_bird_predictions(path: str | Path, rows: list[dict]) -> None:
    """Predicted SQL in BIRD's official `predict_dev.json` format, keyed by question index.

    `rows` need `index`, `db_id` and `pred_sql` (None or "" when nothing was predicted).
    `load_predictions` reads the file back.
    """
    mapping = {
        str(r["index"]): f"{r.get('pred_sql') or ''}{BIRD_SEPARATOR}{r['db_id']}" for r in rows
    }
    Path(path).write_text(json.dumps(mapping, indent=4, ensure_ascii=False) + "\n")


class _Pairs(list):
    """A JSON object's (key, value) pairs in file order, duplicates kept."""

    def __contains__(self, key) -> bool:
        return any(k == key for k, _ in self)


def _pairs(pairs: list) -> _Pairs:
    return _Pairs(pairs)


def _from_bird_mapping(mapping: _Pairs, path: Path) -> Predictions:
    predictions = Predictions()
    for key, value in mapping:
        if not re.fullmatch(r"\d+", key.strip(), re.ASCII):
            raise DataError(f"{path}: key {key!r} is not a question index")
        if int(key) in predictions:
            raise DataError(f"{path}: question {int(key)} is predicted twice (key {key!r})")
        if not isinstance(value, str) or value.count(BIRD_SEPARATOR) != 1:
            raise DataError(
                f"{path}: the value of {key!r} must be a string 'SQL{BIRD_SEPARATOR}db_id' "
                f"(BIRD's format), got {value!r:.80}"
            )
        sql, db_id = value.split(BIRD_SEPARATOR)
        predictions[int(key)] = sql
        predictions.db_ids[int(key)] = db_id.strip()
    return predictions


def evaluate_predictions(
    dataset: Dataset,
    predictions: dict[int, str],
    mode: str,
    executor: BatchExecutor,
) -> tuple[dict, list[dict]]:
    """Execution accuracy of `predictions` on `dataset`: (summary, one row per example)."""
    unknown = sorted(set(predictions) - {e.index for e in dataset.examples})
    if unknown:
        raise DataError(
            f"{len(unknown)} predictions name no question of {dataset.name} (first: {unknown[0]})"
        )
    named = getattr(predictions, "db_ids", {})
    wrong = [e for e in dataset.examples if named.get(e.index, e.db_id) != e.db_id]
    if wrong:
        first = wrong[0]
        raise DataError(
            f"{len(wrong)} predictions name another database than their question's (first: "
            f"question {first.index} is on {first.db_id!r}, its prediction names "
            f"{named[first.index]!r})"
        )
    scored = [e for e in dataset.examples if e.unusable is None]
    verdicts = executor.match_many(
        [(e.db_path, predictions.get(e.index, ""), e.sql) for e in scored], mode
    )
    by_index = dict(zip((e.index for e in scored), verdicts))
    rows = []
    for example in dataset.examples:
        row = {
            "index": example.index,
            "db_id": example.db_id,
            "question": example.question,
            "gold": example.sql,
            "pred": predictions.get(example.index),
            "complexity": example.complexity,
        }
        verdict = by_index.get(example.index)
        if verdict is None:
            row.update(match=False, usable=False, reason=example.unusable)
        else:
            reason = verdict.match.reason
            if example.index not in predictions:
                reason = "no_prediction"
            row.update(
                match=verdict.match.match,
                usable=verdict.match.usable,
                reason=reason,
                gold_empty=verdict.match.gold_empty,
                pred_error=verdict.pred.error,
                timed_out=verdict.pred.timed_out,
                elapsed_s=round(verdict.pred.elapsed_s, 6),
            )
        rows.append(row)
    return summarize(rows, mode), rows


def summarize(rows: list[dict], mode: str) -> dict:
    usable = [r for r in rows if r["usable"]]
    correct = sum(r["match"] for r in usable)
    summary = {
        "n": len(rows),
        "usable": len(usable),
        "correct": correct,
        "ex": round(correct / len(usable), 6) if usable else 0.0,
        "mode": mode,
        "unusable": dict(Counter(r["reason"] for r in rows if not r["usable"])),
        "errors": dict(Counter(r["reason"] for r in usable if not r["match"])),
        "gold_empty": sum(bool(r.get("gold_empty")) for r in usable),
    }
    levels = defaultdict(list)
    for r in usable:
        if r["complexity"]:
            levels[r["complexity"]].append(r["match"])
    if levels:
        summary["by_complexity"] = {
            k: {"usable": len(v), "correct": sum(v), "ex": round(sum(v) / len(v), 6)}
            for k, v in sorted(levels.items())
        }
    return summary
