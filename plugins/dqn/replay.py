"""DQN's replay memory: a ring of transitions, with each image frame stored once.

1. ``SumTree``: proportional priorities for prioritized replay (indexed by ring slot);
2. ``ArrayReplay``: observations stored as arrays, in their own dtype (vector envs);
3. ``FrameReplay``: observations stored as references into a store of frames
   (:mod:`.frames`): memory per transition is about one frame, and sampling
   rebuilds exactly the stacks the env produced.

Both take a validated batch's arrays in ``add`` (returning the ring slots written,
for priorities) and give ``obs, action, reward, next_obs, discount`` from ``sample``.
Numpy only: the learner turns the samples into tensors.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

import numpy as np

from .frames import FrameLayout

#: per-transition fields other than the observations, with their dtypes
_SCALARS = {"action": np.int64, "reward": np.float32, "discount": np.float32, "intervention": np.uint8}
#: scalars a batch or a checkpoint may lack (added to the format later): 0 where absent
#: (``intervention``: a person took the transition's first step; older workers and checkpoints have none)
_OPTIONAL_SCALARS = frozenset({"intervention"})

# --------------------------------------------------------------------------
# 1. Prioritized replay's sum tree
# --------------------------------------------------------------------------


class SumTree:
    """A binary sum tree in one numpy array: root at 1, leaf i at ``leaves + i``.

    Updates and prefix-sum searches work on whole index batches, one tree level
    per numpy operation.
    """

    def __init__(self, capacity: int):
        self.leaves = 1 << max(0, (capacity - 1).bit_length())
        self.depth = self.leaves.bit_length() - 1
        self.tree = np.zeros(2 * self.leaves, dtype=np.float64)

    def total(self) -> float:
        return float(self.tree[1])

    def get(self, idx: np.ndarray) -> np.ndarray:
        return self.tree[self.leaves + np.asarray(idx)]

    def min(self, n: int) -> float:
        """Smallest of the first ``n`` leaves."""
        return float(self.tree[self.leaves : self.leaves + n].min())

    def set(self, idx: np.ndarray, values: np.ndarray) -> None:
        pos = self.leaves + np.asarray(idx, dtype=np.int64)
        self.tree[pos] = values
        for _ in range(self.depth):  # parents recomputed from children (duplicates write the same value)
            pos = pos // 2
            self.tree[pos] = self.tree[2 * pos] + self.tree[2 * pos + 1]

    def find(self, mass: np.ndarray) -> np.ndarray:
        """Leaf index holding each prefix-sum value in ``mass`` (each in [0, total))."""
        mass = np.array(mass, dtype=np.float64)
        idx = np.ones(len(mass), dtype=np.int64)
        for _ in range(self.depth):
            left = self.tree[2 * idx]
            right = mass >= left
            mass = np.where(right, mass - left, mass)
            idx = 2 * idx + right
        return idx - self.leaves


# --------------------------------------------------------------------------
# 2. Observations as arrays
# --------------------------------------------------------------------------


class _Ring:
    """The ring both replays share: ``capacity`` slots, the oldest overwritten first."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.pos = 0
        self.size = 0
        self.scalars = {name: np.zeros(capacity, dtype) for name, dtype in _SCALARS.items()}

    def _slots(self, count: int) -> tuple[slice, np.ndarray]:
        """Rows of a batch of ``count`` to keep (a batch larger than the ring keeps its newest)
        and the ring slots they go to."""
        keep = slice(max(0, count - self.capacity), count)
        m = keep.stop - keep.start
        return keep, (self.pos + np.arange(m)) % self.capacity

    def _advance(self, m: int) -> None:
        self.pos = int((self.pos + m) % self.capacity)
        self.size = min(self.capacity, self.size + m)

    def _put_scalars(self, arrays: Mapping[str, np.ndarray], keep: slice, idx: np.ndarray) -> None:
        for name, dst in self.scalars.items():
            src = arrays.get(name) if name in _OPTIONAL_SCALARS else arrays[name]
            dst[idx] = 0 if src is None else src[keep]

    def _scalar_state(self, tensors: dict, n: int) -> None:
        for name, arr in self.scalars.items():
            tensors[f"replay.{name}"] = arr[:n].copy()

    def _load_scalars(self, tensors: Mapping[str, np.ndarray], meta: Mapping[str, Any]) -> int:
        n = int(meta["size"])
        if n > self.capacity:
            raise ValueError(f"checkpoint replay holds {n} transitions, buffer_size is {self.capacity}")
        for name, arr in self.scalars.items():
            key = f"replay.{name}"
            arr[:n] = 0 if name in _OPTIONAL_SCALARS and key not in tensors else np.asarray(tensors[key]).reshape(n)
        self.size = n
        self.pos = int(meta["pos"]) if int(meta["capacity"]) == self.capacity else n % self.capacity
        return n


class ArrayReplay(_Ring):
    """Transitions with ``obs`` and ``next_obs`` stored whole, in the observations' dtype."""

    def __init__(self, capacity: int, obs_shape: tuple[int, ...], dtype: np.dtype):
        super().__init__(capacity)
        self.obs = np.zeros((capacity, *obs_shape), dtype)
        self.next_obs = np.zeros((capacity, *obs_shape), dtype)

    def add(self, arrays: Mapping[str, np.ndarray], count: int, source: str = "") -> np.ndarray:
        keep, idx = self._slots(count)
        self.obs[idx] = arrays["obs"][keep]
        self.next_obs[idx] = arrays["next_obs"][keep]
        self._put_scalars(arrays, keep, idx)
        self._advance(len(idx))
        return idx

    def sample(self, idx: np.ndarray) -> dict[str, np.ndarray]:
        return {
            "obs": self.obs[idx],
            "next_obs": self.next_obs[idx],
            **{name: arr[idx] for name, arr in self.scalars.items()},
        }

    def nbytes(self) -> int:
        """Bytes the ring holds at capacity."""
        return self.obs.nbytes + self.next_obs.nbytes + sum(a.nbytes for a in self.scalars.values())

    def state(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        n = self.size
        tensors = {"replay.obs": self.obs[:n].copy(), "replay.next_obs": self.next_obs[:n].copy()}
        self._scalar_state(tensors, n)
        return tensors, {"pos": self.pos, "size": n, "capacity": self.capacity}

    def load_state(self, tensors: Mapping[str, np.ndarray], meta: Mapping[str, Any]) -> None:
        if "replay.obs" not in tensors:
            raise ValueError("the checkpoint's replay holds frames; this run stores observations (frames = 'off')")
        n = int(meta["size"])
        if n <= self.capacity:
            self.obs[:n] = np.asarray(tensors["replay.obs"]).reshape(self.obs[:n].shape)
            self.next_obs[:n] = np.asarray(tensors["replay.next_obs"]).reshape(self.obs[:n].shape)
        self._load_scalars(tensors, meta)


# --------------------------------------------------------------------------
# 3. Observations as frames, each stored once
# --------------------------------------------------------------------------


class FrameReplay(_Ring):
    """Transitions as ``k`` frame references per observation into a reference-counted frame store.

    A frame a batch repeats from an earlier batch of the same sender (the frames of n-step
    windows still open when the worker sent) is found by ``(sender, serial)`` and shared
    only if its bytes are equal; a frame nothing references any more goes back to the free
    list. A ring of N transitions references about N + (k + n) * streams frames, more with
    short episodes (their final frames); the store is sized for 1.25 N + 1024 frames up front
    (``np.zeros``: pages no frame was written to take no memory) and grows by a quarter
    beyond that.
    """

    def __init__(self, capacity: int, layout: FrameLayout, obs_shape: tuple[int, ...]):
        super().__init__(capacity)
        self.layout = layout
        self.obs_shape = obs_shape
        self.frame_nbytes = int(np.prod(layout.frame_shape, dtype=np.int64)) * np.dtype(layout.dtype).itemsize
        self.obs_ref = np.zeros((capacity, layout.k), np.int32)
        self.next_ref = np.zeros((capacity, layout.k), np.int32)
        self._alloc_store(capacity + capacity // 4 + 1024)
        #: (sender, serial) -> slot, for frames batches repeat
        self.index: dict[tuple[int, int], int] = {}
        self.senders: dict[str, int] = {}
        #: the frame slots the last ``add`` wrote (a device copy of the store copies just these)
        self.written: list[int] = []

    def _alloc_store(self, slots: int) -> None:
        self.frames = np.zeros((slots, *self.layout.frame_shape), self.layout.dtype)
        self.refcount = np.zeros(slots, np.int64)
        self.slot_key: list[tuple[int, int] | None] = [None] * slots
        self.free: list[int] = []
        #: slots below this have been used
        self.high = 0

    def _grow(self) -> None:
        n = len(self.frames)
        more = n // 4 + 1024
        self.frames = np.concatenate([self.frames, np.zeros((more, *self.layout.frame_shape), self.layout.dtype)])
        self.refcount = np.concatenate([self.refcount, np.zeros(more, np.int64)])
        self.slot_key += [None] * more

    def _alloc(self) -> int:
        if self.free:
            return self.free.pop()
        if self.high == len(self.frames):
            self._grow()
        self.high += 1
        return self.high - 1

    def frames_stored(self) -> int:
        return self.high - len(self.free)

    def _release(self, idx: np.ndarray) -> None:
        """Drop the references of ring slots ``idx`` (about to be overwritten)."""
        old = np.concatenate([self.obs_ref[idx].ravel(), self.next_ref[idx].ravel()])
        np.subtract.at(self.refcount, old, 1)
        for s in np.unique(old)[self.refcount[np.unique(old)] == 0].tolist():
            key = self.slot_key[s]
            if key is not None and self.index.get(key) == s:
                del self.index[key]
            self.slot_key[s] = None
            self.free.append(s)

    def add(self, arrays: Mapping[str, np.ndarray], count: int, source: str = "") -> np.ndarray:
        keep, idx = self._slots(count)
        filled = idx[idx < self.size] if self.size < self.capacity else idx
        if len(filled):
            self._release(filled)
        frames, serials = arrays["frames"], arrays["frame_ids"]
        obs_ref, next_ref = arrays["obs_ref"][keep], arrays["next_obs_ref"][keep]
        sender = self.senders.setdefault(source, len(self.senders))
        slot_of = np.full(len(frames), -1, np.int64)
        self.written = []
        for j in np.unique(np.concatenate([obs_ref.ravel(), next_ref.ravel()])).tolist():
            key = (sender, int(serials[j]))
            s = self.index.get(key)
            if s is None or not np.array_equal(self.frames[s], frames[j]):
                s = self._alloc()
                self.frames[s] = frames[j]
                self.written.append(s)
                self.index[key] = s
                self.slot_key[s] = key
            slot_of[j] = s
        self.obs_ref[idx] = slot_of[obs_ref]
        self.next_ref[idx] = slot_of[next_ref]
        np.add.at(self.refcount, np.concatenate([self.obs_ref[idx].ravel(), self.next_ref[idx].ravel()]), 1)
        self._put_scalars(arrays, keep, idx)
        self._advance(len(idx))
        return idx

    def sample(self, idx: np.ndarray) -> dict[str, np.ndarray]:
        b = len(idx)
        return {
            "obs": self.frames[self.obs_ref[idx]].reshape(b, *self.obs_shape),
            "next_obs": self.frames[self.next_ref[idx]].reshape(b, *self.obs_shape),
            **{name: arr[idx] for name, arr in self.scalars.items()},
        }

    def nbytes(self) -> int:
        """Bytes in use: the frames stored, the reference rows and scalars of the whole ring,
        and the index of repeated frames (dict entries and keys)."""
        rings = self.obs_ref.nbytes + self.next_ref.nbytes + sum(a.nbytes for a in self.scalars.values())
        index = sys.getsizeof(self.index) + len(self.index) * (sys.getsizeof((0, 0)) + 2 * 32)
        per_slot = self.refcount.itemsize + 8  # refcount and the slot's key pointer
        return self.frames_stored() * (self.frame_nbytes + per_slot) + rings + index

    def state(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        n = self.size
        tensors = {
            "replay.frames": self.frames[: self.high].copy(),
            "replay.obs_ref": self.obs_ref[:n].copy(),
            "replay.next_obs_ref": self.next_ref[:n].copy(),
        }
        self._scalar_state(tensors, n)
        return tensors, {"pos": self.pos, "size": n, "capacity": self.capacity, "frames": self.high}

    def load_state(self, tensors: Mapping[str, np.ndarray], meta: Mapping[str, Any]) -> None:
        """Frames, references and scalars come back; the index of repeated frames starts empty
        (a frame a worker repeats after the restart is stored once more)."""
        if "replay.frames" not in tensors:
            raise ValueError("the checkpoint's replay holds whole observations; this run stores frames")
        n = int(meta["size"])
        if n > self.capacity:
            raise ValueError(f"checkpoint replay holds {n} transitions, buffer_size is {self.capacity}")
        frames = np.asarray(tensors["replay.frames"])
        high = len(frames)
        self._alloc_store(max(self.capacity + self.capacity // 4 + 1024, high))
        self.frames[:high] = frames
        self.high = high
        self.obs_ref[:n] = np.asarray(tensors["replay.obs_ref"]).reshape(n, self.layout.k)
        self.next_ref[:n] = np.asarray(tensors["replay.next_obs_ref"]).reshape(n, self.layout.k)
        refs = np.concatenate([self.obs_ref[:n].ravel(), self.next_ref[:n].ravel()])
        if len(refs) and (refs.min() < 0 or refs.max() >= high):
            raise ValueError("checkpoint replay references frames it does not hold")
        self.refcount[:high] = np.bincount(refs, minlength=high)
        self.free = np.flatnonzero(self.refcount[:high] == 0).tolist()
        self.index, self.senders = {}, {}
        self._load_scalars(tensors, meta)


def make_replay(
    capacity: int, layout: FrameLayout | None, obs_shape: tuple[int, ...], dtype: np.dtype
) -> ArrayReplay | FrameReplay:
    """The replay for a run: frames when the observations are frames (:func:`.frames.frame_layout`)."""
    if layout is None:
        return ArrayReplay(capacity, obs_shape, dtype)
    return FrameReplay(capacity, layout, obs_shape)
