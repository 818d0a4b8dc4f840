"""Reward-SQL's process reward: Monte Carlo step labels, inverse-entropy weights, R_proc."""

from __future__ import annotations

import math

import pytest

from acesql.config import SelectionSection
from acesql.data.loaders import load_dataset
from acesql.models.engine import Completion
from acesql.prm.labels import label_steps
from acesql.prm.reward import inverse_entropy_weights, process_reward, step_entropies
from acesql.sql.batch_executor import BatchExecutor
from tests.fakes import RoleEngine, sql_answer


def chain(gold: str, final: str) -> str:
    return f"WITH\n-- step: the answer\nstep1 AS ({gold})\n-- final: it\n{final}"


def chains(ex):
    """The gold as one step then its rows (right), the same step then no rows (wrong), and a
    query without steps (malformed)."""
    return [
        sql_answer(chain(ex.sql, "SELECT * FROM step1")),
        sql_answer(chain(ex.sql, "SELECT * FROM step1 LIMIT 0")),
        sql_answer("SELECT 1"),
    ]


def plain_sql(ex):
    """Plain SQL: the gold read through a derived table (right), the same then no rows
    (wrong), and a statement that does not parse."""
    return [
        sql_answer(f"SELECT * FROM ({ex.sql}) AS sub"),
        sql_answer(f"SELECT * FROM ({ex.sql}) AS sub LIMIT 0"),
        sql_answer("SELEC oops"),
    ]


def two_questions(synth_dir):
    """Two usable train questions whose gold is one statement."""
    examples = load_dataset(synth_dir, "synth", "train").examples
    return [e for e in examples if e.unusable is None and ";" not in e.sql][:2]


class Scripted(RoleEngine):
    """Retriever: the gold columns. Sampled answers: `answers(ex)`. Continuations of a
    prefix: one right, one wrong."""

    def __init__(self, examples, answers=chains):
        super().__init__(examples, self._generator)
        self.answers, self.calls = answers, []

    def _generator(self, ex, n, options):
        if self.prompt.rstrip().endswith(")"):  # a prefix to continue
            self.calls.append(("continue", n))
            return [
                "\n-- final: it\nSELECT * FROM step1\n```",
                "\n-- final: none\nSELECT * FROM step1 LIMIT 0\n```",
            ][:n]
        self.calls.append(("sample", n))
        return self.answers(ex)[:n]


def test_step_labels_back_up_every_leaf_under_a_prefix(synth_dir, tiny_model_dir):
    from acesql.models.base_model import load_tokenizer
    from acesql.models.prompts import PromptBuilder

    examples = two_questions(synth_dir)
    prompts = PromptBuilder(load_tokenizer(tiny_model_dir), sql_format="cocte")
    engine = Scripted(examples)
    with BatchExecutor(workers=0) as executor:
        records, stats = label_steps(
            examples, engine, prompts, executor, trajectories=3, completions=2
        )
    assert stats.to_dict() == {
        "questions": 2,
        "trajectories": 6,
        "malformed": 2,
        "malformed_by_problem": {"no step": 2},
        "nodes": 2,
        "records": 6,
        "leaves": 8,  # per question: 2 sampled chains and 2 continuations of their one node
        "leaf_accuracy": 0.5,
    }
    assert engine.calls == [("sample", 3)] * 2 + [("continue", 2)] * 2  # per prompt
    for ex in examples:
        mine = [r for r in records if r["key"] == f"{ex.db_id}#{ex.index}"]
        prefix = [r for r in mine if r["final"] is None]
        complete = [r for r in mine if r["final"] is not None]
        # the shared step: 2 of its 4 leaves are right
        assert [(r["sigma"], r["leaves"]) for r in prefix] == [(0.5, 4)]
        assert sorted((r["sigma"], r["final"]["sql"]) for r in complete) == [
            (0.0, "SELECT * FROM step1 LIMIT 0"),
            (1.0, "SELECT * FROM step1"),
        ]
        step = prefix[0]["steps"][0]
        assert step["name"] == "step1" and step["rationale"] == "the answer"
        assert step["result"] and "error" not in step["result"].lower()
        assert prefix[0]["question"] == ex.question and prefix[0]["schema"]


def test_inverse_entropy_weights_and_the_process_reward_by_hand():
    # steps of 2, 1 and 3 tokens: H(q) = 1.0, 0.5, 0.5; cumulative 1, 1.5, 2 -> H~ .5, .75, 1
    h = step_entropies([[0.5, 1.5], [0.5], [0.2, 0.4, 0.9]])
    assert h == pytest.approx([1.0, 0.5, 0.5])
    w = inverse_entropy_weights(h)
    assert w == pytest.approx([0.60653, 0.47237, 0.36788], abs=1e-5)
    # a certain early prefix counts more: (.9 * .60653 + .6 * .47237 + .1 * .36788) / 1.44678
    assert process_reward([0.9, 0.6, 0.1], w) == pytest.approx(0.59863, abs=1e-5)
    assert process_reward([], []) == 0.0
    with pytest.raises(ValueError, match="scores but"):
        process_reward([0.5], [])
    with pytest.raises(ValueError, match="finite"):
        inverse_entropy_weights([float("nan")])


def _record(i: int, sigma: float, good: bool) -> dict:
    sql = "SELECT name FROM singer WHERE age > 30" if good else "SELECT nothing"
    return {
        "key": f"db#{i}",
        "question": f"Who is older than 30? ({i})",
        "evidence": "",
        "schema": "singer(name, age)",
        "steps": [{"rationale": "the old ones", "name": "old", "sql": sql, "result": "2 rows"}],
        "final": None,
        "sigma": sigma,
        "leaves": 4,
    }


def test_the_score_model_learns_its_labels_and_reports_held_out_auc(tiny_model_dir, tmp_path):
    from acesql.config import PrmSection
    from acesql.prm.model import TrajectoryScorer, train_prm

    train = [_record(i, 1.0 if i % 2 else 0.0, bool(i % 2)) for i in range(8)]
    held = [_record(100 + i, 1.0 if i % 2 else 0.25, bool(i % 2)) for i in range(4)]
    cfg = PrmSection(epochs=6, learning_rate=1e-3, batch_size=4, max_length=256)
    metrics = train_prm(tiny_model_dir, train, held, cfg, tmp_path / "prm", device="cpu")
    assert metrics["steps"] == metrics["planned_steps"] == 12 and len(metrics["losses"]) == 12
    assert sum(metrics["losses"][-3:]) < sum(metrics["losses"][:3])  # it fits its labels
    assert metrics["held_out_before/records"] == metrics["held_out_after/records"] == 4
    # the toy set is separable (a right step is one SQL text, a wrong one another): after
    # training, each of the 2 right held-out records scores above each of the 2 wrong ones
    assert metrics["held_out_after/auc"] == 1.0
    assert metrics["held_out_after/loss"] < metrics["held_out_before/loss"]
    assert metrics["held_out_after/auc_within_question"] is None  # one record per question
    assert sum(b["n"] for b in metrics["calibration_after"]) == 4
    again = TrajectoryScorer.load(tmp_path / "prm", max_length=256)
    scores = again.score(held)
    assert all(0 < s < 1 for s in scores) and max(scores[0::2]) < min(scores[1::2])
    # the saved model is the one judged after training: its held-out loss, by hand
    loss = -sum(
        r["sigma"] * math.log(s) + (1 - r["sigma"]) * math.log(1 - s) for r, s in zip(held, scores)
    ) / len(held)
    assert loss == pytest.approx(metrics["held_out_after/loss"], abs=1e-4)


def test_a_direct_answer_is_seen_as_a_chain_that_keeps_its_result(school_db):
    from acesql.prm.view import chain_views
    from acesql.sql.schema import Schema

    schema = Schema.from_sqlite(school_db, n_samples=0)
    correlated = (
        "SELECT s.StudentID FROM student AS s WHERE s.StudentID > "
        "(SELECT AVG(t.StudentID) FROM student AS t WHERE t.StudentID < s.StudentID)"
    )
    sqls = ["SELECT COUNT(*) FROM student WHERE age > 20", correlated, "SELEC oops", ""]
    with BatchExecutor(workers=0) as executor:
        staged, whole, bad, empty = chain_views([(school_db, q, schema) for q in sqls], executor)
        # the filter is a step; the rewrite runs to the query's own rows
        assert [(s.name, s.sql) for s in staged.steps] == [
            ("student_rows", "SELECT * FROM student WHERE age > 20")
        ]
        assert staged.final_sql == "SELECT COUNT(*) FROM student_rows AS student"
        same = executor.match_many([(school_db, staged.sql, sqls[0])])[0]
        assert same.match.match
    # the correlated subquery cannot run as a step of its own: the query is one step
    assert [(s.name, s.sql) for s in whole.steps] == [("answer", correlated)]
    assert whole.final_sql == "SELECT * FROM answer"
    assert bad is None and empty is None


def test_step_labels_of_a_direct_policy_come_from_its_sampled_answers(synth_dir, tiny_model_dir):
    from acesql.models.base_model import load_tokenizer
    from acesql.models.prompts import PromptBuilder

    examples = two_questions(synth_dir)
    prompts = PromptBuilder(load_tokenizer(tiny_model_dir), sql_format="direct")
    engine = Scripted(examples, plain_sql)
    with BatchExecutor(workers=0) as executor:
        records, stats = label_steps(
            examples, engine, prompts, executor, trajectories=3, completions=2
        )
    got = stats.to_dict()
    assert engine.calls == [("sample", 3)] * 2  # no prefix continued
    assert got["trajectories"] == 6 and got["malformed"] == 2
    assert got["leaves"] == 4 and got["leaf_accuracy"] == 0.5
    assert {r["view"] for r in records} == {"direct"}
    for ex in examples:
        mine = [r for r in records if r["key"] == f"{ex.db_id}#{ex.index}"]
        prefix = [r for r in mine if r["final"] is None]
        complete = [r for r in mine if r["final"] is not None]
        # both answers pass through the same steps (the derived table and what it holds):
        # every prefix averages one right and one wrong answer
        assert prefix and all((r["sigma"], r["leaves"]) == (0.5, 2) for r in prefix)
        assert sorted(r["sigma"] for r in complete) == [0.0, 1.0]
        assert len(prefix) == len(complete[0]["steps"])


@pytest.mark.slow  # a whole stage (or several) in subprocesses
def test_the_stages_say_what_is_missing_and_train_on_given_records(
    tmp_path, synth_dir, tiny_model_dir
):
    import json
    import shutil

    import yaml

    from tests.helpers import run_stage, write_prepared

    data = tmp_path / "data"
    write_prepared(data, synth_dir, ("train",))
    shutil.copytree(tiny_model_dir, tmp_path / "models" / "sft")
    params = tmp_path / "params.yaml"
    params.write_text(
        yaml.safe_dump(
            {
                "base": {
                    "data_dir": str(data),
                    "models_dir": str(tmp_path / "models"),
                    "tracking_uri": f"sqlite:///{tmp_path / 'mlflow.db'}",
                },
                "base_model": {},
                "prompt": {},
                "prm_data": {
                    "model": str(tmp_path / "models" / "sft"),
                    "max_questions": 2,
                    "trajectories": 2,
                    "completions": 1,
                    "generation": {"max_new_tokens": 4},
                },
                "prm": {
                    "base": str(tmp_path / "models" / "sft"),
                    "epochs": 1,
                    "batch_size": 2,
                    "max_length": 256,
                },
            }
        )
    )

    def stage(name):
        return run_stage(name, params)

    proc = stage("prm_data")  # a random model writes no Chain-of-CTE: nothing to label
    assert proc.returncode == 2 and "prm_data labelled nothing" in proc.stderr, proc.stderr
    assert "sql_format: cocte" in proc.stderr and not (data / "prm").exists()
    proc = stage("prm")
    assert proc.returncode == 2 and "run the prm_data stage" in proc.stderr
    (data / "prm").mkdir()

    def write(train):
        for name, rows in (("train", train), ("held_out", [])):
            lines = "".join(json.dumps(r) + "\n" for r in rows)
            (data / "prm" / f"{name}.jsonl").write_text(lines)

    write([_record(i, 0, True) for i in range(4)])  # a policy that solved nothing
    proc = stage("prm")
    assert proc.returncode == 2 and "have sigma 0" in proc.stderr and "solved none" in proc.stderr
    assert not (tmp_path / "models" / "prm").exists()
    write([{**_record(i, i % 2, True), "view": ("cocte", "direct")[i % 2]} for i in range(4)])
    proc = stage("prm")
    assert proc.returncode == 2 and "mix views" in proc.stderr
    write([{**_record(i, i % 2, True), "view": "direct"} for i in range(4)])
    proc = stage("prm")
    assert proc.returncode == 0, proc.stderr[-2000:]
    from acesql.prm.model import TrajectoryScorer

    assert TrajectoryScorer.load(tmp_path / "models" / "prm").view == "direct"
    metrics = json.loads((tmp_path / "models" / "prm_metrics.json").read_text())
    assert metrics["steps"] == 2 and metrics["held_out_after/records"] == 0
    assert (tmp_path / "models" / "prm_calibration.png").stat().st_size > 1000
    assert (tmp_path / "models" / "prm" / "config.json").is_file()


class FixedScorer:
    """R_phi stand-in: 0.9 for a complete chain, 0.5 for a prefix; records what it read."""

    def __init__(self):
        self.seen = []

    def score(self, records):
        self.seen += records
        return [0.9 if r["final"] else 0.5 for r in records]


def test_process_rewards_weight_prefix_scores_by_the_sampled_tokens_entropy(
    school_db, schemas, tiny_model_dir
):
    import math

    from acesql.models.base_model import load_tokenizer
    from acesql.prm.select import ProcessScorer

    tokenizer = load_tokenizer(tiny_model_dir)
    text = (
        "```sql\nWITH\n-- step: every student\nstep1 AS (SELECT StudentID FROM student)\n"
        "-- final: how many\nSELECT COUNT(*) FROM step1\n```"
    )
    ids = tokenizer(text, add_special_tokens=False).input_ids
    chain = Completion(text, ids, [-1.0] * len(ids), "stop")
    flat = Completion("```sql\nSELECT 1\n```", [1, 2], [-0.5, -0.5], "stop")
    fixed = FixedScorer()
    with BatchExecutor(workers=0) as executor:
        rewards = ProcessScorer(fixed, tokenizer, executor).rewards(
            "How many?",
            "student(StudentID)",
            "",
            school_db,
            [chain, flat],
            schema=schemas["school"],
        )
    # every token's -log p is 1: the step and the final query each have entropy 1, so the
    # cumulative entropies 1 and 2 normalise to .5 and 1
    w = [math.exp(-0.5), math.exp(-1.0)]
    assert rewards[0] == pytest.approx((0.5 * w[0] + 0.9 * w[1]) / sum(w))
    assert rewards[1] is None  # not a chain: no process reward
    prefix, complete = fixed.seen
    assert prefix["final"] is None and complete["final"]["sql"] == "SELECT COUNT(*) FROM step1"
    assert "60" in complete["final"]["result"]  # the final query ran on the database
    assert prefix["steps"][0]["name"] == "step1" and prefix["steps"][0]["result"]


def test_a_direct_score_model_reads_plain_sql_through_its_chain_view(
    school_db, schemas, tiny_model_dir
):
    from acesql.errors import ConfigError
    from acesql.models.base_model import load_tokenizer
    from acesql.prm.select import ProcessScorer

    fixed = FixedScorer()
    fixed.view = "direct"
    right = Completion(
        "```sql\nSELECT COUNT(*) FROM student WHERE age > 20\n```", [1], [-3.0], "stop"
    )
    broken = Completion("```sql\nSELEC oops\n```", [1], [-0.1], "stop")
    with BatchExecutor(workers=0) as executor:
        scorer = ProcessScorer(fixed, load_tokenizer(tiny_model_dir), executor)
        rewards = scorer.rewards(
            "How many?", "student(age)", "", school_db, [right, broken], schema=schemas["school"]
        )
        scorer.require_format("direct")
        with pytest.raises(ConfigError, match="prompt.sql_format to direct"):
            scorer.require_format("cocte")
    # one step (the filter) and the whole query, equal weights: (0.5 + 0.9) / 2
    assert rewards == [pytest.approx(0.7), None]
    prefix, complete = fixed.seen
    assert prefix["steps"][0]["sql"] == "SELECT * FROM student WHERE age > 20"
    assert complete["final"]["sql"] == "SELECT COUNT(*) FROM student_rows AS student"


def test_prm_selection_in_the_evaluation_keeps_the_best_rewarded_candidate(synth_dir):
    from acesql.eval.end_to_end import EvalOptions, evaluate_examples
    from acesql.models.prompts import PromptBuilder
    from tests.fakes import WordTokenizer

    examples = two_questions(synth_dir)

    class Engine(Scripted):
        def generate(self, prompts, n=1, **kw):
            if kw.get("temperature") == 0.0 and not any("schema linking" in p for p in prompts):
                return [[Completion("```sql\nSELECT 0\n```", [1], [-0.1], "stop")] for _ in prompts]
            return super().generate(prompts, n, **kw)

    class ByOrder:
        """Rewards: the second candidate best (the wrong chain), then the third (the right
        chain again) and the first."""

        def rewards(self, question, schema_text, evidence, db_path, outputs, *, schema):
            assert schema.tables  # the database's schema, for the direct view's rewrite
            return [0.4, 0.8, 0.5][: len(outputs)]

    prompts = PromptBuilder(WordTokenizer(), sql_format="cocte")
    with BatchExecutor(workers=0) as executor:
        summary, rows = evaluate_examples(
            examples,
            Engine(examples, answers=lambda ex: [*chains(ex)[:2], chains(ex)[0]]),
            prompts,
            executor,
            EvalOptions(candidates=3, selection=SelectionSection(method="prm")),
            process_scorer=ByOrder(),
        )
    assert all(r["prm_scored"] == 3 and r["prm_sql"].endswith("LIMIT 0") for r in rows)
    assert all(r["prm_rewards"] == [0.4, 0.8, 0.5] for r in rows)  # each candidate's, kept
    assert all(r["prm_votes"] == 1 for r in rows)  # no other candidate returns no rows
    # the weighted vote: the right result, 0.4 + 0.5, outweighs the wrong one's 0.8
    assert all(r["prm_vote_match"] and "LIMIT" not in r["prm_vote_sql"] for r in rows)
    assert summary["prm_ex"] == 0.0 and summary["oracle_ex"] == 1.0
    assert summary["prm_given_recall"] == 0.0 and summary["prm_vote_ex"] == 1.0
    assert all(r["prm_candidate_match"] == [True, False, True] for r in rows)
    assert summary["prm_auc_within"] == 0.0  # both right candidates score under the wrong one


def test_grpo_adds_the_process_reward_to_the_outcome_for_chains_only(
    synth_dir, tiny_model_dir, tmp_path
):
    from acesql.errors import ConfigError
    from acesql.prm.model import TrajectoryScorer
    from tests.grpo_helpers import grpo_config, grpo_trainer

    examples = load_dataset(synth_dir, "synth", "train").examples[:2]
    cfg = grpo_config(generator_reward="process", prm_model=str(tmp_path / "none"))
    with pytest.raises(ConfigError, match="run the prm stage"):
        grpo_trainer(tiny_model_dir, examples, tmp_path, cfg, sql_format="cocte")

    TrajectoryScorer.from_base(tiny_model_dir, max_length=256).save(tmp_path / "prm")
    cfg = grpo_config(generator_reward="process", prm_model=str(tmp_path / "prm"))
    with pytest.raises(ConfigError, match="prompt.sql_format to cocte"):
        grpo_trainer(tiny_model_dir, examples, tmp_path, cfg)  # a direct policy, a chain PRM
    trainer = grpo_trainer(tiny_model_dir, examples, tmp_path, cfg, sql_format="cocte")

    class Halves:  # R_proc 0.5 for the first output of each question, no chain for the rest
        def rewards(self, question, schema_text, evidence, db_path, outputs, *, schema):
            assert question in {e.question for e in examples} and schema_text and schema.tables
            return [0.5] + [None] * (len(outputs) - 1)

    trainer.scoring.process = Halves()
    from acesql.grpo.rollout import rollout

    rollouts = rollout(
        examples,
        trainer.engine,
        trainer.prompts,
        trainer.schemas,
        trainer.executor,
        n_retriever=4,
        n_generator=4,
        combine="vote",
        max_new_tokens=16,
    )
    targets = {r.key: trainer.scoring.targets(r, trainer.pool) for r in rollouts}
    rewards = trainer.scoring.rewards(rollouts, targets, {})["generator"]
    for r, got in zip(rollouts, rewards):
        outcome = [1.0 if m else 0.0 for m in r.matched]  # no length penalty in this config
        assert got == [outcome[0] + 0.5, *outcome[1:]]


def test_a_long_input_keeps_its_step_marker(tiny_model_dir):
    from acesql.prm.model import STEP_MARKER, TrajectoryScorer, render_record

    scorer = TrajectoryScorer.from_base(tiny_model_dir, max_length=24)
    record = _record(0, 1.0, True) | {"schema": "singer(name, age) " * 50}
    ids = scorer.tokenizer(
        render_record(record), truncation=True, max_length=24, add_special_tokens=False
    ).input_ids
    marker = scorer.tokenizer(STEP_MARKER, add_special_tokens=False).input_ids
    assert len(ids) == 24 and ids[-len(marker) :] == marker
