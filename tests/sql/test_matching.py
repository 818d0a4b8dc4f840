"""Execution matching in the three modes, driven by a fixture file of hand-made cases."""

import json
from pathlib import Path

import pytest

from acesql.errors import ConfigError
from acesql.sql.matching import MATCH_MODES, execution_match
from acesql.sql.sandbox import ExecResult

FIXTURES = Path(__file__).parents[1] / "fixtures"
CASES = json.loads((FIXTURES / "match_cases.json").read_text())


def _result(rows):
    return ExecResult(
        ok=True,
        columns=[f"c{i}" for i in range(len(rows[0]) if rows else 0)],
        rows=[tuple(r) for r in rows],
    )


@pytest.mark.parametrize("mode", sorted(MATCH_MODES))
@pytest.mark.parametrize("case", CASES, ids=lambda c: c["name"])
def test_match_cases(case, mode):
    got = execution_match(
        _result(case["pred"]), _result(case["gold"]), mode, ordered=case.get("ordered", False)
    )
    assert got.match is case["expect"][mode], got
    assert got.usable
    assert got.gold_empty is case.get("gold_empty", False)
    assert (got.reason == "match") is got.match


@pytest.mark.parametrize("mode", sorted(MATCH_MODES))
def test_unusable_gold_is_never_a_match(mode):
    good = _result([[1]])
    failed = ExecResult(ok=False, error="no such table: x")
    slow = ExecResult(ok=False, error="timeout", timed_out=True)
    cut = ExecResult(ok=True, columns=["a"], rows=[(1,)], truncated=True)
    assert execution_match(good, failed, mode).reason == "gold_error"
    assert execution_match(failed, failed, mode).usable is False
    assert execution_match(good, slow, mode).reason == "gold_timeout"
    assert execution_match(cut, cut, mode).reason == "gold_truncated"
    for gold in (failed, slow, cut):
        assert execution_match(good, gold, mode).match is False


def test_failed_prediction_reasons():
    gold = _result([[1]])
    assert execution_match(ExecResult(ok=False, error="x"), gold).reason == "pred_error"
    slow = ExecResult(ok=False, error="t", timed_out=True)
    assert execution_match(slow, gold).reason == "pred_timeout"
    cut = ExecResult(ok=True, rows=[(1,)], truncated=True)
    assert execution_match(cut, gold).reason == "pred_truncated"


def test_unknown_mode_is_a_config_error():
    with pytest.raises(ConfigError, match="unknown match mode"):
        execution_match(_result([[1]]), _result([[1]]), "fuzzy")


def test_spider_permutation_search_is_bounded():
    # 9 identical columns: 9! permutations would all be tried without the bound
    rows = [tuple([1] * 9), tuple([2] * 9)]
    pred = _result([list(r) for r in rows])
    gold = _result([list(r) for r in reversed(rows)])
    assert execution_match(pred, gold, "spider").match
