"""The product's answer among the pipeline's and the full schema's (`acesql.selection.answer`):
each policy on hand-made rows, and the choice among them on a dev split."""

import pytest

from acesql.selection.answer import POLICIES, answer_fields, chosen_policy, policy_table


def row(pipe: bool, full: bool, *, pipe_ran=True, full_ran=True, tokens=100) -> dict:
    return {
        "usable": True,
        "pred_sql": "SELECT p",
        "pipeline_match": pipe,
        "pipeline_ran": pipe_ran,
        "full_sql": "SELECT f",
        "full_match": full,
        "full_ran": full_ran,
        "full_tokens": tokens,
    }


# (row, policy, threshold, expected side)
CASES = [
    (row(True, False), "pipeline", 0, "pipeline"),
    (row(True, False), "full_schema", 0, "full_schema"),
    (row(False, True, pipe_ran=False), "pipeline_else_full", 0, "full_schema"),
    (row(False, True), "pipeline_else_full", 0, "pipeline"),
    # neither ran: the rule keeps its first side
    (row(False, False, pipe_ran=False, full_ran=False), "pipeline_else_full", 0, "pipeline"),
    (row(True, False, full_ran=False), "full_else_pipeline", 0, "pipeline"),
    (row(True, False, tokens=900), "by_size", 900, "full_schema"),
    (row(True, False, tokens=901), "by_size", 900, "pipeline"),
]


@pytest.mark.parametrize("case, policy, tokens, side", CASES)
def test_each_policy_picks_its_side(case, policy, tokens, side):
    fields = answer_fields(case, policy, tokens)
    assert fields["answer_from"] == side
    expected = case["pipeline_match"] if side == "pipeline" else case["full_match"]
    assert fields["answer_match"] is expected
    assert fields["answer_sql"] == ("SELECT p" if side == "pipeline" else "SELECT f")


def test_the_pipeline_side_is_the_selections_answer():
    r = {**row(False, False), "maj_sql": "SELECT m", "maj_match": True}
    fields = answer_fields(r, "pipeline_else_full", 0, "maj")
    assert fields == {"answer_from": "pipeline", "answer_sql": "SELECT m", "answer_match": True}


def test_a_row_without_a_full_schema_answer_gets_none():
    assert answer_fields({"pipeline_match": True}, "full_schema", 0) == {}
    with pytest.raises(ValueError, match="unknown answer policy"):
        answer_fields(row(True, True), "best", 0)


def test_the_table_pairs_each_policy_with_the_pipeline_and_names_the_best():
    # small schemas (100 tokens): the full schema is right; wide ones (2000): the pipeline
    rows = [row(False, True, tokens=100)] * 6 + [row(True, False, tokens=2000)] * 4
    table = policy_table(rows)
    by = {(t["policy"], t["full_schema_tokens"]): t for t in table}
    assert by[("pipeline", None)]["ex"] == 0.4 and by[("full_schema", None)]["ex"] == 0.6
    assert by[("by_size", 100)]["ex"] == 1.0 and by[("by_size", 2000)]["ex"] == 0.6
    assert by[("by_size", 100)]["gain"] == pytest.approx(0.6)
    assert by[("by_size", 100)]["low"] > 0 and by[("full_schema", None)]["p"] < 1
    best = chosen_policy(table)
    assert (best["policy"], best["full_schema_tokens"]) == ("by_size", 100)
    assert {t["policy"] for t in table} == set(POLICIES)


def test_eval_answers_reads_a_dev_run_and_names_the_policy(tmp_path):
    import json

    from click.testing import CliRunner

    from acesql.cli import cli

    rows = [{**row(False, True, tokens=100), "index": i} for i in range(6)]
    rows += [{**row(True, False, tokens=2000), "index": 6 + i} for i in range(4)]
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = CliRunner().invoke(cli, ["eval", "answers", str(tmp_path / "dev")])
    assert result.exit_code == 0, result.output
    assert "rows: 10 questions" in result.output
    assert "ship: answer by_size with full_schema_tokens 100 (100.0%)" in result.output
    # the flag form of a verb still works, and says what it is called now
    legacy = CliRunner().invoke(cli, ["eval", "--selections", str(tmp_path / "dev")])
    assert "is now `acesql eval selections RUN`" in legacy.output
    assert legacy.exit_code == 2 and "holds no rows with candidates" in legacy.output
    (tmp_path / "old").mkdir()  # rows written before full-schema answers existed
    (tmp_path / "old" / "rows.jsonl").write_text(json.dumps({"usable": True}) + "\n")
    result = CliRunner().invoke(cli, ["eval", "answers", str(tmp_path / "old")])
    assert result.exit_code == 2 and "no rows with a full-schema answer" in result.output


def test_compare_pairs_one_answer_of_a_with_another_of_b(tmp_path):
    """The base model's full schema (A) against a trained model's full_else_pipeline (B), on
    numbers worked out by hand: A right on 6 of 10; B right on 8 (its full schema on 0-3,
    its pipeline on 6-9 where the full schema's SQL did not run); A alone on 4 and 5, B alone
    on 6 to 9: +20.0 points, exact McNemar p = 2 * P(X <= 2 | 6, 1/2) = 0.6875."""
    import json

    from click.testing import CliRunner

    from acesql.cli import cli

    def write(name, rows):
        (tmp_path / name / "dev").mkdir(parents=True)
        lines = (json.dumps({**r, "index": i, "db_id": "d"}) + "\n" for i, r in enumerate(rows))
        (tmp_path / name / "dev" / "rows.jsonl").write_text("".join(lines))
        (tmp_path / name / "dev" / "metrics.json").write_text(json.dumps({"usable": len(rows)}))

    write("a", [row(False, i < 6) for i in range(10)])
    write(
        "b",
        [row(False, True)] * 4 + [row(False, False)] * 2 + [row(True, False, full_ran=False)] * 4,
    )
    args = ["eval", "compare", str(tmp_path / "a"), str(tmp_path / "b")]
    result = CliRunner().invoke(
        cli, [*args, "--answer-a", "full_schema", "--answer-b", "full_else_pipeline"]
    )
    assert result.exit_code == 0, result.output
    assert "dev: B's full_else_pipeline against A's full_schema, on 10 questions" in result.output
    last = result.output.strip().splitlines()[-1].split()
    assert last[:3] == ["60.0%", "80.0%", "+20.0"] and last[-3:] == ["2", "4", "0.688"]
    # one answer named pairs the same answer on both sides; an unknown one is refused
    same = CliRunner().invoke(cli, [*args, "--answer-b", "pipeline"])
    assert "B's pipeline against A's pipeline, on 10 questions" in same.output
    bad = CliRunner().invoke(cli, [*args, "--answer-a", "full"])
    assert bad.exit_code != 0 and "unknown answer 'full'" in bad.output
