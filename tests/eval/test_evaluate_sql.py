"""Dataset loaders (Spider and BIRD layouts), predictions files, and `evaluate-sql` scoring."""

import json
import shutil

import pytest

from acesql.data.loaders import load_dataset
from acesql.errors import ConfigError, DataError
from acesql.eval.sql_eval import evaluate_predictions, load_predictions
from acesql.sql.batch_executor import BatchExecutor


@pytest.fixture(scope="module")
def executor():
    with BatchExecutor(workers=0) as ex:
        yield ex


@pytest.fixture
def bird_dir(sample_dir, tmp_path):
    """The sample dataset rewritten in BIRD's layout, with evidence and difficulty."""
    root = tmp_path / "bird"
    shutil.copytree(sample_dir / "database", root / "dev_databases")
    shutil.copy(sample_dir / "tables.json", root / "dev_tables.json")
    spider = json.loads((sample_dir / "dev.json").read_text())
    levels = ["simple", "moderate", "challenging"]
    records = [
        {
            "question_id": i,
            "db_id": q["db_id"],
            "question": q["question"],
            "evidence": f"hint {i}",
            "SQL": q["query"],
            "difficulty": levels[i % 3],
        }
        for i, q in enumerate(spider)
    ]
    (root / "dev.json").write_text(json.dumps(records))
    return root


def test_gold_as_predictions_scores_one(sample_dir, executor):
    data = load_dataset(sample_dir, "spider")
    gold = {e.index: e.sql for e in data.examples}
    for mode in ("multiset", "bird", "spider"):
        summary, rows = evaluate_predictions(data, gold, mode, executor)
        assert summary["ex"] == 1.0 and summary["usable"] == summary["n"] == len(rows) == 14


def test_bird_layout_keeps_evidence_and_scores_by_complexity(bird_dir, executor):
    data = load_dataset(bird_dir, "bird")
    assert data.examples[3].evidence == "hint 3" and data.examples[3].complexity == "simple"
    preds = {e.index: e.sql for e in data.examples}
    preds[0] = "SELECT 0"
    summary, _ = evaluate_predictions(data, preds, "bird", executor)
    assert summary["correct"] == 13 and summary["by_complexity"]["simple"]["correct"] == 4


def test_missing_database_is_unusable_not_wrong(sample_dir, tmp_path, executor):
    root = tmp_path / "spider"
    shutil.copytree(sample_dir, root)
    shutil.rmtree(root / "database" / "shop")
    data = load_dataset(root, "spider")
    missing = [e for e in data.examples if e.db_id == "shop"]
    assert missing and all(e.unusable == "database missing" for e in missing)
    summary, rows = evaluate_predictions(data, {}, "multiset", executor)
    assert summary["n"] == 14 and summary["usable"] == 8 and summary["correct"] == 0
    assert summary["unusable"] == {"database missing": 6}
    assert summary["errors"] == {"no_prediction": 8}
    assert {r["reason"] for r in rows if r["usable"]} == {"no_prediction"}


def test_prediction_formats(tmp_path):
    lines = tmp_path / "p.jsonl"
    lines.write_text('{"index": 1, "sql": "SELECT 1"}\n\n{"index": 0, "sql": "SELECT 2"}\n')
    assert load_predictions(lines) == {1: "SELECT 1", 0: "SELECT 2"}
    bird = tmp_path / "predict_dev.json"
    bird.write_text(
        json.dumps({"0": "SELECT a FROM t\t----- bird -----\tdb", "1": "\t----- bird -----\tdb"})
    )
    assert load_predictions(bird) == {0: "SELECT a FROM t", 1: ""}
    one = tmp_path / "one.jsonl"
    one.write_text('{"index": 0, "sql": "SELECT 1"}')
    assert load_predictions(one) == {0: "SELECT 1"}


@pytest.mark.parametrize(
    "content, message",
    [
        ('{"index": 0, "sql": "a"}\nnot json\n', ":2:"),
        ('{"idx": 0, "sql": "a"}\n', "expected"),
        ('{"index": 0, "sql": "a"}\n{"index": 0, "sql": "b"}\n', "twice"),
        ('{"zero": "SELECT 1"}', "not a question index"),
        ('{"0": "SELECT 1"}', "must be a string 'SQL"),
        ('{"0": 0.9}', "must be a string 'SQL"),
        ('{"0": null}', "must be a string 'SQL"),
        ('{"index": 0.9, "sql": "a"}\n', "expected"),
        # a digit that int() refuses, and two keys naming one question
        ('{"\u00b2": "SELECT 1\\t----- bird -----\\tdb"}', "not a question index"),
        (
            '{"1": "SELECT 1\\t----- bird -----\\tdb", "01": "SELECT 2\\t----- bird -----\\tdb"}',
            "question 1 is predicted twice",
        ),
    ],
)
def test_broken_predictions_files(tmp_path, content, message):
    path = tmp_path / "p.jsonl"
    path.write_text(content)
    with pytest.raises(DataError, match=message):
        load_predictions(path)


def test_predictions_for_unknown_questions(sample_dir, executor):
    data = load_dataset(sample_dir, "spider")
    with pytest.raises(DataError, match="name no question"):
        evaluate_predictions(data, {99: "SELECT 1"}, "bird", executor)


def test_loader_errors(tmp_path, sample_dir):
    with pytest.raises(DataError, match="not found"):
        load_dataset(tmp_path / "nothing", "spider")
    with pytest.raises(ConfigError, match="unknown dataset format"):
        load_dataset(sample_dir, "csv")
    with pytest.raises(DataError, match="tables file not found"):
        load_dataset(sample_dir, "bird")  # a Spider folder has no dev_tables.json
    with pytest.raises(DataError, match="questions file not found"):
        load_dataset(sample_dir, "bird", "train")
    bad = tmp_path / "bad"
    shutil.copytree(sample_dir, bad)
    (bad / "dev.json").write_text("[{")
    with pytest.raises(DataError, match="not valid JSON"):
        load_dataset(bad, "spider")


@pytest.mark.spider
def test_spider_dev_gold_scores_one_in_every_mode(spider_dir):
    data = load_dataset(spider_dir, "spider", "dev")
    gold = {e.index: e.sql for e in data.examples}
    with BatchExecutor(workers=2) as executor:
        for mode in ("multiset", "bird", "spider"):
            summary, _ = evaluate_predictions(data, gold, mode, executor)
            assert (summary["n"], summary["usable"], summary["correct"]) == (1034, 972, 972)
            assert summary["ex"] == 1.0
            assert summary["unusable"] == {"database missing": 62}
