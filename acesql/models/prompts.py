"""The two roles' prompts and targets, rendered through the model's chat template.

    prompts = PromptBuilder(tokenizer, reasoning=False, sample_values=0)
    text = prompts.retriever(schema, question, evidence)            # full schema
    text = prompts.generator(schema, columns, question, evidence)   # pruned to `columns`
    prompts.retriever_target(schema, columns), prompts.generator_target(sql)

The wording lives in `templates/prompts.yaml`. Targets end the way the parsers in
`acesql.sql.parsing` read them: a code block with `[table.column, ...]`, or a ```sql block.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache
from pathlib import Path

import yaml

from acesql.sql.schema import Schema, quote_identifier

TEMPLATES = Path(__file__).parent / "templates" / "prompts.yaml"
SQL_FORMATS = ("direct", "cocte")  # the generator's: one query, or Chain-of-CTE steps


@cache
def templates() -> dict:
    return yaml.safe_load(TEMPLATES.read_text())


class PromptBuilder:
    """Builds chat-formatted prompts for one tokenizer and prompt settings."""

    def __init__(
        self,
        tokenizer,
        reasoning: bool = False,
        sample_values: int = 0,
        sql_format: str = "direct",
    ):
        if sql_format not in SQL_FORMATS:
            raise ValueError(f"sql_format must be one of {SQL_FORMATS}, got {sql_format!r}")
        self.tokenizer = tokenizer
        self.reasoning = reasoning
        self.sample_values = sample_values
        self.sql_format = sql_format
        style = templates()["answer_style"]
        self.answer_style = style["reasoning" if reasoning else "direct"]

    def with_sql_format(self, sql_format: str) -> PromptBuilder:
        """The same settings with the generator writing `sql_format`."""
        return PromptBuilder(self.tokenizer, self.reasoning, self.sample_values, sql_format)

    def retriever(self, schema: Schema, question: str, evidence: str = "") -> str:
        return self._chat("retriever", self.schema_text(schema, None), question, evidence)

    def generator(
        self, schema: Schema, columns: Iterable[str] | None, question: str, evidence: str = ""
    ) -> str:
        role = "generator_cocte" if self.sql_format == "cocte" else "generator"
        return self._chat(role, self.schema_text(schema, columns), question, evidence)

    def retriever_target(self, schema: Schema, columns: Iterable[str]) -> str:
        order = {cid: i for i, cid in enumerate(schema.column_ids)}
        names = []
        for cid in sorted(set(columns), key=lambda c: order.get(c, len(order))):
            col = schema.column(cid)
            names.append(f"{quote_identifier(col.table)}.{quote_identifier(col.name)}")
        return self._think() + "```\n[" + ", ".join(names) + "]\n```"

    def generator_target(self, sql: str) -> str:
        return self._think() + "```sql\n" + sql.strip().rstrip(";") + "\n```"

    def fits(self, prompt: str, max_tokens: int) -> bool:
        """Whether the chat-formatted `prompt` is at most `max_tokens` tokens long."""
        return self.token_count(prompt) <= max_tokens

    def token_count(self, prompt: str) -> int:
        """Tokens of the chat-formatted `prompt`."""
        return len(self.tokenizer(prompt, add_special_tokens=False).input_ids)

    def schema_text(self, schema: Schema, columns: Iterable[str] | None) -> str:
        """The schema as a role's prompt shows it (`columns`: the pruned set; None: all)."""
        return schema.render(columns, samples=self.sample_values > 0)

    # ---------------------------------------------------------------- private
    def _think(self) -> str:
        return "<think>\n</think>\n" if self.reasoning else ""


    def _chat(self, role: str, schema_text: str, question: str, evidence: str) -> str:
        t = templates()[role]
        hint = f"\nHint: {evidence.strip()}" if evidence and evidence.strip() else ""
        user = t["user"].format(
            schema=schema_text, question=question.strip(), hint=hint, answer_style=self.answer_style
        )
        messages = [{"role": "system", "content": t["system"]}, {"role": "user", "content": user}]
        return self.tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True, enable_thinking=self.reasoning
        )
