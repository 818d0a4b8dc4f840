"""What a model turn asks for: run SQL (`<sql>...</sql>`), or submit (`<submit>...</submit>`).

The last complete action tag of the turn counts; text before it is the model's reasoning. A
turn with no complete tag is malformed and costs a turn, with an observation saying so.

>>> parse_action("Let me look first. <sql>SELECT COUNT(*) FROM t</sql>")
Action(kind='sql', sql='SELECT COUNT(*) FROM t')
>>> parse_action("<submit>\\nUPDATE t SET a = 1;\\n</submit>").kind
'submit'
>>> parse_action("I think the answer is 3.").kind
'none'
"""

from __future__ import annotations

import re
from dataclasses import dataclass

TAGS = ("sql", "submit")
STOP = ["</sql>", "</submit>"]  # generation stops once a turn has closed its action
_ACTION = re.compile(r"<(sql|submit)>(.*?)</\1>", re.S)
_OPEN = re.compile(r"<(sql|submit)>(?!.*<(?:sql|submit)>)", re.S)


@dataclass(frozen=True)
class Action:
    kind: str  # "sql", "submit" or "none"
    sql: str = ""


def parse_action(text: str) -> Action:
    """The turn's last complete action; `none` when it has none (or an empty one)."""
    found = _ACTION.findall(text or "")
    if not found:
        return Action("none")
    kind, sql = found[-1]
    sql = _strip_fence(sql)
    return Action(kind, sql) if sql else Action("none")


def close_action(text: str) -> str:
    """`text` with the closing tag the engine's stop string cut off put back, when the turn
    ended inside an open action."""
    opened = _OPEN.search(text)
    if opened and f"</{opened.group(1)}>" not in text[opened.end() :]:
        return text + f"</{opened.group(1)}>"
    return text


def _strip_fence(sql: str) -> str:
    """An action's SQL without a ```sql fence around it, if the model added one."""
    sql = sql.strip()
    fenced = re.fullmatch(r"```(?:sql|sqlite)?\s*(.*?)\s*```", sql, re.S | re.I)
    return (fenced.group(1) if fenced else sql).strip()
