"""Sections of the data stages: `data` (source, splits, synthetic generator, the wide held-out
set, filtering), `sft_data`, `grpo_data` and `debug_data`. Labels and split names are checked
against what the chosen source gives (`acesql.data.loaders`)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator
from pydantic_core import PydanticCustomError

from acesql.config.section import MatchMode, Section
from acesql.config.shared import GenerationSection
from acesql.data.loaders import COMPLEXITIES, SPLITS
from acesql.data.synth.domain import load_domains


class SplitsSection(Section):
    """Which split of the source becomes each prepared split."""

    train: str = Field("train", description="Source split prepared as train.jsonl.")
    dev: str | None = Field("dev", description="Source split prepared as dev.jsonl; null: none.")
    test_ood: str | None = Field(
        "test_ood",
        description="Source split prepared as test_ood.jsonl (unseen domains); null: none. "
        "Only the synthetic source has one.",
    )


class SynthSection(Section):
    """The built-in generator's settings (used when `source` is synth)."""

    profile: Literal["tiny", "default", "large", "wide"] = Field(
        "default",
        description="Size and difficulty of the databases and questions (wide: BIRD-scale "
        "schemas, to train the retriever where it is needed).",
    )
    n_databases: int = Field(50, ge=1, description="Databases to generate.")
    questions_per_db: int = Field(40, ge=1, description="Questions asked of each database.")
    ood_domains: tuple[str, ...] = Field(
        ("hotel", "agriculture", "energy_utility"),
        description="Domains kept out of train and dev, for the test_ood split.",
    )
    dev_fraction: float = Field(
        0.1, ge=0, lt=1, description="Share of in-domain databases whose questions go to dev."
    )
    ood_fraction: float = Field(
        0.1, ge=0, lt=1, description="Share of databases drawn from the out-of-domain domains."
    )

    @model_validator(mode="after")
    def _room_for_train(self) -> SynthSection:
        if self.dev_fraction + self.ood_fraction >= 1:
            raise ValueError(
                "dev_fraction + ood_fraction must stay under 1 to leave train databases; "
                f"got {self.dev_fraction} + {self.ood_fraction}"
            )
        return self


class WideSection(Section):
    """A held-out set on BIRD-scale schemas, generated beside the synthetic training data.

    Its databases are wide (BIRD dev's shape: a median of 7+ tables and 60+ columns, some near
    200, naming noise, evidence hints) and its test domains are kept out of every training
    split, so it measures what the small training schemas cannot: schema linking at scale.
    """

    profile: Literal["tiny", "default", "large", "wide"] = Field(
        "wide", description="Size of the databases: wide for BIRD's shape, tiny for tests."
    )
    n_databases: int = Field(
        32, ge=2, description="Databases in all: dev ones of the training domains, the rest test."
    )
    questions_per_db: int = Field(10, ge=1, description="Questions asked of each database.")
    ood_domains: tuple[str, ...] = Field(
        ("hotel", "agriculture", "energy_utility", "insurance", "museum", "telecom"),
        min_length=1,
        description="Domains of the test databases; with the synthetic source each must be kept "
        "out of training too: in data.synth.ood_domains, or marked held_out in its domain file.",
    )
    dev_fraction: float = Field(
        0.25,
        ge=0,
        lt=1,
        description="Share of the databases drawn from the training domains and prepared as "
        "dev_wide.jsonl (to choose policies on); the rest become test_wide.jsonl.",
    )
    seed: int = Field(
        1,
        description="Seed of the wide set's draws: its own, so that another base.seed (the "
        "training data's) leaves the held-out set as it was.",
    )
    workers: int = Field(
        1, ge=1, description="Processes building databases (the same bytes for any number)."
    )


class FilteringSection(Section):
    """Source filtering of the train split (`acesql.data.filtering`)."""

    complexities: list[str] | None = Field(
        None,
        description="Complexity labels to keep, e.g. [moderate, complex]; null keeps all.",
    )
    max_per_db: int | None = Field(
        None, ge=1, description="Most examples kept per database; null: no cap."
    )
    max_examples: int | None = Field(
        None,
        ge=1,
        description="Most examples kept in all, spread over databases round-robin; null: no cap.",
    )


class DataSection(Section):
    """The `data` stage: where examples come from and which ones are prepared."""

    source: Literal["synth", "spider", "bird", "synsql"] = Field(
        "synth", description="synth generates a dataset; the others load one from `path`."
    )
    path: Path | None = Field(
        None,
        validate_default=True,
        description="Dataset folder of a spider, bird or synsql source; null for synth.",
    )
    splits: SplitsSection = Field(default_factory=SplitsSection, validate_default=True)
    synth: SynthSection = Field(default_factory=SynthSection)
    wide: WideSection | None = Field(
        None,
        description="The wide held-out set (data/wide, prepared as dev_wide and test_wide); "
        "null: none.",
    )
    filtering: FilteringSection = Field(default_factory=FilteringSection)

    @field_validator("path")
    @classmethod
    def _path_for_real_sources(cls, path: Path | None, info: ValidationInfo) -> Path | None:
        source = info.data.get("source")
        if source not in (None, "synth") and path is None:
            raise ValueError(f"required when source is {source}: the dataset folder")
        if source not in (None, "synth") and not path.is_dir():
            raise ValueError(f"no such folder (the {source} dataset)")
        return path

    @field_validator("wide")
    @classmethod
    def _wide_tests_unseen(cls, wide: WideSection | None, info: ValidationInfo):
        """A test domain that data.synth trains on would make test_wide no held-out set."""
        synth = info.data.get("synth")
        if wide is None or info.data.get("source") != "synth" or synth is None:
            return wide
        domains = load_domains()
        unknown = sorted(set(wide.ood_domains) - set(domains))
        if unknown:
            raise ValueError(f"ood_domains {unknown} are not domains; known: {sorted(domains)}")
        trained = [
            d for d in wide.ood_domains if d not in synth.ood_domains and not domains[d].held_out
        ]
        if trained:
            raise ValueError(
                f"ood_domains {trained} are training domains of data.synth: add them to "
                "data.synth.ood_domains or choose held-out ones "
                f"({sorted(d for d in domains if domains[d].held_out)})"
            )
        return wide

    @field_validator("filtering")
    @classmethod
    def _known_complexities(cls, rules: FilteringSection, info: ValidationInfo):
        source = info.data.get("source")
        if source is None or rules.complexities is None:
            return rules
        known = COMPLEXITIES[source]
        unknown = [c for c in rules.complexities if c.lower() not in known]
        if unknown:
            raise PydanticCustomError(
                "unknown_complexity",
                f"{source} examples carry no such label; "
                + (f"use some of {list(known)} or null" if known else "use null"),
                {"field": "complexities", "value": unknown},
            )
        return rules

    @field_validator("splits")
    @classmethod
    def _splits_exist(cls, splits: SplitsSection, info: ValidationInfo) -> SplitsSection:
        source = info.data.get("source")
        if source is None:
            return splits
        for name, split in splits.model_dump().items():
            if split is not None and split not in SPLITS[source]:
                # names the split's own key, which a plain ValueError here cannot
                raise PydanticCustomError(
                    "unknown_split",
                    f"{source} has no such split; use one of {list(SPLITS[source])}"
                    + (" or null" if name != "train" else ""),
                    {"field": name, "value": split},
                )
        return splits


class SftDataSection(Section):
    """The `sft_data` stage: the supervised targets of both roles."""

    mode: Literal["gold", "distill_generator", "self_distill"] = Field(
        "gold",
        description="gold: targets from gold SQL and its columns (bootstrap for a weak base "
        "model); distill_generator: the base model's own SQL that executes right for the "
        "generator, its own lists that name every gold column (else the gold set) for the "
        "retriever (one rollout per role and question); self_distill: the paper's paired "
        "self-distillation with execution filtering.",
    )
    max_examples: int | None = Field(
        None, ge=1, description="Source examples used (spread over databases); null: all."
    )
    retriever_samples: int = Field(
        16,
        ge=0,
        description="self_distill: retriever samples voted per question (at least 1); "
        "distill_generator: retriever samples whose covering lists become targets (0: the "
        "gold column sets alone).",
    )
    generator_samples: int = Field(
        4, ge=1, description="Generator samples per pruned schema (the distilling modes)."
    )
    shuffle_tables: bool = Field(
        False,
        description="distill_generator: show each retriever target on the schema with its "
        "tables in a seeded random order, so the list cannot lean on where a table sits (the "
        "paper: false).",
    )
    vote_threshold: float = Field(0.5, gt=0, le=1, description="Share of votes a column needs.")
    balance: bool = Field(True, description="Keep as many retriever as generator samples.")
    match_mode: MatchMode = Field(
        "multiset", description="Execution match that keeps a distilled SQL (the distilling modes)."
    )
    generation: GenerationSection = Field(
        default_factory=GenerationSection, description="Sampling of the distillation rollouts."
    )

    @model_validator(mode="after")
    def _self_distill_votes(self) -> SftDataSection:
        if self.mode == "self_distill" and self.retriever_samples < 1:
            raise ValueError(
                "self_distill votes over retriever samples: set retriever_samples >= 1"
            )
        return self


class GrpoDataSection(Section):
    """The `grpo_data` stage: questions the SFT model solves only sometimes, and the pool seed."""

    max_questions: int | None = Field(
        None, ge=1, description="Train questions rolled out (spread over databases); null: all."
    )
    complexities: list[str] | None = Field(
        None, description="Keep only these complexity levels (the paper: hard ones); null: all."
    )

    @field_validator("complexities")
    @classmethod
    def _known_labels(cls, labels: list[str] | None) -> list[str] | None:
        known = sorted({c for levels in COMPLEXITIES.values() for c in levels})
        unknown = [c for c in labels or [] if c.lower() not in known]
        if unknown:
            raise ValueError(f"no source gives the labels {unknown}; use some of {known}")
        return labels

    retriever_samples: int = Field(8, ge=1, description="Retriever samples; their union prunes.")
    generator_samples: int = Field(16, ge=1, description="Generator samples on the union schema.")
    min_correct: int = Field(2, ge=0, description="Keep a question with at least this many...")
    max_correct: int = Field(14, ge=0, description="...and at most this many correct SQLs.")
    timeout_s: float = Field(30.0, gt=0, description="SQL execution timeout.")
    match_mode: MatchMode = Field(
        "multiset", description="Execution match that counts a sampled SQL as correct."
    )
    generation: GenerationSection = Field(
        default_factory=lambda: GenerationSection(max_new_tokens=2048),
        description="Sampling of the initial rollout.",
    )

    @model_validator(mode="after")
    def _bounds_fit_the_samples(self) -> GrpoDataSection:
        if not self.min_correct <= self.max_correct <= self.generator_samples:
            raise ValueError(
                "needs min_correct <= max_correct <= generator_samples; got "
                f"{self.min_correct}, {self.max_correct}, {self.generator_samples}"
            )
        return self


class DebugDataSection(Section):
    """The `debug_data` stage: SQL debugging tasks drawn from the prepared splits."""

    tasks_per_db: int = Field(12, ge=1, description="Tasks per database of each split.")
    query_share: float = Field(
        0.5, ge=0, description="Share of query tasks (a SELECT that errs or returns wrong rows)."
    )
    management_share: float = Field(
        0.3, ge=0, description="Share of data-management tasks (UPDATE / DELETE / INSERT)."
    )
    personalization_share: float = Field(
        0.2, ge=0, description="Share of personalization tasks (the user's views and triggers)."
    )
    timeout_s: float = Field(10.0, gt=0, description="SQL execution timeout per statement.")

    @model_validator(mode="after")
    def _some_share(self) -> DebugDataSection:
        if self.query_share + self.management_share + self.personalization_share <= 0:
            raise ValueError(
                "query_share, management_share and personalization_share are all 0: "
                "give at least one a positive share"
            )
        return self
