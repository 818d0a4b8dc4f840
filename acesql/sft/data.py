"""SFT targets for both roles: gold bootstrap, or the paper's paired self-distillation.

gold: the retriever's target is the gold SQL's column set, the generator's the gold SQL on
      the schema pruned to that set. For a base model too weak to distil from.

distill_generator: the generator's targets are the base model's own SQL on the schema pruned
      to the gold column set, kept when they execute to the gold result (and not cut off).
      The generator is taught its own way of writing, not the gold's, so a short cold start
      does not pull it toward the training set's SQL style. The retriever's targets are its
      own `retriever_samples` lists that name every gold column (the paper's support test of
      step 3 below, with the gold SQL as the matched SQL), written in the canonical list
      form; the gold column set where no sample covers it, or with `retriever_samples` 0.
      Gold sets alone teach the retriever the smallest lists, and a list one column short
      fails the whole question; the model's own covering lists keep the margin it had. One
      rollout per role and question instead of the paper's voting (the CPU default). With
      `shuffle_tables` each retriever target is shown on the schema with its tables in a
      seeded random order, the list following that order: the model names the first table's
      columns far more often than questions use them, and a fixed order teaches that more.
      Measured on the CPU profile it removes that lean without raising accuracy (off there).
      With the generator writing Chain-of-CTE, the base model still writes plain SQL (it
      cannot write chains before it is taught them); each SQL that executes right is
      rewritten into steps (`acesql.sql.to_cocte`) and kept when the chain executes to the
      gold result too. Direct and CoCTE cold starts then differ in the format alone.

self_distill (ACE-SQL section 3, SFT cold start):
  1. the retriever samples n column lists per question; columns named by at least
     ceil(`vote_threshold` x n) of them form the pruned schema (`acesql.sql.column_vote`);
  2. the generator samples m SQLs on that pruned schema; those whose execution matches the
     gold are kept as generator targets;
  3. a retriever sample is kept when it supports a kept SQL (its columns cover the SQL's);
     a matched SQL whose columns cannot be resolved supports none, and outputs cut off at
     the token limit are never targets (the format gate of `acesql.sql.parsing.format_ok`);
  4. the two roles are balanced (the larger one is subsampled).

Every record: {"role", "prompt", "response", "db_id", "question", "complexity", "index"};
`prompt` is already chat-formatted. Statistics count what was kept and dropped, and why.
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from acesql.data.loaders import Example
from acesql.data.schemas import SchemaCache, gold_columns
from acesql.errors import SqlParseError
from acesql.models.prompts import PromptBuilder
from acesql.sql.batch_executor import BatchExecutor
from acesql.sql.cocte import parse_cocte
from acesql.sql.column_vote import vote_columns
from acesql.sql.columns import extract_columns
from acesql.sql.parsing import format_ok, parse_columns, parse_sql
from acesql.sql.schema import Schema
from acesql.sql.to_cocte import to_cocte

ROLES = ("retriever", "generator")


@dataclass
class SftStats:
    kept: Counter = field(default_factory=Counter)  # (role, complexity) -> n
    dropped: Counter = field(default_factory=Counter)  # (role, reason) -> n
    retriever_sources: Counter = field(default_factory=Counter)  # per question, before balance

    def to_dict(self) -> dict:
        out: dict = {"kept": defaultdict(dict), "dropped": defaultdict(dict)}
        for (role, level), n in sorted(self.kept.items()):
            out["kept"][role][level or "unlabeled"] = n
        for (role, reason), n in sorted(self.dropped.items()):
            out["dropped"][role][reason] = n
        for role in ROLES:
            out[f"n_{role}"] = sum(n for (r, _), n in self.kept.items() if r == role)
        if self.retriever_sources:
            out["retriever_targets_from"] = dict(sorted(self.retriever_sources.items()))
        return {k: dict(v) if isinstance(v, defaultdict) else v for k, v in out.items()}

    def shortfall(self, source: int, floor: float = 0.25) -> str | None:
        """Why the cold start will barely move the model, or None: a role kept fewer targets
        than `floor` x the `source` questions they came from.

        >>> stats = SftStats(Counter({("retriever", "simple"): 13, ("generator", "simple"): 13}),
        ...                  Counter({("generator", "pred_error"): 425}))
        >>> print(stats.shortfall(120))
        13 retriever and 13 generator targets of 120 questions; dropped: generator pred_error 425
        >>> stats.shortfall(40) is None
        True
        """
        kept = {r: sum(n for (role, _), n in self.kept.items() if role == r) for r in ROLES}
        if min(kept.values()) >= floor * source:
            return None
        worst = ", ".join(f"{r} {why} {n}" for (r, why), n in self.dropped.most_common(3))
        counts = " and ".join(f"{kept[r]} {r}" for r in ROLES)
        return f"{counts} targets of {source} questions" + (f"; dropped: {worst}" if worst else "")


def _record(role, prompt, response, example) -> dict:
    return {
        "role": role,
        "prompt": prompt,
        "response": response,
        "db_id": example.db_id,
        "question": example.question,
        "complexity": example.complexity,
        "index": example.index,
    }


def build_gold(
    examples: list[Example],
    prompts: PromptBuilder,
    schemas: SchemaCache,
    max_prompt_tokens: int,
    executor: BatchExecutor | None = None,
    match_mode: str = "multiset",
) -> tuple[list[dict], SftStats]:
    """Both roles' targets from the gold SQL and its column set.

    With the generator writing Chain-of-CTE (`prompts.sql_format` "cocte"), its target is the
    gold SQL rewritten into steps (`acesql.sql.to_cocte`), kept only when `executor` finds it
    executes to the gold result; otherwise the question keeps its retriever target only.
    """
    stats, records = SftStats(), []
    targets = _generator_targets(examples, prompts, schemas, executor, match_mode, stats)
    for ex in examples:
        schema = schemas(ex)
        columns = _parsed_gold_columns(ex, schema, stats)
        if columns is None:
            continue
        pairs = [
            (
                "retriever",
                prompts.retriever(schema, ex.question, ex.evidence),
                prompts.retriever_target(schema, columns),
            ),
            (
                "generator",
                prompts.generator(schema, columns, ex.question, ex.evidence),
                prompts.generator_target(targets[id(ex)]) if targets.get(id(ex)) else None,
            ),
        ]
        for role, prompt, response in pairs:
            if response is None:
                continue
            if not prompts.fits(prompt, max_prompt_tokens):
                stats.dropped[(role, "prompt_too_long")] += 1
                continue
            records.append(_record(role, prompt, response, ex))
            stats.kept[(role, ex.complexity)] += 1
    return records, stats


def _generator_targets(examples, prompts, schemas, executor, match_mode, stats) -> dict:
    """The generator's target SQL per example (by id): the gold, or its verified CoCTE form."""
    if prompts.sql_format != "cocte":
        return {id(ex): ex.sql for ex in examples}
    if executor is None:
        raise ValueError("CoCTE targets are verified by execution: pass an executor")
    targets = _verified_chains(
        [(id(ex), ex, ex.sql) for ex in examples], schemas, executor, match_mode
    )
    if len(targets) < len(examples):
        stats.dropped[("generator", "cocte_not_equivalent")] += len(examples) - len(targets)
    return targets


def _verified_chains(items, schemas, executor, match_mode) -> dict:
    """`items`: (key, example, sql). The CoCTE rewrite of each sql by key, kept when it
    executes to the example's gold result; a rewrite that fails is not kept."""

    drafts = {}
    for key, ex, sql in items:
        try:
            chain = to_cocte(sql, schemas(ex))
        except Exception:  # noqa: BLE001 - a rewrite sqlglot chokes on is one not kept
            continue
        if chain:
            drafts[key] = (ex, chain)
    checked = executor.match_many(
        [(ex.db_path, chain, ex.sql) for ex, chain in drafts.values()], match_mode
    )
    return {
        key: chain
        for (key, (_, chain)), verdict in zip(drafts.items(), checked)
        if verdict.match.match
    }


def build_generator_distilled(
    examples: list[Example],
    prompts: PromptBuilder,
    schemas: SchemaCache,
    engine,
    executor: BatchExecutor,
    *,
    generator_samples: int,
    temperature: float,
    top_p: float,
    max_new_tokens: int,
    max_prompt_tokens: int,
    match_mode: str = "multiset",
    balance: bool = True,
    seed: int = 0,
    retriever_samples: int = 0,
    shuffle_tables: bool = False,
) -> tuple[list[dict], SftStats]:
    """Self-distilled generator targets; covering retriever samples, else the gold column set,
    as retriever targets; see the module doc."""
    stats = SftStats()
    cocte = prompts.sql_format == "cocte"
    # the base model writes plain SQL; chains are rewritten from the SQL that executes right
    sampler = prompts.with_sql_format("direct") if cocte else prompts
    usable = _usable(examples, prompts, sampler, schemas, max_prompt_tokens, stats)
    sampling = dict(temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens)
    retrieved = [[] for _ in usable]
    if retriever_samples:
        retrieved = engine.generate(
            [u[1] for u in usable], n=retriever_samples, seed=seed + 1, **sampling
        )
    generated = engine.generate([u[4] for u in usable], n=generator_samples, seed=seed, **sampling)
    checks = [
        (ex.db_path, parse_sql(o.text) or "", ex.sql)
        for (ex, *_), outputs in zip(usable, generated)
        for o in outputs
    ]
    verdicts = list(executor.match_many(checks, match_mode))
    chains = {}
    if cocte:  # rewrite what executed right; the verdicts and checks are in output order
        outputs = [(ex, o) for (ex, *_), outs in zip(usable, generated) for o in outs]
        right = [
            (id(o), ex, sql)
            for (ex, o), (_, sql, _), verdict in zip(outputs, checks, verdicts)
            if verdict.match.match
        ]
        chains = _verified_chains(right, schemas, executor, match_mode)
    verdicts = iter(verdicts)

    retriever_records, generator_records = [], []
    order = random.Random(seed + 2) if shuffle_tables else None
    for (ex, r_prompt, columns, g_prompt, _), r_outputs, outputs in zip(
        usable, retrieved, generated
    ):
        retriever_records += _retriever_records(
            ex, r_prompt, columns, r_outputs, schemas(ex), prompts, order, max_prompt_tokens, stats
        )
        seen = set()
        for o in outputs:
            reason = _distilled_sql_problem(o, next(verdicts), sampler, seen)
            if not reason and cocte and not chains.get(id(o)):
                reason = "cocte_not_equivalent"
            if reason:
                stats.dropped[("generator", reason)] += 1
                continue
            seen.add(o.text)
            response = prompts.generator_target(chains[id(o)]) if cocte else o.text.strip()
            generator_records.append(_record("generator", g_prompt, response, ex))
    if balance and generator_records:
        retriever_records, generator_records = _balance(
            retriever_records, generator_records, random.Random(seed), stats
        )
    for rec in retriever_records + generator_records:
        stats.kept[(rec["role"], rec["complexity"])] += 1
    return retriever_records + generator_records, stats


def _parsed_gold_columns(ex, schema, stats) -> list[str] | None:
    """The gold SQL's columns, or None (counted as `gold_unparseable`) when it does not parse."""
    try:
        return gold_columns(ex, schema)
    except SqlParseError:
        stats.dropped[("both", "gold_unparseable")] += 1
        return None


def _usable(examples, prompts, sampler, schemas, max_prompt_tokens, stats) -> list[tuple]:
    """(example, retriever prompt, gold columns, generator prompt, sampled generator prompt)
    of each example whose gold SQL parses and whose prompts fit; the others counted."""
    usable = []
    for ex in examples:
        schema = schemas(ex)
        columns = _parsed_gold_columns(ex, schema, stats)
        if columns is None:
            continue
        r_prompt = prompts.retriever(schema, ex.question, ex.evidence)
        g_prompt = prompts.generator(schema, columns, ex.question, ex.evidence)
        s_prompt = sampler.generator(schema, columns, ex.question, ex.evidence)
        if not all(prompts.fits(p, max_prompt_tokens) for p in (r_prompt, g_prompt, s_prompt)):
            stats.dropped[("both", "prompt_too_long")] += 1
            continue
        usable.append((ex, r_prompt, columns, g_prompt, s_prompt))
    return usable


def _retriever_records(
    ex, r_prompt, columns, r_outputs, schema, prompts, order, max_prompt_tokens, stats
) -> list[dict]:
    """A record per covering target; with `order`, shown over shuffled tables where that fits."""
    records = []
    for target in _covering_targets(r_outputs, columns, schema, prompts, stats):
        shown, prompt = schema, r_prompt  # r_prompt's length was checked above
        if order:
            shuffled = _shuffled(schema, order)
            candidate = prompts.retriever(shuffled, ex.question, ex.evidence)
            if prompts.fits(candidate, max_prompt_tokens):
                shown, prompt = shuffled, candidate
        response = prompts.retriever_target(shown, target)
        records.append(_record("retriever", prompt, response, ex))
    return records


def _covering_targets(outputs, gold: list[str], schema, prompts: PromptBuilder, stats) -> list:
    """The distinct column sets of the retriever lists among `outputs` that name every gold
    column; the gold column set when none does."""
    targets = []
    for o in outputs:
        parsed = parse_columns(o.text, schema)
        if not parsed.ok or not format_ok(o, "retriever", prompts.reasoning):
            stats.dropped[("retriever", "unparseable")] += 1
        elif not set(gold) <= set(parsed.columns):
            stats.dropped[("retriever", "misses_gold_columns")] += 1
        elif frozenset(parsed.columns) in targets:
            stats.dropped[("retriever", "duplicate")] += 1
        else:
            targets.append(frozenset(parsed.columns))
    stats.retriever_sources["own_lists" if targets else "gold_columns"] += 1
    return targets or [frozenset(gold)]


def _shuffled(schema: Schema, rng: random.Random) -> Schema:
    """`schema` with its tables in a random order (columns keep theirs within a table)."""
    tables = list(schema.tables)
    rng.shuffle(tables)
    return Schema(schema.db_id, tuple(tables), schema.foreign_keys)


def _distilled_sql_problem(output, verdict, prompts: PromptBuilder, seen: set) -> str | None:
    """Why a sampled SQL is not a generator target, or None when it is one."""
    if not verdict.match.match:
        return verdict.match.reason if verdict.match.usable else "gold_unusable"
    if not format_ok(output, "generator", prompts.reasoning):
        return "malformed"
    if prompts.sql_format == "cocte" and not parse_cocte(output.text).ok:
        return "not_a_chain"
    if output.text in seen:
        return "duplicate"
    return None


def build_self_distilled(
    examples: list[Example],
    prompts: PromptBuilder,
    schemas: SchemaCache,
    engine,
    executor: BatchExecutor,
    *,
    retriever_samples: int,
    generator_samples: int,
    vote_threshold: float,
    temperature: float,
    top_p: float,
    max_new_tokens: int,
    max_prompt_tokens: int,
    match_mode: str = "multiset",
    balance: bool = True,
    seed: int = 0,
) -> tuple[list[dict], SftStats]:
    """Paired self-distillation with execution filtering; see the module doc."""
    stats = SftStats()
    usable = []
    for ex in examples:
        prompt = prompts.retriever(schemas(ex), ex.question, ex.evidence)
        if prompts.fits(prompt, max_prompt_tokens):
            usable.append((ex, prompt))
        else:
            stats.dropped[("both", "prompt_too_long")] += 1
    sampling = dict(temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens)
    retrieved = engine.generate([p for _, p in usable], n=retriever_samples, seed=seed, **sampling)
    gen_prompts, voted = [], []
    for (ex, _), outputs in zip(usable, retrieved):
        schema = schemas(ex)
        parsed = [parse_columns(o.text, schema) for o in outputs]
        columns, _ = vote_columns(
            [p.columns if p.ok else None for p in parsed], schema, vote_threshold
        )
        voted.append(parsed)
        gen_prompts.append(prompts.generator(schema, columns, ex.question, ex.evidence))
    generated = engine.generate(gen_prompts, n=generator_samples, seed=seed + 1, **sampling)

    checks = [
        (ex.db_path, parse_sql(o.text) or "", ex.sql)
        for (ex, _), outputs in zip(usable, generated)
        for o in outputs
    ]
    verdicts = iter(executor.match_many(checks, match_mode))

    retriever_records, generator_records = [], []
    for (ex, r_prompt), parsed, g_prompt, r_outputs, g_outputs in zip(
        usable, voted, gen_prompts, retrieved, generated
    ):
        schema = schemas(ex)
        matched_sets, seen = [], set()
        for o in g_outputs:
            reason = _distilled_sql_problem(o, next(verdicts), prompts, seen)
            if reason:
                stats.dropped[("generator", reason)] += 1
                continue
            try:
                matched_sets.append(extract_columns(parse_sql(o.text), schema))
            except SqlParseError:  # supports no retriever sample: an empty set would support all
                stats.dropped[("generator", "columns_unresolved")] += 1
                continue
            seen.add(o.text)
            generator_records.append(_record("generator", g_prompt, o.text.strip(), ex))
        retriever_records += _supported_retriever_records(
            ex, r_prompt, parsed, r_outputs, matched_sets, prompts, stats
        )
    if balance:
        retriever_records, generator_records = _balance(
            retriever_records, generator_records, random.Random(seed), stats
        )
    for rec in retriever_records + generator_records:
        stats.kept[(rec["role"], rec["complexity"])] += 1
    return retriever_records + generator_records, stats


def _supported_retriever_records(ex, r_prompt, parsed, r_outputs, matched_sets, prompts, stats):
    """The retriever samples, distinct and well-formed, that cover a set of columns some
    execution-matched SQL used; the others counted by reason."""
    records, seen = [], set()
    for p, o in zip(parsed, r_outputs):
        if not p.ok or not format_ok(o, "retriever", prompts.reasoning):
            stats.dropped[("retriever", "unparseable")] += 1
        elif not any(s <= set(p.columns) for s in matched_sets):
            stats.dropped[("retriever", "supports_no_matched_sql")] += 1
        elif o.text in seen:
            stats.dropped[("retriever", "duplicate")] += 1
        else:
            seen.add(o.text)
            records.append(_record("retriever", r_prompt, o.text.strip(), ex))
    return records


def _balance(a: list, b: list, rng: random.Random, stats: SftStats) -> tuple[list, list]:
    n = min(len(a), len(b))
    for records in (a, b):
        if len(records) > n:
            stats.dropped[(records[0]["role"], "balance")] += len(records) - n
    keep = lambda records: sorted(rng.sample(range(len(records)), n))  # noqa: E731
    return [a[i] for i in keep(a)], [b[i] for i in keep(b)]
