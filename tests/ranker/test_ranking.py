"""Groupwise ranking: the order from judgments, the judge's letters, the selection."""

from __future__ import annotations

import pytest

from acesql.ranker.judge import Candidate, Context, LetterJudge
from acesql.ranker.rank import rank_groups
from acesql.ranker.select import select_groupwise
from acesql.sql.sandbox import ExecResult
from tests.fakes import AskEngine, ChatTokenizer, Judge, WordTokenizer


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


def test_selection_compares_groups_only_and_answers_with_the_top_group():
    sqls = ["q1", "q2", "q3", "q4", "q5", "bad"]
    results = [ok((1,)), ok((2,)), ok((1,)), ok(), ok((2,)), ExecResult(ok=False, error="x")]
    judge = Judge(right={"q2"})
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


def test_the_letter_judge_reads_the_next_tokens_odds_and_runs_each_prompt_once(tiny_model_dir):
    import torch

    from acesql.models.base_model import load_model, load_tokenizer
    from acesql.ranker.judge import letter_id, pair_prompt, point_prompt

    model, tokenizer = load_model(tiny_model_dir).eval(), load_tokenizer(tiny_model_dir)
    forwards = []
    model.register_forward_hook(lambda *_: forwards.append(1))
    judge = LetterJudge(model, tokenizer, batch_size=2)
    context = Context("How many students?", "student(id, name)")
    a = Candidate("SELECT COUNT(*) FROM student", ok((3,)))
    b = Candidate("SELECT COUNT(name) FROM student", ok((2,)))

    def odds(prompt: str, first: str, second: str) -> float:
        """P(first) / (P(first) + P(second)) at the next token, the prompt run alone."""
        with torch.no_grad():
            ids = tokenizer(prompt, return_tensors="pt", add_special_tokens=False)
            logits = model(**ids).logits[0, -1]
        gap = logits[letter_id(tokenizer, first)] - logits[letter_id(tokenizer, second)]
        return float(torch.sigmoid(gap))

    a_first = odds(pair_prompt(tokenizer, context, a, b), "A", "B")
    b_first = odds(pair_prompt(tokenizer, context, b, a), "A", "B")
    yes = odds(point_prompt(tokenizer, context, a), "Yes", "No")
    assert abs(a_first - (1 - b_first)) > 1e-3  # the orders differ: averaging them shows
    forwards.clear()
    # P(a is right): "A" when a comes first, "B" when it comes second, averaged
    ab = judge.pairwise(context, a, b)
    assert ab == pytest.approx(0.5 * (a_first + 1 - b_first), abs=1e-5)
    point = judge.pointwise(context, a)
    assert point == pytest.approx(yes, abs=1e-5)
    ran, scored = len(forwards), judge.calls
    assert ran > 0 and scored == 3  # a pair is two prompts
    assert judge.pairwise_many(context, [(a, b)]) == [ab] and judge.pointwise(context, a) == point
    assert (len(forwards), judge.calls) == (ran, scored)  # from the cache: the model never ran
    # the same question over another schema is another judgment
    judge.pointwise(Context(context.question, "student(id)"), a)
    assert len(forwards) > ran and judge.calls == scored + 1


def test_judgments_sharing_a_prefix_read_what_each_prompt_reads_alone(tiny_model_dir):
    import torch

    from acesql.models.base_model import load_model, load_tokenizer
    from acesql.ranker.judge import next_token_logprobs, point_prompt

    model, tokenizer = load_model(tiny_model_dir).eval(), load_tokenizer(tiny_model_dir)
    context = Context("Which students are older than 20?", "student(id, name, age)\n" * 8)
    sqls = ["SELECT name FROM student WHERE age > 20", "SELECT 1", "SELECT name FROM student"]
    prompts = [point_prompt(tokenizer, context, Candidate(s, ok((1,)))) for s in sqls]
    prompts.append("an unrelated prompt: nothing in common")  # the batch shares no prefix
    with torch.no_grad():
        alone = torch.cat(
            [
                torch.log_softmax(
                    model(**tokenizer(p, return_tensors="pt", add_special_tokens=False)).logits[
                        :, -1
                    ],
                    -1,
                )
                for p in prompts
            ]
        )
    for batch in prompts[:3], prompts:  # a shared prefix, then none worth sharing
        for size in (1, 2, 8):  # rows of unequal length, padded in one batch or several
            together = next_token_logprobs(model, tokenizer, batch, batch_size=size)
            assert together.shape == (len(batch), alone.shape[1])
            assert torch.allclose(together, alone[: len(batch)], atol=1e-4)


def test_ask_selects_by_majority_and_greedy(school_db):
    from acesql.config import SelectionSection
    from acesql.models.prompts import PromptBuilder
    from acesql.selection.ask import ask

    prompts = PromptBuilder(ChatTokenizer())
    engine = AskEngine(
        "SELECT COUNT(*) FROM course",
        ["SELECT COUNT(*) FROM student", "SELECT COUNT(StudentID) FROM student", "SELECT nope"],
    )
    question = "How many students are there?"
    greedy = ask(
        engine, prompts, school_db, question, SelectionSection(candidates=4, answer="pipeline")
    )
    assert greedy.sql == "SELECT COUNT(*) FROM course" and greedy.columns == ["student.name"]
    voted = ask(
        engine,
        prompts,
        school_db,
        question,
        SelectionSection(method="maj", candidates=4, answer="pipeline"),
    )
    assert voted.sql == "SELECT COUNT(*) FROM student" and voted.result.rows == [(60,)]
    assert [g["size"] for g in voted.groups] == [1, 2]  # the failed candidate is in no group


def test_ask_keeps_the_candidate_its_process_scorer_rewards_most(school_db):
    from acesql.config import SelectionSection
    from acesql.errors import ConfigError
    from acesql.models.prompts import PromptBuilder
    from acesql.prm.select import ProcessScorer
    from acesql.selection.ask import ask
    from acesql.sql.batch_executor import BatchExecutor

    class ByRows:
        """R_phi stand-in, trained on plain SQL: the larger a final result, the higher."""

        view = "direct"

        def score(self, records):
            return [0.9 if r["final"] and "60" in r["final"]["result"] else 0.1 for r in records]

    engine = AskEngine(
        "SELECT COUNT(*) FROM course",
        ["SELECT COUNT(*) FROM student WHERE age > 100", "SELECT COUNT(*) FROM student"],
    )
    selection = SelectionSection(method="prm", candidates=3, answer="pipeline")
    question = "How many students are there?"
    with BatchExecutor(workers=0) as executor:
        scorer = ProcessScorer(ByRows(), None, executor)
        answer = ask(
            engine,
            PromptBuilder(ChatTokenizer()),
            school_db,
            question,
            selection,
            process_scorer=scorer,
        )
        assert answer.sql == "SELECT COUNT(*) FROM student" and answer.result.rows == [(60,)]
        assert answer.groups[0] == {"members": [2], "process_reward": 0.5}  # (0.1 + 0.9) / 2
        with pytest.raises(ConfigError, match="prompt.sql_format to direct"):
            cocte = PromptBuilder(ChatTokenizer(), sql_format="cocte")
            ask(engine, cocte, school_db, question, selection, process_scorer=scorer)


def test_ask_command_is_read_only_and_says_what_is_wrong(school_db, tiny_model_dir, tmp_path):
    import hashlib
    import sqlite3
    import subprocess
    import sys

    def run(*args):
        argv = [sys.executable, "-m", "acesql.cli", "ask", "--model", str(tiny_model_dir), *args]
        return subprocess.run(argv, capture_output=True, text=True, timeout=120)

    before = hashlib.sha256(school_db.read_bytes()).hexdigest()
    result = run(
        "--db",
        str(school_db),
        "--candidates",
        "3",
        "--max-new-tokens",
        "8",
        "--resample",
        "--resample-from",
        "pipeline",
        "--resample-candidates",
        "4",
        "--audit-threshold",
        "0.999",  # a random model's auditor is never that sure: resampling runs
        "--explain",
        "How many?",
    )
    assert result.returncode in (0, 1), result.stderr[-2000:]
    assert "candidate 0" in result.stdout  # --explain lists what was generated
    assert "more candidates were drawn" in result.stdout and "candidate 6" in result.stdout
    assert hashlib.sha256(school_db.read_bytes()).hexdigest() == before
    missing = run("--db", str(tmp_path / "nope.sqlite"), "x")
    assert missing.returncode == 2 and "no such database file" in missing.stderr
    text = tmp_path / "notes.sqlite"
    text.write_text("not a database at all")
    assert "is not a SQLite database" in run("--db", str(text), "x").stderr
    empty = tmp_path / "empty.sqlite"
    sqlite3.connect(empty).execute("PRAGMA user_version = 1").connection.close()
    assert "has no tables" in run("--db", str(empty), "x").stderr


def test_resampling_fires_only_when_the_auditor_finds_nothing_right():
    from acesql.ranker.select import Drawn, select_with_resampling

    context = Context("?", "schema")
    drawn = []

    def resample(m):
        drawn.append(m)
        return Drawn(["r1", "r2", "good", "r3"][:m], [ok((7,)), ok((8,)), ok((5,)), ok((9,))][:m])

    judge = Judge(right={"good"})
    sqls, results = ["a", "b"], [ok((1,)), ok((2,))]
    out = select_with_resampling(context, sqls, results, judge, resample, m=4)
    assert out.fired and out.generated == 6 and drawn == [4]
    assert out.choice.sql == "good" and out.choice.index == 4  # old 0-1, new 2-5
    assert judge.audits[0] == [["a"], ["b"]]
    judge = Judge(right={"b"})
    out = select_with_resampling(context, sqls, results, judge, resample, m=4)
    assert not out.fired and out.generated == 2 and drawn == [4]
    assert out.choice.sql == "b"


def test_the_resampled_pool_is_the_new_candidates_or_all_and_judged_in_their_schema():
    from acesql.ranker.select import Drawn, select_with_resampling

    class Schemas(Judge):
        def audit(self, context, groups):
            return 0.0  # always fires

        def pointwise_many(self, context, candidates):
            self.schemas = getattr(self, "schemas", []) + [context.schema]
            return super().pointwise_many(context, candidates)

    wide = Context("?", "wider schema")
    sqls, results = ["good", "b"], [ok((1,)), ok((2,))]  # the first pool holds the right one

    def resample(m):
        return Drawn(["n1", "n2", "n3"], [ok((3,)), ok((4,)), ok((3,))], wide)

    new = select_with_resampling(Context("?", "s"), sqls, results, Schemas({"good"}), resample, 3)
    assert new.kept == [2, 3] and new.choice.sql == "n1"  # R3-SQL discards the first pool
    judge = Schemas({"good"})
    both = select_with_resampling(
        Context("?", "s"), sqls, results, judge, resample, 3, ranked="both"
    )
    assert 0 in both.kept and both.choice.sql == "good" and both.choice.index == 0
    assert set(judge.schemas) == {"wider schema"}
    with pytest.raises(ValueError, match="unknown resample_ranked"):
        select_with_resampling(Context("?", "s"), sqls, results, judge, resample, 3, ranked="old")


def test_the_auditor_reads_the_pool_with_its_sanity_notes(tiny_model_dir):
    from acesql.models.base_model import load_model, load_tokenizer

    judge = LetterJudge(load_model(tiny_model_dir), load_tokenizer(tiny_model_dir))
    empty = ExecResult(ok=True, columns=["v"], rows=[])
    nulls = ExecResult(ok=True, columns=["v"], rows=[(None,), (None,)])
    groups = [[Candidate("SELECT 1", empty)], [Candidate("SELECT 2", nulls)]]
    seen = []
    judge._first_letter = lambda prompts, letters: seen.extend(prompts) or [0.25]
    assert judge.audit(Context("?", "t(v)"), groups) == 0.25
    assert "returned no rows" in seen[0] and "only NULL in v" in seen[0]


def test_ask_ships_the_answer_its_policy_names(school_db):
    from acesql.config import SelectionSection
    from acesql.models.prompts import PromptBuilder
    from acesql.selection.ask import ask

    class SchemaEngine(AskEngine):
        """Greedy: a query that fails on the pruned schema's guess, right on the whole one."""

        def generate(self, prompts, n=1, temperature=1.0, **options):
            from acesql.models.engine import Completion

            (prompt,) = prompts
            if (
                "course" in prompt
                and "list the columns" not in prompt
                and "Which columns" not in prompt
            ):
                return [[Completion("```sql\nSELECT COUNT(*) FROM student\n```")]]
            return super().generate(prompts, n, temperature, **options)

    prompts = PromptBuilder(WordTokenizer())
    engine = SchemaEngine("SELECT nope FROM student", [])
    question = "How many students are there?"
    pipeline = ask(engine, prompts, school_db, question, SelectionSection(answer="pipeline"))
    assert pipeline.sql == "SELECT nope FROM student" and pipeline.full_result is None
    # the default is the rule chosen on dev: the full schema's answer where it runs
    default = ask(engine, prompts, school_db, question, SelectionSection())
    assert default.answer_from == "full_schema" and default.result.rows == [(60,)]
    fallback = SelectionSection(answer="pipeline_else_full")
    shipped = ask(engine, prompts, school_db, question, fallback)
    assert shipped.answer_from == "full_schema" and shipped.result.rows == [(60,)]
    assert shipped.full_sql == "SELECT COUNT(*) FROM student"
    small = SelectionSection(answer="by_size", full_schema_tokens=1)  # every prompt is longer
    assert ask(engine, prompts, school_db, question, small).answer_from == "pipeline"


def test_ask_skips_ranking_when_the_candidates_agree_and_says_each_step(school_db):
    from acesql.config import SelectionSection
    from acesql.models.prompts import PromptBuilder
    from acesql.selection.ask import ask

    # AskEngine has no torch model: ranking would fail; one result leaves nothing to rank
    same = "SELECT COUNT(*) FROM student"
    engine = AskEngine(same, [same, "SELECT count(*) FROM student", same])
    steps = []
    answer = ask(
        engine,
        PromptBuilder(ChatTokenizer()),
        school_db,
        "How many students?",
        SelectionSection(method="r3", candidates=4, answer="pipeline"),
        say=steps.append,
    )
    assert answer.sql == same and answer.result.rows == [(60,)]
    assert answer.agreement == (4, 4) and answer.notes == []
    assert [g["size"] for g in answer.groups] == [4]
    assert steps == ["retrieving columns", "writing candidates", "running them"]


def test_ask_says_when_it_is_unsure(school_db):
    from acesql.config import SelectionSection
    from acesql.models.prompts import PromptBuilder
    from acesql.selection.ask import ask

    class Nowhere(AskEngine):  # the retriever names a column the database does not have
        def generate(self, prompts, n=1, temperature=1.0, **options):
            from acesql.models.engine import Completion

            if "list the columns" in prompts[0] or "Which columns" in prompts[0]:
                return [[Completion("```\n[pet.name]\n```")]]
            return super().generate(prompts, n, temperature, **options)

    prompts = PromptBuilder(ChatTokenizer())
    engine = Nowhere(
        "SELECT name FROM student WHERE 0",
        ["SELECT name FROM student WHERE 0", "SELECT COUNT(*) FROM student", "SELECT nope"],
    )
    answer = ask(
        engine,
        prompts,
        school_db,
        "What is the name of the singer's pet?",
        SelectionSection(method="maj", candidates=4, answer="pipeline"),
    )
    assert answer.result.rows == [] and answer.agreement == (2, 3)
    assert answer.notes == [
        "the retriever named no column of this database that fits the question: the query was "
        "written on the whole schema",
        "the query ran but returned no rows: the database may not hold the answer",
        "the candidates disagree: 2 of 3 that ran returned this result",
    ]
