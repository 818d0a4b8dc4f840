"""Rollout engines: HFEngine on the tiny model (CPU, fp32) and VllmEngine against a fake `vllm`.

The tiny model's random weights are scaled up (x8) so its next-token distributions are sharp
enough for greedy decoding to write varied text instead of one repeated token.
"""

import copy
import subprocess
import sys
import types

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from acesql.errors import ConfigError
from acesql.models.engine import Completion, load_engine
from acesql.models.hf_engine import HFEngine, _token_logprobs

PROMPTS = [
    "<|im_start|>user\nWhich students are older than 20?<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>user\nSELECT<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>system\nCREATE TABLE student (id INTEGER PRIMARY KEY, name TEXT);<|im_end|>\n"
    "<|im_start|>user\nList the names of the departments.<|im_end|>\n<|im_start|>assistant\n",
]


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    # The tiny model's matrices gain nothing from a second thread, and two OpenMP threads
    # slow down tenfold when another process holds one of a 2-core machine's cores.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture(scope="module")
def sharp_model(tiny_model_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() == 2:
                param.mul_(8.0)
    return model.eval()


@pytest.fixture(scope="module")
def engine(sharp_model, tokenizer):
    return HFEngine(model=sharp_model, tokenizer=tokenizer, batch_size=4)


def _prompt_ids(tokenizer, prompt: str) -> list[int]:
    return tokenizer(prompt, add_special_tokens=False)["input_ids"]


def _plain_greedy(model, tokenizer, prompt: str, max_new_tokens: int) -> list[int]:
    """`model.generate` on the prompt alone, cut after the first EOS."""
    ids = torch.tensor([_prompt_ids(tokenizer, prompt)])
    with torch.no_grad():
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            do_sample=False,
            max_new_tokens=max_new_tokens,
            pad_token_id=tokenizer.pad_token_id,
        )
    new = out[0, ids.shape[1] :].tolist()
    eos = model.generation_config.eos_token_id
    eos = set(eos if isinstance(eos, list) else [eos])
    first_eos = next((k for k, token in enumerate(new) if token in eos), None)
    return new if first_eos is None else new[: first_eos + 1]


def test_output_shapes(engine):
    groups = engine.generate(PROMPTS, n=3, max_new_tokens=12, seed=0)
    assert [len(group) for group in groups] == [3, 3, 3]
    for completion in (c for group in groups for c in group):
        assert isinstance(completion, Completion)
        assert 0 < len(completion.token_ids) <= 12
        assert len(completion.logprobs) == len(completion.token_ids)
        assert all(lp <= 0 for lp in completion.logprobs)
        assert completion.finish_reason in ("stop", "length")


def test_seed_determinism(engine):
    run = lambda seed: engine.generate(PROMPTS, n=2, max_new_tokens=10, seed=seed)  # noqa: E731
    first, again, other = run(7), run(7), run(8)
    assert first == again
    assert [c.token_ids for g in first for c in g] != [c.token_ids for g in other for c in g]


def test_seeded_generation_leaves_global_rng_alone(engine):
    state = torch.get_rng_state()
    engine.generate(PROMPTS[:1], n=2, max_new_tokens=4, seed=3)
    assert torch.equal(torch.get_rng_state(), state)


def test_greedy_matches_plain_generate(engine, sharp_model, tokenizer):
    groups = engine.generate(PROMPTS, n=3, temperature=0, max_new_tokens=16)
    for prompt, group in zip(PROMPTS, groups):
        assert len(group) == 3
        assert all(c == group[0] for c in group)
        assert group[0].token_ids == _plain_greedy(sharp_model, tokenizer, prompt, 16)


def test_left_padding_matches_single_prompt(engine):
    batched = engine.generate(PROMPTS, temperature=0, max_new_tokens=16)
    alone = [engine.generate([prompt], temperature=0, max_new_tokens=16)[0] for prompt in PROMPTS]
    for [padded], [single] in zip(batched, alone):
        assert (padded.text, padded.token_ids) == (single.text, single.token_ids)
        assert padded.logprobs == pytest.approx(single.logprobs, abs=1e-4)
    assert len({len(engine.tokenizer(p)["input_ids"]) for p in PROMPTS}) == len(PROMPTS)


def test_logprobs_are_the_raw_model_distribution(engine, sharp_model, tokenizer):
    # Sampled with temperature and top-p, scored at temperature 1 without top-p.
    groups = engine.generate(PROMPTS, n=2, temperature=0.7, top_p=0.9, max_new_tokens=12, seed=1)
    for prompt, group in zip(PROMPTS, groups):
        prompt_ids = _prompt_ids(tokenizer, prompt)
        for completion in group:
            ids = torch.tensor([prompt_ids + completion.token_ids])
            with torch.no_grad():
                logits = sharp_model(ids).logits[0, len(prompt_ids) - 1 : -1]
            expected = logits.log_softmax(-1).gather(-1, ids[0, len(prompt_ids) :, None])
            got = torch.tensor(completion.logprobs)
            torch.testing.assert_close(got, expected.squeeze(-1), atol=1e-4, rtol=0)


def test_token_logprobs_in_blocks():
    logits = torch.randn(3, 7, 11)
    ids = torch.randint(0, 11, (3, 7))
    expected = logits.log_softmax(-1).gather(-1, ids[..., None]).squeeze(-1)
    got = _token_logprobs(list(logits.unbind(1)), ids, block=3)
    torch.testing.assert_close(got, expected)


def test_stop_strings_cut_text_and_stop_early(engine, sharp_model):
    [[free]] = engine.generate(PROMPTS[:1], max_new_tokens=24, seed=5)
    stop = free.text[len(free.text) // 2 : len(free.text) // 2 + 2]
    assert stop.strip() and stop in free.text
    forwards = []
    hook = sharp_model.register_forward_hook(lambda *args: forwards.append(1))
    try:
        [[completion]] = engine.generate(PROMPTS[:1], max_new_tokens=24, seed=5, stop=[stop])
    finally:
        hook.remove()
    assert completion.text == free.text[: free.text.index(stop)]
    assert completion.finish_reason == "stop"
    assert len(completion.token_ids) < len(free.token_ids)
    assert completion.token_ids == free.token_ids[: len(completion.token_ids)]
    assert len(completion.logprobs) == len(completion.token_ids)
    assert len(forwards) == len(completion.token_ids)  # generation stopped at the stop string


def test_eos_ends_a_completion_and_is_kept(sharp_model, tokenizer):
    # A second EOS id in the generation config (as Qwen's has): the 4th greedy token of prompt 0.
    plain = _plain_greedy(sharp_model, tokenizer, PROMPTS[0], 16)
    eos_token = plain[3]
    model = copy.deepcopy(sharp_model)
    model.generation_config.eos_token_id = [tokenizer.eos_token_id, eos_token]
    engine = HFEngine(model=model, tokenizer=tokenizer)
    groups = engine.generate(PROMPTS, temperature=0, max_new_tokens=16)
    first = groups[0][0]
    assert first.token_ids == plain[: plain.index(eos_token) + 1]
    assert first.finish_reason == "stop"
    for group, prompt in zip(groups, PROMPTS):
        assert group[0].token_ids == _plain_greedy(model, tokenizer, prompt, 16)


def test_train_mode_restored(engine, sharp_model):
    sharp_model.train()
    try:
        engine.generate(PROMPTS[:1], n=2, max_new_tokens=4, seed=0)
        assert sharp_model.training
    finally:
        sharp_model.eval()


def test_update_weights(tiny_model_dir, sharp_model, engine):
    own = HFEngine(tiny_model_dir, device="cpu", dtype="float32")
    before = own.generate(PROMPTS[:2], temperature=0, max_new_tokens=8)
    own.update_weights(sharp_model)
    assert own.generate(PROMPTS[:2], temperature=0, max_new_tokens=8) == engine.generate(
        PROMPTS[:2], temperature=0, max_new_tokens=8
    )
    assert own.generate(PROMPTS[:2], temperature=0, max_new_tokens=8) != before
    engine.update_weights(sharp_model)  # shared module: nothing to copy
    assert engine.model is sharp_model


def test_load_engine(tiny_model_dir):
    engine = load_engine("transformers", tiny_model_dir, device="cpu")
    assert isinstance(engine, HFEngine)
    assert len(engine.generate(PROMPTS[:1], n=2, max_new_tokens=3, seed=0)[0]) == 2
    engine.close()
    with pytest.raises(ConfigError, match="unknown rollout engine"):
        load_engine("nope", tiny_model_dir)
    with pytest.raises(ConfigError, match="dtype"):
        HFEngine(tiny_model_dir, dtype="float8")


def test_vllm_missing_is_a_config_error(tiny_model_dir, monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # makes `import vllm` fail
    with pytest.raises(ConfigError, match="install the `vllm` extra"):
        load_engine("vllm", tiny_model_dir)


def test_vllm_module_imports_without_vllm():
    code = "import sys, acesql.models.vllm_engine; assert 'vllm' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


# --- VllmEngine against a fake `vllm` -------------------------------------------------------


class _Logprob:
    def __init__(self, logprob):
        self.logprob = logprob


class _FakeLLM:
    """Records its calls; each prompt gets `n` samples of three tokens (prompt length + k)."""

    def __init__(self, **kwargs):
        self.kwargs = kwargs
        self.calls = []
        self.model = types.SimpleNamespace(loaded=[])
        self.model.load_weights = self.model.loaded.extend

    def get_tokenizer(self):
        return types.SimpleNamespace(
            encode=lambda text, add_special_tokens: (
                [ord(ch) for ch in text] + ([0] if add_special_tokens else [])
            )
        )

    def generate(self, requests, params, use_tqdm=True):
        self.calls.append((requests, params))
        outputs = []
        for request in requests:
            base = len(request["prompt_token_ids"])
            samples = []
            for k in range(params.n):
                ids = (base + k, base + k + 1, base + k + 2)
                # logprobs=0 may still return other candidates: the sampled id must be picked
                logprobs = [{t: _Logprob(-t / 4), t + 100: _Logprob(-9.0)} for t in ids]
                reason = "stop" if k == 0 else "length"
                samples.append(
                    types.SimpleNamespace(
                        text=f"s{k}", token_ids=ids, logprobs=logprobs, finish_reason=reason
                    )
                )
            outputs.append(types.SimpleNamespace(outputs=samples))
        return outputs

    def apply_model(self, func):
        return [func(self.model)]


@pytest.fixture
def fake_vllm(monkeypatch):
    module = types.ModuleType("vllm")
    module.LLM = _FakeLLM
    module.SamplingParams = lambda **kwargs: types.SimpleNamespace(**kwargs)
    monkeypatch.setitem(sys.modules, "vllm", module)
    return module


def test_vllm_parameters_and_outputs(fake_vllm, tmp_path):
    engine = load_engine("vllm", tmp_path, batch_size=8, gpu_memory_utilization=0.3)
    assert engine.llm.kwargs == {
        "model": str(tmp_path),
        "dtype": "auto",
        "gpu_memory_utilization": 0.3,
    }
    groups = engine.generate(
        ["ab", "abcd"], n=2, temperature=0.8, top_p=0.9, max_new_tokens=7, stop=["```"], seed=3
    )
    requests, params = engine.llm.calls[-1]
    assert requests == [{"prompt_token_ids": [97, 98]}, {"prompt_token_ids": [97, 98, 99, 100]}]
    assert vars(params) == {
        "n": 2,
        "temperature": 0.8,
        "top_p": 0.9,
        "max_tokens": 7,
        "stop": ["```"],
        "seed": 3,
        "logprobs": 0,
    }
    assert groups[1][1] == Completion("s1", [5, 6, 7], [-1.25, -1.5, -1.75], "length")
    assert groups[0][0].finish_reason == "stop"
    assert groups[0][0].logprobs == [-0.5, -0.75, -1.0]


def test_vllm_greedy_samples_once(fake_vllm, tmp_path):
    engine = load_engine("vllm", tmp_path)
    groups = engine.generate(["ab"], n=4, temperature=0, max_new_tokens=5)
    _, params = engine.llm.calls[-1]
    assert params.n == 1 and params.stop is None
    assert len(groups[0]) == 4 and all(c == groups[0][0] for c in groups[0])


def test_vllm_update_weights_loads_named_parameters(fake_vllm, tmp_path):
    engine = load_engine("vllm", tmp_path)
    policy = torch.nn.Linear(3, 2)
    engine.update_weights(policy)
    loaded = dict(engine.llm.model.loaded)
    assert sorted(loaded) == ["bias", "weight"]
    assert torch.equal(loaded["weight"], policy.weight) and not loaded["weight"].requires_grad
    engine.update_weights({"lm_head.weight": torch.zeros(2)})
    assert engine.llm.model.loaded[-1][0] == "lm_head.weight"


def test_bf16_autocast_keeps_weight_copies_and_the_freezing(sharp_model, tokenizer):
    """Under autocast the engine runs outside inference mode with every weight marked as
    requiring grad, so autocast keeps its bf16 copies from step to step: the same tokens as
    casting every step (an outer inference mode), and a trainer's frozen weights stay frozen."""
    from acesql.models.freezing import train_top_layers

    model = copy.deepcopy(sharp_model)
    trainable = {id(p) for p in train_top_layers(model, 1)}
    engine = HFEngine(model=model, tokenizer=tokenizer, batch_size=4, bf16_autocast=True)
    seen = []
    hook = model.register_forward_pre_hook(
        lambda *_: seen.append(all(p.requires_grad for p in model.parameters()))
    )
    try:
        kept = engine.generate(PROMPTS, n=2, max_new_tokens=12, seed=3)
        with torch.inference_mode():
            recast = engine.generate(PROMPTS, n=2, max_new_tokens=12, seed=3)
    finally:
        hook.remove()

    def rows(groups):
        return [[(c.token_ids, c.logprobs) for c in group] for group in groups]

    assert rows(kept) == rows(recast)
    assert seen and all(seen)
    assert {id(p) for p in model.parameters() if p.requires_grad} == trainable
    assert 0 < len(trainable) < len(list(model.parameters()))
