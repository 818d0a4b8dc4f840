"""SFT targets (gold and self-distilled), the mixed SFT trainer, and its resume after a kill."""

import json
import shutil
from collections import namedtuple

import pytest

from acesql.config import SftSection
from acesql.data.loaders import load_dataset
from acesql.data.schemas import SchemaCache
from acesql.errors import DiskSpaceError
from acesql.models.engine import Completion
from acesql.models.prompts import PromptBuilder
from acesql.sft.data import build_generator_distilled, build_gold, build_self_distilled
from acesql.sft.trainer import IGNORE, tokenize_records, train_sft
from acesql.sql.batch_executor import BatchExecutor
from acesql.sql.parsing import parse_columns, parse_sql
from acesql.sql.schema import quote_identifier
from tests.fakes import RoleEngine, columns_answer, sql_answer


@pytest.fixture(scope="module")
def prompts(tiny_model_dir):
    from acesql.models.base_model import load_tokenizer

    return PromptBuilder(load_tokenizer(tiny_model_dir), reasoning=False, sample_values=0)


@pytest.fixture(scope="module")
def examples(synth_dir):
    return load_dataset(synth_dir, "synth", "train").examples[:6]


def test_gold_targets_parse_back(examples, prompts):
    records, stats = build_gold(examples, prompts, SchemaCache(0), max_prompt_tokens=100_000)
    assert len(records) == 2 * len(examples)
    schemas = SchemaCache(0)
    for ex in examples:
        ret = next(r for r in records if r["role"] == "retriever" and r["index"] == ex.index)
        gen = next(r for r in records if r["role"] == "generator" and r["index"] == ex.index)
        parsed = parse_columns(ret["response"], schemas(ex))
        assert parsed.ok and not parsed.unknown
        assert sorted(parsed.columns) == sorted(ex.gold_columns)
        assert parse_sql(gen["response"]) == ex.sql.rstrip(";")
        assert ret["prompt"].endswith("<|im_start|>assistant\n")
    assert stats.to_dict()["n_retriever"] == stats.to_dict()["n_generator"] == len(examples)


def test_long_prompts_are_dropped_and_counted(examples, prompts):
    records, stats = build_gold(examples, prompts, SchemaCache(0), max_prompt_tokens=10)
    assert records == []
    assert stats.to_dict()["dropped"]["retriever"]["prompt_too_long"] == len(examples)


def half_right_engine(examples) -> RoleEngine:
    """Gold columns for every other retriever sample, the gold SQL for the first generator one."""

    def retriever(ex, n, options):
        return [columns_answer(ex.gold_columns) if i % 2 == 0 else "no idea" for i in range(n)]

    def generator(ex, n, options):
        return [sql_answer(ex.sql if i == 0 else "SELECT 1") for i in range(n)]

    return RoleEngine(examples, generator, retriever)


def test_self_distillation_keeps_supported_samples(examples, prompts):
    engine = half_right_engine(examples)
    records, stats = _distil(examples, prompts, engine, samples=(4, 3), balance=True)
    d = stats.to_dict()
    assert d["n_retriever"] == d["n_generator"] == len(examples)  # one distinct good sample each
    assert d["dropped"]["retriever"]["unparseable"] == 2 * len(examples)
    assert d["dropped"]["generator"]["different_rows"] + d["dropped"]["generator"].get(
        "different_row_count", 0
    ) >= len(examples)
    assert all(r["response"] for r in records)


def _distil_generator(examples, prompts, engine, samples=2, balance=False, **options):
    """Generator-distilled records from `engine`, `samples` greedy generator rollouts each."""
    return _build(
        build_generator_distilled,
        examples,
        prompts,
        engine,
        balance,
        generator_samples=samples,
        temperature=0.0,
        **options,
    )


def test_generator_distillation_keeps_the_models_right_sql(examples, prompts):
    """The generator's targets are its own SQL that executes right, written as it wrote it;
    the retriever's are the gold column sets; a wrong or cut-off SQL is no target."""
    right = {ex.index: f"SELECT * FROM ({ex.sql.rstrip(';')})" for ex in examples}  # its style

    def generator(ex, n, options):
        assert options["temperature"] == 0.0 and "Question: " + ex.question in engine.prompt
        if ex.index == examples[0].index:  # right, but cut off at the token limit
            return [Completion(sql_answer(right[ex.index]), [1], [-0.1], "length")] * n
        if ex.index == examples[1].index:
            return [sql_answer("SELECT 1 WHERE 0")] * n
        return [sql_answer(right[ex.index]), sql_answer(right[ex.index])]  # one distinct

    engine = RoleEngine(examples, generator)
    records, stats = _distil_generator(examples, prompts, engine)
    d = stats.to_dict()
    generated = [r for r in records if r["role"] == "generator"]
    assert sorted(r["index"] for r in generated) == sorted(e.index for e in examples[2:])
    for rec in generated:
        assert parse_sql(rec["response"]) == right[rec["index"]].rstrip(";")
    assert d["dropped"]["generator"]["malformed"] == 2 and d["dropped"]["generator"]["duplicate"]
    schemas = SchemaCache(0)
    for rec in (r for r in records if r["role"] == "retriever"):
        ex = next(e for e in examples if e.index == rec["index"])
        assert sorted(parse_columns(rec["response"], schemas(ex)).columns) == sorted(
            ex.gold_columns
        )
    assert d["n_retriever"] == len(examples)  # unbalanced: every question's gold columns

    balanced, bstats = _distil_generator(examples, prompts, engine, balance=True)
    b = bstats.to_dict()
    assert b["n_retriever"] == b["n_generator"] == len(examples) - 2
    assert b["dropped"]["retriever"]["balance"] == 2


def test_generator_distillation_in_chain_form_rewrites_the_models_right_sql(
    examples, prompts, monkeypatch
):
    """With the generator writing Chain-of-CTE, the base model is asked for plain SQL (it
    knows no chains yet); each SQL that executes right becomes a chain kept when the chain
    executes to the gold result, under the chain prompt. Wrong SQL and a chain that does not
    execute as the gold are dropped and counted."""
    from acesql.sql import to_cocte
    from acesql.sql.cocte import parse_cocte

    cocte = prompts.with_sql_format("cocte")
    asked = []

    def generator(ex, n, options):
        asked.append(engine.prompt)
        return [sql_answer("SELECT 1 WHERE 0" if ex.index == examples[1].index else ex.sql)] * n

    rewrite = to_cocte.to_cocte  # the real one, patched where sft.data uses it

    def broken_for_first(sql, schema=None):
        chain = rewrite(sql, schema)
        return chain + " LIMIT 0" if sql == examples[0].sql else chain  # no rows, or no parse

    monkeypatch.setattr("acesql.sft.data.to_cocte", broken_for_first)
    engine = RoleEngine(examples, generator)
    records, stats = _distil_generator(examples, cocte, engine, samples=1)
    assert asked and not any("chain of steps" in p for p in asked)
    dropped = stats.to_dict()["dropped"]["generator"]
    assert dropped.pop("cocte_not_equivalent") == 1 and sum(dropped.values()) == 1
    generated = [r for r in records if r["role"] == "generator"]
    assert sorted(r["index"] for r in generated) == sorted(e.index for e in examples[2:])
    for rec in generated:
        assert "chain of steps" in rec["prompt"] and parse_cocte(rec["response"]).ok
        ex = next(e for e in examples if e.index == rec["index"])
        assert parse_sql(rec["response"]) == rewrite(ex.sql, SchemaCache(0)(ex))


def test_generator_distillation_takes_the_retrievers_own_covering_lists(examples, prompts):
    """A retriever list that names every gold column, and more, is the target, in canonical
    form; a list one gold column short, or one that does not parse, leaves the gold set."""
    schemas = SchemaCache(0)
    extra = {}
    for ex in examples:
        others = [c for c in schemas(ex).column_ids if c not in ex.gold_columns]
        extra[ex.index] = others[:1]
    wide, short, broken = examples[0], examples[1], examples[2]
    assert extra[wide.index] and len(short.gold_columns) >= 1

    def retriever(ex, n, options):
        if ex is short:
            return [columns_answer(ex.gold_columns[1:] + extra[ex.index])] * n
        if ex is broken:
            return ["the columns are obvious"] * n
        return [columns_answer(list(ex.gold_columns) + extra[ex.index])] * n

    engine = RoleEngine(examples, lambda ex, n, options: [sql_answer(ex.sql)] * n, retriever)
    records, stats = _distil_generator(examples, prompts, engine, 1, retriever_samples=2)
    d = stats.to_dict()
    for rec in (r for r in records if r["role"] == "retriever"):
        ex = next(e for e in examples if e.index == rec["index"])
        got = sorted(parse_columns(rec["response"], schemas(ex)).columns)
        if ex is short or ex is broken:
            assert got == sorted(ex.gold_columns)
        else:
            assert got == sorted(set(ex.gold_columns) | set(extra[ex.index]))
            assert rec["response"] == prompts.retriever_target(schemas(ex), got)
    assert len([r for r in records if r["role"] == "retriever"]) == len(examples)
    assert d["retriever_targets_from"] == {"gold_columns": 2, "own_lists": len(examples) - 2}
    assert d["dropped"]["retriever"] == {
        "misses_gold_columns": 2,
        "unparseable": 2,
        "duplicate": len(examples) - 2,
    }


def test_shuffled_tables_show_the_targets_on_other_orders(examples, prompts):
    """With `shuffle_tables` a retriever target is shown on its schema with the tables
    reordered, its list in that order; the columns, the generator's records and a rerun with
    the same seed do not change."""
    engine = RoleEngine(examples, lambda ex, n, options: [sql_answer(ex.sql)] * n)

    def build(shuffle):
        return _distil_generator(examples, prompts, engine, 1, shuffle_tables=shuffle)[0]

    plain, shuffled = build(False), build(True)
    assert shuffled == build(True)
    assert [r for r in shuffled if r["role"] == "generator"] == [
        r for r in plain if r["role"] == "generator"
    ]
    schemas, moved = SchemaCache(0), 0
    for before, after in zip(
        (r for r in plain if r["role"] == "retriever"),
        (r for r in shuffled if r["role"] == "retriever"),
    ):
        schema = schemas(next(e for e in examples if e.index == after["index"]))
        positions = {
            t.name: after["prompt"].index(f"CREATE TABLE {quote_identifier(t.name)} (")
            for t in schema.tables
        }
        listed = parse_columns(after["response"], schema).columns
        assert set(listed) == set(parse_columns(before["response"], schema).columns)
        at = [positions[schema.column(c).table] for c in listed]
        assert at == sorted(at)  # the list follows the order the prompt shows
        assert sorted(after["prompt"]) == sorted(before["prompt"])  # the same text, reordered
        moved += after["prompt"] != before["prompt"]
    assert moved >= len(examples) // 2


def test_generator_distillation_with_nothing_right_keeps_the_retriever(examples, prompts):
    engine = RoleEngine(examples, lambda ex, n, options: ["I cannot answer that."] * n)
    records, stats = _distil_generator(examples, prompts, engine, samples=1, balance=True)
    assert {r["role"] for r in records} == {"retriever"} and len(records) == len(examples)
    assert sum(stats.to_dict()["dropped"]["generator"].values()) == len(examples)


def test_tokenize_masks_the_prompt(prompts):
    tok = prompts.tokenizer
    items, dropped = tokenize_records(
        tok,
        [{"prompt": "<|im_start|>user\nhi<|im_end|>\n", "response": "SELECT 1", "role": "g"}],
        512,
    )
    (item,) = items
    n_prompt = len(tok("<|im_start|>user\nhi<|im_end|>\n", add_special_tokens=False).input_ids)
    assert item["labels"][:n_prompt] == [IGNORE] * n_prompt
    assert item["labels"][n_prompt:] == item["input_ids"][n_prompt:]
    assert item["input_ids"][-1] == tok.eos_token_id and dropped == 0


@pytest.mark.slow
def test_train_loss_falls_and_resumes(tiny_model_dir, examples, prompts, tmp_path):
    records, _ = build_gold(examples, prompts, SchemaCache(0), max_prompt_tokens=100_000)
    config = SftSection(
        epochs=6,
        time_budget_minutes=None,
        learning_rate=3e-3,
        batch_size=4,
        grad_accum=1,
        checkpoint_every=3,
        bf16_autocast=True,
        max_length=4096,
    )
    out = tmp_path / "sft"
    summary = train_sft(tiny_model_dir, records, out, config, device="cpu")
    assert summary["steps"] == summary["planned_steps"] == 18
    assert summary["final_loss"] < summary["first_loss"] * 0.8
    assert (out / "model.safetensors").is_file() and (out / "tokenizer.json").is_file()
    assert len(list((out / "checkpoints").glob("step-*"))) == 2  # the newest two kept

    # a killed run: only the step-15 checkpoint is left; training picks up from it
    for ckpt in (out / "checkpoints").glob("step-*"):
        if ckpt.name != "step-000015":
            import shutil

            shutil.rmtree(ckpt)
    again = train_sft(tiny_model_dir, records, out, config, device="cpu")
    assert again["resumed_from_step"] == 15 and again["steps"] == 18
    assert again["losses"][:15] == summary["losses"][:15]


def test_time_budget_stops_cleanly(tiny_model_dir, examples, prompts, tmp_path):
    records, _ = build_gold(examples, prompts, SchemaCache(0), max_prompt_tokens=100_000)
    config = SftSection(
        epochs=50,
        time_budget_minutes=0.001,
        batch_size=4,
        grad_accum=1,
        max_length=4096,
        bf16_autocast=False,
    )
    summary = train_sft(tiny_model_dir, records, tmp_path / "sft", config, device="cpu")
    assert summary["stop_reason"] == "time_budget" and summary["steps"] < summary["planned_steps"]
    assert json.loads((tmp_path / "sft" / "sft_summary.json").read_text())["steps"] >= 1


def test_max_steps_stops_on_the_schedule_of_the_whole_run(
    tiny_model_dir, examples, prompts, tmp_path
):
    records, _ = build_gold(examples, prompts, SchemaCache(0), max_prompt_tokens=100_000)
    common = dict(
        epochs=2,
        time_budget_minutes=None,
        batch_size=4,
        grad_accum=1,
        max_length=4096,
        bf16_autocast=False,
        learning_rate=1e-3,
    )
    whole = train_sft(tiny_model_dir, records, tmp_path / "a", SftSection(**common), device="cpu")
    cut = train_sft(
        tiny_model_dir, records, tmp_path / "b", SftSection(**common, max_steps=3), device="cpu"
    )
    assert cut["stop_reason"] == "max_steps" and cut["steps"] == 3
    assert cut["planned_steps"] == whole["planned_steps"] > 3
    # the same three steps as the uncut run: same data order, same learning rates
    assert cut["losses"] == whole["losses"][:3]


def empty_list_engine(examples, cut_off=False) -> RoleEngine:
    """The retriever answers an empty list; the generator the gold SQL, cut off if asked."""

    def generator(ex, n, options):
        reason = "length" if cut_off else "stop"
        return [Completion(sql_answer(ex.sql), [1, 2], [-0.1, -0.2], reason)] * n

    return RoleEngine(examples, generator, lambda ex, n, options: [columns_answer([])] * n)


def _distil(examples, prompts, engine, samples=(2, 2), balance=False):
    """Self-distilled records from `engine`, with (retriever, generator) samples per question."""
    return _build(
        build_self_distilled,
        examples,
        prompts,
        engine,
        balance,
        retriever_samples=samples[0],
        generator_samples=samples[1],
        vote_threshold=0.5,
        temperature=1.0,
    )


def _build(builder, examples, prompts, engine, balance, **options):
    """`builder`'s records from `engine`, with the settings every distilling test shares."""
    with BatchExecutor(workers=0) as executor:
        return builder(
            examples,
            prompts,
            SchemaCache(0),
            engine,
            executor,
            top_p=1.0,
            max_new_tokens=64,
            max_prompt_tokens=100_000,
            balance=balance,
            seed=0,
            **options,
        )


def test_sql_with_unresolved_columns_supports_no_retriever_sample(examples, prompts, monkeypatch):
    from acesql.errors import SqlParseError
    from acesql.sft import data

    def unresolved(sql, schema):
        raise SqlParseError("cannot resolve")

    monkeypatch.setattr(data, "extract_columns", unresolved)
    # the vote is empty, so the generator sees an empty schema; its gold SQL still executes
    records, stats = _distil(examples, prompts, empty_list_engine(examples))
    d = stats.to_dict()
    assert d["dropped"]["generator"]["columns_unresolved"] == 2 * len(examples)
    # an empty list once "supported" every such SQL (frozenset() <= anything); now none
    assert d["dropped"]["retriever"]["supports_no_matched_sql"] == 2 * len(examples)
    assert [r for r in records if r["role"] == "retriever"] == []


def test_outputs_cut_off_at_the_token_limit_are_never_targets(examples, prompts):
    records, stats = _distil(examples, prompts, empty_list_engine(examples, cut_off=True))
    assert stats.to_dict()["dropped"]["generator"]["malformed"] == 2 * len(examples)
    assert [r for r in records if r["role"] == "generator"] == []


def test_sft_data_stage_warns_on_a_thin_cold_start_and_stops_on_none(
    tmp_path, tiny_model_dir, examples
):
    """A random model never writes right SQL: the distilled generator keeps no target (a
    warning naming why; the gold column sets still teach the retriever), and self-distillation,
    whose retriever targets need a right SQL too, keeps nothing at all (exit 2, nothing written)."""
    import shutil

    import yaml

    from tests.helpers import run_stage

    shutil.copytree(tiny_model_dir, tmp_path / "models" / "base")
    (tmp_path / "data" / "prepared").mkdir(parents=True)
    (tmp_path / "data" / "prepared" / "train.jsonl").write_text(
        "".join(json.dumps(e.to_dict()) + "\n" for e in examples)
    )
    params = {
        "base": {
            "data_dir": str(tmp_path / "data"),
            "models_dir": str(tmp_path / "models"),
            "tracking_uri": f"sqlite:///{tmp_path / 'mlflow.db'}",
        },
        "base_model": {},
        "prompt": {"sample_values": 0},
        "sft_data": {
            "mode": "distill_generator",
            "retriever_samples": 1,
            "generator_samples": 1,
            "generation": {"max_new_tokens": 8},
        },
    }
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    proc = run_stage("sft_data", path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    n = len(examples)
    warning = next(line for line in proc.stderr.splitlines() if "warning" in line)
    assert f"warning: only {n} retriever and 0 generator targets of {n} questions" in warning
    assert "generator pred_error" in warning and warning.endswith("or mode gold")
    assert len((tmp_path / "data" / "sft" / "retriever.jsonl").read_text().splitlines()) == n

    params["sft_data"].update(mode="self_distill", retriever_samples=2, generator_samples=2)
    path.write_text(yaml.safe_dump(params))
    proc = run_stage("sft_data", path)
    assert proc.returncode == 2
    assert (
        f"error: sft_data kept no target: 0 retriever and 0 generator targets of {n}" in proc.stderr
    )
    # the previous run's targets are left as they were
    assert len((tmp_path / "data" / "sft" / "retriever.jsonl").read_text().splitlines()) == n


def test_train_stops_before_the_first_step_when_the_disk_is_short(
    tiny_model_dir, examples, prompts, tmp_path, monkeypatch
):
    records, _ = build_gold(examples, prompts, SchemaCache(0), max_prompt_tokens=100_000)
    free = namedtuple("Usage", "total used free")(10**9, 10**9 - 1000, 1000)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: free)
    config = SftSection(epochs=1, batch_size=4, grad_accum=1, max_length=4096)
    with pytest.raises(DiskSpaceError, match="SFT will write about"):
        train_sft(tiny_model_dir, records, tmp_path / "sft", config, device="cpu")
    assert not (tmp_path / "sft" / "checkpoints").exists()
