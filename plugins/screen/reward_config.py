"""``reward`` as a TOML table: the screen readers (:mod:`.readers`) composed without Python.

.. code-block:: toml

    [env.kwargs.reward]
    score = { kind = "number", region = [60, 2, 60, 14], glyphs = "glyphs/", scale = 1.0 }
    lives = { kind = "lives", region = [100, 4, 56, 8], icon = "life.png", penalty = -1.0, done_at = 0 }
    over = { kind = "match", region = [0, 60, 160, 40], reference = "over.png", done = true }
    health = { kind = "bar", region = [4, 150, 100, 4], color = [200, 40, 40], scale = 1.0 }
    frozen = { kind = "still", region = [20, 20, 320, 360], frames = 10, done = true }

Each sub-table is one reader, named as you like (the name is in its messages); ``kind`` says which.
A step's reward is the sum of the readers' rewards, clipped to ``[-clip, clip]`` with ``clip > 0``;
the episode is done when any reader says so:

* ``number``: ``scale`` × the change of the number (a score);
* ``lives``: ``penalty`` for each life below the fewest seen this episode (a blinking icon costs
  once), ``gain`` for each above the last count; done at ``done_at`` lives or fewer;
* ``match``: ``reward`` on the frame the region comes to match; done while it matches (``done = true``);
* ``bar``: ``scale`` × the change of the filled fraction; done at ``done_at`` or less;
* ``still``: ``reward`` on the frame the region has stood still ``frames`` frames in a row; done
  while it stays still (``done = true``, the default: a game that just stops at its end).

An unreadable frame adds nothing and keeps the last value: the change is paid at the next good
reading. Paths are relative to the working directory. :func:`check_table` checks the table's shape
(with the other options, before any window is looked for), :func:`make_reward` loads its files,
and the first frame is checked by each reader (regions inside the window, a number, lives or a bar
read): every mistake is one line.
"""

from __future__ import annotations

import difflib
import math
from typing import Any

import numpy as np

from .readers import BarReader, LivesReader, MatchReader, NumberReader, Reader, Reading, StillReader
from .readers.base import check_color, check_region
from .readers.glyphs import load_glyphs, render_glyphs
from .window import ScreenEnvError

_REQUIRED = object()
_COMMON = {"kind": _REQUIRED, "region": _REQUIRED, "start_check": True}
#: each kind's keys and their defaults (None: optional, no default value)
KEYS: dict[str, dict[str, Any]] = {
    "number": {
        **_COMMON,
        "glyphs": None,
        "font": None,
        "font_size": None,
        "chars": "0123456789",
        "color": None,
        "tolerance": 60.0,
        "threshold": 128.0,
        "coverage": 0.85,
        "max_change": 0.0,
        "scale": 1.0,
    },
    "lives": {
        **_COMMON,
        "icon": _REQUIRED,
        "icon_region": None,
        "tolerance": 30.0,
        "penalty": -1.0,
        "gain": 0.0,
        "done_at": None,
    },
    "match": {**_COMMON, "reference": _REQUIRED, "tolerance": 12.0, "when": "same", "done": False, "reward": 0.0},
    "bar": {**_COMMON, "color": _REQUIRED, "tolerance": 60.0, "vertical": False, "scale": 1.0, "done_at": None},
    "still": {**_COMMON, "frames": 10, "tolerance": 0.0, "done": True, "reward": 0.0},
}
#: the reward table's own keys (beside one table per reader)
TOP = {"clip": 0.0}


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _check_value(where: str, key: str, value: Any, default: Any) -> None:
    def fail(expected: str) -> None:
        raise ScreenEnvError(f"screen env: {where}: {key}={value!r}: {expected}")

    if key == "region":
        check_region(value, where)
    elif key == "color":
        check_color(value, where)
    elif key == "icon_region":
        check_region(value, f"{where} (icon_region)")
    elif key in ("glyphs", "font", "icon", "reference", "chars", "when") and not isinstance(value, str):
        fail("a string" if key != "glyphs" else "a folder of glyph PNGs, an .npz or a .json file")
    elif key == "when" and value not in ("same", "different"):
        fail('"same" (matches the reference) or "different" (the screen changed)')
    elif key == "frames" and not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
        fail("an int >= 1, the frames in a row the region must stand still (at step_s = 0.1, 10 frames are 1 s)")
    elif key == "tolerance" and _is_number(value) and value < 0:
        fail("a number >= 0")
    elif key == "font_size" and not (isinstance(value, int) and not isinstance(value, bool) and value > 0):
        fail("the font's size in pixels, an int > 0")
    elif isinstance(default, bool) and not isinstance(value, bool):
        fail("true or false")
    elif isinstance(default, float) and not _is_number(value):
        fail("a number")
    elif key == "done_at" and not _is_number(value):
        fail("a number: done at this value or less")


def check_table(table: Any) -> dict[str, dict[str, Any]]:
    """The reward table's readers as ``{name: {key: value, defaults filled}}``; its shape checked,
    every mistake one line (no file is read here)."""
    if not isinstance(table, dict) or not table:
        raise ScreenEnvError(
            'screen env: reward: give "module:function" or a table of readers, e.g. [env.kwargs.reward] '
            'score = {kind = "number", region = [x, y, w, h], glyphs = "glyphs/"}'
        )
    readers = {}
    for name, spec in table.items():
        if name in TOP:
            if not _is_number(spec) or spec < 0:
                raise ScreenEnvError(f"screen env: reward.{name}={spec!r}: a number >= 0 (0: not clipped)")
            continue
        where = f"reward.{name}"
        if not isinstance(spec, dict):
            raise ScreenEnvError(
                f"screen env: {where}={spec!r}: each reader is a table with a kind ({', '.join(KEYS)}); "
                f"the reward table's own keys: {', '.join(TOP)}"
            )
        kind = spec.get("kind")
        if kind not in KEYS:
            raise ScreenEnvError(f"screen env: {where}: kind={kind!r}: one of {', '.join(map(repr, KEYS))}")
        readers[name] = _filled(where, kind, spec)
    if not readers:
        raise ScreenEnvError("screen env: reward: the table has no reader (a sub-table with a kind)")
    return readers


def _filled(where: str, kind: str, spec: dict) -> dict[str, Any]:
    keys = KEYS[kind]
    for key in spec:
        if key not in keys:
            close = difflib.get_close_matches(key, list(keys), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ScreenEnvError(
                f"screen env: {where}: unknown key {key!r}{hint}; a {kind} reader takes {', '.join(keys)}"
            )
    missing = [k for k, d in keys.items() if d is _REQUIRED and k not in spec]
    if missing:
        raise ScreenEnvError(f"screen env: {where}: a {kind} reader needs {' and '.join(missing)}")
    for key, value in spec.items():
        if key != "kind":
            _check_value(where, key, value, keys[key])
    if kind == "number" and ("glyphs" in spec) == ("font" in spec or "font_size" in spec):
        raise ScreenEnvError(
            f'screen env: {where}: give glyphs = "folder/" (or an .npz/.json of masks), or font = "file or name" '
            "with font_size = N, not both"
        )
    if kind == "number" and "font" in spec and "font_size" not in spec:
        raise ScreenEnvError(f"screen env: {where}: font needs font_size (pixels, as pygame.font.Font takes it)")
    return {k: spec.get(k, d) for k, d in keys.items()}


def _make_reader(name: str, o: dict[str, Any]) -> Reader:
    kind, region = o["kind"], o["region"]
    if kind == "number":
        where = f"reward.{name}"
        if o["glyphs"] is not None:
            glyphs = load_glyphs(o["glyphs"], where)
        else:
            try:
                glyphs = render_glyphs(o["font"], o["font_size"], o["chars"])
            except ScreenEnvError as e:
                raise ScreenEnvError(str(e).replace("screen env:", f"screen env: {where}:", 1)) from None
        color = tuple(o["color"]) if o["color"] is not None else None
        return NumberReader(
            region,
            glyphs,
            color=color,
            tolerance=o["tolerance"],
            threshold=o["threshold"],
            coverage=o["coverage"],
            max_change=o["max_change"],
            name=name,
        )
    if kind == "lives":
        return LivesReader(region, o["icon"], icon_region=o["icon_region"], tolerance=o["tolerance"], name=name)
    if kind == "match":
        return MatchReader(region, o["reference"], tolerance=o["tolerance"], when=o["when"], name=name)
    if kind == "still":
        return StillReader(region, frames=o["frames"], tolerance=o["tolerance"], name=name)
    return BarReader(region, o["color"], tolerance=o["tolerance"], vertical=o["vertical"], name=name)


class Term:
    """One reader's part of the reward and of the end of an episode."""

    def __init__(self, name: str, options: dict[str, Any]):
        self.name, self.o = name, options
        self.reader = _make_reader(name, options)
        self.lowest: Any = None

    def start(self, frame: np.ndarray) -> None:
        if self.o["start_check"]:
            self.reader.check_start(frame)
        else:
            self.reader.crop(frame)  # the region inside the window, at least

    def reset(self, frame: np.ndarray) -> Reading:
        """A new episode: its first frame is the baseline (no reward for it)."""
        self.reader.forget()
        reading = self.reader.read(frame)
        self.lowest = reading.value if reading.ok else None
        return reading

    def step(self, frame: np.ndarray) -> tuple[float, bool, Reading]:
        o, before = self.o, self.reader.value
        reading = self.reader.read(frame)
        now, reward = reading.value, 0.0
        kind = o["kind"]
        if kind in ("number", "bar") and reading.ok and before is not None:
            reward = o["scale"] * float(now - before)
        elif kind == "lives" and reading.ok:
            if self.lowest is not None and now < self.lowest:
                reward = o["penalty"] * (self.lowest - now)
            elif before is not None and now > before:
                reward = o["gain"] * (now - before)
            self.lowest = now if self.lowest is None else min(self.lowest, now)
        elif kind in ("match", "still") and now and not before:
            reward = o["reward"]
        if kind in ("match", "still"):
            done = bool(o["done"] and now)
        else:
            done = o.get("done_at") is not None and now is not None and now <= o["done_at"]
        return reward, done, reading


class ScreenReward:
    """The reward function ``[env.kwargs.reward]`` describes: frame -> ``(reward, done)``, one per env.

    :attr:`readings` holds each reader's last :class:`~.readers.Reading` by name, :attr:`terms`
    the readers (``terms[name].reader``): what ``mqttrl screen probe`` draws and writes."""

    def __init__(self, table: dict[str, Any]):
        readers = check_table(table)
        self.clip = float(table.get("clip", 0.0))
        self.terms = {name: Term(name, o) for name, o in readers.items()}
        self.readings: dict[str, Reading] = {}
        #: the regions checked (the env's first frame), and what the readers read (its first frame not done)
        self.started = self.checked = False
        self.done = False

    def _check(self, frame: np.ndarray, reads: bool) -> None:
        """The start-up checks: every region inside the frame (the env's first frame), then what each
        reader must read at an episode's start (its first frame that is not done: a reset may see
        the last game's end first). One line each, a :class:`ScreenEnvError`."""
        if not self.started:
            for term in self.terms.values():
                term.reader.crop(frame)
            self.started = True
        if reads and not self.checked:
            for term in self.terms.values():
                term.start(frame)
            self.checked = True

    def reset(self, frame: np.ndarray) -> None:
        """A new episode from ``frame`` (the kit calls it with the first frame not done)."""
        self._check(frame, reads=True)
        self.readings = {name: term.reset(frame) for name, term in self.terms.items()}
        self.done = False

    def __call__(self, frame: np.ndarray) -> tuple[float, bool]:
        self._check(frame, reads=False)
        total, done = 0.0, False
        for name, term in self.terms.items():
            reward, ended, self.readings[name] = term.step(frame)
            total += reward
            done = done or ended
        if not done:
            self._check(frame, reads=True)
        if self.clip:
            total = max(-self.clip, min(self.clip, total))
        self.done = done
        return float(total), done


def make_reward(table: dict[str, Any]) -> ScreenReward:
    """The reward function of a ``reward`` table (its files loaded now: a missing one is one line)."""
    return ScreenReward(table)
