"""What several test modules share: running a stage as DVC does, a project's prepared splits
from the generated fixture dataset, and a scripted stand-in for a rollout engine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from acesql.data.loaders import Example, load_dataset
from acesql.models.engine import Completion


def run_stage(name: str, params: Path, timeout: float = 280) -> subprocess.CompletedProcess:
    """`python -m acesql.stages.<name> --params <params>` in a subprocess, output captured."""
    env = dict(os.environ, MLFLOW_DISABLE_TELEMETRY="true", TOKENIZERS_PARALLELISM="false")
    return subprocess.run(
        [sys.executable, "-m", f"acesql.stages.{name}", "--params", str(params)],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )


def write_prepared(data_dir: Path, synth_dir: Path, splits: tuple[str, ...]) -> None:
    """`data_dir/prepared/<split>.jsonl` for each split of the fixture's synthetic dataset."""
    (data_dir / "prepared").mkdir(parents=True, exist_ok=True)
    for split in splits:
        examples = load_dataset(synth_dir, "synth", split).examples
        (data_dir / "prepared" / f"{split}.jsonl").write_text(
            "".join(json.dumps(e.to_dict()) + "\n" for e in examples)
        )


def columns_answer(columns) -> str:
    """A retriever output naming `columns`."""
    return "```\n[" + ", ".join(columns) + "]\n```"


def sql_answer(sql: str) -> str:
    """A generator output holding `sql`."""
    return f"```sql\n{sql}\n```"


def gold_columns(ex: Example, n: int, options: dict) -> list[str]:
    """The retriever's right answer, n times."""
    return [columns_answer(ex.gold_columns)] * n


class RoleEngine:
    """A stand-in engine for both roles: a prompt is answered from the example whose question it
    holds, by `retriever(ex, n, options)` in the schema-linking role and `generator(ex, n,
    options)` otherwise, each giving n texts (or Completions, kept as they are). A text becomes
    a Completion finished by `reason`, with the token ids of `tokenizer` plus EOS when one is
    given, else two placeholder tokens. `prompt` holds the prompt being answered."""

    def __init__(
        self,
        examples: list[Example],
        generator: Callable[[Example, int, dict], list],
        retriever: Callable[[Example, int, dict], list] = gold_columns,
        *,
        tokenizer=None,
        reason: str = "stop",
    ):
        self.examples, self.generator, self.retriever = examples, generator, retriever
        self.tokenizer, self.reason = tokenizer, reason
        self.prompt = ""

    def generate(self, prompts, n=1, **options):
        out = []
        for p in prompts:
            self.prompt = p
            ex = next(e for e in self.examples if e.question in p)
            role = self.retriever if "schema linking" in p else self.generator
            out.append([self.completion(t) for t in role(ex, n, options)])
        return out

    def completion(self, text) -> Completion:
        if isinstance(text, Completion):
            return text
        if self.tokenizer is None:
            return Completion(text, [1, 2], [-0.1, -0.2], self.reason)
        ids = self.tokenizer(text, add_special_tokens=False).input_ids
        ids.append(self.tokenizer.eos_token_id)
        return Completion(text, ids, [-1.0] * len(ids), self.reason)

    def update_weights(self, model):  # the scripts do not depend on the weights
        pass

    def close(self):
        pass
