"""The trained pipeline as an MLflow model, so `mlflow models serve` answers questions.

    acesql serve log --model models/grpo --register acesql-serve    # prints the version
    MLFLOW_TRACKING_URI=sqlite:///mlflow.db mlflow models serve \
        -m models:/acesql-serve/1 --env-manager local -p 5001 -t 600
    curl -s 127.0.0.1:5001/invocations -H 'Content-Type: application/json' -d \
        '{"dataframe_records": [{"question": "How many singers are there?",
                                 "database": "/srv/dbs/concert_singer.sqlite"}]}'

The logged model is a pyfunc (`ServedPipeline`) holding a copy of the model folder (both
roles are one model: the artifact `model`) and, as its `model_config`, the settings the
pipeline answers with (`ServeSettings`: the prompt builder's, the `selection` section, the
match mode, the decoding and SQL limits), taken from params.yaml when it is logged. Each
input row is `{question, database}`; `database` is a path to a SQLite file that the server
process can read (absolute, or relative to the server's working directory): the server reads
it where it runs, nothing is uploaded. Each answer row is `{sql, columns, rows, row_count,
truncated, agreement, answer_from, notes, error}`: the SQL the pipeline chose
(`acesql.selection.ask.ask`), its first `max_rows` rows within `max_bytes` of JSON, `ask`'s
agreement (`"5/7"`: 5 of the 7 candidates that ran returned the chosen result; greedy
`"1/1"`) and notes (an empty result, candidates that disagree, a retriever that named
nothing of this schema), and the error, if any, as data: a missing or non-SQLite file, an
empty question, SQL that failed or timed out. The file is only opened read-only and the
candidates run in the sandbox's worker process with its deadline (`acesql.sql.sandbox` says
what that does and does not protect against); the server still answers for any SQLite file
its user may read, so bind it to loopback (the default) or put it behind something that
checks the paths.

The server runs in the project's environment (`--env-manager local`, with the venv that has
acesql installed activated: `mlflow models serve` starts `uvicorn` from PATH); the code is
not copied into the model, the weights are. One question runs at a time; a request of
several rows answers them in order, and a row takes what `acesql ask` takes (on 2 CPU cores,
0.5B parameters: a minute or more greedy, several with r3): hence `-t 600`, as the server
answers 504 after its default 60 s, while the question it gave up on still runs to the end
and holds up the next.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import threading
from importlib import metadata
from pathlib import Path
from typing import Literal

import mlflow.pyfunc
import pandas as pd
from pydantic import Field, model_validator

from acesql.config import GenerationSection, SelectionSection, load_section
from acesql.config.section import MatchMode, Section
from acesql.errors import ConfigError, DataError
from acesql.models.base_model import resolve_model_path
from acesql.models.engine import open_engine
from acesql.models.prompts import PromptBuilder
from acesql.tracking import GIT_COMMIT_TAG, git_commit
from acesql.tracking_store import experiment_id

MODEL_ARTIFACT = "model"
MAX_QUESTION_CHARS = 2000
WEIGHT_FILES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")
# what the served pipeline imports, pinned to this environment's versions (documentation:
# `--env-manager local` serves from the environment it is run in)
REQUIREMENTS = ("mlflow", "torch", "transformers", "accelerate", "sqlglot", "pydantic", "pyyaml")


class ServeSettings(Section):
    """How the served pipeline answers: what `acesql ask` takes as flags, fixed at log time."""

    reasoning: bool = Field(False, description="Both roles think first (base_model.reasoning).")
    sample_values: int = Field(
        0, ge=0, le=10, description="Sample values per column in schemas (prompt.sample_values)."
    )
    sql_format: Literal["direct", "cocte"] = Field(
        "direct", description="How the generator writes SQL (prompt.sql_format)."
    )
    selection: SelectionSection = Field(
        default_factory=SelectionSection,
        description="The choice among candidates and the answer policy (selection).",
    )
    match_mode: MatchMode = Field(
        "multiset", description="Result equality for grouping candidates (evaluate.match_mode)."
    )
    generation: GenerationSection = Field(
        default_factory=lambda: GenerationSection(temperature=0.0),
        description="Engine, batch size, max_new_tokens and bf16 (evaluate.generation).",
    )
    timeout_s: float = Field(30.0, gt=0, description="Deadline of each SQL (evaluate.timeout_s).")
    max_rows: int = Field(50, ge=1, description="Rows of the answer's result sent back.")
    max_bytes: int = Field(65536, ge=1, description="Bytes of JSON those rows may take.")

    @model_validator(mode="after")
    def _servable(self):
        from acesql.selection.selector import Selector

        selector = Selector(self.selection, mode=self.match_mode)
        if selector.needs_score_model:
            raise ValueError(
                f"selection.method {selector.method} needs its score model beside the policy, "
                "which is not served: log with greedy, maj or r3"
            )
        try:
            selector.check_engine(self.generation.engine)
        except ConfigError as exc:
            raise ValueError(str(exc)) from exc
        return self


def serve_settings(params_path: str | Path) -> ServeSettings:
    """The settings a params file's `base_model`, `prompt`, `evaluate` and `selection`
    sections give, as the evaluate stage reads them."""
    evaluate = load_section(params_path, "evaluate")
    prompt = load_section(params_path, "prompt")
    try:
        return ServeSettings(
            reasoning=load_section(params_path, "base_model").reasoning,
            sample_values=prompt.sample_values,
            sql_format=prompt.sql_format,
            selection=load_section(params_path, "selection"),
            match_mode=evaluate.match_mode,
            generation=evaluate.generation,
            timeout_s=evaluate.timeout_s,
        )
    except ValueError as exc:  # pydantic's ValidationError
        raise ConfigError(f"{params_path}: cannot serve these settings: {exc}") from exc


class ServedPipeline(mlflow.pyfunc.PythonModel):
    """The pyfunc: loads the engine and prompt builder once, answers rows of questions.

    Built empty when logged; `load_context` fills it in the server. A test (or a caller
    with its own engine) passes `engine`, `prompts` and `settings` instead.
    """

    def __init__(self, engine=None, prompts=None, settings: ServeSettings | None = None):
        self.engine, self.prompts, self.settings = engine, prompts, settings
        self._lock = threading.Lock()

    def __getstate__(self):  # what log_model pickles: no engine, no lock
        return {"engine": None, "prompts": None, "settings": None}

    def __setstate__(self, state):
        self.__init__(**state)

    def load_context(self, context) -> None:

        self.settings = ServeSettings.model_validate(context.model_config)
        s = self.settings
        self.engine = open_engine(s.generation, context.artifacts[MODEL_ARTIFACT], progress=False)
        self.prompts = PromptBuilder(
            self.engine.tokenizer, s.reasoning, s.sample_values, s.sql_format
        )

    # the DataFrame hint: MLflow checks rows against the logged signature, not a type hint
    def predict(self, context, model_input: pd.DataFrame, params=None) -> list[dict]:
        """One answer per row of `model_input` (columns `question`, `database`)."""
        rows = model_input.to_dict("records")
        with self._lock:  # one engine: the server's threads take turns
            return [self.answer(row.get("question"), row.get("database")) for row in rows]

    def answer(self, question, database) -> dict:
        return answer_row(self.engine, self.prompts, self.settings, question, database)


def answer_row(engine, prompts, settings: ServeSettings, question, database) -> dict:
    """The reply to one `{question, database}`; what is wrong with them is its `error`."""
    from acesql.selection.ask import ask

    reply = {
        "sql": None,
        "columns": [],
        "rows": [],
        "row_count": 0,
        "truncated": False,
        "agreement": None,
        "answer_from": None,
        "notes": [],
        "error": None,
    }
    question = question.strip() if isinstance(question, str) else ""
    database = database if isinstance(database, str) else ""
    if not question:
        return {**reply, "error": "empty question"}
    if len(question) > MAX_QUESTION_CHARS:
        return {**reply, "error": f"question longer than {MAX_QUESTION_CHARS} characters"}
    if not database:
        return {**reply, "error": "no database: give the path of a SQLite file the server reads"}
    try:
        answer = ask(
            engine,
            prompts,
            database,
            question,
            settings.selection,
            mode=settings.match_mode,
            max_new_tokens=settings.generation.max_new_tokens,
            timeout_s=settings.timeout_s,
        )
    except DataError as exc:
        return {**reply, "error": str(exc)}
    reply.update(
        sql=answer.sql,
        agreement="{}/{}".format(*answer.agreement),
        answer_from=answer.answer_from,
        notes=answer.notes,
    )
    result = answer.result
    if answer.sql is None or result is None:
        return {**reply, "error": "no answer: none of the candidate queries ran"}
    rows, truncated = bounded_rows(result, settings.max_rows, settings.max_bytes)
    reply.update(
        columns=result.columns,
        rows=rows,
        row_count=len(result.rows),
        truncated=truncated,
        error=None if result.ok else ("timed out" if result.timed_out else result.error),
    )
    return reply


def bounded_rows(result, max_rows: int, max_bytes: int) -> tuple[list[list], bool]:
    """The first rows of `result` as JSON values, at most `max_rows` and `max_bytes` of JSON;
    and whether any were left out (here, or by the sandbox's own row cap).

    >>> from acesql.sql.sandbox import ExecResult
    >>> bounded_rows(ExecResult(ok=True, rows=[(1, "a"), (2, b"\\x00")]), 5, 100)
    ([[1, 'a'], [2, {'blob': '00'}]], False)
    >>> bounded_rows(ExecResult(ok=True, rows=[("x" * 40,)] * 3), 5, 100)[1]
    True
    """
    head = dataclasses.replace(result, rows=result.rows[:max_rows]).to_dict()["rows"]
    kept, size = [], 2  # the brackets of the list
    for row in head:
        size += len(json.dumps(row)) + 1
        if size > max_bytes:
            break
        kept.append(row)
    return kept, result.truncated or len(kept) < len(result.rows)


def signature():
    """Input `{question, database}` (strings); output one reply per row."""
    from mlflow.models import ModelSignature
    from mlflow.types.schema import AnyType, Array, ColSpec, Schema

    inputs = Schema([ColSpec("string", "question"), ColSpec("string", "database")])
    outputs = Schema(
        [
            ColSpec("string", "sql", required=False),
            ColSpec(Array("string"), "columns"),
            ColSpec(AnyType(), "rows"),
            ColSpec("long", "row_count"),
            ColSpec("boolean", "truncated"),
            ColSpec("string", "agreement", required=False),
            ColSpec("string", "answer_from", required=False),
            ColSpec(Array("string"), "notes"),
            ColSpec("string", "error", required=False),
        ]
    )
    return ModelSignature(inputs=inputs, outputs=outputs)


def model_files(model_dir: str | Path, staging: Path) -> Path:
    """A folder in `staging` holding the model folder's top-level files (config, tokenizer,
    weights; checkpoints and pools left out): what the logged model copies as `model`."""

    source = Path(resolve_model_path(model_dir))
    if not (source / "config.json").is_file():
        raise DataError(
            f"{model_dir} holds no model (no config.json in {source}): give a trained model "
            "folder, e.g. models/grpo"
        )
    if not any(p.suffix in WEIGHT_FILES for p in source.iterdir()):
        raise DataError(f"{source} has no weight files: `dvc pull` them first")
    folder = staging / MODEL_ARTIFACT
    folder.mkdir()
    for path in sorted(source.iterdir()):
        if path.is_file():
            _link_or_copy(path.resolve(), folder / path.name)
    return folder


def _link_or_copy(source: Path, target: Path) -> None:
    """A hard link where the file system allows one, else a copy (MLflow refuses to log a
    symbolic link that points out of the folder it logs)."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


@dataclasses.dataclass
class Logged:
    model_uri: str  # runs:/... or models:/m-...: loadable with mlflow.pyfunc.load_model
    run_id: str
    registered: str | None  # "name/version", or None when not registered


def log_pipeline(
    model_dir: str | Path,
    settings: ServeSettings,
    tracking_uri: str,
    experiment: str,
    register: str | None = None,
) -> Logged:
    """Log the pipeline at `model_dir` with `settings` as an MLflow model in a new run of
    `experiment`, and register it as a new version of `register` when given.

    The weights are copied into the model (a 0.5B model in fp32 is ~2 GB), so a version
    loads on its own, wherever the store's artifacts are read.
    """
    import tempfile

    import mlflow
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri)
    exp_id = experiment_id(client, tracking_uri, experiment)
    previous = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(tracking_uri)
    try:
        tags = {"stage": "serve", "acesql.model": str(model_dir)}
        commit = git_commit()
        if commit:
            tags[GIT_COMMIT_TAG] = commit
        with (
            tempfile.TemporaryDirectory() as staging,
            mlflow.start_run(experiment_id=exp_id, run_name=f"serve {model_dir}", tags=tags) as run,
        ):
            info = mlflow.pyfunc.log_model(
                name="pipeline",
                python_model=ServedPipeline(),
                artifacts={MODEL_ARTIFACT: str(model_files(model_dir, Path(staging)))},
                model_config=settings.model_dump(mode="json"),
                signature=signature(),
                pip_requirements=_requirements(),
                registered_model_name=register,
            )
        registered = None
        if register:
            registered = f"{register}/{info.registered_model_version}"
        return Logged(info.model_uri, run.info.run_id, registered)
    finally:
        mlflow.set_tracking_uri(previous)


def _requirements() -> list[str]:
    pins = []
    for name in REQUIREMENTS:
        try:
            pins.append(f"{name}=={metadata.version(name).split('+')[0]}")
        except metadata.PackageNotFoundError:
            continue
    return pins
