"""Rescoring stored candidates: another judge or a larger n on the samples an r3 run drew."""

import json

import pytest
from click.testing import CliRunner

from acesql.cli import cli
from acesql.config import SelectionSection
from acesql.data.loaders import load_dataset
from acesql.errors import AcesqlError, DataError
from acesql.eval.compare import load_rows
from acesql.eval.end_to_end import EvalOptions, evaluate_examples
from acesql.eval.rescore import matching_examples
from acesql.eval.runner import read_unfinished
from acesql.eval.session import stored_candidates
from acesql.sql.batch_executor import BatchExecutor
from tests.fakes import Judge, RoleEngine, sql_answer

# sample 0 is greedy; 1-3 the first pool; the draw of 4 is samples 1-4 again
WRONG = {1: "SELECT 12345", 2: "SELECT 54321", 4: "SELECT 777"}
R3 = SelectionSection(method="r3", candidates=3, resample=True, resample_candidates=4)
SELECTED = ("maj_", "point_", "r3_", "r3rs_", "oracle_match")


class Sampler(RoleEngine):
    def __init__(self, examples):
        super().__init__(examples, self._generator)
        self.calls = 0

    def _generator(self, ex, n, options):
        greedy = options.get("temperature") == 0.0
        return [sql_answer(WRONG.get(0 if greedy else i + 1, ex.sql)) for i in range(n)]

    def generate(self, prompts, n=1, **options):
        self.calls += 1
        return super().generate(prompts, n, **options)


@pytest.fixture(scope="module")
def stored_run(synth_dir, tiny_model_dir):
    from acesql.models.base_model import load_tokenizer
    from acesql.models.prompts import PromptBuilder

    examples = load_dataset(synth_dir, "synth", "train").examples[:4]
    prompts = PromptBuilder(load_tokenizer(tiny_model_dir))
    with BatchExecutor(workers=0) as executor:
        # a judge that trusts no SQL: the auditor fires on every question
        _, rows = evaluate_examples(
            examples,
            Sampler(examples),
            prompts,
            executor,
            EvalOptions(candidates=3, selection=R3),
            judge=Judge(set()),
        )
    return examples, prompts, {r["index"]: r for r in rows}


class Scorer:
    """A process scorer of the direct view that rewards the SQL texts in `right`."""

    def __init__(self, right: set[str], view: str = "direct"):
        self.right, self.view, self.seen = right, view, []

    def rewards(self, question, schema_text, evidence, db_path, completions, *, schema):
        self.seen.append((schema_text, schema))
        return [0.9 if c.text in self.right else None if not c.text else 0.2 for c in completions]


def rescore(stored_run, judge, k, selection, scorer=None):
    examples, prompts, stored = stored_run
    engine = Sampler(examples)
    with BatchExecutor(workers=0) as executor:
        summary, rows = evaluate_examples(
            examples,
            engine,
            prompts,
            executor,
            EvalOptions(candidates=k, selection=selection),
            judge=judge,
            process_scorer=scorer,
            stored=stored,
        )
    assert engine.calls == 0  # nothing generated
    return summary, rows


def test_the_same_judge_on_the_same_candidates_gives_the_stored_run_back(stored_run):
    _, _, stored = stored_run
    assert all(r["r3rs_fired"] and len(r["r3rs_drawn"]) == 4 for r in stored.values())
    _, rows = rescore(stored_run, Judge(set()), 3, R3)
    for row in rows:
        before = stored[row["index"]]
        assert {k: v for k, v in row.items() if k.startswith(SELECTED)} == {
            k: v for k, v in before.items() if k.startswith(SELECTED)
        }
        assert row["pred_sql"] == before["pred_sql"] and row["rescore_changed"] == 0


def test_another_judge_changes_only_the_ranking(stored_run):
    examples, _, stored = stored_run
    summary, rows = rescore(stored_run, Judge({ex.sql for ex in examples}), 3, R3)
    assert summary["maj_ex"] == 0.0 and summary["oracle_ex"] == 1.0  # the same samples
    assert summary["r3_ex"] == 1.0 and summary["point_ex"] == 1.0
    # this auditor trusts the first pool: nothing is replayed
    assert not any(r["r3rs_fired"] for r in rows) and summary["r3rs_generated"] == 3
    assert all(r["pipeline_match"] == stored[r["index"]]["pipeline_match"] for r in rows)


def test_a_larger_n_goes_on_with_the_drawn_candidates(stored_run):
    examples, _, stored = stored_run
    summary, rows = rescore(stored_run, Judge(set()), 5, SelectionSection(method="r3"))
    for row in rows:
        first, drawn = stored[row["index"]]["r3_candidates"], stored[row["index"]]["r3rs_drawn"]
        assert row["r3_candidates"] == first + drawn[:2] and row["candidates"] == 5
        assert "r3rs_match" not in row
    # wrong, wrong, gold, wrong, wrong: two wrong answers outvote the one gold
    gold = {ex.index: ex.sql for ex in examples}
    assert all(r["r3_candidates"].count(gold[r["index"]]) == 1 for r in rows)
    assert summary["maj_ex"] == 0.0 and summary["oracle_ex"] == 1.0
    _, voted = rescore(stored_run, None, 7, SelectionSection(method="maj"))
    # ... + gold, 777: four answers, three of them twice
    assert all((r["candidates"], r["maj_votes"], r["maj_groups"]) == (7, 2, 4) for r in voted)


def test_prm_best_of_n_scores_the_stored_candidates(stored_run):
    from acesql.errors import ConfigError

    examples, _, stored = stored_run
    scorer = Scorer({ex.sql for ex in examples})
    summary, rows = rescore(stored_run, None, 3, SelectionSection(method="prm"), scorer)
    assert summary["maj_ex"] == 0.0 and all(r["prm_match"] for r in rows)
    assert all(r["prm_rewards"] == [0.2, 0.2, 0.9] and r["prm_scored"] == 3 for r in rows)
    # each question's pruned schema as text, and its database's schema to rewrite against
    assert len(scorer.seen) == len(rows)
    assert all(text and schema.tables for text, schema in scorer.seen)
    with pytest.raises(ConfigError, match="direct view"):
        rescore(stored_run, None, 3, SelectionSection(method="prm"), Scorer(set(), view="cocte"))


@pytest.mark.parametrize(
    "k, selection, message",
    [
        (8, SelectionSection(method="maj"), "7 stored candidates, fewer than 8"),
        (2, R3, "were stored \\(3\\), not 2"),
        (3, R3.model_copy(update={"resample_candidates": 5}), "drew 4 candidates, not 5"),
    ],
)
def test_what_the_stored_run_cannot_give_is_refused(stored_run, k, selection, message):
    with pytest.raises(DataError, match=message):
        rescore(stored_run, Judge(set()), k, selection)


def test_a_pipeline_draw_is_not_more_of_the_first_pool(stored_run):
    examples, prompts, stored = stored_run
    wider = {i: {**r, "r3rs_drawn_schema": "t(a, b)"} for i, r in stored.items()}
    with pytest.raises(DataError, match="wider schema"):
        rescore((examples, prompts, wider), Judge(set()), 5, SelectionSection(method="maj"))


def test_stored_rows_must_be_of_the_questions_asked(stored_run, tmp_path):
    examples, _, stored = stored_run
    assert matching_examples(examples[1:], stored, "run") == examples[1:]
    moved = {i + 1: r for i, r in stored.items()}
    with pytest.raises(DataError, match="rescore on the dataset and split that run evaluated"):
        matching_examples(examples, moved, "run")
    (tmp_path / "rows.jsonl").write_text(json.dumps({"index": 0, "question": "?"}) + "\n")
    with pytest.raises(DataError, match="holds no stored candidates"):
        stored_candidates(str(tmp_path))
    cut = {"index": 3, "question": "?", "r3_candidates": ["SELECT 1"]}  # no r3_candidates_match
    (tmp_path / "rows.jsonl").write_text(json.dumps(cut) + "\n")
    with pytest.raises(DataError, match="question 3: its stored candidates need r3_candidates and"):
        stored_candidates(str(tmp_path))


def test_rows_written_under_the_old_field_names_are_still_rescored(tmp_path):
    old = {"index": 4, "question": "?", "r3_pool": ["SELECT 1", "SELECT 2"], "maj_k": 2}
    old["r3_pool_match"] = [False, True]
    (tmp_path / "rows.jsonl").write_text(json.dumps(old) + "\n")
    stored = stored_candidates(str(tmp_path))
    assert stored[4]["r3_candidates"] == ["SELECT 1", "SELECT 2"]
    assert stored[4]["r3_candidates_match"] == [False, True]
    assert stored[4]["candidates"] == 2
    assert not {"r3_pool", "r3_pool_match", "maj_k"} & set(stored[4])
    (rows,) = load_rows(str(tmp_path)).values()  # what compare and the reports read
    assert rows[0]["candidates"] == 2 and "maj_k" not in rows[0]


def test_the_command_rescores_a_folder_paired_with_it(synth_dir, tiny_model_dir, tmp_path):
    common = ["--model", str(tiny_model_dir), "--dataset", str(synth_dir), "--format", "synth"]
    common += ["--split", "train", "--limit", "3", "--max-new-tokens", "6", "--selection", "r3"]
    first = CliRunner().invoke(
        cli,
        ["eval", *common, "--candidates", "2", "--resample", "--resample-candidates", "3"]
        + ["--audit-threshold", "0.999", "--out", str(tmp_path / "a")],
    )
    assert first.exit_code == 0, first.output
    again = CliRunner().invoke(
        cli,
        ["eval", *common, "--candidates", "4", "--candidates-from", str(tmp_path / "a")]
        + ["--out", str(tmp_path / "b")],
    )
    assert again.exit_code == 0, again.output
    metrics = json.loads((tmp_path / "b" / "metrics.json").read_text())
    assert metrics["candidates_from"] == str((tmp_path / "a").resolve())
    a, b = ([json.loads(x) for x in (tmp_path / d / "rows.jsonl").open()] for d in "ab")
    assert [r["index"] for r in a] == [r["index"] for r in b]
    for x, y in zip(a, b):
        assert (
            y["r3_candidates"] == x["r3_candidates"] + x["r3rs_drawn"][:2] and y["candidates"] == 4
        )
    paired = CliRunner().invoke(cli, ["eval", "compare", str(tmp_path / "a"), str(tmp_path / "b")])
    assert paired.exit_code == 0 and "maj" in paired.output
    # a source still being written: its rows so far are scored, and the rescoring stays
    # unfinished until it is run again on the finished source
    (tmp_path / "running").mkdir()
    header = {"header": {"model": "m", "dataset": "d", "split": "train", "questions": 3}}
    chunk = {"chunk": "0-1-2", "rows": a[:2]}
    (tmp_path / "running" / ".partial-0.jsonl").write_text(
        "".join(json.dumps(x) + "\n" for x in (header, chunk))
    )
    early = CliRunner().invoke(
        cli,
        ["eval", *common, "--candidates", "4", "--candidates-from", str(tmp_path / "running")]
        + ["--out", str(tmp_path / "c")],
    )
    assert early.exit_code == 0, early.output
    assert "2 of 3 questions scored, kept unfinished" in early.output
    assert not (tmp_path / "c" / "metrics.json").exists()
    assert [r["r3_candidates"] for r in read_unfinished(tmp_path / "c")[1]] == [
        r["r3_candidates"] for r in b[:2]
    ]
    # rescoring into its own source, or over another folder's candidates with a selection
    # that would drop them, is refused before anything is written
    before = (tmp_path / "a" / "rows.jsonl").read_text()
    for out, selection in (("a", "maj"), ("b", "maj")):
        refused = CliRunner().invoke(
            cli,
            ["eval", *common[:-2], "--selection", selection, "--candidates", "2"]
            + ["--candidates-from", str(tmp_path / "a"), "--out", str(tmp_path / out)],
        )
        assert isinstance(refused.exception, DataError), refused.output
        assert "give --out another folder" in str(refused.exception)
    assert (tmp_path / "a" / "rows.jsonl").read_text() == before


def test_the_command_says_what_it_cannot_rescore(synth_dir, tiny_model_dir, tmp_path):
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "rows.jsonl").write_text(json.dumps({"index": 0}) + "\n")
    common = ["eval", "--model", str(tiny_model_dir), "--dataset", str(synth_dir)]
    common += ["--format", "synth", "--split", "train", "--limit", "2"]
    cases = [
        (["--selection", "r3"], "holds no stored candidates"),
        (["--selection", "greedy"], "pass --selection maj, r3 or prm"),
    ]
    for flags, message in cases:
        result = CliRunner().invoke(
            cli, [*common, *flags, "--candidates-from", str(tmp_path / "old")]
        )
        # an AcesqlError, which `acesql` prints as one line ("error: ...") and exits 2 on
        assert isinstance(result.exception, AcesqlError), result.output
        assert message in str(result.exception)
    assert [p.name for p in (tmp_path / "old").iterdir()] == ["rows.jsonl"]  # nothing written
