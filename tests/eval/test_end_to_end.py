"""Greedy evaluation in both roles, with scripted engines whose answers we control."""

import json
import re

import pytest

from acesql.data.loaders import load_dataset
from acesql.eval.end_to_end import EvalOptions, evaluate_examples
from acesql.models.engine import Completion
from acesql.models.prompts import PromptBuilder
from acesql.sql.batch_executor import BatchExecutor


class Oracle:
    """Answers with the gold columns and SQL; `wrong_sql` makes the generator fail (on every
    question, or on those of `wrong_for`)."""

    def __init__(self, examples, wrong_sql=False, bad_columns=False, wrong_for=(), loop=False):
        self.examples, self.wrong_sql, self.bad_columns = examples, wrong_sql, bad_columns
        self.loop = loop  # the retriever repeats its list until the token cap cuts it
        self.wrong_for = {e.question for e in wrong_for}
        self.calls = []

    def generate(self, prompts, n=1, **kw):
        self.calls.append((len(prompts), n, kw.get("temperature")))
        out = []
        for p in prompts:
            ex = next(e for e in self.examples if e.question in p)
            if "schema linking" in p:
                cols = ["nowhere.nothing"] if self.bad_columns else ex.gold_columns
                text = "```\n[" + ", ".join(cols) + "]\n```"
                if self.loop:
                    text = "```\n[" + ", ".join(cols * 3) + ", " + cols[0][:3]
            elif self.wrong_sql or ex.question in self.wrong_for:
                text = "```sql\nSELECT 1 WHERE 0\n```"
            else:
                text = f"```sql\n{ex.sql}\n```"
            out.append([Completion(text, [1] * 5, [-0.5] * 5, "stop")] * n)
        return out


@pytest.fixture(scope="module")
def setup(synth_dir, tiny_model_dir):
    from acesql.models.base_model import load_tokenizer

    examples = load_dataset(synth_dir, "synth", "dev").examples
    prompts = PromptBuilder(load_tokenizer(tiny_model_dir))
    return examples, prompts


def test_oracle_scores_one(setup):
    examples, prompts = setup
    engine = Oracle(examples)
    with BatchExecutor(workers=0) as ex:
        summary, rows = evaluate_examples(examples, engine, prompts, ex)
    assert summary["usable"] == len(examples) == len(rows)
    assert summary["pipeline_ex"] == summary["generator_ex"] == 1.0
    assert summary["retriever_recall"] == summary["retriever_exact"] == 1.0
    assert summary["tokens_per_query"] == 10.0
    assert sum(v["usable"] for v in summary["by_complexity"].values()) == len(examples)
    assert engine.calls[0][2] == 0.0  # greedy retriever by default


def test_wrong_sql_and_bad_columns(setup):
    examples, prompts = setup
    with BatchExecutor(workers=0) as ex:
        summary, rows = evaluate_examples(examples, Oracle(examples, wrong_sql=True), prompts, ex)
        assert summary["pipeline_ex"] == summary["generator_ex"] == 0.0
        summary, rows = evaluate_examples(examples, Oracle(examples, bad_columns=True), prompts, ex)
    # unknown columns: the vote is empty, so the generator sees no schema (the paper's rule)
    assert summary["retriever_fallback_rate"] == 1.0
    assert all(r["retriever_unknown"] == ["nowhere.nothing"] for r in rows)
    assert all(r["retrieved_columns"] == [] for r in rows)
    with BatchExecutor(workers=0) as ex:
        engine = Oracle(examples, bad_columns=True)
        summary, rows = evaluate_examples(
            examples, engine, prompts, ex, EvalOptions(on_empty="full_schema")
        )
    # ... or, as an evaluation option, the whole schema; the oracle generator then succeeds
    assert summary["retriever_fallback_rate"] == 1.0 and summary["pipeline_ex"] == 1.0
    assert all(len(r["retrieved_columns"]) > 1 for r in rows)


def test_a_looping_retriever_is_rejected_or_salvaged(setup):
    examples, prompts = setup
    with BatchExecutor(workers=0) as ex:
        strict, _ = evaluate_examples(examples, Oracle(examples, loop=True), prompts, ex)
        engine = Oracle(examples, loop=True)
        salvaged, rows = evaluate_examples(
            examples, engine, prompts, ex, EvalOptions(unclosed_list="salvage")
        )
    # the paper's strict parse: no list, an empty schema; salvaged: the looped-over columns
    assert strict["retriever_fallback_rate"] == 1.0 and strict["retriever_salvaged_rate"] == 0.0
    assert salvaged["retriever_fallback_rate"] == 0.0 and salvaged["retriever_salvaged_rate"] == 1.0
    assert salvaged["pipeline_ex"] == salvaged["retriever_exact"] == 1.0
    assert all(r["retrieved_columns"] == sorted(e.gold_columns) for r, e in zip(rows, examples))


def test_pipeline_ex_is_the_share_of_right_answers(setup):
    examples, prompts = setup
    wrong = examples[::3]  # the oracle fails on every third question
    with BatchExecutor(workers=0) as ex:
        summary, rows = evaluate_examples(examples, Oracle(examples, wrong_for=wrong), prompts, ex)
    right = len(examples) - len(wrong)
    assert summary["pipeline_correct"] == summary["generator_correct"] == right
    assert summary["pipeline_ex"] == summary["generator_ex"] == round(right / len(examples), 4)
    assert [r["pipeline_match"] for r in rows] == [e not in wrong for e in examples]


def test_voting_samples_at_temperature_one(setup):
    examples, prompts = setup
    engine = Oracle(examples)
    with BatchExecutor(workers=0) as ex:
        evaluate_examples(examples, engine, prompts, ex, EvalOptions(retriever_samples=4))
    assert engine.calls[0][1:] == (4, 1.0)


@pytest.mark.slow  # a whole stage (or several) in subprocesses
def test_eval_cli_with_the_tiny_model(synth_dir, tiny_model_dir, tmp_path):
    import subprocess
    import sys

    out = tmp_path / "eval"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "acesql.cli",
            "eval",
            "--model",
            str(tiny_model_dir),
            "--dataset",
            str(synth_dir),
            "--format",
            "synth",
            "--split",
            "dev",
            "--limit",
            "3",
            "--max-new-tokens",
            "8",
            "--selection",
            "maj",
            "--candidates",
            "2",
            "--retriever-samples",
            "2",
            "--vote-threshold",
            "0.25",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    metrics = json.loads(proc.stdout)
    rows = [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines()]
    assert metrics["usable"] == len(rows) == 3
    # 8 greedy tokens of a random model hold no ```sql block: no SQL, so no question matches
    assert [r["pipeline_reason"] for r in rows] == ["no_sql"] * 3
    assert metrics["pipeline_ex"] == 0.0 and metrics["no_sql_rate"] == 1.0
    assert metrics["candidates"] == 2 and "maj_ex" in metrics and "non_gold_ratio" in metrics
    assert (metrics["retriever_samples"], metrics["vote_threshold"]) == (2, 0.25)
    assert len(json.loads((out / "predict_dev.json").read_text())) == 3
    assert "<img" in (out / "report.html").read_text()
    # a second run with another token cap, logged to MLflow: the comparison names the setting
    store = tmp_path / "mlflow.db"
    again = tmp_path / "eval-b"
    argv = proc.args[:]
    argv[argv.index("--max-new-tokens") + 1] = "9"
    argv[argv.index("--out") + 1] = str(again)
    logged = subprocess.run(
        [*argv, "--track", "--tracking-uri", f"sqlite:///{store}"], capture_output=True, text=True
    )
    assert logged.returncode == 0, logged.stderr
    compared = subprocess.run(
        [sys.executable, "-m", "acesql.cli", "eval", "compare", str(out), str(again)],
        capture_output=True,
        text=True,
    )
    assert compared.returncode == 0, compared.stderr
    assert "run with different settings: engine.max_new_tokens (A: 8, B: 9)" in compared.stdout
    assert re.search(r"pipeline EX\s+\S+%\s+\S+%\s+\+0\.0", compared.stdout)
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{store}")
    (run,) = client.search_runs([client.get_experiment_by_name("acesql").experiment_id])
    assert run.data.metrics["dev/usable"] == 3 and run.data.params["max_new_tokens"] == "9"
    assert {"rows.jsonl", "settings.json"} <= {
        a.path for a in client.list_artifacts(run.info.run_id)
    }
    missing = subprocess.run(
        [sys.executable, "-m", "acesql.cli", "eval", "--model", str(tiny_model_dir)],
        capture_output=True,
        text=True,
    )
    assert missing.returncode == 2 and "missing --dataset, --format" in missing.stderr


def test_the_command_and_the_stage_evaluate_alike(
    synth_dir, tiny_model_dir, tmp_path, capsys, monkeypatch
):
    """`acesql eval` builds the `evaluate` section and runs the stage's code: a folder the
    command left unfinished is resumed by the stage's code with the same settings."""
    import sys

    from acesql.cli import main
    from acesql.config import EvaluateSection, GenerationSection
    from acesql.data.filtering import filter_examples
    from acesql.data.loaders import load_dataset
    from acesql.eval import runner
    from acesql.eval.session import Evaluator, settings

    real = runner.evaluate_examples
    calls = []

    def killed_on_the_second_chunk(chunk, *args, **kwargs):
        calls.append(len(chunk))
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(chunk, *args, **kwargs)

    monkeypatch.setattr(runner, "evaluate_examples", killed_on_the_second_chunk)
    out = tmp_path / "eval"
    argv = ["acesql", "eval", "--model", str(tiny_model_dir), "--dataset", str(synth_dir)]
    argv += ["--format", "synth", "--limit", "3", "--max-new-tokens", "8", "--no-bf16"]
    monkeypatch.setattr(sys, "argv", [*argv, "--out", str(out), "--chunk-size", "2"])
    with pytest.raises(SystemExit):
        main()  # "aborted", as for Ctrl-C
    monkeypatch.setattr(runner, "evaluate_examples", real)

    section = EvaluateSection(
        model=str(tiny_model_dir),
        limit=3,
        generation=GenerationSection(max_new_tokens=8, temperature=0.0, bf16_autocast=False),
    )
    examples = filter_examples(
        load_dataset(synth_dir, "synth", "dev").examples, max_examples=3, seed=0
    )
    identity = settings(section, seed=0, reasoning=False, sample_values=0)
    partial = out / f".partial-{runner.fingerprint(str(tiny_model_dir), examples, identity)}.jsonl"
    assert partial.is_file()
    capsys.readouterr()
    with Evaluator(section, progress=False) as evaluator:
        summary = evaluator.evaluate(
            examples, dataset=str(synth_dir), split="dev", out=out, chunk_size=2
        )
    assert f"resuming {partial}: 2 of 3 questions done" in capsys.readouterr().err
    assert summary["usable"] == 3 and not partial.exists()


def test_eval_run_with_a_larger_limit_scores_only_the_questions_it_adds(
    synth_dir, tiny_model_dir, tmp_path, capsys, monkeypatch
):
    import sys

    from acesql.cli import main
    from acesql.eval import runner

    real = runner.evaluate_examples
    scored = []

    def counted(chunk, *args, **kwargs):
        scored.extend(e.index for e in chunk)
        return real(chunk, *args, **kwargs)

    monkeypatch.setattr(runner, "evaluate_examples", counted)
    out = tmp_path / "eval"
    argv = ["acesql", "eval", "run", "--model", str(tiny_model_dir), "--dataset", str(synth_dir)]
    argv += ["--format", "synth", "--max-new-tokens", "4", "--no-bf16", "--out", str(out)]
    for limit in ("2", "5"):
        monkeypatch.setattr(sys, "argv", [*argv, "--limit", limit])
        main()
    first, added = scored[:2], scored[2:]
    rows = [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines()]
    assert len(rows) > 2 and len(added) == len(rows) - 2 and not set(first) & set(added)
    assert sorted(r["index"] for r in rows) == sorted(first + added)
    assert "2 questions taken from its finished evaluation" in capsys.readouterr().err


def test_full_schema_ex_and_the_answer_policies(setup):
    from acesql.config import SelectionSection
    from acesql.data.schemas import SchemaCache
    from tests.fakes import RoleEngine, columns_answer, sql_answer

    examples, prompts = setup
    examples = [ex for ex in examples if len(ex.gold_columns) > 1]
    whole = {ex.index: prompts.schema_text(SchemaCache(0)(ex), None) for ex in examples}

    def generator(ex, n, options):  # right on the whole schema, else names a missing table
        right = whole[ex.index] in engine.prompt
        return [sql_answer(ex.sql if right else "SELECT x FROM nowhere")] * n

    def retriever(ex, n, options):  # leaves a gold column out
        return [columns_answer(ex.gold_columns[:1])] * n

    engine = RoleEngine(examples, generator, retriever)
    scored = {}
    with BatchExecutor(workers=0) as ex:
        for policy in ("pipeline", "full_schema", "pipeline_else_full", "by_size"):
            selection = SelectionSection(answer=policy, full_schema_tokens=1)
            scored[policy] = evaluate_examples(
                examples, engine, prompts, ex, EvalOptions(selection=selection)
            )
    summary, rows = scored["pipeline"]
    assert summary["pipeline_ex"] == summary["generator_ex"] == 0.0
    assert summary["full_schema_ex"] == 1.0 and summary["full_schema_correct"] == len(examples)
    assert all(r["full_ran"] and not r["pipeline_ran"] and r["full_agrees"] is None for r in rows)
    assert all(
        r["full_tokens"]
        == prompts.token_count(prompts.generator(SchemaCache(0)(e), None, e.question, e.evidence))
        for e, r in zip(examples, rows)
    )
    assert summary["answer_ex"] == 0.0 and summary["answer_full_share"] == 0.0
    assert scored["full_schema"][0]["answer_ex"] == 1.0
    # the pipeline's SQL did not run, so the rule falls back to the full schema's
    assert scored["pipeline_else_full"][0]["answer_ex"] == 1.0
    assert scored["pipeline_else_full"][0]["answer_full_share"] == 1.0
    # every full-schema prompt is longer than one token: by_size keeps the pipeline's
    assert scored["by_size"][0]["answer_ex"] == 0.0


def test_answers_that_agree_are_counted(setup):
    examples, prompts = setup
    with BatchExecutor(workers=0) as ex:
        summary, rows = evaluate_examples(examples, Oracle(examples), prompts, ex)
    assert summary["full_schema_ex"] == summary["pipeline_ex"] == summary["answer_ex"] == 1.0
    assert summary["full_agree_rate"] == 1.0 and all(r["full_agrees"] for r in rows)
    with BatchExecutor(workers=0) as ex:
        summary, rows = evaluate_examples(
            examples, Oracle(examples, wrong_for=examples[:1]), prompts, ex
        )
    # the first question's answers are both SELECT 1 WHERE 0: they agree and are both wrong
    assert rows[0]["full_agrees"] is True and rows[0]["full_match"] is False
