"""Training progress bars: steps done and, under a time budget, the time the budget leaves.

    bar = StepBar(total=400, initial=0, desc="sft", budget_s=12 * 60)

A plain tqdm bar's remaining time is the time the planned steps would take; when a time budget
stops the run first, that ETA (`3/400 [00:38<1:20:25]`) names an end that never comes. With
`budget_s` the bar shows whichever comes first: the steps' ETA, or the budget's time left
marked `budget` (`3/400 [00:38<11:22 budget, 12.67s/step]`). Without it, it is tqdm's bar.
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
