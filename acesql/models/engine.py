"""The rollout-engine interface: n sampled completions per prompt, with token log-probs.

    engine = load_engine("transformers", "models/sft", device="cpu")
    groups = engine.generate(prompts, n=8, temperature=1.0, max_new_tokens=256, seed=0)
    groups[i][j].text, groups[i][j].token_ids, groups[i][j].logprobs

`logprobs[k]` is the log-probability of `token_ids[k]` under the model's raw next-token
distribution (temperature 1, before top-p), which is what GRPO's importance ratio needs.
Engines are registered by name; vLLM's module is imported only when asked for.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field

from acesql.errors import ConfigError
from acesql.models.base_model import resolve_model_path


@dataclass
class Completion:
    text: str  # decoded, special tokens skipped, cut at the first stop string
    token_ids: list[int] = field(default_factory=list)  # sampled tokens, EOS included if sampled
    logprobs: list[float] = field(default_factory=list)  # one per token id
    finish_reason: str = "length"  # "stop" (EOS or a stop string) or "length"


class Engine:
    """Base class of rollout engines."""

    def generate(
        self,
        prompts: list[str],
        n: int = 1,
        temperature: float = 1.0,
        top_p: float = 1.0,
        max_new_tokens: int = 256,
        stop: list[str] | None = None,
        seed: int | None = None,
    ) -> list[list[Completion]]:
        """`n` completions for each prompt (prompts are already chat-formatted text).

        temperature 0 means greedy decoding; then all n completions are the same.
        """
        raise NotImplementedError

    def update_weights(self, model) -> None:
        """Take the trainer's current weights (a torch module or a state dict)."""
        raise NotImplementedError

    def close(self) -> None:
        """Release devices and processes."""


ENGINES = {
    "transformers": "acesql.models.hf_engine:HFEngine",
    "vllm": "acesql.models.vllm_engine:VllmEngine",
}


def load_engine(name: str, model_dir, **options) -> Engine:
    """The engine registered as `name`, loading the model at `model_dir` (or where its
    `model.json` redirect points: the base_model stage's record of a hub id or local folder)."""
    target = ENGINES.get(name)
    if target is None:
        raise ConfigError(f"unknown rollout engine {name!r}; choose one of {sorted(ENGINES)}")
    module_name, class_name = target.split(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(
            f"rollout engine {name!r} is not installed ({exc}); for vllm install the "
            "`vllm` extra in a GPU worker environment"
        ) from exc
    if model_dir is not None:  # a base model given as a hub id or a folder elsewhere

        model_dir = resolve_model_path(model_dir)
    return getattr(module, class_name)(model_dir, **options)


def open_engine(settings, model_dir, **options) -> Engine:
    """The engine a `GenerationSection` of params asks for, on the model at `model_dir`."""
    if settings.engine == "transformers":
        options.setdefault("bf16_autocast", settings.bf16_autocast)
    return load_engine(settings.engine, model_dir, batch_size=settings.batch_size, **options)
