"""The synthetic dataset: databases of many domains, questions, gold SQL, complexity labels.

    summary = generate_dataset(Path("data/synth"), SynthConfig(n_databases=50, seed=0))

Writes a Spider-like folder: `databases/<db_id>/<db_id>.sqlite`, `tables.json`,
`train.json`, `dev.json` and `test_ood.json`. Splits are by database: dev databases are new
databases of the train domains; test_ood databases come from domains held out of train
*and* are phrased with templates held out of train, to measure generalisation beyond both.
Domains marked `held_out` in their file are never drawn for train or dev. An evaluation set
(`with_train=False`) has no train databases: what is not dev is test_ood.

Every gold query is executed on its database before it is kept: it must run, return rows,
and not be trivially constant (all NULL, a zero count). Same seed, same bytes.
"""

from __future__ import annotations

import json
import random
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from tqdm import tqdm

from acesql.data.synth.database import PROFILES, build_database, write_database
from acesql.data.synth.domain import load_domains
from acesql.data.synth.shapes import COMPLEXITIES, SHAPES, Ctx, Skip
from acesql.errors import ConfigError
from acesql.sql.columns import extract_columns
from acesql.sql.sandbox import execute, open_sandboxed
from acesql.sql.schema import Schema

SPLITS = ("train", "dev", "test_ood")
# how often each complexity level is drawn; SynSQL leans on the harder levels, as we do
COMPLEXITY_MIX = {"simple": 0.2, "moderate": 0.3, "complex": 0.3, "highly complex": 0.2}
ATTEMPTS_PER_QUESTION = 12


@dataclass
class SynthConfig:
    n_databases: int = 50
    questions_per_db: int = 40
    seed: int = 0
    profile: str = "default"  # "tiny" | "default" | "large" | "wide"
    ood_domains: tuple[str, ...] = ("hotel", "agriculture", "energy_utility")
    dev_fraction: float = 0.1
    ood_fraction: float = 0.1  # with_train=False: unused, test_ood takes what dev leaves
    workers: int = 1  # processes building databases in parallel
    domains_dir: str | None = None  # a folder of domain YAML files instead of the built-in ones
    with_train: bool = True  # False: an evaluation set, dev and test_ood databases only
    db_prefix: str = ""  # before every db_id, so that two generated sets never share one


@dataclass
class _Plan:
    db_id: str
    domain: str
    split: str
    seed: str


@dataclass
class _Built:
    db_id: str
    domain: str
    split: str
    tables_entry: dict
    examples: list[dict]
    n_tables: int
    n_columns: int
    rejected: Counter = field(default_factory=Counter)


def plan_databases(config: SynthConfig) -> list[_Plan]:
    """Which database of which domain goes to which split (deterministic under the seed)."""
    domains = load_domains(config.domains_dir)
    if config.profile not in PROFILES:
        raise ConfigError(f"unknown profile {config.profile!r}; choose one of {sorted(PROFILES)}")
    unknown = sorted(set(config.ood_domains) - set(domains))
    if unknown:
        raise ConfigError(f"ood_domains {unknown} are not domains; known: {sorted(domains)}")
    seen = sorted(d for d in set(domains) - set(config.ood_domains) if not domains[d].held_out)
    ood = sorted(config.ood_domains)
    if not seen:
        raise ConfigError("every domain is held out as ood_domains: keep some for train")
    n_train, n_dev, n_ood = _split_sizes(config, bool(ood))
    rng = random.Random(f"plan:{config.seed}")
    plans = []
    for split, count, pool in (("train", n_train, seen), ("dev", n_dev, seen), ("test_ood", n_ood, ood)):
        order = list(pool)
        rng.shuffle(order)
        for i in range(count):
            domain = order[i % len(order)]
            db_id = f"{config.db_prefix}{domain}_{len(plans):04d}"
            plans.append(_Plan(db_id, domain, split, f"{config.seed}:{db_id}"))
    return plans


def _split_sizes(config: SynthConfig, has_ood: bool) -> tuple[int, int, int]:
    """Databases of train, dev and test_ood.

    >>> _split_sizes(SynthConfig(n_databases=50), True)
    (40, 5, 5)
    >>> _split_sizes(SynthConfig(n_databases=32, dev_fraction=0.25, with_train=False), True)
    (0, 8, 24)
    """
    n = config.n_databases
    n_dev = max(1, round(n * config.dev_fraction)) if config.dev_fraction > 0 else 0
    if not config.with_train:
        if n - n_dev < 1 or not has_ood:
            raise ConfigError(
                f"n_databases={n} with ood_domains {list(config.ood_domains)} leaves no "
                f"test_ood database after {n_dev} dev: add databases or held-out domains"
            )
        return 0, n_dev, n - n_dev
    n_ood = max(1, round(n * config.ood_fraction)) if has_ood and config.ood_fraction > 0 else 0
    n_train = n - n_ood - n_dev
    if n_train < 1:
        raise ConfigError(
            f"n_databases={n} leaves no train database after {n_dev} dev and {n_ood} test_ood"
        )
    return n_train, n_dev, n_ood


def generate_dataset(out: Path, config: SynthConfig, progress: bool = False) -> dict:
    """Generate databases and questions into `out`; return the summary."""
    start = time.monotonic()
    out = Path(out)
    plans = plan_databases(config)
    jobs = [(p, config, out) for p in plans]
    bar = tqdm(total=len(jobs), desc="databases", unit="db", disable=not progress)
    built: list[_Built] = []
    if config.workers > 1:
        with ProcessPoolExecutor(config.workers) as pool:
            for result in pool.map(_build_one, jobs):
                built.append(result)
                bar.update()
    else:
        for job in jobs:
            built.append(_build_one(job))
            bar.update()
    bar.close()
    tables = [b.tables_entry for b in built]
    _write_json(out / "tables.json", tables)
    for split in SPLITS:
        examples = [e for b in built if b.split == split for e in b.examples]
        _write_json(out / f"{split}.json", examples)
    return _summary(built, time.monotonic() - start)


def _build_one(job) -> _Built:
    plan, config, out = job
    domain = load_domains(config.domains_dir)[plan.domain]
    rng = random.Random(plan.seed)
    db = build_database(domain, plan.db_id, rng, PROFILES[config.profile])
    path = write_database(db, out / "databases" / plan.db_id / f"{plan.db_id}.sqlite")
    schema = Schema.from_sqlite(path, plan.db_id, n_samples=0)
    examples, rejected = _write_questions(db, schema, config.questions_per_db, rng, plan.split)
    return _Built(
        plan.db_id,
        plan.domain,
        plan.split,
        schema.to_tables_json(),
        examples,
        len(schema.tables),
        len(schema.column_ids),
        rejected,
    )


def _write_questions(db, schema, n, rng, split) -> tuple[list[dict], Counter]:
    by_level = {level: [s for s in SHAPES.values() if s.complexity == level] for level in COMPLEXITIES}
    held_out = split == "test_ood"
    conn = open_sandboxed(db.path)
    examples, rejected = [], Counter()
    seen_sql, seen_questions = set(), set()
    try:
        for _ in range(n * ATTEMPTS_PER_QUESTION):
            if len(examples) >= n:
                break
            level = rng.choices(list(COMPLEXITY_MIX), list(COMPLEXITY_MIX.values()))[0]
            shape = rng.choice(by_level[level])
            ctx = Ctx(db, rng)
            try:
                sql, slots = shape.build(ctx)
            except Skip:
                rejected["shape_does_not_fit"] += 1
                continue
            choices = range(len(shape.templates))[-1:] if held_out else range(len(shape.templates) - 1)
            template = rng.choice(list(choices))
            question = _sentence(shape.templates[template].format(**slots))
            if sql in seen_sql or question in seen_questions:
                rejected["duplicate"] += 1
                continue
            result = execute(conn, sql, timeout_s=10, max_rows=50_000)
            problem = _gold_problem(result)
            if problem:
                rejected[problem] += 1
                continue
            seen_sql.add(sql)
            seen_questions.add(question)
            examples.append(
                {
                    "question": question,
                    "db_id": db.db_id,
                    "sql": sql,
                    "gold_columns": sorted(extract_columns(sql, schema)),
                    "complexity": shape.complexity,
                    "evidence": "; ".join(ctx.evidence),
                    "shape": shape.name,
                    "family": shape.family,
                    "template": f"{shape.name}/{template}",
                    "domain": db.domain.name,
                    "gold_rows": len(result.rows),
                }
            )
    finally:
        conn.close()
    return examples, rejected


def _gold_problem(result) -> str | None:
    """Why a gold result is not worth keeping, or None."""
    if not result.ok:
        return "gold_error"
    if not result.rows:
        return "empty_result"
    values = [v for row in result.rows for v in row]
    if all(v is None for v in values):
        return "all_null"
    if len(result.rows) == 1 and len(values) == 1 and values[0] == 0:
        return "zero_aggregate"
    return None


def _sentence(text: str) -> str:
    text = " ".join(text.split())
    return text[:1].upper() + text[1:]


def _write_json(path: Path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")


def _summary(built: list[_Built], seconds: float) -> dict:
    examples = [e for b in built for e in b.examples]
    rejected = sum((b.rejected for b in built), Counter())
    drafts = len(examples) + sum(rejected[k] for k in ("empty_result", "all_null", "zero_aggregate", "gold_error"))
    return {
        "n_databases": len(built),
        "n_examples": len(examples),
        "by_complexity": {k: sum(e["complexity"] == k for e in examples) for k in COMPLEXITIES},
        "by_split": {
            s: {
                "databases": sum(b.split == s for b in built),
                "examples": sum(len(b.examples) for b in built if b.split == s),
            }
            for s in SPLITS
        },
        "by_domain": dict(sorted(Counter(b.domain for b in built).items())),
        "empty_result_rate": round(
            sum(e["gold_rows"] == 0 for e in examples) / max(1, len(examples)), 4
        ),
        "drafts_rejected_empty_rate": round(rejected["empty_result"] / drafts, 4) if drafts else 0.0,
        "rejected": dict(sorted(rejected.items())),
        "with_evidence": sum(bool(e["evidence"]) for e in examples),
        "shapes_used": len({e["shape"] for e in examples}),
        "templates_used": len({e["template"] for e in examples}),
        "mean_tables_per_db": round(sum(b.n_tables for b in built) / max(1, len(built)), 2),
        "mean_columns_per_table": round(
            sum(b.n_columns for b in built) / max(1, sum(b.n_tables for b in built)), 2
        ),
        "seconds": round(seconds, 2),
    }
