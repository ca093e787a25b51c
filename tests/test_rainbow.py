"""Tests of DQN's Rainbow heads: C51 and QR-DQN (distributional), noisy nets; numpy and torch."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from helpers.replay_rows import ACT, CARTPOLE_OBS, IMAGE_OBS, random_arrays
from safetensors.numpy import load as st_load
from safetensors.numpy import save as st_save

from mqttrl.config import ConfigError, from_dict, load_config
from mqttrl.plugin.algorithm import UPDATES_KEY, ActorContext
from mqttrl.plugin.manager import get_registry
from mqttrl.wire import decode_batch, decode_weights, encode_batch, encode_weights
from mqttrl_plugins.dqn import make_forward
from mqttrl_plugins.dqn.actor import DQNActor
from mqttrl_plugins.dqn.common import PRESETS, DQNParams, net_info
from mqttrl_plugins.dqn.heads import NoisyLinear, c51_loss, c51_project, quantile_huber_loss
from mqttrl_plugins.dqn.learner import DQNLearner, TorchQForward
from mqttrl_plugins.dqn.numpy_heads import HeadSpec, NumpyHead, factorised_noise, quantile_midpoints
from mqttrl_plugins.dqn.numpy_net import NumpyQForward

torch.set_num_threads(1)

HEADS = ["none", "c51", "qr"]


def params(**kw) -> DQNParams:
    base = dict(hidden=[32, 32], batch_size=16, buffer_size=1000, learning_starts=32, replay_ratio=4.0)
    base.update(kw)
    return DQNParams(**base)


def through_the_wire(arrays: dict):
    return decode_batch(encode_batch("r", "w", 0, 0, arrays))


# ---------------------------------------------------------------- parameters and the network description


def test_params_defaults_and_validation():
    p = DQNParams()
    assert (p.distributional, p.n_atoms, p.v_min, p.v_max, p.n_quantiles, p.qr_kappa) == ("none", 51, None, None, 51, 1)
    assert (p.noisy, p.noisy_sigma0, p.noisy_layers) == (False, 0.5, "all")
    for bad in (
        dict(distributional="iqn"),
        dict(n_atoms=1),
        dict(v_min=1.0, v_max=1.0),
        dict(n_quantiles=0),
        dict(qr_kappa=0.0),
        dict(noisy_sigma0=-0.1),
        dict(noisy_layers="torso"),
    ):
        with pytest.raises((ConfigError, ValueError)):  # attrs' in_ raises ValueError
            DQNParams(**bad)


def test_net_info_names_the_head_only_when_it_is_not_plain():
    plain = net_info(4, 2, params())
    assert plain == {"obs_dim": 4, "n_actions": 2, "hidden": [32, 32], "dueling": True}  # older weights still fit
    c51 = net_info(4, 2, params(distributional="c51", n_atoms=11, v_min=0, v_max=100, noisy=True, noisy_layers="head"))
    assert c51 == {**plain, "distributional": "c51", "n_atoms": 11, "v_min": 0.0, "v_max": 100.0, "noisy": True}
    # noisy hidden layers too (the default): named; no hidden layers, nothing more is noisy than the head
    assert net_info(4, 2, params(noisy=True)) == {**plain, "noisy": True, "noisy_layers": "all"}
    assert net_info(4, 2, params(noisy=True, hidden=[])) == {**plain, "hidden": [], "noisy": True}
    qr = net_info(4, 2, params(distributional="qr", n_quantiles=8))
    assert qr == {**plain, "distributional": "qr", "n_quantiles": 8}
    spec = HeadSpec.of({**c51, "dueling": False})
    assert spec.tensor_shapes(32) == {
        "head.weight_mu": (22, 32),
        "head.weight_sigma": (22, 32),
        "head.bias_mu": (22,),
        "head.bias_sigma": (22,),
    }


# ---------------------------------------------------------------- the rainbow preset

REPO = Path(__file__).resolve().parents[1]


def registry_params(name: str) -> type:
    return get_registry().algorithm(name).params


def test_rainbow_preset_fills_in_every_ingredient():
    support = ["algorithm.v_min=0", "algorithm.v_max=100"]  # C51 needs one: the preset sets none
    got = load_config(None, ["algorithm.preset=rainbow", *support], registry_params).algorithm.params
    assert set(PRESETS) == {"none", "rainbow"} and PRESETS["none"] == {}
    rainbow = {
        "distributional": "c51",
        "noisy": True,
        "prioritized": True,
        "initial_priority": "actor",
        "double": True,
        "dueling": True,
        "n_step": 3,
    }
    assert PRESETS["rainbow"] == rainbow
    assert got == DQNParams(preset="rainbow", **rainbow, v_min=0, v_max=100)  # every other key at its default
    assert DQNParams().preset == "none"
    assert load_config(None, [], registry_params).algorithm.params == DQNParams()  # no preset: nothing filled in


def test_the_configs_own_keys_win_over_the_preset(tmp_path):
    toml = tmp_path / "run.toml"
    toml.write_text('[algorithm]\npreset = "rainbow"\nprioritized = false\nn_step = 5\n')
    got = load_config(toml, ["algorithm.distributional=qr"], registry_params).algorithm.params
    assert (got.prioritized, got.n_step, got.distributional) == (False, 5, "qr")  # file and --set win
    assert (got.noisy, got.dueling, got.double, got.initial_priority) == (
        True,
        True,
        True,
        "actor",
    )  # the rest filled in
    # the resolved config (config.json, the retained config message) reads back the same
    cfg = load_config(toml, ["algorithm.distributional=qr"], registry_params)
    assert from_dict(json.loads(json.dumps(cfg.to_dict())), registry_params) == cfg


@pytest.mark.parametrize("bad", ["rainbo", "Rainbow", 3])
def test_an_unknown_preset_is_one_error_naming_the_presets(bad):
    with pytest.raises(ConfigError) as ei:
        from_dict({"algorithm": {"name": "dqn", "preset": bad}}, registry_params)
    assert str(ei.value) == f"algorithm.preset={bad!r}: unknown preset; presets: 'none', 'rainbow'"
    with pytest.raises(ConfigError, match="unknown preset; presets: 'none', 'rainbow'"):
        DQNParams(preset="rainbo")


def test_an_algorithm_without_presets_refuses_the_key():
    with pytest.raises(ConfigError, match="unknown key algorithm.preset"):
        load_config(None, ["algorithm.name=ppo", "algorithm.preset=rainbow"], registry_params)


def test_cartpole_rainbow_config_is_the_preset_over_the_dqn_configs_settings():
    rainbow = load_config(REPO / "configs" / "cartpole_rainbow.toml", [], registry_params)
    p = rainbow.algorithm.params
    assert p.preset == "rainbow" and (p.distributional, p.noisy, p.prioritized) == ("c51", True, True)
    assert (p.initial_priority, p.double, p.dueling, p.n_step) == ("actor", True, True, 3)
    assert (p.v_min, p.v_max, p.n_atoms) == (0.0, 100.0, 51)  # CartPole's discounted returns lie in [1, 100)
    assert (p.per_alpha, p.per_beta0) == (DQNParams().per_alpha, DQNParams().per_beta0)
    # cartpole_dqn.toml's proven optimisation and pacing, unchanged (its epsilons are off with noisy nets)
    dqn = load_config(REPO / "configs" / "cartpole_dqn.toml", [], registry_params)
    q = dqn.algorithm.params
    for key in ("lr", "adam_eps", "gamma", "batch_size", "grad_clip", "hidden", "target_update_every", "tau"):
        assert getattr(p, key) == getattr(q, key), key
    for key in ("buffer_size", "learning_starts", "replay_ratio", "max_update_debt"):
        assert getattr(p, key) == getattr(q, key), key
    assert (rainbow.env, rainbow.worker, rainbow.learner, rainbow.train) == (
        dqn.env,
        dqn.worker,
        dqn.learner,
        dqn.train,
    )


# ---------------------------------------------------------------- C51: the projection and the loss


def reference_projection(probs, reward, discount, z):
    """Bellemare et al. 2017, Algorithm 1, with plain loops (floor/ceil; an exact hit keeps its mass)."""
    v_min, v_max, k = z[0], z[-1], len(z)
    dz = (v_max - v_min) / (k - 1)
    m = np.zeros((len(reward), k))
    for b in range(len(reward)):
        for j in range(k):
            tz = min(max(reward[b] + discount[b] * z[j], v_min), v_max)
            pos = (tz - v_min) / dz
            lo, hi = math.floor(pos), math.ceil(pos)
            if lo == hi:
                m[b, lo] += probs[b, j]
            else:
                m[b, lo] += probs[b, j] * (hi - pos)
                m[b, hi] += probs[b, j] * (pos - lo)
    return m


def test_c51_projection_by_hand():
    z = torch.tensor([-2.0, -1.0, 0.0, 1.0, 2.0])  # 5 atoms in [-2, 2], dz = 1
    p = torch.tensor(
        [
            [0.2, 0.2, 0.2, 0.2, 0.2],  # discount 0: every atom to r = 0.5, halfway between 0 and 1
            [0.2, 0.2, 0.2, 0.2, 0.2],  # discount 0, r = 3: beyond v_max, all at 2
            [0.1, 0.2, 0.3, 0.2, 0.2],  # r = 0.25, discount 0.5: Tz = -0.75, -0.25, 0.25, 0.75, 1.25
            [0.0, 0.0, 0.0, 0.5, 0.5],  # r = -1.5, discount 0.9: Tz(1) = -0.6, Tz(2) = 0.3
            [0.3, 0.0, 0.0, 0.0, 0.7],  # r = -1 on an atom, discount 0
            [0.2, 0.2, 0.2, 0.2, 0.2],  # r = 1, discount 1: Tz = -1, 0, 1, 2, 3 -> 2 (clipped)
            [0.5, 0.5, 0.0, 0.0, 0.0],  # r = -0.5, discount 1: Tz = -2.5 -> -2 (clipped), -1.5
        ]
    )
    r = torch.tensor([0.5, 3.0, 0.25, -1.5, -1.0, 1.0, -0.5])
    d = torch.tensor([0.0, 0.0, 0.5, 0.9, 0.0, 1.0, 1.0])
    expected = [
        [0, 0, 0.5, 0.5, 0],
        [0, 0, 0, 0, 1],
        # -0.75: .75 to -1, .25 to 0 (x .1); -0.25: .25 / .75 (x .2); 0.25: .75 to 0, .25 to 1 (x .3);
        # 0.75: .25 / .75 (x .2); 1.25: .75 to 1, .25 to 2 (x .2)
        [0, 0.075 + 0.05, 0.025 + 0.15 + 0.225 + 0.05, 0.075 + 0.15 + 0.15, 0.05],
        # -0.6: .6 to -1, .4 to 0 (x .5); 0.3: .7 to 0, .3 to 1 (x .5)
        [0, 0.3, 0.2 + 0.35, 0.15, 0],
        [0, 1, 0, 0, 0],
        [0, 0.2, 0.2, 0.2, 0.4],
        # -2 (clipped) all to -2 (x .5); -1.5: .5 to -2, .5 to -1 (x .5)
        [0.75, 0.25, 0, 0, 0],
    ]
    m = c51_project(p, r, d, z)
    np.testing.assert_allclose(m.numpy(), expected, atol=1e-6)
    np.testing.assert_allclose(m.sum(1).numpy(), 1.0, atol=1e-6)
    np.testing.assert_allclose(m.numpy(), reference_projection(p.numpy(), r.numpy(), d.numpy(), z.numpy()), atol=1e-6)


def test_c51_projection_matches_algorithm_1_on_random_inputs():
    rng = np.random.default_rng(0)
    z = np.linspace(-10, 10, 51).astype(np.float32)
    probs = rng.dirichlet(np.ones(51), 64).astype(np.float32)
    reward = rng.uniform(-15, 15, 64).astype(np.float32)
    discount = rng.choice(np.array([0.0, 0.5, 0.97, 1.0], np.float32), 64)
    m = c51_project(*(torch.from_numpy(a) for a in (probs, reward, discount, z)))
    np.testing.assert_allclose(m.numpy(), reference_projection(probs, reward, discount, z), atol=1e-5)


def test_c51_loss_is_the_cross_entropy():
    logits = torch.tensor([[0.0, 1.0, 2.0], [1.0, 1.0, 1.0]])
    m = torch.tensor([[0.0, 0.5, 0.5], [1.0, 0.0, 0.0]])
    log_p = logits - torch.logsumexp(logits, 1, keepdim=True)
    expected = [-(0.5 * log_p[0, 1] + 0.5 * log_p[0, 2]), math.log(3)]
    np.testing.assert_allclose(c51_loss(logits, m).numpy(), expected, rtol=1e-6)


# ---------------------------------------------------------------- QR-DQN: the quantile Huber loss


def reference_quantile_huber(theta: np.ndarray, target: np.ndarray, kappa: float) -> np.ndarray:
    """QR-DQN (Dabney et al. 2018) with loops: sum_i mean_j |tau_i - 1{u < 0}| L_kappa(u), u = T_j - theta_i,
    tau_i = (2i + 1) / 2N, L_kappa(u) = u^2 / 2 if |u| <= kappa else kappa (|u| - kappa / 2)."""
    out = np.zeros(len(theta))
    for b in range(len(theta)):
        n, n_target = theta.shape[1], target.shape[1]
        total = 0.0
        for i in range(n):
            tau = (2 * i + 1) / (2 * n)
            for j in range(n_target):
                u = target[b, j] - theta[b, i]
                huber = 0.5 * u * u if abs(u) <= kappa else kappa * (abs(u) - 0.5 * kappa)
                total += abs(tau - (1.0 if u < 0 else 0.0)) * huber / n_target
        out[b] = total
    return out


def test_quantile_huber_loss_by_hand():
    # one quantile (tau = 1/2), target 2: u = 2 > kappa = 1, Huber = 1 * (2 - 0.5), rho = 0.5 * 1.5
    got = quantile_huber_loss(torch.tensor([[0.0]]), torch.tensor([[2.0]]), kappa=1.0)
    assert got.item() == pytest.approx(0.75)
    # two quantiles (tau 1/4, 3/4) at 0 and 1; targets 0.5 and -1: u = [[0.5, -1], [-0.5, -2]]
    # i=0: tau .25: u .5 -> .25 * .125; u -1 -> .75 * .5   ; i=1: tau .75: u -.5 -> .25 * .125; u -2 -> .25 * 1.5
    got = quantile_huber_loss(torch.tensor([[0.0, 1.0]]), torch.tensor([[0.5, -1.0]]), kappa=1.0)
    expected = (0.25 * 0.125 + 0.75 * 0.5) / 2 + (0.25 * 0.125 + 0.25 * 1.5) / 2
    assert got.item() == pytest.approx(expected)


@pytest.mark.parametrize("kappa", [1.0, 0.3, 2.5])
def test_quantile_huber_loss_matches_the_paper_with_loops(kappa):
    rng = np.random.default_rng(1)
    theta = rng.normal(size=(5, 4)) * 2
    target = rng.normal(size=(5, 6)) * 2  # N' target samples need not be N
    got = quantile_huber_loss(torch.from_numpy(theta), torch.from_numpy(target), kappa)
    np.testing.assert_allclose(got.numpy(), reference_quantile_huber(theta, target, kappa), rtol=1e-10)
    np.testing.assert_allclose(quantile_midpoints(4), [0.125, 0.375, 0.625, 0.875])


def test_quantile_huber_loss_is_minimised_at_the_quantiles():
    """Minimised over theta against a fixed sample, theta_i lands on the sample's tau_hat_i quantile."""
    target = torch.arange(100, dtype=torch.float64).view(1, -1)  # 0..99
    theta = torch.zeros(1, 4, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.Adam([theta], lr=2.0)
    for step in range(600):
        if step == 400:
            opt.param_groups[0]["lr"] = 0.2
        opt.zero_grad()
        quantile_huber_loss(theta, target, kappa=1.0).sum().backward()
        opt.step()
    np.testing.assert_allclose(theta.detach().numpy()[0], [12.5, 37.5, 62.5, 87.5], atol=1.0)


# ---------------------------------------------------------------- noisy layers


def test_noisy_layer_is_mu_plus_factorised_noise():
    torch.manual_seed(0)
    layer = NoisyLinear(5, 3, sigma0=0.5)
    assert set(layer.state_dict()) == {"weight_mu", "weight_sigma", "bias_mu", "bias_sigma"}  # noise is not state
    np.testing.assert_allclose(layer.weight_sigma.detach().numpy(), 0.5 / math.sqrt(5))
    with torch.no_grad():
        layer.weight_sigma.normal_()
        layer.bias_sigma.normal_()
    x = torch.randn(7, 5)
    # eps = f(standard normal), f(x) = sign(x) sqrt|x|, drawn in that order from the generator
    layer.reset_noise(generator=torch.Generator().manual_seed(3))
    g = torch.Generator().manual_seed(3)
    e_in, e_out = torch.randn(5, generator=g), torch.randn(3, generator=g)
    f_in, f_out = e_in.sign() * e_in.abs().sqrt(), e_out.sign() * e_out.abs().sqrt()
    np.testing.assert_array_equal(layer.eps_in.numpy(), f_in.numpy())
    with torch.no_grad():
        w = layer.weight_mu + layer.weight_sigma * torch.outer(f_out, f_in)
        b = layer.bias_mu + layer.bias_sigma * f_out
        np.testing.assert_allclose(layer(x).numpy(), (x @ w.T + b).numpy(), atol=1e-6)
        mean = (x @ layer.weight_mu.T + layer.bias_mu).numpy()
        np.testing.assert_array_equal(layer(x, noise=False).numpy(), mean)  # the mean whatever the noise
        # one draw per row: row r sees its own noisy matrix
        layer.reset_noise(rows=7)
        for r in range(7):
            w = layer.weight_mu + layer.weight_sigma * torch.outer(layer.eps_out[r], layer.eps_in[r])
            b = layer.bias_mu + layer.bias_sigma * layer.eps_out[r]
            np.testing.assert_allclose(layer(x)[r].numpy(), (x[r] @ w.T + b).numpy(), atol=1e-6)


def _noise_statistics(eps_in: np.ndarray, eps_out: np.ndarray, sigma: float, sigma_b: float):
    """Per-entry weight noise sigma * eps_out eps_in over the draws (axis 0), and the bias noise."""
    w_noise = sigma * eps_out[:, :, None] * eps_in[:, None, :]  # draws, out, in
    b_noise = sigma_b * eps_out
    n = len(eps_in)
    # E f(x)^2 = E|x| = sqrt(2 / pi) for a standard normal x: the weight noise's variance is
    # sigma^2 E[f(x)^2] E[f(y)^2] = sigma^2 * 2 / pi, the bias noise's sigma_b^2 sqrt(2 / pi)
    var_w, var_b = sigma**2 * 2 / np.pi, sigma_b**2 * np.sqrt(2 / np.pi)
    assert np.abs(w_noise.mean(0)).max() < 5 * np.sqrt(var_w / n)
    assert np.abs(b_noise.mean(0)).max() < 5 * np.sqrt(var_b / n)
    # E[f(x)^4] = E[x^2] = 1, so Var(w_noise^2) = sigma^4 (1 - 4 / pi^2): 5 standard errors of the variance
    tol_w = 5 * sigma**2 * np.sqrt((1 - 4 / np.pi**2) / n)
    np.testing.assert_allclose(w_noise.var(0), var_w, atol=tol_w)
    np.testing.assert_allclose(b_noise.var(0), var_b, atol=5 * sigma_b**2 * np.sqrt((1 - 2 / np.pi) / n))
    # f keeps the sign: the noise is symmetric, and |eps|^2 = |standard normal|
    np.testing.assert_allclose(np.mean(eps_in**2), np.sqrt(2 / np.pi), atol=5 * np.sqrt((1 - 2 / np.pi) / eps_in.size))


def test_noise_statistics_torch():
    layer = NoisyLinear(4, 3, sigma0=0.5)
    sigma = float(layer.weight_sigma[0, 0].detach())
    layer.reset_noise(rows=20000, generator=torch.Generator().manual_seed(0))
    _noise_statistics(layer.eps_in.numpy(), layer.eps_out.numpy(), sigma, sigma)


def test_noise_statistics_numpy():
    sigma = 0.5 / math.sqrt(4)
    eps_in, eps_out = factorised_noise(np.random.default_rng(0), 4, 3, rows=20000)
    assert eps_in.dtype == np.float32 and eps_in.shape == (20000, 4) and eps_out.shape == (20000, 3)
    _noise_statistics(eps_in.astype(np.float64), eps_out.astype(np.float64), sigma, sigma)
    one_in, one_out = factorised_noise(np.random.default_rng(0), 4, 3)
    assert one_in.shape == (4,) and one_out.shape == (3,)


def test_noisy_forwards_explore_per_call_and_greedy_uses_the_mean():
    p = params(noisy=True, distributional="c51", v_min=-5.0, v_max=5.0)
    tensors, info = _randomised(DQNLearner(p, CARTPOLE_OBS, ACT, "cpu", 0))
    obs = np.random.default_rng(0).normal(size=(64, 4)).astype(np.float32)
    mean = None
    for backend in ("numpy", "torch"):
        a, b = make_forward(p, CARTPOLE_OBS, ACT, backend, seed=7), make_forward(p, CARTPOLE_OBS, ACT, backend, seed=7)
        a.load_weights(tensors, info)
        b.load_weights(tensors, info)
        q1, q2 = a(obs)["q"], a(obs)["q"]
        assert not np.allclose(q1, q2)  # fresh noise per call ...
        np.testing.assert_array_equal(q1, b(obs)["q"])  # ... from the forward's own seeded generator
        same = a(np.repeat(obs[:1], 8, 0))["q"]
        assert len(np.unique(same[:, 0])) == 8  # ... and per row: each env explores on its own
        g1, g2 = a.noiseless(obs)["q"], a.noiseless(obs)["q"]
        np.testing.assert_array_equal(g1, g2)
        mean = g1 if mean is None else mean
        np.testing.assert_allclose(g1, mean, rtol=1e-5, atol=1e-5)
        # the actor of a trained model: no epsilon at all, and greedy actions from the mean weights
        actor = DQNActor(p, CARTPOLE_OBS, ACT, ActorContext(num_envs=64, total_envs=64), a)
        actor.load_weights(tensors, {**info, UPDATES_KEY: 1})
        np.testing.assert_array_equal(actor.epsilons(), 0.0)
        _, extras = actor.act(obs)
        np.testing.assert_array_equal(extras["epsilon"], 0.0)
        greedy, _ = actor.act(obs, greedy=True)
        np.testing.assert_array_equal(greedy, g1.argmax(1))
    # the learner's network without noise is the same mean
    learner = DQNLearner(p, CARTPOLE_OBS, ACT, "cpu", 1)
    learner.online.load_state_dict({k: torch.from_numpy(v) for k, v in tensors.items()})
    with torch.no_grad():
        learner.online.reset_noise()
        np.testing.assert_allclose(learner.online(torch.from_numpy(obs), noise=False).numpy(), mean, atol=1e-5)


def test_a_noisy_actor_acts_at_random_until_the_first_trained_model():
    """An untrained noisy net's argmax barely moves with its noise (on MinAtar Breakout the replay
    then held no reward at all): uniform random actions until a model with updates behind it."""
    p = params(noisy=True, epsilon_start=1.0)
    tensors, info = DQNLearner(p, CARTPOLE_OBS, ACT, "cpu", 0).export_weights()
    forward = make_forward(p, CARTPOLE_OBS, ACT, "numpy", seed=3)
    actor = DQNActor(p, CARTPOLE_OBS, ACT, ActorContext(num_envs=256, total_envs=256, seed=1), forward)
    actor.load_weights(tensors, {**info, UPDATES_KEY: 0})  # the learner's first, untrained model
    np.testing.assert_array_equal(actor.epsilons(), 1.0)
    obs = np.repeat(np.random.default_rng(0).normal(size=(1, 4)).astype(np.float32), 256, 0)
    actions, extras = actor.act(obs)
    np.testing.assert_array_equal(extras["epsilon"], 1.0)
    assert 0.3 < (actions == 0).mean() < 0.7  # the same observation everywhere: uniform, not one argmax
    actor.load_weights(tensors, {**info, UPDATES_KEY: 1})
    np.testing.assert_array_equal(actor.epsilons(), 0.0)
    # weights from a learner that does not say (an older release): taken as trained
    older = DQNActor(p, CARTPOLE_OBS, ACT, ActorContext(num_envs=4), forward)
    older.load_weights(tensors, info)
    np.testing.assert_array_equal(older.epsilons(), 0.0)


def test_plain_actor_keeps_its_epsilons():
    p = params()
    actor = DQNActor(p, CARTPOLE_OBS, ACT, ActorContext(num_envs=4), make_forward(p, CARTPOLE_OBS, ACT, "numpy"))
    assert actor.epsilons().min() > 0


# ---------------------------------------------------------------- numpy == torch, every head


def _randomised(learner: DQNLearner) -> tuple[dict, dict]:
    """The learner's weights with every tensor perturbed (sigmas no longer constant), exported."""
    with torch.no_grad():
        gen = torch.Generator().manual_seed(5)
        for t in learner.online.parameters():
            t.add_(0.1 * torch.randn(t.shape, generator=gen))
    return learner.export_weights()


CASES = [
    (dist, dueling, noisy, space)
    for dist in HEADS
    for dueling in (True, False)
    for noisy in (False, True)
    for space in ("mlp", "cnn")
    if space == "mlp" or dueling  # the CNN torso with every head, dueling (the head is the same over either torso)
]


@pytest.mark.parametrize("dist,dueling,noisy,torso", CASES)
def test_numpy_equals_torch_for_every_head(dist, dueling, noisy, torso):
    space = CARTPOLE_OBS if torso == "mlp" else IMAGE_OBS
    p = params(distributional=dist, dueling=dueling, noisy=noisy, n_atoms=11, v_min=-3.0, v_max=4.0, n_quantiles=9)
    learner = DQNLearner(p, space, ACT, "cpu", 0)
    tensors, info = _randomised(learner)
    msg = decode_weights(encode_weights(1, "dqn", "r", tensors, info))  # as a worker receives them
    fwd_np, fwd_t = NumpyQForward(p, space, ACT), TorchQForward(p, space, ACT)
    fwd_np.load_weights(msg.tensors, msg.info)
    fwd_t.load_weights(msg.tensors, msg.info)
    rng = np.random.default_rng(2)
    obs = random_arrays(32, rng, space)["obs"]
    x = torch.from_numpy(obs)
    net = learner.online
    with torch.no_grad():
        expected = net(x, noise=False).numpy()
        expected_out = net.outputs(x, noise=False).numpy()
    assert expected.shape == (32, 2) and expected_out.shape == (32, 2, {"none": 1, "c51": 11, "qr": 9}[dist])
    tol = 1e-5 * max(1.0, np.abs(expected).max())
    np.testing.assert_allclose(fwd_np.noiseless(obs)["q"], expected, rtol=0, atol=tol)
    np.testing.assert_allclose(fwd_t.noiseless(obs)["q"], expected, rtol=0, atol=tol)
    features = fwd_np.layers.torso(obs)
    np.testing.assert_allclose(fwd_np.layers.head.outputs(features), expected_out, rtol=0, atol=tol)
    if not noisy:  # nothing to sample: a call is the mean
        np.testing.assert_allclose(fwd_np(obs)["q"], expected, rtol=0, atol=tol)
        np.testing.assert_allclose(fwd_t(obs)["q"], expected, rtol=0, atol=tol)
        return
    # the same given noise on both sides: one draw for the batch, and one per row
    head = fwd_np.layers.head
    for rows in (None, 32):
        noise = head.sample_noise(np.random.default_rng(rows), rows)
        for layer, (eps_in, eps_out) in zip(net.head_layers(), noise):
            layer.set_noise(torch.from_numpy(eps_in), torch.from_numpy(eps_out))
        with torch.no_grad():
            want, want_out = net(x).numpy(), net.outputs(x).numpy()
        assert np.abs(want - expected).max() > 1e-3  # the noise does something
        np.testing.assert_allclose(head(features, noise), want, rtol=0, atol=tol)
        np.testing.assert_allclose(head.outputs(features, noise), want_out, rtol=0, atol=tol)


def test_numpy_forward_initial_weights_fit_and_refuse_other_heads():
    p = params(distributional="qr", noisy=True, n_quantiles=5)
    fwd = NumpyQForward(p, CARTPOLE_OBS, ACT, seed=1)
    assert fwd(np.zeros((3, 4), np.float32))["q"].shape == (3, 2)
    tensors, info = DQNLearner(params(), CARTPOLE_OBS, ACT, "cpu", 0).export_weights()
    fwd.load_weights(tensors, info)  # plain weights: the info says so, the forward follows
    assert fwd.layers.head.spec == HeadSpec(2, True)
    np.testing.assert_array_equal(
        fwd(np.ones((2, 4), np.float32))["q"], fwd.noiseless(np.ones((2, 4), np.float32))["q"]
    )
    before = fwd.layers
    with pytest.raises(ValueError, match="missing"):
        fwd.load_weights(tensors, {**info, "noisy": True})
    with pytest.raises(ValueError, match="shape"):
        fwd.load_weights(tensors, {**info, "distributional": "qr", "n_quantiles": 3})
    assert fwd.layers is before
    with pytest.raises(ValueError, match="distributional"):
        NumpyHead(HeadSpec.of({**info, "distributional": "iqn"}), tensors, 32)


# ---------------------------------------------------------------- the learner, every head


def through_checkpoint_formats(tensors: dict, meta: dict) -> tuple[dict, dict]:
    return st_load(st_save({k: np.ascontiguousarray(v) for k, v in tensors.items()})), json.loads(json.dumps(meta))


@pytest.mark.parametrize(
    "dist,noisy,prioritized",
    [("none", True, True), ("c51", False, True), ("c51", True, False), ("qr", False, False), ("qr", True, True)],
)
def test_learner_trains_and_checkpoints_continue_identically(dist, noisy, prioritized):
    p = params(
        distributional=dist,
        noisy=noisy,
        prioritized=prioritized,
        initial_priority="max",
        v_min=-5.0,
        v_max=5.0,
        n_atoms=21,
        n_quantiles=16,
        tau=0.5,
        target_update_every=3,
    )
    rng = np.random.default_rng(0)
    a = DQNLearner(p, CARTPOLE_OBS, ACT, "cpu", 0)
    for _ in range(3):
        a.add(through_the_wire(random_arrays(40, rng)))
    before = {k: v.copy() for k, v in a.export_weights()[0].items()}
    for _ in range(6):
        m = a.train_step()
        assert np.isfinite(m["loss"]) and m["loss"] >= 0 and np.isfinite(m["q_mean"]) and np.isfinite(m["grad_norm"])
    after = a.export_weights()[0]
    assert all(not np.array_equal(after[k], before[k]) for k in after)  # sigmas learn too
    if prioritized:  # priorities are the samples' losses
        prio = a.tree.get(np.arange(a.size))
        assert len(np.unique(prio)) > 10 and np.isfinite(prio).all()

    tensors, meta = through_checkpoint_formats(*a.state_dict(include_replay=True))
    assert not any("eps_" in k for k in tensors)  # noise is drawn again, from the restored generator
    assert ("rng.noise" in tensors) == noisy
    b = DQNLearner(p, CARTPOLE_OBS, ACT, "cpu", 123)
    b.load_state_dict(tensors, meta)
    for _ in range(5):  # crosses a target update
        assert a.train_step() == b.train_step()
    obs = torch.from_numpy(rng.normal(size=(8, 4)).astype(np.float32))
    with torch.no_grad():
        np.testing.assert_array_equal(a.online(obs, noise=False).numpy(), b.online(obs, noise=False).numpy())
    with pytest.raises(ValueError, match="network"):  # a checkpoint of another head does not load
        DQNLearner(params(), CARTPOLE_OBS, ACT, "cpu", 0).load_state_dict(tensors, meta)


def test_learner_trains_on_images_with_every_head():
    rng = np.random.default_rng(0)
    for dist in HEADS:
        p = params(
            distributional=dist, noisy=True, n_atoms=11, v_min=-5, v_max=5, n_quantiles=8, batch_size=8, frames="off"
        )
        learner = DQNLearner(p, IMAGE_OBS, ACT, "cpu", 0)
        learner.add(through_the_wire(random_arrays(32, rng, IMAGE_OBS)))
        for _ in range(2):
            assert np.isfinite(learner.train_step()["loss"])


# ---------------------------------------------------------------- prioritized replay: one scale for actors and learner


def _record_samples(learner: DQNLearner) -> list[np.ndarray]:
    """The indices of every batch the learner samples from now on."""
    seen, sample = [], learner._sample

    def recorded():
        idx, weights = sample()
        seen.append(idx.copy())
        return idx, weights

    learner._sample = recorded
    return seen


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


@pytest.mark.parametrize("initial", ["actor", "max"])
@pytest.mark.parametrize("dist", HEADS)
def test_replayed_priorities_are_the_expected_td_error_by_hand(dist, initial):
    """After a replay a sample's priority is |E[target] - E[Z(s, a)]| (return units, as the actors
    send), the target by the target net at double DQN's next action; the sample's loss only for a
    distributional head without actor priorities (Rainbow's)."""
    p = params(
        distributional=dist,
        prioritized=True,
        initial_priority=initial,
        per_alpha=1.0,
        double=True,
        n_atoms=11,
        v_min=-3.0,
        v_max=4.0,
        n_quantiles=9,
        batch_size=32,
    )
    learner = DQNLearner(p, CARTPOLE_OBS, ACT, "cpu", 0)
    _randomised(learner)  # the online net only: the target net differs, so the double-DQN choice matters
    rng = np.random.default_rng(1)
    arrays = random_arrays(64, rng)
    if initial == "actor":
        arrays["priority"] = rng.uniform(0.0, 1.0, 64).astype(np.float32)
    learner.add(through_the_wire(arrays))
    online, target = copy.deepcopy(learner.online), copy.deepcopy(learner.target)  # as the update sees them
    seen = _record_samples(learner)
    learner.train_step()
    idx = seen[0]  # the batch it trained on (the next one is already made: prefetch)
    b = learner.replay.sample(idx)
    rows = np.arange(len(idx))
    with torch.no_grad():
        x, nx = torch.from_numpy(b["obs"]), torch.from_numpy(b["next_obs"])
        out = online.outputs(x).double().numpy()[rows, b["action"]]  # B, K
        next_a = online(nx).numpy().argmax(axis=1)  # double DQN: the online net picks
        next_out = target.outputs(nx).double().numpy()[rows, next_a]  # the target net values
        assert (next_a != target(nx).numpy().argmax(axis=1)).any()  # the choice is not the target net's own
    r, d = b["reward"].astype(np.float64), b["discount"].astype(np.float64)
    if dist == "c51":
        z = learner.online.support.double().numpy()
        m = reference_projection(_softmax(next_out), r, d, z)
        target_mean, predicted_mean = m @ z, _softmax(out) @ z
        loss = -(m * np.log(_softmax(out))).sum(axis=1)
    elif dist == "qr":
        target_quantiles = r[:, None] + d[:, None] * next_out
        target_mean, predicted_mean = target_quantiles.mean(axis=1), out.mean(axis=1)
        loss = reference_quantile_huber(out, target_quantiles, p.qr_kappa)
    else:
        target_mean, predicted_mean, loss = r + d * next_out[:, 0], out[:, 0], None
    td = np.abs(target_mean - predicted_mean)
    want = loss if (dist != "none" and initial == "max") else td
    np.testing.assert_allclose(learner.tree.get(idx), want + p.per_eps, rtol=1e-4, atol=1e-5)
    if loss is not None:  # the two candidates differ: the test tells them apart
        assert np.abs(loss - td).max() > 0.1


@pytest.mark.parametrize("dist", HEADS)
def test_an_actors_priority_is_what_the_learner_gives_the_same_transition(dist):
    """Same weights, target net = online net (so double DQN picks as the target net would): a
    fresh transition's priority, computed by the actor, is what the learner sets after replaying it."""
    p = params(
        distributional=dist,
        prioritized=True,
        initial_priority="actor",
        per_alpha=1.0,
        n_step=2,
        gamma=0.9,
        n_atoms=21,
        v_min=-10.0,
        v_max=10.0,
        n_quantiles=9,
        batch_size=64,
    )
    learner = DQNLearner(p, CARTPOLE_OBS, ACT, "cpu", 0)
    tensors, info = _randomised(learner)
    learner.target.load_state_dict(learner.online.state_dict())
    msg = decode_weights(encode_weights(1, "dqn", "r", tensors, info))
    actor = DQNActor(p, CARTPOLE_OBS, ACT, ActorContext(num_envs=4, seed=0), NumpyQForward(p, CARTPOLE_OBS, ACT))
    actor.load_weights(msg.tensors, msg.info)
    rng = np.random.default_rng(3)
    obs = rng.normal(size=(4, 4)).astype(np.float32)
    for _ in range(40):
        actions, extras = actor.act(obs)
        next_obs = rng.normal(size=(4, 4)).astype(np.float32)
        term = rng.random(4) < 0.1
        trunc = ~term & (rng.random(4) < 0.05)
        # small rewards keep every shifted atom of a bootstrapped C51 target inside [-10, 10]; a
        # termination pays 30, beyond the support: both sides clip it to v_max
        rewards = np.where(term, 30.0, rng.uniform(-0.5, 0.5, 4))
        actor.record(obs, actions, extras, rewards, next_obs, term, trunc)
        obs = next_obs
    batch = actor.take()
    n = len(batch["action"])
    assert 100 < n < p.buffer_size
    learner.add(through_the_wire(batch))
    sent = learner.tree.get(np.arange(n)).copy()  # the actor's priority + per_eps
    seen = _record_samples(learner)
    learner.train_step()
    idx = seen[0]  # the batch it trained on (the next one is already made: prefetch)
    d, r = batch["discount"][idx], batch["reward"][idx]
    assert (d == 0).any() and (d > 0).any() and (r > 10).any()  # terminations, over the support, and bootstraps
    np.testing.assert_allclose(learner.tree.get(idx), sent[idx], rtol=1e-4, atol=2e-4)


class Bandit:
    """One state, every episode one step: action 0 pays 0 or 2 (even odds), action 1 pays 0.5."""

    def batch(self, rng, n):
        action = np.arange(n) % 2  # exactly half of action 0's rewards are 2
        reward = np.where(action == 0, 2.0 * ((np.arange(n) // 2) % 2), 0.5).astype(np.float32)
        obs = np.tile(np.array([[0.5, -0.5, 0.1, 0.0]], np.float32), (n, 1))
        return {"obs": obs, "action": action, "reward": reward, "next_obs": obs, "discount": np.zeros(n, np.float32)}


@pytest.mark.parametrize("dist", ["c51", "qr"])
def test_distributional_heads_learn_the_return_distribution(dist):
    p = params(distributional=dist, n_atoms=5, v_min=-1.0, v_max=3.0, n_quantiles=4, lr=5e-3, batch_size=64)
    rng = np.random.default_rng(0)
    learner = DQNLearner(p, CARTPOLE_OBS, ACT, "cpu", 0)
    learner.add(through_the_wire(Bandit().batch(rng, 1000)))
    for step in range(400):
        if step == 250:  # then average over many minibatches: each one's share of 2s differs
            learner.optimizer.param_groups[0]["lr"] = 3e-4
        learner.train_step()
    obs = torch.from_numpy(Bandit().batch(rng, 1)["obs"])
    with torch.no_grad():
        q, out = learner.online(obs)[0].numpy(), learner.online.outputs(obs)[0].numpy()
    np.testing.assert_allclose(q, [1.0, 0.5], atol=0.06)
    if dist == "c51":  # atoms -1, 0, 1, 2, 3: action 0 is half at 0, half at 2; action 1 half at 0, half at 1
        probs = np.exp(out - out.max(1, keepdims=True))
        probs /= probs.sum(1, keepdims=True)
        np.testing.assert_allclose(probs, [[0, 0.5, 0, 0.5, 0], [0, 0.5, 0.5, 0, 0]], atol=0.05)
    else:  # quantiles at tau 1/8, 3/8, 5/8, 7/8 of action 0's {0, 2}: with kappa = 1 the quantile Huber
        # loss's minimiser is tau / (1 - tau) below 1 (the target at 0 is in the quadratic zone, the one at 2
        # in the linear one), 2 - (1 - tau) / tau above; action 1's all 0.5
        taus = quantile_midpoints(4)
        theta0 = np.where(taus < 0.5, taus / (1 - taus), 2 - (1 - taus) / taus)
        np.testing.assert_allclose(theta0, [1 / 7, 0.6, 1.4, 2 - 1 / 7], atol=1e-6)
        np.testing.assert_allclose(out, [theta0, [0.5] * 4], atol=0.08)


@pytest.mark.parametrize(
    "space",
    [
        gym.spaces.Box(0, 1, (10, 10, 4), np.bool_),  # MinAtar: one frame is the whole observation
        gym.spaces.Box(0, 255, (4, 12, 12), np.uint8),  # a stack of 4 frames along axis 0
    ],
    ids=["whole-frame", "stacked"],
)
def test_actor_priorities_of_image_observations_sent_as_frames_equal_those_of_arrays(space):
    """Image observations travel as frames (serials into a pool): the actor's priorities bootstrap
    from next observations rebuilt from the pool, and must equal those of the same transitions
    kept as arrays (frames="off"). A whole-observation frame used to be rebuilt with an extra
    stack axis, and the worker died at its first batch."""
    network = "minatar_cnn" if space.shape[-1] == 4 else "mlp"
    got = {}
    for frames in ("auto", "off"):
        p = params(prioritized=True, initial_priority="actor", n_step=3, network=network, frames=frames)
        forward = make_forward(p, space, ACT, "numpy", seed=5)
        actor = DQNActor(p, space, ACT, ActorContext(num_envs=3, seed=0), forward)
        rng = np.random.default_rng(2)

        def draw(rng=rng):
            if space.dtype == np.bool_:
                return rng.random((3, *space.shape)) < 0.3
            return rng.integers(0, 256, (3, *space.shape), dtype=np.uint8)

        obs = draw()
        for _ in range(12):
            actions, extras = actor.act(obs)
            next_obs = draw()
            term = rng.random(3) < 0.15
            actor.record(obs, actions, extras, rng.normal(size=3), next_obs, term, np.zeros(3, bool))
            obs = next_obs
        batch = actor.take()
        assert ("frames" in batch) == (frames == "auto")
        got[frames] = batch["priority"]
    assert len(got["auto"]) > 20 and np.ptp(got["auto"]) > 0
    np.testing.assert_allclose(got["auto"], got["off"], rtol=1e-5)
