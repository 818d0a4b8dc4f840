"""Curves of RL runs: GRPO's reward and match rate per role and validation EX; the
agent's reward, success and turns per step."""

from __future__ import annotations


def curves_figure(history: list[dict]):
    """A three-panel figure from the per-step records of `GrpoTrainer` (no display needed)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(13, 3.8))
    axes = fig.subplots(1, 3)
    steps = [r["step"] for r in history]
    for ax, what, title in (
        (axes[0], "reward_mean", "mean reward"),
        (axes[1], "match_rate", "match rate"),
    ):
        for role, color in (("retriever", "tab:blue"), ("generator", "tab:orange")):
            ax.plot(steps, [r[f"{role}/{what}"] for r in history], label=role, color=color)
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.set_ylim(-0.02, 1.02)
        ax.legend()
    val = [(r["step"], r["val/pipeline_ex"]) for r in history if "val/pipeline_ex" in r]
    ax = axes[2]
    if val:
        ax.plot(*zip(*val), marker="o", label="pipeline EX")
        gen = [(r["step"], r["val/generator_ex"]) for r in history if "val/generator_ex" in r]
        ax.plot(*zip(*gen), marker="s", label="generator ability")
        ax.legend()
    ax.plot(steps, [r["lambda"] for r in history], color="grey", ls=":", label="lambda")
    ax.set_title("validation (greedy) and lambda")
    ax.set_xlabel("step")
    fig.tight_layout()
    return fig


def agent_curves_figure(history: list[dict]):
    """A three-panel figure from the per-step records of `AgentGrpoTrainer`: reward, success
    and submission rate of the step's trajectories; turns a trajectory; KL to the start."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(13, 3.8))
    axes = fig.subplots(1, 3)
    steps = list(range(len(history)))
    rewards = [r["reward_mean"] for r in history]
    for key, label in (("success", "solved"), ("submitted", "submitted")):
        axes[0].plot(steps, [r[key] for r in history], marker=".", alpha=0.6, label=label)
    # a step holds a few tasks, so its reward says more about them than about the policy
    window = [
        sum(rewards[max(0, i - 4) : i + 1]) / len(rewards[max(0, i - 4) : i + 1]) for i in steps
    ]
    axes[0].plot(steps, window, color="black", label="mean reward, last 5 steps")
    axes[0].set_ylim(-0.02, 1.02)
    axes[0].set_title("trajectories of the step")
    axes[0].legend()
    axes[1].plot(steps, [r["turns_mean"] for r in history], marker=".")
    axes[1].set_title("turns a trajectory")
    updated = [(i, r["kl"]) for i, r in zip(steps, history) if "kl" in r]
    if updated:
        axes[2].plot(*zip(*updated), marker="o", ls="")
    axes[2].set_title("KL to the starting model (k3), steps that updated")
    for ax in axes:
        ax.set_xlabel("step")
    fig.tight_layout()
    return fig
