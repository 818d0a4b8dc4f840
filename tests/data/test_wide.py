"""The wide held-out set: BIRD-scale schemas, domains no training split sees, the data stage's
dev_wide and test_wide splits, its params, and the prompt lengths it makes."""

import hashlib
import json
import random
import statistics
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from acesql.cli import cli
from acesql.config import load_params
from acesql.data.loaders import load_dataset, read_prepared
from acesql.data.schemas import SchemaCache
from acesql.data.synth.database import PROFILES, build_database
from acesql.data.synth.domain import load_domains
from acesql.data.synth.generate import SynthConfig, generate_dataset, plan_databases
from acesql.errors import ConfigError
from acesql.models.base_model import load_tokenizer
from acesql.models.prompt_lengths import full_schema_prompt_tokens, prompt_length_report
from acesql.models.prompts import PromptBuilder
from acesql.stages.data import main

ROOT = Path(__file__).resolve().parents[2]
TINY_SYNTH = {"profile": "tiny", "n_databases": 6, "questions_per_db": 4}
SMALL_WIDE = {
    "profile": "tiny",  # the stage's plumbing; the wide profile's shape is tested below
    "n_databases": 4,
    "questions_per_db": 3,
    "ood_domains": ["insurance", "museum"],
    "dev_fraction": 0.25,
    "seed": 5,
    "workers": 1,
}


def _wide_databases(n: int):
    domains = load_domains()
    names = sorted(domains)
    return [
        build_database(
            domains[names[i % len(names)]], f"w{i}", random.Random(f"wide:{i}"), PROFILES["wide"]
        )
        for i in range(n)
    ]


def test_the_wide_profile_has_birds_shape():
    """BIRD dev: a median of 7 tables and 64 columns a database, one of 199 columns."""
    dbs = _wide_databases(16)
    tables = [len(db.tables) for db in dbs]
    columns = [sum(len(t.columns) for t in db.tables) for db in dbs]
    assert statistics.median(tables) >= 7 and max(tables) <= 13
    assert statistics.median(columns) >= 60
    assert max(columns) >= 150
    cryptic = sum(c.cryptic for db in dbs for t in db.tables for c in t.columns)
    assert cryptic >= 10  # naming noise that questions need an evidence hint for


def test_yearly_figures_repeat_a_measure_of_an_entity_others_refer_to():
    dbs = _wide_databases(16)
    referenced = {p.entity for db in dbs for e in db.domain.entities for p in e.parents}
    yearly = [
        (t, c)
        for db in dbs
        for t in db.entity_tables
        for c in t.attrs
        if c.attr.key[-4:].isdigit() and c.attr.key[-5] == "_"
    ]
    assert len({t.name for t, _ in yearly}) >= 5
    for table, column in yearly:
        year = column.attr.key[-4:]
        assert table.entity.key in referenced
        assert column.name.endswith(year) and column.attr.phrases[0].endswith(f" in {year}")
        assert len(column.present()) > 0


def test_other_profiles_draw_what_they_drew(tmp_path):
    """The wide profile, held-out domains and split options leave the old datasets' bytes."""
    expected = {
        "tiny": "638cd7cce4e554a892684d15d7d38e44a0c334e91209a1a5d90c58883d30474c",
        "default": "e5da4b78e72bc9edcf2baab63ce2b2b66339d2138510680e3723457f26fb9d6d",
    }
    for profile, n, questions, seed in (("tiny", 6, 4, 1), ("default", 3, 3, 2)):
        config = SynthConfig(
            n_databases=n,
            questions_per_db=questions,
            seed=seed,
            profile=profile,
            dev_fraction=0.2,
            ood_fraction=0.2,
        )
        out = tmp_path / profile
        generate_dataset(out, config)
        digest = hashlib.sha256()
        for name in ("tables.json", "train.json", "dev.json", "test_ood.json"):
            digest.update((out / name).read_bytes())
        assert digest.hexdigest() == expected[profile], profile


def test_held_out_domains_are_never_trained_on():
    held_out = {name for name, d in load_domains().items() if d.held_out}
    assert {"insurance", "museum", "telecom"} <= held_out
    params = load_params(ROOT / "params.yaml")
    synth = params.data.synth
    plans = plan_databases(SynthConfig(seed=params.base.seed, **synth.model_dump()))
    trained = {p.domain for p in plans if p.split in ("train", "dev")}
    assert trained and not trained & held_out
    assert not trained & set(params.data.wide.ood_domains)  # the repository's test_wide


def test_an_evaluation_set_has_no_train_split():
    config = SynthConfig(
        n_databases=8,
        dev_fraction=0.25,
        with_train=False,
        ood_domains=("insurance", "hotel"),
        db_prefix="wide_",
    )
    plans = plan_databases(config)
    splits = [p.split for p in plans]
    assert splits.count("train") == 0 and splits.count("dev") == 2 and splits.count("test_ood") == 6
    assert {p.domain for p in plans if p.split == "test_ood"} == {"insurance", "hotel"}
    dev_domains = {p.domain for p in plans if p.split == "dev"}
    assert not dev_domains & {"insurance", "hotel", "museum", "telecom"}
    assert all(p.db_id.startswith("wide_") for p in plans)
    with pytest.raises(ConfigError, match="leaves no test_ood database"):
        plan_databases(SynthConfig(n_databases=1, dev_fraction=0.5, with_train=False))


@pytest.fixture
def run_stage(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)

    def run(wide: dict | None) -> dict:
        params = {
            "base": {"tracking_uri": None},
            "data": {"synth": TINY_SYNTH, "wide": wide},
        }
        Path("params.yaml").write_text(yaml.safe_dump(params))
        main(["--params", "params.yaml"])
        return json.loads(Path("data/metrics.json").read_text())

    return run


def test_the_stage_writes_the_wide_splits_beside_unchanged_ones(run_stage):
    run_stage(None)
    assert not list(Path("data/wide").iterdir())  # off: an empty out, for DVC
    main_files = ["train.jsonl", "dev.jsonl", "test_ood.jsonl", "distribution.png"]
    before = {name: Path("data/prepared", name).read_bytes() for name in main_files}
    synth_before = Path("data/synth/train.json").read_bytes()

    metrics = run_stage(SMALL_WIDE)
    assert {name: Path("data/prepared", name).read_bytes() for name in main_files} == before
    assert Path("data/synth/train.json").read_bytes() == synth_before
    dev = read_prepared("data/prepared/dev_wide.jsonl")
    test = read_prepared("data/prepared/test_wide.jsonl")
    assert len(dev) == 3 and len(test) == 9
    assert {e.domain for e in test} <= {"insurance", "museum"}
    assert not {e.domain for e in dev} & {"insurance", "museum"}
    for example in dev + test:
        assert example.db_id.startswith("wide_")
        assert example.db_path.startswith("data/wide/databases/")
        assert Path(example.db_path).is_file() and example.unusable is None
    train_domains = {e.domain for e in read_prepared("data/prepared/train.jsonl")}
    assert not train_domains & {e.domain for e in test}
    assert metrics["splits"]["test_wide"]["n"] == 9
    shape = metrics["wide"]["test_wide"]
    assert shape["databases"] == 3 and shape["questions"] == 9
    assert shape["tables"]["min"] >= 3 and shape["columns"]["max"] >= shape["columns"]["median"]
    assert metrics["wide"]["generator"]["by_split"]["train"] == {"databases": 0, "examples": 0}
    test_ids = {e.db_id for e in test}
    tables = json.loads(Path("data/wide/tables.json").read_text())
    assert sum(shape["columns_histogram"].values()) == 3
    assert shape["columns"]["max"] == max(
        len(t["column_names_original"]) - 1 for t in tables if t["db_id"] in test_ids
    )


@pytest.mark.parametrize(
    "wide,message",
    [
        (
            {"ood_domains": ["insurance", "film"]},
            r"data\.wide: ood_domains \['film'\] are training domains of data\.synth: add them",
        ),
        ({"ood_domains": ["atlantis"]}, r"data\.wide: ood_domains \['atlantis'\] are not domains"),
        ({"ood_domains": []}, r"data\.wide\.ood_domains: .*at least 1 item"),
        ({"dev_fraction": 1.0}, r"data\.wide\.dev_fraction: .*less than 1"),
        ({"n_databases": 1}, r"data\.wide\.n_databases: .*greater than or equal to 2"),
        ({"profile": "huge"}, r"data\.wide\.profile: .*'tiny', 'default', 'large' or 'wide'"),
    ],
    ids=["trained-domain", "unknown-domain", "no-domain", "all-dev", "one-db", "profile"],
)
def test_bad_wide_params_say_what_to_fix(tmp_path, wide, message):
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump({"data": {"wide": wide}}))
    with pytest.raises(ConfigError, match=message):
        load_params(path)


def test_the_wide_set_can_be_off_and_is_checked_against_synth(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text("data:\n  wide: null\n")
    assert load_params(path).data.wide is None
    # a training domain of data.synth becomes a fair test domain once synth holds it out
    path.write_text(
        yaml.safe_dump(
            {"data": {"synth": {"ood_domains": ["film"]}, "wide": {"ood_domains": ["film"]}}}
        )
    )
    assert load_params(path).data.wide.ood_domains == ("film",)


@pytest.fixture(scope="module")
def wide_examples(tmp_path_factory):
    """Two wide test databases of a held-out domain, two questions each."""
    out = tmp_path_factory.mktemp("wide")
    config = SynthConfig(
        n_databases=3,
        questions_per_db=2,
        profile="wide",
        seed=3,
        dev_fraction=0.34,
        with_train=False,
        ood_domains=("telecom",),
    )
    generate_dataset(out, config)
    return load_dataset(out, "synth", "test_ood").examples


def test_prompt_lengths_count_what_fits_counts(tiny_model_dir, synth_dir, wide_examples):
    prompts = PromptBuilder(load_tokenizer(tiny_model_dir), reasoning=False, sample_values=0)
    examples = load_dataset(synth_dir, "synth", "dev").examples
    tokens = full_schema_prompt_tokens(examples, prompts, SchemaCache(0))
    assert len(tokens["retriever"]) == len(tokens["generator"]) == len(examples)
    schemas = SchemaCache(0)
    for example, n, m in zip(examples, tokens["retriever"], tokens["generator"]):
        schema = schemas(example)
        prompt = prompts.retriever(schema, example.question, example.evidence)
        assert prompts.fits(prompt, n) and not prompts.fits(prompt, n - 1)
        prompt = prompts.generator(schema, None, example.question, example.evidence)
        assert prompts.fits(prompt, m) and not prompts.fits(prompt, m - 1)

    wide_tokens = full_schema_prompt_tokens(wide_examples, prompts, SchemaCache(0))
    report = prompt_length_report(wide_tokens, limit=max(tokens["retriever"]))
    assert report["retriever"]["median"] > 2 * statistics.median(tokens["retriever"])
    assert report["retriever"]["over_limit"] == len(wide_examples) == 4


def test_the_prompt_lengths_command(tiny_model_dir, wide_examples, tmp_path):
    split = tmp_path / "test_wide.jsonl"
    split.write_text("".join(json.dumps(e.to_dict()) + "\n" for e in wide_examples))
    args = ["data", "prompt-lengths", str(split), "--tokenizer", str(tiny_model_dir)]
    result = CliRunner().invoke(cli, [*args, "--limit", "200"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["examples"] == 4 and report["limit"] == 200
    assert report["retriever"]["over_limit"] == 4
    assert report["generator"]["min"] > 200
