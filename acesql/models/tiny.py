"""A tiny randomly initialised chat model, built offline in seconds, for tests and smoke runs.

It has a real byte-level BPE tokenizer (trained here on a small SQL-flavoured corpus) and a
ChatML template like SmolLM2's, so prompts, training and generation take the same code paths
as the real model. Its outputs are noise, of course.
"""

from __future__ import annotations

from pathlib import Path

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

_CORPUS = [
    "SELECT name FROM singer WHERE age > 20 ORDER BY name DESC LIMIT 3;",
    "CREATE TABLE student (id INTEGER PRIMARY KEY, name TEXT, dept_id INTEGER);",
    "```sql\nSELECT COUNT(*) FROM orders GROUP BY status HAVING COUNT(*) > 1\n```",
    "[student.name, student.age, course.title]",
    "Which students are older than 20? List the names of the departments.",
    "<think>The question asks for names.</think>",
    "WITH t AS (SELECT a, SUM(b) AS s FROM x JOIN y ON x.id = y.x_id) SELECT * FROM t",
]


def build_tiny_model(
    out: str | Path,
    seed: int = 0,
    vocab_size: int = 600,
    hidden_size: int = 64,
    num_hidden_layers: int = 2,
) -> Path:
    """Write a tiny Llama model and its tokenizer to `out` (an ordinary HF folder); benches
    make it wider and deeper."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out = Path(out)
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(_CORPUS * 20, trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token="<|endoftext|>",
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_hidden_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
    )
    model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
