"""SAC and REDQ (plugins/sac): losses against hand computations, the squashed log-density against a
numerical one, the temperature's direction, REDQ's random target subset, the numpy actor against
torch, checkpoints, export, and the plugin's conformance check. Tiny networks: milliseconds each."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch

from mqttrl.plugin import ActorContext, SampleBatch
from mqttrl_plugins.sac import make_forward, make_learner
from mqttrl_plugins.sac.actor import UNIT_ACTION, SACActor
from mqttrl_plugins.sac.common import PRESETS, SACParams, sample_spec, to_env_action
from mqttrl_plugins.sac.export import export_module, weights_from_checkpoint
from mqttrl_plugins.sac.losses import actor_loss, alpha_loss, critic_loss, soft_target, squashed_log_prob

OBS = gym.spaces.Box(-5.0, 5.0, (3,), np.float32)
ACT = gym.spaces.Box(np.array([-2.0, 0.0], np.float32), np.array([2.0, 1.0], np.float32))


def tiny(**kw) -> SACParams:
    return SACParams(**{"hidden": [8, 8], "batch_size": 16, "learning_starts": 32, "buffer_size": 1000, **kw})


def batch_of(n: int, seed: int = 0) -> SampleBatch:
    rng = np.random.default_rng(seed)
    arrays = {
        "obs": rng.normal(size=(n, 3)).astype(np.float32),
        "next_obs": rng.normal(size=(n, 3)).astype(np.float32),
        "action": rng.uniform(-1, 1, (n, 2)).astype(np.float32),
        "reward": rng.normal(size=n).astype(np.float32),
        "discount": np.where(rng.random(n) < 0.1, 0.0, 0.99).astype(np.float32),
    }
    return SampleBatch("r", "w", 0, 0, n, arrays)


def fed_learner(params: SACParams, n: int = 64, seed: int = 0):
    learner = make_learner(params, OBS, ACT, "cpu", seed)
    learner.add(batch_of(n, seed))
    return learner


# ---- losses by hand


def test_sac_target_and_critic_loss_by_hand():
    reward, discount = torch.tensor([1.0, -0.5]), torch.tensor([0.9, 0.0])
    next_q = torch.tensor([[2.0, 4.0], [3.0, 1.0]])  # both target critics (M = N = 2), 2 samples
    next_logp, alpha = torch.tensor([0.5, -1.0]), torch.tensor(0.2)
    y = soft_target(reward, discount, next_q, next_logp, alpha)
    # y0 = 1 + 0.9 * (min(2, 3) - 0.2 * 0.5) = 2.71; y1 = -0.5 (terminated: no bootstrap)
    assert y.tolist() == pytest.approx([2.71, -0.5])
    q = torch.tensor([[2.0, 0.0], [3.0, -1.5]])
    # critic 0: ((2 - 2.71)^2 + 0.5^2) / 2 = 0.37705; critic 1: (0.29^2 + 1^2) / 2 = 0.54205
    assert float(critic_loss(q, y)) == pytest.approx(0.37705 + 0.54205)


def test_redq_learner_targets_the_min_of_its_drawn_subset_by_hand():
    """Critics that output constants: the learner's target is r + d * (min over the drawn subset - alpha
    logp), with alpha ~ 0 here, and its critic loss the sum of each critic's mean squared error."""
    p = tiny(critics=3, target_subset=2, autotune=False, alpha=1e-9)
    learner = fed_learner(p)
    with torch.no_grad():
        for net, consts in ((learner.target, [5.0, 1.0, 3.0]), (learner.critics, [0.0, 2.0, 4.0])):
            last = net.depth - 1
            getattr(net, f"w{last}").zero_()
            getattr(net, f"b{last}").copy_(torch.tensor(consts).view(3, 1, 1))
    b = {k: torch.from_numpy(v) for k, v in learner.replay.sample(np.arange(4)).items()}
    r, d = b["reward"].numpy().astype(np.float64), b["discount"].numpy().astype(np.float64)
    y = learner.critic_targets(b, torch.tensor([0, 2])).numpy()
    np.testing.assert_allclose(y, r + d * 3.0, rtol=1e-5, atol=1e-5)  # min(5, 3), critic 1 (=1) not drawn
    y_all = learner.critic_targets(b, torch.tensor([0, 1, 2])).numpy()
    np.testing.assert_allclose(y_all, r + d * 1.0, rtol=1e-5, atol=1e-5)
    q = learner.critics(b["obs"], b["action"]).detach()
    want = sum(np.mean((c - y) ** 2) for c in (0.0, 2.0, 4.0))
    assert float(critic_loss(q, torch.from_numpy(y))) == pytest.approx(want, rel=1e-5)


def test_redq_draws_m_distinct_critics_uniformly():
    learner = fed_learner(tiny(critics=10, target_subset=2))
    draws = [learner.target_subset().tolist() for _ in range(4000)]
    assert all(len(set(d)) == 2 and all(0 <= i < 10 for i in d) for d in draws)
    # the expected minimum of 2 of 0..9 drawn without replacement is 120 / 45 = 2.667 (SAC's min of all: 0)
    assert np.mean([min(d) for d in draws]) == pytest.approx(120 / 45, abs=0.1)
    counts = np.bincount(np.concatenate(draws), minlength=10)
    assert counts.min() > 0.8 * counts.mean()
    sac = fed_learner(tiny())
    assert sac.target_subset().tolist() == [0, 1]


def test_actor_loss_min_for_sac_and_mean_for_redq_by_hand():
    q_pi = torch.tensor([[1.0, 4.0], [3.0, 2.0], [5.0, 0.0]])  # 3 critics, 2 samples
    logp, alpha = torch.tensor([0.5, -1.0]), torch.tensor(0.1)
    # min: ((0.05 - 1) + (-0.1 - 0)) / 2 = -0.525; mean: ((0.05 - 3) + (-0.1 - 2)) / 2 = -2.525
    assert float(actor_loss(q_pi, logp, alpha, "min")) == pytest.approx(-0.525)
    assert float(actor_loss(q_pi, logp, alpha, "mean")) == pytest.approx(-2.525)


def test_the_presets_are_sac_and_redq():
    assert SACParams().critics == 2 and SACParams().target_subset == 2 and SACParams().utd == 1.0
    assert PRESETS["redq"] == {"critics": 10, "target_subset": 2, "utd": 20.0, "policy_every": 0, "policy_q": "mean"}
    with pytest.raises(Exception, match="target_subset"):
        SACParams(critics=2, target_subset=3)


def test_redq_updates_its_policy_once_per_env_step_whatever_g_a_config_sets():
    """The "redq" preset's policy period follows the config's own utd (G = 5: every 5 critic updates);
    plain SAC keeps one policy update per critic update, and an explicit policy_every wins."""
    from mqttrl.config import with_preset

    def redq(**data):
        return SACParams(**with_preset(SACParams, {"preset": "redq", **data}, "algorithm"))

    assert redq().policy_period == 20
    assert redq(utd=5.0).policy_period == 5
    assert redq(utd=5.0, policy_every=2).policy_period == 2
    assert SACParams(utd=5.0).policy_period == 1


# ---- the squashed Gaussian


def _normal_cdf(x: float) -> float:
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def test_squashed_log_prob_matches_a_numerical_density():
    """log pi(tanh u) against the probability of a small interval around a = tanh(u) under the
    pushforward, P(a - h < tanh U < a + h) / 2h per dimension (Gaussian CDFs only, no formula of ours)."""
    mean, log_std = np.array([0.3, -1.2]), np.array([-0.4, 0.5])
    u = np.array([[0.1, -2.0], [1.5, 0.7], [-0.9, -0.2]])
    got = squashed_log_prob(torch.tensor(u, dtype=torch.float64), torch.tensor(mean), torch.tensor(log_std)).numpy()
    h = 1e-6
    for row, want in zip(u, got):
        log_density = 0.0
        for a, m, s in zip(np.tanh(row), mean, np.exp(log_std)):
            lo, hi = (np.arctanh(a - h) - m) / s, (np.arctanh(a + h) - m) / s
            log_density += math.log((_normal_cdf(hi) - _normal_cdf(lo)) / (2 * h))
        assert want == pytest.approx(log_density, abs=1e-4)


def test_squashed_log_prob_is_finite_where_tanh_saturates():
    u = torch.tensor([[12.0], [-15.0]])
    logp = squashed_log_prob(u, torch.zeros(1), torch.zeros(1))
    # direct: log N(u; 0, 1) - log(1 - tanh(u)^2), with 1 - tanh^2 = 4 / (e^u + e^-u)^2 computed in float64
    direct = [
        -0.5 * x * x - 0.5 * math.log(2 * math.pi) - math.log(4 / (math.exp(x) + math.exp(-x)) ** 2)
        for x in (12.0, -15.0)
    ]
    assert torch.isfinite(logp).all()
    assert logp.tolist() == pytest.approx(direct, rel=1e-5)


# ---- the temperature


def test_alpha_loss_gradient_raises_alpha_below_the_entropy_target():
    log_alpha = torch.zeros(1, requires_grad=True)
    alpha_loss(log_alpha, torch.tensor([3.0, 2.0]), target_entropy=-1.0).backward()  # entropy -2.5 < -1
    assert log_alpha.grad.item() < 0  # gradient descent raises log alpha


@pytest.mark.parametrize(("log_std_bias", "direction"), [(-10.0, 1), (0.4, -1)])
def test_temperature_tuning_moves_alpha_towards_the_entropy_target(log_std_bias, direction):
    """A nearly deterministic policy (std e^-5 before the tanh: entropy far below the target -|A| = -2)
    raises alpha; a wide one (std ~0.84: entropy above 0, far above a target of -4) lowers it."""
    learner = fed_learner(tiny(target_entropy=-4.0 if direction < 0 else None))
    with torch.no_grad():
        learner.actor.log_std.weight.zero_()
        learner.actor.log_std.bias.fill_(log_std_bias)
        learner.actor.mean.weight.zero_()
        learner.actor.mean.bias.zero_()
    before = learner.alpha
    for _ in range(10):
        learner.train_step()
    assert (learner.alpha - before) * direction > 0, (before, learner.alpha)


# ---- pacing: utd updates per transition, counted from when learning starts


def test_learner_owes_utd_updates_per_transition_after_learning_starts():
    learner = make_learner(tiny(utd=3.0), OBS, ACT, "cpu", 0)
    learner.add(batch_of(20))
    assert not learner.train_due()  # 20 < learning_starts (32)
    learner.add(batch_of(20, 1))
    steps = 0
    while learner.train_due():
        learner.train_step()
        steps += 1
    assert steps == 3  # only the transition that reached learning_starts owes (utd of them)
    learner.add(batch_of(5, 2))
    while learner.train_due():
        learner.train_step()
        steps += 1
    assert steps == 3 + 15


# ---- the actor and the numpy forward


def test_numpy_actor_equals_torch_within_1e_5():
    learner = fed_learner(tiny(hidden=[32, 16]))
    for _ in range(20):
        learner.train_step()
    tensors, info = learner.export_weights()
    np_fwd = make_forward(learner.params, OBS, ACT, "numpy", 1)
    th_fwd = make_forward(learner.params, OBS, ACT, "torch", 2)
    np_fwd.load_weights(tensors, info)
    th_fwd.load_weights(tensors, info)
    obs = np.random.default_rng(3).normal(0, 3, (64, 3)).astype(np.float32)
    a, b = np_fwd(obs), th_fwd(obs)
    assert set(a) == set(b) == {"action", "mean", "log_std"}
    for k in a:
        np.testing.assert_allclose(a[k], b[k], atol=1e-5, rtol=0)
    assert (a["action"] >= ACT.low).all() and (a["action"] <= ACT.high).all()


def test_actor_explores_uniformly_until_the_learner_trained_then_samples_the_policy():
    p = tiny()
    learner = fed_learner(p)
    actor = SACActor(p, OBS, ACT, ActorContext(num_envs=4, seed=0), make_forward(p, OBS, ACT, "numpy"))
    actor.load_weights(*learner.export_weights())
    obs = np.zeros((4, 3), np.float32)
    uniform = np.concatenate([actor.act(obs)[1][UNIT_ACTION] for _ in range(200)])
    assert uniform.std() == pytest.approx(1 / math.sqrt(3), abs=0.05)  # U(-1, 1), whatever the policy
    learner.train_step()
    with torch.no_grad():  # a policy that is sure: tanh(0.5) in each dim
        learner.actor.log_std.weight.zero_()
        learner.actor.log_std.bias.fill_(-10.0)
        learner.actor.mean.weight.zero_()
        learner.actor.mean.bias.fill_(0.5)
    actor.load_weights(*learner.export_weights())
    actions, extras = actor.act(obs)
    np.testing.assert_allclose(extras[UNIT_ACTION], np.tanh(0.5), atol=0.03)  # std e^-5 before the tanh
    np.testing.assert_allclose(actions, to_env_action(extras[UNIT_ACTION], ACT), atol=1e-6)
    greedy, _ = actor.act(obs[:1], greedy=True)
    np.testing.assert_allclose(greedy[0], [2.0 * np.tanh(0.5), 0.5 + 0.5 * np.tanh(0.5)], atol=1e-5)


def test_actor_records_discount_zero_at_termination_and_gamma_at_truncation():
    p = tiny()
    actor = SACActor(p, OBS, ACT, ActorContext(num_envs=3), make_forward(p, OBS, ACT, "numpy"))
    obs = np.ones((3, 3), np.float32)
    actions, extras = actor.act(obs)
    actor.record(obs, actions, extras, np.array([1.0, 2.0, 3.0]), obs * 2, np.array([0, 1, 0]), np.array([0, 0, 1]))
    out = actor.take()
    np.testing.assert_allclose(out["discount"], [0.99, 0.0, 0.99])
    sample_spec(p, OBS, ACT).validate(out, 3)
    np.testing.assert_allclose(out["action"], extras[UNIT_ACTION])
    assert actor.pending() == 0


# ---- checkpoints, export, conformance


def test_checkpoint_restores_everything_and_gives_the_policy_without_torch_learner():
    learner = fed_learner(tiny(critics=4, target_subset=2))
    for _ in range(5):
        learner.train_step()
    st, meta = learner.state_dict(include_replay=True)
    again = make_learner(learner.params, OBS, ACT, "cpu", 9)
    again.load_state_dict(st, meta)
    assert again.updates == 5 and again.replay.size == learner.replay.size and again.alpha == learner.alpha
    m1, m2 = learner.train_step(), again.train_step()  # same RNG states: the same update
    assert m1["critic_loss"] == pytest.approx(m2["critic_loss"], rel=1e-6)
    tensors, info = weights_from_checkpoint(st, meta)
    want, want_info = learner.export_weights()
    assert set(tensors) == set(want) and info["obs_dim"] == want_info["obs_dim"]


def test_exported_module_gives_the_numpy_forwards_outputs():
    learner = fed_learner(tiny())
    learner.train_step()
    tensors, info = learner.export_weights()
    module = export_module(learner.params, OBS, ACT, tensors, info)
    fwd = make_forward(learner.params, OBS, ACT, "numpy")
    fwd.load_weights(tensors, info)
    obs = np.random.default_rng(0).normal(size=(5, 3)).astype(np.float32)
    with torch.no_grad():
        outs = dict(zip(module.output_names, (o.numpy() for o in module(torch.from_numpy(obs)))))
    for k, v in fwd(obs).items():
        np.testing.assert_allclose(outs[k], v, atol=1e-5)


def test_check_plugin_passes_for_sac_on_pendulum():
    from mqttrl.conformance import check_algorithm
    from mqttrl.plugin.manager import get_registry

    info = get_registry().algorithms["sac"].obj
    assert info.check_env == "Pendulum-v1"
    results = check_algorithm(info, params=SACParams(hidden=[16, 16], batch_size=32, learning_starts=64))
    assert all(r.ok for r in results), [r for r in results if not r.ok]
    assert any(r.name == "train_step" for r in results)


def test_the_shipped_configs_are_sac_and_redq():
    from pathlib import Path

    from mqttrl.config import load_config
    from mqttrl.plugin.manager import get_registry

    configs = Path(__file__).resolve().parent.parent / "configs"
    params = lambda name: get_registry().algorithm(name).params  # noqa: E731
    sac = load_config(configs / "pendulum_sac.toml", [], params)
    redq = load_config(configs / "pendulum_redq.toml", [], params)
    assert sac.env.id == redq.env.id == "Pendulum-v1" and sac.train.target_return == -200.0
    s, r = sac.algorithm.params, redq.algorithm.params
    assert (s.critics, s.target_subset, s.utd, s.policy_q) == (2, 2, 1.0, "min")
    assert (r.critics, r.target_subset, r.utd, r.policy_period, r.policy_q) == (10, 2, 20.0, 20, "mean")
    # rl-baselines3-zoo's SAC for LunarLanderContinuous (hyperparams/sac.yml), the learning rate kept constant
    ll = load_config(configs / "lunarlander_continuous_sac.toml", [], params)
    a = ll.algorithm.params
    assert ll.env.id == "LunarLanderContinuous-v3" and ll.algorithm.name == "sac"
    assert (a.hidden, a.batch_size, a.tau, a.gamma, a.learning_starts, a.buffer_size) == (
        [400, 300],
        256,
        0.01,
        0.99,
        10_000,
        1_000_000,
    )
    assert a.actor_lr == a.critic_lr == a.alpha_lr == 7.3e-4 and (a.critics, a.utd, a.autotune) == (2, 1.0, True)
    assert s.hidden == r.hidden and s.batch_size == r.batch_size and s.critic_lr == r.critic_lr  # same networks


def test_fused_adam_and_foreach_polyak_make_the_plain_update():
    """The learner's fused Adam and one-call Polyak averaging: the same parameters after 30 updates as
    torch's plain (per-parameter) Adam and a per-tensor ``t += tau (o - t)`` from the same start."""
    p = tiny(critics=3, target_subset=2, policy_every=2)
    fast, plain = fed_learner(p), fed_learner(p)
    assert fast.critic_opt.defaults["fused"]
    plain.actor_opt = torch.optim.Adam(plain.actor.parameters(), lr=p.actor_lr, fused=False, foreach=False)
    plain.critic_opt = torch.optim.Adam(plain.critics.parameters(), lr=p.critic_lr, fused=False, foreach=False)
    plain.alpha_opt = torch.optim.Adam([plain.log_alpha], lr=p.alpha_lr, fused=False, foreach=False)

    def by_hand_polyak(*_):  # what the learner's torch._foreach_lerp_ stands for
        for t, o in zip(plain._target_params, plain._critic_params):
            t.add_(p.tau * (o - t))

    import mqttrl_plugins.sac.learner as mod

    real = mod.torch._foreach_lerp_
    for _ in range(30):
        fast.train_step()
        mod.torch._foreach_lerp_ = by_hand_polyak
        try:
            plain.train_step()
        finally:
            mod.torch._foreach_lerp_ = real
    for a, b in ((fast.actor, plain.actor), (fast.critics, plain.critics), (fast.target, plain.target)):
        for (name, x), y in zip(a.state_dict().items(), b.state_dict().values()):
            np.testing.assert_allclose(x.numpy(), y.numpy(), atol=1e-5, err_msg=name)
    assert fast.alpha == pytest.approx(plain.alpha, rel=1e-5)
    assert not np.allclose(fast.target.w0.numpy(), fast.critics.w0.detach().numpy())  # the targets lag their critics


def test_fused_adam_state_survives_a_checkpoint():
    learner = fed_learner(tiny())
    for _ in range(3):
        learner.train_step()
    st, meta = learner.state_dict(include_replay=True)
    again = make_learner(learner.params, OBS, ACT, "cpu", 5)
    again.load_state_dict(st, meta)
    for _ in range(3):
        m1, m2 = learner.train_step(), again.train_step()
        assert m1["critic_loss"] == pytest.approx(m2["critic_loss"], rel=1e-6)
    steps = [float(s["step"]) for s in again.critic_opt.state.values()]
    assert steps and all(s == 6.0 for s in steps)
