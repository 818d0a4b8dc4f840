"""How long a prepared split's full-schema prompts are, in a model's tokens.

    acesql data prompt-lengths data/prepared/test_wide.jsonl --tokenizer models/base

The retriever always reads the whole schema; the generator reads it whole when it answers
without a pruned list (the full_schema answer policy). Prompts longer than
`prompt.max_prompt_tokens` are dropped from training (sft_data, grpo_data); evaluation cuts
nothing, so there the longest prompt must fit the model's context instead.
"""

from __future__ import annotations

from collections.abc import Sequence

from acesql.data.loaders import Example
from acesql.data.schemas import SchemaCache
from acesql.data.stats import spread
from acesql.models.prompts import PromptBuilder


def full_schema_prompt_tokens(
    examples: Sequence[Example], prompts: PromptBuilder, schemas: SchemaCache
) -> dict[str, list[int]]:
    """Tokens of each example's retriever prompt and full-schema generator prompt, by role."""
    tokens: dict[str, list[int]] = {"retriever": [], "generator": []}
    for example in examples:
        schema = schemas(example)
        question, evidence = example.question, example.evidence
        for role, prompt in (
            ("retriever", prompts.retriever(schema, question, evidence)),
            ("generator", prompts.generator(schema, None, question, evidence)),
        ):
            ids = prompts.tokenizer(prompt, add_special_tokens=False).input_ids
            tokens[role].append(len(ids))
    return tokens


def prompt_length_report(tokens: dict[str, list[int]], limit: int) -> dict:
    """Spread of each role's prompt tokens, and how many exceed `limit` (max_prompt_tokens).

    >>> prompt_length_report({"retriever": [10, 30, 20]}, limit=25)
    {'limit': 25, 'retriever': {'min': 10, 'median': 20, 'p90': 30, 'max': 30, 'over_limit': 1}}
    """
    report: dict = {"limit": limit}
    for role, values in tokens.items():
        report[role] = {**spread(values), "over_limit": sum(v > limit for v in values)}
    return report
