"""A number drawn as text (a score, a timer, a count), read by glyph templates.

The region is binarized (a luminance ``threshold``, or within ``tolerance`` of the text's
``color``); each glyph is tried at every place in it, and a place is scored by the template's own
pixels only: its ink found there (missed ink counts against it, ink beside it barely), so a sprite
drawn over the digits in another colour costs a glyph only the pixels it hides, and a glyph
covering at least ``coverage`` of its ink is a candidate. The best candidates that do not overlap
(one row of text: their bottoms within 2 px) are the characters, left to right.

A frame is **unreadable** (the reading keeps the last value, and says so) when no glyph matches,
when ink is left that no chosen glyph explains (a digit no glyph covers, a sprite of the text's
colour over the digits: no guess is made), or when the characters are no number. Prefer an
unreadable frame to a wrong reading: the reward skips it and catches up at the next good one.
"""

from __future__ import annotations

import os
import re
from typing import Any

import numpy as np

from ..window import ScreenEnvError
from .base import Reader, Unreadable, ink, opencv
from .glyphs import Glyph, column_runs, load_glyphs

#: two chosen glyphs may share this many columns (kerning, antialiased edges)
OVERLAP = 1
#: a chosen glyph's bottom may be this many pixels from the best one's (one row of text)
BASELINE_SLACK = 2
#: how much a pixel of ink in a glyph's box but off its template counts against it (a missed one: 1)
STRAY_WEIGHT = 1.0
#: a glyph of another character, on the same place, this close in score: unreadable (no guess)
AMBIGUOUS = 1.5
#: ink pixels that no chosen glyph explains and a reading still stands (a stray antialiased pixel)
SPECK = 2
#: frames in a row a reading past ``max_change`` must be read to be taken
CONFIRM = 3
_NUMBER = re.compile(r"-?\d+(\.\d+)?")


def _hits(mask: np.ndarray, template: np.ndarray) -> np.ndarray:
    """At each place (top-left y, x) where ``template`` fits in ``mask``: how many of its ink pixels
    are ink there. Both float32 0/1; an int array ``(H - h + 1, W - w + 1)``."""
    cv2 = opencv()
    if cv2 is not None:
        return np.rint(cv2.matchTemplate(mask, template, cv2.TM_CCORR)).astype(np.int32)
    windows = np.lib.stride_tricks.sliding_window_view(mask, template.shape)
    return np.rint(np.einsum("yxij,ij->yx", windows, template)).astype(np.int32)


def _box_sums(mask: np.ndarray, h: int, w: int) -> np.ndarray:
    """The ink in every ``h x w`` box of ``mask`` (an integral image), ``(H - h + 1, W - w + 1)``."""
    s = np.pad(mask.astype(np.int32).cumsum(0).cumsum(1), ((1, 0), (1, 0)))
    return s[h:, w:] - s[:-h, w:] - s[h:, :-w] + s[:-h, :-w]


def parse_number(text: str) -> int | float:
    """``"1,234"`` -> 1234, ``"-5"`` -> -5, ``"3.50"`` -> 3.5; anything else is :class:`Unreadable`."""
    s = text.replace(",", "").replace(" ", "")
    if not _NUMBER.fullmatch(s):
        raise Unreadable(f"read {text!r}, which is no number")
    return float(s) if "." in s else int(s)


class NumberReader(Reader):
    """The number in ``region`` (``[x, y, width, height]`` of the captured frame), read with ``glyphs``:
    a list of :class:`~.glyphs.Glyph`, or a folder / ``.npz`` / ``.json`` they are loaded from.

    ``color`` (``[r, g, b]``) and ``tolerance``: the text's colour, each channel within tolerance;
    without a colour, pixels of luminance >= ``threshold`` are text. ``coverage``: the share of a
    glyph's ink that must be found for it to count (lower for digits that sprites often hide).
    ``max_change`` (0: any): a reading this much or more away from the last good one is unreadable
    until it is read :data:`CONFIRM` frames in a row (a misread digit gives no reward spike; a new
    game's score is taken a few frames late)."""

    kind = "number"

    def __init__(
        self,
        region: Any,
        glyphs: list[Glyph] | str | os.PathLike,
        *,
        color: tuple[int, int, int] | None = None,
        tolerance: float = 60.0,
        threshold: float = 128.0,
        coverage: float = 0.85,
        max_change: float = 0.0,
        name: str = "",
    ):
        super().__init__(region, name)
        self.glyphs = load_glyphs(glyphs, self.where) if isinstance(glyphs, str | os.PathLike) else list(glyphs)
        if not self.glyphs or not any(g.ink for g in self.glyphs):
            raise ScreenEnvError(f"screen env: {self.where}: the glyph set is empty: nothing to read a number with")
        _, _, w, h = self.region
        if all(g.mask.shape[0] > h or g.mask.shape[1] > w for g in self.glyphs):
            sizes = sorted({f"{g.mask.shape[1]}x{g.mask.shape[0]}" for g in self.glyphs})
            raise ScreenEnvError(
                f"screen env: {self.where}: every glyph ({', '.join(sizes)} px) is larger than the {w}x{h} region"
            )
        if not 0 < coverage <= 1:
            raise ScreenEnvError(
                f"screen env: {self.where}: coverage={coverage!r}: a share of a glyph's ink, in (0, 1]"
            )
        self.color, self.tolerance, self.threshold, self.coverage = color, tolerance, threshold, coverage
        self.max_change = float(max_change)
        self._jump: tuple[Any, int] = (None, 0)
        self._templates = [g.mask.astype(np.float32) for g in self.glyphs]
        #: the best share of its ink any glyph found in the last frame (what the start-up line reports)
        self.best_coverage = 0.0
        self._speck = SPECK

    @property
    def chars(self) -> str:
        return "".join(sorted({g.char for g in self.glyphs}))

    def binarize(self, pixels: np.ndarray) -> np.ndarray:
        """The region's text pixels (bool), as the reader sees them."""
        return ink(pixels, self.color, self.tolerance, self.threshold)

    def measure(self, pixels: np.ndarray) -> int | float:
        mask = self.binarize(pixels)
        self.best_coverage = 0.0
        if not mask.any():
            raise Unreadable("no text-coloured pixel in the region")
        candidates = self._candidates(mask)
        chosen = self._choose(candidates)
        if not chosen:
            raise Unreadable(f"no glyph covers {self.coverage:.0%} of its ink (best {self.best_coverage:.0%})")
        self.text = "".join(self.glyphs[g].char for _, _, _, g in chosen)
        self._check_explained(mask, chosen)
        self._check_unambiguous(candidates, chosen)
        return self._plausible(parse_number(self.text))

    def _plausible(self, value: int | float) -> int | float:
        if not self.max_change or self.value is None or abs(value - self.value) <= self.max_change:
            self._jump = (None, 0)
            return value
        seen = self._jump[1] + 1 if self._jump[0] == value else 1
        self._jump = (value, seen)
        if seen < CONFIRM:
            raise Unreadable(
                f"read {value}, {value - self.value:+g} from {self.value}: more than max_change = {self.max_change:g} "
                f"(taken once read {CONFIRM} frames in a row)"
            )
        self._jump = (None, 0)
        return value

    def _candidates(self, mask: np.ndarray) -> list[tuple[float, int, int, int]]:
        """Every place a glyph counts at: ``(score, x, y, glyph index)``, its best row per column."""
        m = mask.astype(np.float32)
        found = []
        for i, t in enumerate(self._templates):
            gh, gw = t.shape
            if gh > m.shape[0] or gw > m.shape[1]:
                continue
            n = self.glyphs[i].ink
            hits = _hits(m, t)
            stray = _box_sums(mask, gh, gw) - hits  # ink in the glyph's box but off its template
            cov = hits / n
            self.best_coverage = max(self.best_coverage, float(cov.max()))
            # as much ink off the template in its box as the ink it may miss (plus an antialiased edge's
            # 2 px), and no more: a 3 is no candidate where a 9 is drawn, nor a glyph under a solid sprite
            ok = (cov >= self.coverage) & (stray <= (1 - self.coverage) * n + 2)
            score = 2.0 * hits - n - STRAY_WEIGHT * stray
            score = np.where(ok, score, -np.inf)
            best_y = score.argmax(axis=0)
            for x in np.flatnonzero(np.isfinite(score.max(axis=0))):
                found.append((float(score[best_y[x], x]), int(x), int(best_y[x]), i))
        return found

    def _choose(self, candidates: list[tuple[float, int, int, int]]) -> list[tuple[float, int, int, int]]:
        """The best candidates that share no more than :data:`OVERLAP` columns with a better one and sit
        on its row; left to right."""
        chosen: list[tuple[float, int, int, int]] = []
        bottom = None
        for c in sorted(candidates, key=lambda c: (-c[0], c[1])):
            _, x, y, i = c
            h, w = self.glyphs[i].mask.shape
            if bottom is not None and abs(y + h - bottom) > BASELINE_SLACK:
                continue
            spans = [(cx, cx + self.glyphs[ci].mask.shape[1]) for _, cx, _, ci in chosen]
            if all(min(x + w, b) - max(x, a) <= OVERLAP for a, b in spans):
                chosen.append(c)
                bottom = y + h if bottom is None else bottom
        return sorted(chosen, key=lambda c: c[1])

    def _check_explained(self, mask: np.ndarray, chosen: list[tuple[float, int, int, int]]) -> None:
        """Unreadable when ink is left that no chosen glyph's box holds, or the characters are far apart."""
        left = mask.copy()
        widest = max(g.mask.shape[1] for g in self.glyphs)
        prev_end = None
        for _, x, y, i in chosen:
            h, w = self.glyphs[i].mask.shape
            left[y : y + h, x : x + w] = False
            if prev_end is not None and x - prev_end > 2 * widest:
                raise Unreadable(f"read {self.text!r} with a gap of {x - prev_end} px between characters")
            prev_end = x + w
        if int(left.sum()) > self._speck:
            runs = column_runs(left)
            at = ", ".join(f"x={a}-{b - 1}" for a, b in runs[:3])
            raise Unreadable(f"read {self.text!r} but {int(left.sum())} px of ink match no glyph ({at})")

    def _check_unambiguous(self, candidates: list, chosen: list) -> None:
        """Unreadable when a glyph of another character fits a chosen one's place about as well (a
        sprite hid what tells a 9 from a 3): no guess is made."""
        for s, x, _, i in chosen:
            w = self.glyphs[i].mask.shape[1]
            for rs, rx, _, ri in candidates:
                if self.glyphs[ri].char == self.glyphs[i].char or rs < s - AMBIGUOUS:
                    continue
                rw = self.glyphs[ri].mask.shape[1]
                if min(x + w, rx + rw) - max(x, rx) > min(w, rw) / 2:
                    raise Unreadable(
                        f"read {self.text!r}, but {self.glyphs[ri].char!r} fits as well as {self.glyphs[i].char!r} at x={x}"
                    )

    def start_problem(self, pixels: np.ndarray) -> str:
        try:
            self.measure(pixels)
        except Unreadable as e:
            mask = self.binarize(pixels)
            how = (
                f"within {self.tolerance:g} of color {list(self.color)}"
                if self.color
                else f"threshold {self.threshold:g}"
            )
            return (
                f"the glyphs ({self.chars!r}) read no number in region {list(self.region)} on the first frame: {e} "
                f"({int(mask.sum())} of {mask.size} px count as text at {how}); check the region, the text's "
                "threshold or color, and the glyphs"
            )
        return ""

    def describe(self) -> str:
        return f"{self.name}={self.value}"
