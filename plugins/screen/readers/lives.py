"""Lives (or any icons) counted: the places in a region where an icon is drawn, by template
matching (the root mean square difference of the icon's pixels, 0-255, under ``tolerance``),
counted without overlap (the best match first, then the best that overlaps none taken)."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from ..window import ScreenEnvError
from .base import Reader, opencv, read_png
from .match import crop_image


def rms_differences(pixels: np.ndarray, icon: np.ndarray) -> np.ndarray:
    """The RMS difference of ``icon`` from ``pixels`` at each place it fits, ``(H - h + 1, W - w + 1)``."""
    p, t = pixels.astype(np.float32), icon.astype(np.float32)
    cv2 = opencv()
    if cv2 is not None:
        sq = cv2.matchTemplate(np.ascontiguousarray(p), np.ascontiguousarray(t), cv2.TM_SQDIFF)
    else:
        windows = np.lib.stride_tricks.sliding_window_view(p, t.shape)[:, :, 0]
        sq = ((windows - t) ** 2).sum(axis=(2, 3, 4))
    return np.sqrt(np.maximum(sq, 0) / t.size)


class LivesReader(Reader):
    """How many times ``icon`` (an RGB array or image file; ``icon_region`` cuts it from a bigger
    picture, such as a saved frame) is drawn in ``region``, without overlap."""

    kind = "lives"

    def __init__(
        self,
        region: Any,
        icon: np.ndarray | str | os.PathLike,
        *,
        icon_region: Any = None,
        tolerance: float = 30.0,
        name: str = "",
    ):
        super().__init__(region, name)
        image = read_png(icon, self.where) if isinstance(icon, str | os.PathLike) else np.asarray(icon)
        image = image[..., :3]
        if icon_region is not None:
            _, _, iw, ih = icon_region
            image = crop_image(image, tuple(icon_region), (iw, ih), self.where)
        self.icon = np.ascontiguousarray(image)
        _, _, w, h = self.region
        if self.icon.shape[0] > h or self.icon.shape[1] > w:
            raise ScreenEnvError(
                f"screen env: {self.where}: the icon ({self.icon.shape[1]}x{self.icon.shape[0]}) is larger than "
                f"the {w}x{h} region"
            )
        self.tolerance = float(tolerance)
        #: the last frame's best match (its RMS difference)
        self.best = float("nan")

    def measure(self, pixels: np.ndarray) -> int:
        diff = rms_differences(pixels, self.icon)
        self.best = float(diff.min())
        ih, iw = self.icon.shape[:2]
        ys, xs = np.nonzero(diff <= self.tolerance)
        taken: list[tuple[int, int]] = []
        for k in np.argsort(diff[ys, xs], kind="stable"):
            y, x = int(ys[k]), int(xs[k])
            if all(abs(y - ty) >= ih or abs(x - tx) >= iw for ty, tx in taken):
                taken.append((y, x))
        return len(taken)

    def start_problem(self, pixels: np.ndarray) -> str:
        if self.measure(pixels) == 0:
            return (
                f"no icon in region {list(self.region)} on the first frame (the best place differs by "
                f"{self.best:.1f}, tolerance {self.tolerance:g}): check the region and the icon"
            )
        return ""
