"""CrossQ (plugins/sac, ``name = "crossq"``): BatchRenorm's statistics against numpy, the critic loss
of the joint forward by hand, which normalisation mode each forward uses, the numpy actor against
torch, checkpoint and resume, export, the plugin check and the shipped configs. Tiny networks."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from mqttrl.plugin import SampleBatch
from mqttrl_plugins.sac import make_crossq_learner, make_forward
from mqttrl_plugins.sac.batch_renorm import BatchRenorm
from mqttrl_plugins.sac.crossq_params import CrossQParams
from mqttrl_plugins.sac.export import crossq_weights_from_checkpoint, export_module, weights_from_checkpoint

OBS = gym.spaces.Box(-5.0, 5.0, (3,), np.float32)
ACT = gym.spaces.Box(np.array([-2.0, 0.0], np.float32), np.array([2.0, 1.0], np.float32))


def tiny(**kw) -> CrossQParams:
    defaults = {"hidden": [8, 8], "critic_hidden": [16, 16], "batch_size": 16, "learning_starts": 32}
    return CrossQParams(**{**defaults, "buffer_size": 1000, **kw})


def batch_of(n: int, seed: int = 0) -> SampleBatch:
    rng = np.random.default_rng(seed)
    arrays = {
        "obs": rng.normal(1.0, 2.0, size=(n, 3)).astype(np.float32),
        "next_obs": rng.normal(1.0, 2.0, size=(n, 3)).astype(np.float32),
        "action": rng.uniform(-1, 1, (n, 2)).astype(np.float32),
        "reward": rng.normal(size=n).astype(np.float32),
        "discount": np.where(rng.random(n) < 0.2, 0.0, 0.99).astype(np.float32),
    }
    return SampleBatch("r", "w", 0, 0, n, arrays)


def fed_learner(params: CrossQParams, n: int = 64, seed: int = 0):
    learner = make_crossq_learner(params, OBS, ACT, "cpu", seed)
    learner.add(batch_of(n, seed))
    return learner


# ---- BatchRenorm against numpy


def renorm_by_hand(batches, eps, momentum, warmup, r_max, d_max):
    """Each training forward's output and the running statistics after it, in float64 numpy."""
    mu, var = np.zeros(batches[0].shape[1]), np.ones(batches[0].shape[1])
    outs = []
    for step, x in enumerate(batches):
        m, v = x.mean(0), x.var(0, ddof=1)  # the unbiased variance, as torch's var
        y = (x - m) / np.sqrt(v + eps)
        if step >= warmup:
            sigma = np.sqrt(var + eps)
            r = np.clip(np.sqrt(v + eps) / sigma, 1 / r_max, r_max)
            d = np.clip((m - mu) / sigma, -d_max, d_max)
            y = y * r + d
        mu, var = mu + momentum * (m - mu), var + momentum * (v - var)
        outs.append((y, mu.copy(), var.copy()))
    return outs


def test_batch_renorm_statistics_warmup_and_clipping_by_hand():
    """Two batch-norm forwards, then renorm on batches far from the running statistics, so that
    r and d both clip (r_max 1.5, d_max 0.5); eval mode uses the running statistics and keeps them."""
    rng = np.random.default_rng(0)
    batches = [rng.normal(loc, scale, (32, 4)) for loc, scale in ((0, 1), (1, 2), (3, 5), (-2, 0.2), (0.5, 1.1))]
    cfg = {"eps": 1e-3, "momentum": 0.1, "warmup": 2, "r_max": 1.5, "d_max": 0.5}
    layer = BatchRenorm((4,), **cfg).double()
    with torch.no_grad():
        layer.weight.copy_(torch.tensor([1.0, 2.0, 0.5, -1.0]))
        layer.bias.copy_(torch.tensor([0.0, 1.0, -1.0, 0.5]))
    w, b = layer.weight.detach().numpy().copy(), layer.bias.detach().numpy().copy()
    clipped = False
    for x, (y, mu, var) in zip(batches, renorm_by_hand(batches, **cfg), strict=True):
        sigma = np.sqrt(layer.running_var.numpy() + cfg["eps"])
        r = np.sqrt(x.var(0, ddof=1) + cfg["eps"]) / sigma
        clipped |= bool((r > 1.5).any() or (r < 1 / 1.5).any())
        out = layer(torch.from_numpy(x)).detach().numpy()
        np.testing.assert_allclose(out, y * w + b, rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(layer.running_mean.numpy(), mu, rtol=1e-12)
        np.testing.assert_allclose(layer.running_var.numpy(), var, rtol=1e-12)
    assert clipped and int(layer.steps) == 5
    layer.eval()
    x = rng.normal(size=(7, 4))
    want = (x - mu) / np.sqrt(var + cfg["eps"]) * w + b
    np.testing.assert_allclose(layer(torch.from_numpy(x)).detach().numpy(), want, rtol=1e-10)
    assert int(layer.steps) == 5 and np.allclose(layer.running_mean.numpy(), mu)


def test_batch_renorm_gradient_treats_r_and_d_as_constants():
    """Past warmup the gradient is batch norm's scaled by r: d/dx of sum(c * y) with r and d held."""
    rng = np.random.default_rng(1)
    layer = BatchRenorm((3,), warmup=0, momentum=0.5).double()
    with torch.no_grad():
        layer.running_mean.copy_(torch.tensor([0.3, -0.2, 0.1]))
        layer.running_var.copy_(torch.tensor([4.0, 0.25, 1.0]))
    x = torch.from_numpy(rng.normal(size=(10, 3))).requires_grad_(True)
    c = torch.from_numpy(rng.normal(size=(10, 3)))
    r, d = layer.corrections(x.detach().mean(0), x.detach().var(0))
    (layer(x) * c).sum().backward()
    x2 = x.detach().clone().requires_grad_(True)
    bn = (x2 - x2.mean(0)) / (x2.var(0) + layer.eps).sqrt()
    ((bn * r + d) * c).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), x2.grad.numpy(), rtol=1e-10)


def test_batch_renorm_keeps_one_set_of_statistics_per_ensemble_member():
    x = torch.randn(3, 20, 5, dtype=torch.float64) * torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64).view(3, 1, 1)
    layer = BatchRenorm((3, 5), momentum=1.0).double()
    y = layer(x)
    np.testing.assert_allclose(layer.running_var.numpy(), x.var(dim=1).numpy(), rtol=1e-12)
    np.testing.assert_allclose(y.mean(dim=1).detach().numpy(), 0.0, atol=1e-12)


# ---- the learner: the joint forward and its loss by hand


def critic_by_hand(state: dict[str, np.ndarray], x: np.ndarray, eps: float) -> np.ndarray:
    """The critics (N, rows) in training mode before warmup ends: per critic, batch norm over all
    the rows before every layer, ReLU between layers (float64)."""
    depth = len([k for k in state if k.startswith("w")])
    h = np.broadcast_to(x, (state["w0"].shape[0], *x.shape))
    for i in range(depth):
        m, v = h.mean(1, keepdims=True), h.var(1, ddof=1, keepdims=True)
        h = (h - m) / np.sqrt(v + eps) * state[f"norm.{i}.weight"][:, None] + state[f"norm.{i}.bias"][:, None]
        h = h @ state[f"w{i}"] + state[f"b{i}"]
        if i < depth - 1:
            h = np.maximum(h, 0.0)
    return h[..., 0]


def test_critic_loss_of_the_joint_forward_by_hand():
    """y = r + discount (min_k Q_k(s', a') - alpha log pi(a'|s')) from the next-state half of ONE
    training-mode forward over [(s, a); (s', a')]; the loss is the sum over critics of their MSE."""
    p = tiny(autotune=False, alpha=0.3, policy_delay=100)
    learner = fed_learner(p)
    b = {k: torch.from_numpy(v) for k, v in learner.replay.sample(np.arange(16)).items()}
    learner._batch = lambda: b
    state = {k: v.detach().double().numpy() for k, v in learner.critics.state_dict().items()}
    noise = learner.noise.get_state()
    with torch.no_grad():  # the next actions: the policy in eval mode, the learner's noise stream
        next_action, next_logp = learner.actor.sample(b["next_obs"], torch.Generator().set_state(noise))
    metrics = learner.train_step()
    x = np.concatenate(
        [np.concatenate([b["obs"], b["action"]], 1), np.concatenate([b["next_obs"], next_action.numpy()], 1)]
    ).astype(np.float64)
    q_all = critic_by_hand(state, x, p.batch_norm_eps)
    q, next_q = q_all[:, :16], q_all[:, 16:]
    r, d = b["reward"].numpy().astype(np.float64), b["discount"].numpy().astype(np.float64)
    y = r + d * (next_q.min(0) - 0.3 * next_logp.numpy())
    want = sum(np.mean((q[k] - y) ** 2) for k in range(2))
    assert metrics["critic_loss"] == pytest.approx(want, rel=1e-4)
    assert metrics["target_mean"] == pytest.approx(y.mean(), rel=1e-4, abs=1e-5)
    # the critics' running statistics moved towards those of all 2B rows (the joint forward's)
    np.testing.assert_allclose(
        learner.critics.norm[0].running_mean.numpy()[0], p.batch_norm_momentum * x.mean(0), rtol=1e-4, atol=1e-7
    )


def test_the_next_state_half_is_detached_and_no_target_critics_exist():
    learner = fed_learner(tiny())
    b = learner._batch()
    q, next_q, next_logp = learner.joint_forward(b)
    assert q.requires_grad and not next_q.requires_grad and not next_logp.requires_grad
    assert q.shape == next_q.shape == (2, 16)
    assert not hasattr(learner, "target")
    assert not any(k.startswith("target.") for k in learner.state_dict(False)[0])


def test_modes_policy_delay_and_optimiser_settings():
    """Critic BatchRenorm layers count one training forward per critic update, the policy's one per
    policy update (every policy_delay); both networks rest in eval mode; Adam's betas are CrossQ's."""
    p = tiny(policy_delay=3, adam_beta1=0.5)
    learner = fed_learner(p)
    assert learner.critic_opt.defaults["betas"] == (0.5, 0.999) == learner.actor_opt.defaults["betas"]
    assert learner.alpha_opt.defaults["betas"] == (0.9, 0.999)
    obs_seen = []
    real_batch = learner._batch

    def batch():
        b = real_batch()
        obs_seen.append(b["obs"].numpy().astype(np.float64))
        return b

    learner._batch = batch
    for i in range(1, 8):
        m = learner.train_step()
        assert not learner.actor.training and not learner.critics.training
        assert int(learner.critics.norm[0].steps) == i
        assert int(learner.actor.norm[0].steps) == (i + 2) // 3 == learner.policy_updates  # at 1, 4, 7
        assert "actor_loss" in m
    # the policy's first normalisation saw only the states of the policy updates' batches
    mean = np.zeros(3)
    for seen in (obs_seen[0], obs_seen[3], obs_seen[6]):
        mean = mean + p.batch_norm_momentum * (seen.mean(0) - mean)
    np.testing.assert_allclose(learner.actor.norm[0].running_mean.numpy(), mean, rtol=1e-4)


def test_a_few_hundred_updates_fit_the_critics():
    """Past the renorm warmup (20 forwards here) the critic loss on a fixed replay falls (rewards a
    function of the state, so there is something to fit)."""
    learner = fed_learner(tiny(renorm_warmup=20, autotune=False, alpha=0.01, gamma=0.5), n=256)
    learner.replay.arrays["reward"][:256] = np.sin(learner.replay.arrays["obs"][:256, 0])
    first = np.mean([learner.train_step()["critic_loss"] for _ in range(20)])
    for _ in range(250):
        last = learner.train_step()["critic_loss"]
    assert np.isfinite(last) and last < first / 2


# ---- workers: the numpy actor, checkpoints, export


def test_numpy_actor_applies_the_running_statistics_as_torch_eval_does():
    learner = fed_learner(tiny(hidden=[32, 16], batch_norm_momentum=0.5, renorm_warmup=0, policy_delay=1))
    for _ in range(10):
        learner.train_step()
    assert not np.allclose(learner.actor.norm[0].running_var.numpy(), 1.0)  # statistics that matter
    tensors, info = learner.export_weights()
    assert info["batch_norm_eps"] == 1e-3 and "norm.2.running_mean" in tensors
    np_fwd, th_fwd = make_forward(learner.params, OBS, ACT, "numpy", 1), make_forward(learner.params, OBS, ACT, "torch")
    np_fwd.load_weights(tensors, info)
    th_fwd.load_weights(tensors, info)
    obs = np.random.default_rng(3).normal(0, 3, (64, 3)).astype(np.float32)
    a, b = np_fwd(obs), th_fwd(obs)
    with torch.no_grad():  # the learner's own policy in eval mode gives the same means
        mean, _ = learner.actor(torch.from_numpy(obs))
    for k in ("action", "mean", "log_std"):
        np.testing.assert_allclose(a[k], b[k], atol=1e-5, rtol=0)
    np.testing.assert_allclose(a["mean"], mean.numpy(), atol=1e-5)
    fresh = make_forward(learner.params, OBS, ACT, "numpy", 1)  # before any weights: a valid policy too
    assert np.isfinite(fresh(obs)["action"]).all()


def test_resume_continues_with_the_same_statistics_and_optimiser_state():
    learner = fed_learner(tiny(renorm_warmup=3, batch_norm_momentum=0.2, policy_delay=2))
    for _ in range(5):
        learner.train_step()
    st, meta = learner.state_dict(include_replay=True)
    assert meta["algorithm"] == "crossq"
    again = make_crossq_learner(learner.params, OBS, ACT, "cpu", 9)
    again.load_state_dict(st, meta)
    for name in ("norm.1.running_var", "norm.2.running_mean", "norm.0.steps"):
        np.testing.assert_array_equal(again.critics.state_dict()[name], learner.critics.state_dict()[name])
    assert again.updates == 5 and again.policy_updates == 3 and int(again.actor.norm[1].steps) == 3
    for _ in range(4):  # past the warmup: renorm against the restored running statistics
        m1, m2 = learner.train_step(), again.train_step()
        assert m1["critic_loss"] == pytest.approx(m2["critic_loss"], rel=1e-6)
    steps = [float(s["step"]) for s in again.critic_opt.state.values()]
    assert steps and all(s == 9.0 for s in steps)
    np.testing.assert_allclose(
        again.critics.norm[2].running_var.numpy(), learner.critics.norm[2].running_var.numpy(), rtol=1e-6
    )
    with pytest.raises(ValueError, match="not a crossq checkpoint"):
        again.load_state_dict(st, {**meta, "algorithm": "sac"})


def test_checkpoint_policy_and_export_without_the_learner():
    learner = fed_learner(tiny(policy_delay=1))
    learner.train_step()
    st, meta = learner.state_dict(include_replay=False)
    tensors, info = crossq_weights_from_checkpoint(st, meta)
    want, want_info = learner.export_weights()
    assert set(tensors) == set(want) and info == want_info
    with pytest.raises(ValueError):
        weights_from_checkpoint(st, meta)  # SAC's reader refuses a crossq checkpoint
    module = export_module(learner.params, OBS, ACT, tensors, info)
    fwd = make_forward(learner.params, OBS, ACT, "numpy")
    fwd.load_weights(tensors, info)
    obs = np.random.default_rng(0).normal(size=(5, 3)).astype(np.float32)
    with torch.no_grad():
        outs = dict(zip(module.output_names, (o.numpy() for o in module(torch.from_numpy(obs)))))
    for k, v in fwd(obs).items():
        np.testing.assert_allclose(outs[k], v, atol=1e-5)


def test_check_plugin_passes_for_crossq_on_pendulum():
    from mqttrl.conformance import check_algorithm
    from mqttrl.plugin.manager import get_registry

    info = get_registry().algorithms["crossq"].obj
    assert info.check_env == "Pendulum-v1" and info.export_module is not None
    params = CrossQParams(hidden=[16, 16], critic_hidden=[32, 32], batch_size=32, learning_starts=64)
    results = check_algorithm(info, params=params)
    assert all(r.ok for r in results), [r for r in results if not r.ok]
    assert any(r.name == "train_step" for r in results)


def test_the_shipped_crossq_configs():
    from pathlib import Path

    from mqttrl.config import load_config
    from mqttrl.plugin.manager import get_registry

    configs = Path(__file__).resolve().parent.parent / "configs"
    params = lambda name: get_registry().algorithm(name).params  # noqa: E731
    pendulum = load_config(configs / "pendulum_crossq.toml", [], params)
    assert pendulum.env.id == "Pendulum-v1" and pendulum.algorithm.name == "crossq"
    assert pendulum.train.target_return == -200.0
    hopper = load_config(configs / "hopper_crossq.toml", [], params)
    h = hopper.algorithm.params
    assert hopper.env.id == "Hopper-v5" and hopper.algorithm.name == "crossq"
    assert (h.critic_hidden, h.hidden, h.policy_delay, h.adam_beta1, h.utd) == ([2048, 2048], [256, 256], 3, 0.5, 1.0)
    assert h.actor_lr == h.critic_lr == 1e-3 and (h.batch_norm_momentum, h.renorm_warmup) == (0.01, 100_000)
