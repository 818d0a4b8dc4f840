"""What the agent sees after an action: a bounded text rendering of the execution result.

Rows and values are cut (`max_rows`, `max_value_chars`) and the whole text is capped at
`max_chars`, so an observation never floods the context; the cut is always said.

>>> from acesql.sql.sandbox import ExecResult
>>> print(render_observation(ExecResult(ok=True, columns=["n"], rows=[(3,)])))
n
3
(1 row)
>>> render_observation(ExecResult(ok=True, rows_affected=2))
'OK: 2 rows affected.'
"""

from __future__ import annotations

from acesql.sql.sandbox import ExecResult


def render_observation(
    result: ExecResult, max_rows: int = 10, max_value_chars: int = 60, max_chars: int = 1500
) -> str:
    if not result.ok:
        return f"Error: {result.error}"
    if not result.columns:
        if result.rows_affected >= 0:
            s = "" if result.rows_affected == 1 else "s"
            return f"OK: {result.rows_affected} row{s} affected."
        return "OK."
    lines = [" | ".join(result.columns)]
    for row in result.rows[:max_rows]:
        lines.append(" | ".join(_value(v, max_value_chars) for v in row))
    n = len(result.rows)
    more = "+" if result.truncated else ""
    shown = f", first {max_rows} shown" if n > max_rows else ""
    lines.append(f"({n}{more} row{'' if n == 1 else 's'}{shown})")
    text = "\n".join(lines)
    if len(text) > max_chars:
        text = text[: max_chars - 30].rstrip() + "\n... (output cut)"
    return text


def _value(value, limit: int) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bytes):
        text = f"<blob {len(value)} bytes>"
    else:
        text = str(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
