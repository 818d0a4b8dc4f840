"""The vLLM rollout engine: a thin adapter over vLLM's offline API (`vllm.LLM.generate`).

    engine = load_engine("vllm", "models/sft", gpu_memory_utilization=0.5)

vLLM lives in its own environment (it pins torch and transformers; see SPEC section 6), so it
is imported when an engine is built, never when this module is. Keyword options go to
`vllm.LLM` unchanged. Prompts are tokenized here without special tokens, as in `HFEngine`
(chat-formatted text already holds any BOS), and sent as token ids.

Log-probs: each sampled token's log-prob as vLLM reports it with `logprobs=0`. vLLM V1's default
`logprobs_mode="raw_logprobs"` is the raw model distribution, before temperature and top-p,
which is what GRPO's importance ratio needs; do not set a "processed" mode.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

from acesql.errors import ConfigError
from acesql.models.engine import Completion, Engine


class VllmEngine(Engine):
    """Rollouts with a `vllm.LLM` loaded from `model_dir`."""

    def __init__(
        self,
        model_dir: str | Path,
        dtype: str = "auto",
        batch_size: int | None = None,
        **llm_options,
    ):
        """`batch_size` is accepted so stages can build either engine with the same call, and
        ignored: vLLM schedules its own batches (bound them with `max_num_seqs`)."""
        try:
            import vllm
        except ImportError as exc:
            raise ConfigError(
                f"the vllm rollout engine needs vLLM, which is not installed here ({exc}); "
                "install the `vllm` extra in a separate GPU worker environment, or use "
                "rollout engine 'transformers'"
            ) from exc
        self._vllm = vllm
        self.llm = vllm.LLM(model=str(model_dir), dtype=dtype, **llm_options)
        self.tokenizer = self.llm.get_tokenizer()

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
        greedy = temperature == 0
        params = self._vllm.SamplingParams(
            n=1 if greedy else n,  # n identical greedy samples are one sample, copied
            temperature=temperature,
            top_p=top_p,
            max_tokens=max_new_tokens,
            stop=stop or None,
            seed=seed,
            logprobs=0,  # the sampled token's log-prob only
        )
        requests = [
            {"prompt_token_ids": self.tokenizer.encode(prompt, add_special_tokens=False)}
            for prompt in prompts
        ]
        outputs = self.llm.generate(requests, params, use_tqdm=False)
        if greedy:
            return [[_completion(output.outputs[0]) for _ in range(n)] for output in outputs]
        return [[_completion(sample) for sample in output.outputs] for output in outputs]

    def update_weights(self, model) -> None:
        """Load the trainer's weights (a torch module or a state dict) into the running model.

        Uses `LLM.apply_model`, which runs a function on the model in every vLLM worker
        (through `LLM.collective_rpc`), and the model's own `load_weights`, which takes
        (HF name, tensor) pairs and handles vLLM's fused layouts (qkv, gate_up). Targets
        vLLM >= 0.10 (V1 engine). With `VLLM_ENABLE_V1_MULTIPROCESSING=0` the engine runs in
        this process and the tensors are not copied (the colocated setup). Otherwise the
        function and tensors are pickled to the engine's processes, which V1 refuses unless
        `VLLM_ALLOW_INSECURE_SERIALIZATION=1` is set before the engine starts; fine for small
        models, slow for large ones (vLLM's RLHF examples use NCCL or CUDA IPC there).
        Unverified here: no GPU and no vLLM in the default environment; the unit tests check
        it against a fake `vllm`.
        """
        named = model.named_parameters() if hasattr(model, "named_parameters") else model.items()
        weights = [(name, tensor.detach()) for name, tensor in named]
        self.llm.apply_model(partial(_load_weights, weights))

    def close(self) -> None:
        self.llm = None


def _load_weights(weights: list, vllm_model) -> None:
    vllm_model.load_weights(weights)


def _completion(sample) -> Completion:
    """A vLLM `CompletionOutput` as a Completion, keeping each sampled token's log-prob."""
    token_ids = list(sample.token_ids)
    logprobs = [step[token].logprob for step, token in zip(sample.logprobs, token_ids)]
    finish_reason = "stop" if sample.finish_reason == "stop" else "length"
    return Completion(sample.text, token_ids, logprobs, finish_reason)
