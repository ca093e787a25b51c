"""``noisy_layers = "all"``: the torso's dense layers are noisy too (Rainbow, Dopamine's full Rainbow,
CleanRL), in the learner, the torch forward and the numpy forward (torch-free workers), which agree
within 1e-5 for the same noise; checkpoints, exported weights and the exported module carry them."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers.replay_rows import ACT, CARTPOLE_OBS, IMAGE_OBS, random_arrays

from mqttrl.wire import decode_batch, decode_weights, encode_batch, encode_weights
from mqttrl_plugins.dqn.common import DQNParams, net_info
from mqttrl_plugins.dqn.export import export_module, weights_from_checkpoint
from mqttrl_plugins.dqn.heads import NoisyLinear, reset_noise_of
from mqttrl_plugins.dqn.learner import DQNLearner, TorchQForward
from mqttrl_plugins.dqn.numpy_net import NumpyQForward

torch.set_num_threads(1)


def params(**kw) -> DQNParams:
    base = dict(
        hidden=[32, 24],
        batch_size=16,
        buffer_size=1000,
        learning_starts=32,
        replay_ratio=4.0,
        noisy=True,
        n_atoms=11,
        v_min=-3.0,
        v_max=4.0,
        n_quantiles=9,
    )
    base.update(kw)
    return DQNParams(**base)


def _randomised(learner: DQNLearner) -> tuple[dict, dict]:
    """Every tensor perturbed (sigmas no longer constant), then exported as a worker gets them."""
    with torch.no_grad():
        gen = torch.Generator().manual_seed(5)
        for t in learner.online.parameters():
            t.add_(0.1 * torch.randn(t.shape, generator=gen))
    tensors, info = learner.export_weights()
    msg = decode_weights(encode_weights(1, "dqn", "r", tensors, info))
    return msg.tensors, msg.info


def test_the_setting_and_the_network_description():
    assert DQNParams().noisy_layers == "all"
    info = net_info(4, 2, params())
    assert info["noisy_layers"] == "all"
    learner = DQNLearner(params(), CARTPOLE_OBS, ACT, "cpu", 0)
    names = set(learner.export_weights()[0])
    assert {"trunk.0.weight_mu", "trunk.0.weight_sigma", "trunk.2.bias_mu", "trunk.2.bias_sigma"} <= names
    assert not any(n.startswith("trunk.") and n.endswith((".weight", ".bias")) for n in names)
    # six noisy layers' worth of parameters: 2 torso + 2 head (dueling), each mu and sigma
    assert len(learner.online.noisy_layers()) == 4
    head_only = DQNLearner(params(noisy_layers="head"), CARTPOLE_OBS, ACT, "cpu", 0)
    assert {"trunk.0.weight", "trunk.0.bias"} <= set(head_only.export_weights()[0])
    assert len(head_only.online.noisy_layers()) == 2
    # a CNN: its dense layer is noisy, the convolution stays plain (Dopamine's and CleanRL's choice)
    cnn = DQNLearner(params(), IMAGE_OBS, ACT, "cpu", 0).export_weights()[0]
    assert {"trunk.0.weight", "trunk.0.bias", "trunk.2.weight_mu", "trunk.2.weight_sigma"} <= set(cnn)


CASES = [(dist, torso) for dist in ("none", "c51", "qr") for torso in ("mlp", "cnn")]


@pytest.mark.parametrize("dist,torso", CASES)
def test_numpy_equals_torch_with_noisy_hidden_layers(dist, torso):
    """The same noise given to both sides (one draw for the batch, one per row): within 1e-5."""
    space = CARTPOLE_OBS if torso == "mlp" else IMAGE_OBS
    p = params(distributional=dist)
    learner = DQNLearner(p, space, ACT, "cpu", 0)
    tensors, info = _randomised(learner)
    fwd_np = NumpyQForward(p, space, ACT)
    fwd_np.load_weights(tensors, info)
    obs = random_arrays(32, np.random.default_rng(2), space)["obs"]
    x = torch.from_numpy(obs)
    net = learner.online
    with torch.no_grad():
        mean = net(x, noise=False).numpy()
    tol = 1e-5 * max(1.0, np.abs(mean).max())
    np.testing.assert_allclose(fwd_np.noiseless(obs)["q"], mean, rtol=0, atol=tol)
    torso_np, head_np = fwd_np.layers.torso, fwd_np.layers.head
    assert torso_np.noisy and len(net.noisy_layers()) == len(torso_np.dense) + len(head_np.layers)
    for rows in (None, 32):
        rng = np.random.default_rng(0 if rows is None else rows)
        t_noise, h_noise = torso_np.sample_noise(rng, rows), head_np.sample_noise(rng, rows)
        for layer, (eps_in, eps_out) in zip(net.noisy_layers(), t_noise + h_noise):
            layer.set_noise(torch.from_numpy(eps_in), torch.from_numpy(eps_out))
        with torch.no_grad():
            want = net(x).numpy()
            torso_only = net.trunk(x).numpy()
        assert np.abs(want - mean).max() > 1e-3  # the noise does something
        features = torso_np(obs, t_noise)
        np.testing.assert_allclose(features, torso_only, rtol=0, atol=1e-5 * max(1.0, np.abs(torso_only).max()))
        np.testing.assert_allclose(head_np(features, h_noise), want, rtol=0, atol=tol)
        np.testing.assert_allclose(torso_np(obs), net.trunk(x, noise=False).detach().numpy(), rtol=0, atol=1e-5)


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_forwards_explore_per_row_through_the_torso_and_greedy_is_the_mean(backend):
    p = params(noisy_sigma0=2.0)
    learner = DQNLearner(p, CARTPOLE_OBS, ACT, "cpu", 0)
    # the head's sigmas 0: only the hidden layers' noise can make two calls differ
    with torch.no_grad():
        for layer in learner.online.head_layers():
            layer.weight_sigma.zero_()
            layer.bias_sigma.zero_()
    tensors, info = learner.export_weights()
    make = NumpyQForward if backend == "numpy" else TorchQForward
    fwd = make(p, CARTPOLE_OBS, ACT, seed=3)
    fwd.load_weights(tensors, info)
    obs = np.repeat(np.random.default_rng(0).normal(size=(1, 4)).astype(np.float32), 8, 0)
    q = fwd(obs)["q"]
    assert len(np.unique(q[:, 0])) == 8  # each row its own hidden-layer noise
    with torch.no_grad():
        mean = learner.online(torch.from_numpy(obs), noise=False).numpy()
    np.testing.assert_allclose(fwd.noiseless(obs)["q"], mean, rtol=0, atol=1e-5)


def test_reset_noise_of_draws_once_for_every_layer_in_order():
    layers = [NoisyLinear(3, 4), NoisyLinear(4, 2)]
    reset_noise_of(layers, generator=torch.Generator().manual_seed(1))
    e = torch.randn(13, generator=torch.Generator().manual_seed(1))
    f = e.sign() * e.abs().sqrt()
    got = torch.cat([layers[0].eps_in, layers[0].eps_out, layers[1].eps_in, layers[1].eps_out])
    torch.testing.assert_close(got, f, rtol=0, atol=0)
    reset_noise_of(layers, rows=5)
    assert layers[0].eps_in.shape == (5, 3) and layers[1].eps_out.shape == (5, 2)


def test_learner_checkpoint_export_and_torch_free_load():
    p = params(distributional="c51", prioritized=True, initial_priority="max", target_update_every=3)
    rng = np.random.default_rng(0)
    a = DQNLearner(p, CARTPOLE_OBS, ACT, "cpu", 0)
    for _ in range(3):
        a.add(decode_batch(encode_batch("r", "w", 0, 0, random_arrays(40, rng))))
    before = {k: v.copy() for k, v in a.export_weights()[0].items()}
    for _ in range(4):
        assert np.isfinite(a.train_step()["loss"])
    after = a.export_weights()[0]
    assert not np.array_equal(after["trunk.0.weight_sigma"], before["trunk.0.weight_sigma"])  # they learn
    tensors, meta = a.state_dict(include_replay=True)
    b = DQNLearner(p, CARTPOLE_OBS, ACT, "cpu", 9)
    b.load_state_dict(tensors, meta)
    for _ in range(4):
        assert a.train_step() == b.train_step()
    with pytest.raises(ValueError, match="network"):  # a head-only noisy checkpoint is another network
        DQNLearner(params(distributional="c51", noisy_layers="head"), CARTPOLE_OBS, ACT, "cpu", 0).load_state_dict(
            tensors, meta
        )
    # torch-free: the checkpoint's online net into a numpy forward; and the exported torch module
    online, info = weights_from_checkpoint(*a.state_dict(include_replay=False))
    fwd = NumpyQForward(params(noisy=False), CARTPOLE_OBS, ACT)  # the weights' info decides the network
    fwd.load_weights(online, info)
    obs = rng.normal(size=(16, 4)).astype(np.float32)
    with torch.no_grad():
        mean = a.online(torch.from_numpy(obs), noise=False).numpy()
        exported = export_module(p, CARTPOLE_OBS, ACT, online, info)(torch.from_numpy(obs))[0].numpy()
    np.testing.assert_allclose(fwd.noiseless(obs)["q"], mean, rtol=0, atol=1e-5)
    np.testing.assert_allclose(exported, mean, rtol=0, atol=1e-6)


def test_weights_without_the_key_are_head_only_noisy():
    """Weights made before the option (noisy: true, no noisy_layers) load as what they are."""
    old = DQNLearner(params(noisy_layers="head"), CARTPOLE_OBS, ACT, "cpu", 0)
    tensors, info = old.export_weights()
    assert "noisy_layers" not in info
    for make in (NumpyQForward, TorchQForward):
        fwd = make(params(), CARTPOLE_OBS, ACT)  # configured "all"
        fwd.load_weights(tensors, info)
        assert "noisy_layers" not in fwd.info
        obs = np.ones((2, 4), np.float32)
        with torch.no_grad():
            mean = old.online(torch.from_numpy(obs), noise=False).numpy()
        np.testing.assert_allclose(fwd.noiseless(obs)["q"], mean, rtol=0, atol=1e-5)
