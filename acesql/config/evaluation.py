"""Sections of evaluation: the `evaluate` stage, and `selection`, the test-time choice among
generator candidates that `evaluate` and `acesql ask` both read."""

from __future__ import annotations

import warnings
from typing import Literal

from pydantic import Field, model_validator

from acesql.config.section import AnswerPolicy, MatchMode, Section
from acesql.config.shared import GenerationSection


class EvaluateSection(Section):
    """The `evaluate` stage: greedy pipeline EX and generator ability."""

    model: str = Field("models/grpo", description="Model folder to evaluate.")
    splits: list[str] = Field(
        ["dev", "test_ood"], description="Prepared splits to evaluate (data/prepared/*.jsonl)."
    )
    limit: int | None = Field(
        200, ge=1, description="Questions per split (spread over databases); null: all."
    )
    retriever_samples: int = Field(
        1, ge=1, description="1: greedy retriever; n > 1: n samples at temperature 1, voted."
    )
    vote_threshold: float = Field(0.5, gt=0, le=1, description="Share of votes a column needs.")
    on_empty_vote: Literal["empty", "full_schema"] = Field(
        "empty",
        description="When the retriever selects no column (nothing parsed or voted): the "
        "generator sees an empty schema (empty, the paper's rule) or the whole schema "
        "(full_schema, which hides a retriever that does not answer).",
    )
    unclosed_list: Literal["reject", "salvage"] = Field(
        "reject",
        description="A retriever list that never closes (a greedy loop cut by the token cap): "
        "no list (reject, the paper's strict parse) or the columns it named before its first "
        "repeat (salvage).",
    )
    timeout_s: float = Field(30.0, gt=0, description="SQL execution timeout.")
    match_mode: MatchMode = Field(
        "multiset", description="Execution match mode (multiset for synthetic data)."
    )
    generation: GenerationSection = Field(
        default_factory=lambda: GenerationSection(temperature=0.0),
        description="Decoding settings (the roles decode greedily; temperature is ignored).",
    )


class SelectionSection(Section):
    """Test-time selection among generator candidates, read by `evaluate` and `acesql ask`.

    The generator samples `candidates` SQL per question on the retriever's pruned schema;
    `method` says how the answer is chosen among them: `greedy` samples nothing (the greedy
    answer), `maj` votes by execution result (maj@n), `r3` ranks the execution groups with
    the ranker role's judgments (`acesql.ranker.select`). Evaluation always reports the
    greedy answer too, and with `r3` also maj@n and pointwise best-of-n on the same
    candidates, so one run compares them at equal n.
    """

    method: Literal["greedy", "maj", "r3", "prm"] = Field(
        "greedy", description="How the answer is chosen: greedy | maj | r3 | prm."
    )
    candidates: int = Field(8, ge=2, description="Generator samples per question (n).")
    temperature: float = Field(1.0, gt=0, description="Sampling temperature of the candidates.")
    tau: float = Field(
        0.05, ge=0, lt=0.5, description="r3: a pairwise P within tau of 0.5 is a tie."
    )
    resample: bool = Field(
        False,
        description="r3: an auditor judgment reads the pool; when it finds no likely-correct "
        "SQL, draw `resample_candidates` more, keep the n best by pointwise score, rank again.",
    )
    resample_candidates: int = Field(16, ge=1, description="r3 resampling: new samples (m > n).")
    audit_threshold: float = Field(
        0.5, gt=0, lt=1, description="r3 resampling: the auditor's P(yes) under which it fires."
    )
    resample_from: Literal["generator", "pipeline"] = Field(
        "generator",
        description="r3 resampling: new candidates are generator samples on the same pruned "
        "schema (generator, R3-SQL's) or samples of the whole pipeline, each generator sample "
        "on its own sampled retriever list (pipeline: reaches questions whose pruned schema "
        "lacks a needed column).",
    )
    resample_ranked: Literal["new", "both"] = Field(
        "new",
        description="r3 resampling: the n ranked are the best by pointwise score of the m new "
        "candidates (new, R3-SQL's: the first n are discarded) or of the n first and m new "
        "together (both).",
    )
    prm_model: str = Field(
        "models/prm", description="prm: the trajectory score model (the prm stage's output)."
    )
    answer: AnswerPolicy = Field(
        "full_else_pipeline",  # chosen on dev: docs/results.md, "Which answer ships"
        description="Which answer is the product's: the pipeline's (retriever -> pruned schema "
        "-> generator, chosen among candidates by `method`), the generator's on the full "
        "schema in one call (full_schema), or a rule per question: the pipeline's unless it "
        "fails to run (pipeline_else_full), the converse (full_else_pipeline), or the full "
        "schema while its prompt has at most `full_schema_tokens` tokens (by_size). Choose it "
        "on a dev split with `acesql eval answers RUN`, never on a test set.",
    )
    full_schema_tokens: int = Field(
        1024, ge=1, description="answer by_size: the longest full-schema prompt answered whole."
    )

    @model_validator(mode="before")
    @classmethod
    def _old_names(cls, data):
        """`resample_pool`, this setting's former name, read with a deprecation warning."""
        if isinstance(data, dict) and "resample_pool" in data:
            if "resample_ranked" in data:
                raise ValueError("give resample_ranked alone (resample_pool is its old name)")
            warnings.warn(
                "selection.resample_pool is now selection.resample_ranked; the old name will "
                "stop being read in a later release",
                DeprecationWarning,
                stacklevel=2,
            )
            data = {**data, "resample_ranked": data["resample_pool"]}
            del data["resample_pool"]
        return data

    @model_validator(mode="after")
    def _resampling_draws_more(self):
        if self.resample and self.resample_candidates <= self.candidates:
            raise ValueError(
                "resample_candidates must exceed candidates: resampling draws a bigger pool"
            )
        return self
