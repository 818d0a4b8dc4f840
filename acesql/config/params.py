"""The whole params.yaml (`Params`) and its loading: a strict YAML reader (a key written twice
is an error), checks of empty and unknown sections, and one line per validation problem."""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import BaseModel, Field, ValidationError

from acesql.config.agent import AgentGrpoSection, AgentSftSection
from acesql.config.data import DataSection, DebugDataSection, GrpoDataSection, SftDataSection
from acesql.config.evaluation import EvaluateSection, SelectionSection
from acesql.config.ranker import PrmDataSection, PrmSection, RankerDataSection, RankerSection
from acesql.config.section import Section
from acesql.config.shared import BaseModelSection, BaseSection, PromptSection
from acesql.config.training import DistributedSection, GrpoSection, SftSection
from acesql.errors import ConfigError


class Params(Section):
    """The whole params.yaml: one attribute per section."""

    base: BaseSection = Field(default_factory=BaseSection, description="Shared settings.")
    data: DataSection = Field(default_factory=DataSection, description="The data stage.")
    base_model: BaseModelSection = Field(
        default_factory=BaseModelSection, description="The base_model stage."
    )
    prompt: PromptSection = Field(default_factory=PromptSection, description="Role prompts.")
    sft_data: SftDataSection = Field(default_factory=SftDataSection, description="sft_data.")
    sft: SftSection = Field(default_factory=SftSection, description="The sft stage.")
    debug_data: DebugDataSection = Field(
        default_factory=DebugDataSection, description="The debug_data stage."
    )
    grpo_data: GrpoDataSection = Field(default_factory=GrpoDataSection, description="grpo_data.")
    reasoning_sft: AgentSftSection = Field(
        default_factory=lambda: AgentSftSection(model="models/grpo", max_turns=1),
        description="The agent curriculum's 1st stage: reasoning imitation (one turn).",
    )
    agent_sft: AgentSftSection = Field(
        default_factory=AgentSftSection,
        description="The agent curriculum's 2nd stage: tool-use imitation (several turns).",
    )
    reasoning_grpo: AgentGrpoSection = Field(
        default_factory=lambda: AgentGrpoSection(model="models/agent_sft", max_turns=1),
        description="The agent curriculum's 3rd stage: reasoning RL (one turn).",
    )
    agent_grpo: AgentGrpoSection = Field(
        default_factory=AgentGrpoSection,
        description="The agent curriculum's 4th stage: agentic RL (several turns).",
    )
    grpo: GrpoSection = Field(default_factory=GrpoSection, description="The grpo stage.")
    distributed: DistributedSection = Field(
        default_factory=DistributedSection, description="Processes of the sft and grpo stages."
    )
    evaluate: EvaluateSection = Field(
        default_factory=EvaluateSection, description="The evaluate stage."
    )
    ranker_data: RankerDataSection = Field(
        default_factory=RankerDataSection, description="The ranker_data stage."
    )
    ranker: RankerSection = Field(default_factory=RankerSection, description="The ranker stage.")
    prm_data: PrmDataSection = Field(
        default_factory=PrmDataSection, description="The prm_data stage."
    )
    prm: PrmSection = Field(default_factory=PrmSection, description="The prm stage.")
    selection: SelectionSection = Field(
        default_factory=SelectionSection,
        description="Choosing among generator candidates (evaluate, acesql ask).",
    )


def load_params(path: str | Path = "params.yaml") -> Params:
    """Every section of a params file, validated (absent sections take their defaults; a
    section written with nothing under it is an error: `name: {}` asks for the defaults)."""
    raw = read_params_file(path)
    _no_renamed_sections(raw, path)
    _no_empty_sections(raw, path)
    try:
        return Params.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(_explain(exc, Params, (), path)) from exc


# sections a params file may leave out: their defaults apply
OPTIONAL = ("distributed", "selection")


def load_section(path: str | Path, name: str) -> Section:
    """One section of a params file, validated alone, so a stage fails only on its own keys
    (an absent `OPTIONAL` section is its defaults)."""
    field = Params.model_fields.get(name)
    if field is None:
        raise ConfigError(
            f"unknown params section {name!r}; choose one of {list(Params.model_fields)}"
        )
    model = field.annotation
    raw = read_params_file(path)
    _no_renamed_sections(raw, path)
    unknown = [key for key in raw if key not in Params.model_fields]
    if unknown:
        raise ConfigError(
            f"{path}: unknown params section(s) {unknown}; expected some of "
            f"{list(Params.model_fields)}"
        )
    if name not in raw and name in OPTIONAL:
        return model()
    if name not in raw:
        raise ConfigError(
            f"{path} has no {name!r} section, which this stage reads "
            f"(write `{name}: {{}}` to take every default)"
        )
    _no_empty_sections({name: raw[name]}, path)
    try:
        return model.model_validate(raw[name])
    except ValidationError as exc:
        raise ConfigError(_explain(exc, model, (name,), path)) from exc


# sections whose names changed: an old params file is told the new name, not "unknown"
RENAMED = {"rl_data": "grpo_data"}


def _no_renamed_sections(raw: dict, path) -> None:
    old = [name for name in raw if name in RENAMED]
    if old:
        raise ConfigError(
            f"{path}: section {old[0]!r} is now called {RENAMED[old[0]]!r}; rename it "
            f"(its keys are the same)"
        )


def _no_empty_sections(raw: dict, path) -> None:
    empty = [name for name, section in raw.items() if section is None]
    if empty:
        raise ConfigError(
            f"{path}: section(s) {empty} have nothing under them; give their keys, or write "
            f"`{empty[0]}: {{}}` to take every default"
        )


MAX_EXPANDED_NODES = 100_000  # values and keys a params file may hold once aliases expand
MAX_QUOTED_CHARS = 200  # of an input value quoted in an error message


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, except that a key written twice in one mapping is an error (the
    plain loader keeps the last value silently), and so is a document whose aliases expand
    past `MAX_EXPANDED_NODES` (a few hundred bytes of nested aliases can stand for a billion
    values, which validating or quoting in an error would exhaust memory on)."""

    def get_single_node(self):
        node = super().get_single_node()
        if node is not None:
            _expanded_size(node, {}, set())
        return node

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep)


def _expanded_size(node, sizes: dict, open_nodes: set) -> int:
    """The nodes `node` stands for once its aliases are expanded (an alias is the node it
    names, shared: each is counted once per use); ConstructorError past the bound or on a
    node that contains itself."""
    key = id(node)
    if key in sizes:
        return sizes[key]
    if key in open_nodes:
        raise yaml.constructor.ConstructorError(
            None, None, "an alias refers to a node that contains it", node.start_mark
        )
    open_nodes.add(key)
    size = 1
    if isinstance(node, yaml.SequenceNode):
        size += sum(_expanded_size(child, sizes, open_nodes) for child in node.value)
    elif isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            size += _expanded_size(k, sizes, open_nodes) + _expanded_size(v, sizes, open_nodes)
    open_nodes.discard(key)
    if size > MAX_EXPANDED_NODES:
        raise yaml.constructor.ConstructorError(
            None,
            None,
            f"aliases expand to more than {MAX_EXPANDED_NODES:,} values; write the values out",
            node.start_mark,
        )
    sizes[key] = size
    return size


def _quoted(value) -> str:
    """`repr(value)`, cut to `MAX_QUOTED_CHARS`."""
    text = repr(value)
    if len(text) <= MAX_QUOTED_CHARS:
        return text
    return f"{text[:MAX_QUOTED_CHARS]}... ({len(text) - MAX_QUOTED_CHARS:,} more characters)"


def read_params_file(path: str | Path) -> dict:
    """The params file as written, before defaults and validation (strictly read: a key
    twice is an error); every failure a ConfigError that names the file."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"params file {path} is a folder; give the YAML file")
    try:
        raw = yaml.load(path.read_text(), Loader=_UniqueKeyLoader)
    except FileNotFoundError as exc:
        raise ConfigError(f"params file not found: {path}") from exc
    except (UnicodeDecodeError, OSError) as exc:
        raise ConfigError(f"cannot read params file {path}: {exc}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {exc}") from exc
    if raw is None:
        raise ConfigError(f"params file {path} is empty")
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
            lines.append(
                f"{where}: {message}" + (f" (got {_quoted(value)})" if value is not None else "")
            )
    return f"{path} is invalid:\n  " + "\n  ".join(lines)


def _model_at(model: type[BaseModel], loc: tuple) -> type[BaseModel]:
    """The nested section class reached by following `loc` from `model`."""
    for part in loc:
        model = model.model_fields[part].annotation
    return model
