"""Training pairs of the ranker role: one correct and one wrong candidate, in both orders.

    pairs, stats = build_pairs(examples, engine, prompts, render, executor, candidates=8)
    write_pairs("data/ranker/train.jsonl", pairs)

The candidates are what the ranker meets at test time: for each question, the retriever's
greedy column list and its vote prune the schema, the generator samples `candidates` SQL on
it at `temperature`, each runs and is matched against the gold answer, and the runs are
grouped by result (`acesql.sql.majority.group_results`: failed or truncated SQL forms no
group). A question whose groups include a correct one and a wrong one gives up to
`pairs_per_question` pairs, correct groups and wrong groups taken in turn, each represented
by its first member. A pair keeps both prompts of the judge (`render(context, a, b)`, by
default `acesql.ranker.judge.pair_prompt` with the policy's tokenizer): the correct query as
A, and as B. Questions that give no pair are counted by reason.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import asdict, dataclass, field
from itertools import product
from pathlib import Path

from acesql.data.loaders import Example, parse_jsonl
from acesql.data.schemas import SchemaCache
from acesql.errors import DataError
from acesql.pipeline import greedy_columns
from acesql.ranker.judge import Candidate, Context
from acesql.sql.majority import group_results
from acesql.sql.parsing import parse_sql


@dataclass(frozen=True)
class RankerPair:
    key: str  # question: database and index
    right_sql: str
    wrong_sql: str
    right_first: str  # the judge's prompt with the correct query as A
    right_second: str  # the same pair with the correct query as B


@dataclass
class PairStats:
    questions: int = 0
    with_pairs: int = 0
    pairs: int = 0
    skipped: Counter = field(default_factory=Counter)  # reason -> questions

    def to_dict(self) -> dict:
        return {
            "questions": self.questions,
            "questions_with_pairs": self.with_pairs,
            "pairs": self.pairs,
            "skipped": dict(sorted(self.skipped.items())),
        }


def build_pairs(
    examples: list[Example],
    engine,
    prompts,
    render,
    executor,
    *,
    candidates: int = 8,
    temperature: float = 1.0,
    max_new_tokens: int = 256,
    pairs_per_question: int = 2,
    mode: str = "multiset",
    seed: int = 0,
    schemas: SchemaCache | None = None,
) -> tuple[list[RankerPair], PairStats]:
    """Pairs from `examples` (see the module doc); `render(context, a, b)` writes a pair's
    prompt."""
    schemas = schemas or SchemaCache(prompts.sample_values)
    stats = PairStats()
    usable = [e for e in examples if e.unusable is None]
    stats.skipped["unusable"] = len(examples) - len(usable)
    if not usable:
        return [], stats
    pruned = greedy_columns(
        usable, engine, prompts, schemas, max_new_tokens=max_new_tokens, seed=seed
    )
    gen_prompts = [
        prompts.generator(schemas(ex), columns, ex.question, ex.evidence)
        for ex, columns in zip(usable, pruned)
    ]
    samples = engine.generate(
        gen_prompts,
        n=candidates,
        temperature=temperature,
        max_new_tokens=max_new_tokens,
        seed=seed,
    )
    sqls = [[parse_sql(c.text) or "" for c in group] for group in samples]
    checks = [(e.db_path, s, e.sql) for e, group in zip(usable, sqls) for s in group]
    verdicts = executor.match_many(checks, mode, keep_rows=True)
    pairs = []
    for i, ex in enumerate(usable):
        stats.questions += 1
        mine = verdicts[i * candidates : (i + 1) * candidates]
        if not mine[0].match.usable:
            stats.skipped["gold_fails"] += 1
            continue
        groups = group_results(sqls[i], [v.pred for v in mine], mode)
        right = [g[0] for g in groups if mine[g[0]].match.match]
        wrong = [g[0] for g in groups if not mine[g[0]].match.match]
        if not right or not wrong:
            stats.skipped["all_right" if right else "none_right" if wrong else "none_ran"] += 1
            continue
        context = Context(ex.question, prompts.schema_text(schemas(ex), pruned[i]), ex.evidence)
        chosen = _interleaved(right, wrong)[:pairs_per_question]
        for r, w in chosen:
            a = Candidate(sqls[i][r], mine[r].pred)
            b = Candidate(sqls[i][w], mine[w].pred)
            pairs.append(
                RankerPair(
                    f"{ex.db_id}#{ex.index}",
                    a.sql,
                    b.sql,
                    render(context, a, b),
                    render(context, b, a),
                )
            )
        stats.with_pairs += 1
        stats.pairs += len(chosen)
    return pairs, stats


def _interleaved(right: list[int], wrong: list[int]) -> list[tuple[int, int]]:
    """Every (right, wrong) pair, ordered so the first pairs use different groups.

    >>> _interleaved([0, 3], [1, 2])
    [(0, 1), (3, 2), (0, 2), (3, 1)]
    """
    every = list(product(range(len(right)), range(len(wrong))))
    # pair k of a diagonal pass: right k mod R with wrong (k + shift) mod W
    every.sort(key=lambda rw: ((rw[1] - rw[0]) % len(wrong), rw[0]))
    return [(right[r], wrong[w]) for r, w in every]


def write_pairs(path: str | Path, pairs: list[RankerPair]) -> None:
    """One JSON line per pair, written to a temporary file and renamed into place."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with tmp.open("w") as fh:
        for pair in pairs:
            fh.write(json.dumps(asdict(pair), ensure_ascii=False) + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    tmp.replace(path)


def read_pairs(path: str | Path) -> list[RankerPair]:
    path = Path(path)
    if not path.is_file():
        raise DataError(f"no ranker pairs at {path}: run the ranker_data stage")
    try:
        return [RankerPair(**row) for row in parse_jsonl(path.read_text().splitlines(), path)]
    except TypeError as exc:
        raise DataError(f"{path} does not hold ranker pairs: {exc}") from exc
