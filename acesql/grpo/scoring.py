"""From one GRPO step's rollouts to scored sequences: targets, pool update, rewards, advantages.

    rollouts -> retriever targets S*(q) from the pool as it stood -> pool update (every
    process's matched sets, in question order) -> rewards per role -> group advantages
    -> one `ScoredSequence` per sampled output

The order is the authors': the retriever is scored against the pool *before* this step's
update, so a retriever sample is never rewarded for a set that only this step's generator
samples put there. The rewards are `acesql.grpo.rewards`'s; with `generator_reward: process`
the generator's reward is R_out + R_proc from a frozen process reward model
(`acesql.prm.select.ProcessScorer`), 0 process reward for an output that is not a chain.
"""

from __future__ import annotations

from acesql.data.schemas import SchemaCache, gold_columns
from acesql.distributed import SINGLE, Dist
from acesql.errors import SqlParseError
from acesql.grpo.advantages import group_advantages
from acesql.grpo.pool import EmpiricalPool
from acesql.grpo.rewards import ROLES, dense_retriever_reward, generator_reward, retriever_reward
from acesql.grpo.rollout import QuestionRollout
from acesql.grpo.update import ScoredSequence
from acesql.models.prompts import PromptBuilder

Rewards = dict[str, list[list[float]]]  # role -> one list per question, one reward per sample


class StepScorer:
    """Scores a step's rollouts for both roles under the `grpo` section `cfg`."""

    def __init__(
        self,
        cfg,
        schemas: SchemaCache,
        prompts: PromptBuilder,
        tokenizer,
        *,
        dist: Dist = SINGLE,
        process=None,
    ):
        self.cfg, self.schemas, self.prompts, self.tokenizer = cfg, schemas, prompts, tokenizer
        self.dist = dist
        self.process = process  # a ProcessScorer with `generator_reward: process`
        self._gold_sets: dict[str, frozenset[str] | None] = {}

    def score(
        self, rollouts: list[QuestionRollout], pool: EmpiricalPool
    ) -> tuple[Rewards, dict[str, list[ScoredSequence]], dict]:
        """(rewards, sequences per role, logged numbers); updates `pool` in place."""
        targets = {r.key: self.targets(r, pool) for r in rollouts}
        dense = self.cfg.retriever_reward == "dense"
        support = {r.key: self.support(r, pool) for r in rollouts} if dense else {}
        stats = self.update_pool(rollouts, targets, pool)
        rewards = self.rewards(rollouts, targets, support)
        seqs, advantage_stats = self.sequences(rollouts, rewards)
        return rewards, seqs, stats | advantage_stats

    def update_pool(
        self, rollouts: list[QuestionRollout], targets: dict, pool: EmpiricalPool
    ) -> dict:
        """Feed every process's matched sets to the pool, in question order, on every process."""
        changes, non_gold, matched = 0, 0, 0
        ret_hits, ret_total = 0, 0
        fed = [(r.key, r.matched_sets) for r in rollouts]
        for key, sets in (item for part in self.dist.gather_objects(fed) for item in part):
            if key in pool:
                before = pool.update(key, sets)
            else:
                before = []
                pool.seed(key, sets)
            changes += before != pool.targets(key)
        for r in rollouts:
            gold = self.gold(r)
            for s in r.matched_sets:
                matched += 1
                non_gold += gold is not None and s != gold
            for s in r.retrieved:
                ret_total += 1
                ret_hits += s is not None and any(s == t for t in targets[r.key])
        non_gold, matched, ret_hits, ret_total = self.dist.sum(
            [non_gold, matched, ret_hits, ret_total]
        )
        stats = pool.stats()
        return {
            "pool/with_target": stats["with_target"],
            "pool/distinct_sets": stats["distinct_sets"],
            "pool/target_changes": changes,
            "generator/non_gold_ratio": non_gold / matched if matched else 0.0,
            "retriever/match_rate": ret_hits / max(ret_total, 1),
        }

    def gold(self, r: QuestionRollout) -> frozenset[str] | None:
        """The gold column set of a question, resolved once per run."""
        if r.key not in self._gold_sets:
            try:
                self._gold_sets[r.key] = gold_columns(r.example, self.schemas(r.example))
            except SqlParseError:  # a gold query sqlglot cannot resolve has no gold set
                self._gold_sets[r.key] = None
        return self._gold_sets[r.key]

    def targets(self, r: QuestionRollout, pool: EmpiricalPool) -> list[frozenset[str]]:
        """S*(q): the pool's targets, or the gold set with `retriever_target: gold`."""
        if self.cfg.retriever_target == "gold":
            gold = self.gold(r)
            return [gold] if gold else []
        return pool.targets(r.key)

    def support(self, r: QuestionRollout, pool: EmpiricalPool) -> list[frozenset[str]]:
        """The dense reward's sets: the pool's support, or the gold target's one set."""
        if self.cfg.retriever_target == "empirical":
            return pool.support(r.key)
        return self.targets(r, pool)

    def rewards(self, rollouts: list[QuestionRollout], targets: dict, support: dict) -> Rewards:
        """Each output's reward: the generator's R_out (plus R_proc with the process reward,
        0 for an output that is not a well-formed chain), the retriever's sparse or dense one."""
        lp = self.cfg.length_penalty.model_dump()
        out: Rewards = {"retriever": [], "generator": []}
        for r in rollouts:
            rewards = [
                generator_reward(m, len(c.token_ids), **lp) for m, c in zip(r.matched, r.generator)
            ]
            if self.process is not None:
                ex = r.example
                schema = self.schemas(ex)
                schema_text = self.prompts.schema_text(schema, r.schema_columns)
                process = self.process.rewards(
                    ex.question, schema_text, ex.evidence, ex.db_path, r.generator, schema=schema
                )
                rewards = [o + (p or 0.0) for o, p in zip(rewards, process)]
            out["generator"].append(rewards)
            if self.cfg.retriever_reward == "dense":
                out["retriever"].append(
                    [dense_retriever_reward(s, support[r.key]) for s in r.retrieved]
                )
            else:
                out["retriever"].append(
                    [
                        retriever_reward(s, targets[r.key], len(c.token_ids), **lp)
                        for s, c in zip(r.retrieved, r.retriever)
                    ]
                )
        return out

    def sequences(
        self, rollouts: list[QuestionRollout], rewards: Rewards
    ) -> tuple[dict[str, list[ScoredSequence]], dict]:
        """Group advantages per question and role; one sequence per output with tokens.

        With `skip_flat_groups` a group whose rewards are all equal is left out (it would
        carry only the KL term)."""
        seqs: dict[str, list[ScoredSequence]] = {"retriever": [], "generator": []}
        stats = {}
        cache: dict[str, list[int]] = {}

        def ids(text: str) -> list[int]:
            if text not in cache:
                cache[text] = self.tokenizer(text, add_special_tokens=False).input_ids
            return cache[text]

        for role in ROLES:
            flat = 0
            for r, group in zip(rollouts, rewards[role]):
                adv = group_advantages(group).tolist()
                if all(a == 0 for a in adv):
                    flat += 1
                    if self.cfg.skip_flat_groups:
                        continue
                prompt = r.retriever_prompt if role == "retriever" else r.generator_prompt
                outputs = r.retriever if role == "retriever" else r.generator
                for c, a in zip(outputs, adv):
                    if c.token_ids:
                        seqs[role].append(ScoredSequence(ids(prompt), list(c.token_ids), a))
            flat, groups = self.dist.sum([flat, len(rollouts)])
            stats[f"{role}/flat_groups"] = flat / max(groups, 1)
        return seqs, stats
