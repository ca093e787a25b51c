"""What every screen reader shares: a region of the frame, a reading that may be "unreadable"
(the last good value kept, counted, logged), the start-up check of the first frame, binarizing
by a threshold or a text colour, and PNG files (OpenCV, else pygame: both in the screen extra)."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from ..window import ScreenEnvError, missing

log = logging.getLogger("mqttrl.screen.readers")

#: a reader unreadable this many frames in a row says so once at WARNING (then at DEBUG again)
LONG_UNREADABLE = 200


@dataclass(frozen=True)
class Reading:
    """One frame's reading: ``value`` (the last good one when ``ok`` is False), ``status``
    ``"ok"`` or ``"unreadable"``, and ``why`` it could not be read; ``text`` is what a number
    reader saw (its characters)."""

    value: Any
    ok: bool = True
    why: str = ""
    text: str = ""

    @property
    def status(self) -> str:
        return "ok" if self.ok else "unreadable"


def check_region(region: Any, where: str) -> tuple[int, int, int, int]:
    """``[x, y, w, h]`` (pixels of the captured frame, from its top-left) as a tuple, or one line."""
    ok = (
        isinstance(region, list | tuple)
        and len(region) == 4
        and all(isinstance(v, int) and not isinstance(v, bool) for v in region)
        and region[0] >= 0
        and region[1] >= 0
        and region[2] > 0
        and region[3] > 0
    )
    if not ok:
        raise ScreenEnvError(
            f"screen env: {where}: region={region!r}: give [x, y, width, height] in pixels of the captured "
            "frame (x, y >= 0 from its top-left; width, height > 0)"
        )
    return tuple(region)


def check_color(color: Any, where: str) -> tuple[int, int, int]:
    if not (
        isinstance(color, list | tuple)
        and len(color) == 3
        and all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 255 for v in color)
    ):
        raise ScreenEnvError(f"screen env: {where}: color={color!r}: give [red, green, blue], each 0-255")
    return tuple(color)


def ink(pixels: np.ndarray, color: tuple[int, int, int] | None, tolerance: float, threshold: float) -> np.ndarray:
    """The pixels that are text (or bar, or icon): within ``tolerance`` of ``color`` on every channel
    when a colour is given, else a luminance of at least ``threshold`` (light text on a dark ground;
    dark text: give its colour). ``pixels``: RGB ``(h, w, 3)``; a bool ``(h, w)`` array."""
    px = pixels.astype(np.int16)
    if color is not None:
        return np.abs(px - np.asarray(color, np.int16)).max(axis=2) <= tolerance
    luma = px[..., 0] * 0.299 + px[..., 1] * 0.587 + px[..., 2] * 0.114
    return luma >= threshold


class Reader:
    """A reader of one region of the frame. Subclasses write :meth:`measure` (the region's pixels to a
    value, or raise :class:`Unreadable`); :meth:`read` keeps the last good value through unreadable
    frames, counts them (:attr:`unreadable`) and logs each at DEBUG.

    ``region`` is ``[x, y, width, height]`` in pixels of the frame the kit captures (the window's
    inside, full size: before ``size`` shrinks it)."""

    kind = "reader"

    def __init__(self, region: Any, name: str = ""):
        self.name = name or self.kind
        self.region = check_region(region, self.where)
        #: the last good reading's value (None until one was read)
        self.value: Any = None
        #: frames read, and frames that could not be read (their reading kept the last value)
        self.frames = 0
        self.unreadable = 0
        self._in_a_row = 0
        #: whether the last frame was read (False: unreadable, its value kept)
        self.ok = True
        #: what the last frame showed, as text (a number reader's characters; "" for the others)
        self.text = ""

    @property
    def where(self) -> str:
        return f"reward.{self.name}" if self.name else self.kind

    def forget(self) -> None:
        """Forget the last value (a new episode: its first good reading is taken as it is)."""
        self.value = None
        self._in_a_row = 0

    def crop(self, frame: np.ndarray) -> np.ndarray:
        """The region's pixels; a region outside the frame is one line (a :class:`ScreenEnvError`)."""
        x, y, w, h = self.region
        fh, fw = frame.shape[:2]
        if x + w > fw or y + h > fh:
            raise ScreenEnvError(
                f"screen env: {self.where}: region [{x}, {y}, {w}, {h}] is outside the captured {fw}x{fh} frame "
                f"(x + width = {x + w}, y + height = {y + h}): regions count pixels from the window's top-left "
                "(mqttrl screen probe draws them on a frame)"
            )
        return frame[y : y + h, x : x + w]

    def measure(self, pixels: np.ndarray) -> Any:
        """The region's value (raise :class:`Unreadable` saying why it cannot be read)."""
        raise NotImplementedError

    def read(self, frame: np.ndarray) -> Reading:
        """This frame's reading: the value, or the last good one marked ``"unreadable"``."""
        pixels = self.crop(frame)
        self.frames += 1
        self.text = ""
        try:
            value = self.measure(pixels)
        except Unreadable as e:
            return self._keep(str(e))
        self.value, self._in_a_row, self.ok = value, 0, True
        return Reading(value, True, "", self.text)

    def _keep(self, why: str) -> Reading:
        self.unreadable += 1
        self._in_a_row += 1
        self.ok = False
        level = logging.WARNING if self._in_a_row == LONG_UNREADABLE else logging.DEBUG
        log.log(
            level,
            "screen env: %s unreadable (%s; %d frames in a row, %d of %d in all); keeping %r",
            self.where,
            why,
            self._in_a_row,
            self.unreadable,
            self.frames,
            self.value,
        )
        return Reading(self.value, False, why, self.text)

    def check_start(self, frame: np.ndarray) -> None:
        """The first frame's check: the region inside the frame (every reader), and what a reader
        says must read at the start (its :meth:`start_problem`). One line, a :class:`ScreenEnvError`."""
        pixels = self.crop(frame)
        problem = self.start_problem(pixels)
        if problem:
            raise ScreenEnvError(f"screen env: {self.where}: {problem} (mqttrl screen probe shows what it reads)")

    def start_problem(self, pixels: np.ndarray) -> str:
        """Why the first frame's region cannot be what the game shows at its start ("" if it can)."""
        return ""

    def describe(self) -> str:
        """A short label of the last reading (the probe's picture)."""
        return f"{self.name}={self.value}"


class Unreadable(Exception):
    """This frame's region cannot be read (the reader keeps its last value)."""


# ---- PNG files: OpenCV if there, else pygame (both in the screen extra) -------------------------
def read_png(path: str | os.PathLike[str], where: str) -> np.ndarray:
    """An image file as RGB uint8 ``(h, w, 3)``; a missing or unreadable file is one line."""
    p = Path(path)
    if not p.is_file():
        raise ScreenEnvError(f"screen env: {where}: {p} does not exist (paths are relative to {Path.cwd()})")
    cv2 = opencv()
    if cv2 is not None:
        bgr = cv2.imread(str(p), cv2.IMREAD_COLOR)
        if bgr is None:
            raise ScreenEnvError(f"screen env: {where}: {p} is not an image OpenCV can read")
        return np.ascontiguousarray(bgr[:, :, ::-1])
    pygame = _pygame("reading images")
    try:
        surface = pygame.image.load(str(p))
    except Exception as e:
        raise ScreenEnvError(f"screen env: {where}: {p} is not an image pygame can read ({e})") from None
    return pygame.surfarray.array3d(surface).transpose(1, 0, 2).copy()


def write_png(path: str | Path, rgb: np.ndarray) -> None:
    """Write an RGB (or gray, or bool) image as a PNG file, its folder made if needed."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    img = np.asarray(rgb)
    if img.dtype == bool:
        img = img.astype(np.uint8) * 255
    if img.ndim == 2:
        img = np.repeat(img[:, :, None], 3, axis=2)
    img = np.ascontiguousarray(img[:, :, :3].astype(np.uint8))
    cv2 = opencv()
    if cv2 is not None:
        if not cv2.imwrite(str(p), img[:, :, ::-1]):
            raise OSError(f"cannot write {p}")
        return
    pygame = _pygame("writing images")
    pygame.image.save(pygame.surfarray.make_surface(img.transpose(1, 0, 2)), str(p))


def opencv() -> ModuleType | None:
    """OpenCV (``cv2``), or None where it is not installed: the readers then do without it."""
    try:
        import cv2
    except ImportError:
        return None
    return cv2


def _pygame(what: str):
    try:
        import pygame
    except ImportError:
        raise missing(what, "opencv-python-headless or pygame") from None
    return pygame
