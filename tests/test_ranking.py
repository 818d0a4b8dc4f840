"""Groupwise ranking: the order from judgments, the judge's letters, the selection."""

from __future__ import annotations

import pytest

from acesql.ranking.judge import Candidate, Context, LetterJudge
from acesql.ranking.rank import rank_groups
from acesql.ranking.select import select_groupwise
from acesql.sql.sandbox import ExecResult


def ok(*rows):
    return ExecResult(ok=True, columns=["v"], rows=list(rows))


def test_preference_orders_groups_ties_split_and_utility_breaks_ties():
    groups = [[0], [1, 2, 3], [4]]
    prefer = {(0, 1): 0.3, (0, 4): 0.51, (1, 4): 0.9}
    point = {0: 0.9, 1: 0.2, 2: 0.7, 3: 0.1, 4: 0.4}
    ranked = rank_groups(groups, lambda a, b: prefer[(a, b)], point.get, tau=0.05)
    assert [g.members for g in ranked] == [[1, 2, 3], [0], [4]]
    assert [g.preference for g in ranked] == [2.0, 0.5, 0.5]
    assert ranked[0].best == 2  # the best pointwise member, not the representative
    assert ranked[1].utility == pytest.approx(0.5 * 0.9 + 0.5 * 1 / 5)
    # with tau 0 the near-even pair is a decision: 0 beats 4
    ranked = rank_groups(groups, lambda a, b: prefer[(a, b)], point.get, tau=0.0)
    assert [g.preference for g in ranked] == [2.0, 1.0, 0.0]
    assert rank_groups([], lambda a, b: 0.5, point.get) == []


class RecordingJudge:
    def __init__(self, right: set[str]):
        self.right, self.pairs = right, []

    def pairwise_many(self, context, pairs):
        self.pairs += [(a.sql, b.sql) for a, b in pairs]
        return [
            0.9 if a.sql in self.right else 0.1 if b.sql in self.right else 0.5 for a, b in pairs
        ]

    def pointwise_many(self, context, candidates):
        return [0.8 if c.sql in self.right else 0.3 for c in candidates]


def test_selection_compares_groups_only_and_answers_with_the_top_group():
    sqls = ["q1", "q2", "q3", "q4", "q5", "bad"]
    results = [ok((1,)), ok((2,)), ok((1,)), ok(), ok((2,)), ExecResult(ok=False, error="x")]
    judge = RecordingJudge(right={"q2"})
    choice = select_groupwise(Context("?", "schema"), sqls, results, judge)
    assert choice.sql == "q2" and choice.index == 1
    assert [g.members for g in choice.ranked][0] == [1, 4]
    # 3 groups (rows 1, rows 2, empty): 3 pairs of representatives, never two of one group
    assert choice.judged_pairs == 3 and sorted(judge.pairs) == [
        ("q1", "q2"),
        ("q1", "q4"),
        ("q2", "q4"),
    ]
    assert [g.members for g in choice.ranked] == [[1, 4], [0, 2], [3]]
    assert choice.empty == [False, False, True]
    nothing = select_groupwise(Context("?", "s"), ["bad"], [results[-1]], judge)
    assert nothing.sql is None and nothing.ranked == []


def test_the_letter_judge_is_symmetric_bounded_and_cached(tiny_model_dir):
    from acesql.models.base_model import load_model, load_tokenizer

    judge = LetterJudge(load_model(tiny_model_dir), load_tokenizer(tiny_model_dir), batch_size=2)
    context = Context("How many students?", "student(id, name)")
    a = Candidate("SELECT COUNT(*) FROM student", ok((3,)))
    b = Candidate("SELECT COUNT(name) FROM student", ok((2,)))
    ab, ba = judge.pairwise(context, a, b), judge.pairwise(context, b, a)
    assert 0 < ab < 1 and ab + ba == pytest.approx(1.0)  # both orders averaged
    point = judge.pointwise(context, a)
    assert 0 < point < 1
    calls = judge.calls
    assert judge.pairwise_many(context, [(a, b), (b, a)]) == [ab, ba]
    assert judge.pointwise(context, a) == point and judge.calls == calls  # from the cache
