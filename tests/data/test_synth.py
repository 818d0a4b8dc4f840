"""The synthetic generator: determinism, splits, difficulty, and gold SQL that holds up."""

import json
import random
import sqlite3
from collections import Counter

import pytest

from acesql.data.synth.database import PROFILES, build_database
from acesql.data.synth.domain import load_domains, parse_domain
from acesql.data.synth.generate import SynthConfig, generate_dataset, plan_databases
from acesql.data.synth.shapes import SHAPES
from acesql.errors import ConfigError
from acesql.sql.columns import extract_columns
from acesql.sql.sandbox import execute
from acesql.sql.schema import Schema


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    out = tmp_path_factory.mktemp("synth")
    config = SynthConfig(
        n_databases=10, questions_per_db=12, seed=3, dev_fraction=0.2, ood_fraction=0.2
    )
    return out, generate_dataset(out, config), config


def _load(out, split):
    return json.loads((out / f"{split}.json").read_text())


def test_summary_counts(generated):
    out, summary, _ = generated
    assert summary["n_databases"] == 10
    assert summary["by_split"] == {
        "train": {"databases": 6, "examples": 72},
        "dev": {"databases": 2, "examples": 24},
        "test_ood": {"databases": 2, "examples": 24},
    }
    assert summary["n_examples"] == sum(summary["by_complexity"].values()) == 120
    assert all(summary["by_complexity"][k] > 0 for k in summary["by_complexity"])
    assert summary["empty_result_rate"] == 0.0
    assert 6 <= summary["mean_tables_per_db"] <= 12


def test_splits_are_by_database_and_ood_by_domain(generated):
    out, _, config = generated
    dbs = {s: {e["db_id"] for e in _load(out, s)} for s in ("train", "dev", "test_ood")}
    assert not dbs["train"] & dbs["dev"] and not dbs["train"] & dbs["test_ood"]
    domains = {s: {e["domain"] for e in _load(out, s)} for s in ("train", "dev", "test_ood")}
    assert domains["test_ood"] <= set(config.ood_domains)
    assert not (domains["train"] | domains["dev"]) & set(config.ood_domains)
    assert domains["dev"] <= domains["train"] | set(load_domains()) - set(config.ood_domains)


def test_ood_phrasings_are_held_out_of_train(generated):
    out, _, _ = generated
    train_templates = {e["template"] for e in _load(out, "train") + _load(out, "dev")}
    ood_templates = {e["template"] for e in _load(out, "test_ood")}
    assert ood_templates and not train_templates & ood_templates
    for template in ood_templates:
        name, index = template.split("/")
        assert int(index) == len(SHAPES[name].templates) - 1


def test_every_gold_runs_non_empty_with_its_columns(generated):
    out, _, _ = generated
    tables = {t["db_id"]: t for t in json.loads((out / "tables.json").read_text())}
    for split in ("train", "dev", "test_ood"):
        for ex in _load(out, split):
            db = out / "databases" / ex["db_id"] / f"{ex['db_id']}.sqlite"
            result = execute(db, ex["sql"])
            assert result.ok and result.rows, (ex["sql"], result.error)
            schema = Schema.from_tables_json(tables[ex["db_id"]])
            assert sorted(extract_columns(ex["sql"], schema)) == ex["gold_columns"]
            assert ex["complexity"] == SHAPES[ex["shape"]].complexity
            assert ex["question"][0].isupper() and "{" not in ex["question"]


def test_same_seed_same_bytes(tmp_path):
    config = SynthConfig(n_databases=4, questions_per_db=5, seed=11, profile="tiny")
    a, b = tmp_path / "a", tmp_path / "b"
    generate_dataset(a, config)
    generate_dataset(b, SynthConfig(**{**config.__dict__, "workers": 2}))
    for name in ("tables.json", "train.json", "dev.json", "test_ood.json"):
        assert (a / name).read_bytes() == (b / name).read_bytes()
    for db in (a / "databases").iterdir():
        dump_a = list(sqlite3.connect(db / f"{db.name}.sqlite").iterdump())
        dump_b = list(sqlite3.connect(b / "databases" / db.name / f"{db.name}.sqlite").iterdump())
        assert dump_a == dump_b
    other = tmp_path / "c"
    generate_dataset(other, SynthConfig(**{**config.__dict__, "seed": 12}))
    assert (other / "train.json").read_bytes() != (a / "train.json").read_bytes()


def test_default_profile_is_wide_and_noisy():
    domains = load_domains()
    assert len(domains) >= 12
    rng = random.Random(0)
    widths, tables, shared_names = [], [], 0
    for i, domain in enumerate(sorted(domains)):
        db = build_database(domains[domain], f"d{i}", rng, PROFILES["default"])
        tables.append(len(db.tables))
        widths += [len(t.columns) for t in db.tables if t.entity is not None]
        names = Counter(c.name.lower() for t in db.tables for c in t.columns)
        shared_names += any(n > 1 for n in names.values())
        assert any(c.role == "distractor" for t in db.tables for c in t.columns)
    assert min(tables) >= 6 and max(tables) <= 13  # 6-12 entity tables, maybe one archive copy
    assert min(widths) >= 4 and max(widths) <= 15
    assert shared_names >= len(domains) // 2  # the same column name in several tables


def test_shapes_and_phrasings():
    assert len(SHAPES) >= 40
    assert all(len(s.templates) >= 4 for s in SHAPES.values())  # 3 for train, 1 held out
    assert {s.complexity for s in SHAPES.values()} == {
        "simple",
        "moderate",
        "complex",
        "highly complex",
    }
    families = {s.family for s in SHAPES.values()}
    assert {"join", "nested", "set_op", "cte", "window", "group", "date_string"} <= families


def test_bad_configs_are_config_errors():
    with pytest.raises(ConfigError, match="not domains"):
        plan_databases(SynthConfig(ood_domains=("atlantis",)))
    with pytest.raises(ConfigError, match="no train database"):
        plan_databases(SynthConfig(n_databases=2))
    with pytest.raises(ConfigError, match="unknown profile"):
        plan_databases(SynthConfig(profile="huge"))


def test_domain_files_are_checked():
    good = {
        "name": "mini",
        "entities": [
            {
                "key": "a",
                "phrases": ["a"],
                "plural": ["as"],
                "tables": ["a"],
                "rows": [1, 2],
                "label": "n",
                "attrs": [
                    {"key": "n", "kind": "person_name", "phrases": ["name"], "names": ["name"]}
                ],
            },
        ],
    }
    assert parse_domain(good).entities[0].label == "n"
    bad_kind = json.loads(json.dumps(good))
    bad_kind["entities"][0]["attrs"][0]["kind"] = "colour"
    with pytest.raises(ConfigError, match="unknown kind"):
        parse_domain(bad_kind)
    yaml_bool = json.loads(json.dumps(good))
    yaml_bool["entities"][0]["phrases"] = [True]
    yaml_bool["entities"][0]["plural"] = ["x"]
    with pytest.raises(ConfigError, match="quote them"):
        parse_domain(yaml_bool)
    bad_parent = json.loads(json.dumps(good))
    bad_parent["entities"][0]["parents"] = [{"entity": "z", "names": ["z_id"], "phrases": ["of"]}]
    with pytest.raises(ConfigError, match="not an entity"):
        parse_domain(bad_parent)
