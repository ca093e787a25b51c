"""Image observations as frames: the actor packs each frame once, the replay stores it once,
and what comes back out is exactly what the env produced (pure logic, no broker)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from helpers.frames_kit import StackedGame, _NoForward, frame_actor
from hypothesis import given, settings
from hypothesis import strategies as st

from mqttrl.plugin.algorithm import ActorContext
from mqttrl_plugins.dqn.actor import DQNActor
from mqttrl_plugins.dqn.common import DQNParams, sample_spec
from mqttrl_plugins.dqn.frames import FrameLayout, frame_layout, unpack
from mqttrl_plugins.dqn.replay import ArrayReplay, FrameReplay


def test_frame_layout_auto_choices():
    box = lambda shape, dtype=np.uint8: gym.spaces.Box(0, 1, shape, dtype)  # noqa: E731
    assert frame_layout("auto", box((4, 84, 84))) == FrameLayout(4, (84, 84), "uint8", True)
    assert frame_layout("auto", box((10, 10, 4), bool)) == FrameLayout(1, (10, 10, 4), "bool", False)
    assert frame_layout("auto", box((84, 84))) == FrameLayout(1, (84, 84), "uint8", False)
    assert frame_layout("auto", box((4,), np.float32)) is None
    assert frame_layout("auto", box((4, 84, 84), np.float32)) is None  # floats are features
    assert frame_layout("off", box((4, 84, 84))) is None
    assert frame_layout("stack", box((10, 10, 4), bool)).k == 10
    with pytest.raises(ValueError, match="frames="):
        frame_layout("bogus", box((4, 84, 84)))


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    k=st.sampled_from([1, 2, 4]),
    n_step=st.integers(1, 4),
    num_envs=st.integers(1, 4),
    steps_per_take=st.integers(1, 9),
)
def test_frame_batches_rebuild_exactly_the_transitions_of_array_batches(seed, k, n_step, num_envs, steps_per_take):
    """The same steps through a frames actor and an arrays actor: unpacked, the batches are equal,
    across episode ends (termination and truncation), resets with padding and batch boundaries."""
    game = StackedGame(num_envs, k, 5, seed)
    shape = (k, 5, 5)
    frames, arrays = frame_actor("stack", shape, num_envs, n_step), frame_actor("off", shape, num_envs, n_step)
    spec = sample_spec(
        DQNParams(frames="stack", n_step=n_step), gym.spaces.Box(0, 255, shape, np.uint8), gym.spaces.Discrete(3)
    )
    got, want, sent_frames = [], [], 0
    for step in range(40):
        obs, actions, rewards, next_obs, term, trunc = game.step()
        for actor in (frames, arrays):
            actor.record(obs, actions, {}, rewards, next_obs, term, trunc)
        if step % steps_per_take == steps_per_take - 1 or step == 39:
            a, b = frames.take(), arrays.take()
            count = len(b["action"])
            if count:
                spec.validate(a, count)
            sent_frames += len(a["frames"])
            got.append(unpack(a, shape) + (a["reward"], a["discount"]))
            want.append((b["obs"], b["next_obs"], b["reward"], b["discount"]))
    for g, w in zip(got, want):
        for x, y in zip(g, w):
            np.testing.assert_array_equal(x, y)
    total = sum(len(w[0]) for w in want)
    if total:  # each transition brings about one new frame, never 2k
        assert sent_frames <= total + (k + n_step + 2) * num_envs * (40 // steps_per_take + 1) + total // 2


def _fill(replays, steps: int, k: int, num_envs: int, seed: int, n_step: int = 3):
    game = StackedGame(num_envs, k, 6, seed)
    actor = frame_actor("stack", (k, 6, 6), num_envs, n_step)
    reference = []
    for step in range(steps):
        obs, actions, rewards, next_obs, term, trunc = game.step()
        actor.record(obs, actions, {}, rewards, next_obs, term, trunc)
        if step % 5 == 4:
            batch = actor.take()
            n = len(batch["action"])
            if not n:
                continue
            o, no = unpack(batch, (k, 6, 6))
            reference.append((o, no, batch["action"], batch["reward"], batch["discount"]))
            arrays = {"obs": o, "next_obs": no, **{f: batch[f] for f in ("action", "reward", "discount")}}
            for replay in replays:
                replay.add(batch if isinstance(replay, FrameReplay) else arrays, n, source="w/1")
    return reference


@pytest.mark.parametrize("capacity", [7, 64, 1000])
def test_frame_replay_samples_what_array_replay_samples_through_wraparound(capacity):
    k = 4
    frames = FrameReplay(capacity, FrameLayout(k, (6, 6), "uint8", True), (k, 6, 6))
    arrays = ArrayReplay(capacity, (k, 6, 6), np.dtype(np.uint8))
    _fill([frames, arrays], 300, k, 3, seed=1)
    assert frames.size == arrays.size == min(capacity, frames.size) and frames.pos == arrays.pos
    idx = np.arange(frames.size)
    a, b = frames.sample(idx), arrays.sample(idx)
    for name in b:
        np.testing.assert_array_equal(a[name], b[name])
    # nothing leaks: every stored frame is referenced, and references count exactly
    refs = np.concatenate([frames.obs_ref[: frames.size].ravel(), frames.next_ref[: frames.size].ravel()])
    counts = np.bincount(refs, minlength=frames.high)
    np.testing.assert_array_equal(counts, frames.refcount[: frames.high])
    assert frames.frames_stored() == len(np.unique(refs))


def test_frame_replay_stores_about_one_frame_per_transition():
    k, capacity = 4, 500
    replay = FrameReplay(capacity, FrameLayout(k, (6, 6), "uint8", True), (k, 6, 6))
    _fill([replay], 2000, k, 4, seed=2)
    assert replay.size == capacity
    # one new frame per transition, plus the final frames of (here very short) episodes and the
    # frames of open windows; stored as stacks it would be 2k = 8 frames per transition
    assert replay.frames_stored() <= 1.35 * capacity


def test_frame_replay_shares_a_repeated_serial_only_when_the_bytes_agree():
    layout = FrameLayout(1, (2, 2), "uint8", False)
    replay = FrameReplay(10, layout, (2, 2))

    def batch(values, serials):
        return {
            "frames": np.repeat(np.array(values, np.uint8), 4).reshape(-1, 2, 2),
            "frame_ids": np.array(serials, np.int64),
            "obs_ref": np.array([[0]], np.int32),
            "next_obs_ref": np.array([[1]], np.int32),
            "action": np.zeros(1, np.int64),
            "reward": np.zeros(1, np.float32),
            "discount": np.ones(1, np.float32),
        }

    replay.add(batch([1, 2], [0, 1]), 1, source="a")
    replay.add(batch([2, 3], [1, 2]), 1, source="a")  # serial 1 repeated with the same bytes: shared
    assert replay.frames_stored() == 3
    replay.add(batch([9, 4], [1, 3]), 1, source="a")  # serial 1 again, other bytes: a new frame
    replay.add(batch([2, 3], [1, 2]), 1, source="b")  # another sender's serials are its own
    out = replay.sample(np.arange(4))
    np.testing.assert_array_equal(out["obs"][:, 0, 0], [1, 2, 9, 2])
    np.testing.assert_array_equal(out["next_obs"][:, 0, 0], [2, 3, 4, 3])


def test_frame_replay_checkpoint_round_trip():
    k = 2
    layout = FrameLayout(k, (6, 6), "uint8", True)
    replay = FrameReplay(50, layout, (k, 6, 6))
    _fill([replay], 200, k, 2, seed=3)
    tensors, meta = replay.state()
    back = FrameReplay(50, layout, (k, 6, 6))
    back.load_state(tensors, meta)
    idx = np.arange(replay.size)
    for name, arr in replay.sample(idx).items():
        np.testing.assert_array_equal(back.sample(idx)[name], arr)
    _fill([back], 100, k, 2, seed=4)  # goes on adding after the restore: refcounts hold
    refs = np.concatenate([back.obs_ref[: back.size].ravel(), back.next_ref[: back.size].ravel()])
    np.testing.assert_array_equal(np.bincount(refs, minlength=back.high), back.refcount[: back.high])


class _MeanForward(_NoForward):
    """Q-values that depend on every pixel, so priorities tell if the rebuilt stacks are right."""

    def __call__(self, obs):
        m = np.asarray(obs, np.float64).reshape(len(obs), -1).mean(axis=1)
        return {"q": np.stack([m, 2 * m, -m], axis=1)}


def test_actor_priorities_from_frames_equal_those_from_arrays():
    game = StackedGame(3, 4, 5, seed=9)
    params = dict(n_step=3, prioritized=True)
    space = gym.spaces.Box(0, 255, (4, 5, 5), np.uint8)
    actors = [
        DQNActor(DQNParams(frames=f, **params), space, gym.spaces.Discrete(3), ActorContext(3, seed=0), _MeanForward())
        for f in ("stack", "off")
    ]
    for _ in range(30):
        obs, actions, rewards, next_obs, term, trunc = game.step()
        for actor in actors:
            _, extras = actor.act(obs)
            actor.record(obs, actions, extras, rewards, next_obs, term, trunc)
    a, b = (actor.take() for actor in actors)
    assert len(b["priority"]) > 20
    np.testing.assert_array_equal(a["priority"], b["priority"])
