"""The training progress bar under a time budget: the budget's time left, not a steps ETA."""

import io
import re

import pytest

from acesql.progress import StepBar, time_left


@pytest.mark.parametrize(
    "n, total, rate, elapsed, budget, expected",
    [
        (3, 400, 1 / 12.67, 38, 720, "11:22 budget"),  # 397 steps x 12.67 s: far past the budget
        (390, 400, 0.1, 100, 720, "01:40"),  # 10 steps x 10 s end before the budget: their ETA
        (3, 400, None, 38, 720, "11:22 budget"),  # no rate yet
        (3, 400, 0.1, 800, 720, "00:00 budget"),  # over the budget
        (3, 400, 1 / 12.67, 38, 5000, "1:22:42 budget"),
    ],
)
def test_time_left(n, total, rate, elapsed, budget, expected):
    assert time_left(n, total, rate, elapsed, budget) == expected


def _render(budget_s, elapsed=38.0):
    bar = StepBar(
        total=400, initial=3, desc="sft", unit="step", file=io.StringIO(), budget_s=budget_s
    )
    bar._time = lambda: bar.start_t + elapsed  # a clock that reads `elapsed` since start
    text = str(bar)
    bar.close()
    return text


def test_the_bar_shows_the_budget_not_the_steps_eta():
    text = _render(720)
    assert "3/400 [00:38<11:22 budget, " in text and text.startswith("sft:   1%")


def test_without_a_budget_it_is_tqdms_bar():
    assert "3/400 [00:38<?, ?step/s]" in _render(None)


@pytest.mark.parametrize("disable", [True, False])
def test_a_disabled_bar_accepts_a_budget_and_writes_nothing(disable):
    """Every process but the main one holds a disabled bar: it takes the same arguments and
    prints nothing, where an enabled one prints the budget."""
    out = io.StringIO()
    bar = StepBar(total=4, disable=disable, budget_s=10, file=out)
    bar.update()
    bar.set_postfix(loss="0.50")
    bar.close()
    if disable:
        assert out.getvalue() == ""
    else:
        assert re.search(r"1/4 \[\d\d:\d\d<\d\d:\d\d budget, ", out.getvalue())
