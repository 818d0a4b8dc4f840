"""Multi-turn episodes: the model acts, the database answers, until it submits or runs out.

    tasks = [DebugAgentTask(t) for t in read_tasks("data/debug/dev.jsonl")]
    groups = run_episodes(engine, tokenizer, tasks, replicas, n=4, max_turns=5)
    groups[i][j].turns, .submission, .passed, .reward

Each of the `n` trajectories of a task leases its own private view of the task's database
(`acesql.sql.replicas`), so its probes and trial writes are its own. All live trajectories
advance one turn per engine call (a batch). A turn is the model's completion, stopped once it
closes an action: `<sql>` runs the statement and the result comes back as the next user
message; `<submit>` ends the trajectory; a turn without an action gets a message saying how
to act, and counts. After `max_turns` turns without a submission the trajectory ends empty.

The submission is then scored on fresh views, apart from everything the trajectory did:
debugging tasks by `acesql.debug.check`, questions by execution match against the gold
result. The reward is 1 when it passes, else 0 (the binary reward of the seed paper).

For training, each turn is one sequence: the prompt it was sampled from (the conversation
so far, observations included) and the tokens the model sampled. Observation tokens are in
the prompt, so they never enter the loss; the turns of one trajectory share its advantage.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from acesql.agent.actions import STOP, Action, close_action, parse_action
from acesql.models.engine import Completion, Engine
from acesql.models.prompts import templates
from acesql.sql.observation import render_observation
from acesql.sql.replicas import Lease, Replicas
from acesql.sql.sandbox import ExecResult


@dataclass
class Turn:
    prompt: str  # the chat-formatted conversation this turn was sampled from
    completion: Completion
    action: Action
    observation: str | None  # what came back (None after a submission)
    result: ExecResult | None = None  # the last statement's result of an <sql> action


@dataclass
class Trajectory:
    task_id: str
    turns: list[Turn] = field(default_factory=list)
    submission: str | None = None
    finish: str = ""  # "submitted" or "turn_budget"
    passed: bool = False
    reward: float = 0.0
    verdict: str = ""  # the check's reason
    submitted_result: ExecResult | None = None  # what the submission's last statement gave
    expected_result: ExecResult | None = None  # and the solution's (None when not a query)

    def to_dict(self) -> dict:
        return {
            "task_id": self.task_id,
            "turns": [
                {
                    "completion": t.completion.text,
                    "action": t.action.kind,
                    "sql": t.action.sql,
                    "observation": t.observation,
                    "tokens": len(t.completion.token_ids),
                }
                for t in self.turns
            ],
            "submission": self.submission,
            "finish": self.finish,
            "passed": self.passed,
            "reward": self.reward,
            "verdict": self.verdict,
        }


class AgentTask:
    """What an episode needs from a task: its database, its opening messages, its scoring."""

    task_id: str
    db_path: str
    setup_sql: list[str] = []  # run on each trajectory's view before the first turn

    def messages(self, max_turns: int) -> list[dict]:
        raise NotImplementedError

    def score(self, submission: str, replicas: Replicas) -> Score:
        """The verdict on a submission, checked on fresh views."""
        raise NotImplementedError


@dataclass
class Score:
    passed: bool
    reason: str
    got: ExecResult | None = None  # the submission's last result, for partial rewards
    expected: ExecResult | None = None  # the reference result, when the task has one


@dataclass
class _Live:
    task: AgentTask
    lease: Lease
    messages: list[dict]
    trajectory: Trajectory


def run_episodes(
    engine: Engine,
    tokenizer,
    tasks: list[AgentTask],
    replicas: Replicas,
    n: int = 1,
    max_turns: int = 5,
    temperature: float = 1.0,
    top_p: float = 1.0,
    max_new_tokens: int = 256,
    seed: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> list[list[Trajectory]]:
    """`n` trajectories per task, each scored; `progress(k)` after k trajectories end."""
    live: list[_Live] = []
    try:
        for task in tasks:
            for _ in range(n):
                lease = replicas.lease(task.db_path)
                live.append(_Live(task, lease, task.messages(max_turns), Trajectory(task.task_id)))
                for sql in task.setup_sql:
                    lease.execute(sql)
        for turn in range(max_turns):
            active = [e for e in live if not e.trajectory.finish]
            if not active:
                break
            prompts = [render_chat(tokenizer, e.messages) for e in active]
            outputs = engine.generate(
                prompts,
                n=1,
                temperature=temperature,
                top_p=top_p,
                max_new_tokens=max_new_tokens,
                stop=STOP,
                seed=None if seed is None else seed + turn,
            )
            left = max_turns - turn - 1
            for episode, prompt, (completion,) in zip(active, prompts, outputs):
                ended = _advance(episode, prompt, completion, left)
                if ended and progress:
                    progress(1)
        for episode in live:
            if not episode.trajectory.finish:
                episode.trajectory.finish = "turn_budget"
                if progress:
                    progress(1)
    finally:
        for episode in live:
            episode.lease.release()
    for episode in live:
        _score(episode, replicas)
    groups: dict[int, list[Trajectory]] = {}
    for episode in live:
        groups.setdefault(id(episode.task), []).append(episode.trajectory)
    return [groups[id(task)] for task in tasks]


def _advance(episode: _Live, prompt: str, completion: Completion, turns_left: int) -> bool:
    """Apply one turn; whether the trajectory ended."""
    text = close_action(completion.text)
    action = parse_action(text)
    wording = templates()["agent"]
    observation, result = None, None
    if action.kind == "submit":
        episode.trajectory.submission = action.sql
        episode.trajectory.finish = "submitted"
    elif action.kind == "sql":
        observation, result = observe(episode.lease, action.sql, turns_left)
    else:
        observation = wording["malformed"].format(turns_left=turns_left)
    episode.trajectory.turns.append(Turn(prompt, completion, action, observation, result))
    if observation is not None:
        episode.messages += [
            {"role": "assistant", "content": text},
            {"role": "user", "content": observation},
        ]
    return bool(episode.trajectory.finish)


def observe(lease: Lease, sql: str, turns_left: int) -> tuple[str, ExecResult | None]:
    """Run an action's SQL on the trajectory's view: the user message that reports it, and
    the last statement's result."""
    wording = templates()["agent"]
    results = lease.execute_script(sql)
    text = render_observation(results[-1]) if results else "Error: empty SQL"
    last_call = wording["last_call"] if turns_left == 1 else ""
    message = wording["observation"].format(result=text, turns_left=turns_left, last_call=last_call)
    return message, (results[-1] if results else None)


def _score(episode: _Live, replicas: Replicas) -> None:
    trajectory = episode.trajectory
    if trajectory.submission is None:
        trajectory.verdict = "no submission"
        return
    score = episode.task.score(trajectory.submission, replicas)
    trajectory.passed, trajectory.verdict = score.passed, score.reason
    trajectory.submitted_result, trajectory.expected_result = score.got, score.expected
    trajectory.reward = 1.0 if score.passed else 0.0


def render_chat(tokenizer, messages: list[dict]) -> str:
    """The chat-formatted prompt of `messages`, ending where the assistant speaks next."""
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
