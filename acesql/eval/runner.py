"""A restartable evaluation that writes its results to a folder.

Questions are evaluated in chunks; each finished chunk's rows are appended to
`<out>/.partial-<fingerprint>.jsonl` in one write. A killed evaluation, started again with the
same model, questions and settings, reads that file and goes on from the first question it
has no row for, whatever chunk size either attempt used (the model by the contents of its
weights and tokenizer, so a retrained identical model resumes). The progress bar counts
questions and shows which part of the evaluation is running and how many outputs ran to the
token cap; `seconds` is this attempt's time, `seconds_total` the time of every attempt's
saved chunks. One
evaluation writes a folder at a time (`acesql.locks`): a second one into the same folder
stops at once with DataError, rather than both appending to one file. The
fingerprint covers all three, so a changed setting never mixes with old rows. Sampling seeds
are derived from the chunk's position, so a resumed run with the same chunk size samples what
an unbroken one would.

A finished folder is grown the same way: the same model and settings over more questions (a
larger `--limit`, whose spread keeps the questions of a smaller one) take the finished rows of
the questions they share and score only the others. The model is matched by the digest of its
weights that metrics.json records (`model_sha256`).

Until then `read_unfinished` gives the finished rows (`acesql eval --compare` reads them).
When every chunk is done the folder holds:

- `metrics.json`: the summary (`acesql.eval.metrics`), with model, dataset, split, time and
  host (the CPU and its bf16 support: greedy answers in bf16 depend on them);
- `settings.json`: every setting that decides the rows (what the resume fingerprint covers),
  so a comparison can say where two evaluations were run differently;
- `rows.jsonl`: one row per question (`acesql.eval.end_to_end`);
- `predict_dev.json`: the pipeline's SQL in BIRD's official format;
- `report.html`: the report (`acesql.eval.report`), with its plots embedded.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from dataclasses import fields, replace
from pathlib import Path

from tqdm import tqdm

from acesql.config import SelectionSection
from acesql.data.loaders import Example
from acesql.data.schemas import SchemaCache
from acesql.errors import DataError
from acesql.eval.end_to_end import EvalOptions, evaluate_examples
from acesql.eval.metrics import summarize
from acesql.eval.report import write_report
from acesql.eval.sql_eval import write_bird_predictions
from acesql.host import host_facts
from acesql.locks import folder_locked
from acesql.memory import release_free_heap
from acesql.storage import file_sha256

CHUNK_SIZE = 16  # questions per saved chunk: the work a kill can lose
SETTINGS_FILE = "settings.json"


def evaluate_to_folder(
    examples: list[Example],
    engine,
    prompts,
    executor,
    out_dir: str | Path,
    *,
    model: str,
    dataset: str,
    split: str,
    settings: dict,
    chunk_size: int = CHUNK_SIZE,
    progress: bool = True,
    tools: dict | None = None,
    growing: list[Example] | None = None,
) -> tuple[dict, list[dict]]:
    """Evaluate `examples`, resuming a killed run of the same job; write the folder.

    `growing`: the whole question list, when `examples` is the part of it that can be scored
    now and the rest comes later (rescoring an evaluation that is still running). It names the
    run, so the next call resumes what this one scored; the folder stays unfinished (no
    metrics.json, the rows in the partial file, which `--compare` and `--selections` read).

    `tools`: what the selection needs beyond the policy (`selector`, with its judge or
    process scorer, and `stored`: an earlier run's candidates, scored instead of sampling new
    ones), passed on to `evaluate_examples`; built once by the caller.

    `settings` are `evaluate_examples`' keyword arguments (mode, retriever_samples,
    vote_threshold, max_new_tokens, candidates, maj_temperature, selection, seed) plus anything
    else that changes the results (e.g. the engine's precision); all of it enters the fingerprint.
    """
    out = Path(out_dir)
    busy = (
        f"{out} is being written by another evaluation: wait for it to end, or give this one"
        " another output folder"
    )
    with folder_locked(out, DataError(busy)):
        digest = model_digest(model)
        job = fingerprint(model, growing or examples, settings, digest=digest)
        partial = out / f".partial-{job}.jsonl"
        done, earlier_seconds = _read_partial(partial)
        carried = _finished_rows(out, examples, done, digest, settings, growing)
        earlier_seconds += carried[1]
        start = time.monotonic()
        finished = sum(e.index in done for e in examples)
        if finished:
            print(
                f"resuming {partial}: {finished} of {len(examples)} questions done", file=sys.stderr
            )
        bar = tqdm(
            total=len(examples),
            initial=finished,  # a resumed run's bar starts where the last one stopped
            desc=f"evaluate {split}",
            unit="q",
            disable=not progress,
        )
        header = {
            "model": model,
            "dataset": dataset,
            "split": split,
            "questions": len(growing or examples),
        }
        run = _Chunks(_Watched(engine, bar), prompts, executor, _options(settings), tools)
        _append_chunks(partial, header, examples, done, run, chunk_size, bar, carried)
        bar.close()
        rows = [done[e.index] for e in examples]
        summary = _described(summarize(rows), model, dataset, split, settings, start)
        summary["model_sha256"] = digest
        summary["host"] = host_facts()  # bf16 answers depend on the CPU
        summary["seconds_total"] = round(earlier_seconds + summary["seconds"], 1)
        if growing is not None:
            print(
                f"{len(rows)} of {len(growing)} questions scored, kept unfinished in {partial}: "
                "run this again when more are there",
                file=sys.stderr,
            )
            return summary, rows
        _write_folder(out, summary, rows, settings)
        partial.unlink()
        return summary, rows


def _append_chunks(partial: Path, header: dict, examples, done, run, chunk_size, bar, carried):
    """Score the questions not in `done`, a chunk at a time, each chunk's rows appended to
    the partial file (after the header, when it is new) and added to `done`. `carried`: the
    rows taken from the folder's finished evaluation and their seconds, saved first as a chunk
    of their own."""
    _end_with_newline(partial)
    with partial.open("a") as fh:
        if fh.tell() == 0:
            fh.write(json.dumps({"header": header}) + "\n")
        rows, seconds = carried
        if rows:
            record = {"chunk": "carried", "rows": list(rows.values()), "seconds": seconds}
            fh.write(json.dumps(record, default=str) + "\n")
            fh.flush()
            done.update(rows)
            bar.update(len(rows))
        chunks = [examples[i : i + chunk_size] for i in range(0, len(examples), chunk_size)]
        for number, chunk in enumerate(chunks):
            todo = [e for e in chunk if e.index not in done]
            if todo:
                done.update(run.save(fh, number, todo))
                bar.update(len(todo))


class _Chunks:
    """Evaluates chunks of questions and appends each one's rows to the partial file."""

    def __init__(self, engine, prompts, executor, options: EvalOptions, tools: dict | None):
        self.engine, self.prompts, self.executor = engine, prompts, executor
        self.options, self.tools = options, tools or {}
        self.schemas = SchemaCache(prompts.sample_values)

    def save(self, fh, number: int, chunk: list[Example]) -> dict[int, dict]:
        """The rows of `chunk` (the `number`th of the run: its sampling seed), by question,
        written to `fh` in one line that a kill cannot leave half-read."""
        began = time.monotonic()
        _, rows = evaluate_examples(
            chunk,
            self.engine,
            self.prompts,
            self.executor,
            replace(self.options, seed=self.options.seed + number),
            schemas=self.schemas,
            phase=self.engine.phase,
            **self.tools,
        )
        seconds = round(time.monotonic() - began, 2)
        record = {"chunk": _key(chunk), "rows": rows, "seconds": seconds}
        fh.write(json.dumps(record, default=str) + "\n")
        fh.flush()
        os.fsync(fh.fileno())
        release_free_heap()  # judgments and executions leave freed pages behind too
        return {row["index"]: row for row in rows}


class _Watched:
    """The engine, seen by the progress bar: the phase of the evaluation that is running
    (retrieving, generating, sampling, judging) and how many outputs ran to the token cap
    (a question that loops)."""

    def __init__(self, engine, bar):
        self.engine, self.bar = engine, bar
        self.capped = 0
        self._phase = ""

    def phase(self, name: str) -> None:
        self._phase = name
        self._show()

    def generate(self, prompts, n=1, **options):
        groups = self.engine.generate(prompts, n=n, **options)
        self.capped += sum(c.finish_reason == "length" for g in groups for c in g)
        self._show()
        return groups

    def _show(self) -> None:
        cap = f", {self.capped} outputs at the token cap" if self.capped else ""
        self.bar.set_postfix_str(f"{self._phase}{cap}", refresh=True)

    def __getattr__(self, name):  # model, tokenizer, close: the engine's own
        return getattr(self.engine, name)


def _write_folder(out: Path, summary: dict, rows: list[dict], settings: dict) -> None:
    """A finished evaluation's files (see the module docstring)."""
    _write_json(out / "metrics.json", summary)
    _write_json(out / SETTINGS_FILE, settings)
    with (out / "rows.jsonl").open("w") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")
    write_bird_predictions(out / "predict_dev.json", rows)
    write_report(out / "report.html", summary, rows)


def evaluate_in_memory(
    examples: list[Example],
    engine,
    prompts,
    executor,
    *,
    model: str,
    dataset: str,
    split: str,
    settings: dict,
    tools: dict | None = None,
) -> tuple[dict, list[dict]]:
    """`evaluate_to_folder` without the folder: the same summary, nothing written or resumed."""
    start = time.monotonic()
    summary, rows = evaluate_examples(
        examples, engine, prompts, executor, _options(settings), **(tools or {})
    )
    return _described(summary, model, dataset, split, settings, start), rows


def _described(summary: dict, model, dataset, split, settings: dict, start: float) -> dict:
    """A summary headed by what was evaluated, with the time it took."""
    return {
        "model": model,
        "dataset": dataset,
        "split": split,
        "mode": settings.get("mode", "multiset"),
        "retriever_samples": settings.get("retriever_samples", 1),
        "vote_threshold": settings.get("vote_threshold", 0.5),
        "unclosed_list": settings.get("unclosed_list", "reject"),
        "answer": (settings.get("selection") or {}).get("answer", _DEFAULT_ANSWER),
        **{k: settings[k] for k in ("candidates_from",) if k in settings},
        **summary,
        "seconds": round(time.monotonic() - start, 1),
    }


def _options(settings: dict) -> EvalOptions:
    """The settings that are `evaluate_examples`' options, the `selection` section typed
    again."""
    options = {k: v for k, v in settings.items() if k in _EVAL_ARGS}
    if options.get("selection") is not None:
        options["selection"] = SelectionSection.model_validate(options["selection"])
    return EvalOptions(**options)


_EVAL_ARGS = {f.name for f in fields(EvalOptions)}
_DEFAULT_ANSWER = SelectionSection.model_fields["answer"].default


def fingerprint(
    model: str, examples: list[Example], settings: dict, digest: str | None = None
) -> str:
    """A short hash of what decides the results: model contents (`digest`, when the caller
    has it already), questions, settings."""
    identity = {
        "model": digest or model_digest(model),
        "questions": [(e.index, e.db_id, e.question, e.sql) for e in examples],
        "settings": settings,
    }
    blob = json.dumps(identity, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


# The files of a model folder that decide what it generates; a training run's other outputs
# (steps.jsonl, curves.png, summaries, checkpoints/) do not.
_MODEL_FILES = (
    "*.safetensors",
    "*.bin",
    "*config.json",
    "tokenizer*",
    "vocab.*",
    "merges.txt",
    "special_tokens_map.json",
    "added_tokens.json",
    "chat_template.*",
)


def model_digest(model: str) -> str:
    """SHA-256 over the contents of the files in `model` that decide its outputs.

    By content, not path or modification time: the same weights retrained, copied or moved
    resume the same evaluation. A name that is not a folder (a hub id) is its own digest, and
    so is a folder with none of those files.
    """
    root = Path(model)
    files = sorted({f for pattern in _MODEL_FILES for f in root.glob(pattern) if f.is_file()})
    if not files:
        return str(root.resolve()) if root.is_dir() else model
    listing = "".join(f"{path.name}\0{file_sha256(path)}\n" for path in files)
    return hashlib.sha256(listing.encode()).hexdigest()


def _finished_rows(
    out: Path,
    examples: list[Example],
    done: dict,
    digest: str,
    settings: dict,
    growing: list | None,
) -> tuple[dict[int, dict], float]:
    """The rows of the evaluation finished earlier in `out` that this one takes as they are,
    by question index, and the share of that run's seconds they took.

    A row is taken when the finished run had the same model contents (`model_sha256` in its
    metrics.json) and settings (its settings.json), and the row is the same question (index,
    database, question and gold SQL): so a run with a larger `--limit` into the same folder
    scores only the questions it adds. A folder written before metrics recorded the model's
    digest is not taken from (it says so): its weights cannot be told from a retrained model's.
    Nothing is taken while the questions are still `growing` (a rescoring of a running
    evaluation).
    """
    metrics_file, rows_file = out / "metrics.json", out / "rows.jsonl"
    if growing is not None or not (
        metrics_file.is_file() and rows_file.is_file() and (out / SETTINGS_FILE).is_file()
    ):
        return {}, 0.0
    try:
        metrics = json.loads(metrics_file.read_text())
        earlier = json.loads((out / SETTINGS_FILE).read_text())
        lines = rows_file.read_text().splitlines()
        old_rows = [json.loads(line) for line in lines if line.strip()]
    except (OSError, json.JSONDecodeError) as exc:
        print(f"{out}: its finished results are unreadable ({exc}), not reused", file=sys.stderr)
        return {}, 0.0
    if earlier != json.loads(json.dumps(settings, default=str)):
        return {}, 0.0
    if metrics.get("model_sha256") != digest:
        if "model_sha256" not in metrics:
            print(
                f"{out}: its finished results record no model digest (model_sha256), so "
                "they are not reused; every question is scored again",
                file=sys.stderr,
            )
        return {}, 0.0
    wanted = {e.index: e for e in examples if e.index not in done}
    taken = {}
    for row in old_rows:
        example = wanted.get(row.get("index")) if isinstance(row, dict) else None
        if example is not None and _same_question(row, example):
            taken[example.index] = row
    if taken:
        print(
            f"{out}: {len(taken)} questions taken from its finished evaluation (same model, "
            f"settings and questions); {len(wanted) - len(taken)} to score",
            file=sys.stderr,
        )
    seconds = float(metrics.get("seconds_total") or metrics.get("seconds") or 0.0)
    return taken, seconds * len(taken) / max(len(old_rows), 1)


def _same_question(row: dict, example: Example) -> bool:
    return (row.get("db_id"), row.get("question"), row.get("gold_sql")) == (
        example.db_id,
        example.question,
        example.sql,
    )


def _key(chunk: list[Example]) -> str:
    return f"{chunk[0].index}-{chunk[-1].index}-{len(chunk)}"


def _read_partial(path: Path) -> tuple[dict[int, dict], float]:
    """The rows an earlier attempt finished, by question index, and the seconds they took
    (every attempt's); a line cut short by a kill is ignored. Chunks of any size count, so
    a run resumed with another chunk size goes on from the same questions."""
    done, seconds = {}, 0.0
    if not path.is_file():
        return done, seconds
    for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue  # the line a kill cut short
        if not isinstance(record, dict) or "header" in record:
            continue
        rows = record.get("rows")
        if not isinstance(rows, list) or not all(
            isinstance(r, dict) and isinstance(r.get("index"), int) for r in rows
        ):
            print(f"{path} line {number}: not a chunk of rows, ignored", file=sys.stderr)
            continue
        done.update((row["index"], row) for row in rows)
        seconds += float(record.get("seconds") or 0.0)
    return done, seconds


KEPT_PARTIAL = "rows.partial.jsonl"


def read_unfinished(folder: str | Path) -> tuple[dict, list[dict]] | None:
    """The header and finished rows of an evaluation still running or killed in `folder`.

    The runner's own `.partial-<fingerprint>.jsonl`, or `rows.partial.jsonl`: the name to give
    a copy of one kept beside the results (a hidden file is easy to miss in a report).
    None when the folder holds no unfinished evaluation. The header (model, dataset, split,
    questions) is {} for a file written before headers existed. Two unfinished evaluations
    with different settings in one folder are ambiguous: a DataError names them.
    """
    files = sorted(Path(folder).glob(".partial-*.jsonl")) + sorted(Path(folder).glob(KEPT_PARTIAL))
    if not files:
        return None
    if len(files) > 1:
        names = ", ".join(f.name for f in files)
        raise DataError(f"{folder} holds several unfinished evaluations ({names}): keep one")
    header = {}
    for line in files[0].read_text().splitlines():
        try:
            header = json.loads(line).get("header") or header
        except (json.JSONDecodeError, AttributeError):
            continue
    rows = list(_read_partial(files[0])[0].values())
    return header, rows


def _end_with_newline(path: Path) -> None:
    """After a kill mid-write, start the next record on a line of its own."""
    if path.is_file() and path.stat().st_size:
        with path.open("rb+") as fh:
            fh.seek(-1, os.SEEK_END)
            if fh.read(1) != b"\n":
                fh.write(b"\n")


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n")
    tmp.replace(path)
