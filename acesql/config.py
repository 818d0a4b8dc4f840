"""Typed parameters of the pipeline stages, read from `params.yaml`.

One section per DVC stage, named after it (`data`, later `sft`, `grpo`, ...), plus `base`,
which every stage reads. A section validates itself: unknown keys, wrong types and values out
of range raise `ConfigError` with one line per problem, naming the `section.field` to fix.
Every field carries a description, so `DataSection.model_json_schema()` documents the file.

    params = load_params("params.yaml")          # every section, all checked
    data = load_section("params.yaml", "data")   # one stage's section, checked alone
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
)
from pydantic_core import PydanticCustomError

from acesql.data.loaders import SPLITS
from acesql.errors import ConfigError


class Section(BaseModel):
    """A params.yaml section: extra keys are errors, values are frozen once loaded."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class BaseSection(Section):
    """Settings every stage shares."""

    seed: int = Field(0, description="Seed of every random choice in the pipeline.")
    data_dir: Path = Field(Path("data"), description="Folder of the data stages' outputs.")
    models_dir: Path = Field(Path("models"), description="Folder of model checkpoints.")
    results_dir: Path = Field(Path("results"), description="Folder of evaluation results.")
    tracking_uri: str | None = Field(
        "sqlite:///mlflow.db",
        description="MLflow tracking store (sqlite:///FILE or a server URL; MLflow 3 refuses "
        "the plain file store). null turns tracking off.",
    )
    experiment: str = Field("acesql", min_length=1, description="MLflow experiment name.")


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

    profile: Literal["tiny", "default", "large"] = Field(
        "default", description="Size and difficulty of the databases and questions."
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
    filtering: FilteringSection = Field(default_factory=FilteringSection)

    @field_validator("path")
    @classmethod
    def _path_for_real_sources(cls, path: Path | None, info: ValidationInfo) -> Path | None:
        source = info.data.get("source")
        if source not in (None, "synth") and path is None:
            raise ValueError(f"required when source is {source}: the dataset folder")
        return path

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


class Params(Section):
    """The whole params.yaml: one attribute per section."""

    base: BaseSection = Field(default_factory=BaseSection, description="Shared settings.")
    data: DataSection = Field(default_factory=DataSection, description="The data stage.")


def load_params(path: str | Path = "params.yaml") -> Params:
    """Every section of a params file, validated (absent sections take their defaults)."""
    raw = _read(path)
    try:
        return Params.model_validate({k: v if v is not None else {} for k, v in raw.items()})
    except ValidationError as exc:
        raise ConfigError(_explain(exc, Params, (), path)) from exc


def load_section(path: str | Path, name: str) -> Section:
    """One section of a params file, validated alone, so a stage fails only on its own keys."""
    field = Params.model_fields.get(name)
    if field is None:
        raise ConfigError(
            f"unknown params section {name!r}; choose one of {list(Params.model_fields)}"
        )
    model = field.annotation
    try:
        return model.model_validate(_read(path).get(name) or {})
    except ValidationError as exc:
        raise ConfigError(_explain(exc, model, (name,), path)) from exc


def _read(path: str | Path) -> dict:
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except FileNotFoundError as exc:
        raise ConfigError(f"params file not found: {path}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {exc}") from exc
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{path} must map section names to sections, got {type(raw).__name__}")
    return raw


def _explain(exc: ValidationError, model: type[BaseModel], prefix: tuple, path) -> str:
    """One line per problem: `section.field: what is wrong (got VALUE)`."""
    lines = []
    for error in exc.errors():
        ctx = error.get("ctx") or {}
        loc = (*prefix, *error["loc"], *([ctx["field"]] if "field" in ctx else []))
        where = ".".join(str(part) for part in loc)
        value = ctx.get("value", error["input"])
        if error["type"] == "extra_forbidden":
            known = list(_model_at(model, error["loc"][:-1]).model_fields)
            lines.append(f"{where}: unknown key; expected one of {known}")
        elif error["type"] == "missing":
            lines.append(f"{where}: required")
        else:
            message = error["msg"].removeprefix("Value error, ")
            lines.append(f"{where}: {message}" + (f" (got {value!r})" if value is not None else ""))
    return f"{path} is invalid:\n  " + "\n  ".join(lines)


def _model_at(model: type[BaseModel], loc: tuple) -> type[BaseModel]:
    """The nested section class reached by following `loc` from `model`."""
    for part in loc:
        model = model.model_fields[part].annotation
    return model
