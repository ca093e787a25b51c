"""Image observations as frames: each frame crosses the wire and sits in replay once.

A stacked Atari observation is 4 frames of 84x84, and consecutive observations
share 3 of them; an n-step transition holds two observations. Sent and stored as
arrays, one new frame of game costs 8 frames of bytes. Here an observation is a
row of ``k`` frame references instead (``k`` = 1 when the whole observation is the
frame, e.g. MinAtar or an unstacked screen):

* the actor's :class:`FrameObs` gives every distinct frame it sees a serial number
  (per actor), finds the frames a step shares with the previous one by comparing
  them (never by assuming), and packs a batch as the unique frames it references
  plus ``obs_ref`` / ``next_obs_ref`` rows indexing them: every batch is
  self-contained, so a lost or refused batch never breaks another;
* the learner's replay (:mod:`.replay`) stores each frame once, recognising the
  frames a batch repeats from the previous one by ``(sender, serial)`` and checking
  their bytes before it shares them, and rebuilds the stacks when it samples.

What the env produced is reproduced exactly, padding at episode starts included,
because only equal bytes are ever shared. :class:`ArrayObs` is the plain path
(vector observations): observations sent and stored as they are.

Measured bytes are in docs/benchmarks.md (Pong: frames + zstd against stacks + zstd).
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs
import gymnasium as gym
import numpy as np

from mqttrl.plugin import Tensors, obs_dtype

#: the ``frames`` choices of DQNParams
FRAME_MODES = ("auto", "stack", "whole", "off")
#: a stack axis longer than this is not taken for stacked frames by "auto"
MAX_AUTO_STACK = 8


@attrs.frozen
class FrameLayout:
    """How an observation splits into frames: ``k`` frames of ``frame_shape`` along axis 0
    (``stacked``), or the whole observation as one frame (k = 1)."""

    k: int
    frame_shape: tuple[int, ...]
    dtype: str
    stacked: bool


def frame_layout(mode: str, obs_space: gym.Space) -> FrameLayout | None:
    """The layout ``mode`` gives for ``obs_space``; None: observations travel as arrays.

    ``"auto"``: integer or bool observations of 2 or more dimensions are frames
    (floats are features, not pixels); their axis 0 is a stack of frames when the
    observation has 3 or more dimensions, axis 0 holds at most 8 entries and fewer than
    the last axis (gymnasium's ``FrameStackObservation`` over 84x84 screens gives
    (4, 84, 84)), else the whole observation is one frame (MinAtar's (10, 10, 4),
    an RGB screen (210, 160, 3)).
    """
    if mode not in FRAME_MODES:
        raise ValueError(f"frames={mode!r}: use one of {', '.join(FRAME_MODES)}")
    assert obs_space.shape is not None  # a Box: the algorithm's check_spaces took it
    shape = tuple(int(s) for s in obs_space.shape)
    dtype = obs_dtype(obs_space)
    if mode == "off":
        return None
    if mode == "auto":
        if dtype.kind not in "biu" or len(shape) < 2:
            return None
        mode = "stack" if len(shape) >= 3 and shape[0] <= MAX_AUTO_STACK and shape[0] < shape[-1] else "whole"
    if mode == "stack":
        if len(shape) < 2:
            raise ValueError(f"frames='stack' needs observations of 2 or more dimensions, got shape {shape}")
        return FrameLayout(shape[0], shape[1:], dtype.name, True)
    return FrameLayout(1, shape, dtype.name, False)


class ArrayObs:
    """Vector observations: the window keeps the observations themselves; batches carry
    ``obs`` and ``next_obs`` arrays."""

    def __init__(self, num_envs: int, obs_shape: tuple[int, ...], dtype: np.dtype):
        self.key_shape, self.key_dtype = obs_shape, np.dtype(dtype)

    def observe(self, obs: np.ndarray, next_obs: np.ndarray, ended: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return (
            np.asarray(obs, self.key_dtype).reshape(len(obs), *self.key_shape),
            np.asarray(next_obs, self.key_dtype).reshape(len(obs), *self.key_shape),
        )

    def observe_one(self, env_index: int, obs: np.ndarray) -> np.ndarray:
        return np.asarray(obs, self.key_dtype).reshape(self.key_shape)

    def pack(self, obs: np.ndarray, next_obs: np.ndarray, live: Iterable[np.ndarray]) -> Tensors:
        return {"obs": obs, "next_obs": next_obs}

    def arrays(self, keys: np.ndarray) -> np.ndarray:
        """The observations that window keys stand for (here: the keys themselves)."""
        return keys

    def empty(self) -> Tensors:
        return {k: np.zeros((0, *self.key_shape), self.key_dtype) for k in ("obs", "next_obs")}


class FrameObs:
    """Frames by serial number: what :class:`ArrayObs` does, one frame at a time.

    ``observe`` turns a step's ``obs`` and ``next_obs`` (``[E, *obs_shape]``) into rows
    of ``k`` serials; ``pack`` makes the wire arrays of a batch and forgets the
    frames nothing will reference again.
    """

    def __init__(self, num_envs: int, layout: FrameLayout):
        self.layout = layout
        self.k = layout.k
        self.key_shape, self.key_dtype = (layout.k,), np.dtype(np.int64)
        self.stack_shape = (layout.k, *layout.frame_shape)
        #: an observation's shape: a stack of k frames, or one frame that is the whole observation
        self.obs_shape = self.stack_shape if layout.stacked else tuple(layout.frame_shape)
        #: serial -> frame (a copy: the env may reuse its arrays)
        self.pool: dict[int, np.ndarray] = {}
        self.next_serial = 0
        # the previous step's next_obs per env, its serials, and whether the env went on from it
        self.prev = np.zeros((num_envs, *self.stack_shape), np.dtype(layout.dtype))
        self.prev_ids = np.full((num_envs, layout.k), -1, np.int64)
        self.prev_valid = np.zeros(num_envs, bool)

    def _new(self, frame: np.ndarray) -> int:
        s = self.next_serial
        self.next_serial += 1
        self.pool[s] = frame.copy()
        return s

    def _fresh(self, stack: np.ndarray) -> np.ndarray:
        """Serials of a stack never seen before; equal neighbours (padding at a reset) share one."""
        ids = np.empty(self.k, np.int64)
        for j in range(self.k):
            if j and np.array_equal(stack[j], stack[j - 1]):
                ids[j] = ids[j - 1]
            else:
                ids[j] = self._new(stack[j])
        return ids

    def _stacks(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(x, self.layout.dtype).reshape(len(x), *self.stack_shape)

    def observe(self, obs: np.ndarray, next_obs: np.ndarray, ended: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Serials of each env's ``obs`` and ``next_obs`` (``[E, k]`` each)."""
        obs, next_obs = self._stacks(obs), self._stacks(next_obs)
        e = len(obs)
        flat = obs.reshape(e, -1)
        # obs is the env's previous next_obs unless its episode ended (a reset) or its game was restarted
        same = self.prev_valid & (flat == self.prev.reshape(e, -1)).all(axis=1)
        obs_ids = self.prev_ids.copy()
        for i in np.flatnonzero(~same):
            obs_ids[i] = self._fresh(obs[i])
        next_ids = np.full((e, self.k), -1, np.int64)
        if self.k > 1:  # a stack moves up by one frame: frame j of next_obs is frame j + 1 of obs
            shifted = (next_obs[:, :-1].reshape(e, self.k - 1, -1) == obs[:, 1:].reshape(e, self.k - 1, -1)).all(-1)
            next_ids[:, :-1] = np.where(shifted, obs_ids[:, 1:], -1)
        for i, j in zip(*np.nonzero(next_ids < 0)):
            if j and np.array_equal(next_obs[i, j], next_obs[i, j - 1]):
                next_ids[i, j] = next_ids[i, j - 1]
            else:
                next_ids[i, j] = self._new(next_obs[i, j])
        self.prev[...] = next_obs
        self.prev_ids = next_ids
        self.prev_valid = ~np.asarray(ended, bool)
        return obs_ids, next_ids

    def observe_one(self, env_index: int, obs: np.ndarray) -> np.ndarray:
        """Serials of one env's observation (a game that failed: its last observation)."""
        stack = self._stacks(np.asarray(obs)[None])[0]
        if self.prev_valid[env_index] and np.array_equal(stack, self.prev[env_index]):
            ids = self.prev_ids[env_index].copy()
        else:
            ids = self._fresh(stack)
        self.prev_valid[env_index] = False  # the game is made afresh
        return ids

    def pack(self, obs: np.ndarray, next_obs: np.ndarray, live: Iterable[np.ndarray]) -> Tensors:
        """The batch's frames, their serials and the reference rows; then forget every frame
        that neither ``live`` (serials of open n-step windows) nor the next step can use."""
        n = len(obs)
        serials, inverse = np.unique(np.concatenate([obs.ravel(), next_obs.ravel()]), return_inverse=True)
        frames = np.stack([self.pool[int(s)] for s in serials])
        refs = inverse.astype(np.int32)
        keep = set(self.prev_ids.ravel().tolist())
        for ids in live:
            keep.update(np.asarray(ids).ravel().tolist())
        self.pool = {s: f for s, f in self.pool.items() if s in keep}
        return {
            "frames": frames,
            "frame_ids": serials.astype(np.int64),
            "obs_ref": refs[: n * self.k].reshape(n, self.k),
            "next_obs_ref": refs[n * self.k :].reshape(n, self.k),
        }

    def arrays(self, keys: np.ndarray) -> np.ndarray:
        """The observations that rows of serials stand for (frames still in the pool), shaped as
        the env gives them (a whole-observation frame loses the stack axis of its one serial)."""
        serials, inverse = np.unique(keys, return_inverse=True)
        frames = np.stack([self.pool[int(s)] for s in serials])
        return frames[inverse.reshape(keys.shape)].reshape(len(keys), *self.obs_shape)

    def empty(self) -> Tensors:
        return {
            "frames": np.zeros((0, *self.layout.frame_shape), self.layout.dtype),
            "frame_ids": np.zeros(0, np.int64),
            "obs_ref": np.zeros((0, self.k), np.int32),
            "next_obs_ref": np.zeros((0, self.k), np.int32),
        }


def unpack(arrays: Tensors, obs_shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """``obs`` and ``next_obs`` of a packed batch, rebuilt as arrays (tests and tools)."""
    if "frames" not in arrays:
        return np.asarray(arrays["obs"]), np.asarray(arrays["next_obs"])
    frames = np.asarray(arrays["frames"])
    n = len(arrays["obs_ref"])
    return (
        frames[arrays["obs_ref"]].reshape(n, *obs_shape),
        frames[arrays["next_obs_ref"]].reshape(n, *obs_shape),
    )
