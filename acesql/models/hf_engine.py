"""The transformers rollout engine: batched sampling with `model.generate`, on CPU or one GPU.

    engine = HFEngine("models/sft", device="cpu", batch_size=8)
    groups = engine.generate(prompts, n=8, temperature=1.0, max_new_tokens=256, stop=["```\\n"])

Every prompt is repeated n times and the copies are generated in left-padded chunks of
`batch_size` rows (greedy decoding generates each prompt once and copies the result). A row
stops at EOS or at the token that completes a stop string; the chunk ends when every row has
stopped. Log-probs are those of the raw model distribution (temperature 1, before top-p),
gathered from the raw logits `generate` returns (`output_logits=True`); those logits, of shape
(rows, steps, vocab), are the engine's largest allocation and never outlive their chunk.

A trainer can pass its own policy module (`model=`): generation then runs on the live weights,
in eval mode without autograd, and the module's train/eval mode is restored afterwards.
Generation runs under `torch.no_grad()`, not `torch.inference_mode()`: autocast keeps the bf16
copy of a weight for the whole call only outside inference mode, and only of a weight that
requires grad, so the weights a trainer froze are marked as requiring grad for the call (and
put back after). Otherwise every decoding step casts every weight again, which made bf16
decoding slower than fp32 on CPU (`bench/autocast_bench.py` measures it; the completions are
identical).
Same seed, same prompts, same `batch_size` -> the same completions on CPU. Seeding forks the
global RNG, so it does not disturb the caller's random stream.
"""

from __future__ import annotations

import dataclasses
from contextlib import contextmanager
from pathlib import Path

import torch
from tqdm import tqdm
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    StoppingCriteria,
    StoppingCriteriaList,
)

from acesql.errors import ConfigError
from acesql.memory import release_free_heap
from acesql.models.engine import Completion, Engine
from acesql.models.logits import cache_argument, cache_of
from acesql.models.precision import bf16_autocast_enabled

DTYPES = {"auto": "auto", "float32": torch.float32, "bfloat16": torch.bfloat16}
DEVICES = ("auto", "cpu", "cuda")


class HFEngine(Engine):
    """Rollouts with a transformers causal LM (loaded from `model_dir`, or given)."""

    def __init__(
        self,
        model_dir: str | Path | None = None,
        device: str = "auto",
        dtype: str = "auto",
        model=None,
        tokenizer=None,
        batch_size: int = 8,
        progress: bool = True,
        share_prefix: bool = True,
        bf16_autocast: bool | str = False,
    ):
        """Load the model and tokenizer at `model_dir`, or use `model` / `tokenizer` as given.

        A given model stays where it is (its device and dtype win over `device` and `dtype`)
        and is shared, not copied. `batch_size` is the number of sequences generated together;
        `progress` shows a bar when a call needs more than one batch. `share_prefix` prefills
        a prompt sampled n times once (a chunk then holds max(batch_size, n) rows);
        `bf16_autocast` runs fp32 weights with bf16 matrix products (meant for CPUs with
        AVX512-BF16 or AMX; CPUs without go several times slower, and sampling a 0.5B model
        on an H200 went 2.6 times slower; log-probs move by about 1e-2); "auto" asks the
        hardware and means fp32 on a GPU (`acesql.models.precision`).
        """
        if device not in DEVICES:
            raise ConfigError(f"unknown device {device!r}; choose one of {list(DEVICES)}")
        if dtype not in DTYPES:
            raise ConfigError(f"unknown dtype {dtype!r}; choose one of {sorted(DTYPES)}")
        if batch_size < 1:
            raise ConfigError(f"batch_size must be at least 1, got {batch_size}")
        if model_dir is None and (model is None or tokenizer is None):
            raise ConfigError("HFEngine needs a model folder, or both `model` and `tokenizer`")
        if tokenizer is None:
            tokenizer = AutoTokenizer.from_pretrained(model_dir)
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        if model is None:
            if device == "auto":
                device = "cuda" if torch.cuda.is_available() else "cpu"
            model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=DTYPES[dtype])
            model.to(device)
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.progress = progress
        self.share_prefix = share_prefix
        self.device = next(model.parameters()).device
        self.bf16_autocast = bf16_autocast_enabled(bf16_autocast, self.device, generation=True)
        self.eos_ids = _eos_ids(model, tokenizer)

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
        copies = 1 if greedy else n
        rows = [prompt for prompt in prompts for _ in range(copies)]
        options = {
            "max_new_tokens": max_new_tokens,
            "eos_token_id": self.eos_ids.tolist(),
            "pad_token_id": self.tokenizer.pad_token_id,
            "output_logits": True,
            "return_dict_in_generate": True,
            "use_cache": True,  # a trainer may have turned it off in the model's config
            "repetition_penalty": 1.0,
        }
        if greedy:
            options["do_sample"] = False
        else:
            # top_k=0 explicitly: transformers otherwise defaults to top-k 50 when sampling.
            options.update(do_sample=True, temperature=temperature, top_p=top_p, top_k=0)
        # Prompts sampled several times are prefilled once and their cache copied to each
        # sample; chunks then hold whole groups. Rows (or groups) of similar length share a
        # chunk: less padding, the same results per row.
        share = copies > 1 and self.share_prefix
        units = prompts if share else rows
        per_chunk = max(1, self.batch_size // copies) if share else self.batch_size
        order = sorted(range(len(units)), key=lambda i: len(units[i]))
        completions: list[Completion | None] = [None] * len(rows)
        bar = tqdm(
            total=len(rows),
            desc="generate",
            unit="seq",
            disable=not self.progress or len(rows) <= self.batch_size,
        )
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad(), _seeded(seed, self.device), self._autocast():
                for start in range(0, len(units), per_chunk):
                    picked = order[start : start + per_chunk]
                    chunk = [units[i] for i in picked]
                    done = self._generate_chunk(chunk, options, stop or [], copies if share else 1)
                    targets = (
                        [i * copies + k for i in picked for k in range(copies)] if share else picked
                    )
                    for i, completion in zip(targets, done):
                        completions[i] = completion
                    bar.update(len(targets))
        finally:
            self.model.train(was_training)
            bar.close()
            release_free_heap()  # the step logits' pages, freed but kept by the C heap
        groups = [completions[i * copies : (i + 1) * copies] for i in range(len(prompts))]
        if greedy:
            groups = [[_copy(group[0]) for _ in range(n)] for group in groups]
        return groups

    def _generate_chunk(
        self, texts: list[str], options: dict, stop: list[str], copies: int = 1
    ) -> list[Completion]:
        """Completions of `texts`, each `copies` times in a row (rows grouped by prompt)."""
        # Prompts are chat-formatted text that already holds any BOS the template wants.
        batch = self.tokenizer(
            texts,
            return_tensors="pt",
            padding=True,
            padding_side="left",
            add_special_tokens=False,
        ).to(self.device)
        prompt_len = batch["input_ids"].shape[1]
        if copies > 1 and prompt_len > 1:
            batch = self._prefill_shared(batch, copies)
        elif copies > 1:
            batch = {k: v.repeat_interleave(copies, 0) for k, v in batch.items()}
        rows = batch["input_ids"].shape[0]
        stop_criterion = _StopStrings(self.tokenizer, stop, prompt_len, rows) if stop else None
        out = self.model.generate(
            **batch,
            stopping_criteria=StoppingCriteriaList([stop_criterion] if stop_criterion else []),
            **options,
        )
        new_ids = out.sequences[:, prompt_len:]  # (rows, steps)
        step_logits = list(out.logits)  # steps x (rows, vocab), float32, raw
        del out
        logprobs = _token_logprobs(step_logits, new_ids)

        steps = new_ids.shape[1]
        is_eos = torch.isin(new_ids, self.eos_ids.to(new_ids.device))
        hit_eos = is_eos.any(dim=1)
        lengths = torch.where(hit_eos, is_eos.int().argmax(dim=1) + 1, steps)
        stopped = hit_eos
        if stop_criterion is not None:
            stop_lengths = torch.tensor(stop_criterion.lengths(steps), device=lengths.device)
            lengths = torch.minimum(lengths, stop_lengths)
            stopped = stopped | (stop_lengths <= steps)

        lengths_list, stopped_list = lengths.tolist(), stopped.tolist()
        token_rows = [ids[:n] for ids, n in zip(new_ids.tolist(), lengths_list)]
        logprob_rows = [lps[:n] for lps, n in zip(logprobs.tolist(), lengths_list)]
        decoded = self.tokenizer.batch_decode(token_rows, skip_special_tokens=True)
        completions = []
        for text, ids, lps, was_stopped in zip(decoded, token_rows, logprob_rows, stopped_list):
            cut = _cut_at_stop(text, stop)
            finished = was_stopped or len(cut) < len(text)
            completions.append(Completion(cut, ids, lps, "stop" if finished else "length"))
        return completions

    def _prefill_shared(self, batch, copies: int) -> dict:
        """Run the prompts but their last token once; give each of `copies` rows the cache.

        Positions follow the attention mask, as `generate` computes them, so the cached keys
        are the ones `generate` would have computed itself for left-padded rows.
        """
        ids, mask = batch["input_ids"], batch["attention_mask"]
        positions = (mask.long().cumsum(-1) - 1).clamp(min=0)
        out = self.model(
            input_ids=ids[:, :-1],
            attention_mask=mask[:, :-1],
            position_ids=positions[:, :-1],
            use_cache=True,
        )
        cache = cache_of(out)
        cache.batch_repeat_interleave(copies)
        return {
            "input_ids": ids.repeat_interleave(copies, 0),
            "attention_mask": mask.repeat_interleave(copies, 0),
            cache_argument(self.model): cache,
        }

    @contextmanager
    def _autocast(self):
        """bf16 autocast over the whole call, its weight copies kept from step to step."""
        if not self.bf16_autocast:
            yield
            return
        frozen = [p for p in self.model.parameters() if not p.requires_grad]
        for p in frozen:
            p.requires_grad_(True)
        try:
            with torch.autocast(self.device.type, dtype=torch.bfloat16):
                yield
        finally:
            for p in frozen:
                p.requires_grad_(False)

    def update_weights(self, model) -> None:
        """Take the trainer's weights: nothing to do when the engine shares its module."""
        if model is self.model:
            return
        state = model.state_dict() if isinstance(model, torch.nn.Module) else model
        self.model.load_state_dict(state)

    def close(self) -> None:
        self.model = None
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


class _StopStrings(StoppingCriteria):
    """Stops a row at the token that completes a stop string in its decoded completion.

    Each step decodes only the last few tokens of each row (enough to hold the longest stop
    string), and only the generated part, so a stop string is never matched across the prompt.
    It remembers how many tokens each row had when it stopped.
    """

    def __init__(self, tokenizer, stop: list[str], prompt_len: int, rows: int):
        self.tokenizer = tokenizer
        self.stop = stop
        self.prompt_len = prompt_len
        self.window = max(len(s.encode()) for s in stop) + 1
        self.stopped_at: list[int | None] = [None] * rows

    def __call__(self, input_ids: torch.LongTensor, scores, **kwargs) -> torch.BoolTensor:
        generated = input_ids.shape[1] - self.prompt_len
        tails = input_ids[:, -min(self.window, generated) :].tolist()
        texts = self.tokenizer.batch_decode(tails, skip_special_tokens=True)
        for row, text in enumerate(texts):
            if self.stopped_at[row] is None and any(s in text for s in self.stop):
                self.stopped_at[row] = generated
        done = [at is not None for at in self.stopped_at]
        return torch.tensor(done, dtype=torch.bool, device=input_ids.device)

    def lengths(self, steps: int) -> list[int]:
        """Tokens kept per row: up to the stop string's last token; `steps + 1` if none."""
        return [steps + 1 if at is None else at for at in self.stopped_at]


def _token_logprobs(step_logits: list[torch.Tensor], token_ids: torch.Tensor, block: int = 128):
    """log_softmax(logits)[token] for every step and row: (rows, steps).

    Takes the steps `block` at a time and drops each step's logits once used, so the peak is
    the logits themselves plus one block, not three copies of (rows, steps, vocab).
    """
    parts = []
    for start in range(0, len(step_logits), block):
        logits = torch.stack(step_logits[start : start + block], dim=1)  # (rows, block, vocab)
        step_logits[start : start + block] = [None] * logits.shape[1]
        ids = token_ids[:, start : start + block, None]
        parts.append(logits.gather(-1, ids).squeeze(-1) - logits.logsumexp(-1))
    return torch.cat(parts, dim=1)


def _eos_ids(model, tokenizer) -> torch.Tensor:
    """Every token that ends a completion: the generation config's EOS ids and the tokenizer's."""
    configured = model.generation_config.eos_token_id
    ids = set(configured if isinstance(configured, list) else [configured])
    ids.add(tokenizer.eos_token_id)
    ids.discard(None)
    if not ids:
        raise ConfigError("the model has no EOS token; set eos_token in its tokenizer config")
    return torch.tensor(sorted(ids))


def _cut_at_stop(text: str, stop: list[str]) -> str:
    """`text` up to the earliest stop string in it.

    >>> _cut_at_stop("SELECT 1\\n```\\nmore", ["```", "</s>"])
    'SELECT 1\\n'
    """
    cuts = [text.find(s) for s in stop if s in text]
    return text[: min(cuts)] if cuts else text


def _copy(completion: Completion) -> Completion:
    return dataclasses.replace(
        completion, token_ids=list(completion.token_ids), logprobs=list(completion.logprobs)
    )


@contextmanager
def _seeded(seed: int | None, device: torch.device):
    """Seed torch inside the block, restoring the caller's RNG state afterwards."""
    if seed is None:
        yield
        return
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        yield
