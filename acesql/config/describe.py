"""Every field of a params file: its value, its default, whether the file sets it, its meaning.

params.yaml writes only what differs from the typed defaults; this is the view of all the
rest (`acesql params`):

    for line in describe(load_params(path), read_params_file(path)):
        print(line.name, line.value, line.default, line.written, line.description)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from acesql.config.params import Params


@dataclass(frozen=True)
class FieldLine:
    """One field: dotted `name`, the `value` the stages run with, the typed `default`, and
    whether the params file writes it (`written`), as JSON values."""

    name: str
    value: Any
    default: Any
    written: bool
    description: str


def describe(params: Params, raw: dict) -> list[FieldLine]:
    """One line per field of `params` (sections' sub-sections walked into), in the classes'
    field order; `raw` is the file as written, for `written`. A field's default is what it
    would be if the file left it out.

    >>> lines = describe(Params(), {"sft": {"epochs": 1.0}})
    >>> [(x.value, x.default, x.written) for x in lines if x.name == "sft.epochs"]
    [(1.0, 1.0, True)]
    >>> [x.written for x in lines if x.name == "sft.learning_rate"]
    [False]
    """
    return _walk(params, Params().model_dump(mode="json"), raw, "")


def _walk(model: BaseModel, defaults: dict, raw: Any, prefix: str) -> list[FieldLine]:
    values = model.model_dump(mode="json")
    written = raw if isinstance(raw, dict) else {}
    lines = []
    for name, info in type(model).model_fields.items():
        value = getattr(model, name)
        if isinstance(value, BaseModel):
            # a sub-section the file writes takes its own class's defaults for what it leaves
            # out; one it does not write, its parent's (a stage's own generation settings)
            inner = type(value)().model_dump(mode="json") if name in written else defaults.get(name)
            lines += _walk(value, inner or {}, written.get(name), f"{prefix}{name}.")
            continue
        lines.append(
            FieldLine(
                name=f"{prefix}{name}",
                value=values[name],
                default=defaults.get(name),
                written=name in written,
                description=" ".join((info.description or "").split()),
            )
        )
    return lines
