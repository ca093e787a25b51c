"""The screen kit's options (the ``[env.kwargs]`` of a config), checked at once: a wrong one is
one line naming it and what is allowed, before any window is looked for."""

from __future__ import annotations

import difflib
import importlib
import inspect
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from .gamepad import BACKENDS as PAD_BACKENDS
from .gamepad import CONTROLS
from .takeover import check_takeover
from .window import ScreenEnvError


@dataclass
class ScreenOptions:
    """What ``[env.kwargs]`` may say for ``id = "screen"`` (docs/real-time.md has the TOML)."""

    #: action index -> the keys held during that step (X keysym names), e.g. ``[[], ["Left"], ["Right"]]``
    keys: list = field(default_factory=list)
    #: ``"module:function"``: frame -> (reward, done); a class is instantiated once per env. Or a
    #: table of screen readers, ``[env.kwargs.reward]`` (:mod:`.reward_config`: no Python needed)
    reward: Any = ""
    #: the window's title (a case-insensitive part of it unless ``window_exact``)
    window: str = ""
    window_exact: bool = False
    #: ``"launched"``: when the worker launched the game (``[env] launch``), only that game's windows
    #: (its process's or its process group's) are looked for, so that copies of one game with the
    #: same title on one display are told apart; ``"any"``: any process's window with the title
    window_process: str = "launched"
    #: seconds making the env (or a reset) waits for a window that is not there yet (the game is
    #: starting, or being started again after a crash); 0: a missing window fails at once
    window_wait_s: float = 30.0
    #: or a fixed screen region ``[left, top, width, height]`` instead of a window
    region: list = field(default_factory=list)
    #: X display (``":99"``); default ``$DISPLAY``. Or a list of displays, one copy of the game on
    #: each: an env plays one no other env plays (the worker's, each greedy evaluation episode's).
    #: Ignored on Windows
    display: Any = ""
    #: observation size: one int (square) or ``[width, height]``
    size: Any = 84
    gray: bool = True
    frame_stack: int = 4
    #: time from one frame to the next (0: capture at once, when another clock paces the steps)
    step_s: float = 0.05
    #: the run's ``[env] control_hz``: a step that the worker's clock does not pace (``mqttrl
    #: enjoy``, an evaluator) lasts ``1 / control_hz`` s, as in training; instead of ``step_s``
    control_hz: float = 0.0
    #: ``"hold"``: an action's keys are held down for the step; ``"tap"``: pressed at the step's
    #: start and released ``tap_s`` later (a key-down event every step, for games that act on key events)
    key_mode: str = "hold"
    #: seconds a tapped key stays down (at most the step; under the worker's clock, until the
    #: period's end): a game that polls the keys once a frame sees only a key down at its poll. 0.04:
    #: one frame of a 25 fps game, two of a 50 fps one, and still up for part of a 0.05 s step. 0:
    #: down and up at once (key-down events only)
    tap_s: float = 0.04
    #: seconds of pixel-equal frames after which a step raises (a game that hangs); the steps of
    #: the still stretch are not trained on. 10: longer than a playing game's still moments (a
    #: loading screen, a pause between rounds), short enough that a hung game costs seconds, not a
    #: run; a game that shows one picture longer (a pause menu waiting for a key) needs 0: not checked
    frozen_s: float = 10.0
    #: keys tapped at reset (a game's "restart"); the reset then waits until the game is not over
    reset_keys: list = field(default_factory=list)
    reset_timeout_s: float = 10.0
    #: steps before an episode is cut (truncated); 0: only the reward function ends episodes
    max_episode_steps: int = 0
    #: ``auto`` (XTest on Linux, ``scancode`` on Windows, pynput on macOS), ``xtest``, ``scancode`` (Windows'
    #: SendInput with hardware scan codes), ``vk`` (SendInput with virtual-key codes) or ``pynput``
    keys_backend: str = "auto"
    #: give the window the keyboard focus when the env starts (XTest)
    focus: bool = True
    #: a virtual gamepad instead of keys (a Box action, one control per dimension): stick axes
    #: ``lx ly rx ry`` ([-1, 1], +y up), triggers ``lt rt`` ([0, 1]), buttons ``a b x y lb rb back
    #: start ls rs up down left right`` (held above ``gamepad_threshold``); e.g. ``["lx", "rt", "lt"]``
    gamepad: list = field(default_factory=list)
    #: ``auto`` (``vgamepad`` on Windows: ViGEmBus; ``uinput`` on Linux: python-evdev) or ``record`` (a dry run)
    gamepad_backend: str = "auto"
    #: stick values nearer 0 than this are 0 (the rest rescaled to stay continuous)
    gamepad_deadzone: float = 0.0
    #: a button dimension holds its button while above this
    gamepad_threshold: float = 0.5
    #: a key no action uses (e.g. ``"F12"``): a person pressing it takes the game over from the
    #: policy and plays with the actions' keys (each step reports the person's action as
    #: ``info["demo_action"]``); pressed again, or no action key for ``takeover_idle_s``, control
    #: goes back to the policy (:mod:`.takeover`; Linux/X11). "": no takeover
    takeover_key: str = ""
    takeover_idle_s: float = 5.0
    #: the person plays from the first step (``mqttrl play``: a human baseline); needs takeover_key
    takeover_start: bool = False

    @property
    def displays(self) -> list[str | None]:
        """The displays to look for the window on (None: ``$DISPLAY``)."""
        return [d or None for d in self.display] if isinstance(self.display, list) else [self.display or None]

    @property
    def width(self) -> int:
        return self.size if isinstance(self.size, int) else self.size[0]

    @property
    def height(self) -> int:
        return self.size if isinstance(self.size, int) else self.size[1]


def _fail(key: str, value: Any, expected: str) -> None:
    raise ScreenEnvError(f"screen env: {key}={value!r}: {expected}")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    """A non-negative int or float (not a bool: TOML's ``true`` is no number of seconds)."""
    return isinstance(v, int | float) and not isinstance(v, bool) and v >= 0


def parse_options(kwargs: dict[str, Any]) -> ScreenOptions:
    """``kwargs`` as :class:`ScreenOptions`; an unknown key or a bad value is a :class:`ScreenEnvError`."""
    allowed = [f.name for f in fields(ScreenOptions)]
    for key in kwargs:
        if key not in allowed:
            close = difflib.get_close_matches(key, allowed, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ScreenEnvError(f"screen env: unknown option {key!r}{hint}; options: {', '.join(allowed)}")
    o = ScreenOptions(**kwargs)
    _check_actions(o)
    if isinstance(o.reward, dict):
        from .reward_config import check_table

        check_table(o.reward)
    elif not isinstance(o.reward, str) or o.reward.count(":") != 1:
        _fail(
            "reward",
            o.reward,
            'give "module:function", a function of the frame returning (reward, done), or a table of readers '
            "([env.kwargs.reward], docs/real-games.md)",
        )
    if bool(o.window) == bool(o.region):
        raise ScreenEnvError('screen env: give either window = "<title>" or region = [left, top, width, height]')
    if o.region and not (len(o.region) == 4 and all(_is_int(v) for v in o.region) and min(o.region[2:]) > 0):
        _fail("region", o.region, "[left, top, width, height] in pixels, width and height > 0")
    size_ok = (_is_int(o.size) and o.size > 0) or (
        isinstance(o.size, list) and len(o.size) == 2 and all(_is_int(v) and v > 0 for v in o.size)
    )
    if not size_ok:
        _fail("size", o.size, "a positive int or [width, height]")
    if not _is_int(o.frame_stack) or o.frame_stack < 1:
        _fail("frame_stack", o.frame_stack, "an int >= 1")
    _check_timing(o, kwargs)
    if not _is_int(o.max_episode_steps) or o.max_episode_steps < 0:
        _fail("max_episode_steps", o.max_episode_steps, "an int >= 0")
    for key in ("window_exact", "gray", "focus"):
        if not isinstance(getattr(o, key), bool):
            _fail(key, getattr(o, key), "true or false")
    if not isinstance(o.window, str):
        _fail("window", o.window, "a string")
    if o.window_process not in ("launched", "any"):
        _fail("window_process", o.window_process, '"launched" (the launched game\'s windows only) or "any"')
    many = isinstance(o.display, list)
    if not (isinstance(o.display, str) or (many and o.display and all(isinstance(d, str) and d for d in o.display))):
        _fail("display", o.display, 'an X display such as ":99", or a list of them, one copy of the game on each')
    if many and not o.window:
        _fail("display", o.display, 'a list of displays needs window = "<title>" (not a region)')
    if o.keys_backend not in ("auto", "xtest", "scancode", "vk", "pynput"):
        _fail("keys_backend", o.keys_backend, '"auto", "xtest", "scancode", "vk" or "pynput"')
    if not all(isinstance(n, str) for n in o.reset_keys):
        _fail("reset_keys", o.reset_keys, 'a list of key names, e.g. ["Return"]')
    check_takeover(o)
    return o


def _check_timing(o: ScreenOptions, kwargs: dict[str, Any]) -> None:
    """The seconds and rates, and how keys are pressed."""
    for key in ("step_s", "reset_timeout_s", "window_wait_s", "frozen_s", "tap_s"):
        if not _is_number(getattr(o, key)):
            _fail(key, getattr(o, key), "seconds, >= 0")
    if not _is_number(o.control_hz):
        _fail("control_hz", o.control_hz, "steps a second, > 0 (0: step_s paces the steps)")
    if o.control_hz and "step_s" in kwargs:
        _fail("step_s", o.step_s, f"give step_s or control_hz (here {o.control_hz:g}), not both")
    if o.key_mode not in ("hold", "tap"):
        _fail("key_mode", o.key_mode, '"hold" (keys held for the step) or "tap" (pressed, released tap_s later)')
    if "tap_s" in kwargs and o.key_mode != "tap":
        _fail("tap_s", o.tap_s, 'how long key_mode = "tap" holds a tapped key; here key_mode is "hold"')


def _check_actions(o: ScreenOptions) -> None:
    """``keys`` (a Discrete action) or ``gamepad`` (a Box action), and the gamepad's options."""
    if o.gamepad and o.keys:
        _fail("gamepad", o.gamepad, "give keys (a Discrete action) or gamepad (a Box action), not both")
    if not o.gamepad and (
        not o.keys or not all(isinstance(k, list) and all(isinstance(n, str) for n in k) for k in o.keys)
    ):
        _fail("keys", o.keys, 'a list of key lists, one per action, e.g. [[], ["Left"], ["Right"]]')
    if not isinstance(o.gamepad, list) or not all(isinstance(n, str) and n in CONTROLS for n in o.gamepad):
        _fail("gamepad", o.gamepad, f"a list of controls, one per action dimension, of {', '.join(CONTROLS)}")
    if len(set(o.gamepad)) != len(o.gamepad):
        _fail("gamepad", o.gamepad, "each control once (one action dimension each)")
    if o.gamepad_backend not in PAD_BACKENDS:
        _fail("gamepad_backend", o.gamepad_backend, " or ".join(f'"{b}"' for b in PAD_BACKENDS))
    if not _is_number(o.gamepad_deadzone) or o.gamepad_deadzone >= 1:
        _fail("gamepad_deadzone", o.gamepad_deadzone, "a stick's dead zone, >= 0 and < 1")
    t = o.gamepad_threshold
    if not (isinstance(t, int | float) and not isinstance(t, bool) and -1 <= t <= 1):
        _fail("gamepad_threshold", t, "a button dimension's threshold, in [-1, 1]")


def load_reward(spec: str | dict) -> Callable:
    """The user's reward function from ``"module:function"`` (a class: one new instance). The module
    is imported as Python would, then from the working directory (where a user's ``mygame.py`` sits).
    A table of readers is made into their reward function (:func:`.reward_config.make_reward`)."""
    if isinstance(spec, dict):
        from .reward_config import make_reward

        return make_reward(spec)
    module_name, _, attr = spec.partition(":")
    try:
        module = _import(module_name)
    except Exception as e:
        raise ScreenEnvError(f"screen env: reward {spec!r}: cannot import module {module_name!r} ({e})") from None
    obj = getattr(module, attr, None)
    if obj is None:
        names = [n for n in vars(module) if not n.startswith("_") and callable(getattr(module, n))]
        close = difflib.get_close_matches(attr, names, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ScreenEnvError(f"screen env: reward {spec!r}: module {module_name!r} has no {attr!r}{hint}")
    if inspect.isclass(obj):
        obj = obj()
    if not callable(obj):
        raise ScreenEnvError(f"screen env: reward {spec!r} is not callable: give a function of the frame")
    return obj


def _import(name: str):
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        cwd = os.getcwd()
        if e.name != name.split(".")[0] or cwd in sys.path:
            raise
        sys.path.append(cwd)  # console scripts do not put the working directory on sys.path
        return importlib.import_module(name)


def check_result(spec: str | dict, result: Any) -> tuple[float, bool]:
    """What the reward function returned, as ``(reward, done)``; anything else is one clear line."""
    if isinstance(spec, dict):  # the readers' own function: it returns a pair of float and bool
        return result
    ok = isinstance(result, tuple) and len(result) == 2
    try:
        reward, done = (float(result[0]), result[1]) if ok else (0.0, None)
    except (TypeError, ValueError):
        ok = False
    if not ok or not isinstance(done, bool | int | np.bool_):
        raise ScreenEnvError(f"screen env: reward {spec!r} returned {result!r}: it must return (reward, done)")
    return reward, bool(done)
