"""The stand-ins tests use for the parts that need a model: engines that answer from a script,
a judge that prefers given SQL texts, and tokenizers that need no vocabulary.

- `RoleEngine`: both roles of the pipeline from per-example scripts (`columns_answer`,
  `sql_answer`, `gold_columns` write its texts);
- `AskEngine`: a retriever naming one column and a generator with given samples, for `ask`;
- `Judge`: an R3 judge that prefers and trusts the SQL texts it is given, and records what it
  was asked;
- `ChatTokenizer` / `WordTokenizer`: a chat template that joins the messages; words as tokens.
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace

from acesql.data.loaders import Example
from acesql.models.engine import Completion


def columns_answer(columns) -> str:
    """A retriever output naming `columns`."""
    return "```\n[" + ", ".join(columns) + "]\n```"


def sql_answer(sql: str) -> str:
    """A generator output holding `sql`."""
    return f"```sql\n{sql}\n```"


def gold_columns(ex: Example, n: int, options: dict) -> list[str]:
    """The retriever's right answer, n times."""
    return [columns_answer(ex.gold_columns)] * n


class RoleEngine:
    """A stand-in engine for both roles: a prompt is answered from the example whose question it
    holds, by `retriever(ex, n, options)` in the schema-linking role and `generator(ex, n,
    options)` otherwise, each giving n texts (or Completions, kept as they are). A text becomes
    a Completion finished by `reason`, with the token ids of `tokenizer` plus EOS when one is
    given, else two placeholder tokens. `prompt` holds the prompt being answered."""

    def __init__(
        self,
        examples: list[Example],
        generator: Callable[[Example, int, dict], list],
        retriever: Callable[[Example, int, dict], list] = gold_columns,
        *,
        tokenizer=None,
        reason: str = "stop",
    ):
        self.examples, self.generator, self.retriever = examples, generator, retriever
        self.tokenizer, self.reason = tokenizer, reason
        self.prompt = ""

    def generate(self, prompts, n=1, **options):
        out = []
        for p in prompts:
            self.prompt = p
            ex = next(e for e in self.examples if e.question in p)
            role = self.retriever if "schema linking" in p else self.generator
            out.append([self.completion(t) for t in role(ex, n, options)])
        return out

    def completion(self, text) -> Completion:
        if isinstance(text, Completion):
            return text
        if self.tokenizer is None:
            return Completion(text, [1, 2], [-0.1, -0.2], self.reason)
        ids = self.tokenizer(text, add_special_tokens=False).input_ids
        ids.append(self.tokenizer.eos_token_id)
        return Completion(text, ids, [-1.0] * len(ids), self.reason)

    def update_weights(self, model):  # the scripts do not depend on the weights
        pass

    def close(self):
        pass


class AskEngine:
    """A retriever that names one column, a generator whose samples are given."""

    def __init__(self, greedy: str, samples: list[str]):
        self.greedy, self.samples = greedy, samples

    def generate(self, prompts, n=1, temperature=1.0, **options):
        (prompt,) = prompts
        if "list the columns" in prompt or "Which columns" in prompt:
            texts = ["```\n[student.name]\n```"]
        elif temperature == 0:
            texts = [f"```sql\n{self.greedy}\n```"]
        else:
            texts = [f"```sql\n{s}\n```" for s in self.samples[:n]]
        return [[Completion(t) for t in texts]]


class Judge:
    """Prefers and trusts the SQL texts in `right`; records the groups it audited and the
    pairs it compared."""

    def __init__(self, right: set[str]):
        self.right, self.pairs, self.audits = right, [], []

    def audit(self, context, groups):
        self.audits.append([[c.sql for c in g] for g in groups])
        return 0.9 if any(c.sql in self.right for g in groups for c in g) else 0.1

    def pairwise_many(self, context, pairs):
        self.pairs += [(a.sql, b.sql) for a, b in pairs]
        return [
            0.9 if a.sql in self.right else 0.1 if b.sql in self.right else 0.5 for a, b in pairs
        ]

    def pointwise_many(self, context, candidates):
        return [0.8 if c.sql in self.right else 0.3 for c in candidates]


class ChatTokenizer:
    """A chat template that joins the messages' contents, one a line."""

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=True, **kw):
        return "\n".join(m["content"] for m in messages)


class WordTokenizer(ChatTokenizer):
    """Counts words as tokens."""

    def __call__(self, text, add_special_tokens=False):
        return SimpleNamespace(input_ids=text.split())
