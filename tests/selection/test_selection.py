"""Test-time selection: the `selection` params section, and each method scored by verdicts."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from acesql.config import EvaluateSection, SelectionSection, load_params
from acesql.errors import ConfigError
from acesql.eval.session import settings
from acesql.ranker.judge import Context
from acesql.selection.fields import ranked_fields, vote_fields
from acesql.sql.sandbox import ExecResult
from tests.fakes import Judge


def ok(*rows):
    return ExecResult(ok=True, columns=["v"], rows=list(rows))


def verdict(result: ExecResult, right: bool):
    return SimpleNamespace(pred=result, match=SimpleNamespace(match=right))


# gold answer (2,): b and d are right; a and c agree on a wrong answer; one candidate fails
SQLS = ["a", "b", "c", "d", "bad"]
VERDICTS = [
    verdict(ok((1,)), False),
    verdict(ok((2,)), True),
    verdict(ok((1,)), False),
    verdict(ok((2,)), True),
    verdict(ExecResult(ok=False, error="no such column"), False),
]
CONTEXT = Context("?", "t(v)")


def r3(**settings) -> SelectionSection:
    """The r3 selection with five first candidates (SQLS), as the section checks it."""
    return SelectionSection(method="r3", candidates=5, **settings)


def test_maj_takes_the_first_sampled_of_tied_groups_and_recall_sees_any_right_candidate():
    fields = vote_fields(SQLS, VERDICTS, "multiset")
    assert fields["maj_sql"] == "a" and fields["maj_match"] is False
    assert (fields["maj_votes"], fields["maj_valid"], fields["maj_groups"]) == (2, 4, 2)
    assert fields["oracle_match"] is True and fields["candidates"] == 5


def test_ranking_scores_groupwise_pointwise_and_the_spread_inside_groups():
    fields = ranked_fields(CONTEXT, SQLS, VERDICTS, Judge({"b"}), "multiset")
    assert fields["r3_sql"] == "b" and fields["r3_match"] is True
    assert fields["point_sql"] == "b" and fields["point_match"] is True
    assert (fields["r3_groups"], fields["r3_judged_pairs"]) == (2, 1)
    # pointwise spread: {a, c} 0.3 - 0.3 = 0, {b, d} 0.8 - 0.3 = 0.5
    assert fields["r3_point_spread"] == 0.25
    # the one judged pair (a against b) was no tie, so preference put {b, d} first
    assert fields["r3_ties"] == 0 and fields["r3_decided_by"] == "preference"
    assert "r3rs_match" not in fields
    # the pool is kept for scoring another judge or a larger n on the same samples
    assert fields["r3_candidates"] == SQLS
    assert fields["r3_candidates_match"] == [False, True, False, True, False]


def test_resampling_is_scored_by_the_drawn_candidates_verdicts():
    drawn = []

    def resample(m):
        drawn.append(m)
        return ["z", "y"], [verdict(ok((2,)), True), verdict(ok((3,)), False)], None

    # the judge trusts none of the first pool: the auditor fires
    fields = ranked_fields(
        CONTEXT,
        SQLS,
        VERDICTS,
        Judge({"z"}),
        "multiset",
        r3(resample=True, resample_candidates=6, resample_ranked="both"),
        resample,
    )
    # first pass: a tie between {a, c} and {b, d} (utility 0.4 each) goes to the group sampled first
    assert fields["r3_sql"] == "a" and fields["r3_match"] is False
    assert fields["r3_ties"] == 1 and fields["r3_decided_by"] == "order"
    # the 5 kept: z (0.8) then a, b, c, d; {b, d, z} utility 0.5*0.8 + 0.5*3/5 = 0.7 beats 0.35
    assert fields["r3rs_sql"] == "z" and fields["r3rs_match"] is True
    assert fields["r3rs_fired"] is True and fields["r3rs_generated"] == 5 + 2 and drawn == [6]
    assert fields["r3rs_oracle"] is True and fields["r3rs_audit"] == 0.1
    assert fields["r3rs_drawn_oracle"] is True
    assert fields["r3rs_drawn"] == ["z", "y"] and fields["r3rs_drawn_match"] == [True, False]
    assert "r3rs_drawn_schema" not in fields  # drawn on the first pool's schema
    # R3-SQL's pool: the first is discarded, only z and y are ranked
    fields = ranked_fields(
        CONTEXT,
        SQLS,
        VERDICTS,
        Judge({"z"}),
        "multiset",
        r3(resample=True, resample_candidates=6),
        resample,
    )
    assert fields["r3rs_sql"] == "z" and fields["r3rs_oracle"] is True and drawn == [6, 6]
    # a pool the auditor trusts is ranked as it is
    fields = ranked_fields(
        CONTEXT,
        SQLS,
        VERDICTS,
        Judge({"b"}),
        "multiset",
        r3(resample=True, resample_candidates=6),
        resample,
    )
    assert fields["r3rs_fired"] is False and fields["r3rs_generated"] == 5 and drawn == [6, 6]
    assert fields["r3rs_drawn_oracle"] is None
    assert fields["r3rs_match"] is True
    assert fields["r3rs_drawn"] == [] and fields["r3rs_drawn_match"] == []


def test_candidates_drawn_on_a_wider_schema_keep_that_schema():
    wider = Context("?", "t(v, w)")

    def resample(m):
        return ["z"], [verdict(ok((2,)), True)], wider

    fields = ranked_fields(
        CONTEXT,
        SQLS,
        VERDICTS,
        Judge({"z"}),
        "multiset",
        r3(resample=True, resample_candidates=6),
        resample,
    )
    assert fields["r3rs_fired"] is True and fields["r3rs_drawn"] == ["z"]
    assert fields["r3rs_drawn_schema"] == "t(v, w)"


def test_the_section_checks_itself_and_may_be_left_out(tmp_path):
    assert SelectionSection().method == "greedy"
    with pytest.raises(ValueError, match="resample_candidates must exceed candidates"):
        SelectionSection(method="r3", candidates=8, resample=True, resample_candidates=8)
    path = tmp_path / "params.yaml"
    path.write_text("selection:\n  method: best\n")
    with pytest.raises(ConfigError, match="selection.method"):
        load_params(path)
    path.write_text("base:\n  seed: 1\n")
    assert load_params(path).selection == SelectionSection()


def test_the_fingerprint_carries_the_selection_section_whole():
    cfg = EvaluateSection()
    common = dict(seed=0, reasoning=False, sample_values=0)
    greedy = settings(cfg, SelectionSection(), **common)
    assert greedy["candidates"] == 0 and greedy["maj_temperature"] == 1.0
    assert greedy["selection"] == SelectionSection().model_dump(mode="json")
    maj = settings(cfg, SelectionSection(method="maj", candidates=4), **common)
    assert maj["candidates"] == 4 and maj["selection"]["method"] == "maj"
    salvage = settings(EvaluateSection(unclosed_list="salvage"), **common)
    assert salvage == {**greedy, "unclosed_list": "salvage"}
    # every switch of the section that changes what runs changes the fingerprint
    r3 = dict(method="r3", resample=True)
    variants = [
        SelectionSection(**r3),
        SelectionSection(**r3, resample_ranked="both"),
        SelectionSection(**r3, resample_from="pipeline"),
        SelectionSection(**r3, tau=0.1),
        SelectionSection(**r3, answer="full_schema"),
    ]
    named = [settings(cfg, v, **common)["selection"] for v in variants]
    assert named[1]["resample_ranked"] == "both" and named[2]["resample_from"] == "pipeline"
    assert len({json.dumps(n, sort_keys=True) for n in named}) == len(variants)


def test_r3_needs_the_engine_that_gives_next_token_probabilities():
    from acesql.config import GenerationSection
    from acesql.eval.session import Evaluator

    cfg = EvaluateSection(model="nowhere", generation=GenerationSection(engine="vllm"))
    with pytest.raises(ConfigError, match="engine to transformers"):
        Evaluator(cfg, SelectionSection(method="r3"))


def sweep_row(audit, fired, before, after):
    """One question of an r3 + resampling evaluation, as its rows.jsonl keeps it."""
    return {
        "r3rs_audit": audit,
        "r3rs_fired": fired,
        "r3_match": before,
        "r3rs_match": after,
        "oracle_match": before,
        "r3rs_oracle": after,
        "candidates": 8,
        "r3rs_generated": 24 if fired else 8,
    }


def audit_sweep_output(folder, rows):
    """`acesql eval --audit-sweep` on a dev folder holding these rows."""
    import json

    from click.testing import CliRunner

    from acesql.cli import cli

    folder.mkdir()
    (folder / "metrics.json").write_text(json.dumps({"split": "dev"}))
    (folder / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return CliRunner().invoke(cli, ["eval", "audit-sweep", str(folder)])


def test_the_audit_sweep_reads_a_finished_folder_and_stops_where_the_rows_cannot_tell(tmp_path):
    # run at threshold 0.3: two pools fired (one gained), one did not (P 0.33)
    rows = [
        sweep_row(0.12, True, False, True),
        sweep_row(0.27, True, True, True),
        sweep_row(0.33, False, True, True),
    ]
    out = audit_sweep_output(tmp_path / "r3-dev", rows)
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert lines[0] == "dev: 3 questions"
    thresholds = [line.split()[0] for line in lines[2:-1]]
    assert thresholds == ["0.05", "0.10", "0.15", "0.20", "0.25", "0.30"]  # 0.35 > P 0.33
    assert lines[2].split()[1:4] == ["0.0%", "8.0", "66.7%"]
    assert lines[4].split()[1:4] == ["33.3%", "13.3", "100.0%"]  # 0.15 fires on the first
    # one question gained of three: an interval that reaches zero, so no threshold is shown to pay
    assert lines[-1].startswith("no threshold's gain over ranking without resampling")
    assert lines[-1].endswith("its cheapest threshold is 0.05 (66.7%, 8.0 candidates a question)")
    refused = audit_sweep_output(tmp_path / "greedy", [{"pipeline_match": True}])
    assert refused.exit_code == 2 and "no rows ranked with resampling" in refused.output


def test_the_audit_sweep_names_the_threshold_from_which_resampling_pays(tmp_path):
    # below 0.2 the auditor fires on pools that stay wrong; from 0.2 on, on ten that turn right
    rows = (
        [sweep_row(0.12, True, False, False)] * 5
        + [sweep_row(0.22, True, False, True)] * 10
        + [sweep_row(0.45, True, False, False)] * 5
    )
    out = audit_sweep_output(tmp_path / "r3-dev", rows)
    assert out.exit_code == 0, out.output
    assert out.output.splitlines()[-1].startswith(
        "resampling pays here from 0.25 (50.0%, 20.0 candidates a question)"
    )


def test_the_summary_says_how_often_the_rankers_pairwise_calls_decided():
    from acesql.eval.metrics import _selection_scores as scores

    def row(ties, pairs, by):
        return {
            "maj_match": False,
            "r3_match": True,
            "r3_ties": ties,
            "r3_judged_pairs": pairs,
            "r3_decided_by": by,
        }

    rows = [row(3, 3, "utility"), row(0, 1, "preference"), row(0, 0, "one group")]
    summary = scores(rows)
    # 3 ties in 4 judged pairs; preference settled 1 of the 2 questions with several groups
    assert summary["r3_tie_rate"] == 0.75 and summary["r3_by_preference"] == 0.5
    assert "r3_tie_rate" not in scores([row(0, 0, "one group")])


def test_the_selections_table_ends_with_what_put_r3s_answer_first():
    from acesql.eval.selection_report import selection_report

    base = {"candidates": 4, "maj_match": True, "r3_match": True, "oracle_match": True}
    rows = [
        dict(base, r3_ties=2, r3_judged_pairs=3, r3_decided_by="preference"),
        dict(base, r3_ties=1, r3_judged_pairs=1, r3_decided_by="utility"),
        dict(base, r3_ties=0, r3_judged_pairs=0, r3_decided_by="one group"),
        dict(base),  # written before the fields existed
    ]
    last = selection_report({"dev": rows}).splitlines()[-1]
    assert last == (
        "r3's top group, 2 questions with several groups: by preference 1, by utility 1, "
        "by sampling order 0; 3 of 4 judged pairs were ties"
    )
    assert "r3's top group" not in selection_report({"dev": [dict(base)]})


def test_the_selections_table_pairs_recall_before_and_after_resampling():
    from acesql.eval.selection_report import selection_report

    base = {"candidates": 8, "maj_match": False, "r3rs_match": False, "r3rs_fired": True}
    rows = [
        dict(base, oracle_match=False, r3rs_oracle=True, r3rs_drawn_oracle=True, r3rs_generated=24),
        dict(
            base, oracle_match=True, r3rs_oracle=False, r3rs_drawn_oracle=False, r3rs_generated=24
        ),
        dict(base, oracle_match=False, r3rs_oracle=True, r3rs_drawn_oracle=True, r3rs_generated=24),
        dict(base, oracle_match=True, r3rs_oracle=True, r3rs_fired=False, r3rs_generated=8),
    ]
    text = selection_report({"dev": rows})
    line = next(x for x in text.splitlines() if x.startswith("recall"))
    assert line.startswith(
        "recall, 4 questions: first pool 50.0%, ranked after resampling 75.0%: +25.0 ["
    )
    assert line.endswith(
        "(lost 1, gained 2, p 1); resampling fired on 3, its new candidates alone held a right "
        "one on 2; 20.0 candidates generated per question"
    )
    older = dict(base, oracle_match=False, r3rs_oracle=False, r3rs_generated=24)  # no drawn field
    line = selection_report({"dev": [*rows, older]}).splitlines()[-1]
    assert (
        "resampling fired on 4, its new candidates alone held a right one on 2 of the 3 that"
        " record it;"
    ) in line


def test_every_field_a_selection_writes_is_known_to_rescoring():
    from acesql.selection.fields import is_selection_field, prm_fields

    def resample(m):
        return ["z"], [verdict(ok((2,)), True)], Context("?", "t(v, w)")

    fields = vote_fields(SQLS, VERDICTS, "multiset")
    fields |= ranked_fields(CONTEXT, SQLS, VERDICTS, Judge({"z"}), "multiset", None, resample)
    fields |= prm_fields(SQLS, VERDICTS, [0.1, 0.9, 0.2, 0.8, None], "multiset")
    # a field outside the rule would be kept from the stored row when rescoring, stale
    assert [key for key in fields if not is_selection_field(key)] == []
    assert {"r3rs_drawn_schema", "prm_vote_match", "oracle_match"} <= set(fields)
