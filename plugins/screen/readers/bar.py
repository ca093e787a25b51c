"""A bar's fill (health, fuel, progress): the fraction of the region's length, along the bar, whose
cross-section is mostly the bar's ``color`` (each channel within ``tolerance``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .base import Reader, check_color, ink


class BarReader(Reader):
    """The filled fraction (0-1) of the bar in ``region``: columns (rows, ``vertical``) at least half
    of whose pixels are ``color``, over all of them. A sprite over the bar's empty part adds nothing;
    one over its filled part hides what it covers."""

    kind = "bar"

    def __init__(self, region: Any, color: Any, *, tolerance: float = 60.0, vertical: bool = False, name: str = ""):
        super().__init__(region, name)
        self.color = check_color(color, self.where)
        self.tolerance, self.vertical = float(tolerance), bool(vertical)

    def measure(self, pixels: np.ndarray) -> float:
        filled = ink(pixels, self.color, self.tolerance, 0).mean(axis=1 if self.vertical else 0) >= 0.5
        return float(filled.mean())

    def start_problem(self, pixels: np.ndarray) -> str:
        if self.measure(pixels) == 0:
            return (
                f"the bar reads empty on the first frame: no column of region {list(self.region)} is mostly "
                f"color {list(self.color)} (within {self.tolerance:g}); check the region and the color"
            )
        return ""

    def describe(self) -> str:
        return f"{self.name}={self.value:.2f}" if self.value is not None else f"{self.name}=?"
