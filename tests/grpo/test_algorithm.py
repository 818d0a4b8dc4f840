"""ACE-SQL's formulas against numbers computed by hand."""

import json
import math

import pytest
import torch

from acesql.errors import DataError
from acesql.grpo import (
    EmpiricalPool,
    dense_retriever_reward,
    generator_reward,
    generator_weight,
    group_advantages,
    grpo_loss,
    k3_kl,
    length_penalty,
    pcgrad,
    pcgrad_,
    replay,
    retriever_reward,
    schedule_horizon,
)

# ----------------------------------------------------------------- length penalty, rewards


@pytest.mark.parametrize(
    "n, expected",
    [(0, 0.0), (512, 0.0), (513, 0.5 / 1536), (1280, 0.25), (2048, 0.5), (9999, 0.5)],
)
def test_length_penalty_defaults(n, expected):
    assert length_penalty(n) == pytest.approx(expected)


def test_length_penalty_custom_bounds():
    # 0.3 * clip((150 - 100) / (200 - 100), 0, 1) = 0.15
    assert length_penalty(150, low=100, high=200, max_penalty=0.3) == pytest.approx(0.15)
    with pytest.raises(ValueError, match="low < high"):
        length_penalty(10, low=5, high=5)


def test_generator_reward_gated_by_match():
    assert generator_reward(True, 100) == 1.0
    assert generator_reward(True, 1280) == pytest.approx(0.75)
    assert generator_reward(False, 10) == 0.0
    assert generator_reward(False, 5000) == 0.0  # unmatched: 0 whatever the length


def test_retriever_reward_sparse():
    targets = [{"t.a", "t.b"}, {"t.c"}]
    assert retriever_reward(["t.b", "t.a"], targets, 20) == 1.0
    assert retriever_reward({"t.c"}, targets, 1280) == pytest.approx(0.75)
    assert retriever_reward({"t.a"}, targets, 20) == 0.0  # a subset is not the set
    assert retriever_reward({"t.a", "t.b", "t.c"}, targets, 20) == 0.0
    assert retriever_reward(None, targets, 20) == 0.0  # unparsed
    assert retriever_reward({"t.a"}, [], 20) == 0.0  # no target yet


def test_dense_reward_by_hand():
    support = [{"t.a", "t.b"}, {"t.a", "t.c", "t.d"}]
    # coverage: max(2/2, 1/3) = 1; union {a,b,c,d}; noise |{x}| / 3 = 1/3
    assert dense_retriever_reward({"t.a", "t.b", "t.x"}, support) == pytest.approx(1 - 0.5 / 3)
    # coverage: max(1/2, 2/3) = 2/3; noise 0
    assert dense_retriever_reward({"t.c", "t.d"}, support) == pytest.approx(2 / 3)
    # coverage 0, noise 1
    assert dense_retriever_reward({"t.z"}, support) == pytest.approx(-0.5)
    assert dense_retriever_reward(set(), support) == 0.0
    assert dense_retriever_reward({"t.a"}, []) == 0.0


# ----------------------------------------------------------------------------- advantages


def test_group_advantages_by_hand():
    # rewards [1, 0, 0, 0]: mean 0.25, sample std sqrt(0.75 / 3) = 0.5
    adv = group_advantages([1.0, 0.0, 0.0, 0.0], eps=0.0)
    assert adv.tolist() == pytest.approx([1.5, -0.5, -0.5, -0.5])
    adv = group_advantages([0.75, 0.0], eps=1e-6)  # std 0.5303
    assert adv.tolist() == pytest.approx([0.7071, -0.7071], abs=1e-4)


def test_equal_rewards_give_zero_advantages():
    assert group_advantages([0.0, 0.0, 0.0]).tolist() == [0.0, 0.0, 0.0]
    assert group_advantages([1.0, 1.0]).tolist() == [0.0, 0.0]
    assert group_advantages([0.5]).tolist() == [0.0]


# ----------------------------------------------------------------------------------- loss


def test_k3_by_hand():
    # logp = log 0.5, ref = log 0.25: delta = -log 2; exp(delta) - delta - 1 = 0.5 + 0.6931 - 1
    kl = k3_kl(torch.tensor([math.log(0.5)]), torch.tensor([math.log(0.25)]))
    assert kl.item() == pytest.approx(0.5 + math.log(2) - 1)
    assert k3_kl(torch.tensor([-1.0]), torch.tensor([-1.0])).item() == 0.0


def test_grpo_loss_by_hand():
    # two outputs; output 0 has 2 tokens (A = +1), output 1 has 1 token (A = -1) and a pad
    logp = torch.tensor([[math.log(0.6), math.log(0.3)], [math.log(0.9), 0.0]])
    old = torch.tensor([[math.log(0.5), math.log(0.3)], [math.log(0.5), 0.0]])
    mask = torch.tensor([[1, 1], [1, 0]])
    adv = torch.tensor([1.0, -1.0])
    loss, stats = grpo_loss(logp, old, adv, mask, ref_logp=None, clip_eps=0.2, beta=0.0)
    # ratios: 1.2, 1.0, 1.8; surrogates: min(1.2, 1.2)=1.2, 1.0, min(-1.8, -1.2)=-1.8
    # loss = -(1.2 + 1.0 - 1.8) / 3
    assert loss.item() == pytest.approx(-(1.2 + 1.0 - 1.8) / 3)
    assert stats.n_tokens == 3
    assert stats.clip_fraction == pytest.approx(0.0)  # the unclipped branch was the min each time
    # A = +1 with ratio 1.5 takes the clipped branch: min(1.5, 1.2) = 1.2
    loss2, stats2 = grpo_loss(
        torch.tensor([[math.log(0.75)]]),
        torch.tensor([[math.log(0.5)]]),
        torch.tensor([1.0]),
        torch.tensor([[1]]),
    )
    assert loss2.item() == pytest.approx(-1.2)
    assert stats2.clip_fraction == 1.0


def test_grpo_loss_kl_term_and_gradient():
    logp = torch.tensor([[math.log(0.5), math.log(0.5)]], requires_grad=True)
    ref = torch.tensor([[math.log(0.25), math.log(0.5)]])
    loss, stats = grpo_loss(
        logp, logp.detach(), torch.tensor([0.0]), torch.ones(1, 2), ref, beta=0.1
    )
    k = 0.5 + math.log(2) - 1
    assert loss.item() == pytest.approx(0.1 * k / 2)
    assert stats.kl == pytest.approx(k / 2)
    loss.backward()
    # d/dlogp of beta * (exp(ref - logp) - (ref - logp) - 1) / 2 = beta * (1 - exp(ref - logp)) / 2
    assert logp.grad.tolist()[0] == pytest.approx([0.1 * (1 - 0.5) / 2, 0.0])


def test_grpo_loss_on_policy_gradient_is_policy_gradient():
    # ratio 1 at old = logp: d loss / d logp_t = -A / n_tokens for every unmasked token
    logp = torch.tensor([[-1.0, -2.0, -3.0]], requires_grad=True)
    loss, _ = grpo_loss(logp, logp.detach(), torch.tensor([2.0]), torch.tensor([[1, 1, 0]]))
    loss.backward()
    assert logp.grad.tolist()[0] == pytest.approx([-1.0, -1.0, 0.0])


# ------------------------------------------------------------------------------- schedule


def test_generator_weight():
    assert [generator_weight(s, 10) for s in (1, 2, 6, 11, 50)] == [0.0, 0.1, 0.5, 1.0, 1.0]
    assert generator_weight(1, 0) == 1.0  # schedule off
    assert schedule_horizon(200) == 50
    with pytest.raises(ValueError):
        generator_weight(0, 10)


# --------------------------------------------------------------------------------- pcgrad


def test_pcgrad_global_two_vectors_by_hand():
    g_ret, g_gen = torch.tensor([1.0, 0.0]), torch.tensor([-1.0, 1.0])
    # d = -1; g_ret' = [1,0] + 1/2 [-1,1] = [0.5, 0.5]; g_gen' = [-1,1] + [1,0] = [0, 1]
    out, stats = pcgrad([g_ret], [g_gen], granularity="global")
    assert out[0].tolist() == pytest.approx([0.5, 1.5])
    assert stats.conflict_ratio == 1.0
    assert stats.cosine == pytest.approx(-1 / math.sqrt(2))
    assert (stats.norm_ret, stats.norm_gen) == pytest.approx((1.0, math.sqrt(2)))
    assert g_gen.tolist() == [-1.0, 1.0]  # inputs untouched


def test_pcgrad_projections_are_orthogonal_to_the_originals():
    g_ret, g_gen = torch.tensor([3.0, 1.0, -2.0]), torch.tensor([-1.0, 2.0, 1.0])
    # d = -3, |g_ret|^2 = 14, |g_gen|^2 = 6:
    # g_ret' = g_ret + 3/6 g_gen = (5/2, 2, -3/2)        . g_gen = -5/2 + 4 - 3/2 = 0
    # g_gen' = g_gen + 3/14 g_ret = (-5/14, 31/14, 8/14)  . g_ret = (-15 + 31 - 16) / 14 = 0
    # sum = (30/14, 59/14, -13/14): it keeps 14 - 9/6 = 25/2 along g_ret, 6 - 9/14 = 75/14
    # along g_gen, where each projection loses its conflict with the other's original
    out, stats = pcgrad([g_ret], [g_gen])
    assert out[0].tolist() == pytest.approx([30 / 14, 59 / 14, -13 / 14])
    assert float(out[0] @ g_ret) == pytest.approx(25 / 2)
    assert float(out[0] @ g_gen) == pytest.approx(75 / 14)
    assert (stats.n_conflicts, stats.cosine) == (1, pytest.approx(-3 / math.sqrt(14 * 6)))


def test_pcgrad_tensor_versus_global_granularity():
    # tensor 0 conflicts (dot -1), tensor 1 agrees (dot +4): global dot +3, no projection
    g_ret = [torch.tensor([1.0, 0.0]), torch.tensor([2.0])]
    g_gen = [torch.tensor([-1.0, 1.0]), torch.tensor([2.0])]
    out_t, st_t = pcgrad(g_ret, g_gen, "tensor")
    assert out_t[0].tolist() == pytest.approx([0.5, 1.5])  # projected
    assert out_t[1].tolist() == pytest.approx([4.0])  # summed
    assert st_t.conflict_ratio == 0.5 and st_t.n_conflicts == 1
    out_g, st_g = pcgrad(g_ret, g_gen, "global")
    assert [t.tolist() for t in out_g] == [[0.0, 1.0], [4.0]]  # plain sum
    assert st_g.conflict_ratio == 0.0
    # raw cosine over the whole gradient: 3 / (sqrt(5) * sqrt(6))
    assert st_g.cosine == pytest.approx(3 / math.sqrt(30))


def test_pcgrad_global_conflict_projects_every_tensor():
    g_ret = [torch.tensor([1.0]), torch.tensor([0.0])]
    g_gen = [torch.tensor([-1.0]), torch.tensor([1.0])]
    # global: d = -1, |r|^2 = 1, |g|^2 = 2 -> 2 * g_ret + 1.5 * g_gen
    out, stats = pcgrad(g_ret, g_gen, "global")
    assert [t.item() for t in out] == pytest.approx([0.5, 1.5])
    assert stats.conflict_ratio == 1.0


def test_pcgrad_in_place_and_plain_sum():
    g_ret, g_gen = [torch.tensor([1.0, 0.0])], [torch.tensor([-1.0, 1.0])]
    stats = pcgrad_(g_ret, g_gen, project=False)
    assert g_gen[0].tolist() == [0.0, 1.0] and stats.conflict_ratio == 1.0
    assert g_ret[0].tolist() == [1.0, 0.0]
    with pytest.raises(ValueError, match="granularity"):
        pcgrad_(g_ret, g_gen, granularity="layer")


def test_pcgrad_zero_generator_gradient_is_the_retriever_gradient():
    out, stats = pcgrad([torch.tensor([1.0, 2.0])], [torch.zeros(2)])
    assert out[0].tolist() == [1.0, 2.0] and stats.conflict_ratio == 0.0
    out, _ = pcgrad([torch.tensor([1.0, 2.0]), None], [None, torch.tensor([3.0])])
    assert [t.tolist() for t in out] == [[1.0, 2.0], [3.0]]


def test_pcgrad_refuses_a_retriever_gradient_with_no_generator_tensor():
    # the combined gradient is written into g_gen: with None there, g_ret would be lost
    with pytest.raises(ValueError, match=r"positions \[1\]"):
        pcgrad_([torch.ones(1), torch.ones(2)], [torch.ones(1), None])
    # None in both roles (a frozen parameter) is skipped; a generator-only tensor is kept
    g_gen = [None, torch.tensor([3.0]), torch.tensor([1.0, 0.0])]
    stats = pcgrad_([None, None, torch.tensor([-1.0, 1.0])], g_gen)
    # d = -1, |r|^2 = 2, |g|^2 = 1: (1 + 1/2) [-1, 1] + (1 + 1) [1, 0] = [0.5, 1.5]
    assert g_gen[0] is None and g_gen[1].tolist() == [3.0]
    assert g_gen[2].tolist() == pytest.approx([0.5, 1.5])
    # the generator-only tensor counts in its norm (9 + 1) but not as a compared tensor
    assert (stats.n_tensors, stats.conflict_ratio) == (1, 1.0)
    assert (stats.norm_ret, stats.norm_gen) == pytest.approx((math.sqrt(2), math.sqrt(10)))
    assert stats.cosine == pytest.approx(-1 / math.sqrt(20))


# ----------------------------------------------------------------------------------- pool

A, B, C = ["t.a"], ["t.a", "t.b"], ["t.c"]


def test_pool_three_step_replay_by_hand():
    events = [
        {"question": "q", "matched": [B, B, A]},  # seed: B 2, A 1
        {"question": "q", "matched": [A, A]},  # B 1, A 0.5 + 2 = 2.5
        {"question": "q", "matched": [C, B]},  # B 0.5 + 1, A 1.25, C 1
    ]
    pool = replay(events, gamma=0.5)
    w = pool.weights("q")
    assert w == {frozenset(B): 1.5, frozenset(A): 1.25, frozenset(C): 1.0}
    assert pool.targets("q") == [frozenset(B)]
    # after step 2 the target was A
    assert replay(events[:2]).targets("q") == [frozenset(A)]
    assert replay(events[:1]).targets("q") == [frozenset(B)]


def test_pool_ties_are_all_targets_and_gamma_matters():
    pool = EmpiricalPool(gamma=1.0)
    pool.seed("q", [A, B])
    assert pool.targets("q") == [frozenset(A), frozenset(B)]
    pool.update("q", [])
    assert pool.weights("q") == {frozenset(A): 1.0, frozenset(B): 1.0}
    pool0 = EmpiricalPool(gamma=0.0)
    pool0.seed("q", [A, A])
    pool0.update("q", [C])
    assert pool0.targets("q") == [frozenset(C)]
    assert EmpiricalPool().targets("unknown") == []


def test_pool_update_returns_the_previous_targets():
    pool = EmpiricalPool()
    pool.seed("q", [A])
    before = pool.update("q", [B, B])
    assert before == [frozenset(A)] and pool.targets("q") == [frozenset(B)]


def test_pool_save_load_round_trip_is_canonical(tmp_path):
    pool = replay(
        [{"question": "q2", "matched": [["t.b", "t.a"], C]}, {"question": "q1", "matched": [A]}]
    )
    path = tmp_path / "pool.json"
    pool.save(path)
    again = EmpiricalPool.load(path)
    assert again.to_dict() == pool.to_dict()
    again.save(tmp_path / "pool2.json")
    assert path.read_bytes() == (tmp_path / "pool2.json").read_bytes()
    data = json.loads(path.read_text())
    assert list(data["questions"]) == ["q1", "q2"]
    assert data["questions"]["q2"]["weights"] == [[["t.a", "t.b"], 1.0], [["t.c"], 1.0]]
    assert pool.stats() == {"questions": 2, "with_target": 2, "distinct_sets": 3, "tied_targets": 1}


def test_pool_load_errors(tmp_path):
    with pytest.raises(DataError, match="not found"):
        EmpiricalPool.load(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(DataError, match="not valid JSON"):
        EmpiricalPool.load(bad)
    bad.write_text('{"gamma": 0.5}')
    with pytest.raises(DataError, match="not an empirical pool"):
        EmpiricalPool.load(bad)
    with pytest.raises(DataError, match="event 1"):
        replay([{"question": "q"}])
    with pytest.raises(ValueError, match="gamma"):
        EmpiricalPool(gamma=2)
