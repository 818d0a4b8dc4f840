"""The RL training set and the pool's initialisation (the ACE-SQL paper, section 3.3.1.3).

For each question the SFT model's retriever samples `n_retriever` column lists and their
*union* prunes the schema (recall over early consensus); the generator samples `n_generator`
SQLs on it. A question is kept when between `min_correct` and `max_correct` of them execute
correctly: the model solves it only sometimes, so GRPO has something to learn from. Its pool
is seeded with the column sets of the correct SQLs.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from acesql.data.loaders import Example
from acesql.data.schemas import SchemaCache
from acesql.grpo.pool import EmpiricalPool
from acesql.grpo.rollout import rollout
from acesql.models.prompts import PromptBuilder
from acesql.sql.batch_executor import BatchExecutor


@dataclass
class GrpoDataStats:
    considered: int = 0
    kept: int = 0
    dropped: Counter = field(default_factory=Counter)  # reason -> n
    correct_hist: Counter = field(default_factory=Counter)  # n correct of n_generator -> questions
    kept_by_complexity: Counter = field(default_factory=Counter)
    union_sizes: list[int] = field(default_factory=list)
    pool_sets: int = 0  # distinct column sets seeded
    unextractable: int = 0  # correct SQLs whose columns could not be resolved

    def to_dict(self) -> dict:
        return {
            "considered": self.considered,
            "kept": self.kept,
            "kept_rate": round(self.kept / self.considered, 4) if self.considered else 0.0,
            "dropped": dict(sorted(self.dropped.items())),
            "correct_histogram": {str(k): v for k, v in sorted(self.correct_hist.items())},
            "kept_by_complexity": dict(sorted(self.kept_by_complexity.items())),
            "mean_union_columns": (
                round(sum(self.union_sizes) / len(self.union_sizes), 2) if self.union_sizes else 0
            ),
            "pool_distinct_sets": self.pool_sets,
            "unextractable_correct_sql": self.unextractable,
        }


def build_grpo_data(
    examples: list[Example],
    engine,
    prompts: PromptBuilder,
    schemas: SchemaCache,
    executor: BatchExecutor,
    *,
    n_retriever: int = 8,
    n_generator: int = 16,
    min_correct: int = 2,
    max_correct: int = 14,
    match_mode: str = "multiset",
    temperature: float = 1.0,
    top_p: float = 1.0,
    max_new_tokens: int = 2048,
    max_prompt_tokens: int | None = None,
    chunk: int = 16,
    seed: int = 0,
    progress=None,
) -> tuple[list[Example], EmpiricalPool, GrpoDataStats]:
    """The kept examples, the seeded pool and statistics; see the module doc.

    Questions are rolled out `chunk` at a time, so memory stays flat on big sets;
    `progress(n_done)` is called after each chunk.
    """
    if not 0 <= min_correct <= max_correct <= n_generator:
        raise ValueError(
            f"need 0 <= min_correct <= max_correct <= generator samples, got "
            f"{min_correct}, {max_correct}, {n_generator}"
        )
    stats = GrpoDataStats()
    pool = EmpiricalPool()
    kept: list[Example] = []
    usable = _usable(examples, prompts, schemas, max_prompt_tokens, stats)
    for start in range(0, len(usable), chunk):
        batch = usable[start : start + chunk]
        rollouts = rollout(
            batch,
            engine,
            prompts,
            schemas,
            executor,
            n_retriever=n_retriever,
            n_generator=n_generator,
            combine="union",
            match_mode=match_mode,
            temperature=temperature,
            top_p=top_p,
            max_new_tokens=max_new_tokens,
            seed=seed + start,
        )
        for r in rollouts:
            if _keep(r, min_correct, max_correct, stats):
                kept.append(r.example)
                pool.seed(r.key, r.matched_sets)
        if progress:
            progress(len(batch))
    stats.pool_sets = pool.stats()["distinct_sets"]
    return kept, pool, stats


def _usable(examples, prompts, schemas, max_prompt_tokens, stats) -> list[Example]:
    """The examples with a database and a retriever prompt that fits; the others counted."""
    usable = []
    for ex in examples:
        stats.considered += 1
        if ex.unusable:
            stats.dropped["database_missing"] += 1
            continue
        if max_prompt_tokens is not None:
            prompt = prompts.retriever(schemas(ex), ex.question, ex.evidence)
            if not prompts.fits(prompt, max_prompt_tokens):
                stats.dropped["prompt_too_long"] += 1
                continue
        usable.append(ex)
    return usable


def _keep(r, min_correct: int, max_correct: int, stats: GrpoDataStats) -> bool:
    """Whether a rolled-out question is kept: neither too hard nor too easy, with columns."""
    stats.union_sizes.append(len(r.schema_columns))
    stats.unextractable += r.unextractable
    if not r.usable:
        stats.dropped["gold_unusable"] += 1
        return False
    n = r.n_matched
    stats.correct_hist[n] += 1
    if n < min_correct:
        stats.dropped["too_hard"] += 1
    elif n > max_correct:
        stats.dropped["too_easy"] += 1
    elif not r.matched_sets:
        stats.dropped["no_extractable_columns"] += 1
    else:
        stats.kept += 1
        stats.kept_by_complexity[r.example.complexity or "unlabeled"] += 1
        return True
    return False
