"""The DQN learner's GPU path, run on the CPU (same code, ``device = "cpu"``): the device replay gives
what the host replay gives, prefetching changes no batch, bf16 autocast stays close to float32."""

from __future__ import annotations

import logging

import gymnasium as gym
import numpy as np
import pytest
import torch
from helpers.dqn_kit import ACT, OBS, as_batch, random_arrays, small_params, through_checkpoint_formats
from helpers.frames_kit import StackedGame, frame_actor

from mqttrl.wire import decode_batch, encode_batch
from mqttrl_plugins.dqn.device_replay import DeviceReplay, choose_side
from mqttrl_plugins.dqn.frames import FrameLayout
from mqttrl_plugins.dqn.learner import DQNLearner
from mqttrl_plugins.dqn.replay import ArrayReplay, FrameReplay, SumTree

torch.set_num_threads(1)
CPU = torch.device("cpu")


def _frame_batches(k: int, steps: int, seed: int) -> list[tuple[dict, int]]:
    """Packed frame batches of a stacked game (k frames of 6x6), as two workers' actors send them."""
    out = []
    for w in range(2):
        game, actor = StackedGame(3, k, 6, seed + w), frame_actor("stack", (k, 6, 6), 3, 3)
        for step in range(steps):
            obs, actions, rewards, next_obs, term, trunc = game.step()
            actor.record(obs, actions, {}, rewards, next_obs, term, trunc)
            if step % 7 == 6:
                batch = actor.take()
                if len(batch["action"]):
                    out.append((batch, w))
    return out


@pytest.mark.parametrize("k", [1, 4])
def test_device_frame_replay_gives_the_host_replays_samples(k):
    """Same adds (ring wraps, frames shared between batches, slots reused, the store grows): every
    ring slot's sample from the device copy equals the host replay's, stacks rebuilt exactly."""
    host = FrameReplay(40, FrameLayout(k, (6, 6), "uint8", True), (k, 6, 6))
    host._alloc_store(8)  # tiny store: it must grow while the device copy follows
    twin = FrameReplay(40, FrameLayout(k, (6, 6), "uint8", True), (k, 6, 6))
    dev = DeviceReplay(twin, CPU, prioritized=False)
    for batch, w in _frame_batches(k, 120, seed=3):
        n = len(batch["action"])
        np.testing.assert_array_equal(host.add(batch, n, f"w{w}"), dev.add(batch, n, f"w{w}"))
    assert host.size == 40 and len(host.frames) > 8  # wrapped and grew
    idx = np.arange(host.size)
    want = host.sample(idx)
    got = dev.gather(torch.from_numpy(idx))
    for name, arr in want.items():
        np.testing.assert_array_equal(got[name].numpy(), arr, err_msg=name)


def test_device_array_replay_gives_the_host_replays_samples():
    rng = np.random.default_rng(1)
    host, twin = ArrayReplay(50, (2,), np.float32), ArrayReplay(50, (2,), np.float32)
    dev = DeviceReplay(twin, CPU, prioritized=True)
    for _ in range(4):
        arrays = random_arrays(30, rng)
        host.add(arrays, 30)
        dev.add(arrays, 30)
    idx = rng.integers(0, 50, 64)
    got = dev.gather(torch.from_numpy(idx))
    for name, arr in host.sample(idx).items():
        np.testing.assert_array_equal(got[name].numpy(), arr, err_msg=name)


def test_prioritized_device_sampling_finds_the_sum_trees_leaves():
    """Integer priorities (exact sums): the cumulative-sum search picks the sum tree's leaf for any
    mass, zero-priority slots never; the importance weights follow the host's formula."""
    rng = np.random.default_rng(2)
    prio = rng.integers(0, 5, 37).astype(np.float64)
    tree = SumTree(37)
    tree.set(np.arange(37), prio)
    host = ArrayReplay(37, (2,), np.float32)
    host.add(random_arrays(37, rng), 37)
    dev = DeviceReplay(host, CPU, prioritized=True, seed=5)
    dev.set_priorities(torch.arange(37), torch.from_numpy(prio))
    mass = np.concatenate([rng.random(500) * prio.sum(), np.cumsum(prio)[:-1]])  # and every boundary
    np.testing.assert_array_equal(dev.find(torch.from_numpy(mass)).numpy(), tree.find(mass))
    assert float(dev.max_priority) == prio.max()
    idx, weights = dev.sample_prioritized(256, beta=0.5)
    assert (prio[idx.numpy()] > 0).all()
    p_min = prio[: host.size].min() if prio.min() > 0 else prio[prio > 0].min()
    nz = prio[idx.numpy()]
    if prio.min() == 0:  # a zero leaf makes min() zero: the host's formula gives weight 0, and so does ours
        np.testing.assert_array_equal(weights.numpy(), np.zeros(256, np.float32))
    else:
        np.testing.assert_allclose(weights.numpy(), (nz / p_min) ** -0.5, rtol=1e-6)


def test_auto_keeps_the_replay_on_the_host_without_a_gpu_and_the_setting_forces_either_side():
    replay = ArrayReplay(10, (2,), np.float32)
    assert choose_side("auto", CPU, replay)[0] == "host"
    assert choose_side("device", CPU, replay)[0] == "device"
    assert choose_side("host", CPU, replay)[0] == "host"


def _trained(steps: int = 6, **kw) -> tuple[DQNLearner, list[dict]]:
    rng = np.random.default_rng(0)
    learner = DQNLearner(small_params(**kw), OBS, ACT, "cpu", 0)
    for _ in range(3):
        learner.add(as_batch(random_arrays(40, rng)))
    return learner, [learner.train_step() for _ in range(steps)]


@pytest.mark.parametrize("side", ["host", "device"])
def test_prefetch_trains_on_the_same_batches_in_the_same_order(side):
    a, ma = _trained(replay_device=side, prefetch=True)
    b, mb = _trained(replay_device=side, prefetch=False)
    assert a._prefetched is not None and b._prefetched is None
    assert ma == mb
    for pa, pb in zip(a.online.parameters(), b.online.parameters()):
        torch.testing.assert_close(pa, pb, rtol=0, atol=0)


def test_the_learner_logs_where_its_replay_lives(caplog):
    with caplog.at_level(logging.INFO, logger="mqttrl.dqn"):
        learner, _ = _trained(steps=1, replay_device="device")
    assert learner.device_replay is not None and learner.tree is None
    assert "replay on the device (replay_device = 'device'" in caplog.text
    with caplog.at_level(logging.INFO, logger="mqttrl.dqn"):
        assert DQNLearner(small_params(), OBS, ACT, "cpu", 0).device_replay is None
    assert "replay on the host (the learner's device is cpu, not a GPU)" in caplog.text


def test_rainbow_on_device_replay_checkpoints_and_continues_identically():
    """Prioritized C51 with noisy nets on the device replay: priorities move, and a learner loaded
    from the checkpoint (other seed) continues with the same updates."""
    kw = dict(
        replay_device="device",
        prioritized=True,
        initial_priority="max",
        distributional="c51",
        v_min=-5.0,
        v_max=5.0,
        noisy=True,
        tau=0.5,
    )
    a, _ = _trained(steps=5, **kw)
    prio = a.device_replay.priorities[: a.size]
    assert len(torch.unique(prio)) > 10  # replayed slots got their own priorities
    tensors, meta = through_checkpoint_formats(*a.state_dict(include_replay=True))
    b = DQNLearner(small_params(**kw), OBS, ACT, "cpu", 7)
    b.load_state_dict(tensors, meta)
    torch.testing.assert_close(b.device_replay.priorities, a.device_replay.priorities, rtol=0, atol=0)
    for _ in range(4):
        assert a.train_step() == b.train_step()


@pytest.mark.parametrize("head", [{}, dict(distributional="c51", v_min=-5.0, v_max=5.0, noisy=True)])
def test_bf16_autocast_loss_is_close_to_float32(head):
    """Same seed, same batches: the bf16 update's losses stay within a few percent of float32's."""
    _, m32 = _trained(steps=3, **head)
    _, m16 = _trained(steps=3, autocast="bf16", **head)
    for a, b in zip(m32, m16):
        assert a["loss"] == pytest.approx(b["loss"], rel=0.03)
        assert a["q_mean"] == pytest.approx(b["q_mean"], rel=0.05, abs=0.02)
    assert m32[0]["loss"] != m16[0]["loss"]  # bf16 really ran


def test_an_image_learner_on_device_replay_trains_on_the_frames_it_was_sent():
    space = gym.spaces.Box(0, 255, (4, 6, 6), np.uint8)
    p = small_params(replay_device="device", batch_size=8, learning_starts=8)
    learner = DQNLearner(p, space, gym.spaces.Discrete(3), "cpu", 0)
    for seq, (batch, w) in enumerate(_frame_batches(4, 40, seed=1)):
        n = len(batch["action"])
        learner.add(decode_batch(encode_batch("r", f"w{w}", seq, 0, batch, incarnation="i", count=n)))
    idx = np.arange(learner.size)
    got = learner.device_replay.gather(torch.from_numpy(idx))
    np.testing.assert_array_equal(got["obs"].numpy(), learner.replay.sample(idx)["obs"])
    assert np.isfinite(learner.train_step()["loss"])


def test_inference_forward_moves_to_its_device_and_a_missing_gpu_is_one_line(caplog):
    """inference.device: the torch forward runs where it is put (weights loaded later follow);
    a GPU torch cannot use leaves the server on the CPU with one error line, not a traceback."""
    from types import SimpleNamespace

    from mqttrl.nodes.inference import InferenceServer
    from mqttrl_plugins.dqn import make_forward

    p = small_params()
    fwd = make_forward(p, OBS, ACT, "torch", 3)
    obs = np.random.default_rng(0).normal(size=(5, 2)).astype(np.float32)
    before = fwd(obs)["q"]
    server = SimpleNamespace(name="s1", device=None, forward=fwd)
    InferenceServer._place_forward(server, "torch", "cpu")
    assert server.device == "cpu" and fwd.device == torch.device("cpu")
    np.testing.assert_array_equal(fwd(obs)["q"], before)
    if not torch.cuda.is_available():
        server.device = None  # from the config, as a new server
        with caplog.at_level(logging.ERROR, logger="mqttrl.inference"):
            InferenceServer._place_forward(server, "torch", "cuda")
        assert server.device == "cpu"
        assert "inference.device='cuda' but torch.cuda.is_available() is False" in caplog.text
        assert "serving on the CPU" in caplog.text


def test_a_checkpoint_loads_into_a_fused_adam_and_back():
    """Fused Adam (CUDA learners, and CPU ones from torch 2.4) keeps its step counts on the device; a
    checkpoint saved by either kind loads into the other and trains on (the CPU stands in for the GPU)."""
    plain, _ = _trained(steps=3)
    default = plain.optimizer.param_groups[0]["fused"]  # the CPU learner's own kind
    tensors, meta = through_checkpoint_formats(*plain.state_dict(include_replay=True))
    other = DQNLearner(small_params(), OBS, ACT, "cpu", 1)
    other._fused = not default
    other.optimizer = torch.optim.Adam(other.online.parameters(), lr=other.params.lr, fused=other._fused)
    other.load_state_dict(tensors, meta)
    assert bool(other.optimizer.param_groups[0]["fused"]) is (not default)
    m = other.train_step()
    assert np.isfinite(m["loss"])
    tensors, meta = through_checkpoint_formats(*other.state_dict(include_replay=True))
    again = DQNLearner(small_params(), OBS, ACT, "cpu", 2)
    again.load_state_dict(tensors, meta)
    assert bool(again.optimizer.param_groups[0]["fused"]) is bool(default)
    assert again.train_step() == other.train_step()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (run by hand where one is)")
def test_on_cuda_the_device_replay_samples_like_the_host_and_metrics_lag_one_update():
    space = gym.spaces.Box(0, 255, (4, 6, 6), np.uint8)
    kw = dict(batch_size=8, learning_starts=8, prioritized=True, initial_priority="max")
    learner = DQNLearner(small_params(replay_device="auto", **kw), space, gym.spaces.Discrete(3), "cuda", 0)
    assert learner.device_replay is not None  # auto: a small replay fits
    for seq, (batch, w) in enumerate(_frame_batches(4, 40, seed=1)):
        n = len(batch["action"])
        learner.add(decode_batch(encode_batch("r", f"w{w}", seq, 0, batch, incarnation="i", count=n)))
    idx = np.arange(learner.size)
    got = learner.device_replay.gather(torch.from_numpy(idx).cuda())
    for name, arr in learner.replay.sample(idx).items():
        np.testing.assert_array_equal(got[name].cpu().numpy(), arr, err_msg=name)
    first, second = learner.train_step(), learner.train_step()
    assert first["loss"] == second["loss"]  # the second call reports the first update (one late)
    assert np.isfinite(learner.train_step()["loss"])
