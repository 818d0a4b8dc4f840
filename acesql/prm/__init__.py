"""Reward-SQL's process reward: step labels from execution, the trajectory score model, and
the inverse-entropy-weighted process reward of a Chain-of-CTE output."""
