"""Keeping a GPU learner's queue full: read results one update late, copy through rotating pinned buffers.

A CUDA update is a queue of kernels; the host only has to wait when it reads a value back. If it
reads the update it just queued (the loss for the metrics, the TD errors for the sum tree), the
GPU runs dry while the host samples, gathers and launches the next one. The DQN learner reads
back through :class:`LaggedReadback` instead, which hands over the previous update's values: the
host waits for update t - 1 while update t is still queued, so the GPU always has work. On the
CPU nothing is asynchronous and the values are the current update's.

:class:`Staging` gives host batches pinned buffers in two rotating sets: a prefetched batch is
written while the previous one's copy may still be in flight. :func:`draw_noise` draws noisy
layers' noise with a generator on the net's own device (no host-to-device copy per update).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from .heads import reset_noise_of

if TYPE_CHECKING:
    from .learner import QNetwork


class LaggedReadback:
    """Device values to host floats, one call late on CUDA (the first call waits for its own)."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self._bufs: list[torch.Tensor] = []
        self._turn = 0
        self._pending: tuple[torch.Tensor, torch.cuda.Event] | None = None

    def push(self, values: torch.Tensor) -> list[float]:
        """Queue ``values`` (1-D) for reading; return the previous push's (on the CPU: these)."""
        values = values.detach()
        if not self.cuda:
            return values.tolist()
        if len(self._bufs) < 2 or self._bufs[0].shape != values.shape or self._bufs[0].dtype != values.dtype:
            self._bufs = [torch.empty(values.shape, dtype=values.dtype, pin_memory=True) for _ in range(2)]
        buf = self._bufs[self._turn]
        self._turn ^= 1
        buf.copy_(values, non_blocking=True)
        event = torch.cuda.Event()
        event.record()
        previous, self._pending = self._pending, (buf, event)
        ready = previous if previous is not None else self._pending
        ready[1].synchronize()
        return ready[0].tolist()

    def drain(self) -> None:
        """Forget what is pending (the learner was reset or loaded a checkpoint)."""
        self._pending = None


class Staging:
    """Pinned host buffers per field, in two sets used in turn (CUDA only; elsewhere a plain copy).

    A set is written again two batches later; by then the learner has waited for the update that
    consumed it (:class:`LaggedReadback` reads the previous update before the next batch is made),
    so its copy to the device is done."""

    def __init__(self, device: torch.device):
        self.device = device
        self.pin = device.type == "cuda"
        self._sets: list[dict[str, torch.Tensor]] = [{}, {}]
        self._turn = 0

    def next_set(self) -> None:
        """The next batch's buffers: the other set."""
        self._turn ^= 1

    def to_device(self, name: str, arr: np.ndarray) -> torch.Tensor:
        t = torch.from_numpy(np.ascontiguousarray(arr))
        if not self.pin:
            return t.to(self.device)
        bufs = self._sets[self._turn]
        buf = bufs.get(name)
        if buf is None or buf.shape != t.shape or buf.dtype != t.dtype:
            buf = bufs[name] = torch.empty(t.shape, dtype=t.dtype).pin_memory()
        buf.copy_(t)
        return buf.to(self.device, non_blocking=True)


def draw_noise(net: QNetwork, generator: torch.Generator) -> None:
    """New noise (one draw for the batch) in ``net``'s noisy layers, drawn on ``generator``'s device."""
    reset_noise_of(net.noisy_layers(), generator=generator)
