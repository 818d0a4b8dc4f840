"""Reward-SQL's process reward: Monte Carlo step labels, inverse-entropy weights, R_proc."""

from __future__ import annotations

import pytest

from acesql.data.loaders import load_dataset
from acesql.models.engine import Completion
from acesql.prm.labels import label_steps
from acesql.prm.reward import inverse_entropy_weights, process_reward, step_entropies
from acesql.sql.batch_executor import BatchExecutor


def chain(gold: str, final: str) -> str:
    return f"WITH\n-- step: the answer\nstep1 AS ({gold})\n-- final: it\n{final}"


class Scripted:
    """Retriever: the gold columns. Sampled chains: the gold as one step then its rows (right),
    the same step then no rows (wrong), and a query without steps (malformed). Continuations
    of a prefix: one right, one wrong."""

    def __init__(self, examples):
        self.examples, self.calls = examples, []

    def generate(self, prompts, n=1, **kw):
        out = []
        for p in prompts:
            ex = next(e for e in self.examples if e.question in p)
            if "schema linking" in p:
                texts = ["```\n[" + ", ".join(ex.gold_columns) + "]\n```"] * n
            elif p.rstrip().endswith(")"):  # a prefix to continue
                self.calls.append(("continue", n))
                texts = [
                    "\n-- final: it\nSELECT * FROM step1\n```",
                    "\n-- final: none\nSELECT * FROM step1 LIMIT 0\n```",
                ][:n]
            else:
                self.calls.append(("sample", n))
                texts = [
                    "```sql\n" + chain(ex.sql, "SELECT * FROM step1") + "\n```",
                    "```sql\n" + chain(ex.sql, "SELECT * FROM step1 LIMIT 0") + "\n```",
                    "```sql\nSELECT 1\n```",
                ][:n]
            out.append([Completion(t, [1], [-0.1], "stop") for t in texts])
        return out


def test_step_labels_back_up_every_leaf_under_a_prefix(synth_dir, tiny_model_dir):
    from acesql.models.base_model import load_tokenizer
    from acesql.models.prompts import PromptBuilder

    examples = [
        e
        for e in load_dataset(synth_dir, "synth", "train").examples
        if e.unusable is None and ";" not in e.sql
    ][:2]
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
