"""Whether a region has stopped changing: a game that just stops at its end (freegames' Pacman: a
caught Pacman freezes the maze, the window stays), a stalled level. The measure is the mean
absolute difference of the region's pixels from the frame before (0-255, all channels); a region
no more different than ``tolerance`` for ``frames`` frames in a row is still."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..window import ScreenEnvError
from .base import Reader


class StillReader(Reader):
    """True once ``region`` has not changed (mean absolute difference from the frame before at most
    ``tolerance``) for ``frames`` frames in a row; False again at the first frame that changes.
    :attr:`still` is the frames in a row it has stood still, :attr:`difference` the last frame's."""

    kind = "still"

    def __init__(self, region: Any, *, frames: int = 10, tolerance: float = 0.0, name: str = ""):
        super().__init__(region, name)
        if not (isinstance(frames, int) and not isinstance(frames, bool) and frames >= 1):
            raise ScreenEnvError(
                f"screen env: {self.where}: frames={frames!r}: an int >= 1, the frames in a row the region must "
                "stand still (at step_s = 0.1, 10 frames are 1 s)"
            )
        if isinstance(tolerance, bool) or not isinstance(tolerance, int | float) or not tolerance >= 0:
            raise ScreenEnvError(
                f"screen env: {self.where}: tolerance={tolerance!r}: a number >= 0, the mean absolute difference "
                "(0-255) from the frame before that still counts as unchanged (0: pixel-equal)"
            )
        self.frames_still, self.tolerance = frames, float(tolerance)
        self.last: np.ndarray | None = None
        self.still = 0
        self.difference = float("nan")
        self.value = False

    def forget(self) -> None:
        super().forget()
        self.last, self.still = None, 0

    def measure(self, pixels: np.ndarray) -> bool:
        now = pixels.astype(np.int16)
        if self.last is None or self.last.shape != now.shape:
            self.difference, self.still = float("nan"), 0
        else:
            self.difference = float(np.abs(now - self.last).mean())
            self.still = self.still + 1 if self.difference <= self.tolerance else 0
        self.last = now
        return self.still >= self.frames_still

    def describe(self) -> str:
        return f"{self.name}={'yes' if self.value else 'no'} (still {self.still} of {self.frames_still} frames)"
