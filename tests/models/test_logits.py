"""Response-only logits give the same loss and log-probs as a full forward pass."""

import torch
import torch.nn.functional as F

from acesql.models.logits import IGNORE, response_loss, shared_prompt_logprobs, token_logprobs


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


def test_shared_prompt_gives_the_full_numbers_and_gradients(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    prompt = list(range(5, 40))
    comps = [[50, 60, 70, 80], [51, 61], [52, 62, 72]]
    weights = torch.tensor([[1.0, 2.0, 3.0, 4.0], [-1.0, 0.5, 0, 0], [2.0, 1.0, -3.0, 0]])
    shared, mask = shared_prompt_logprobs(model, prompt, comps)
    assert mask.tolist() == [[True] * 4, [True, True, False, False], [True] * 3 + [False]]
    (shared * weights * mask).sum().backward()
    g_shared = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()

    p, width = len(prompt), 4
    ids = torch.zeros((3, p + width), dtype=torch.long)
    attn, score = torch.zeros_like(ids), torch.zeros_like(ids, dtype=torch.bool)
    for row, c in enumerate(comps):
        ids[row, : p + len(c)] = torch.tensor(prompt + c)
        attn[row, : p + len(c)] = 1
        score[row, p : p + len(c)] = True
    full = token_logprobs(model, ids, attn, score)[:, p:]
    (full * weights * mask).sum().backward()
    torch.testing.assert_close(shared[mask], full[mask], atol=1e-5, rtol=0)
    for a, b in zip(g_shared, (p.grad for p in model.parameters())):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
