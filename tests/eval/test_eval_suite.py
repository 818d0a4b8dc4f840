"""The evaluation suite: maj@n voting, metrics, failure categories, restartable runs,
BIRD-format predictions, the HTML report and the comparison of two evaluations."""

import json
import os
import re
import shutil
from dataclasses import replace

import pytest

from acesql.config import SelectionSection
from acesql.data.loaders import load_dataset
from acesql.errors import DataError
from acesql.eval.compare import compare_table, load_evaluation
from acesql.eval.end_to_end import EvalOptions, evaluate_examples
from acesql.eval.metrics import failure_category, summarize
from acesql.eval.runner import evaluate_to_folder, fingerprint, model_digest, read_unfinished
from acesql.eval.sql_eval import load_predictions, write_bird_predictions
from acesql.host import host_facts
from acesql.locks import lock_folder
from acesql.sql.batch_executor import BatchExecutor
from acesql.sql.majority import majority_vote
from acesql.sql.sandbox import ExecResult
from tests.fakes import RoleEngine, columns_answer, sql_answer


def ok(*rows):
    return ExecResult(ok=True, rows=list(rows))


BAD = ExecResult(ok=False, error="near SELEC: syntax error")
CUT = ExecResult(ok=True, rows=[(1,)], truncated=True)

# (sqls, results, mode, expected winner, votes, valid, groups)
VOTES = [
    (["a", "b", "c"], [ok((1,)), ok((2,)), ok((2,))], "multiset", 1, 2, 3, 2),
    # a tie goes to the group sampled first
    (["a", "b", "c", "d"], [ok((2,)), ok((1,)), ok((1,)), ok((2,))], "multiset", 0, 2, 4, 2),
    # failed, empty and truncated SQL never vote, however many there are
    (["x", "y", "", "z", "w"], [BAD, BAD, ok((7,)), CUT, ok((3,))], "multiset", 4, 1, 1, 1),
    (["x"], [BAD], "multiset", None, 0, 0, 0),
    # floats equal to 6 digits and row order: one answer in multiset mode
    (["a", "b"], [ok((1.0000001,), (2,)), ok((2,), (1.0,))], "multiset", 0, 2, 2, 1),
    # bird compares sets: duplicates do not matter
    (["a", "b", "c"], [ok((1,)), ok((1,), (1,)), ok((5,))], "bird", 0, 2, 3, 2),
    # spider lets columns permute; multiset does not
    (["a", "b", "c"], [ok((1, "x")), ok(("x", 1)), ok((9, "y"))], "spider", 0, 2, 3, 2),
    (["a", "b", "c"], [ok((1, "x")), ok(("x", 1)), ok((9, "y"))], "multiset", 0, 1, 3, 3),
    # spider with ORDER BY in the representative: order matters
    (
        ["SELECT a FROM t ORDER BY a", "SELECT a FROM t"],
        [ok((1,), (2,)), ok((2,), (1,))],
        "spider",
        0,
        1,
        2,
        2,
    ),
]


@pytest.mark.parametrize("sqls, results, mode, winner, votes, valid, groups", VOTES)
def test_majority_vote(sqls, results, mode, winner, votes, valid, groups):
    vote = majority_vote(sqls, results, mode)
    assert (vote.winner, vote.votes, vote.valid, vote.groups) == (winner, votes, valid, groups)


def test_majority_vote_needs_one_result_per_sql():
    with pytest.raises(ValueError, match="2 SQLs but 1 results"):
        majority_vote(["a", "b"], [BAD], "multiset")


FAILED = {"usable": True, "pipeline_match": False}
CATEGORIES = [
    ({"usable": False}, "unusable"),
    ({"usable": True, "pipeline_match": True}, "correct"),
    ({**FAILED, "pipeline_reason": "no_sql"}, "no_sql"),
    ({**FAILED, "pipeline_reason": "pred_timeout"}, "timeout"),
    ({**FAILED, "pipeline_reason": "pred_error", "pred_error": "incomplete input"}, "syntax_error"),
    (
        {**FAILED, "pipeline_reason": "pred_error", "pred_error": "no such column: t.zz"},
        "schema_error",
    ),
    (
        {**FAILED, "pipeline_reason": "pred_error", "pred_error": "only SELECT ... allowed"},
        "other_error",
    ),
    (
        {**FAILED, "pipeline_reason": "different_rows", "pred_columns": ["t.a"]}
        | {"gold_columns": ["t.a", "t.b"]},
        "wrong_columns",
    ),
    (
        {**FAILED, "pipeline_reason": "different_row_count", "pred_columns": ["t.b", "t.a"]}
        | {"gold_columns": ["t.a", "t.b"]},
        "wrong_result",
    ),
    ({**FAILED, "pipeline_reason": "different_rows", "pred_columns": None}, "wrong_result"),
]


@pytest.mark.parametrize("row, category", CATEGORIES)
def test_failure_category(row, category):
    assert failure_category(row) == category


def _row(match, *, complexity="simple", recall=1.0, non_gold=None, maj=None, covers=True):
    return {
        "usable": True,
        "complexity": complexity,
        "pipeline_match": match,
        "pipeline_reason": "match" if match else "different_rows",
        "generator_match": True,
        "recall": recall,
        "precision": 0.5,
        "exact_columns": False,
        "covers_gold": covers,
        "retriever_fallback": False,
        "non_gold": non_gold,
        "pred_sql": "SELECT 1",
        "retriever_tokens": 10,
        "generator_tokens": 20,
        "candidates": 4,
        "maj_match": maj,
    }


def test_summary_by_hand():
    rows = [
        _row(True, non_gold=True, maj=True),
        _row(True, non_gold=False, maj=True, complexity="moderate"),
        _row(True, non_gold=None, maj=False),  # correct, columns unresolved: not in non-gold
        _row(False, recall=0.5, covers=False, maj=True, complexity="moderate"),
        {"usable": False, "complexity": "simple", "category": "unusable"},
    ]
    s = summarize(rows)
    assert (s["n"], s["usable"], s["unusable"]) == (5, 4, 1)
    assert (s["pipeline_correct"], s["pipeline_ex"]) == (3, 0.75)
    assert (s["maj_correct"], s["maj_ex"], s["candidates"]) == (3, 0.75, 4)
    assert (s["non_gold_ratio"], s["non_gold_of"]) == (0.5, 2)
    assert s["covers_gold"] == 0.75 and s["retriever_recall"] == 0.875
    assert s["tokens_per_query"] == 30.0
    assert s["failures"] == {"wrong_result": 1}
    assert s["by_complexity"]["moderate"]["pipeline_ex"] == 0.5
    assert s["by_complexity"]["simple"]["usable"] == 2
    assert "first_table_share" not in s  # rows without the counts


def test_first_table_shares_by_hand():
    rows = [
        _row(True) | {"retrieved_columns": ["a.x", "a.y", "b.z"], "gold_columns": ["b.z"]},
        _row(False) | {"retrieved_columns": ["a.x"], "gold_columns": ["a.x", "c.w"]},
    ]
    rows[0] |= {"retrieved_first_table": 2, "gold_first_table": 0}
    rows[1] |= {"retrieved_first_table": 1, "gold_first_table": 1}
    s = summarize(rows)
    assert s["first_table_share"] == 0.75 and s["gold_first_table_share"] == round(1 / 3, 4)
    assert s["by_complexity"]["simple"]["first_table_share"] == 0.75


class Scripted(RoleEngine):
    """Retriever answers the gold columns; the generator answers from `answers(example, i)`,
    i = sample number (0 for greedy). Counts prompts, and can fail after `fail_after` calls."""

    def __init__(self, examples, answers, fail_after=None):
        super().__init__(examples, self._generator)
        self.answers, self.fail_after = answers, fail_after
        self.calls, self.prompts = 0, 0

    def _generator(self, ex, n, options):
        greedy = options.get("temperature") == 0.0
        return [sql_answer(self.answers(ex, 0 if greedy else i + 1)) for i in range(n)]

    def generate(self, prompts, n=1, **options):
        if self.fail_after is not None and self.calls >= self.fail_after:
            raise KeyboardInterrupt("killed")
        self.calls += 1
        self.prompts += len(prompts)
        return super().generate(prompts, n, **options)


@pytest.fixture(scope="module")
def setup(synth_dir, tiny_model_dir):
    from acesql.models.base_model import load_tokenizer
    from acesql.models.prompts import PromptBuilder

    examples = load_dataset(synth_dir, "synth", "train").examples[:12]
    return examples, PromptBuilder(load_tokenizer(tiny_model_dir))


def test_maj_at_k_outvotes_a_wrong_greedy_answer(setup):
    examples, prompts = setup
    # greedy: wrong; samples 1 and 3: the gold SQL; sample 2: broken; sample 4: another answer
    answers = {0: "SELECT 12345", 1: None, 2: "SELEC nothing", 3: None, 4: "SELECT 54321"}
    engine = Scripted(examples, lambda ex, i: answers[i] or ex.sql)
    with BatchExecutor(workers=0) as executor:
        summary, rows = evaluate_examples(
            examples, engine, prompts, executor, EvalOptions(candidates=4)
        )
    assert summary["pipeline_ex"] == 0.0 and summary["maj_ex"] == 1.0
    assert all(r["maj_votes"] == 2 and r["maj_valid"] == 3 for r in rows)
    assert all(r["maj_sql"] == r["gold_sql"] for r in rows)
    assert {r["category"] for r in rows} == {"wrong_columns"}  # SELECT 12345 reads no column


def test_r3_chooses_among_the_same_candidates_that_maj_votes_on(setup):
    from tests.fakes import Judge

    examples, prompts = setup
    examples = examples[:4]
    # samples 1-2 agree on a wrong answer, 3 is the gold; the judge trusts the gold SQL
    answers = {0: "SELECT 12345", 1: "SELECT 54321", 2: "SELECT 54321", 3: None}
    engine = Scripted(examples, lambda ex, i: answers[i] or ex.sql)
    judge = Judge({ex.sql for ex in examples})
    selection = SelectionSection(method="r3", candidates=3)
    with BatchExecutor(workers=0) as executor:
        summary, rows = evaluate_examples(
            examples,
            engine,
            prompts,
            executor,
            EvalOptions(candidates=3, selection=selection),
            judge=judge,
        )
    assert summary["maj_ex"] == 0.0 and summary["r3_ex"] == 1.0 and summary["point_ex"] == 1.0
    assert summary["oracle_ex"] == 1.0 and summary["maj_given_recall"] == 0.0
    assert summary["r3_given_recall"] == 1.0 and summary["r3_correct"] == 4
    assert all(r["r3_sql"] == r["gold_sql"] and r["r3_judged_pairs"] == 1 for r in rows)
    # retriever, pipeline, ability, full schema, the samples: no resampling
    assert engine.prompts == 4 * 5
    assert "r3rs_ex" not in summary


@pytest.mark.parametrize("source", ["generator", "pipeline"])
def test_resampling_the_pipeline_reaches_a_column_the_retriever_left_out(setup, source):
    from acesql.data.schemas import SchemaCache
    from tests.fakes import Judge

    examples, prompts = setup
    examples = [ex for ex in examples if len(ex.gold_columns) > 1][:3]
    schemas = SchemaCache(0)
    full = {ex.index: prompts.schema_text(schemas(ex), ex.gold_columns) for ex in examples}

    def retriever(ex, n, options):  # greedy leaves a gold column out, samples name them all
        cut = options.get("temperature") == 0.0
        return [columns_answer(ex.gold_columns[:1] if cut else ex.gold_columns)] * n

    def generator(ex, n, options):  # right only when shown every gold column
        sql = ex.sql if full[ex.index] in engine.prompt else "SELECT 12345"
        return [sql_answer(sql)] * n

    class Contexts(Judge):
        def __init__(self, right):
            super().__init__(right)
            self.seen = []

        def pointwise_many(self, context, candidates):
            self.seen.append(context.schema)
            return super().pointwise_many(context, candidates)

    engine = RoleEngine(examples, generator, retriever)
    judge = Contexts({ex.sql for ex in examples})
    selection = {"method": "r3", "candidates": 2, "resample": True, "resample_candidates": 4}
    with BatchExecutor(workers=0) as executor:
        summary, rows = evaluate_examples(
            examples,
            engine,
            prompts,
            executor,
            EvalOptions(
                candidates=2, selection=SelectionSection(**selection, resample_from=source)
            ),
            judge=judge,
        )
    assert summary["pipeline_ex"] == 0.0 and summary["oracle_ex"] == 0.0
    assert all(r["r3rs_fired"] and r["r3rs_generated"] == 2 + 4 for r in rows)
    reached = source == "pipeline"
    assert all(r["r3rs_oracle"] is reached and r["r3rs_match"] is reached for r in rows)
    assert summary["r3rs_drawn_oracle"] == (1.0 if reached else 0.0)
    # after a pipeline draw the judge reads the widened schema the new candidates were shown
    assert any(full[ex.index] in judge.seen for ex in examples) is reached


def test_non_gold_ratio_counts_correct_sql_with_other_columns(setup, synth_dir):
    examples, prompts = setup
    # the gold SQL with an always-true condition on another column: same rows, other columns
    first = examples[0]
    table = first.gold_columns[0].split(".")[0]
    others = [c for c in _schema_columns(synth_dir, first) if c.startswith(table + ".")]
    extra = next(c for c in others if c not in first.gold_columns)

    def answer(ex, i):
        if ex is first:
            return f"SELECT * FROM ({ex.sql}) WHERE EXISTS (SELECT {extra} FROM {table})"
        return ex.sql

    with BatchExecutor(workers=0) as executor:
        summary, rows = evaluate_examples(examples, Scripted(examples, answer), prompts, executor)
    first_row = next(r for r in rows if r["index"] == first.index)
    assert first_row["pipeline_match"] and first_row["non_gold"] is True
    assert extra in first_row["pred_columns"]
    resolved = summary["non_gold_of"]
    assert resolved >= 1 and summary["non_gold_ratio"] == pytest.approx(1 / resolved, abs=1e-4)


def test_rows_count_the_columns_of_the_table_shown_first(setup):
    """The retriever answers the gold columns, so it names the first table exactly as often
    as the gold SQL uses it."""
    from acesql.sql.schema import Schema

    examples, prompts = setup
    with BatchExecutor(workers=0) as executor:
        summary, rows = evaluate_examples(
            examples, Scripted(examples, lambda ex, i: ex.sql), prompts, executor
        )
    for ex, row in zip(examples, rows):
        first = {c.id for c in Schema.from_sqlite(ex.db_path, n_samples=0).tables[0].columns}
        assert row["gold_first_table"] == len(first & set(ex.gold_columns))
        assert row["retrieved_first_table"] == row["gold_first_table"]
    assert sum(r["gold_first_table"] for r in rows) > 0
    assert summary["first_table_share"] == summary["gold_first_table_share"] > 0


def _schema_columns(synth_dir, example):
    from acesql.sql.schema import Schema

    return Schema.from_sqlite(example.db_path, n_samples=0).column_ids


def test_unusable_examples_are_counted_not_run(setup):
    examples, prompts = setup
    broken = [replace(examples[0], unusable="database missing")]
    engine = Scripted(examples, lambda ex, i: ex.sql)
    with BatchExecutor(workers=0) as executor:
        summary, rows = evaluate_examples(broken + examples[1:3], engine, prompts, executor)
    assert (summary["n"], summary["usable"], summary["unusable"]) == (3, 2, 1)
    assert rows[-1]["category"] == "unusable" and rows[-1]["unusable_reason"] == "database missing"


def _job(model_dir, *, candidates=None, **extra) -> dict:
    """The keyword arguments of one evaluation job into a folder: synth dev, multiset, seed 3."""
    settings = {"mode": "multiset", "seed": 3}
    if candidates is not None:
        settings = {"mode": "multiset", "candidates": candidates, "seed": 3}
    return dict(
        model=str(model_dir),
        dataset="synth",
        split="dev",
        settings=settings,
        progress=False,
        **extra,
    )


def test_a_killed_evaluation_resumes_without_redoing_chunks(setup, tmp_path, tiny_model_dir):
    examples, prompts = setup
    answer = lambda ex, i: ex.sql if ex.index % 2 else "SELECT 0"  # noqa: E731
    kwargs = _job(tiny_model_dir, candidates=2, chunk_size=4)
    with BatchExecutor(workers=0) as executor:
        # 3 chunks of 4; each chunk calls generate 3 times: the kill lands in the second chunk
        dying = Scripted(examples, answer, fail_after=4)
        with pytest.raises(KeyboardInterrupt):
            evaluate_to_folder(examples, dying, prompts, executor, tmp_path / "a", **kwargs)
        partial = list((tmp_path / "a").glob(".partial-*.jsonl"))
        chunks = [x for x in partial[0].read_text().splitlines() if '"chunk"' in x]
        assert len(partial) == 1 and len(chunks) == 1
        with partial[0].open("a") as fh:
            fh.write('{"chunk": "4-7-4", "rows": [')  # a write cut short by the kill
        resumed = Scripted(examples, answer)
        summary, rows = evaluate_to_folder(
            examples, resumed, prompts, executor, tmp_path / "a", **kwargs
        )
        assert resumed.calls == 2 * 3  # only the two unfinished chunks
        assert summary["seconds_total"] >= summary["seconds"]
        unbroken = Scripted(examples, answer)
        summary_b, rows_b = evaluate_to_folder(
            examples, unbroken, prompts, executor, tmp_path / "b", **kwargs
        )
    assert rows == rows_b and [r["index"] for r in rows] == [e.index for e in examples]
    assert summary["pipeline_ex"] == summary_b["pipeline_ex"] == 0.5
    assert not list((tmp_path / "a").glob(".partial-*"))
    for name in ("metrics.json", "rows.jsonl", "predict_dev.json", "report.html"):
        assert (tmp_path / "a" / name).is_file()
    # a changed setting is another job: nothing is reused
    changed = Scripted(examples, answer)
    kwargs["settings"] = {**kwargs["settings"], "candidates": 3}
    with BatchExecutor(workers=0) as executor:
        evaluate_to_folder(examples, changed, prompts, executor, tmp_path / "a", **kwargs)
    assert changed.calls == 3 * 3


def test_a_resumed_evaluation_goes_on_whatever_the_chunk_size(setup, tmp_path, tiny_model_dir):
    examples, prompts = setup
    answer = lambda ex, i: ex.sql if ex.index % 2 else "SELECT 0"  # noqa: E731
    kwargs = _job(tiny_model_dir)
    with BatchExecutor(workers=0) as executor:
        # chunks of 4, each two generate calls: killed in the third chunk, 8 questions saved
        dying = Scripted(examples, answer, fail_after=5)
        with pytest.raises(KeyboardInterrupt):
            evaluate_to_folder(
                examples, dying, prompts, executor, tmp_path / "a", chunk_size=4, **kwargs
            )
        resumed = Scripted(examples, answer)
        summary, rows = evaluate_to_folder(
            examples, resumed, prompts, executor, tmp_path / "a", chunk_size=3, **kwargs
        )
        unbroken = Scripted(examples, answer)
        _, rows_b = evaluate_to_folder(
            examples, unbroken, prompts, executor, tmp_path / "b", chunk_size=5, **kwargs
        )
    # the four questions left: chunks of 3 cut them into [8] and [9, 10, 11]
    assert resumed.prompts == 4 * 4 and resumed.calls == 2 * 2
    assert rows == rows_b and summary["usable"] == len(examples)


def test_a_larger_limit_into_a_finished_folder_scores_only_the_questions_it_adds(
    setup, tmp_path, tiny_model_dir, capsys
):
    examples, prompts = setup
    answer = lambda ex, i: ex.sql if ex.index % 3 else "SELECT 0"  # noqa: E731
    kwargs = _job(tiny_model_dir, chunk_size=4)
    with BatchExecutor(workers=0) as executor:
        first = Scripted(examples, answer)
        small, _ = evaluate_to_folder(
            examples[:8], first, prompts, executor, tmp_path / "a", **kwargs
        )
        assert small["model_sha256"] == model_digest(str(tiny_model_dir))
        assert small["host"] == host_facts()  # where it ran: bf16 answers depend on it
        widened = Scripted(examples, answer)
        summary, rows = evaluate_to_folder(
            examples, widened, prompts, executor, tmp_path / "a", **kwargs
        )
        whole = Scripted(examples, answer)
        summary_b, rows_b = evaluate_to_folder(
            examples, whole, prompts, executor, tmp_path / "b", **kwargs
        )
    assert "8 questions taken from its finished evaluation" in capsys.readouterr().err
    assert widened.prompts * 3 == whole.prompts  # 4 of the 12 questions scored
    assert rows == rows_b and summary["usable"] == 12
    assert summary["pipeline_ex"] == summary_b["pipeline_ex"] == round(8 / 12, 4)
    assert summary["seconds_total"] >= small["seconds_total"]
    assert not list((tmp_path / "a").glob(".partial-*"))
    # another setting, or metrics that do not say which weights made them: all scored again
    for change in ("digest", "settings"):
        metrics = json.loads((tmp_path / "a" / "metrics.json").read_text())
        if change == "digest":
            del metrics["model_sha256"]
            (tmp_path / "a" / "metrics.json").write_text(json.dumps(metrics))
        again = Scripted(examples, answer)
        seed = 4 if change == "settings" else 3
        with BatchExecutor(workers=0) as executor:
            evaluate_to_folder(
                examples,
                again,
                prompts,
                executor,
                tmp_path / "a",
                **{**kwargs, "settings": {"mode": "multiset", "seed": seed}},
            )
        assert again.prompts == whole.prompts, change
        if change == "digest":
            assert "record no model digest" in capsys.readouterr().err


def test_the_bar_names_the_part_running_and_outputs_at_the_token_cap():
    from acesql.eval.runner import _Watched
    from acesql.models.engine import Completion

    class Bar:
        def set_postfix_str(self, text, refresh=True):
            self.text = text

    class Looping:
        def generate(self, prompts, n=1, **options):
            return [[Completion("SELECT SELECT", finish_reason="length")] * n for _ in prompts]

    bar = Bar()
    watched = _Watched(Looping(), bar)
    watched.phase("retrieving")
    assert bar.text == "retrieving"
    watched.generate(["a", "b"], n=2)
    assert bar.text == "retrieving, 4 outputs at the token cap"


def test_the_resume_fingerprint_follows_the_model_contents_not_its_path(
    setup, tmp_path, tiny_model_dir
):
    examples, _ = setup
    settings = {"mode": "multiset", "candidates": 2, "seed": 3}
    copy = tmp_path / "retrained"
    shutil.copytree(tiny_model_dir, copy)
    (copy / "steps.jsonl").write_text('{"step": 1, "seconds": 12.5}\n')  # a run's log, not weights
    os.utime(copy / "model.safetensors", ns=(0, 0))
    original = fingerprint(str(tiny_model_dir), examples, settings)
    assert fingerprint(str(copy), examples, settings) == original
    weights = bytearray((copy / "model.safetensors").read_bytes())
    weights[-1] ^= 1  # one bit of one weight
    (copy / "model.safetensors").write_bytes(bytes(weights))
    assert fingerprint(str(copy), examples, settings) != original
    assert model_digest("org/hub-model") == "org/hub-model"


def test_a_run_over_questions_still_arriving_stays_unfinished_and_goes_on(setup, tmp_path):
    examples, prompts = setup
    kwargs = dict(model="m", dataset="synth", split="dev", settings={}, progress=False)
    kwargs |= dict(chunk_size=4, growing=examples)
    with BatchExecutor(workers=0) as executor:
        first = Scripted(examples, lambda ex, i: ex.sql)
        summary, rows = evaluate_to_folder(
            examples[:8], first, prompts, executor, tmp_path / "a", **kwargs
        )
        assert summary["usable"] == 8 and first.calls == 2 * 2  # two chunks, two calls each
        # nothing finished: the rows stay in the partial file, where --compare reads them
        assert not (tmp_path / "a" / "metrics.json").exists()
        assert len(read_unfinished(tmp_path / "a")[1]) == 8
        later = Scripted(examples, lambda ex, i: ex.sql)
        kwargs["growing"] = None  # every question there now
        summary, rows = evaluate_to_folder(
            examples, later, prompts, executor, tmp_path / "a", **kwargs
        )
    assert later.calls == 1 * 2 and summary["usable"] == len(examples) == 12
    assert (tmp_path / "a" / "metrics.json").is_file()


def test_a_second_evaluation_into_a_busy_folder_stops_and_changes_nothing(setup, tmp_path):
    examples, prompts = setup
    kwargs = dict(model="m", dataset="synth", split="dev", settings={}, progress=False)
    held = lock_folder(tmp_path / "a")  # what a running evaluation holds
    engine = Scripted(examples[:2], lambda ex, i: ex.sql)
    try:
        with (
            BatchExecutor(workers=0) as executor,
            pytest.raises(DataError, match="being written by another evaluation"),
        ):
            evaluate_to_folder(examples[:2], engine, prompts, executor, tmp_path / "a", **kwargs)
    finally:
        os.close(held)
    assert engine.calls == 0
    assert [p.name for p in (tmp_path / "a").iterdir()] == [".lock"]
    with BatchExecutor(workers=0) as executor:  # released: the folder is free again
        summary, _ = evaluate_to_folder(
            examples[:2], engine, prompts, executor, tmp_path / "a", **kwargs
        )
    assert summary["pipeline_ex"] == 1.0 and engine.calls > 0


def test_bird_predictions_round_trip(tmp_path):
    rows = [
        {"index": 0, "db_id": "shop", "pred_sql": "SELECT name\nFROM t WHERE x = 'a\tb'"},
        {"index": 7, "db_id": "school", "pred_sql": None},
    ]
    path = tmp_path / "predict_dev.json"
    write_bird_predictions(path, rows)
    raw = json.loads(path.read_text())
    assert raw["7"] == "\t----- bird -----\tschool"
    assert raw["0"].endswith("\t----- bird -----\tshop")
    assert load_predictions(path) == {0: rows[0]["pred_sql"], 7: ""}


def test_report_shows_plots_failures_and_escapes_text(setup, tmp_path):
    from acesql.eval.report import write_report

    examples, prompts = setup
    examples = [replace(examples[0], question="<b>bold</b>?")]
    engine = Scripted(examples, lambda ex, i: "SELECT name FROM WHERE")
    with BatchExecutor(workers=0) as executor:
        summary, rows = evaluate_examples(
            examples, engine, prompts, executor, EvalOptions(candidates=2)
        )
    write_report(tmp_path / "r.html", {**summary, "split": "dev", "dataset": "d"}, rows)
    page = (tmp_path / "r.html").read_text()
    assert len(re.findall(r'src="data:image/png;base64,[A-Za-z0-9+/=]{200,}"', page)) == 3
    assert "syntax_error" in page and "SELECT name FROM WHERE" in page and "maj@2" in page
    assert "&lt;b&gt;bold&lt;/b&gt;?" in page and "<b>bold</b>" not in page


def _write_metrics(folder, split, pipeline_ex, simple_ex):
    folder.mkdir(parents=True)
    summary = {
        "split": split,
        "usable": 10,
        "pipeline_ex": pipeline_ex,
        "generator_ex": 0.5,
        "model": "m",
        "by_complexity": {
            "highly complex": {"usable": 2, "pipeline_ex": 0.0},
            "simple": {"usable": 4, "pipeline_ex": simple_ex},
        },
    }
    (folder / "metrics.json").write_text(json.dumps(summary))


def test_compare_two_result_folders(tmp_path):
    _write_metrics(tmp_path / "a" / "dev", "dev", 0.1, 0.25)
    _write_metrics(tmp_path / "b", "dev", 0.3, 0.5)
    a, b = load_evaluation(str(tmp_path / "a")), load_evaluation(str(tmp_path / "b"))
    table = compare_table(a, b, "a", "b")
    assert re.search(r"pipeline EX\s+10\.0%\s+30\.0%\s+\+20\.0", table)
    assert re.search(r"simple: pipeline EX\s+25\.0%\s+50\.0%\s+\+25\.0", table)
    assert re.search(r"generator EX\s+50\.0%\s+50\.0%\s+\+0\.0", table)
    assert table.index("simple: pipeline EX") < table.index("highly complex: pipeline EX")


def test_compare_reads_mlflow_runs(tmp_path):
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    client = MlflowClient(uri)
    experiment = client.create_experiment("e")
    run = client.create_run(experiment).info.run_id
    client.log_metric(run, "dev/pipeline_ex", 0.2)
    client.log_metric(run, "dev/simple/pipeline_ex", 0.4)
    _write_metrics(tmp_path / "b", "dev", 0.3, 0.5)
    table = compare_table(load_evaluation(run, uri), load_evaluation(str(tmp_path / "b")))
    assert re.search(r"pipeline EX\s+20\.0%\s+30\.0%\s+\+10\.0", table)
    assert re.search(r"simple: pipeline EX\s+40\.0%\s+50\.0%\s+\+10\.0", table)
    with pytest.raises(DataError, match="neither a result folder nor an MLflow run id"):
        load_evaluation("no-such-thing", uri)
    with pytest.raises(DataError, match="no MLflow run"):
        load_evaluation("0" * 32, uri)


@pytest.mark.external
@pytest.mark.slow
@pytest.mark.timeout(3900)
@pytest.mark.spider
def test_the_sft_default_on_50_spider_questions(spider_dir, tmp_path):
    """End to end on human-written questions: `make run`'s SFT model, 50 Spider dev questions."""
    import subprocess
    import sys
    from pathlib import Path

    model = Path(__file__).parents[2] / "models" / "sft"
    if not (model / "model.safetensors").is_file():
        pytest.skip("models/sft is missing: `make run` trains it")
    command = [sys.executable, "-m", "acesql.cli", "eval", "--model", str(model)]
    command += ["--dataset", str(spider_dir), "--format", "spider", "--limit", "50"]
    command += ["--selection", "maj", "--candidates", "2", "--max-new-tokens", "128"]
    command += ["--out", str(tmp_path)]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=3600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    metrics = json.loads(proc.stdout)
    assert metrics["n"] == 50 and metrics["usable"] + metrics["unusable"] == 50
    assert metrics["mode"] == "spider" and metrics["candidates"] == 2
    rows = [json.loads(line) for line in (tmp_path / "rows.jsonl").read_text().splitlines()]
    right = sum(r["pipeline_match"] for r in rows if r["usable"])
    # pipeline EX is the share of usable questions whose SQL matched, as the rows record it
    assert metrics["pipeline_ex"] == round(right / metrics["usable"], 4)
    assert metrics["tokens_per_query"] > 0
    assert len(json.loads((tmp_path / "predict_dev.json").read_text())) == 50
    assert "<img" in (tmp_path / "report.html").read_text()


def _bird_layout(sample_dir, out):
    """The sample dataset rearranged as a BIRD dev folder, with difficulties and evidence."""
    import shutil

    records = json.loads((sample_dir / "dev.json").read_text())
    levels = ("simple", "moderate", "challenging")
    bird = [
        {
            "question_id": i,
            "db_id": r["db_id"],
            "question": r["question"],
            "evidence": "",
            "SQL": r["query"],
            "difficulty": levels[i % 3],
        }
        for i, r in enumerate(records)
    ]
    (out / "dev_databases").mkdir(parents=True)
    for db in (sample_dir / "database").iterdir():
        shutil.copytree(db, out / "dev_databases" / db.name)
    (out / "dev.json").write_text(json.dumps(bird))
    shutil.copy(sample_dir / "tables.json", out / "dev_tables.json")
    return out


def test_bird_layout_evaluation_and_its_official_predictions(sample_dir, tmp_path, setup):
    import subprocess
    import sys

    root = _bird_layout(sample_dir, tmp_path / "bird")
    examples = load_dataset(root, "bird", "dev").examples
    for ex in examples:  # BIRD files carry no gold columns; the scripted retriever needs them
        ex.gold_columns = sorted(_gold(ex))
    prompts = setup[1]
    engine = Scripted(examples, lambda ex, i: ex.sql if ex.index % 4 else "SELECT 1")
    with BatchExecutor(workers=0) as executor:
        summary, _ = evaluate_to_folder(
            examples,
            engine,
            prompts,
            executor,
            tmp_path / "out",
            model="scripted",
            dataset=str(root),
            split="dev",
            settings={"mode": "bird"},
            progress=False,
        )
    assert summary["mode"] == "bird" and list(summary["by_complexity"]) == [
        "simple",
        "moderate",
        "challenging",
    ]
    wrong = sum(1 for e in examples if e.index % 4 == 0)
    assert summary["pipeline_correct"] == len(examples) - wrong
    # the exported predict_dev.json scores the same with the file-based scorer
    proc = subprocess.run(
        [sys.executable, "-m", "acesql.cli", "evaluate-sql", "--dataset", str(root)]
        + ["--format", "bird", "--mode", "bird", "--no-progress"]
        + ["--predictions", str(tmp_path / "out" / "predict_dev.json")],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["correct"] == summary["pipeline_correct"]


def _gold(example):
    from acesql.sql.columns import extract_columns
    from acesql.sql.schema import Schema

    return extract_columns(example.sql, Schema.from_sqlite(example.db_path, n_samples=0))


@pytest.mark.slow
def test_eval_cli_killed_with_sigkill_resumes(synth_dir, tiny_model_dir, tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "eval"
    command = [sys.executable, "-m", "acesql.cli", "eval", "--model", str(tiny_model_dir)]
    command += ["--dataset", str(synth_dir), "--format", "synth", "--split", "train"]
    command += ["--limit", "8", "--chunk-size", "2", "--max-new-tokens", "4", "--out", str(out)]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        partial = list(out.glob(".partial-*.jsonl"))
        if partial and '"chunk"' in partial[0].read_text():
            os.kill(proc.pid, signal.SIGKILL)
            break
        time.sleep(0.05)
    proc.wait()
    if proc.returncode != -signal.SIGKILL:
        pytest.skip("the evaluation finished before it could be killed")
    lines = partial[0].read_text().splitlines()
    done = sum(1 for line in lines if _is_json(line) and '"chunk"' in line)
    assert 1 <= done < 4 and not (out / "metrics.json").exists()
    again = subprocess.run(command, capture_output=True, text=True, timeout=240)
    assert again.returncode == 0, again.stderr[-2000:]
    assert f"{2 * done} of 8 questions done" in again.stderr
    assert json.loads(again.stdout)["n"] == 8
    assert len((out / "rows.jsonl").read_text().splitlines()) == 8


def _is_json(line: str) -> bool:
    try:
        json.loads(line)
    except json.JSONDecodeError:
        return False
    return True


def _write_rows(folder, split, right, gold_covered=None):
    """metrics.json and rows.jsonl of `len(right)` questions; `right[i]`: question i solved."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "metrics.json").write_text(json.dumps({"split": split, "pipeline_ex": 0.0}))
    rows = [
        {
            "db_id": "d",
            "index": i,
            "usable": True,
            "category": "ok" if ok else "wrong_result",
            "pipeline_match": ok,
            "generator_match": True,
            "recall": 0.5 + 0.5 * ok,
            "covers_gold": None,
        }
        for i, ok in enumerate(right)
    ]
    rows.append({"db_id": "d", "index": 99, "usable": False, "category": "unusable"})
    (folder / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_paired_comparison_on_the_questions_both_scored(tmp_path):
    from acesql.eval.compare import load_rows, paired_table

    a = [True] * 5 + [False] * 15
    b = [True] * 13 + [False] * 7  # B solves A's 5 and 8 more: 0 vs 8 discordant
    _write_rows(tmp_path / "a" / "dev", "dev", a)
    _write_rows(tmp_path / "b" / "dev", "dev", b + [True])  # one question A never saw
    table = paired_table(load_rows(str(tmp_path / "a")), load_rows(str(tmp_path / "b")))
    assert "dev: paired, on the 20 questions both scored" in table
    line = next(x for x in table.splitlines() if x.startswith("pipeline EX"))
    # 25% -> 65%, +40 points, McNemar on 0 vs 8: 2 x 0.5^8
    assert re.search(
        r"25\.0%\s+65\.0%\s+\+40\.0\s+\[\+\d+\.\d, \+\d+\.\d\]\s+0\s+8\s+0\.0078", line
    )
    low, high = (float(v) for v in re.search(r"\[(\S+), (\S+)\]", line).groups())
    assert 15 < low < 40 < high < 65
    generator = next(x for x in table.splitlines() if x.startswith("generator EX"))
    assert re.search(r"\+0\.0\s+\[\+0\.0, \+0\.0\]\s+0\s+0\s+1\b", generator)
    recall = next(x for x in table.splitlines() if x.startswith("retriever recall"))
    assert recall.rstrip().endswith("-")  # not right/wrong: no McNemar
    assert "covers gold" not in table  # no values on either side


def test_compare_cli_prints_the_paired_section(tmp_path):
    from click.testing import CliRunner

    from acesql.cli import cli

    _write_rows(tmp_path / "a", "dev", [False] * 10)
    _write_rows(tmp_path / "b", "dev", [True] * 10)
    result = CliRunner().invoke(cli, ["eval", "compare", str(tmp_path / "a"), str(tmp_path / "b")])
    assert result.exit_code == 0, result.output
    assert re.search(r"pipeline EX\s+0\.0%\s+100\.0%\s+\+100\.0.*0\s+10\s+0\.00195", result.output)
    (tmp_path / "b" / "rows.jsonl").unlink()
    result = CliRunner().invoke(cli, ["eval", "compare", str(tmp_path / "a"), str(tmp_path / "b")])
    assert "no per-question rows on both sides" in result.output


def test_rows_kept_without_their_metrics_still_compare(tmp_path):
    """A folder holding only rows.jsonl (rows kept in a repository) is one split, `rows`."""
    from click.testing import CliRunner

    from acesql.cli import cli

    for side, ok in (("a", False), ("b", True)):
        rows = [
            dict(UNFINISHED_ROW, index=i, pipeline_match=ok, generator_match=ok) for i in range(6)
        ]
        (tmp_path / side).mkdir()
        (tmp_path / side / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = CliRunner().invoke(cli, ["eval", "compare", str(tmp_path / "a"), str(tmp_path / "b")])
    assert result.exit_code == 0, result.output
    assert "rows: paired, on the 6 questions both scored" in result.output
    assert re.search(r"pipeline EX\s+0\.0%\s+100\.0%\s+\+100\.0.*0\s+6\s+0\.031", result.output)


def test_paired_rows_come_from_mlflow_runs_too(tmp_path):
    from mlflow import MlflowClient

    from acesql.eval.compare import load_rows, paired_table

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    client = MlflowClient(uri)
    experiment = client.create_experiment("e", artifact_location=str(tmp_path / "artifacts"))
    run = client.create_run(experiment).info.run_id
    _write_rows(tmp_path / "logged", "dev", [False] * 6)
    for name in ("metrics.json", "rows.jsonl"):
        client.log_artifact(run, str(tmp_path / "logged" / name))
    _write_rows(tmp_path / "b", "dev", [True] * 6)
    rows = load_rows(run, uri)
    assert list(rows) == ["dev"] and len(rows["dev"]) == 7
    assert re.search(r"0\s+6\s+0\.031", paired_table(rows, load_rows(str(tmp_path / "b"))))
    bare = client.create_run(experiment).info.run_id  # a run without rows: nothing to pair
    assert load_rows(bare, uri) == {}


UNFINISHED_ROW = dict(
    db_id="d",
    usable=True,
    complexity="simple",
    pipeline_reason="wrong_result",
    recall=None,
    retriever_fallback=False,
    pred_sql="SELECT 1",
    retriever_tokens=10,
    generator_tokens=20,
)


def _write_unfinished(folder, rows_per_chunk, header=None):
    """A `.partial-*.jsonl` as a killed `acesql eval --out` leaves it, plus a line cut short."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"header": header})] if header else []
    for number, rights in enumerate(rows_per_chunk):
        rows = [
            dict(UNFINISHED_ROW, index=10 * number + i, pipeline_match=ok, generator_match=ok)
            for i, ok in enumerate(rights)
        ]
        lines.append(json.dumps({"chunk": f"c{number}", "rows": rows}))
    (folder / ".partial-0123456789abcdef.jsonl").write_text("\n".join(lines) + '\n{"chunk": "c9')


def test_an_unfinished_evaluation_compares_on_its_finished_questions(tmp_path):
    from click.testing import CliRunner

    from acesql.cli import cli

    header = {"model": "m", "dataset": "x", "split": "dev", "questions": 40}
    _write_unfinished(tmp_path / "a", [[False] * 4, [False] * 4], header)
    _write_unfinished(tmp_path / "b", [[True] * 4], header)  # B got through one chunk
    result = CliRunner().invoke(cli, ["eval", "compare", str(tmp_path / "a"), str(tmp_path / "b")])
    assert result.exit_code == 0, result.output
    assert f"{tmp_path / 'a'}: unfinished, 8 of 40 questions scored so far" in result.output
    assert re.search(r"questions\s+8\s+4\s+-4", result.output)
    assert "dev: paired, on the 4 questions both scored" in result.output
    assert re.search(r"pipeline EX\s+0\.0%\s+100\.0%\s+\+100\.0.*0\s+4\s+0\.125", result.output)

    # a copy kept under the visible name reads the same
    for side in ("a", "b"):
        (partial,) = (tmp_path / side).glob(".partial-*.jsonl")
        partial.rename(tmp_path / side / "rows.partial.jsonl")
    again = CliRunner().invoke(cli, ["eval", "compare", str(tmp_path / "a"), str(tmp_path / "b")])
    assert again.exit_code == 0 and again.output == result.output


def test_unfinished_files_without_a_header_or_two_of_them(tmp_path):
    from acesql.eval.compare import load_rows

    _write_unfinished(tmp_path, [[True, False]])
    assert read_unfinished(tmp_path)[0] == {}
    assert [r["index"] for r in load_rows(str(tmp_path))["unfinished"]] == [0, 1]
    (tmp_path / ".partial-fedcba9876543210.jsonl").write_text("")
    with pytest.raises(DataError, match="several unfinished evaluations"):
        read_unfinished(tmp_path)


def _pipeline_run(client, experiment, tmp_path, name, splits):
    """A pipeline's MLflow run with one evaluate child per split: {split: [solved, ...]}."""
    parent = client.create_run(experiment, tags={"stage": "pipeline"}).info.run_id
    for split, right in splits.items():
        child = client.create_run(
            experiment, tags={"stage": "evaluate", "mlflow.parentRunId": parent}
        ).info.run_id
        client.log_metric(child, f"{split}/pipeline_ex", sum(right) / len(right))
        client.log_metric(child, f"{split}/usable", len(right))
        folder = tmp_path / name / split
        _write_rows(folder, split, right)
        for file in ("metrics.json", "rows.jsonl"):
            client.log_artifact(child, str(folder / file))
    return parent


def test_compare_takes_pipeline_run_ids_and_says_when_sides_differ(tmp_path):
    from click.testing import CliRunner
    from mlflow import MlflowClient

    from acesql.cli import cli

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    client = MlflowClient(uri)
    experiment = client.create_experiment("e")
    a = _pipeline_run(client, experiment, tmp_path, "a", {"test_ood": [False] * 8 + [True] * 2})
    b = _pipeline_run(
        client, experiment, tmp_path, "b", {"test_ood": [True] * 6, "dev": [True] * 4}
    )
    result = CliRunner().invoke(cli, ["eval", "compare", a, b, "--tracking-uri", uri])
    assert result.exit_code == 0, result.output
    assert re.search(r"pipeline EX\s+20\.0%\s+100\.0%\s+\+80\.0", result.output)
    assert "note: dev: only B has it" in result.output
    assert "note: test_ood: A scored 10 questions, B 6" in result.output
    assert "test_ood: paired, on the 6 questions both scored" in result.output

    skipped = client.create_run(experiment, tags={"stage": "pipeline"}).info.run_id
    client.log_metric(skipped, "evaluate.test_ood.pipeline_ex", 0.25)  # DVC skipped evaluate
    assert load_evaluation(skipped, uri) == {"test_ood": {"pipeline_ex": 0.25}}
    empty = client.create_run(experiment, tags={"stage": "pipeline"}).info.run_id
    with pytest.raises(DataError, match="evaluated nothing"):
        load_evaluation(empty, uri)


def test_a_selection_some_rows_lack_is_scored_on_the_rows_that_have_it():
    from acesql.eval.metrics import summarize

    rows = [
        dict(
            UNFINISHED_ROW,
            index=i,
            pipeline_match=False,
            generator_match=False,
            candidates=4,
            maj_match=True,
            oracle_match=i < 3,
            prm_match=False,
        )
        for i in range(4)
    ]
    rows[2]["prm_vote_match"], rows[3]["prm_vote_match"] = True, False  # a resumed run's rows
    out = summarize(rows)
    assert out["prm_vote_correct"] == 1 and out["prm_vote_ex"] == 0.5
    assert out["prm_vote_given_recall"] == 1.0  # of its two rows only row 2 has a right one
    assert out["prm_given_recall"] == 0.0 and out["maj_given_recall"] == 1.0


def test_selections_of_one_run_are_paired_against_its_majority_vote(tmp_path):
    from click.testing import CliRunner

    from acesql.cli import cli

    # 10 questions, 4 candidates each: maj@4 right on the first 4; the PRM pick right on
    # questions 2-7 (maj only 2, PRM only 4); a right candidate in the pool of the first 8
    rows = [
        dict(
            UNFINISHED_ROW,
            index=i,
            candidates=4,
            maj_match=i < 4,
            prm_match=2 <= i < 8,
            oracle_match=i < 8,
            pipeline_match=i < 3,
        )
        for i in range(10)
    ]
    for i in range(5, 10):  # a selection only the later rows of a resumed run have
        rows[i]["prm_vote_match"] = i in (5, 6)
    rows.append({"db_id": "d", "index": 99, "usable": False, "category": "unusable"})
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = CliRunner().invoke(cli, ["eval", "selections", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    assert "rows: 10 questions, 4 candidates each" in result.output
    lines = result.output.splitlines()
    maj = next(x for x in lines if x.startswith("maj@n"))
    assert re.search(r"40\.0%\s+4/8$", maj)
    prm = next(x for x in lines if x.startswith("PRM best-of-4"))
    # 60% - 40%, discordant 2 / 4, exact McNemar 0.6875; 6 of the 8 recalled
    assert re.search(r"60\.0%\s+\+20\.0\s+\[\S+, \S+\]\s+2\s+4\s+0\.688\s+6/8$", prm), prm
    greedy = next(x for x in lines if x.startswith("greedy pipeline"))
    assert re.search(r"30\.0%\s+-10\.0\s+\[\S+, \S+\]\s+1\s+0\s+1\s+3/8$", greedy), greedy
    assert "r3 ranking" not in result.output  # no such field in the rows
    # on its 5 rows: maj@4 right on none, the vote on 2; 3 of them hold a right candidate
    vote = next(x for x in lines if x.startswith("PRM-weighted vote (5 q)"))
    assert re.search(r"40\.0%\s+\+40\.0\s+\[\S+, \S+\]\s+0\s+2\s+0\.5\s+2/3$", vote), vote

    (tmp_path / "greedy").mkdir()
    plain = [dict(UNFINISHED_ROW, index=i) for i in range(3)]
    (tmp_path / "greedy" / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in plain))
    result = CliRunner().invoke(cli, ["eval", "selections", str(tmp_path / "greedy")])
    assert result.exit_code == 2 and "holds no rows with candidates" in result.output


@pytest.mark.parametrize(
    "content, message",
    [
        (b"[]", "holds a JSON list, not the object"),
        (b'{"split": "dev", "pipeline_ex": 0.5, "note": "caf\xe9"}', "is not UTF-8 text"),
        (b"{", "is not JSON"),
    ],
)
def test_compare_names_a_malformed_metrics_file(tmp_path, content, message):
    from click.testing import CliRunner

    from acesql.cli import cli

    for side in "ab":
        (tmp_path / side).mkdir()
        (tmp_path / side / "metrics.json").write_text('{"split": "dev", "pipeline_ex": 0.5}')
    (tmp_path / "b" / "metrics.json").write_bytes(content)
    result = CliRunner().invoke(cli, ["eval", "compare", str(tmp_path / "a"), str(tmp_path / "b")])
    assert isinstance(result.exception, DataError) and message in str(result.exception)


def test_a_resume_file_with_broken_chunks_redoes_their_questions(tmp_path):
    from acesql.eval.runner import _read_partial

    partial = tmp_path / ".partial-0.jsonl"
    lines = [
        {"header": {"questions": 4}},
        {"chunk": "0-1-2", "rows": [{"index": 0, "usable": True}, {"index": 1}], "seconds": 2.5},
        {"chunk": "2-2-1", "rows": []},  # saved nothing: question 2 is still to do
        {"chunk": "3-3-1", "rows": ["not a row"]},
        [1, 2],
    ]
    partial.write_text("".join(json.dumps(x) + "\n" for x in lines) + '{"chunk": "4')
    done, seconds = _read_partial(partial)
    assert sorted(done) == [0, 1] and seconds == 2.5


def test_comparing_run_ids_without_a_store_creates_none(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from acesql.cli import cli

    monkeypatch.chdir(tmp_path)
    ids = ["0" * 32, "1" * 32]
    result = CliRunner().invoke(cli, ["eval", "compare", *ids])
    assert isinstance(result.exception, DataError)
    assert "no MLflow store at sqlite:///mlflow.db" in str(result.exception)
    assert list(tmp_path.iterdir()) == []
