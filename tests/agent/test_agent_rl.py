"""Agentic GRPO: rewards of trajectories, sequences per turn, a step that moves the weights."""

from __future__ import annotations

import pytest
import torch

from acesql.agent.actions import Action
from acesql.agent.episode import Trajectory, Turn
from acesql.agent.rewards import aggregated_trajectory_reward, column_set_match
from acesql.agent.trainer import REWARDS, trajectory_reward, turn_sequences
from acesql.config import AgentGrpoSection
from acesql.errors import ConfigError
from acesql.models.engine import Completion
from acesql.sql.sandbox import ExecResult

EXPECTED = ExecResult(ok=True, columns=["name", "n"], rows=[("a", 1), ("b", 2)])


def turn(result=None, ids=(1, 2, 3), prompt="p") -> Turn:
    kind = "sql" if result is not None else "submit"
    return Turn(prompt, Completion("x", list(ids), [], "stop"), Action(kind, "q"), None, result)


def trajectory(passed, probes=(), submitted=None) -> Trajectory:
    t = Trajectory("t", turns=[turn(r) for r in probes] + [turn()], submission="q")
    t.passed, t.submitted_result, t.expected_result = passed, submitted, EXPECTED
    return t


HALF = ExecResult(ok=True, columns=["n"], rows=[(2,), (1,)])  # one of the two columns
NONE = ExecResult(ok=True, columns=["z"], rows=[(9,)])


@pytest.mark.parametrize(
    ("name", "t", "expected"),
    [
        ("binary", trajectory(True), 1.0),
        ("binary", trajectory(False, [HALF]), 0.0),
        ("partial", trajectory(True), 1.0),
        ("partial", trajectory(False, submitted=ExecResult(ok=True, rows=[("a", 1)])), 2 / 3),
        ("csmr", trajectory(True, [NONE]), 1.0),
        # probes score 0.5 and 0; the failed submission 0.5: half their mean
        ("csmr", trajectory(False, [HALF, NONE], HALF), 0.5 * (0.5 + 0 + 0.5) / 3),
        # steps 0.5, 0, 1 (the pass): +0.5, -1 (x2), +1 -> 1 + 0.5 * (-0.5 / 3)
        ("atr", trajectory(True, [HALF, NONE]), 1 + 0.5 * (0.5 - 1.0 + 1.0) / 3),
    ],
)
def test_trajectory_rewards(name, t, expected):
    assert trajectory_reward(name, t) == pytest.approx(expected)


def test_reward_names_match_the_config():
    assert set(REWARDS) == set(AgentGrpoSection.model_fields["reward"].annotation.__args__)
    with pytest.raises(ConfigError, match="binary"):
        trajectory_reward("dense", trajectory(True))


def test_column_set_match_and_atr_by_hand():
    assert column_set_match(EXPECTED, EXPECTED) == 1.0
    assert column_set_match(ExecResult(ok=False, error="x"), EXPECTED) == 0.0
    # a column may serve one expected column only
    twice = ExecResult(ok=True, columns=["n", "m"], rows=[(1, 1), (2, 2)])
    assert column_set_match(twice, EXPECTED) == 0.5
    assert aggregated_trajectory_reward([], 1.0) == 1.0
    assert aggregated_trajectory_reward([0.0, 1.0], 0.0, weight=1.0) == 0.5


def test_every_turn_is_a_sequence_with_its_trajectorys_advantage():
    win = Trajectory("a", turns=[turn(HALF, ids=(5, 6)), turn(ids=(7,))], submission="q")
    lose = Trajectory("b", turns=[turn(ids=(8, 9, 10))], submission="q")
    empty = Trajectory("c", turns=[turn(ids=())])
    seqs = turn_sequences([[win, lose, empty]], [[1.0, 0.0, 0.0]], lambda s: [0] * len(s))
    assert [s.completion_ids for s in seqs] == [[5, 6], [7], [8, 9, 10]]  # no empty turn
    # rewards 1, 0, 0: mean 1/3, sample std 0.577
    assert seqs[0].advantage == seqs[1].advantage == pytest.approx(1.1547, abs=1e-3)
    assert seqs[2].advantage == pytest.approx(-0.5774, abs=1e-3)
    assert turn_sequences([[win, lose]], [[1.0, 1.0]], lambda s: [0])[0].advantage == 0.0


def clear_the_course_table(db):
    """A management task that one submission passes and another fails."""
    from acesql.agent.tasks import DebugAgentTask
    from acesql.debug.task import DebugTask

    return DebugAgentTask(
        DebugTask(
            task_id="t",
            db_id="school",
            db_path=str(db),
            category="management",
            issue="Clear the course table.",
            issue_sql=["DELETE FROM course WHERE 0"],
            solution_sql=["DELETE FROM course"],
        )
    )


def test_a_step_with_a_signal_moves_each_answer_the_way_of_its_advantage(
    tmp_path, school_db, tiny_model_dir
):
    from acesql.agent.episode import render_chat
    from acesql.agent.trainer import AgentGrpoTrainer
    from acesql.sql.replicas import Replicas

    task = clear_the_course_table(school_db)
    cfg = AgentGrpoSection(
        steps=1, tasks_per_step=1, group_size=2, max_turns=1, learning_rate=1e-3, beta=0.0
    )
    solves, fails = "<submit>DELETE FROM course</submit>", "<submit>SELECT 1</submit>"
    with Replicas(tmp_path / "r") as replicas:
        trainer = AgentGrpoTrainer(tiny_model_dir, [task], replicas, cfg, device="cpu")
        opening = render_chat(trainer.tokenizer, task.messages(cfg.max_turns))
        prompts = []

        class Scripted:  # one trajectory solves it, the other does not: advantages +-0.71
            def generate(self, prompts_now, **options):
                prompts.extend(prompts_now)
                return [[Completion(t, trainer.tokenize(t), [], "stop")] for t in (solves, fails)]

        def logprob(text: str) -> float:
            """log P(text | the task's opening) under the policy, summed over its tokens."""
            prompt, answer = trainer.tokenize(opening), trainer.tokenize(text)
            with torch.no_grad():
                logits = trainer.model(torch.tensor([prompt + answer])).logits[0].float()
            steps = torch.log_softmax(logits[len(prompt) - 1 : -1], dim=-1)
            return float(steps.gather(-1, torch.tensor(answer)[:, None]).sum())

        trainer.engine = Scripted()
        before = {text: logprob(text) for text in (solves, fails)}
        summary = trainer.train(tmp_path / "out")
    assert prompts == [opening, opening]  # the two answers were sampled from the opening
    after = {text: logprob(text) for text in (solves, fails)}
    assert summary["steps"] == 1 and summary["success_first5"] == 0.5
    assert trainer.history[0]["updated"] == 1.0 and trainer.history[0]["sequences"] == 2
    # one step at lr 1e-3 moved them by about +2.1 and -0.7 nats
    assert after[solves] > before[solves] + 0.5 and after[fails] < before[fails] - 0.1
    assert (tmp_path / "out" / "config.json").is_file()
    assert (tmp_path / "out" / "curves.png").stat().st_size > 0


def test_a_step_of_equal_rewards_makes_no_update_when_flat_groups_are_skipped(
    tmp_path, school_db, tiny_model_dir
):
    from acesql.agent.trainer import AgentGrpoTrainer
    from acesql.sql.replicas import Replicas

    task = clear_the_course_table(school_db)
    cfg = AgentGrpoSection(
        steps=1,
        tasks_per_step=1,
        group_size=2,
        max_turns=1,
        learning_rate=1e-3,
        skip_flat_groups=True,
    )
    with Replicas(tmp_path / "r") as replicas:
        trainer = AgentGrpoTrainer(tiny_model_dir, [task], replicas, cfg, device="cpu")

        class Scripted:  # both trajectories fail: one flat group
            def generate(self, prompts, **options):
                ids = trainer.tokenize("<submit>SELECT 1</submit>")
                return [[Completion("<submit>SELECT 1</submit>", ids, [], "stop")] for _ in prompts]

        trainer.engine = Scripted()
        before = [p.detach().clone() for p in trainer.model.parameters() if p.requires_grad]
        trainer.train(tmp_path / "out")
    after = [p for p in trainer.model.parameters() if p.requires_grad]
    record = trainer.history[0]
    assert record["flat_groups"] == 1 and record["sequences"] == 0 and record["updated"] == 0.0
    assert all(torch.equal(a, b) for a, b in zip(after, before))
