"""The base of every params.yaml section, and the type of an execution-match setting."""

from __future__ import annotations

import typing
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator

MatchMode = Literal["multiset", "bird", "spider"]  # acesql.sql.matching.MATCH_MODES
# which answer is the product's: acesql.selection.answer
AnswerPolicy = Literal[
    "pipeline", "full_schema", "pipeline_else_full", "full_else_pipeline", "by_size"
]


class Section(BaseModel):
    """A params.yaml section: extra keys are errors, values are frozen once loaded.

    No number may be infinite or NaN (`.inf` / `.nan` in YAML): an infinite timeout or
    temperature, or a NaN one that every comparison lets through, would break the run."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_numbers(cls, value, info: ValidationInfo):
        """YAML's `true` is not a count: pydantic would take it as 1 (and `false` as 0)."""
        if isinstance(value, bool) and not _admits_bool(
            cls.model_fields[info.field_name].annotation
        ):
            raise ValueError("must not be true/false")
        return value


def _admits_bool(annotation) -> bool:
    """Whether a field typed `annotation` may hold true/false."""
    if annotation is bool or annotation is typing.Any:
        return True
    if typing.get_origin(annotation) is Literal:
        return any(isinstance(arg, bool) for arg in typing.get_args(annotation))
    return any(_admits_bool(arg) for arg in typing.get_args(annotation))
