"""Whether a region looks like a reference picture: a "game over" banner, a title screen, a pause
menu ("screen changed" with ``when = "different"``). The measure is the mean absolute difference
of the region's pixels from the reference's (0-255, all channels), against a ``tolerance``."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from ..window import ScreenEnvError
from .base import Reader, read_png


def crop_image(image: np.ndarray, region: tuple[int, int, int, int], size: tuple[int, int], where: str) -> np.ndarray:
    """``image`` if it is ``size`` (width, height) already, else its ``region`` (a whole frame saved as
    the reference); one line when it is neither."""
    w, h = size
    if image.shape[:2] == (h, w):
        return image
    x, y = region[0], region[1]
    if image.shape[0] >= y + h and image.shape[1] >= x + w:
        return image[y : y + h, x : x + w]
    ih, iw = image.shape[:2]
    raise ScreenEnvError(
        f"screen env: {where}: the image is {iw}x{ih}: give one of the region's size ({w}x{h}) or a whole frame "
        f"that holds the region [{region[0]}, {region[1]}, {w}, {h}]"
    )


class MatchReader(Reader):
    """True while ``region`` matches ``reference`` (an RGB array or an image file: the region's size, or a
    whole frame the region is cut from): mean absolute difference <= ``tolerance``; with ``when =
    "different"``, True while it differs by more (the screen changed). :attr:`difference` is the last
    frame's."""

    kind = "match"

    def __init__(
        self,
        region: Any,
        reference: np.ndarray | str | os.PathLike,
        *,
        tolerance: float = 12.0,
        when: str = "same",
        name: str = "",
    ):
        super().__init__(region, name)
        if when not in ("same", "different"):
            raise ScreenEnvError(f'screen env: {self.where}: when={when!r}: "same" or "different"')
        image = read_png(reference, self.where) if isinstance(reference, str | os.PathLike) else np.asarray(reference)
        _, _, w, h = self.region
        self.reference = crop_image(image[..., :3], self.region, (w, h), self.where).astype(np.int16)
        self.tolerance, self.when = float(tolerance), when
        self.difference = float("nan")
        self.value = False

    def measure(self, pixels: np.ndarray) -> bool:
        self.difference = float(np.abs(pixels.astype(np.int16) - self.reference).mean())
        same = self.difference <= self.tolerance
        return same if self.when == "same" else not same

    def describe(self) -> str:
        return f"{self.name}={'yes' if self.value else 'no'} (diff {self.difference:.1f})"
