"""The served pipeline (`acesql.serving`): its answers in-process with a scripted engine, and
through a real `mlflow models serve` of a logged and registered tiny model."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pandas as pd
import pytest
import yaml

from acesql.config import SelectionSection
from acesql.errors import ConfigError
from acesql.models.engine import Completion
from acesql.models.prompts import PromptBuilder
from acesql.serving import ServedPipeline, ServeSettings, serve_settings
from tests.fakes import ChatTokenizer

ROOT = Path(__file__).resolve().parents[2]
REPLY_KEYS = {
    "sql",
    "columns",
    "rows",
    "row_count",
    "truncated",
    "agreement",
    "answer_from",
    "notes",
    "error",
}


class ScriptedEngine:
    """A retriever naming one column; a generator whose answers depend on the question."""

    SCRIPTS = {  # question word -> (greedy, samples)
        "many": ("SELECT COUNT(*) FROM course", ["SELECT COUNT(*) FROM student"] * 2 + ["nope"]),
        "names": ("SELECT name FROM student", ["SELECT name FROM student"] * 3),
    }

    def generate(self, prompts, n=1, temperature=1.0, **options):
        (prompt,) = prompts
        if "list the columns" in prompt or "Which columns" in prompt:
            return [[Completion("```\n[student.name]\n```")]]
        greedy, samples = next(v for k, v in self.SCRIPTS.items() if k in prompt)
        texts = [greedy] if temperature == 0 else samples[:n]
        return [[Completion(f"```sql\n{t}\n```") for t in texts]]


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_predict_answers_each_row_and_bad_input_as_an_error(school_db, tmp_path):
    pipeline = SelectionSection(method="maj", candidates=4, answer="pipeline")
    settings = ServeSettings(selection=pipeline)
    model = ServedPipeline(ScriptedEngine(), PromptBuilder(ChatTokenizer()), settings)
    text = tmp_path / "notes.sqlite"
    text.write_text("not a database")
    before = digest(school_db)
    rows = [
        ("How many students are there?", school_db),
        ("The names of the students?", school_db),
        ("How many?", tmp_path / "missing.sqlite"),
        ("How many?", text),
        ("   ", school_db),
        ("How many?", None),
    ]
    records = [{"question": q, "database": None if d is None else str(d)} for q, d in rows]
    count, names, missing, foreign, empty, no_db = model.predict(None, pd.DataFrame(records))

    assert set(count) == REPLY_KEYS
    assert count["sql"] == "SELECT COUNT(*) FROM student" and count["rows"] == [[60]]
    assert count["agreement"] == "2/3" and count["error"] is None  # of the 3 that ran
    assert any("disagree" in note for note in count["notes"])
    assert count["columns"] == ["COUNT(*)"] and count["answer_from"] == "pipeline"
    assert names["agreement"] == "4/4" and names["row_count"] == 60 and names["notes"] == []
    assert len(names["rows"]) == 50 and names["truncated"]  # max_rows
    assert "no such database file" in missing["error"] and missing["sql"] is None
    assert "is not a SQLite database" in foreign["error"]
    assert empty["error"] == "empty question" and "no database" in no_db["error"]
    assert all(set(reply) == REPLY_KEYS for reply in (missing, foreign, empty, no_db))
    assert digest(school_db) == before

    greedy = ServedPipeline(
        ScriptedEngine(),
        PromptBuilder(ChatTokenizer()),
        ServeSettings(selection=SelectionSection(answer="pipeline")),
    )
    (reply,) = greedy.predict(None, pd.DataFrame(records[:1]))
    assert reply["sql"] == "SELECT COUNT(*) FROM course" and reply["agreement"] == "1/1"
    small = settings.model_copy(update={"max_bytes": 40})
    (reply,) = ServedPipeline(ScriptedEngine(), PromptBuilder(ChatTokenizer()), small).predict(
        None, pd.DataFrame(records[1:2])
    )
    assert 0 < len(reply["rows"]) < 10 and reply["truncated"]


def test_settings_come_from_params_and_refuse_what_cannot_be_served(tmp_path):
    settings = serve_settings(ROOT / "params.yaml")
    assert settings.generation.max_new_tokens > 0 and settings.match_mode == "multiset"
    with pytest.raises(ValueError, match="prm needs its score model"):
        ServeSettings(selection=SelectionSection(method="prm"))
    params = tmp_path / "params.yaml"
    params.write_text(
        (ROOT / "params.yaml").read_text().replace("selection: {}", "selection: {method: prm}")
    )
    with pytest.raises(ConfigError, match="cannot serve"):
        serve_settings(params)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _post(url: str, payload: dict) -> dict:
    request = urllib.request.Request(
        url, json.dumps(payload).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=200) as response:
        return json.loads(response.read())


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_mlflow_serves_the_registered_pipeline(tiny_model_dir, school_db, tmp_path):
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["evaluate"]["generation"]["max_new_tokens"] = 8
    params["selection"].update(method="maj", candidates=2)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    bin_dir = Path(sys.executable).parent
    path = f"{bin_dir}{os.pathsep}{os.environ['PATH']}"  # the server runs the venv's `uvicorn`
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri, "PATH": path}
    logged = subprocess.run(
        [sys.executable, "-m", "acesql", "serve", "log", "--model", str(tiny_model_dir)]
        + ["--register", "tiny-serve"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=280,
    )  # fmt: skip
    assert logged.returncode == 0, logged.stderr[-3000:]
    out = json.loads(logged.stdout)
    assert out["registered"] == "tiny-serve/1" and "models:/tiny-serve/1" in out["serve"]

    port = _free_port()
    command = [
        *(str(bin_dir / "mlflow"), "models", "serve", "-m", "models:/tiny-serve/1"),
        *("--env-manager", "local", "-h", "127.0.0.1", "-p", str(port)),
    ]
    log_path = tmp_path / "serve.log"
    with log_path.open("wb") as log:
        server = subprocess.Popen(
            command, cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    before = digest(school_db)
    try:
        deadline = time.monotonic() + 240
        while True:
            try:
                with urllib.request.urlopen(f"{url}/ping", timeout=2):
                    break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail("mlflow models serve did not start:\n" + log_path.read_text())
                time.sleep(1)
        records = [
            {"question": "How many students are there?", "database": str(school_db)},
            {"question": "How many?", "database": str(tmp_path / "missing.sqlite")},
        ]
        response = _post(f"{url}/invocations", {"dataframe_records": records})
    finally:
        with contextlib.suppress(ProcessLookupError):  # its group is gone if it failed alone
            os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)

    answer, missing = response["predictions"]
    assert set(answer) == REPLY_KEYS and set(missing) == REPLY_KEYS
    assert isinstance(answer["rows"], list) and isinstance(answer["notes"], list)
    assert re.fullmatch("[0-2]/[0-2]", answer["agreement"])  # of the 2 candidates that ran
    if answer["error"] is None:  # a random model's SQL may not run: then it says why
        assert answer["sql"] and isinstance(answer["row_count"], int)
    assert "no such database file" in missing["error"] and missing["sql"] is None
    assert digest(school_db) == before
