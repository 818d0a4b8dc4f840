"""PRM best-of-N: each Chain-of-CTE candidate scored by its process reward, the best kept.

    scorer = ProcessScorer(TrajectoryScorer.load("models/prm"), policy_tokenizer, executor)
    rewards = scorer.rewards(question, schema_text, evidence, db_path, completions, schema=schema)
    best = best_of_n(rewards)        # index of the highest R_proc; None when none is scored
    voted = weighted_vote(groups, rewards)  # the result whose candidates' R_proc sum highest

A candidate's prefixes are its CTE steps one by one and then the whole chain with its final
query (the seed's T<=d for d up to the last step). Each prefix is shown to R_phi with the
intermediate results of its steps (`prefix_sql` run in the sandbox) and, for the whole chain,
the final query's result. The inverse-entropy weights need each step's entropy under the
policy: we estimate it from the sampled tokens, -log p(token) averaged over the step's
tokens, which is an unbiased one-sample estimate of the mean token entropy the seed
defines, and costs no forward pass (the engine returns the logprobs of what it sampled). A
token belongs to the step whose text it starts in (a step runs from its `-- step:` comment
to the next one; the final query from `-- final:`, or from its SELECT, to the end).
Candidates that are not a well-formed chain get no reward (None): they cannot be scored
step by step, and Reward-SQL's syntax filter drops them too.

A score model trained on a direct policy's answers (`view` direct, `acesql.prm.view`) reads
each candidate's SQL through the same chain view, with equal step weights: a plain query's
tokens do not belong to the steps of its view, so they give no entropy per step.
"""

from __future__ import annotations

import re

from acesql.errors import ConfigError
from acesql.prm.labels import PREVIEW_ROWS
from acesql.prm.reward import inverse_entropy_weights, process_reward, step_entropies
from acesql.prm.view import chain_views
from acesql.sql.cocte import parse_cocte, prefix_sql
from acesql.sql.observation import render_observation
from acesql.sql.parsing import parse_sql
from acesql.sql.schema import Schema

_STEP = re.compile(r"--\s*step:", re.IGNORECASE)
_FINAL = re.compile(r"--\s*final:", re.IGNORECASE)


def step_token_spans(text: str, token_ends: list[int], n_steps: int) -> list[list[int]]:
    """Token indices per step (n_steps CTEs, then the final query) from where each token's
    text ends (`token_ends[k]`: length of the decoded text up to token k included).

    >>> text = "WITH\\n-- step: a\\na AS (SELECT 1)\\n-- final: b\\nSELECT * FROM a"
    >>> step_token_spans(text, [5, 16, 32, 45, len(text)], 1)
    [[1, 2], [3, 4]]
    """
    starts = [m.start() for m in _STEP.finditer(text)][:n_steps]
    final = _FINAL.search(text, starts[-1] if starts else 0)
    bounds = starts + [final.start() if final else _final_select(text, starts)]
    spans: list[list[int]] = [[] for _ in range(n_steps + 1)]
    begin = 0
    for k, end in enumerate(token_ends):
        part = sum(1 for b in bounds if b <= begin) - 1  # the step whose text this token opens
        if part >= 0:
            spans[min(part, n_steps)].append(k)
        begin = end
    return spans


def _final_select(text: str, starts: list[int]) -> int:
    """Where the final query begins when it has no `-- final:` comment: its last SELECT
    outside parentheses after the last step."""
    depth, last = 0, len(text)
    for i in range(starts[-1] if starts else 0, len(text)):
        c = text[i]
        depth += c == "("
        depth -= c == ")"
        if depth == 0 and text[i : i + 6].upper() == "SELECT":
            last = i
    return last


def best_of_n(rewards: list[float | None]) -> int | None:
    """The index of the highest reward (the first on ties); None when nothing was scored.

    >>> best_of_n([None, 0.4, 0.7, 0.7]), best_of_n([None])
    (2, None)
    """
    scored = [(r, -i) for i, r in enumerate(rewards) if r is not None]
    return -max(scored)[1] if scored else None


def weighted_vote(groups: list[list[int]], rewards: list[float | None]) -> int | None:
    """The first candidate of the result group whose members' process rewards sum highest
    (an unscored member adds 0; on ties the group sampled first); None without a group.

    Not the seed's selection (it keeps the single best candidate, `best_of_n`): a vote over
    execution results, as maj@n, with each vote worth its candidate's R_proc. `groups`:
    candidate indices sharing a result (`acesql.sql.majority.group_results`).

    >>> weighted_vote([[0, 2], [1]], [0.5, 0.9, 0.5])  # 1.0 against 0.9
    0
    >>> weighted_vote([[0, 2], [1]], [0.3, 0.9, None])
    1
    >>> weighted_vote([], [None])
    """
    if not groups:
        return None
    best = max(groups, key=lambda g: (sum(rewards[i] or 0.0 for i in g), -g[0]))
    return best[0]


class ProcessScorer:
    """R_proc of candidates: R_phi (`scorer`) on their prefixes, weighted by inverse entropy."""

    def __init__(self, scorer, tokenizer, executor):
        self.scorer, self.tokenizer, self.executor = scorer, tokenizer, executor
        self.view = getattr(scorer, "view", "cocte")

    def require_format(self, sql_format: str) -> None:
        """Fail unless the policy writes what the score model was trained to read."""
        if sql_format != self.view:
            raise ConfigError(
                f"the process score model reads {self.view} candidates but the policy writes "
                f"{sql_format}: set prompt.sql_format to {self.view}, or label and train a "
                f"score model on this policy (prm_data.sql_format: {sql_format})"
            )

    def rewards(self, question, schema_text, evidence, db_path, completions, *, schema) -> list:
        """One R_proc per completion (None for a candidate that is not a well-formed chain,
        or, in the direct view, not one query). `schema`: the database's `Schema`, which the
        direct view rewrites each query against."""
        prepared = [
            self._prefixes(question, schema_text, evidence, db_path, parse, c) if parse else None
            for parse, c in zip(self._chains(db_path, completions, schema), completions)
        ]
        records = [r for p in prepared if p for r in p[0]]
        scores = iter(self.scorer.score(records)) if records else iter(())
        out = []
        for p in prepared:
            if not p:
                out.append(None)
                continue
            mine = [next(scores) for _ in p[0]]
            out.append(process_reward(mine, inverse_entropy_weights(p[1])))
        return out

    def _chains(self, db_path, completions, schema: Schema) -> list:
        """Each completion's chain: as written (cocte), or its SQL seen as one (direct)."""
        if self.view == "cocte":
            parses = [parse_cocte(c.text) for c in completions]
            return [p if p.ok else None for p in parses]
        items = [(db_path, parse_sql(c.text) or "", schema) for c in completions]
        return chain_views(items, self.executor)

    def _prefixes(self, question, schema_text, evidence, db_path, parse, completion):
        n = len(parse.steps)
        results = self.executor.execute_many(
            [(db_path, prefix_sql(parse, i)) for i in range(1, n + 1)] + [(db_path, parse.sql)]
        )
        shown = [render_observation(r, max_rows=PREVIEW_ROWS) for r in results]
        steps = [
            {"rationale": s.rationale, "name": s.name, "sql": s.sql, "result": shown[i]}
            for i, s in enumerate(parse.steps)
        ]
        common = {"question": question, "evidence": evidence or "", "schema": schema_text}
        records = [{**common, "steps": steps[: i + 1], "final": None} for i in range(n)]
        final = {"sql": parse.final_sql, "result": shown[n]}
        records.append({**common, "steps": steps, "final": final})
        return records, self._entropies(completion, n)

    def _entropies(self, completion, n_steps: int) -> list[float]:
        """Each prefix's step entropy, estimated by -log p of its sampled tokens."""
        ids, logprobs = completion.token_ids, completion.logprobs
        if self.view == "direct" or not ids or len(logprobs) != len(ids):
            return [0.0] * (n_steps + 1)  # no tokens per step: equal weights
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        ends = [
            len(self.tokenizer.decode(ids[: k + 1], skip_special_tokens=True))
            for k in range(len(ids))
        ]
        spans = step_token_spans(text, ends, n_steps)
        return step_entropies([[-logprobs[k] for k in span] for span in spans])
