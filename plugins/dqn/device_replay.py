"""DQN's replay on the learner's torch device: sampling, stack rebuild and priorities without the host.

On a GPU learner the host replay makes the GPU wait: every update gathers ``2 k`` frames per
transition on the CPU, copies them over, and (prioritized) reads the TD errors back to set the
sum tree. :class:`DeviceReplay` keeps a copy of the replay's data on the device instead and
does all three there, so an update is a queue of kernels with no host round trip:

* the host replay (:mod:`.replay`) stays the one bookkeeper: ring positions, frame reference
  counts, the index of repeated frames, checkpoints. After each ``add`` the rows it wrote (and,
  for frames, the frame slots it filled) are copied to the device; the device holds the frame
  store, the reference rows and the scalars, so a sample is ``frames[obs_ref[idx]]`` on the device;
* indices are drawn on the device (its own seeded generator); prioritized replay keeps the
  priorities (already ``** alpha``) as one flat float64 tensor and samples by a cumulative sum and
  a binary search (:meth:`sample_prioritized`): on a GPU a cumulative sum over the whole ring costs
  microseconds, fewer launches than walking a sum tree level by level, and it picks the same leaf
  as :class:`.replay.SumTree` (stratified: one draw per segment of the total mass).

:func:`choose_side` decides where the replay lives (``DQNParams.replay_device``): ``"auto"`` puts
it on a CUDA device when its bytes fit in half of the free device memory. The same code runs with
``device = "cpu"`` (the tests compare it with the host replay there).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import numpy as np
import torch

from .common import REPLAY_SIDES
from .replay import ArrayReplay, FrameReplay

log = logging.getLogger("mqttrl.dqn.replay")

#: "auto" puts the replay on the device when it needs at most this share of the free device memory
DEVICE_SHARE = 0.5


def device_bytes(replay: ArrayReplay | FrameReplay) -> int:
    """Device bytes the replay's copy needs at its capacity (frames: the store's initial size)."""
    cap = replay.capacity
    scalars = cap * (8 + 4 + 4 + 1 + 8)  # action, reward, discount, intervention, priority
    if isinstance(replay, FrameReplay):
        return len(replay.frames) * replay.frame_nbytes + 2 * cap * replay.layout.k * 8 + scalars
    return replay.obs.nbytes + replay.next_obs.nbytes + scalars


def choose_side(setting: str, device: torch.device, replay: ArrayReplay | FrameReplay) -> tuple[str, str]:
    """``("device" | "host", why)`` for ``replay_device = setting`` on the learner's ``device``."""
    if setting not in REPLAY_SIDES:
        raise ValueError(f"replay_device={setting!r}: use one of {', '.join(REPLAY_SIDES)}")
    need = device_bytes(replay)
    if setting == "host":
        return "host", "replay_device = 'host'"
    if setting == "device":
        return "device", f"replay_device = 'device'; {need / 2**20:,.0f} MiB on {device}"
    if device.type != "cuda":
        return "host", f"the learner's device is {device.type}, not a GPU"
    free, _total = torch.cuda.mem_get_info(device)
    if need > DEVICE_SHARE * free:
        return (
            "host",
            f"it needs {need / 2**20:,.0f} MiB, more than half of the {free / 2**20:,.0f} MiB free on {device}",
        )
    return "device", f"{need / 2**20:,.0f} MiB of the {free / 2**20:,.0f} MiB free on {device}"


class DeviceReplay:
    """The host replay's data on ``device``, sampled there (see the module docstring)."""

    def __init__(self, host: ArrayReplay | FrameReplay, device: torch.device, prioritized: bool, seed: int = 0):
        self.host = host
        self.device = device
        cap = host.capacity
        self.frames_mode = isinstance(host, FrameReplay)
        if isinstance(host, FrameReplay):  # frames_mode, spelled so that type checkers narrow ``host``
            self.frames = self._empty(host.frames)
            self.obs_ref = torch.zeros((cap, host.layout.k), dtype=torch.int64, device=device)
            self.next_ref = torch.zeros((cap, host.layout.k), dtype=torch.int64, device=device)
        else:
            self.obs = self._empty(host.obs)
            self.next_obs = self._empty(host.next_obs)
        self.scalars = {name: self._empty(arr) for name, arr in host.scalars.items()}
        #: priorities ** alpha per ring slot (prioritized); rows beyond ``size`` are never sampled
        self.priorities = torch.zeros(cap, dtype=torch.float64, device=device) if prioritized else None
        #: the highest priority so far, on the device (new rows without an actor's priority get it)
        self.max_priority = torch.ones((), dtype=torch.float64, device=device)
        self.generator = torch.Generator(device=device).manual_seed(seed)

    def _empty(self, like: np.ndarray) -> torch.Tensor:
        return torch.zeros(like.shape, dtype=torch.from_numpy(like[:0]).dtype, device=self.device)

    def _put(self, dst: torch.Tensor, rows: np.ndarray, src: np.ndarray) -> None:
        """``dst[rows] = src`` from host arrays; the copy is queued (pageable memory is staged at once)."""
        if len(rows) == 0:
            return
        index = torch.from_numpy(np.ascontiguousarray(rows, np.int64)).to(self.device, non_blocking=True)
        dst.index_copy_(0, index, torch.from_numpy(np.ascontiguousarray(src)).to(self.device, non_blocking=True))

    @property
    def size(self) -> int:
        return self.host.size

    # ---- writing

    def add(self, arrays: Mapping[str, np.ndarray], count: int, source: str = "") -> np.ndarray:
        """The host replay's ``add``, then the rows (and frames) it wrote copied to the device."""
        idx = self.host.add(arrays, count, source)
        self.mirror(idx)
        return idx

    def mirror(self, idx: np.ndarray) -> None:
        """Copy ring rows ``idx`` (and the frame slots the host's last add filled) to the device."""
        h = self.host
        if isinstance(h, FrameReplay):  # frames_mode
            if len(h.frames) > len(self.frames):  # the host store grew: grow ours alike
                more = torch.zeros((len(h.frames) - len(self.frames), *self.frames.shape[1:]), dtype=self.frames.dtype)
                self.frames = torch.cat([self.frames, more.to(self.device)])
            slots = np.asarray(h.written, np.int64)
            self._put(self.frames, slots, h.frames[slots])
            self._put(self.obs_ref, idx, h.obs_ref[idx].astype(np.int64))
            self._put(self.next_ref, idx, h.next_ref[idx].astype(np.int64))
        else:
            self._put(self.obs, idx, h.obs[idx])
            self._put(self.next_obs, idx, h.next_obs[idx])
        for name, arr in h.scalars.items():
            self._put(self.scalars[name], idx, arr[idx])

    def mirror_all(self) -> None:
        """Copy everything the host replay holds (after it loaded a checkpoint)."""
        if isinstance(self.host, FrameReplay):  # frames_mode
            self.frames = torch.from_numpy(self.host.frames).to(self.device)
            self.host.written = []
        self.mirror(np.arange(self.size))

    def set_priorities(self, idx: torch.Tensor, prio: torch.Tensor) -> None:
        """Priorities (already ``** alpha``) of ring slots ``idx``; the running maximum follows."""
        assert self.priorities is not None  # prioritized (the learner calls this only then)
        prio = prio.to(self.device, torch.float64)
        self.priorities[idx.to(self.device)] = prio
        if len(prio):
            self.max_priority = torch.maximum(self.max_priority, prio.max())

    def set_max_priority(self, idx: torch.Tensor) -> None:
        """New rows that came without a priority get the highest so far."""
        assert self.priorities is not None  # prioritized (the learner calls this only then)
        self.priorities[idx.to(self.device)] = self.max_priority

    # ---- sampling

    def sample_uniform(self, batch: int) -> torch.Tensor:
        return torch.randint(0, self.size, (batch,), device=self.device, generator=self.generator)

    def find(self, mass: torch.Tensor) -> torch.Tensor:
        """The ring slot holding each prefix-sum value of ``mass`` (as :meth:`.replay.SumTree.find`)."""
        assert self.priorities is not None  # prioritized (the learner calls this only then)
        n = self.size
        cdf = torch.cumsum(self.priorities[:n], 0)
        return torch.searchsorted(cdf, mass, right=True).clamp_(max=n - 1)

    def sample_prioritized(self, batch: int, beta: float) -> tuple[torch.Tensor, torch.Tensor]:
        """Indices (stratified: one draw per segment of the total mass) and importance-sampling
        weights ``(N P(i))^-beta / max_j (N P(j))^-beta``, float32."""
        assert self.priorities is not None  # prioritized (the learner calls this only then)
        n = self.size
        prio_all = self.priorities[:n]
        total = prio_all.sum()
        u = torch.rand(batch, device=self.device, generator=self.generator, dtype=torch.float64)
        mass = (torch.arange(batch, device=self.device, dtype=torch.float64) + u) * (total / batch)
        idx = self.find(mass)
        weights = (self.priorities[idx] / prio_all.min()) ** (-beta)
        return idx, weights.float()

    def gather(self, idx: torch.Tensor) -> dict[str, torch.Tensor]:
        """``obs, next_obs`` (stacks rebuilt on the device) and the scalars of ring slots ``idx``."""
        b = len(idx)
        if isinstance(self.host, FrameReplay):  # frames_mode
            shape = (b, *self.host.obs_shape)
            out = {
                "obs": self.frames[self.obs_ref[idx]].reshape(shape),
                "next_obs": self.frames[self.next_ref[idx]].reshape(shape),
            }
        else:
            out = {"obs": self.obs[idx], "next_obs": self.next_obs[idx]}
        out.update({name: arr[idx] for name, arr in self.scalars.items()})
        return out

    def priorities_host(self) -> np.ndarray:
        """The priorities of the filled rows, for a checkpoint."""
        assert self.priorities is not None  # prioritized (the learner calls this only then)
        return self.priorities[: self.size].cpu().numpy()

    def load_sampler(self, saved: np.ndarray | None, rng: np.random.Generator) -> None:
        """The sampler's state from a checkpoint (``rng.replay``); one saved on another device kind, or
        by a host replay, has none that fits: then seeded from ``rng`` (the checkpoint's numpy RNG)."""
        if saved is not None and len(saved) == len(self.generator.get_state()):
            self.generator.set_state(torch.from_numpy(np.array(saved, dtype=np.uint8)))
        else:
            self.generator.manual_seed(int(rng.integers(2**62)))
