"""A virtual gamepad for analog control: a Box action steers, brakes and throttles a virtual Xbox
360 pad (racing games read axes, not keys).

One seam, :class:`GamepadBackend` (open, one report, neutral, close), with three backends:

* :class:`VGamepadPad`: the ``vgamepad`` package on Windows (the ViGEmBus driver's virtual pads);
* :class:`UinputPad`: ``/dev/uinput`` through python-evdev on Linux, an Xbox-360-like device;
* :class:`RecordingPad`: records the reports; the tests' fake and ``gamepad_backend = "record"``'s dry run.

:class:`Layout` maps each action dimension once to a stick axis (``lx ly rx ry``, clipped to
[-1, 1]), a trigger (``lt rt``, clipped to [0, 1]) or a button (``a b x y lb rb back start ls rs``,
the d-pad ``up down left right``: held while the dimension is above a threshold), with an optional
dead zone: a normalized :class:`Report`. :meth:`Report.device` scales it once to XInput's integer
ranges (sticks -32768..32767 with +y up, triggers 0..255), the same numbers for every backend.

:class:`Gamepad` is what the env holds: a driver that fails mid-run is one log line and one
reconnect; if that fails too, the pad is given up (the virtual device unplugged, which a game
reads as no input) and every later report is refused with one line saying what to install or do,
a :class:`GamepadError` (a :class:`ScreenEnvError`: the worker's restart path, no traceback).
Neither ViGEm nor a real game reading the pad has been tried (docs/windows.md).
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from .window import ScreenEnvError

log = logging.getLogger("mqttrl.screen")

STICKS = ("lx", "ly", "rx", "ry")
TRIGGERS = ("lt", "rt")
BUTTONS = ("a", "b", "x", "y", "lb", "rb", "back", "start", "ls", "rs", "up", "down", "left", "right")
#: every name a layout may give an action dimension
CONTROLS = STICKS + TRIGGERS + BUTTONS
#: XInput's ranges (XINPUT_GAMEPAD: SHORT sticks, BYTE triggers)
STICK_MIN, STICK_MAX, TRIGGER_MAX = -32768, 32767, 255
#: the gamepad backends a config may name (``gamepad_backend``)
BACKENDS = ("auto", "vgamepad", "uinput", "record")

VGAMEPAD_HELP = (
    "install the package (pip install vgamepad) and the ViGEmBus driver "
    "(https://github.com/nefarius/ViGEmBus/releases; vgamepad's installer offers it), then start the worker again"
)
UINPUT_HELP = (
    "load the module (sudo modprobe uinput) and let this user write /dev/uinput (a udev rule such as "
    'KERNEL=="uinput", GROUP="input", MODE="0660" and the user in group input; in a container, pass '
    "--device /dev/uinput)"
)


class GamepadError(ScreenEnvError):
    """The virtual gamepad cannot be opened or driven: one line saying what to install or do."""


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__


@dataclass(frozen=True)
class DeviceReport:
    """A pad state in XInput's integers: sticks ``(lx, ly, rx, ry)`` -32768..32767 (+y up),
    triggers ``(lt, rt)`` 0..255, the buttons held."""

    sticks: tuple[int, int, int, int] = (0, 0, 0, 0)
    triggers: tuple[int, int] = (0, 0)
    buttons: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Report:
    """A pad state, normalized: sticks ``(lx, ly, rx, ry)`` in [-1, 1] (+y up, as XInput),
    triggers ``(lt, rt)`` in [0, 1], the buttons held."""

    sticks: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)
    triggers: tuple[float, float] = (0.0, 0.0)
    buttons: frozenset[str] = frozenset()

    def device(self) -> DeviceReport:
        """The same state in XInput's integer ranges (the one place the scaling is done)."""
        sticks = tuple(round(float(np.clip(v, -1.0, 1.0)) * STICK_MAX) for v in self.sticks)
        triggers = tuple(round(float(np.clip(v, 0.0, 1.0)) * TRIGGER_MAX) for v in self.triggers)
        # tuple() of a generator: mypy does not see its 4 and 2 items
        return DeviceReport(sticks, triggers, frozenset(self.buttons))  # type: ignore[arg-type]


NEUTRAL = Report()


@dataclass
class Layout:
    """Action dimension ``i`` -> control ``names[i]``; ``deadzone``: a stick value nearer 0 than it
    is 0 (the rest rescaled, so the response stays continuous); ``threshold``: a button is held
    while its dimension is above it."""

    names: list[str]
    deadzone: float = 0.0
    threshold: float = 0.5

    def __post_init__(self) -> None:
        for name in self.names:
            if name not in CONTROLS:
                raise GamepadError(f"screen env: gamepad: unknown control {name!r}; controls: {', '.join(CONTROLS)}")
        twice = sorted({n for n in self.names if self.names.count(n) > 1})
        if twice:
            raise GamepadError(f"screen env: gamepad: {', '.join(twice)} named twice: each control takes one dimension")
        if not self.names:
            raise GamepadError('screen env: gamepad: name a control per action dimension, e.g. ["lx", "rt", "lt"]')

    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """The Box action space's low and high: 0..1 for a trigger, -1..1 otherwise."""
        low = np.array([0.0 if n in TRIGGERS else -1.0 for n in self.names], np.float32)
        return low, np.ones(len(self.names), np.float32)

    def report(self, action: Any) -> Report:
        """The normalized report of one action (clipped, the dead zone applied, buttons thresholded)."""
        values = np.asarray(action, np.float64).reshape(-1)
        if values.shape[0] != len(self.names):
            raise GamepadError(
                f"screen env: gamepad: an action of {values.shape[0]} values for {len(self.names)} controls"
            )
        values = np.nan_to_num(values, nan=0.0)
        sticks = dict.fromkeys(STICKS, 0.0)
        triggers = dict.fromkeys(TRIGGERS, 0.0)
        buttons = set()
        for name, v in zip(self.names, values):
            if name in STICKS:
                sticks[name] = self._dead(float(np.clip(v, -1.0, 1.0)))
            elif name in TRIGGERS:
                triggers[name] = float(np.clip(v, 0.0, 1.0))
            elif v > self.threshold:
                buttons.add(name)
        # tuple() of a dict's values: mypy does not see its 4 and 2 items
        return Report(tuple(sticks.values()), tuple(triggers.values()), frozenset(buttons))  # type: ignore[arg-type]

    def _dead(self, v: float) -> float:
        dz = self.deadzone
        if abs(v) <= dz:
            return 0.0
        return float(np.sign(v)) * (abs(v) - dz) / (1.0 - dz)


class GamepadBackend(Protocol):
    """A virtual pad: ``open`` plugs it in (a :class:`GamepadError` saying what to install when it
    cannot), ``send`` sets sticks, triggers and buttons as one report, ``neutral`` sends the
    centred, released state, ``close`` unplugs it."""

    name: str

    def open(self) -> None: ...
    def send(self, report: DeviceReport) -> None: ...
    def neutral(self) -> None: ...
    def close(self) -> None: ...


class PadBase:
    """What the backends share: ``neutral`` is the neutral report sent."""

    name = "pad"

    def send(self, report: DeviceReport) -> None:
        raise NotImplementedError

    def neutral(self) -> None:
        self.send(NEUTRAL.device())


@dataclass
class RecordingPad(PadBase):
    """Records the reports (``reports``, the last 10,000); ``open_error`` / ``fail_at`` make it fail
    as a driver does: at open, or at the ``fail_at``-th report (counted from 1 over its life)."""

    name: str = "record"
    open_error: BaseException | None = None
    fail_at: int = 0
    reports: deque[DeviceReport] = field(default_factory=lambda: deque(maxlen=10_000))
    opened: bool = False
    opens: int = 0
    sent: int = 0

    def open(self) -> None:
        if self.open_error is not None:
            raise self.open_error
        self.opened = True
        self.opens += 1

    def send(self, report: DeviceReport) -> None:
        if not self.opened:
            raise RuntimeError("the recording pad is not open")
        self.sent += 1
        if self.fail_at and self.sent == self.fail_at:
            raise OSError("the device went away")
        self.reports.append(report)

    def close(self) -> None:
        self.opened = False


#: report button -> vgamepad's XUSB_BUTTON member
XUSB_BUTTONS = {
    "a": "XUSB_GAMEPAD_A",
    "b": "XUSB_GAMEPAD_B",
    "x": "XUSB_GAMEPAD_X",
    "y": "XUSB_GAMEPAD_Y",
    "lb": "XUSB_GAMEPAD_LEFT_SHOULDER",
    "rb": "XUSB_GAMEPAD_RIGHT_SHOULDER",
    "back": "XUSB_GAMEPAD_BACK",
    "start": "XUSB_GAMEPAD_START",
    "ls": "XUSB_GAMEPAD_LEFT_THUMB",
    "rs": "XUSB_GAMEPAD_RIGHT_THUMB",
    "up": "XUSB_GAMEPAD_DPAD_UP",
    "down": "XUSB_GAMEPAD_DPAD_DOWN",
    "left": "XUSB_GAMEPAD_DPAD_LEFT",
    "right": "XUSB_GAMEPAD_DPAD_RIGHT",
}


def _fresh_bus() -> None:
    """vgamepad connects to ViGEmBus once, at import (its module-level ``VBUS``), and keeps that
    connection: after a driver failure a reconnect connects anew (a failed import is retried anyway)."""
    inner: Any = sys.modules.get("vgamepad.win.virtual_gamepad")  # vgamepad's module (untyped)
    if inner is not None and callable(getattr(inner, "VBus", None)):
        inner.VBUS = inner.VBus()


class VGamepadPad(PadBase):
    """A ViGEm virtual Xbox 360 pad through ``vgamepad`` (Windows), imported when opened;
    ``module``: a stand-in for the package (tests)."""

    name = "vgamepad"

    def __init__(self, module: Any = None):
        self._module = module
        self.pad: Any = None
        self._opened = False

    def open(self) -> None:
        try:
            vg = self._module if self._module is not None else importlib.import_module("vgamepad")
            if self._opened:
                _fresh_bus()
            self._opened = True
        except ImportError:
            raise GamepadError(f"screen env: gamepad: the vgamepad package is not installed: {VGAMEPAD_HELP}") from None
        except Exception as e:  # its DLL or the bus, at import
            raise GamepadError(
                f"screen env: gamepad: vgamepad cannot start ({_first_line(e)}): {VGAMEPAD_HELP}"
            ) from None
        try:
            self.pad = vg.VX360Gamepad()
        except Exception as e:  # no ViGEmBus, or it refused to connect
            raise GamepadError(
                f"screen env: gamepad: no ViGEm virtual pad ({_first_line(e)}): {VGAMEPAD_HELP}"
            ) from None
        self._buttons = {name: getattr(vg.XUSB_BUTTON, member) for name, member in XUSB_BUTTONS.items()}

    def send(self, report: DeviceReport) -> None:
        pad = self.pad
        lx, ly, rx, ry = report.sticks
        pad.left_joystick(x_value=lx, y_value=ly)
        pad.right_joystick(x_value=rx, y_value=ry)
        pad.left_trigger(value=report.triggers[0])
        pad.right_trigger(value=report.triggers[1])
        for name, button in self._buttons.items():
            (pad.press_button if name in report.buttons else pad.release_button)(button=button)
        pad.update()

    def close(self) -> None:
        self.pad = None  # vgamepad unplugs the pad when the object goes


#: report button -> evdev key code name (the xpad driver's Xbox 360 buttons; the d-pad is a hat)
EVDEV_BUTTONS = {
    "a": "BTN_A",
    "b": "BTN_B",
    "x": "BTN_X",
    "y": "BTN_Y",
    "lb": "BTN_TL",
    "rb": "BTN_TR",
    "back": "BTN_SELECT",
    "start": "BTN_START",
    "ls": "BTN_THUMBL",
    "rs": "BTN_THUMBR",
}
EVDEV_STICKS = ("ABS_X", "ABS_Y", "ABS_RX", "ABS_RY")
EVDEV_TRIGGERS = ("ABS_Z", "ABS_RZ")


def uinput_capabilities(ecodes: Any, absinfo: Any) -> dict[int, list]:
    """An Xbox-360-like device's capabilities (as the kernel's xpad driver shows a real one)."""
    axes = [(getattr(ecodes, a), absinfo(0, STICK_MIN, STICK_MAX, 16, 128, 0)) for a in EVDEV_STICKS]
    axes += [(getattr(ecodes, a), absinfo(0, 0, TRIGGER_MAX, 0, 0, 0)) for a in EVDEV_TRIGGERS]
    axes += [(getattr(ecodes, a), absinfo(0, -1, 1, 0, 0, 0)) for a in ("ABS_HAT0X", "ABS_HAT0Y")]
    return {ecodes.EV_KEY: [getattr(ecodes, b) for b in EVDEV_BUTTONS.values()], ecodes.EV_ABS: axes}


def uinput_events(report: DeviceReport) -> list[tuple[str, str, int]]:
    """The ``(type, code, value)`` events (evdev names) of one report: Linux's y axes grow downwards."""
    lx, ly, rx, ry = report.sticks
    b = report.buttons
    hat_x = ("right" in b) - ("left" in b)
    hat_y = ("down" in b) - ("up" in b)
    events = [("EV_ABS", a, v) for a, v in zip(EVDEV_STICKS, (lx, -ly, rx, -ry))]
    events += [("EV_ABS", a, v) for a, v in zip(EVDEV_TRIGGERS, report.triggers)]
    events += [("EV_ABS", "ABS_HAT0X", hat_x), ("EV_ABS", "ABS_HAT0Y", hat_y)]
    events += [("EV_KEY", code, int(name in b)) for name, code in EVDEV_BUTTONS.items()]
    return events


class UinputPad(PadBase):
    """A uinput device through python-evdev (Linux), imported when opened; ``module``: a stand-in
    for ``evdev`` (tests), ``path``: the uinput device."""

    name = "uinput"

    def __init__(self, module: Any = None, path: str = "/dev/uinput"):
        self._module = module
        self.path = path
        self.device: Any = None

    def open(self) -> None:
        if not os.path.exists(self.path):
            raise GamepadError(f"screen env: gamepad: {self.path} does not exist: {UINPUT_HELP}")
        if not os.access(self.path, os.W_OK):
            raise GamepadError(f"screen env: gamepad: no permission to write {self.path}: {UINPUT_HELP}")
        try:
            evdev = self._module if self._module is not None else importlib.import_module("evdev")
        except ImportError:
            raise GamepadError(
                "screen env: gamepad: python-evdev is not installed: pip install evdev (it builds against the kernel "
                "headers: apt install linux-libc-dev gcc), or pip install 'mqttrl[gamepad]'"
            ) from None
        self._ecodes = evdev.ecodes
        caps = uinput_capabilities(evdev.ecodes, evdev.AbsInfo)
        try:
            self.device = evdev.UInput(
                caps,
                name="mqttrl virtual Xbox 360 pad",
                vendor=0x045E,
                product=0x028E,
                version=0x110,
                devnode=self.path,
            )
        except Exception as e:  # UInputError, PermissionError
            raise GamepadError(
                f"screen env: gamepad: cannot make a uinput device ({_first_line(e)}): {UINPUT_HELP}"
            ) from None

    def send(self, report: DeviceReport) -> None:
        ec = self._ecodes
        for kind, code, value in uinput_events(report):
            self.device.write(getattr(ec, kind), getattr(ec, code), value)
        self.device.syn()

    def close(self) -> None:
        device, self.device = self.device, None
        if device is not None:
            device.close()


def make_backend(name: str, platform: str = sys.platform) -> GamepadBackend:
    """The backend ``name`` (:data:`BACKENDS`; ``auto``: vgamepad on Windows, uinput elsewhere)."""
    if name == "auto":
        name = "vgamepad" if platform == "win32" else "uinput"
    if name == "record":
        return RecordingPad()
    if name == "vgamepad":
        return VGamepadPad()
    if name == "uinput":
        if platform == "win32":
            raise GamepadError('screen env: gamepad_backend = "uinput" is Linux\'s; on Windows use "vgamepad"')
        return UinputPad()
    raise GamepadError(f"screen env: gamepad_backend={name!r}: one of {', '.join(BACKENDS)}")


class Gamepad:
    """A backend played through a :class:`Layout`: opened at once; :meth:`act` sends an action's
    report, :meth:`neutral` the neutral one. A failed report is one warning and one reconnect; if
    that fails the pad is given up and every report after is refused (:meth:`reopen` tries again,
    at a reset). :attr:`last`: the state the game sees (neutral once given up: the device is gone)."""

    def __init__(self, backend: GamepadBackend, layout: Layout):
        self.backend = backend
        self.layout = layout
        self.last = NEUTRAL
        self.broken = ""
        self._open()
        self.neutral()

    def _open(self) -> None:
        try:
            self.backend.open()
        except GamepadError:
            raise
        except Exception as e:
            raise GamepadError(f"screen env: gamepad ({self.backend.name}) cannot start: {_first_line(e)}") from None

    def act(self, action: Any) -> None:
        self.send(self.layout.report(action))

    def neutral(self) -> None:
        """Sticks centred, triggers and buttons released (a stopped worker leaves no car steering)."""
        self.send(NEUTRAL)

    def send(self, report: Report) -> None:
        if self.broken:
            raise GamepadError(f"screen env: gamepad ({self.backend.name}) given up, no report sent: {self.broken}")
        try:
            self.backend.send(report.device())
        except Exception as e:
            self._reconnect(e)
            self._send_again(report)
        self.last = report

    def _reconnect(self, error: Exception) -> None:
        log.warning("screen env: gamepad (%s) failed (%s); reconnecting once", self.backend.name, _first_line(error))
        self._close_quietly()
        try:
            self._open()
        except GamepadError as e:
            self._give_up(str(e))
            raise GamepadError(str(e)) from None

    def _send_again(self, report: Report) -> None:
        try:
            self.backend.send(report.device())
        except Exception as e:
            self._close_quietly()
            msg = f"screen env: gamepad ({self.backend.name}) failed again after reconnecting ({_first_line(e)})"
            self._give_up(msg)
            raise GamepadError(msg) from None

    def _give_up(self, why: str) -> None:
        self.broken = why.removeprefix("screen env: ")
        self.last = NEUTRAL

    def reopen(self) -> None:
        """A given-up pad opened again (a reset); a :class:`GamepadError` when it still cannot."""
        if not self.broken:
            return
        self._open()
        self.broken = ""
        self.neutral()

    def _close_quietly(self) -> None:
        try:
            self.backend.close()
        except Exception:  # a driver already gone
            pass

    def close(self) -> None:
        """Neutral, then unplugged; never raises (a failure is one warning)."""
        if not self.broken:
            try:
                self.backend.send(NEUTRAL.device())
                self.last = NEUTRAL
            except Exception as e:
                log.warning(
                    "screen env: gamepad (%s): no neutral report at close (%s)", self.backend.name, _first_line(e)
                )
        self._close_quietly()
        self._give_up("the env is closed")
