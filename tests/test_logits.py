"""Response-only logits give the same loss and log-probs as a full forward pass."""

import torch
import torch.nn.functional as F

from acesql.models.logits import IGNORE, response_loss, token_logprobs


def test_matches_the_full_forward(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    torch.manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (3, 12))
    mask = torch.ones_like(ids)
    mask[2, -3:] = 0
    labels = ids.clone()
    labels[:, :7] = IGNORE
    labels[mask == 0] = IGNORE
    full = model(input_ids=ids, attention_mask=mask, labels=labels).loss
    assert torch.allclose(response_loss(model, ids, mask, labels), full, atol=1e-5)

    score = labels != IGNORE
    logits = model(input_ids=ids, attention_mask=mask).logits
    want = F.log_softmax(logits[:, :-1], -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    got = token_logprobs(model, ids, mask, score)
    assert torch.allclose(got[:, 1:][score[:, 1:]], want[score[:, 1:]], atol=1e-5)
    assert (got[~score] == 0).all()
