"""Next-token losses and log-probs computed on the positions that need them only.

A causal LM's output layer over a 50k-token vocabulary costs as much as a fifth of the
model on every position, and its softmax more. SFT scores the response only, and a
retriever prompt is a thousand tokens of schema before a twenty-token answer: running the
output layer on the scored positions alone makes a training step markedly cheaper on CPU.
Models whose decoder and output layer cannot be split fall back to a full forward.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

IGNORE = -100


def _split(model):
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    # models that scale or cap logits after the head (e.g. Gemma's softcapping) need the
    # full forward to stay exact
    plain = getattr(model.config, "final_logit_softcapping", None) is None
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
