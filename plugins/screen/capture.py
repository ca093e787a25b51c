"""Screen pixels in: mss grabs a region, this turns it into an RGB frame and an observation.

mss reads the X server's (or Windows') framebuffer directly: one call per frame, BGRA bytes.
The reward function gets the full-resolution RGB frame (a view: a score's digits need it); the
agent gets it shrunk to ``size`` with OpenCV's area filter, gray or RGB, as uint8, computed from
mss's BGRA bytes directly (shrink first, convert the few pixels left: half the time of a full-HD
RGB copy).
"""

from __future__ import annotations

import sys
from collections import deque

import numpy as np

from .window import Region, ScreenEnvError, missing


class Grabber:
    """One mss instance grabbing one region (mss instances are per thread: make this where it is used)."""

    def __init__(self, region: Region, display: str | None = None):
        try:
            import mss
        except ImportError:
            raise missing("screen capture", "mss") from None
        make = getattr(mss, "MSS", None) or mss.mss  # mss >= 10.2 spells it MSS
        kwargs = {"display": display} if display and sys.platform.startswith("linux") else {}
        try:
            self.sct = make(**kwargs)
        except Exception as e:  # mss raises its own ScreenShotError (no display, no XRandR ...)
            raise ScreenEnvError(f"screen env: cannot capture the screen of {display or '$DISPLAY'!r}: {e}") from None
        self.region = region
        self.monitor = region.as_monitor()

    def grab(self) -> np.ndarray:
        """The region now, BGRA uint8 ``(height, width, 4)`` (:func:`rgb` views it as RGB), in a
        buffer of its own (mss makes a new one each grab: :class:`Stillness` keeps the last)."""
        shot = self.sct.grab(self.monitor)
        return np.frombuffer(shot.raw, dtype=np.uint8).reshape(shot.height, shot.width, 4)

    def close(self) -> None:
        self.sct.close()


class Stillness:
    """How long the grabbed frames have been pixel-equal. A game that hangs (a deadlock, a modal
    error box it never draws, a stopped process) leaves its last picture on the screen, and the
    screen goes on serving it: the frames stop changing, nothing else tells."""

    def __init__(self) -> None:
        self.last: np.ndarray | None = None
        self.since = 0.0

    def restart(self) -> None:
        """Forget the frames so far (a new episode's count starts at its first frame)."""
        self.last = None

    def seen(self, frame: np.ndarray, at: float) -> float:
        """Note ``frame``, grabbed at ``at`` (monotonic seconds); the seconds since the first of
        the run of equal frames it ends (0 when it differs from the one before)."""
        if self.last is None or self.last.shape != frame.shape or not np.array_equal(self.last, frame):
            self.since = at
        self.last = frame
        return at - self.since


def rgb(bgra: np.ndarray) -> np.ndarray:
    """A BGRA frame as RGB ``(H, W, 3)``, a view (no copy)."""
    return bgra[:, :, 2::-1]


def shrink(bgra: np.ndarray, width: int, height: int, gray: bool) -> np.ndarray:
    """A BGRA frame as the agent sees it: ``(height, width)`` gray or ``(height, width, 3)`` RGB."""
    try:
        import cv2
    except ImportError:  # nearest pixel: no OpenCV needed, coarser
        ys = np.linspace(0, bgra.shape[0] - 1, height).astype(np.intp)
        xs = np.linspace(0, bgra.shape[1] - 1, width).astype(np.intp)
        small = rgb(bgra[ys][:, xs])
        if gray:
            return (small @ np.array([0.299, 0.587, 0.114])).astype(np.uint8)
        return np.ascontiguousarray(small)
    if bgra.shape[:2] != (height, width):
        bgra = cv2.resize(bgra, (width, height), interpolation=cv2.INTER_AREA)
    return cv2.cvtColor(bgra, cv2.COLOR_BGRA2GRAY if gray else cv2.COLOR_BGRA2RGB)


class FrameStack:
    """The last ``depth`` observations of the window, shrunk to ``width`` x ``height`` (gray or
    RGB), stacked channels first as the CNN torsos take them; the first frame of an episode fills it."""

    def __init__(self, width: int, height: int, gray: bool, depth: int):
        self.width, self.height, self.gray, self.depth = width, height, gray, depth
        self.frames: deque[np.ndarray] = deque(maxlen=depth)

    @property
    def shape(self) -> tuple[int, int, int]:
        return (self.depth * (1 if self.gray else 3), self.height, self.width)

    def clear(self) -> None:
        self.frames.clear()

    def push(self, bgra: np.ndarray) -> np.ndarray:
        """``bgra`` (a grabbed frame) onto the stack; the stacked observation."""
        small = shrink(bgra, self.width, self.height, self.gray)
        if not self.frames:
            self.frames.extend([small] * self.depth)
        else:
            self.frames.append(small)
        if self.gray:
            return np.stack(self.frames)
        return np.concatenate([f.transpose(2, 0, 1) for f in self.frames])
