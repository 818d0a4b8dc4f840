"""Training the top of a model only, and when bf16 autocast is on: on the tiny random model."""

from pathlib import Path

import pytest
import torch

from acesql.config import SftSection
from acesql.data.schemas import SchemaCache
from acesql.errors import ConfigError
from acesql.models.base_model import load_model
from acesql.models.freezing import train_top_layers
from acesql.models.precision import bf16_autocast_enabled
from acesql.sft.data import build_gold
from acesql.sft.trainer import train_sft


def _top(model, n):
    layers = model.get_decoder().layers
    return {id(p) for block in layers[-n:] for p in block.parameters()} | {
        id(p) for p in model.get_decoder().norm.parameters()
    }


def test_only_the_top_blocks_and_norm_stay_trainable(tiny_model_dir):
    model = load_model(tiny_model_dir)
    trainable = train_top_layers(model, 1)
    assert {id(p) for p in trainable} == _top(model, 1)
    assert not model.get_input_embeddings().weight.requires_grad
    assert not model.get_output_embeddings().weight.requires_grad
    everything = train_top_layers(model, None)
    assert len(everything) == len(list(model.parameters()))
    assert all(p.requires_grad for p in model.parameters())


def test_asking_for_more_blocks_than_the_model_has(tiny_model_dir):
    model = load_model(tiny_model_dir)
    n = len(model.get_decoder().layers)
    assert len(train_top_layers(model, n)) == len(list(model.parameters())) - 1  # embedding
    with pytest.raises(ConfigError, match=f"has {n} decoder blocks, asked for {n + 1}"):
        train_top_layers(model, n + 1)


def test_sft_with_the_top_block_moves_nothing_below_it(tiny_model_dir, synth_dir, tmp_path):
    from acesql.data.loaders import load_dataset
    from acesql.models.base_model import load_tokenizer
    from acesql.models.prompts import PromptBuilder

    examples = load_dataset(synth_dir, "synth", "train").examples[:8]
    prompts = PromptBuilder(load_tokenizer(tiny_model_dir))
    records, _ = build_gold(examples, prompts, SchemaCache(0), max_prompt_tokens=100_000)
    config = SftSection(
        epochs=1,
        time_budget_minutes=None,
        learning_rate=1e-2,
        batch_size=4,
        grad_accum=1,
        max_length=4096,
        train_layers=1,
    )
    train_sft(tiny_model_dir, records, tmp_path / "sft", config, device="cpu")
    before, after = load_model(tiny_model_dir), load_model(tmp_path / "sft")
    top = {name for name, p in after.named_parameters() if id(p) in _top(after, 1)}
    old = dict(before.named_parameters())
    for name, p in after.named_parameters():
        assert torch.equal(p, old[name]) != (name in top), name


def test_bf16_autocast_setting():
    assert bf16_autocast_enabled(True, "cpu") and not bf16_autocast_enabled(False, "cpu")
    native = any(
        flag in Path("/proc/cpuinfo").read_text().split() for flag in ("avx512_bf16", "amx_bf16")
    )
    assert bf16_autocast_enabled("auto", "cpu") == native
    assert bf16_autocast_enabled("auto", "meta") is False
    # on a GPU, auto trains under autocast but samples in fp32 (it slowed sampling there)
    gpu_bf16 = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    assert bf16_autocast_enabled("auto", "cuda") == gpu_bf16
    assert bf16_autocast_enabled("auto", "cuda", generation=True) is False
    assert bf16_autocast_enabled(True, "cuda", generation=True) is True
    with pytest.raises(ValueError, match="true, false or 'auto'"):
        bf16_autocast_enabled("sometimes", "cpu")
