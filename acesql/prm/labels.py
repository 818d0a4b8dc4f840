"""Step labels of Chain-of-CTE trajectories, by Monte Carlo from execution (Reward-SQL's sigma).

    records, stats = label_steps(examples, engine, prompts, executor,
                                 trajectories=8, completions=4)

For each question, on the pipeline's pruned schema (the greedy retriever and its vote, as
evaluation has it), the policy samples `trajectories` CoCTE outputs at `temperature`.
Malformed ones (any `parse_cocte` problem: no step, a statement that does not parse, a name
defined twice or shadowing a table, no rationale) are dropped and counted: the seed's syntax
filter. The kept ones form a tree of prefixes: node i of a trajectory is its first i steps,
and trajectories with the same first i steps share the node. From every node the policy
samples `completions` continuations (the prefix, rendered as a chain, is the start of the
answer). Each leaf (a sampled trajectory, or a continuation) runs in the sandbox and scores
1 when its result matches the gold. A node's label sigma is the share of correct leaves
among all those below it (its own continuations, those of the nodes under it, and the
sampled trajectories through it): the tree's Monte Carlo backup of the success rate from
that prefix. A complete trajectory (its steps and final SELECT) is labelled by its own
outcome.

A policy that writes plain SQL (`prompts.sql_format` direct) is labelled through a fixed
view of its answers as chains (`acesql.prm.view`: the `to_cocte` rewrite when it keeps the
result, else one step). It cannot continue a chain, so no continuations are sampled: a
node's sigma is the share of right answers among the question's sampled answers that pass
through it, a Monte Carlo estimate from the policy's own samples, noisier than the seed's
with fewer leaves per node. Each record carries its `view`, so the score model knows which
candidates it was trained to read.

A record is what the trajectory score model reads (`acesql.prm.model`): the question, the
schema text, each step of the prefix with its intermediate result (`prefix_sql` run in the
sandbox, a few rows), the final query and its result when the record is a complete
trajectory, and sigma with the number of leaves it averages.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

from acesql.data.loaders import Example
from acesql.data.schemas import SchemaCache
from acesql.pipeline import greedy_columns
from acesql.prm.view import chain_views
from acesql.sql.cocte import CocteParse, CocteStep, parse_cocte, prefix_sql, render_prefix
from acesql.sql.observation import render_observation
from acesql.sql.parsing import parse_sql

PREVIEW_ROWS = 3  # rows of an intermediate result a record shows


@dataclass
class LabelStats:
    questions: int = 0
    trajectories: int = 0
    malformed: Counter = field(default_factory=Counter)  # first problem -> trajectories
    nodes: int = 0
    records: int = 0
    leaves: int = 0
    correct_leaves: int = 0

    def to_dict(self) -> dict:
        return {
            "questions": self.questions,
            "trajectories": self.trajectories,
            "malformed": sum(self.malformed.values()),
            "malformed_by_problem": dict(self.malformed.most_common()),
            "nodes": self.nodes,
            "records": self.records,
            "leaves": self.leaves,
            "leaf_accuracy": round(self.correct_leaves / self.leaves, 4) if self.leaves else 0.0,
        }


def label_steps(
    examples: list[Example],
    engine,
    prompts,
    executor,
    *,
    trajectories: int = 8,
    completions: int = 4,
    temperature: float = 1.0,
    max_new_tokens: int = 256,
    mode: str = "multiset",
    seed: int = 0,
    schemas: SchemaCache | None = None,
) -> tuple[list[dict], LabelStats]:
    """Labelled prefixes and complete trajectories of `examples` (see the module doc);
    `prompts` is a `PromptBuilder` whose `sql_format` is what the policy writes."""
    schemas = schemas or SchemaCache(prompts.sample_values)
    stats = LabelStats()
    examples = [e for e in examples if e.unusable is None]
    if not examples:
        return [], stats
    sampling = dict(temperature=temperature, max_new_tokens=max_new_tokens)
    pruned = greedy_columns(
        examples, engine, prompts, schemas, max_new_tokens=max_new_tokens, seed=seed
    )
    chats = [
        prompts.generator(schemas(ex), columns, ex.question, ex.evidence)
        for ex, columns in zip(examples, pruned)
    ]
    schema_texts = [prompts.schema_text(schemas(ex), c) for ex, c in zip(examples, pruned)]
    sampled = engine.generate(chats, n=trajectories, seed=seed, **sampling)

    kept = _trajectories(examples, sampled, schemas, prompts.sql_format, executor, stats)
    node_list = _tree_nodes(kept, stats)
    # continuations from every node, in one batch (a policy writing plain SQL has none)
    start = prompts.generator_target("").split("```sql")[0] + "```sql\n"
    continued = (
        engine.generate(
            [chats[q] + start + render_prefix(steps) for q, _, steps in node_list],
            n=completions,
            seed=seed + 1,
            **sampling,
        )
        if prompts.sql_format == "cocte" and node_list
        else [[] for _ in node_list]
    )
    outcomes, trajectory_outcomes = _leaf_outcomes(
        examples, kept, node_list, continued, executor, mode, stats
    )

    records = _records(
        examples, schema_texts, kept, node_list, outcomes, trajectory_outcomes, executor
    )
    for record in records:
        record["view"] = prompts.sql_format
    stats.records = len(records)
    return records, stats


def _records(examples, schema_texts, kept, node_list, outcomes, trajectory_outcomes, executor):
    """One record per node (its share of right leaves) and per complete trajectory."""
    # intermediate results of every node, and of every complete trajectory's final query
    previews = executor.execute_many(
        [
            (examples[q].db_path, prefix_sql(_as_parse(steps), len(steps)))
            for q, _, steps in node_list
        ]
    )
    shown = {(q, key): _preview(r) for (q, key, _), r in zip(node_list, previews)}
    finals = executor.execute_many(
        [(examples[q].db_path, parse.sql) for q, parses in enumerate(kept) for parse in parses]
    )

    records = []
    for q, key, steps in node_list:
        hits = outcomes[(q, key)]
        sigma = sum(hits) / len(hits)
        records.append(
            _record(examples[q], schema_texts[q], steps, shown, q, None, sigma, len(hits))
        )
    k = 0
    for q, parses in enumerate(kept):
        for parse in parses:
            final = {"sql": parse.final_sql, "result": _preview(finals[k])}
            right = trajectory_outcomes[k].match.match
            records.append(
                _record(examples[q], schema_texts[q], parse.steps, shown, q, final, float(right), 1)
            )
            k += 1
    return records


def _tree_nodes(kept: list[list[CocteParse]], stats: LabelStats) -> list[tuple]:
    """Every distinct prefix of each question's chains, as (question, node key, its steps)."""
    node_list = []
    for q, parses in enumerate(kept):
        stats.questions += 1
        nodes: dict[tuple, list[CocteStep]] = {}
        for parse in parses:
            for i in range(1, len(parse.steps) + 1):
                nodes.setdefault(_key(parse.steps[:i]), parse.steps[:i])
        node_list += [(q, key, steps) for key, steps in nodes.items()]
        stats.nodes += len(nodes)
    return node_list


def _leaf_outcomes(examples, kept, node_list, continued, executor, mode, stats):
    """Every leaf's final SQL, run and matched; each leaf credits the nodes above it.

    Returns the outcomes per (question, node key) and the verdicts of the complete
    trajectories, in the order of `kept`."""
    leaves = []  # (question, ancestor node keys, sql)
    for q, parses in enumerate(kept):
        for parse in parses:
            keys = [_key(parse.steps[:i]) for i in range(1, len(parse.steps) + 1)]
            leaves.append((q, keys, parse.sql))
    for (q, _, steps), outputs in zip(node_list, continued):
        keys = [_key(steps[:i]) for i in range(1, len(steps) + 1)]
        for out in outputs:
            text = f"```sql\n{render_prefix(steps)}{out.text}"
            leaves.append((q, keys, parse_sql(text) or ""))
    verdicts = executor.match_many(
        [(examples[q].db_path, sql, examples[q].sql) for q, _, sql in leaves], mode
    )
    outcomes: dict[tuple[int, tuple], list[bool]] = defaultdict(list)
    for (q, keys, _), verdict in zip(leaves, verdicts):
        stats.leaves += 1
        stats.correct_leaves += verdict.match.match
        for key in keys:
            outcomes[(q, key)].append(verdict.match.match)
    return outcomes, verdicts[: sum(len(p) for p in kept)]


def _trajectories(examples, sampled, schemas, view, executor, stats) -> list[list[CocteParse]]:
    """The well-formed chains of each question's samples; the others counted by problem.
    `view` cocte: the samples are chains; direct: plain SQL, seen as chains
    (`acesql.prm.view`)."""
    if view == "cocte":
        kept = []
        for ex, outputs in zip(examples, sampled):
            tables = [t.name for t in schemas(ex).tables]
            parses = [parse_cocte(out.text, tables) for out in outputs]
            for parse in parses:
                if not parse.ok:
                    stats.malformed[_kind(parse.problems[0])] += 1
            stats.trajectories += len(parses)
            kept.append([p for p in parses if p.ok])
        return kept
    items = [
        (q, (ex.db_path, parse_sql(out.text) or "", schemas(ex)))
        for q, (ex, outputs) in enumerate(zip(examples, sampled))
        for out in outputs
    ]
    views = chain_views([item for _, item in items], executor)
    kept = [[] for _ in examples]
    for (q, (_, sql, _)), parse in zip(items, views):
        stats.trajectories += 1
        if parse is None:
            stats.malformed["no SQL" if not sql else "not parsed as one query"] += 1
        else:
            kept[q].append(parse)
    return kept


def _record(ex, schema_text, steps, shown, q, final, sigma, leaves) -> dict:
    return {
        "key": f"{ex.db_id}#{ex.index}",
        "question": ex.question,
        "evidence": ex.evidence or "",
        "schema": schema_text,
        "steps": [
            {
                "rationale": s.rationale,
                "name": s.name,
                "sql": s.sql,
                "result": shown[(q, _key(steps[: i + 1]))],
            }
            for i, s in enumerate(steps)
        ],
        "final": final,
        "sigma": round(sigma, 4),
        "leaves": leaves,
    }


def _key(steps: list[CocteStep]) -> tuple:
    return tuple((s.name.lower(), " ".join(s.sql.split())) for s in steps)


def _as_parse(steps: list[CocteStep]) -> CocteParse:
    return CocteParse(steps=list(steps))


def _preview(result) -> str:
    return render_observation(result, max_rows=PREVIEW_ROWS)


def _kind(problem: str) -> str:
    """A problem message without its specifics, to count by kind."""
    return problem.split(":")[0].split(" (")[0]
