"""Loaders of the generator's layout and of SynSQL-2.5M, built from the sample databases."""

import json
import shutil

import pytest

from acesql.data.loaders import LOADERS, SPLITS, load_dataset, load_synsql, load_synth
from acesql.errors import ConfigError, DataError


def test_every_format_is_registered_with_its_splits():
    assert set(LOADERS) == set(SPLITS) == {"spider", "bird", "synth", "synsql"}


@pytest.mark.parametrize("split", SPLITS["synth"])
def test_load_synth(synth_dir, split):
    data = load_synth(synth_dir, split)
    assert data.name == f"synth-{split}" and data.examples
    assert any(e.gold_columns for e in data.examples)
    for example in data.examples:
        assert example.unusable is None and example.complexity and example.domain
        assert all("." in c for c in example.gold_columns)  # COUNT(*) alone has none
        assert example.db_path == str(
            synth_dir / "databases" / example.db_id / f"{example.db_id}.sqlite"
        )
        schema = data.schema(example.db_id, n_samples=0)  # from tables.json
        assert set(example.gold_columns) <= set(schema.column_ids)


@pytest.mark.parametrize(("split", "databases"), [("train", 4), ("dev", 1), ("test_ood", 1)])
def test_synth_through_the_registry(synth_dir, split, databases):
    """The registry reads the split asked for: its questions file, record by record, and
    every database of tables.json (the fixture: 4 train, 1 dev, 1 test_ood, 4 questions each)."""
    records = json.loads((synth_dir / f"{split}.json").read_text())
    data = load_dataset(synth_dir, "synth", split)
    assert data.name == f"synth-{split}"
    assert len(data.examples) == len(records) == 4 * databases
    assert len({e.db_id for e in data.examples}) == databases
    fields = ("db_id", "question", "sql", "complexity", "gold_columns", "domain", "evidence")
    assert [(e.index, *(getattr(e, f) for f in fields)) for e in data.examples] == [
        (i, *(r[f] for f in fields)) for i, r in enumerate(records)
    ]
    tables = json.loads((synth_dir / "tables.json").read_text())
    assert set(data.tables) == {t["db_id"] for t in tables} and len(tables) == 6


def test_synth_missing_database_and_bad_records(synth_dir, tmp_path):
    root = tmp_path / "synth"
    shutil.copytree(synth_dir, root)
    train = load_synth(root, "train").examples
    for db_id in {e.db_id for e in train}:
        shutil.rmtree(root / "databases" / db_id)
    assert {e.unusable for e in load_synth(root, "train").examples} == {"database missing"}
    records = json.loads((root / "dev.json").read_text())
    records[0]["gold_columns"] = "t.c"
    (root / "dev.json").write_text(json.dumps(records))
    with pytest.raises(DataError, match=r"dev.json: question #0: gold_columns must be a list"):
        load_synth(root, "dev")
    records[0]["gold_columns"] = []
    del records[0]["sql"]
    (root / "dev.json").write_text(json.dumps(records))
    with pytest.raises(DataError, match="question #0 lacks the field 'sql'"):
        load_synth(root, "dev")
    with pytest.raises(ConfigError, match=r"synth has no split 'test'"):
        load_synth(root, "test")


@pytest.fixture
def synsql_dir(sample_dir, tmp_path):
    """The sample dataset in SynSQL-2.5M's layout and field names."""
    root = tmp_path / "synsql"
    shutil.copytree(sample_dir / "database", root / "databases")
    shutil.copy(sample_dir / "tables.json", root / "tables.json")
    levels = ["Simple", "Moderate", "Complex", "Highly Complex"]
    records = [
        {
            "db_id": q["db_id"],
            "question": q["question"],
            "sql": q["query"],
            "sql_complexity": levels[i % 4],
            "question_style": "Formal",
            "external_knowledge": "GPA is the grade point average." if i == 0 else "",
            "cot": "...",
        }
        for i, q in enumerate(json.loads((sample_dir / "dev.json").read_text()))
    ]
    (root / "data.json").write_text(json.dumps(records))
    return root


def test_load_synsql(synsql_dir):
    data = load_dataset(synsql_dir, "synsql", "train")
    assert data.name == "synsql-train" and len(data.usable) == 14
    assert [e.complexity for e in data.examples[:4]] == [
        "simple",
        "moderate",
        "complex",
        "highly complex",
    ]
    assert data.examples[0].evidence == "GPA is the grade point average."
    assert data.schema("shop", n_samples=0).table("orders")
    with pytest.raises(ConfigError, match="synsql has no split 'dev'"):
        load_synsql(synsql_dir, "dev")
    (synsql_dir / "data.json").unlink()
    with pytest.raises(DataError, match="questions file not found"):
        load_synsql(synsql_dir)


GOOD_QUESTION = {"db_id": "school", "question": "How many?", "query": "SELECT 1"}
GOOD_TABLES = [{"db_id": "school", "table_names_original": [], "column_names_original": []}]
# (dev.json, tables.json, what the one-line error says); bytes are written as they are
MALFORMED_DATASETS = [
    (
        b'[{"db_id": "school", "question": "\xff", "query": "SELECT 1"}]',
        GOOD_TABLES,
        "dev.json is not UTF-8",
    ),
    (["How many?"], GOOD_TABLES, "dev.json: question #0 is not a JSON object (got str)"),
    (
        [GOOD_QUESTION | {"db_id": 5}],
        GOOD_TABLES,
        "dev.json: question #0: db_id must be a string, got 5",
    ),
    (
        [GOOD_QUESTION | {"query": None}],
        GOOD_TABLES,
        "dev.json: question #0: query must be a string, got None",
    ),
    ([GOOD_QUESTION], [{"table_names_original": []}], "tables.json: entry #0 has no db_id"),
    ([GOOD_QUESTION], {"school": GOOD_TABLES[0]}, "tables.json must hold a JSON list of databases"),
    ([GOOD_QUESTION], [5], "tables.json: entry #0 is not a JSON object (got int)"),
    ([GOOD_QUESTION], b'[{"db_id": "\xff"}]', "tables.json is not UTF-8"),
]


@pytest.mark.parametrize(
    "questions,tables,message", MALFORMED_DATASETS, ids=[m for *_, m in MALFORMED_DATASETS]
)
def test_a_malformed_dataset_is_one_data_error_naming_file_and_record(
    tmp_path, questions, tables, message
):
    for name, content in (("dev.json", questions), ("tables.json", tables)):
        data = content if isinstance(content, bytes) else json.dumps(content).encode()
        (tmp_path / name).write_bytes(data)
    with pytest.raises(DataError) as refused:
        load_dataset(tmp_path, "spider", "dev")
    assert message in str(refused.value) and "\n" not in str(refused.value)


def test_jsonl_that_is_not_utf8_is_a_data_error_naming_the_file(tmp_path):
    from acesql.data.loaders import parse_jsonl

    path = tmp_path / "events.jsonl"
    path.write_bytes(b'{"question": "a"}\n{"question": "\xff"}\n')
    with (
        path.open(encoding="utf-8") as fh,
        pytest.raises(DataError, match="events.jsonl is not UTF-8"),
    ):
        parse_jsonl(fh, path)
