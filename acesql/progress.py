"""Training progress bars: steps done and, under a time budget, the time the budget leaves.

    bar = StepBar(total=400, initial=0, desc="sft", budget_s=12 * 60)

A plain tqdm bar's remaining time is the time the planned steps would take; when a time budget
stops the run first, that ETA (`3/400 [00:38<1:20:25]`) names an end that never comes. With
`budget_s` the bar shows whichever comes first: the steps' ETA, or the budget's time left
marked `budget` (`3/400 [00:38<11:22 budget, 12.67s/step]`). Without it, it is tqdm's bar.

A trainer's summary compares its first and last steps with `history_windows` and
`window_mean`: five steps each, or the two halves of a shorter run, so a 4-step run does not
compare two windows that share its middle steps.
"""

from __future__ import annotations

from tqdm import tqdm

BUDGET_FORMAT = "{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}<{left}, {rate_fmt}{postfix}]"


def time_left(
    n: int, total: int | None, rate: float | None, elapsed: float, budget_s: float
) -> str:
    """`mm:ss` to the end of the planned steps, or `mm:ss budget` when the budget ends first."""
    budget_left = max(0.0, budget_s - elapsed)
    if rate and total:
        steps_left = (total - n) / rate
        if steps_left <= budget_left:
            return tqdm.format_interval(steps_left)
    return f"{tqdm.format_interval(budget_left)} budget"


class StepBar(tqdm):
    """A tqdm bar of optimizer steps; `budget_s`: seconds this attempt may still train."""

    def __init__(self, *args, budget_s: float | None = None, **kwargs):
        self.budget_s = budget_s
        if budget_s is not None:
            kwargs.setdefault("bar_format", BUDGET_FORMAT)
        super().__init__(*args, **kwargs)

    @property
    def format_dict(self):
        d = super().format_dict
        if self.budget_s is not None:
            d["left"] = time_left(d["n"], d["total"], d["rate"], d["elapsed"], self.budget_s)
        return d


def history_windows(history: list[dict], most: int = 5) -> tuple[list[dict], list[dict], int]:
    """The first and last `most` steps of `history`, the halves of a shorter run (one step
    alone is both), and the window's width.

    >>> first, last, width = history_windows([{"r": 0}, {"r": 1}, {"r": 2}, {"r": 3}])
    >>> first, last, width
    ([{'r': 0}, {'r': 1}], [{'r': 2}, {'r': 3}], 2)
    """
    width = max(1, min(most, len(history) // 2))
    return history[:width], history[-width:], width


def window_mean(rows: list[dict], key: str) -> float | None:
    """The mean of `key` over the rows that have it, to 4 places; None when none does."""
    values = [r[key] for r in rows if key in r]
    return round(sum(values) / len(values), 4) if values else None
