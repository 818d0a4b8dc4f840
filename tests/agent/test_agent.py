"""The multi-turn agent: actions, observations, episodes on private views, scoring."""

from __future__ import annotations

import pytest

from acesql.agent.actions import close_action, parse_action
from acesql.agent.episode import run_episodes
from acesql.agent.tasks import DebugAgentTask, QuestionAgentTask
from acesql.data.loaders import Example
from acesql.debug.task import DebugTask
from acesql.models.engine import Completion, Engine
from acesql.sql.observation import render_observation
from acesql.sql.replicas import Replicas
from acesql.sql.sandbox import ExecResult


class ScriptedEngine(Engine):
    """Answers turn k of trajectory i with scripts[i][k] (the batch holds live ones only)."""

    def __init__(self, scripts: list[list[str]]):
        self.scripts = scripts
        self.calls: list[list[str]] = []

    def generate(self, prompts, n=1, stop=None, **options):
        self.calls.append(prompts)
        out = []
        for prompt in prompts:
            i = self._owner(prompt)
            turn = prompt.count("<|im_start|>assistant") - 1
            text = self.scripts[i][turn]
            for s in stop or []:  # the engine cuts at the stop string, as the real ones do
                text = text.split(s)[0] if s in text else text
            out.append([Completion(text, list(range(len(text) // 4 + 1)), [], "stop")])
        return out

    def _owner(self, prompt: str) -> int:
        marks = [i for i in range(len(self.scripts)) if f"[trajectory {i}]" in prompt]
        return marks[0] if marks else 0


class ChatTokenizer:
    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=True):
        text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
        return text + ("<|im_start|>assistant\n" if add_generation_prompt else "")


@pytest.fixture()
def replicas(tmp_path):
    with Replicas(tmp_path / "replicas", timeout_s=10) as replicas:
        yield replicas


def debug_task(db, mark="", **fields) -> DebugAgentTask:
    base = dict(
        task_id="t1",
        db_id="school",
        db_path=str(db),
        category="management",
        issue=f"Clear the course table. {mark}",
        issue_sql=["DELETE FROM course WHERE 0"],
        solution_sql=["DELETE FROM course"],
    )
    return DebugAgentTask(DebugTask(**(base | fields)))


def test_actions_and_observations():
    assert parse_action("a <sql>SELECT 1</sql> b <sql>SELECT 2</sql>").sql == "SELECT 2"
    assert parse_action("<submit>```sql\nSELECT 3\n```</submit>").sql == "SELECT 3"
    assert parse_action("<sql>  </sql>").kind == "none"
    assert parse_action("<sql>SELECT 1").kind == "none"
    assert close_action("look <sql>SELECT 1") == "look <sql>SELECT 1</sql>"
    assert close_action("done <submit>x</submit>") == "done <submit>x</submit>"
    long = ExecResult(ok=True, columns=["v"], rows=[("x" * 100,)] * 30)
    text = render_observation(long, max_rows=5, max_value_chars=10)
    assert "(30 rows, first 5 shown)" in text and "xxxxxxx..." in text
    assert render_observation(ExecResult(ok=False, error="no such table: t")) == (
        "Error: no such table: t"
    )
    assert render_observation(long, max_chars=100).endswith("(output cut)")


def test_a_trajectory_probes_tries_a_write_and_submits(replicas, school_db):
    engine = ScriptedEngine(
        [
            [
                "How many courses? <sql>SELECT COUNT(*) FROM course</sql>",
                "Try it. <sql>DELETE FROM course</sql>",
                "Check. <sql>SELECT COUNT(*) FROM course</sql>",
                "<submit>DELETE FROM course;</submit>",
            ]
        ]
    )
    (group,) = run_episodes(engine, ChatTokenizer(), [debug_task(school_db)], replicas, max_turns=5)
    (trajectory,) = group
    assert trajectory.finish == "submitted" and trajectory.passed and trajectory.reward == 1.0
    observations = [t.observation for t in trajectory.turns]
    assert "rows affected" in observations[1] and "\n0\n" in observations[2]
    assert observations[0].splitlines()[2] != "0"  # the first probe saw the courses
    assert observations[3] is None
    # the next prompt holds the observation, the model's tokens are the completion alone
    assert observations[0] in trajectory.turns[1].prompt
    assert trajectory.turns[1].prompt.count("<|im_start|>assistant") == 2


def test_the_submission_is_judged_apart_from_what_the_trajectory_did(replicas, school_db):
    engine = ScriptedEngine([["<sql>DELETE FROM course</sql>", "<submit>SELECT 1</submit>"]])
    (group,) = run_episodes(engine, ChatTokenizer(), [debug_task(school_db)], replicas, max_turns=3)
    assert group[0].finish == "submitted" and not group[0].passed
    assert group[0].verdict.startswith("state:")


def test_malformed_turns_cost_turns_and_the_budget_ends_the_trajectory(replicas, school_db):
    engine = ScriptedEngine([["I am not sure.", "Still thinking", "Maybe"]])
    (group,) = run_episodes(engine, ChatTokenizer(), [debug_task(school_db)], replicas, max_turns=3)
    (trajectory,) = group
    assert trajectory.finish == "turn_budget" and trajectory.submission is None
    assert trajectory.reward == 0.0 and trajectory.verdict == "no submission"
    assert len(trajectory.turns) == 3
    assert "No action found" in trajectory.turns[0].observation
    assert "0 turn(s) left" in trajectory.turns[2].observation


def test_trajectories_of_a_group_write_apart_and_advance_in_one_batch(replicas, school_db):
    tasks = [debug_task(school_db, "[trajectory 0]"), debug_task(school_db, "[trajectory 1]")]
    engine = ScriptedEngine(
        [
            [
                "<sql>DELETE FROM course</sql>",
                "<sql>SELECT COUNT(*) FROM course</sql>",
                "<submit>DELETE FROM course</submit>",
            ],
            [
                "<sql>SELECT COUNT(*) FROM course</sql>",
                "<sql>SELECT COUNT(*) FROM course</sql>",
                "<submit>DELETE FROM course WHERE course_id < 0</submit>",
            ],
        ]
    )
    groups = run_episodes(engine, ChatTokenizer(), tasks, replicas, n=2, max_turns=4)
    assert [len(g) for g in groups] == [2, 2]
    assert all(len(call) == 4 for call in engine.calls)  # 4 live trajectories per turn
    first, second = groups[0][0], groups[1][0]
    assert "\n0\n" in first.turns[1].observation  # its own delete
    assert "\n0\n" not in second.turns[1].observation  # the other's view is untouched
    assert [t.passed for t in groups[0]] == [True, True]
    assert [t.passed for t in groups[1]] == [False, False]


def test_preprocess_statements_run_on_every_view_first(replicas, school_db):
    task = debug_task(
        school_db,
        preprocess_sql=["CREATE TABLE audit (id)"],
        solution_sql=["INSERT INTO audit VALUES (1)"],
        issue_sql=["INSERT INTO audit VALUES (2)"],
    )
    engine = ScriptedEngine(
        [["<sql>SELECT COUNT(*) FROM audit</sql>", "<submit>INSERT INTO audit VALUES (1)</submit>"]]
    )
    (group,) = run_episodes(engine, ChatTokenizer(), [task], replicas, max_turns=2)
    assert group[0].turns[0].observation.startswith("Result:\nCOUNT(*)\n0")
    assert group[0].passed
    assert "Already run on this database" in group[0].turns[0].prompt


def test_question_tasks_are_matched_on_the_result(replicas, school_db):
    example = Example(
        0, "school", "How many students?", "SELECT COUNT(*) FROM student", str(school_db)
    )
    task = QuestionAgentTask(example)
    assert task.score("SELECT COUNT(StudentID) FROM student", replicas).passed
    wrong = task.score("SELECT COUNT(*) FROM course", replicas)
    assert not wrong.passed and wrong.got.rows != wrong.expected.rows
    two = task.score("SELECT 1; SELECT 2", replicas)
    assert not two.passed and "exactly one query" in two.reason
    assert "How many students?" in task.messages(3)[1]["content"]


def test_a_one_turn_opening_asks_for_the_submission_at_once(school_db):
    example = Example(0, "school", "How many?", "SELECT COUNT(*) FROM student", str(school_db))
    for task in (debug_task(school_db), QuestionAgentTask(example)):
        only = task.messages(1)[1]["content"]
        assert only.endswith(
            "This turn is your last: submit your final SQL with <submit>...</submit>."
        )
        assert task.messages(3)[1]["content"].endswith("You have 3 turns.")


def test_episodes_with_a_tiny_model(replicas, school_db, tiny_model_dir):
    """Six random tokens a turn never close an action: each trajectory is told so, takes both
    its turns and ends without a submission; the same seed replays the same episodes."""
    from acesql.agent.episode import render_chat
    from acesql.models.base_model import load_tokenizer
    from acesql.models.engine import load_engine
    from acesql.models.prompts import templates

    tokenizer = load_tokenizer(tiny_model_dir)
    task = debug_task(school_db)

    def episodes():
        engine = load_engine("transformers", tiny_model_dir, device="cpu")
        try:
            (group,) = run_episodes(
                engine, tokenizer, [task], replicas, n=2, max_turns=2, max_new_tokens=6, seed=0
            )
        finally:
            engine.close()
        return group

    group = episodes()
    told = templates()["agent"]["malformed"]
    assert len(group) == 2
    for trajectory in group:
        assert (trajectory.finish, trajectory.submission) == ("turn_budget", None)
        assert (trajectory.passed, trajectory.reward) == (False, 0.0)
        assert trajectory.verdict == "no submission"
        first, second = trajectory.turns
        for turn, left in ((first, 1), (second, 0)):
            assert turn.action.kind == "none" and len(turn.completion.token_ids) == 6
            assert tokenizer.decode(turn.completion.token_ids) == turn.completion.text
            assert turn.observation == told.format(turns_left=left)
        # the second turn reads the opening, what the model said, and what came back
        assert second.prompt == render_chat(
            tokenizer,
            task.messages(2)
            + [
                {"role": "assistant", "content": first.completion.text},
                {"role": "user", "content": told.format(turns_left=1)},
            ],
        )
    assert group[0].turns[0].completion.text != group[1].turns[0].completion.text
    assert [t.to_dict() for t in episodes()] == [t.to_dict() for t in group]


def test_agent_evaluation_resumes_summarizes_and_compares(replicas, school_db, tmp_path):
    from acesql.debug.task import spread
    from acesql.eval.agent import compare, evaluate_agent, read_rows

    tasks = [
        debug_task(school_db, f"[trajectory {i}]", task_id=f"t{i}", db_id=f"db{i % 2}").task
        for i in range(3)
    ]
    tasks[2].category = "query"
    tasks[2].solution_sql = ["SELECT COUNT(*) FROM course"]
    assert [t.task_id for t in spread(tasks, 2)] == ["t0", "t1"]  # one per database first
    assert [t.task_id for t in spread(tasks, None)] == ["t0", "t1", "t2"]
    assert [t.category for t in spread(tasks[::2], None)] == ["management", "query"]
    good = ScriptedEngine([["<submit>DELETE FROM course</submit>"]] * 2 + [["<submit>x</submit>"]])
    metrics = evaluate_agent(good, ChatTokenizer(), tasks, replicas, tmp_path / "a", chunk=2)
    assert metrics["n"] == 3 and metrics["success"] == 2 / 3
    assert metrics["by_category"]["management"]["success"] == 1.0
    assert metrics["by_category"]["query"]["success"] == 0.0
    low, high = metrics["success_95"]
    assert 0 < low < 2 / 3 < high < 1
    report = (tmp_path / "a" / "report.html").read_text()
    assert "<img" in report and "<h3>query</h3>" in report
    assert "<b>t2</b>" in report and "&lt;submit&gt;x" in report  # the failed one, shown
    again = evaluate_agent(good, ChatTokenizer(), tasks, replicas, tmp_path / "a")
    assert again == metrics and len(good.calls) == 2  # resumed: no new generation
    bad = ScriptedEngine([["no idea"]] * 3)
    evaluate_agent(bad, ChatTokenizer(), tasks, replicas, tmp_path / "b", max_turns=1)
    paired = compare(read_rows(tmp_path / "a"), read_rows(tmp_path / "b"))
    assert paired["all"]["n"] == 3 and paired["all"]["a_only"] == 2
    assert paired["all"]["b_minus_a"] == pytest.approx(-2 / 3)
    assert paired["management"]["n"] == 2


def test_debug_eval_command_with_a_tiny_model(school_db, tmp_path, tiny_model_dir):
    import json

    from click.testing import CliRunner

    from acesql.cli import cli
    from acesql.debug.task import write_tasks

    tasks_file = tmp_path / "tasks.jsonl"
    write_tasks(tasks_file, [debug_task(school_db, task_id=f"t{i}").task for i in range(2)])
    out = tmp_path / "eval"
    args = ["debug", "eval", "--model", str(tiny_model_dir), "--tasks", str(tasks_file)]
    args += ["--max-turns", "1", "--max-new-tokens", "4", "--out", str(out)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    metrics = json.loads(result.stdout.strip().splitlines()[-1])
    assert metrics["n"] == 2 and (out / "trajectories.jsonl").is_file()


def test_demonstrations_are_the_episodes_the_agent_would_run(replicas, school_db, synth_dir):
    from acesql.agent.demos import debug_demonstration, question_demonstration
    from acesql.data.loaders import load_dataset
    from acesql.debug.build import BuildConfig, build_tasks

    examples = load_dataset(synth_dir, "synth", "test_ood").examples
    tasks, _ = build_tasks(examples, "test_ood", replicas, BuildConfig(tasks_per_db=6))
    agent_tasks = [DebugAgentTask(t) for t in tasks] + [QuestionAgentTask(examples[0])]
    tokenizer = ChatTokenizer()
    for task in agent_tasks:
        maker = (
            question_demonstration if isinstance(task, QuestionAgentTask) else debug_demonstration
        )
        records = maker(task, replicas, tokenizer, max_turns=3)
        assert records[-1]["response"].count("<submit>") == 1
        engine = ScriptedEngine([[r["response"] for r in records]])
        (group,) = run_episodes(engine, tokenizer, [task], replicas, max_turns=3)
        (trajectory,) = group
        assert trajectory.passed, (task.task_id, trajectory.verdict)
        assert [t.prompt for t in trajectory.turns] == [r["prompt"] for r in records]


def test_eval_command_covers_debugging_tasks_and_compares_them(school_db, tmp_path, tiny_model_dir):
    import json

    from click.testing import CliRunner

    from acesql.cli import cli
    from acesql.debug.task import write_tasks

    data = tmp_path / "debug"
    write_tasks(
        data / "test_ood.jsonl", [debug_task(school_db, task_id=f"t{i}").task for i in range(2)]
    )
    run = ["eval", "--model", str(tiny_model_dir), "--dataset", str(data), "--format", "debug"]
    run += ["--split", "test_ood", "--max-turns", "1", "--max-new-tokens", "4"]
    for name in ("a", "b"):
        result = CliRunner().invoke(cli, [*run, "--out", str(tmp_path / name)])
        assert result.exit_code == 0, result.output
        metrics = json.loads(result.stdout.strip().splitlines()[-1])
        assert metrics["n"] == 2 and set(metrics["by_category"]) == {"management"}
        assert (tmp_path / name / "report.html").is_file()
    result = CliRunner().invoke(cli, ["eval", "compare", str(tmp_path / "a"), str(tmp_path / "b")])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[2].split()[:2] == ["tasks", "n"]
    assert lines[3].split()[:2] == ["all", "2"] and lines[4].split()[:2] == ["management", "2"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--split", "dev"], "split 'dev': "),
        (["--split", "dev"], "(splits there: test_ood;"),
        (["--split", "test_ood", "--selection", "maj"], "one greedy trajectory each: drop"),
    ],
)
def test_eval_command_on_debugging_tasks_refuses_what_does_not_apply(
    school_db, tmp_path, tiny_model_dir, extra, message
):
    from click.testing import CliRunner

    from acesql.cli import cli
    from acesql.debug.task import write_tasks

    write_tasks(tmp_path / "test_ood.jsonl", [debug_task(school_db).task])
    args = ["eval", "--model", str(tiny_model_dir), "--dataset", str(tmp_path), "--format", "debug"]
    result = CliRunner().invoke(cli, [*args, *extra])
    assert result.exit_code == 2 and message in result.output


def test_eval_compare_refuses_an_agent_evaluation_against_a_text_to_sql_one(tmp_path):
    from click.testing import CliRunner

    from acesql.cli import cli

    agent, sql = tmp_path / "agent", tmp_path / "sql"
    agent.mkdir()
    sql.mkdir()
    (agent / "trajectories.jsonl").write_text("")
    (agent / "rows.jsonl").write_text("")
    (sql / "metrics.json").write_text("{}")
    result = CliRunner().invoke(cli, ["eval", "compare", str(agent), str(sql)])
    assert result.exit_code == 2 and "compares only with another one" in result.output
