"""Next-token losses and log-probs computed on the positions that need them only.

A causal LM's output layer over a 50k-token vocabulary costs as much as a fifth of the
model on every position, and its softmax more. SFT scores the response only, and a
retriever prompt is a thousand tokens of schema before a twenty-token answer: running the
output layer on the scored positions alone makes a training step markedly cheaper on CPU.
Models whose decoder and output layer cannot be split fall back to a full forward, and so
do models wrapped for several processes: FSDP gathers shared weights in the whole model's
forward only, and DDP (which hides the model's own attributes) syncs gradients through it.
"""

from __future__ import annotations

import functools
import inspect

import torch
import torch.nn.functional as F

IGNORE = -100


def _split(model):
    from torch.distributed.fsdp import FSDPModule

    if isinstance(model, FSDPModule):
        return None, None
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    # models that scale or cap logits after the head (e.g. Gemma's softcapping) need the
    # full forward to stay exact
    plain = getattr(getattr(model, "config", None), "final_logit_softcapping", None) is None
    return (decoder, head) if decoder is not None and head is not None and plain else (None, None)


def scored_logits(model, input_ids, attention_mask, score_mask) -> torch.Tensor:
    """Logits predicting token t+1 at every position t where `score_mask[:, t+1]` is True.

    Returns a (n_scored, vocab) tensor, rows in row-major order of the mask.
    """
    target_mask = score_mask[:, 1:]
    decoder, head = _split(model)
    if decoder is None:
        logits = model(input_ids=input_ids, attention_mask=attention_mask).logits
        return logits[:, :-1][target_mask]
    hidden = decoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    return head(hidden[:, :-1][target_mask])


def response_loss(model, input_ids, attention_mask, labels) -> torch.Tensor:
    """Mean cross-entropy over the tokens whose label is not IGNORE (the response)."""
    score_mask = labels != IGNORE
    logits = scored_logits(model, input_ids, attention_mask, score_mask)
    return F.cross_entropy(logits.float(), labels[:, 1:][score_mask[:, 1:]])


def token_logprobs(model, input_ids, attention_mask, score_mask) -> torch.Tensor:
    """Log-probabilities of the tokens at `score_mask` (a (batch, len) bool tensor).

    Returns a (batch, len) float tensor, zero where the mask is False.
    """
    logits = scored_logits(model, input_ids, attention_mask, score_mask).float()
    targets = input_ids[:, 1:][score_mask[:, 1:]]
    picked = torch.log_softmax(logits, dim=-1).gather(-1, targets[:, None]).squeeze(-1)
    out = torch.zeros(input_ids.shape, dtype=picked.dtype, device=picked.device)
    out[:, 1:][score_mask[:, 1:]] = picked
    return out


def shared_prompt_logprobs(
    model, prompt_ids: list[int], completions: list[list[int]], device=None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probs of several completions of one prompt, the prompt run once.

    The prompt goes through the decoder once (with autograd when enabled, so its gradient
    counts once for all completions); its key/value cache is repeated for each completion,
    which then runs on top of it. Exactly the numbers of running every prompt + completion
    in full, for a fraction of the compute when the prompt is long (a retriever's schema).

    Returns (logprobs, mask), both (n, longest completion): mask True on real tokens.
    Models whose decoder and output layer cannot be split fall back to full forwards.
    """
    device = device or next(model.parameters()).device
    n, width = len(completions), max(len(c) for c in completions)
    comp = torch.full((n, width), 0, dtype=torch.long, device=device)
    mask = torch.zeros((n, width), dtype=torch.bool, device=device)
    for row, c in enumerate(completions):
        comp[row, : len(c)] = torch.tensor(c, device=device)
        mask[row, : len(c)] = True
    decoder, head = _split(model)
    p = len(prompt_ids)
    if decoder is None or p < 1:
        ids = torch.cat([torch.tensor([prompt_ids] * n, device=device), comp], dim=1)
        attn = torch.cat([torch.ones((n, p), dtype=torch.long, device=device), mask.long()], 1)
        score = torch.cat([torch.zeros((n, p), dtype=torch.bool, device=device), mask], 1)
        return token_logprobs(model, ids, attn, score)[:, p:], mask
    prompt = torch.tensor([prompt_ids], device=device)
    out = decoder(input_ids=prompt, use_cache=True)
    cache = cache_of(out)
    cache.batch_repeat_interleave(n)
    attn = torch.cat([torch.ones((n, p), dtype=torch.long, device=device), mask.long()], dim=1)
    positions = torch.arange(p, p + width, device=device).expand(n, width)
    hidden = decoder(
        input_ids=comp,
        attention_mask=attn,
        position_ids=positions,
        use_cache=True,
        **{cache_argument(decoder): cache},
    ).last_hidden_state
    # token 0 is predicted by the prompt's last position, token t by completion position t-1
    first = out.last_hidden_state[:, -1:].expand(n, 1, -1)
    states = torch.cat([first, hidden[:, :-1]], dim=1)[mask]
    logits = head(states).float()
    picked = torch.log_softmax(logits, dim=-1).gather(-1, comp[mask][:, None]).squeeze(-1)
    logprobs = torch.zeros((n, width), dtype=picked.dtype, device=device)
    logprobs[mask] = picked
    return logprobs, mask


def cache_of(output):
    """The key/value cache of a model output (`cache` in recent transformers)."""
    cache = getattr(output, "cache", None)
    return cache if cache is not None else output.past_key_values


def cache_argument(model) -> str:
    """The name under which `model`'s forward (and so `generate`) takes a key/value cache.

    Recent transformers call it `cache`; earlier 5.x releases and 4.x, `past_key_values`.
    A cache passed under the other name lands in `**kwargs` unread: the forward then runs
    as if no prompt came before (wrong log-probs, silently), and `generate` refuses it.
    """
    return _cache_argument_of(type(model))


@functools.cache
def _cache_argument_of(model_class) -> str:
    # read once per class: a signature costs more than the lookup on every forward
    takes_cache = "cache" in inspect.signature(model_class.forward).parameters
    return "cache" if takes_cache else "past_key_values"
