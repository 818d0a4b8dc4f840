"""The one selector: each method's choice among one question's candidates, worked by hand."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import acesql.selection.selector as selector_module
from acesql.config import SelectionSection
from acesql.errors import ConfigError, DataError
from acesql.ranker.judge import Context
from acesql.selection.selector import METHODS, Asked, Selector
from acesql.sql.sandbox import ExecResult
from tests.fakes import Judge


def ok(*rows):
    return ExecResult(ok=True, columns=["v"], rows=list(rows))


BAD = ExecResult(ok=False, error="no such column")
ASKED = Asked(Context("How many?", "t(v)"), "db.sqlite")
# a and d agree on 1, b and c on 2; e fails: two groups of two, the first sampled first
SQLS = ["a", "b", "c", "d", "e"]
RESULTS = [ok((1,)), ok((2,)), ok((2,)), ok((1,)), BAD]


def verdicts(right: set[str]):
    return [
        SimpleNamespace(pred=r, match=SimpleNamespace(match=s in right))
        for s, r in zip(SQLS, RESULTS)
    ]


def test_every_method_of_the_section_has_a_way_to_choose():
    assert METHODS == ("greedy", "maj", "r3", "prm")
    for method in METHODS:
        assert Selector(SelectionSection(method=method)).method == method


def test_an_unknown_method_fails_loudly_naming_the_known_ones():
    section = SelectionSection.model_construct(method="best")
    with pytest.raises(ConfigError, match=r"unknown selection method 'best': greedy \| maj \| r3"):
        Selector(section)


def test_greedy_keeps_the_first_candidate_and_samples_nothing():
    selector = Selector(SelectionSection(method="greedy", candidates=4))
    # b and c outvote a, but greedy keeps candidate 0
    assert selector.choose(ASKED, ["a", "b", "c"], [ok((1,)), ok((2,)), ok((2,))]).index == 0
    assert selector.choose(ASKED, ["", "b"], [BAD, ok((2,))]).index is None  # no SQL
    assert (selector.samples, selector.among_candidates, selector.judged) == (0, False, False)
    assert selector.fields(ASKED, SQLS, verdicts(set())) == {}


def test_maj_picks_the_largest_group_of_equal_results():
    selector = Selector(SelectionSection(method="maj", candidates=4))
    sqls = ["a", "b", "c", "d"]
    chosen = selector.choose(ASKED, sqls, [ok((1,)), ok((2,)), ok((2,)), BAD])
    assert chosen.index == 1  # {b, c} outvotes {a}; d failed and never votes
    assert chosen.groups == [{"members": [0], "size": 1}, {"members": [1, 2], "size": 2}]
    # a tie of two groups of two goes to the group sampled first
    assert selector.choose(ASKED, SQLS, RESULTS).index == 0
    assert selector.samples == 4 and not selector.judged
    assert selector.fields(ASKED, SQLS, verdicts({"b"})) == {}  # maj@n's fields are written apart


def test_r3_ranks_the_groups_with_its_judge():
    selector = Selector(SelectionSection(method="r3", candidates=5), judge=Judge({"b"}))
    chosen = selector.choose(ASKED, SQLS, RESULTS)
    assert chosen.index == 1 and not chosen.resampled  # the judge prefers b's group
    assert [g["members"] for g in chosen.groups] == [[1, 2], [0, 3]]
    fields = selector.fields(ASKED, SQLS, verdicts({"b", "c"}))
    assert fields["r3_sql"] == "b" and fields["r3_match"] is True and fields["r3_groups"] == 2
    assert "r3rs_match" not in fields and selector.answer_method == "r3"


def test_r3_answers_a_pool_of_one_result_without_judging():
    selector = Selector(SelectionSection(method="r3", candidates=3))  # no engine, no judge
    steps = []
    chosen = selector.choose(ASKED, ["a", "b", "c"], [ok((1,))] * 3, say=steps.append)
    assert chosen.index == 0 and chosen.groups == [{"members": [0, 1, 2], "size": 3}]
    assert steps == []  # nothing ranked
    with pytest.raises(ConfigError, match="needs the engine"):
        selector.choose(ASKED, SQLS, RESULTS)  # two results: ranking needs a judge


def test_the_judge_is_built_once_and_kept_across_questions(monkeypatch):
    built = []

    class Letters(Judge):
        def __init__(self, model, tokenizer):
            super().__init__({"c"})
            built.append((model, tokenizer))

    monkeypatch.setattr(selector_module, "LetterJudge", Letters)
    engine = SimpleNamespace(model="torch model", tokenizer="tokenizer")
    selector = Selector(SelectionSection(method="r3", candidates=5), engine=engine)
    assert built == []  # built on first use only
    first = selector.fields(ASKED, SQLS, verdicts({"c"}))
    other = Asked(Context("Which one?", "t(v)"), "db.sqlite")
    second = selector.fields(other, SQLS, verdicts(set()))
    assert built == [("torch model", "tokenizer")]
    assert first["r3_sql"] == second["r3_sql"] == "c"  # {b, c}: c is the member it trusts
    assert first["r3_match"] is True and second["r3_match"] is False


def test_r3_with_resampling_draws_when_the_auditor_doubts_the_pool():
    section = SelectionSection(method="r3", candidates=5, resample=True, resample_candidates=6)
    selector = Selector(section, judge=Judge({"z"}))
    assert selector.resamples and selector.answer_method == "r3rs"
    drawn = []

    def resample(m):
        drawn.append(m)
        return SimpleNamespace(sqls=["z", "y"], results=[ok((3,)), ok((4,))], context=None)

    chosen = selector.choose(ASKED, SQLS, RESULTS, resample=resample)
    # R3-SQL's pool: the first five are discarded, the two new ranked; z (index 5) wins
    assert drawn == [6] and chosen.resampled and chosen.index == 5
    assert [g["members"] for g in chosen.groups] == [[5], [6]]


class Rewards:
    """A process scorer that gives each SQL text its reward from `by_sql`."""

    view = "direct"

    def __init__(self, by_sql: dict):
        self.by_sql, self.seen = by_sql, []

    def rewards(self, question, schema_text, evidence, db_path, completions, *, schema):
        self.seen.append((question, schema_text, evidence, db_path))
        return [self.by_sql.get(c.text) for c in completions]

    def require_format(self, sql_format):
        if sql_format != self.view:
            raise ConfigError(f"set prompt.sql_format to {self.view}")


def test_prm_keeps_the_candidate_with_the_highest_process_reward():
    scorer = Rewards({"a": 0.2, "c": 0.9, "d": 0.9})
    selector = Selector(SelectionSection(method="prm", candidates=5), process_scorer=scorer)
    chosen = selector.choose(ASKED, SQLS, RESULTS)
    assert chosen.index == 2  # c and d tie at 0.9: the first
    assert [g["members"] for g in chosen.groups] == [[2], [3], [0], [1], [4]]
    assert chosen.groups[-1]["process_reward"] is None
    assert scorer.seen == [("How many?", "t(v)", "", "db.sqlite")]
    fields = selector.fields(ASKED, SQLS, verdicts({"c"}))  # stored SQL: no completions
    assert fields["prm_sql"] == "c" and fields["prm_match"] is True and fields["prm_scored"] == 3
    selector.check_format("direct")
    with pytest.raises(ConfigError, match="sql_format to direct"):
        selector.check_format("cocte")


def test_each_method_says_what_it_needs():
    prm = SelectionSection(method="prm")
    with pytest.raises(ConfigError, match="needs the process scorer"):
        Selector(prm).check_format("direct")
    with pytest.raises(ConfigError, match="direct view"):
        Selector(prm, process_scorer=SimpleNamespace(view="cocte")).check_stored()
    assert Selector(prm).needs_score_model and not Selector(SelectionSection()).needs_score_model
    with pytest.raises(ConfigError, match="engine to transformers"):
        Selector(SelectionSection(method="r3")).check_engine("vllm")
    Selector(SelectionSection(method="maj")).check_engine("vllm")
    Selector(SelectionSection(method="maj")).check_format("cocte")  # reads no score model
    Selector(SelectionSection(method="maj")).check_stored()


@pytest.mark.parametrize("field", ["r3_candidates", "r3_pool"])
def test_a_rescoring_may_not_overwrite_stored_candidates(tmp_path, field):
    source, out = tmp_path / "source", tmp_path / "out"
    source.mkdir()
    out.mkdir()
    (out / "rows.jsonl").write_text(f'{{"index": 0, "{field}": ["SELECT 1"]}}\n')
    with pytest.raises(DataError, match="is the folder whose candidates are rescored"):
        Selector(SelectionSection(method="r3")).check_rescoring_into(source, source)
    with pytest.raises(DataError, match="that a maj rescoring would drop"):
        Selector(SelectionSection(method="maj")).check_rescoring_into(out, source)
    Selector(SelectionSection(method="r3")).check_rescoring_into(out, source)  # r3 keeps them
    (out / "rows.jsonl").write_text('{"index": 0}\n')
    Selector(SelectionSection(method="maj")).check_rescoring_into(out, source)  # none to lose
