"""The ranker role's judgments, scored from the next token's probabilities, not sampled text.

    judge = LetterJudge(model, tokenizer)
    p = judge.pairwise(context, a, b)   # P(a is the right one of a and b), both orders averaged
    q = judge.pointwise(context, a)     # P(a is right)
    r = judge.audit(context, groups)    # P(a likely-correct SQL is in the pool)

The prompts are `templates/prompts.yaml`'s `ranker` section, rendered with the model's chat
template; the answer is read as the probability mass of the letter tokens (`A` / `B`, `Yes` /
`No`) at the first answer position, renormalised over those letters. A pair is asked in both
orders and averaged, which cancels the judge's preference for a position; judgments are
cached by the question, the schema shown and the SQL texts, so a pair or a candidate is never
judged twice for one question (and a question asked of two databases is judged on each).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch

from acesql.models.logits import cache_argument, cache_of
from acesql.models.prompts import templates
from acesql.sql.observation import render_observation
from acesql.sql.sandbox import ExecResult

PREVIEW_ROWS = 5


@dataclass(frozen=True)
class Candidate:
    sql: str
    result: ExecResult


@dataclass(frozen=True)
class Context:
    question: str
    schema: str  # the schema text the generator saw
    evidence: str = ""


class LetterJudge:
    """Pairwise and pointwise judgments of one model (a torch causal LM and its tokenizer)."""

    def __init__(self, model, tokenizer, batch_size: int = 8):
        self.model, self.tokenizer, self.batch_size = model, tokenizer, batch_size
        self.letters = {
            "pair": [self._token(t) for t in ("A", "B")],
            "point": [self._token(t) for t in ("Yes", "No")],
        }
        self._pairs: dict[tuple, float] = {}
        self._points: dict[tuple, float] = {}
        self.calls = 0  # prompts scored (each pair costs two)

    def pairwise(self, context: Context, a: Candidate, b: Candidate) -> float:
        return self.pairwise_many(context, [(a, b)])[0]

    def pointwise(self, context: Context, c: Candidate) -> float:
        return self.pointwise_many(context, [c])[0]

    def pairwise_many(
        self, context: Context, pairs: list[tuple[Candidate, Candidate]]
    ) -> list[float]:
        """P(first is right) for each pair, both orders averaged (one batch for the new ones)."""
        keys = [(context.question, context.schema, a.sql, b.sql) for a, b in pairs]
        todo = [(k, a, b) for k, (a, b) in zip(keys, pairs) if k not in self._pairs]
        prompts = []
        for _, a, b in todo:
            prompts += [self.pair_prompt(context, a, b), self.pair_prompt(context, b, a)]
        probs = self._first_letter(prompts, self.letters["pair"])
        for n, (key, _, _) in enumerate(todo):
            forward, backward = probs[2 * n], probs[2 * n + 1]
            self._pairs[key] = 0.5 * (forward + (1.0 - backward))
        return [self._pairs[k] for k in keys]

    def pointwise_many(self, context: Context, candidates: list[Candidate]) -> list[float]:
        keys = [(context.question, context.schema, c.sql) for c in candidates]
        todo = [(k, c) for k, c in zip(keys, candidates) if k not in self._points]
        probs = self._first_letter(
            [self._point_prompt(context, c) for _, c in todo], self.letters["point"]
        )
        for (key, _), p in zip(todo, probs):
            self._points[key] = p
        return [self._points[k] for k in keys]

    def audit(self, context: Context, groups: list[list[Candidate]]) -> float:
        """P(a likely-correct SQL is among `groups`), from the auditor prompt: each group's
        SQL and row preview, with the execution sanity a reader needs (errors are left
        out by grouping; empty results and NULL-only columns are said)."""
        lines = []
        for k, group in enumerate(groups, 1):
            first = group[0]
            notes = []
            if not first.result.rows:
                notes.append("returned no rows")
            null_columns = [
                name
                for i, name in enumerate(first.result.columns)
                if first.result.rows and all(row[i] is None for row in first.result.rows)
            ]
            if null_columns:
                notes.append(f"only NULL in {', '.join(null_columns)}")
            note = f" ({'; '.join(notes)})" if notes else ""
            preview = render_observation(first.result, max_rows=PREVIEW_ROWS)
            lines.append(
                f"Group {k}: {len(group)} candidate(s){note}\n```sql\n{first.sql}\n```\n{preview}"
            )
        prompt = ranker_prompt(self.tokenizer, "auditor", context, pool="\n\n".join(lines))
        return self._first_letter([prompt], self.letters["point"])[0]

    # ------------------------------------------------------------------ internals
    def _token(self, text: str) -> int:
        return letter_id(self.tokenizer, text)

    def pair_prompt(self, context: Context, a: Candidate, b: Candidate) -> str:
        return pair_prompt(self.tokenizer, context, a, b)

    def _point_prompt(self, context: Context, c: Candidate) -> str:
        return point_prompt(self.tokenizer, context, c)

    def _first_letter(self, prompts: list[str], letters: list[int]) -> list[float]:
        """The probability of the first letter among `letters` at each prompt's next token."""
        if not prompts:
            return []
        logp = next_token_logprobs(self.model, self.tokenizer, prompts, self.batch_size)
        self.calls += len(prompts)
        return torch.softmax(logp[:, letters], dim=-1)[:, 0].tolist()


def letter_id(tokenizer, text: str) -> int:
    """The token an answer starting with `text` begins with (`A`, `B`, `Yes`, `No`)."""
    return tokenizer(text, add_special_tokens=False).input_ids[0]


def pair_prompt(tokenizer, context: Context, a: Candidate, b: Candidate) -> str:
    """The pairwise judgment's chat prompt: is query A or query B the right one?"""
    return ranker_prompt(
        tokenizer,
        "pairwise",
        context,
        sql_a=a.sql,
        result_a=render_observation(a.result, max_rows=PREVIEW_ROWS),
        sql_b=b.sql,
        result_b=render_observation(b.result, max_rows=PREVIEW_ROWS),
    )


def point_prompt(tokenizer, context: Context, c: Candidate) -> str:
    """The pointwise judgment's chat prompt: does this query answer the question?"""
    return ranker_prompt(
        tokenizer,
        "pointwise",
        context,
        sql=c.sql,
        result=render_observation(c.result, max_rows=PREVIEW_ROWS),
    )


def ranker_prompt(tokenizer, kind: str, context: Context, **fields: str) -> str:
    """The chat prompt of the ranker's `kind` judgment (`prompts.yaml`'s `ranker` section):
    the schema, question and hint of `context`, and the judgment's own `fields`."""
    user = templates()["ranker"][kind].format(
        schema=context.schema, question=context.question, hint=_hint(context), **fields
    )
    return _ranker_chat(tokenizer, user)


def _ranker_chat(tokenizer, user: str) -> str:
    messages = [
        {"role": "system", "content": templates()["ranker"]["system"]},
        {"role": "user", "content": user},
    ]
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


SHARED_MIN_TOKENS = 16  # a shorter common prefix is not worth a forward of its own


@torch.no_grad()
def next_token_logprobs(model, tokenizer, prompts: list[str], batch_size: int = 8) -> torch.Tensor:
    """Log-probabilities over the vocabulary of the token after each prompt, (prompts, vocab)
    in fp32 on the CPU.

    The prompts' longest common token prefix (one question's judgments share the system
    prompt, the schema and the question) runs once, and every batch of `batch_size` rows
    continues from its key/value cache: each row's own tokens are left-padded after it, with
    positions that go on from the prefix, so a row sees what it would see alone: the same
    log-probabilities to float error. On Qwen2.5-Coder-0.5B, one CPU thread, one question's
    14 judgments (385 tokens each, 265 shared) took 15.1 s against 41.8 s run whole
    (`bench/judge_bench.py`).
    """
    if not prompts:
        return torch.empty(0)
    device = next(model.parameters()).device
    ids = [tokenizer(p, add_special_tokens=False).input_ids for p in prompts]
    shared = _common_prefix(ids) if len(ids) > 1 else 0
    shared = shared if shared >= SHARED_MIN_TOKENS else 0
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    out = []
    prefix = None
    if shared:
        head = torch.tensor([ids[0][:shared]], device=device)
        prefix = cache_of(model(input_ids=head, use_cache=True, logits_to_keep=1))
    for start in range(0, len(ids), batch_size):
        rows = [x[shared:] for x in ids[start : start + batch_size]]
        width = max(map(len, rows))
        tokens = torch.tensor([[pad] * (width - len(r)) + r for r in rows], device=device)
        mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows], device=device)
        positions = shared + (mask.cumsum(-1) - 1).clamp(min=0)
        extra = {}
        if prefix is not None:
            cache = copy.deepcopy(prefix)
            cache.batch_repeat_interleave(len(rows))
            extra[cache_argument(model)] = cache
            mask = torch.cat([mask.new_ones(len(rows), shared), mask], dim=1)
        logits = model(
            input_ids=tokens,
            attention_mask=mask,
            position_ids=positions,
            logits_to_keep=1,  # the last position only: a vocabulary row, not one per token
            **extra,
        ).logits[:, -1, :]
        out.append(torch.log_softmax(logits.float(), dim=-1).cpu())
    return torch.cat(out)


def _common_prefix(ids: list[list[int]]) -> int:
    """How many leading tokens all of `ids` share, leaving each at least one of its own.

    >>> _common_prefix([[1, 2, 3, 4], [1, 2, 5], [1, 2, 3]])
    2
    >>> _common_prefix([[1, 2], [1, 2]])
    1
    """
    limit = min(map(len, ids)) - 1
    n = 0
    while n < limit and all(x[n] == ids[0][n] for x in ids):
        n += 1
    return n


def _hint(context: Context) -> str:
    return f"\nHint: {context.evidence.strip()}" if context.evidence.strip() else ""
