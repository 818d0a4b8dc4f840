"""Typed parameters of the pipeline stages, read from `params.yaml`.

One section per DVC stage, named after it (`data`, later `sft`, `grpo`, ...), plus `base`,
which every stage reads. A section validates itself: unknown keys, wrong types and values out
of range raise `ConfigError` with one line per problem, naming the `section.field` to fix.
So do a key written twice, `true`/`false` where a number belongs, an unknown top-level
section, a section with nothing under it, and (for `load_section`) a missing section: none of
them falls back to defaults in silence. Cross-field rules (split fractions, label names, a
dataset folder that exists) are checked here too, before a stage touches its outputs.
Every field carries a description, so `DataSection.model_json_schema()` documents the file.

    params = load_params("params.yaml")          # every section, all checked
    data = load_section("params.yaml", "data")   # one stage's section, checked alone

Where things live: `section` (the `Section` base, `MatchMode`), `shared` (base, base_model,
prompt, generation), `data` (data, sft_data, grpo_data, debug_data), `training` (sft, grpo,
distributed), `agent` (the agent curriculum's four stages), `ranking` (ranker_data, ranker,
prm_data, prm), `evaluation` (evaluate, selection), `params` (`Params` and the loaders).
"""

from acesql.config.agent import AgentGrpoSection, AgentSftSection
from acesql.config.data import (
    DataSection,
    DebugDataSection,
    GrpoDataSection,
    SftDataSection,
    SynthSection,
    WideSection,
)
from acesql.config.evaluation import EvaluateSection, SelectionSection
from acesql.config.params import Params, load_params, load_section
from acesql.config.ranker import PrmDataSection, PrmSection, RankerDataSection, RankerSection
from acesql.config.section import Section
from acesql.config.shared import BaseModelSection, BaseSection, GenerationSection
from acesql.config.training import DistributedSection, GrpoSection, SftSection

__all__ = [
    "AgentGrpoSection",
    "AgentSftSection",
    "BaseModelSection",
    "BaseSection",
    "DataSection",
    "DebugDataSection",
    "DistributedSection",
    "EvaluateSection",
    "GenerationSection",
    "GrpoSection",
    "Params",
    "PrmDataSection",
    "PrmSection",
    "RankerDataSection",
    "RankerSection",
    "GrpoDataSection",
    "Section",
    "SelectionSection",
    "SftDataSection",
    "SftSection",
    "SynthSection",
    "WideSection",
    "load_params",
    "load_section",
]
