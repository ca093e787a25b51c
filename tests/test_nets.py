"""Network torsos (mqttrl.nets): the description, the numpy forward against torch's, bad sizes."""

from __future__ import annotations

import json
import time

import gymnasium as gym
import numpy as np
import pytest
import torch

from mqttrl.nets import (
    NumpyTorso,
    conv_shapes,
    describe,
    initial_weights,
    input_dtype,
    out_size,
    pick_layout,
    pick_network,
    validate,
    weight_shapes,
)
from mqttrl.nets.torch_torso import Torso, orthogonal_init
from mqttrl.state.torch_state import export_module


def _obs(rng: np.random.Generator, n: int, shape: tuple[int, ...], dtype) -> np.ndarray:
    if dtype == np.uint8:
        return rng.integers(0, 256, (n, *shape), dtype=np.uint8)
    if dtype == np.bool_:
        return rng.random((n, *shape)) < 0.3
    return rng.standard_normal((n, *shape)).astype(np.float32)


CASES = [
    ("nature_cnn", (4, 84, 84), np.uint8),
    ("nature_cnn", (84, 84, 3), np.uint8),
    ("nature_cnn", (4, 40, 44), np.float32),
    ("minatar_cnn", (10, 10, 4), np.bool_),
    ("minatar_cnn", (10, 10, 4), np.uint8),
    ("minatar_cnn", (2, 12, 10), np.float32),
    ("minatar_cnn", (10, 10), np.bool_),
    ("mlp", (6,), np.float32),
    ("mlp", (3, 5), np.uint8),
    ("mlp", (10, 10, 4), np.bool_),
]


@pytest.mark.parametrize("network,shape,dtype", CASES, ids=lambda v: getattr(v, "__name__", str(v)))
@pytest.mark.parametrize("batch", [1, 8])
def test_numpy_forward_equals_torch(network, shape, dtype, batch):
    torso = describe(network, shape, dtype, hidden=[32, 16])
    assert json.loads(json.dumps(torso)) == torso  # travels in the weights' info
    torch.manual_seed(0)
    module = Torso(torso).eval()
    if batch == 8:  # both inits, so the features are not all tiny or dead
        orthogonal_init(module)
    tensors = export_module(module)
    assert {k: tuple(v.shape) for k, v in tensors.items()} == weight_shapes(torso)
    forward = NumpyTorso(torso, tensors)
    obs = _obs(np.random.default_rng(batch), batch, shape, dtype)
    with torch.inference_mode():
        expected = module(torch.from_numpy(obs)).numpy()
    got = forward(obs)
    assert got.dtype == np.float32 and got.shape == expected.shape == (batch, out_size(torso))
    assert np.abs(expected).max() > 0
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5 * np.abs(expected).max())
    assert forward(obs[:0]).shape == (0, out_size(torso))  # an inference server may get an empty batch


def test_torso_keeps_the_input_dtype_until_inside():
    """A uint8 batch goes into the module as uint8; the module scales it by 1/255."""
    torso = describe("minatar_cnn", (10, 10, 4), np.uint8)
    module = Torso(torso).eval()
    unscaled = Torso(describe("minatar_cnn", (10, 10, 4), np.float32)).eval()
    unscaled.load_state_dict(module.state_dict())
    obs = _obs(np.random.default_rng(0), 3, (10, 10, 4), np.uint8)
    with torch.inference_mode():
        a = module(torch.from_numpy(obs))
        b = unscaled(torch.from_numpy(obs.astype(np.float32) / 255))
        c = module(torch.from_numpy(obs.astype(np.float32)))  # the same values as float: scaled the same
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(a, c, rtol=0, atol=0)


def test_descriptions():
    assert describe("auto", (4, 84, 84), np.uint8) == {
        "network": "nature_cnn",
        "obs_shape": [4, 84, 84],
        "layout": "chw",
        "obs_scale": 1 / 255,
        "convs": [[32, 8, 4], [64, 4, 2], [64, 3, 1]],
        "dense": [512],
    }
    assert describe("auto", (10, 10, 4), np.bool_) == {
        "network": "minatar_cnn",
        "obs_shape": [10, 10, 4],
        "layout": "hwc",
        "obs_scale": 1.0,
        "convs": [[16, 3, 1]],
        "dense": [128],
    }
    assert describe("auto", (8,), np.float32, hidden=[64, 64]) == {
        "network": "mlp",
        "obs_shape": [8],
        "layout": "flat",
        "obs_scale": 1.0,
        "convs": [],
        "dense": [64, 64],
    }
    nature = describe("nature_cnn", (4, 84, 84), np.uint8)
    assert conv_shapes(nature) == [(4, 84, 84), (32, 20, 20), (64, 9, 9), (64, 7, 7)]
    assert weight_shapes(nature, "trunk.") == {
        "trunk.0.weight": (32, 4, 8, 8),
        "trunk.0.bias": (32,),
        "trunk.2.weight": (64, 32, 4, 4),
        "trunk.2.bias": (64,),
        "trunk.4.weight": (64, 64, 3, 3),
        "trunk.4.bias": (64,),
        "trunk.6.weight": (512, 3136),
        "trunk.6.bias": (512,),
    }
    assert out_size(nature) == 512
    assert out_size(describe("mlp", (3, 4), np.float32)) == 12  # no hidden layers: the flattened input


@pytest.mark.parametrize(
    "shape,layout",
    [((4, 84, 84), "chw"), ((10, 10, 4), "hwc"), ((84, 84, 3), "hwc"), ((1, 10, 10), "chw"), ((10, 10), "chw")],
)
def test_auto_layout(shape, layout):
    assert pick_layout(shape) == layout
    assert pick_layout(shape, "hwc" if len(shape) == 3 else "chw") == ("hwc" if len(shape) == 3 else "chw")


@pytest.mark.parametrize(
    "shape,network",
    [
        ((4,), "mlp"),
        ((2, 3, 4, 5), "mlp"),
        ((4, 84, 84), "nature_cnn"),
        ((84, 84, 4), "nature_cnn"),
        ((36, 36), "nature_cnn"),
        ((4, 35, 84), "minatar_cnn"),
        ((10, 10, 4), "minatar_cnn"),
        ((2, 2), "mlp"),  # smaller than minatar_cnn's 3x3 convolution
    ],
)
def test_auto_network(shape, network):
    assert pick_network("auto", shape) == network
    assert describe("auto", shape, np.uint8)["network"] == network


def test_bad_sizes_and_names():
    with pytest.raises(
        ValueError, match=r"nature_cnn.*\(4, 30, 84\).*30x84 pixels.*too small.*conv 2 \(3x3, stride 1\)"
    ):
        describe("nature_cnn", (4, 30, 84), np.uint8)
    with pytest.raises(ValueError, match=r"minatar_cnn.*2x10 pixels.*too small"):
        describe("minatar_cnn", (2, 10), np.bool_)
    with pytest.raises(ValueError, match=r"minatar_cnn needs an image observation.*\(100,\)"):
        describe("minatar_cnn", (100,), np.float32)
    with pytest.raises(ValueError, match="network='resnet'"):
        describe("resnet", (4, 84, 84), np.uint8)
    with pytest.raises(ValueError, match="layout='nhwc'"):
        describe("nature_cnn", (4, 84, 84), np.uint8, layout="nhwc")
    good = describe("minatar_cnn", (10, 10, 4), np.bool_)
    for bad in (
        {**good, "convs": [[16, 3]]},
        {**good, "convs": [[16, 11, 1]]},
        {**good, "dense": [0]},
        {**good, "obs_scale": float("nan")},
        {**good, "layout": "flat"},
        {**good, "network": "other"},
        {k: v for k, v in good.items() if k != "dense"},
    ):
        with pytest.raises(ValueError):
            validate(bad)


def test_input_dtypes():
    assert input_dtype(gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)) == np.uint8
    assert input_dtype(gym.spaces.Box(0, 1, (10, 10, 4), bool)) == np.bool_
    assert input_dtype(gym.spaces.Box(-1, 1, (3,), np.float64)) == np.float32
    with pytest.raises(TypeError, match="uint8, bool or float.*int16"):
        input_dtype(gym.spaces.Box(0, 10, (3,), np.int16), "dqn")
    with pytest.raises(TypeError, match="Box"):
        input_dtype(gym.spaces.Discrete(3))


def test_numpy_forward_checks_weights():
    torso = describe("minatar_cnn", (10, 10, 4), np.bool_)
    tensors = initial_weights(torso, np.random.default_rng(0))
    with pytest.raises(ValueError, match="missing"):
        NumpyTorso(torso, {k: v for k, v in tensors.items() if k != "2.bias"})
    with pytest.raises(ValueError, match="shape"):
        NumpyTorso(torso, {**tensors, "0.weight": np.zeros((16, 4, 2, 2), np.float32)})
    forward = NumpyTorso(torso, tensors)
    with pytest.raises(ValueError, match="shape"):
        forward(np.zeros((2, 4, 10, 10), bool))


def test_numpy_initial_weights_orthogonal():
    torso = describe("nature_cnn", (4, 84, 84), np.uint8)
    tensors = initial_weights(torso, np.random.default_rng(0), "torso.", gain=np.sqrt(2))
    assert {k: v.shape for k, v in tensors.items()} == weight_shapes(torso, "torso.")
    w = tensors["torso.2.weight"].reshape(64, -1).astype(np.float64)
    np.testing.assert_allclose(w @ w.T, 2 * np.eye(64), atol=1e-5)
    assert not tensors["torso.2.bias"].any()


def test_numpy_nature_cnn_is_fast(capsys):
    """The numpy Nature CNN is not far behind torch on one thread (printed; a loose bound)."""
    torso = describe("nature_cnn", (4, 84, 84), np.uint8)
    module = Torso(torso).eval()
    forward = NumpyTorso(torso, export_module(module))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for batch in (1, 8):
            obs = _obs(np.random.default_rng(0), batch, (4, 84, 84), np.uint8)
            x = torch.from_numpy(obs)

            def torch_forward(x=x):
                with torch.inference_mode():
                    return module(x)

            times = {}
            for name, fn in (("numpy", lambda obs=obs: forward(obs)), ("torch", torch_forward)):
                fn()
                best = float("inf")
                for _ in range(5):
                    t0 = time.perf_counter()
                    for _ in range(5):
                        fn()
                    best = min(best, (time.perf_counter() - t0) / 5)
                times[name] = best
            with capsys.disabled():
                print(
                    f"\nnature_cnn batch {batch}: numpy {times['numpy'] * 1e3:.2f} ms, torch {times['torch'] * 1e3:.2f} ms"
                )
            assert times["numpy"] < 5 * times["torch"] + 2e-3
    finally:
        torch.set_num_threads(threads)


# ---------------------------------------------------------------- the algorithms on image observations

IMAGES = {
    "uint8_stack": (gym.spaces.Box(0, 255, (4, 36, 36), np.uint8), "nature_cnn"),
    "bool_minatar": (gym.spaces.Box(0, 1, (10, 10, 4), bool), "minatar_cnn"),
}
ACT = gym.spaces.Discrete(3)


def _random_frames(space: gym.spaces.Box, rng: np.random.Generator, n: int) -> np.ndarray:
    return _obs(rng, n, space.shape, space.dtype.type)


@pytest.mark.parametrize("image", sorted(IMAGES))
def test_dqn_trains_on_images_and_both_forwards_agree(image):
    from mqttrl.plugin.algorithm import ActorContext
    from mqttrl.wire import decode_batch, decode_weights, encode_batch, encode_weights
    from mqttrl_plugins.dqn import make_forward
    from mqttrl_plugins.dqn.actor import DQNActor
    from mqttrl_plugins.dqn.common import DQNParams
    from mqttrl_plugins.dqn.learner import DQNLearner

    space, network = IMAGES[image]
    torch.manual_seed(0)
    # frames="off": observations travel as arrays (the frames path is tested in test_frames.py)
    p = DQNParams(
        batch_size=8, buffer_size=256, learning_starts=16, replay_ratio=2.0, epsilon_decay_steps=0, frames="off"
    )
    learner = DQNLearner(p, space, ACT, "cpu", 0)
    tensors, info = learner.export_weights()
    assert info["torso"]["network"] == network and tensors["trunk.0.weight"].ndim == 4
    actor = DQNActor(p, space, ACT, ActorContext(num_envs=2, seed=1), forward=make_forward(p, space, ACT, "numpy", 1))
    actor.load_weights(tensors, info)
    rng = np.random.default_rng(0)
    obs = _random_frames(space, rng, 2)
    before = {k: v.copy() for k, v in tensors.items()}
    metrics = []
    for t in range(64):
        actions, extras = actor.act(obs)
        nxt = _random_frames(space, rng, 2)
        ended = np.array([t % 9 == 8, False])
        actor.record(obs, actions, extras, rng.normal(size=2).astype(np.float32), nxt, ended, np.zeros(2, bool))
        obs = nxt
        if actor.pending() >= 8:
            learner.add(decode_batch(encode_batch("r", "w", 0, 0, actor.take())))
        while learner.train_due():
            metrics.append(learner.train_step())
    assert learner.updates >= 10 and all(np.isfinite(m["loss"]) for m in metrics)

    # exported weights, through the wire, into both forwards: the same Q-values as the learner's network
    tensors, info = learner.export_weights()
    assert any(not np.array_equal(tensors[k], before[k]) for k in tensors)
    msg = decode_weights(encode_weights(1, "dqn", "r", tensors, info))
    fwd_np, fwd_t = make_forward(p, space, ACT, "numpy"), make_forward(p, space, ACT, "torch")
    for fwd in (fwd_np, fwd_t):
        fwd.load_weights(msg.tensors, msg.info)
    for batch in (1, 8):
        x = _random_frames(space, rng, batch)
        with torch.no_grad():
            expected = learner.online(torch.from_numpy(x)).numpy()
        q_np, q_t = fwd_np(x)["q"], fwd_t(x)["q"]
        tol = 1e-5 * max(1.0, np.abs(expected).max())
        np.testing.assert_allclose(q_t, expected, rtol=0, atol=tol)
        np.testing.assert_allclose(q_np, expected, rtol=0, atol=tol)

    # a checkpoint of the learner loads into a fresh one
    state, meta = learner.state_dict(include_replay=True)
    other = DQNLearner(p, space, ACT, "cpu", 1)
    other.load_state_dict(state, json.loads(json.dumps(meta)))
    with torch.no_grad():
        np.testing.assert_array_equal(other.online(torch.from_numpy(x)).numpy(), expected)


@pytest.mark.parametrize("image", sorted(IMAGES))
def test_ppo_trains_on_images_and_both_forwards_agree(image):
    from mqttrl.plugin.algorithm import ActorContext
    from mqttrl.wire import decode_batch, decode_weights, encode_batch, encode_weights
    from mqttrl_plugins.ppo import make_forward
    from mqttrl_plugins.ppo.actor import PPOActor
    from mqttrl_plugins.ppo.common import PPOParams, sample_spec
    from mqttrl_plugins.ppo.learner import PPOLearner

    space, network = IMAGES[image]
    p = PPOParams(rollout_steps=16, epochs=2, minibatch_size=16, ent_coef=0.01)
    assert sample_spec(p, space, ACT).fields["obs"].dtype == space.dtype.name  # observations keep their dtype
    learner = PPOLearner(p, space, ACT, "cpu", 0)
    tensors, info = learner.export_weights()
    assert info["torso"]["network"] == network
    assert {"torso.0.weight", "actor.weight", "critic.weight"} <= set(tensors)
    actor = PPOActor(p, space, ACT, ActorContext(num_envs=2, seed=1), forward=make_forward(p, space, ACT, "numpy", 1))
    actor.load_weights(tensors, info)
    rng = np.random.default_rng(0)
    obs = _random_frames(space, rng, 2)
    for t in range(p.rollout_steps):
        actions, extras = actor.act(obs)
        nxt = _random_frames(space, rng, 2)
        ended = np.array([t % 5 == 4, False])
        actor.record(obs, actions, extras, rng.normal(size=2).astype(np.float32), nxt, ended, np.zeros(2, bool))
        obs = nxt
    rollout = actor.take()
    assert rollout["obs"].dtype == space.dtype and rollout["obs"].shape == (32, *space.shape)
    batch = decode_batch(encode_batch("r", "w", 0, 0, rollout))
    # the actor's numpy logprobs and values are the learner's: the first ratio is 1
    with torch.no_grad():
        logprob, _, value = learner.agent.evaluate(
            torch.from_numpy(rollout["obs"]), torch.from_numpy(rollout["action"])
        )
    np.testing.assert_allclose(rollout["logprob"], logprob.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(rollout["value"], value.numpy(), rtol=1e-5, atol=1e-5)
    m = learner.train_round([batch])
    assert m["transitions"] == 32 and np.isfinite(m["policy_loss"]) and learner.updates == 4

    # exported weights, through the wire, into both forwards: the learner's outputs
    tensors, info = learner.export_weights()
    msg = decode_weights(encode_weights(1, "ppo", "r", tensors, info))
    fwd_np, fwd_t = make_forward(p, space, ACT, "numpy"), make_forward(p, space, ACT, "torch")
    for fwd in (fwd_np, fwd_t):
        fwd.load_weights(msg.tensors, msg.info)
    for batch_size in (1, 8):
        x = _random_frames(space, rng, batch_size)
        with torch.no_grad():
            logits, value = (t.numpy() for t in learner.agent(torch.from_numpy(x)))
        for out in (fwd_np(x), fwd_t(x)):
            for name, expected in (("logits", logits), ("value", value)):
                tol = 1e-5 * max(1.0, np.abs(expected).max())
                np.testing.assert_allclose(out[name], expected, rtol=0, atol=tol, err_msg=name)

    # a checkpoint of the learner loads into a fresh one
    state, meta = learner.state_dict(include_replay=False)
    other = PPOLearner(p, space, ACT, "cpu", 1)
    other.load_state_dict(state, json.loads(json.dumps(meta)))
    with torch.no_grad():
        np.testing.assert_array_equal(other.agent(torch.from_numpy(x))[0].numpy(), logits)


def test_ppo_mlp_on_uint8_scales_inside_and_refuses_obs_norm():
    from mqttrl.config import ConfigError
    from mqttrl_plugins.ppo import make_forward
    from mqttrl_plugins.ppo.common import PPOParams
    from mqttrl_plugins.ppo.learner import PPOLearner

    space = gym.spaces.Box(0, 255, (3, 4), np.uint8)
    p = PPOParams(network="mlp", hidden=[16])
    learner = PPOLearner(p, space, ACT)
    tensors, info = learner.export_weights()
    assert info["obs_scale"] == 1 / 255 and "torso" not in info and tensors["actor.0.weight"].shape == (16, 12)
    x = _obs(np.random.default_rng(0), 8, (3, 4), np.uint8)
    with torch.no_grad():
        logits, value = (t.numpy() for t in learner.agent(torch.from_numpy(x)))
        scaled = learner.agent.actor(torch.from_numpy(x.reshape(8, -1).astype(np.float32) / 255)).numpy()
    np.testing.assert_allclose(logits, scaled, rtol=1e-5, atol=1e-6)
    for backend in ("numpy", "torch"):
        fwd = make_forward(p, space, ACT, backend)
        fwd.load_weights(tensors, info)
        np.testing.assert_allclose(fwd(x)["logits"], logits, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(fwd(x)["value"], value, rtol=1e-5, atol=1e-6)
    with pytest.raises(ConfigError, match="obs_norm=true.*uint8.*set obs_norm = false"):
        PPOLearner(PPOParams(network="mlp", obs_norm=True), space, ACT)
    with pytest.raises(ConfigError, match="obs_norm=true.*minatar_cnn"):
        make_forward(PPOParams(obs_norm=True), gym.spaces.Box(0, 1, (10, 10, 4), np.float32), ACT, "numpy")
    with pytest.raises(TypeError, match="uint8, bool or float"):
        PPOLearner(p, gym.spaces.Box(0, 9, (4,), np.int64), ACT)
