"""The CUDA paths on a tiny random model: the transformers engine, SFT, and GRPO in bf16.

Marked `gpu` and skipped without a CUDA device (`make test-gpu` runs them on a machine with
one). Where fp32 on the GPU must compute what fp32 on the CPU computes, the two are compared;
bf16 autocast can only be close, so it is held to the fp32 result by a looser measure.
"""

import pytest
import torch

from acesql.config import SftSection
from acesql.data.loaders import load_dataset
from acesql.data.schemas import SchemaCache
from acesql.models.base_model import load_model, load_tokenizer
from acesql.models.hf_engine import HFEngine
from acesql.models.logits import token_logprobs
from acesql.models.prompts import PromptBuilder
from acesql.sft.data import build_gold
from acesql.sft.trainer import train_sft
from tests.grpo_helpers import SEQS, grpo_config, grpo_trainer, sgd_update

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

QUESTIONS = ["How many singers are older than 30?", "List every product name.", "Count rows."]


@pytest.fixture(scope="module")
def examples(synth_dir):
    return load_dataset(synth_dir, "synth", "train").examples[:4]


@pytest.fixture(scope="module")
def chat_prompts(tiny_model_dir):
    tok = load_tokenizer(tiny_model_dir)
    return [
        tok.apply_chat_template(
            [{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True
        )
        for q in QUESTIONS
    ]


def _teacher_forced(model, tokenizer, prompt: str, completion_ids: list[int]) -> torch.Tensor:
    """Log-probs of `completion_ids` after `prompt`, one forward pass, on the model's device."""
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    ids = torch.tensor([prompt_ids + completion_ids], device=model.device)
    mask = torch.zeros_like(ids, dtype=torch.bool)
    mask[0, len(prompt_ids) :] = True
    with torch.no_grad():
        out = token_logprobs(model, ids, torch.ones_like(ids), mask)
    return out[0, len(prompt_ids) :].cpu()


def test_engine_generates_on_cuda_as_on_cpu(tiny_model_dir, chat_prompts):
    cpu = HFEngine(tiny_model_dir, device="cpu", dtype="float32", progress=False)
    gpu = HFEngine(tiny_model_dir, device="cuda", dtype="float32", progress=False)
    assert gpu.device.type == "cuda" and next(gpu.model.parameters()).is_cuda
    kw = dict(n=1, temperature=0, max_new_tokens=12)
    for prompt, [c], [g] in zip(
        chat_prompts, cpu.generate(chat_prompts, **kw), gpu.generate(chat_prompts, **kw)
    ):
        # the log-probs the GPU engine reports are those of its own tokens
        forced = _teacher_forced(gpu.model, gpu.tokenizer, prompt, g.token_ids)
        torch.testing.assert_close(torch.tensor(g.logprobs), forced, atol=1e-4, rtol=1e-4)
        # the CPU's tokens score the same on both devices
        on_cpu = _teacher_forced(cpu.model, cpu.tokenizer, prompt, c.token_ids)
        on_gpu = _teacher_forced(gpu.model, gpu.tokenizer, prompt, c.token_ids)
        torch.testing.assert_close(on_gpu, on_cpu, atol=1e-4, rtol=1e-4)
        # greedy paths part only where the CPU's two best tokens were within rounding
        same = 0
        while same < min(len(c.token_ids), len(g.token_ids)) and (
            c.token_ids[same] == g.token_ids[same]
        ):
            same += 1
        if same < len(c.token_ids) and same < len(g.token_ids):
            theirs = _teacher_forced(cpu.model, cpu.tokenizer, prompt, g.token_ids[: same + 1])
            assert abs(float(on_cpu[same] - theirs[same])) < 1e-3, (prompt, same)


def test_sampling_on_cuda_is_seeded_and_bf16_stays_close(tiny_model_dir, chat_prompts):
    gpu = HFEngine(tiny_model_dir, device="cuda", dtype="float32", progress=False)
    kw = dict(n=4, temperature=1.0, max_new_tokens=10, seed=7)
    first, again = gpu.generate(chat_prompts, **kw), gpu.generate(chat_prompts, **kw)
    assert [[c.token_ids for c in g] for g in first] == [[c.token_ids for c in g] for g in again]
    assert len({tuple(c.token_ids) for c in first[0]}) > 1  # samples, not one greedy path
    bf16 = HFEngine(tiny_model_dir, device="cuda", bf16_autocast=True, progress=False)
    assert bf16.bf16_autocast
    for prompt, group in zip(chat_prompts, bf16.generate(chat_prompts, **kw)):
        for c in group:
            fp32 = _teacher_forced(gpu.model, gpu.tokenizer, prompt, c.token_ids)
            assert c.finish_reason in ("stop", "length") and len(c.logprobs) == len(c.token_ids)
            # bf16 products move a log-prob by about 1e-2 on this model, not by whole nats
            assert (torch.tensor(c.logprobs) - fp32).abs().max() < 0.25


def _sft(tiny_model_dir, examples, out, device, **over):
    prompts = PromptBuilder(load_tokenizer(tiny_model_dir), reasoning=False, sample_values=0)
    records, _ = build_gold(examples, prompts, SchemaCache(0), max_prompt_tokens=100_000)
    fields = dict(
        epochs=8,
        time_budget_minutes=None,
        learning_rate=3e-3,
        batch_size=4,
        grad_accum=1,
        checkpoint_every=4,
        bf16_autocast=False,
        max_length=4096,
    )
    return train_sft(tiny_model_dir, records, out, SftSection(**fields | over), device=device)


def test_sft_on_cuda_follows_the_cpu_and_trains_in_bf16(tiny_model_dir, examples, tmp_path):
    cpu = _sft(tiny_model_dir, examples, tmp_path / "cpu", "cpu")
    gpu = _sft(tiny_model_dir, examples, tmp_path / "gpu", "cuda")
    assert gpu["steps"] == cpu["steps"] > 4
    # the same batches and updates: fp32 losses agree step by step
    assert gpu["losses"] == pytest.approx(cpu["losses"], rel=2e-3)
    bf16 = _sft(tiny_model_dir, examples, tmp_path / "bf16", "cuda", bf16_autocast=True)
    assert bf16["final_loss"] < bf16["first_loss"] * 0.8
    assert bf16["final_loss"] == pytest.approx(gpu["final_loss"], rel=0.1)
    saved = load_model(tmp_path / "bf16", dtype="float32", device="cpu")
    assert all(torch.isfinite(p).all() for p in saved.parameters())


def _update_on(device, tiny_model_dir, bf16: bool):
    update = sgd_update(tiny_model_dir, device, bf16_autocast=bf16)
    before = [p.detach().clone() for p in update.model.parameters()]
    stats = update(SEQS, 0.5)
    after = update.model.parameters()
    delta = torch.cat([(p.detach() - b).flatten().cpu() for p, b in zip(after, before)])
    return stats, delta


def test_grpo_update_on_cuda_matches_the_cpu(tiny_model_dir):
    cpu_stats, cpu_delta = _update_on("cpu", tiny_model_dir, bf16=False)
    gpu_stats, gpu_delta = _update_on("cuda", tiny_model_dir, bf16=False)
    for key in ("retriever/loss", "generator/loss", "retriever/grad_norm", "conflict_ratio"):
        assert gpu_stats[key] == pytest.approx(cpu_stats[key], rel=1e-4, abs=1e-6), key
    assert float(cpu_delta.abs().max()) > 1e-4  # the step moved the weights
    torch.testing.assert_close(gpu_delta, cpu_delta, atol=1e-6, rtol=1e-3)
    bf16_stats, bf16_delta = _update_on("cuda", tiny_model_dir, bf16=True)
    cosine = torch.nn.functional.cosine_similarity(bf16_delta, cpu_delta, dim=0)
    assert cosine > 0.99, f"bf16 update points elsewhere: cosine {float(cosine):.4f}"


def test_grpo_trainer_runs_on_cuda_in_bf16(tiny_model_dir, examples, tmp_path):
    cfg = grpo_config(max_steps=2, checkpoint_every=1, bf16_autocast=True)
    trainer = grpo_trainer(tiny_model_dir, examples, tmp_path, cfg, device="cuda")
    assert trainer.device.type == "cuda" and next(trainer.model.parameters()).is_cuda
    assert trainer.update.autocast.fast_dtype == torch.bfloat16 and trainer.update.autocast._enabled
    summary = trainer.train()
    trainer.close()
    assert summary["steps"] == 2 and summary["stop_reason"] == "steps"
    saved = load_model(tmp_path / "grpo", dtype="float32", device="cpu")
    start = load_model(tiny_model_dir, dtype="float32", device="cpu")
    moved = max(float((a - b).abs().max()) for a, b in zip(saved.parameters(), start.parameters()))
    assert 0 < moved < 1 and all(torch.isfinite(p).all() for p in saved.parameters())


def test_grpo_trainer_samples_with_the_transformers_engine_on_cuda(
    tiny_model_dir, examples, tmp_path
):
    from acesql.grpo.pool import EmpiricalPool
    from acesql.grpo.rollout import question_key
    from acesql.grpo.trainer import GrpoTrainer

    pool = EmpiricalPool()
    for ex in examples:
        pool.seed(question_key(ex), [ex.gold_columns])
    cfg = grpo_config(max_steps=1, bf16_autocast=True)
    trainer = GrpoTrainer(
        tiny_model_dir, examples, pool, tmp_path / "grpo", cfg, device="cuda", progress=False
    )
    assert trainer.engine.device.type == "cuda"
    summary = trainer.train()
    trainer.close()
    # a random model's SQL earns nothing: the step runs, the flat groups leave the weights
    assert summary["steps"] == 1 and (tmp_path / "grpo" / "model.safetensors").is_file()
