"""Two evaluations side by side: `acesql eval --compare A B`.

An evaluation is a result folder (a `metrics.json`, or sub-folders each holding one, as the
`evaluate` stage writes per split), an MLflow run id of an `evaluate` stage run (its metrics
are logged as `split/metric` and `split/level/metric`), or the id of a pipeline's run (its
evaluate runs, one per split). The table says when the two sides differ in splits or in the
number of questions scored. Both become
`{split: {"metric" or "level/metric": value}}`, and the table lines them up.

Where both sides have their per-question rows (`rows.jsonl` beside `metrics.json`, or the
run's `rows.jsonl` artifact), `paired_table` adds what the aggregate table cannot say: on
the questions both scored, B - A with a 95% bootstrap interval and the exact McNemar p-value
(`acesql.paired`). A folder whose evaluation is still running, or was killed, is
read from its finished chunks (`acesql.eval.runner.read_unfinished`), marked as unfinished.

`answers_table` pairs one answer of A with another of B (`--answer-a full_schema --answer-b
full_else_pipeline`: the base model asked with every column against what a trained model
ships under a policy), each read from the rows: the pipeline's, the full schema's, the gold
columns', the shipped one, or any `selection.answer` policy applied to the row.
"""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path

from acesql.data.loaders import parse_jsonl
from acesql.errors import DataError
from acesql.eval.metrics import COUNTS, SCORE_LABELS, level_key, summarize
from acesql.eval.runner import SETTINGS_FILE, read_unfinished
from acesql.paired import paired_difference
from acesql.selection.answer import POLICIES, answer_fields
from acesql.selection.fields import present_names

LEVEL_ROWS = ("usable", "answer_ex", "pipeline_ex", "full_schema_ex", "maj_ex", "generator_ex")
RUN_ID = re.compile(r"^[0-9a-f]{32}$")
# row field -> label, of the per-question scores compared pair by pair
PAIRED_SCORES = (
    ("answer_match", "answer EX (shipped)"),
    ("pipeline_match", "pipeline EX"),
    ("full_match", "full-schema EX"),
    ("maj_match", "maj@n EX"),
    ("point_match", "pointwise best-of-n EX"),
    ("r3_match", "r3 ranking EX"),
    ("r3rs_match", "r3 + resampling EX"),
    ("prm_match", "PRM best-of-n EX"),
    ("prm_vote_match", "PRM-weighted vote EX"),
    ("oracle_match", "candidate recall"),
    ("generator_match", "generator EX"),
    ("recall", "retriever recall"),
    ("covers_gold", "retriever covers gold"),
    ("retriever_fallback", "retriever vote empty"),
)


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
        found = _rows_without_metrics(path)
        if found:
            split, rows = found
            return {split: flat_summary(summarize(rows))}
        raise DataError(f"{path} holds no metrics.json (nor sub-folders with one)")
    splits = {}
    for file in files:
        summary = read_summary(file)
        split = summary.get("split") or file.parent.name
        splits[split] = flat_summary(summary)
    return splits


def read_summary(file: Path) -> dict:
    """A metrics.json summary, or DataError naming the file and what is wrong with it."""
    try:
        summary = json.loads(file.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise DataError(f"{file} is not UTF-8 text (byte {exc.start}): not a metrics.json") from exc
    except json.JSONDecodeError as exc:
        raise DataError(f"{file} is not JSON: {exc.msg}") from exc
    if not isinstance(summary, dict):
        raise DataError(
            f"{file} holds a JSON {type(summary).__name__}, not the object of an evaluation's "
            "metrics"
        )
    return summary


def _from_run(run_id: str, tracking_uri: str | None) -> dict[str, dict[str, float]]:
    client, run = _get_run(run_id, tracking_uri)
    if run.data.tags.get("stage") == "pipeline":
        return _from_pipeline(client, run)
    splits = _split_metrics(run.data.metrics)
    if not splits:
        raise DataError(f"MLflow run {run_id} has no evaluation metrics (split/metric keys)")
    return splits


def _get_run(run_id: str, tracking_uri: str | None):
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    # reading a run never creates a store: MLflow would make an empty sqlite file here
    local = (tracking_uri or "").removeprefix("sqlite:///")
    if tracking_uri and tracking_uri.startswith("sqlite:///") and not Path(local).is_file():
        raise DataError(
            f"no MLflow store at {tracking_uri} to look run {run_id} up in: run this where the "
            "store is, or pass --tracking-uri"
        )
    client = MlflowClient(tracking_uri)
    try:
        return client, client.get_run(run_id)
    except MlflowException as exc:
        raise DataError(f"no MLflow run {run_id} at {tracking_uri}: {exc.message}") from exc


def _split_metrics(metrics: dict[str, float]) -> dict[str, dict[str, float]]:
    splits: dict[str, dict[str, float]] = {}
    for key, value in metrics.items():
        split, _, rest = key.partition("/")
        if rest:
            splits.setdefault(split, {})[rest] = value
    return splits


def _evaluate_children(client, run) -> list:
    """The evaluate stage runs under pipeline run `run`, oldest first."""
    return client.search_runs(
        [run.info.experiment_id],
        filter_string=f"tags.`mlflow.parentRunId` = '{run.info.run_id}' "
        "and tags.stage = 'evaluate'",
        order_by=["attributes.start_time ASC"],
    )


def _from_pipeline(client, run) -> dict[str, dict[str, float]]:
    """A pipeline run's evaluation: its evaluate stage runs' metrics, per split; a split DVC
    skipped in that pipeline (its results were cached) from the numbers the pipeline's run
    carries of it (`evaluate.<split>.<metric>`, the headline ones only)."""
    splits: dict[str, dict[str, float]] = {}
    for child in _evaluate_children(client, run):
        for split, metrics in _split_metrics(child.data.metrics).items():
            splits[split] = metrics  # a later run of the split (a retry) replaces an earlier
    for key, value in run.data.metrics.items():
        stage, _, rest = key.partition(".")
        split, _, metric = rest.rpartition(".")
        if stage == "evaluate" and split and split not in splits:
            splits.setdefault(f"{split}", {})[metric] = value
    if not splits:
        raise DataError(
            f"pipeline run {run.info.run_id} evaluated nothing: its pipeline ran no evaluate "
            "stage (compare the runs of one that did)"
        )
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
    lines += [f"note: {note}" for note in compare_notes(a, b)]
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


def load_rows(ref: str, tracking_uri: str | None = None) -> dict[str, list[dict]]:
    """`{split: rows}` of an evaluation, where its per-question rows are kept; else {}. A
    folder holding a rows.jsonl and no metrics.json is one split named `rows`. Fields that
    rows were written under before a rename come back under their present names."""
    splits = _stored_rows(ref, tracking_uri)
    return {split: [present_names(row) for row in rows] for split, rows in splits.items()}


def _stored_rows(ref: str, tracking_uri: str | None) -> dict[str, list[dict]]:
    path = Path(ref)
    if path.exists():
        files = [path] if path.is_file() else [path / "metrics.json"]
        if not files[0].is_file():
            files = sorted(path.glob("*/metrics.json"))
        if not files:
            found = _rows_without_metrics(path)
            return dict([found]) if found else {}
        out = {}
        for file in files:
            rows_file = file.parent / "rows.jsonl"
            if rows_file.is_file():
                split = read_summary(file).get("split") or file.parent.name
                out[split] = _read_rows(rows_file)
        return out
    if RUN_ID.match(ref):
        client, run = _get_run(ref, tracking_uri)
        if run.data.tags.get("stage") == "pipeline":
            rows = {}
            for child in _evaluate_children(client, run):
                rows.update(_rows_from_run(child.info.run_id, tracking_uri))
            return rows
        return _rows_from_run(ref, tracking_uri)
    raise DataError(f"{ref!r} is neither a result folder nor an MLflow run id")


def compare_notes(a: dict, b: dict) -> list[str]:
    """What makes two evaluations not like for like: a split on one side only, a split
    scored on a different number of questions, or another retriever vote.

    >>> compare_notes({"dev": {"usable": 300}, "test_ood": {"usable": 6}},
    ...               {"test_ood": {"usable": 200}})
    ['dev: only A has it', 'test_ood: A scored 6 questions, B 200: the aggregate rows compare \
different question sets (the paired rows use the questions both scored)']
    >>> compare_notes({"dev": {"retriever_samples": 1}},
    ...               {"dev": {"retriever_samples": 8, "vote_threshold": 0.25}})
    ['dev: the retriever voted differently (A: greedy, B: 8 samples, threshold 0.25)']
    >>> compare_notes({"dev": {}}, {"dev": {"unclosed_list": "salvage"}})
    ['dev: the retriever voted differently (A: greedy, B: greedy, unclosed lists salvaged)']
    """
    notes = []
    for split in sorted(set(a) ^ set(b)):
        notes.append(f"{split}: only {'A' if split in a else 'B'} has it")
    for split in sorted(set(a) & set(b)):
        size_a, size_b = (side[split].get("usable", side[split].get("n")) for side in (a, b))
        if size_a is not None and size_b is not None and size_a != size_b:
            notes.append(
                f"{split}: A scored {size_a:g} questions, B {size_b:g}: the aggregate rows "
                "compare different question sets (the paired rows use the questions both scored)"
            )
        votes = [_vote(side[split]) for side in (a, b)]
        if votes[0] != votes[1]:
            notes.append(f"{split}: the retriever voted differently (A: {votes[0]}, B: {votes[1]})")
    return notes


def _vote(scores: dict) -> str:
    """How the retriever's columns were chosen (older result folders did not say: greedy)."""
    n = int(scores.get("retriever_samples", 1))
    vote = "greedy" if n == 1 else f"{n} samples, threshold {scores.get('vote_threshold', 0.5):g}"
    if scores.get("unclosed_list") == "salvage":
        vote += ", unclosed lists salvaged"
    return vote


def paired_table(a: dict[str, list[dict]], b: dict[str, list[dict]]) -> str:
    """Per split, B - A on the questions both scored: interval, discordant counts, p-value."""
    lines = []
    for split in sorted(set(a) & set(b)):
        left, right = _by_question(a[split]), _by_question(b[split])
        common = sorted(set(left) & set(right), key=str)
        lines += [
            "",
            f"{split}: paired, on the {len(common)} questions both scored",
            f"{'':<24}{'A':>8}{'B':>8}{'B - A':>8}{'95% interval':>18}"
            f"{'A only':>8}{'B only':>8}{'McNemar p':>11}",
        ]
        for key, label in PAIRED_SCORES:
            pairs = [
                (left[q][key], right[q][key])
                for q in common
                if left[q].get(key) is not None and right[q].get(key) is not None
            ]
            if not pairs:
                continue
            r = paired_difference([float(x) for x, _ in pairs], [float(y) for _, y in pairs])
            lines.append(
                f"{label:<24}{_paired_cells(r)}" + (f"  (n={r.n})" if r.n != len(common) else "")
            )
    return "\n".join(lines)


def _paired_cells(r) -> str:
    """A, B, B - A, the interval, the discordant counts and p of one paired difference."""
    interval = f"[{100 * r.low:+.1f}, {100 * r.high:+.1f}]"
    counts = (
        f"{r.only_a:>8}{r.only_b:>8}{r.p_value:>11.3g}"
        if r.p_value is not None
        else f"{'-':>8}{'-':>8}{'-':>11}"
    )
    return (
        f"{100 * r.mean_a:>7.1f}%{100 * r.mean_b:>7.1f}%{100 * r.diff:>+8.1f}{interval:>18}{counts}"
    )


def settings_note(ref_a: str, ref_b: str) -> str | None:
    """A line naming the settings two result folders were evaluated with differently (their
    `settings.json`), or None when they match or a side has none (a run id, an older folder).
    """
    sides = [_settings(Path(ref)) for ref in (ref_a, ref_b)]
    if any(side is None for side in sides):
        return None
    a, b = (_flat_settings(side) for side in sides)
    differ = [
        f"{k} (A: {a.get(k)}, B: {b.get(k)})"
        for k in sorted(set(a) | set(b))
        if a.get(k) != b.get(k)
    ]
    return f"note: run with different settings: {'; '.join(differ)}" if differ else None


def _settings(path: Path) -> dict | None:
    file = path / SETTINGS_FILE
    if not file.is_file():
        return None
    try:
        settings = json.loads(file.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DataError(f"{file} is not a JSON object of settings: {exc}") from exc
    if not isinstance(settings, dict):
        raise DataError(f"{file} is not a JSON object of settings")
    return settings


def _flat_settings(settings: dict, prefix: str = "") -> dict:
    """`{"selection": {"tau": 0.05}}` as `{"selection.tau": 0.05}`.

    >>> _flat_settings({"seed": 0, "engine": {"batch_size": 8}})
    {'seed': 0, 'engine.batch_size': 8}
    """
    flat = {}
    for key, value in settings.items():
        if isinstance(value, dict):
            flat.update(_flat_settings(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def unfinished_note(ref: str) -> str | None:
    """A line saying `ref` is an evaluation still running or killed, and how far it got."""
    path = Path(ref)
    if not path.is_dir() or (path / "metrics.json").is_file() or not _unfinished(path):
        return None
    header, rows = read_unfinished(path)
    of = f" of {header['questions']}" if header.get("questions") else ""
    return f"{ref}: unfinished, {len(rows)}{of} questions scored so far"


def _rows_without_metrics(path: Path) -> tuple[str, list[dict]] | None:
    """(split, rows) of a folder without metrics.json: rows kept on their own (split
    `rows`), or an unfinished evaluation's."""
    if (path / "rows.jsonl").is_file():
        return "rows", _read_rows(path / "rows.jsonl")
    return _unfinished(path)


def _unfinished(path: Path) -> tuple[str, list[dict]] | None:
    """(split, rows) of the unfinished evaluation in `path`; its split is `unfinished` when
    the file predates headers."""
    found = read_unfinished(path) if path.is_dir() else None
    if not found or not found[1]:
        return None
    header, rows = found
    return header.get("split") or "unfinished", rows


def _by_question(rows: list[dict]) -> dict[tuple, dict]:
    """Usable rows keyed by the question's database and position in its split."""
    return {
        (row.get("db_id"), row.get("index")): row
        for row in rows
        if row.get("usable", True) and row.get("category") != "unusable"
    }


def _read_rows(path: Path) -> list[dict]:
    return parse_jsonl(path.read_text().splitlines(), path)


def _rows_from_run(run_id: str, tracking_uri: str | None) -> dict[str, list[dict]]:
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    client = MlflowClient(tracking_uri)
    try:
        names = {f.path for f in client.list_artifacts(run_id)}
        if "rows.jsonl" not in names or "metrics.json" not in names:
            return {}
        with tempfile.TemporaryDirectory() as tmp:
            rows = Path(client.download_artifacts(run_id, "rows.jsonl", tmp))
            metrics = Path(client.download_artifacts(run_id, "metrics.json", tmp))
            split = json.loads(metrics.read_text()).get("split", "split")
            return {split: _read_rows(rows)}
    except MlflowException as exc:
        raise DataError(f"cannot read the rows of MLflow run {run_id}: {exc.message}") from exc


# answers read from a row's own fields; every other name is a `selection.answer` policy
ROW_ANSWERS = {
    "shipped": "answer_match",
    "pipeline": "pipeline_match",
    "full_schema": "full_match",
    "gold_columns": "generator_match",
}
ANSWERS = (*ROW_ANSWERS, *(p for p in POLICIES if p not in ROW_ANSWERS))


def check_answer(name: str) -> str:
    """`name` if it names an answer of a row (`by_size:N` with its token bound), else an
    error saying which names there are.

    >>> check_answer("by_size:900")
    'by_size:900'
    >>> check_answer("full")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    acesql.errors.DataError: unknown answer 'full': one of shipped, pipeline, full_schema, ...
    """
    policy, _, tokens = name.partition(":")
    if policy in ANSWERS and (not tokens or (policy == "by_size" and tokens.isdigit())):
        return name
    raise DataError(
        f"unknown answer {name!r}: one of {', '.join(ANSWERS)} (by_size:N sets its bound)"
    )


def answer_match(row: dict, answer: str) -> bool | None:
    """Whether `answer` of `row` is right; None when the row has no such answer."""
    if answer in ROW_ANSWERS:
        value = row.get(ROW_ANSWERS[answer])
        return None if value is None else bool(value)
    policy, _, tokens = answer.partition(":")
    return answer_fields(row, policy, int(tokens or 1024)).get("answer_match")


def answers_table(
    a: dict[str, list[dict]], b: dict[str, list[dict]], answer_a: str, answer_b: str
) -> str:
    """Per split, B's `answer_b` - A's `answer_a` on the questions both scored and both
    answered: interval, discordant counts, p-value."""
    lines = []
    for split in sorted(set(a) & set(b)):
        left, right = _by_question(a[split]), _by_question(b[split])
        pairs = [
            (x, y)
            for q in sorted(set(left) & set(right), key=str)
            if (x := answer_match(left[q], answer_a)) is not None
            and (y := answer_match(right[q], answer_b)) is not None
        ]
        if not pairs:
            lines.append(f"\n{split}: no question with both answers")
            continue
        r = paired_difference([float(x) for x, _ in pairs], [float(y) for _, y in pairs])
        lines += [
            "",
            f"{split}: B's {answer_b} against A's {answer_a}, on {r.n} questions",
            f"{'A':>8}{'B':>8}{'B - A':>8}{'95% interval':>18}{'A only':>8}{'B only':>8}"
            f"{'McNemar p':>11}",
            _paired_cells(r),
        ]
    return "\n".join(lines)
