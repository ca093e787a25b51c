"""Glyph templates for :class:`~.number.NumberReader`: binary masks of the characters a game draws.

Three sources, none of them pickle:

* a folder of PNG files named by their character (``0.png`` ... ``9.png``; ``minus.png``,
  ``dot.png``, ``comma.png``, ... for the characters a file name cannot hold; ``7_1.png`` is a
  second ``7``): white ink on black, as :func:`cut_glyphs` and ``mqttrl screen glyphs`` write them;
* an ``.npz`` (numpy, ``allow_pickle=False``) or ``.json`` file of masks by the same names (JSON:
  rows of strings, ``#`` for ink, or of 0/1 lists);
* a font file (or a system font's name) and size, rendered with pygame's font module (the screen
  extra's): :func:`render_glyphs`.

A glyph's mask is cut tight to its ink across, and to the line's ink top to bottom (all glyphs of
one cut share their rows: the baseline stays where it was).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..window import ScreenEnvError, missing
from .base import ink, read_png, write_png

#: file names for the characters a file name cannot hold (or that read badly as one)
NAMES = {
    "minus": "-",
    "plus": "+",
    "dot": ".",
    "comma": ",",
    "colon": ":",
    "slash": "/",
    "percent": "%",
    "dollar": "$",
    "space": " ",
}
_NAME_OF = {c: n for n, c in NAMES.items()}


@dataclass(frozen=True)
class Glyph:
    """One character's template: ``mask`` is bool ``(h, w)``, True where the character has ink."""

    char: str
    mask: np.ndarray

    @property
    def ink(self) -> int:
        return int(self.mask.sum())


def char_of(stem: str, where: str) -> str:
    """The character a file stem (or npz/json key) names: ``"7"``, ``"7_1"``, ``"minus"``."""
    base = stem.rsplit("_", 1)[0] if "_" in stem[1:] else stem
    if len(base) == 1:
        return base
    if base in NAMES:
        return NAMES[base]
    if len(base) == 5 and base[0] == "u":
        try:
            return chr(int(base[1:], 16))
        except ValueError:
            pass
    raise ScreenEnvError(
        f"screen env: {where}: glyph {stem!r}: name a glyph by its character ('7', '7_1' for a second one) "
        f"or one of {', '.join(NAMES)}"
    )


def file_stem(char: str) -> str:
    """The file stem a character's glyph is written under (:data:`NAMES`, else ``u002e`` style)."""
    return _NAME_OF.get(char) or (char if char.isalnum() and char.isascii() else f"u{ord(char):04x}")


def load_glyphs(source: str | os.PathLike, where: str = "glyphs") -> list[Glyph]:
    """Glyphs from a folder of PNGs, an ``.npz`` or a ``.json`` file; an empty set is one line."""
    p = Path(source)
    if not p.exists():
        raise ScreenEnvError(f"screen env: {where}: {p} does not exist (paths are relative to {Path.cwd()})")
    if p.is_dir():
        glyphs = [Glyph(char_of(f.stem, where), read_png(f, where).max(axis=2) > 127) for f in sorted(p.glob("*.png"))]
    elif p.suffix == ".npz":
        try:
            with np.load(p, allow_pickle=False) as data:
                glyphs = [Glyph(char_of(k, where), np.asarray(data[k]) > 0) for k in sorted(data.files)]
        except (ValueError, OSError) as e:
            raise ScreenEnvError(f"screen env: {where}: {p} is not an npz of masks ({e})") from None
    elif p.suffix == ".json":
        glyphs = _from_json(p, where)
    else:
        raise ScreenEnvError(f"screen env: {where}: {p}: give a folder of glyph PNGs, an .npz or a .json file")
    glyphs = [g for g in glyphs if g.mask.ndim == 2 and g.ink > 0]
    if not glyphs:
        raise ScreenEnvError(
            f"screen env: {where}: {p} holds no glyph with ink (name PNGs by their character: 0.png, 1.png, ...; "
            "mqttrl screen glyphs cuts them from a frame)"
        )
    return glyphs


def _from_json(p: Path, where: str) -> list[Glyph]:
    try:
        data = json.loads(p.read_text())
    except ValueError as e:
        raise ScreenEnvError(f"screen env: {where}: {p} is not valid JSON ({e})") from None
    if not isinstance(data, dict):
        raise ScreenEnvError(f"screen env: {where}: {p}: expected an object of masks by character")
    glyphs = []
    for key, rows in sorted(data.items()):
        try:
            if rows and all(isinstance(r, str) for r in rows):
                mask = np.array([[c == "#" for c in r] for r in rows], bool)
            else:
                mask = np.array(rows, dtype=float) > 0
        except (TypeError, ValueError):
            mask = np.zeros((0,), bool)
        if mask.ndim != 2:
            raise ScreenEnvError(
                f"screen env: {where}: {p}: glyph {key!r}: give rows of equal length ('#' for ink) or of 0/1 lists"
            )
        glyphs.append(Glyph(char_of(key, where), mask))
    return glyphs


def save_glyphs(glyphs: list[Glyph], folder: str | os.PathLike) -> list[Path]:
    """Write glyphs as PNGs into ``folder`` (made if needed): ``7.png``, or ``7_1.png`` ... beside a
    different ``7`` already there; one equal to a glyph already there is not written again. The
    paths written."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for g in glyphs:
        stem = file_stem(g.char)
        there = [f for f in out.glob("*.png") if f.stem == stem or f.stem.startswith(stem + "_")]
        if any(np.array_equal(read_png(f, "glyphs").max(axis=2) > 127, g.mask) for f in there):
            continue
        n = 0
        while (out / (f"{stem}.png" if n == 0 else f"{stem}_{n}.png")).exists():
            n += 1
        path = out / (f"{stem}.png" if n == 0 else f"{stem}_{n}.png")
        write_png(path, g.mask)
        written.append(path)
    return written


def cut_glyphs(
    frame: np.ndarray,
    region: tuple[int, int, int, int],
    label: str,
    *,
    color: tuple[int, int, int] | None = None,
    tolerance: float = 60.0,
    threshold: float = 128.0,
    known: Sequence[Glyph] = (),
) -> list[Glyph]:
    """The glyphs of a frame whose ``region`` shows the text ``label`` (spaces in it are skipped):
    the region binarized (as :class:`~.number.NumberReader` does, same ``color``/``tolerance``/
    ``threshold``), split into runs of columns with ink, one glyph a run, left to right. Characters
    that touch (one run, several characters) are split with the ``known`` glyphs: a known
    character is peeled off where it matches, an unknown one is what lies between. What cannot be
    split is one line (another frame, or glyphs of the touching characters cut first)."""
    x, y, w, h = region
    fh, fw = frame.shape[:2]
    if x < 0 or y < 0 or x + w > fw or y + h > fh:
        raise ScreenEnvError(f"region [{x}, {y}, {w}, {h}] is outside the {fw}x{fh} frame")
    mask = ink(frame[y : y + h, x : x + w], color, tolerance, threshold)
    chars = [c for c in label if not c.isspace()]
    rows = np.nonzero(mask.any(axis=1))[0]
    runs = column_runs(mask)
    if not chars or not len(rows):
        if chars or runs:
            raise ScreenEnvError(f"the region shows {len(runs)} characters, the label {label!r} has {len(chars)}")
        return []
    line = mask[rows[0] : rows[-1] + 1]
    spans = runs if len(runs) == len(chars) else _peel(line, runs, chars, list(known))
    if spans is None:
        raise ScreenEnvError(
            f"the region shows {len(runs)} separate characters (runs of columns with ink), the label "
            f"{label!r} has {len(chars)}: give the region of the text alone, or a frame where no two characters "
            "touch, or cut the touching characters from another frame first (they are then known and split off)"
        )
    return [Glyph(c, _trim(line[:, a:b])) for c, (a, b) in zip(chars, spans)]


def _trim(mask: np.ndarray) -> np.ndarray:
    cols = np.nonzero(mask.any(axis=0))[0]
    return mask[:, cols[0] : cols[-1] + 1].copy() if len(cols) else mask.copy()


def _fits(line: np.ndarray, glyph: Glyph, at: int) -> bool:
    h, w = glyph.mask.shape
    if h != line.shape[0] or at + w > line.shape[1]:
        return False
    box = line[:, at : at + w]
    return bool(box[glyph.mask].all()) and int(box[~glyph.mask].sum()) <= 3  # a touching neighbour's edge


def _peel(line: np.ndarray, runs: list, chars: list[str], known: list[Glyph]) -> list[tuple[int, int]] | None:
    """Column spans of ``chars`` in ``line`` where runs hold several: known glyphs matched exactly
    in place, unknown characters between them (at most one unknown between two known or run ends)."""
    spans: list[tuple[int, int]] = []
    ends = [b for _, b in runs]
    p, k = runs[0][0], 0
    while k < len(chars):
        while p < line.shape[1] and not line[:, p].any():
            p += 1
        run_end = min((e for e in ends if e > p), default=line.shape[1])
        here = [g for g in known if g.char == chars[k] and _fits(line, g, p)]
        if here:
            w = max(g.mask.shape[1] for g in here)
            spans.append((p, p + w))
        else:  # unknown: up to where the next known character fits, or the run's end
            nxt = chars[k + 1] if k + 1 < len(chars) else None
            q = next(
                (q for q in range(p + 1, run_end) if nxt and any(g.char == nxt and _fits(line, g, q) for g in known)),
                run_end,
            )
            spans.append((p, q))
        p = spans[-1][1]
        k += 1
    if any(not line[:, a:b].any() for a, b in spans) or line[:, p:].any():
        return None
    return spans


def column_runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """``[(start, end), ...]``: the runs of columns of ``mask`` that hold ink, left to right."""
    cols = np.concatenate([[False], mask.any(axis=0), [False]])
    edges = np.flatnonzero(cols[1:] != cols[:-1])
    return [(int(a), int(b)) for a, b in zip(edges[::2], edges[1::2])]


def render_glyphs(font: str | os.PathLike | None, size: int, chars: str = "0123456789") -> list[Glyph]:
    """``chars`` drawn with a font, as a game drawing with it shows them: antialiased white on
    black with pygame's font module (SDL_ttf), binarized at half brightness. ``font``: a font
    file, a system font's name (``"DejaVu Sans"``, ``"Arial"``: what the system matches it to),
    or None / ``""`` / ``"default"`` for pygame's own (what ``pygame.font.Font(None, size)`` draws);
    ``size`` as ``pygame.font.Font`` takes it."""
    try:
        os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")
        import pygame
    except ImportError:
        raise missing("glyphs drawn from a font", "pygame") from None
    path = _font_path(pygame, font)
    pygame.font.init()
    f = pygame.font.Font(path, int(size))
    masks = []
    for c in chars:
        surface = f.render(c, True, (255, 255, 255), (0, 0, 0))
        masks.append(pygame.surfarray.array3d(surface).transpose(1, 0, 2).max(axis=2) >= 128)
    line = np.zeros((max(m.shape[0] for m in masks),), bool)
    for m in masks:
        line[: m.shape[0]] |= m.any(axis=1)
    rows = np.nonzero(line)[0]
    if not len(rows):
        raise ScreenEnvError(f"screen env: the font {font!r} at size {size} draws no ink for {chars!r}")
    glyphs = []
    for c, m in zip(chars, masks):
        cols = np.nonzero(m.any(axis=0))[0]
        if len(cols):
            glyphs.append(Glyph(c, m[rows[0] : rows[-1] + 1, cols[0] : cols[-1] + 1].copy()))
    return glyphs


def _font_path(pygame: Any, font: str | os.PathLike | None) -> str | None:
    if font in (None, "", "default"):
        return None
    if Path(font).is_file():
        return str(font)
    found = pygame.font.match_font(str(font)) or _fc_match(str(font))
    if not found:
        raise ScreenEnvError(
            f"screen env: font {font!r} is neither a file (paths are relative to {Path.cwd()}) nor a font this "
            "system knows (fc-list lists them)"
        )
    return found


def _fc_match(name: str) -> str | None:
    """The file fontconfig draws ``name`` with (``fc-match``: what Tk or Xft use for "Arial"), if any."""
    import shutil
    import subprocess

    if not shutil.which("fc-match"):
        return None
    try:
        out = subprocess.run(["fc-match", "-f", "%{file}", name], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 and Path(out.stdout.strip()).is_file() else None
