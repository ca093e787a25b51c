"""The screen kit's virtual gamepad (issue 36): the same contract run against every backend that
can run here, each read back where the game would read it.

* ``record``: :class:`RecordingPad`, always;
* ``vgamepad-fake``: :class:`VGamepadPad` over a stand-in ``vgamepad`` module (the package's
  calls: ``VX360Gamepad``, ``left_joystick`` ..., ``update``), its ViGEm side not run;
* ``uinput-fake``: :class:`UinputPad` with python-evdev's real event codes and ``AbsInfo`` and a
  stand-in ``UInput`` (the events written, read back as the kernel would keep them);
* ``uinput``: the real thing where ``/dev/uinput`` is writable (skipped otherwise: this machine's
  kernel has no uinput, a node made with mknod opens with ENODEV);
* ``vgamepad``: the real package on Windows (skipped elsewhere).

Plus: a missing or failing driver is one line naming what to install, never a traceback; the
options; the screen env's Box action through a recording pad, neutral on reset, end, pause, close.
"""

from __future__ import annotations

import json
import os
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import pytest

from mqttrl.envs.realtime import RealTimeEnv
from mqttrl.envs.realtime_clock import ControlClock
from mqttrl_plugins.screen import env as screen_env_module
from mqttrl_plugins.screen import gamepad as gp
from mqttrl_plugins.screen.env import ScreenEnv
from mqttrl_plugins.screen.gamepad import (
    NEUTRAL,
    DeviceReport,
    Gamepad,
    GamepadError,
    Layout,
    RecordingPad,
    Report,
    UinputPad,
    VGamepadPad,
    make_backend,
)
from mqttrl_plugins.screen.keys import Keyboard
from mqttrl_plugins.screen.options import parse_options
from mqttrl_plugins.screen.window import ScreenEnvError


# ---- stand-ins for the drivers' Python packages ------------------------------------------------
class FakeVX360:
    """vgamepad's VX360Gamepad: the state set by its calls, a snapshot at each ``update()``."""

    fail_next = False

    def __init__(self, module: FakeVgamepad):
        self.module = module
        self.sticks = [0, 0, 0, 0]
        self.triggers = [0, 0]
        self.mask = 0

    def left_joystick(self, x_value: int, y_value: int) -> None:
        assert isinstance(x_value, int) and -32768 <= x_value <= 32767
        self.sticks[0:2] = [x_value, y_value]

    def right_joystick(self, x_value: int, y_value: int) -> None:
        self.sticks[2:4] = [x_value, y_value]

    def left_trigger(self, value: int) -> None:
        assert isinstance(value, int) and 0 <= value <= 255
        self.triggers[0] = value

    def right_trigger(self, value: int) -> None:
        self.triggers[1] = value

    def press_button(self, button: int) -> None:
        self.mask |= button

    def release_button(self, button: int) -> None:
        self.mask &= ~button

    def update(self) -> None:
        if self.module.fail_next:
            self.module.fail_next = False
            raise Exception("VIGEM_ERROR_BUS_NOT_FOUND")
        bits = {getattr(self.module.XUSB_BUTTON, m): n for n, m in gp.XUSB_BUTTONS.items()}
        buttons = frozenset(n for bit, n in bits.items() if self.mask & bit)
        self.module.seen = DeviceReport(tuple(self.sticks), tuple(self.triggers), buttons)


class FakeVgamepad(types.SimpleNamespace):
    """The ``vgamepad`` module: XUSB_BUTTON's bits (ViGEm's Common.h), VX360Gamepad."""

    def __init__(self) -> None:
        names = [
            "DPAD_UP", "DPAD_DOWN", "DPAD_LEFT", "DPAD_RIGHT", "START", "BACK", "LEFT_THUMB", "RIGHT_THUMB",
            "LEFT_SHOULDER", "RIGHT_SHOULDER", "GUIDE", "_", "A", "B", "X", "Y",
        ]  # fmt: skip
        bits = {f"XUSB_GAMEPAD_{n}": 1 << i for i, n in enumerate(names) if n != "_"}
        super().__init__(XUSB_BUTTON=types.SimpleNamespace(**bits), seen=None, fail_next=False, bus_error=None)

    def VX360Gamepad(self) -> FakeVX360:
        if self.bus_error is not None:
            raise self.bus_error
        return FakeVX360(self)


def _evdev_module(uinput_class: type) -> types.SimpleNamespace:
    evdev = pytest.importorskip("evdev", reason="python-evdev is not installed (pip install evdev)")
    return types.SimpleNamespace(ecodes=evdev.ecodes, AbsInfo=evdev.AbsInfo, UInput=uinput_class)


def state_from_events(values: dict[tuple[str, str], int]) -> DeviceReport:
    """What a game reads from a uinput pad (evdev names -> value) as a report: Linux's y grows down."""
    a = {code: v for (kind, code), v in values.items() if kind == "EV_ABS"}
    keys = {code for (kind, code), v in values.items() if kind == "EV_KEY" and v}
    buttons = {n for n, code in gp.EVDEV_BUTTONS.items() if code in keys}
    hat = {
        "left": a["ABS_HAT0X"] < 0,
        "right": a["ABS_HAT0X"] > 0,
        "up": a["ABS_HAT0Y"] < 0,
        "down": a["ABS_HAT0Y"] > 0,
    }
    buttons |= {n for n, on in hat.items() if on}
    sticks = (a["ABS_X"], -a["ABS_Y"], a["ABS_RX"], -a["ABS_RY"])
    return DeviceReport(sticks, (a["ABS_Z"], a["ABS_RZ"]), frozenset(buttons))


def fake_uinput_class(box: dict) -> type:
    class FakeUInput:
        def __init__(self, events, **kwargs):
            if box.get("open_error") is not None:
                raise box["open_error"]
            from evdev import ecodes

            self.names = {ecodes.EV_ABS: "EV_ABS", ecodes.EV_KEY: "EV_KEY"}
            self.codes = {
                v: k for k, v in vars(ecodes).items() if k.startswith(("ABS_", "BTN_")) and isinstance(v, int)
            }
            for n in ("BTN_A", "BTN_B", "BTN_X", "BTN_Y"):  # the names python-evdev's table may list first
                self.codes[getattr(ecodes, n)] = n
            self.caps, self.kwargs, self.values = events, kwargs, {}
            box["device"] = self

        def write(self, kind: int, code: int, value: int) -> None:
            self.values[(self.names[kind], self.codes[code])] = value

        def syn(self) -> None:
            if box.pop("fail_next", False):
                raise OSError(19, "No such device")
            box["seen"] = state_from_events(self.values)

        def close(self) -> None:
            box["closed"] = True

    return FakeUInput


# ---- the backends, each with a way to read what the game sees and to break it -----------------
@dataclass
class Rig:
    backend: gp.GamepadBackend
    seen: Callable[[], DeviceReport | None]
    fail_once: Callable[[], None]  # the next report fails (the driver drops out)
    fail_for_good: Callable[[], None]  # and opening it again fails too


def rig_record() -> Rig:
    pad = RecordingPad()

    def fail_for_good() -> None:
        pad.fail_at, pad.open_error = pad.sent + 1, OSError("ViGEmBus not found")

    return Rig(
        pad,
        lambda: pad.reports[-1] if pad.reports else None,
        lambda: setattr(pad, "fail_at", pad.sent + 1),
        fail_for_good,
    )


def rig_vgamepad_fake() -> Rig:
    vg = FakeVgamepad()

    def fail_for_good() -> None:
        vg.fail_next, vg.bus_error = True, Exception("VIGEM_ERROR_BUS_NOT_FOUND")

    return Rig(VGamepadPad(module=vg), lambda: vg.seen, lambda: setattr(vg, "fail_next", True), fail_for_good)


def rig_uinput_fake(tmp_path) -> Rig:
    box: dict = {}
    node = tmp_path / "uinput"
    node.write_bytes(b"")  # UinputPad checks that the node exists and is writable
    pad = UinputPad(module=_evdev_module(fake_uinput_class(box)), path=str(node))

    def fail_for_good() -> None:
        box["fail_next"], box["open_error"] = True, OSError(19, "No such device")

    return Rig(pad, lambda: box.get("seen"), lambda: box.__setitem__("fail_next", True), fail_for_good)


def rig_uinput_real() -> Rig:
    if not os.access("/dev/uinput", os.W_OK):
        pytest.skip(
            "no writable /dev/uinput here (this machine's kernel has no uinput): the real uinput side is untested"
        )
    evdev = pytest.importorskip("evdev", reason="python-evdev is not installed")
    pad = UinputPad()

    def seen() -> DeviceReport:
        dev = pad.device.device  # the InputDevice a game would open
        ec = evdev.ecodes
        values = {}
        for code, info in dev.capabilities(absinfo=True)[ec.EV_ABS]:
            names = ec.ABS[code]
            values[("EV_ABS", names if isinstance(names, str) else names[0])] = info.value
        active = set(dev.active_keys())
        values |= {("EV_KEY", name): int(getattr(ec, name) in active) for name in gp.EVDEV_BUTTONS.values()}
        return state_from_events(values)

    def cannot() -> None:
        pytest.skip("a real driver cannot be made to fail on demand")

    return Rig(pad, seen, cannot, cannot)


def rig_vgamepad_real() -> Rig:
    if sys.platform != "win32":
        pytest.skip("vgamepad drives ViGEmBus, a Windows driver: not run here (no real ViGEm pad was tried)")
    return Rig(VGamepadPad(), lambda: None, lambda: pytest.skip("real driver"), lambda: pytest.skip("real driver"))


RIGS = ["record", "vgamepad-fake", "uinput-fake", "uinput", "vgamepad"]


@pytest.fixture(params=RIGS)
def rig(request, tmp_path) -> Rig:
    make = {
        "record": rig_record,
        "vgamepad-fake": rig_vgamepad_fake,
        "uinput-fake": lambda: rig_uinput_fake(tmp_path),
        "uinput": rig_uinput_real,
        "vgamepad": rig_vgamepad_real,
    }[request.param]
    return make()


RACING = Layout(["lx", "rt", "lt", "a", "up"], deadzone=0.1, threshold=0.5)


# ---- the contract ------------------------------------------------------------------------------
def test_opening_reports_neutral(rig):
    pad = Gamepad(rig.backend, RACING)
    assert rig.seen() == NEUTRAL.device() == DeviceReport((0, 0, 0, 0), (0, 0), frozenset())
    pad.close()


def test_an_action_reaches_the_device_scaled_clipped_and_thresholded(rig):
    pad = Gamepad(rig.backend, RACING)
    pad.act([1.0, 1.0, 0.0, 0.9, -1.0])  # full right, full throttle, A held, d-pad up not
    assert rig.seen() == DeviceReport((32767, 0, 0, 0), (0, 255), frozenset({"a"}))
    pad.act([-7.0, 0.5, 3.0, 0.2, 0.6])  # clipped: full left, full brake; half throttle
    assert rig.seen() == DeviceReport((-32767, 0, 0, 0), (255, 128), frozenset({"up"}))
    pad.act([0.05, -0.5, 0.0, 0.5, 0.5])  # in the dead zone; a trigger below 0 is released; at the threshold: not held
    assert rig.seen() == NEUTRAL.device()
    pad.act([0.55, 0.0, 0.0, -1.0, -1.0])  # past the dead zone: rescaled, half way
    assert rig.seen().sticks == (16384, 0, 0, 0)
    pad.close()


def test_every_control_reaches_the_device(rig):
    """Every control, both ways (the d-pad one direction a axis at a time: uinput's is a hat, as a real pad's)."""
    layout = Layout(list(gp.CONTROLS))
    pad = Gamepad(rig.backend, layout)
    action = np.ones(len(gp.CONTROLS))
    for name in ("ly", "ry", "down", "right"):  # sticks down, d-pad up and left
        action[gp.CONTROLS.index(name)] = -1.0
    pad.act(action)
    held = frozenset(gp.BUTTONS) - {"down", "right"}
    assert rig.seen() == DeviceReport((32767, -32767, 32767, -32767), (255, 255), held)
    pad.act(-action)
    assert rig.seen() == DeviceReport((-32767, 32767, -32767, 32767), (0, 0), frozenset({"down", "right"}))
    pad.close()


def test_neutral_and_close_leave_the_pad_centred_and_released(rig):
    pad = Gamepad(rig.backend, RACING)
    pad.act([1.0, 1.0, 1.0, 1.0, 1.0])
    pad.neutral()
    assert rig.seen() == NEUTRAL.device()
    pad.act([-1.0, 1.0, 0.0, 1.0, 0.0])
    pad.close()
    assert rig.seen() == NEUTRAL.device() and pad.last == NEUTRAL
    pad.close()  # twice is fine
    with pytest.raises(GamepadError, match="closed"):
        pad.act([0.0] * 5)


def test_a_driver_that_drops_out_once_is_reconnected(rig, caplog):
    pad = Gamepad(rig.backend, RACING)
    rig.fail_once()
    pad.act([1.0, 0.0, 0.0, 0.0, 0.0])
    assert rig.seen() == DeviceReport((32767, 0, 0, 0), (0, 0), frozenset())
    assert [r.getMessage() for r in caplog.records if "reconnecting" in r.getMessage()], caplog.text
    assert not pad.broken
    pad.close()


def test_a_driver_gone_for_good_is_one_line_then_refused_then_reopened_at_reset(rig, capsys):
    pad = Gamepad(rig.backend, RACING)
    pad.act([1.0, 1.0, 0.0, 0.0, 0.0])
    rig.fail_for_good()
    with pytest.raises(GamepadError) as e:
        pad.act([0.5, 0.0, 0.0, 0.0, 0.0])
    _one_line(e.value)
    assert pad.broken and pad.last == NEUTRAL  # the device is unplugged: the game reads no input
    with pytest.raises(GamepadError, match="given up") as again:
        pad.act([0.5, 0.0, 0.0, 0.0, 0.0])
    _one_line(again.value)
    with pytest.raises(GamepadError) as still:
        pad.reopen()  # the driver still gone: one line again
    _one_line(still.value)
    pad.close()  # never raises
    assert "Traceback" not in capsys.readouterr().err


def _one_line(e: BaseException) -> None:
    text = str(e)
    assert "\n" not in text and text.startswith("screen env: gamepad"), text
    assert e.__cause__ is None and (e.__context__ is None or e.__suppress_context__), (
        "a chained traceback would reach the user"
    )


# ---- a missing or failing driver: one line saying what to install ----------------------------
def test_vgamepad_not_installed_is_one_line_naming_the_package_and_the_driver(monkeypatch):
    monkeypatch.setitem(sys.modules, "vgamepad", None)  # import vgamepad -> ImportError
    with pytest.raises(GamepadError) as e:
        Gamepad(VGamepadPad(), RACING)
    _one_line(e.value)
    assert "pip install vgamepad" in str(e.value) and "ViGEmBus" in str(e.value)


def test_vgamepad_without_the_bus_is_one_line(monkeypatch):
    vg = FakeVgamepad()
    vg.bus_error = Exception("VIGEM_ERROR_BUS_NOT_FOUND\nmore lines the user need not read")
    with pytest.raises(GamepadError) as e:
        Gamepad(VGamepadPad(module=vg), RACING)
    _one_line(e.value)
    assert "VIGEM_ERROR_BUS_NOT_FOUND" in str(e.value) and "ViGEmBus" in str(e.value)


def test_vgamepad_failing_at_import_is_one_line(monkeypatch):
    def boom(name):
        raise OSError("[WinError 126] ViGEmClient.dll: the specified module could not be found")

    monkeypatch.setattr(gp.importlib, "import_module", boom)
    with pytest.raises(GamepadError) as e:
        VGamepadPad().open()
    _one_line(e.value)
    assert "WinError 126" in str(e.value) and "pip install vgamepad" in str(e.value)


def test_uinput_absent_is_one_line_saying_modprobe(tmp_path):
    with pytest.raises(GamepadError) as e:
        Gamepad(UinputPad(path=str(tmp_path / "uinput")), RACING)
    _one_line(e.value)
    assert "does not exist" in str(e.value) and "modprobe uinput" in str(e.value)


def test_uinput_without_permission_is_one_line_saying_udev(tmp_path, monkeypatch):
    node = tmp_path / "uinput"
    node.write_bytes(b"")
    monkeypatch.setattr(gp.os, "access", lambda path, mode: False)  # root may write anything: as another user
    with pytest.raises(GamepadError) as e:
        UinputPad(path=str(node)).open()
    _one_line(e.value)
    assert "permission" in str(e.value) and "udev" in str(e.value)


def test_evdev_not_installed_is_one_line(tmp_path, monkeypatch):
    node = tmp_path / "uinput"
    node.write_bytes(b"")
    monkeypatch.setitem(sys.modules, "evdev", None)
    with pytest.raises(GamepadError) as e:
        UinputPad(path=str(node)).open()
    _one_line(e.value)
    assert "pip install evdev" in str(e.value)


def test_the_real_evdev_on_a_node_without_a_kernel_driver_is_one_line(tmp_path):
    """python-evdev's own UInput on a regular file (no uinput driver behind it): its error is one line."""
    pytest.importorskip("evdev", reason="python-evdev is not installed")
    node = tmp_path / "uinput"
    node.write_bytes(b"")
    with pytest.raises(GamepadError) as e:
        Gamepad(UinputPad(path=str(node)), RACING)
    _one_line(e.value)
    assert "cannot make a uinput device" in str(e.value)


def test_the_uinput_device_looks_like_an_xbox_360_pad(tmp_path):
    box: dict = {}
    node = tmp_path / "uinput"
    node.write_bytes(b"")
    pad = UinputPad(module=_evdev_module(fake_uinput_class(box)), path=str(node))
    pad.open()
    from evdev import ecodes

    dev = box["device"]
    assert (dev.kwargs["vendor"], dev.kwargs["product"]) == (0x045E, 0x028E)
    axes = dict(dev.caps[ecodes.EV_ABS])
    assert (axes[ecodes.ABS_X].min, axes[ecodes.ABS_X].max) == (-32768, 32767)
    assert (axes[ecodes.ABS_RZ].min, axes[ecodes.ABS_RZ].max) == (0, 255)
    assert ecodes.BTN_A in dev.caps[ecodes.EV_KEY] and ecodes.BTN_START in dev.caps[ecodes.EV_KEY]


def test_backend_choice():
    assert isinstance(make_backend("auto", "win32"), VGamepadPad)
    assert isinstance(make_backend("auto", "linux"), UinputPad)
    assert isinstance(make_backend("record"), RecordingPad)
    with pytest.raises(GamepadError, match="Linux"):
        make_backend("uinput", "win32")


def test_a_normalized_report_is_scaled_once():
    assert Report((1.0, -1.0, 0.5, 2.0), (0.5, -1.0)).device() == DeviceReport((32767, -32767, 16384, 32767), (128, 0))


# ---- the options and the screen env's Box action -------------------------------------------------
BASE = {"reward": "m:f", "region": [0, 0, 8, 8]}


def test_options_take_a_gamepad_layout_instead_of_keys():
    o = parse_options({**BASE, "gamepad": ["lx", "rt", "lt"], "gamepad_deadzone": 0.05})
    assert o.gamepad == ["lx", "rt", "lt"] and o.keys == [] and o.gamepad_backend == "auto"


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        ({"gamepad": ["lx"], "keys": [[], ["Left"]]}, "not both"),
        ({"gamepad": ["steer"]}, "a list of controls"),
        ({"gamepad": ["lx", "lx"]}, "each control once"),
        ({"gamepad": ["lx"], "gamepad_backend": "vigem"}, '"vgamepad"'),
        ({"gamepad": ["lx"], "gamepad_deadzone": 1.0}, "dead zone"),
        ({"gamepad": ["a"], "gamepad_threshold": 2}, "threshold"),
        ({}, "a list of key lists"),
    ],
)
def test_bad_gamepad_options_are_one_line(extra, says):
    with pytest.raises(ScreenEnvError, match=says) as e:
        parse_options({**BASE, **extra})
    assert "\n" not in str(e.value)


def reward_never_done(frame):
    return 0.0, False


class NoKeys(Keyboard):
    def _send(self, key: str, down: bool) -> None:
        pass


@pytest.fixture
def screen_env(monkeypatch):
    """A screen env over a fixed region with a recording pad; no display (keys and pixels stubbed)."""
    monkeypatch.setattr(screen_env_module, "make_keyboard", lambda *a: NoKeys())

    def grab(self):
        self.last_bgra = np.zeros((8, 8, 4), np.uint8)
        self.last_frame_at = 0.0
        return self.last_bgra[..., :3]

    monkeypatch.setattr(ScreenEnv, "grab", grab)
    kwargs = {**BASE, "reward": f"{__name__}:reward_never_done", "step_s": 0.0, "max_episode_steps": 2}
    env = ScreenEnv(**kwargs, gamepad=["lx", "rt", "lt", "a"], gamepad_backend="record")
    yield env
    env.close()


def test_the_screen_env_drives_the_pad_with_a_box_action_and_lets_go_at_reset_end_and_close(screen_env):
    env, pad = screen_env, screen_env.pad.backend
    assert env.action_space == gym.spaces.Box(
        np.array([-1, 0, 0, -1], np.float32), np.ones(4, np.float32), dtype=np.float32
    )
    env.reset()
    assert pad.reports[-1] == NEUTRAL.device()
    env.step(np.array([-0.5, 1.0, 0.0, 1.0], np.float32))
    assert pad.reports[-1] == DeviceReport((-16384, 0, 0, 0), (0, 255), frozenset({"a"}))
    *_, truncated, _ = env.step(np.array([1.0, 1.0, 0.0, 0.0], np.float32))
    assert truncated and pad.reports[-2].sticks[0] == 32767 and pad.reports[-1] == NEUTRAL.device()
    env.reset()
    env.step(np.array([1.0, 0.0, 0.0, 0.0], np.float32))
    env.close()
    assert pad.reports[-1] == NEUTRAL.device() and not pad.opened


def test_a_paused_screen_worker_leaves_the_pad_neutral(screen_env):
    """The screen env cannot pause its game: a pause lets go of the controls instead."""
    rt = RealTimeEnv(screen_env, ControlClock(50.0))
    rt.reset()
    rt.step(np.array([1.0, 1.0, 0.0, 0.0], np.float32))
    assert screen_env.pad.backend.reports[-1].sticks[0] == 32767
    rt.pause()
    assert screen_env.pad.backend.reports[-1] == NEUTRAL.device()


def test_a_driver_gone_mid_run_is_one_screen_env_error_and_a_reset_plugs_it_in_again(screen_env):
    env, pad = screen_env, screen_env.pad.backend
    env.reset()
    pad.fail_at, pad.open_error = pad.sent + 1, OSError("ViGEmBus not found")
    with pytest.raises(ScreenEnvError) as e:
        env.step(np.array([1.0, 0.0, 0.0, 0.0], np.float32))
    _one_line(e.value)
    with pytest.raises(ScreenEnvError, match="given up"):
        env.send_action(np.zeros(4, np.float32))
    pad.open_error = None  # the driver is back
    env.reset()
    assert pad.reports[-1] == NEUTRAL.device() and not env.pad.broken


def test_vgamepad_reconnects_to_a_fresh_bus(monkeypatch):
    """vgamepad connects to ViGEmBus once, at import: a reconnect after a failure makes a new connection."""
    buses = []
    inner = types.SimpleNamespace(VBus=lambda: buses.append("bus") or "bus", VBUS="the bus of the import")
    monkeypatch.setitem(sys.modules, "vgamepad.win.virtual_gamepad", inner)
    vg = FakeVgamepad()
    pad = Gamepad(VGamepadPad(module=vg), RACING)
    assert buses == []
    vg.fail_next = True
    pad.act([1.0, 0.0, 0.0, 0.0, 0.0])
    assert buses == ["bus"] and inner.VBUS == "bus" and vg.seen.sticks[0] == 32767


# ---- the real vgamepad package on a Windows CPython (Wine: no ViGEmBus driver) -------------------
@pytest.mark.slow
def test_the_real_vgamepad_without_vigembus_is_one_line_under_wine(tmp_path):
    """vgamepad 0.2.0 (an sdist only: its setup.py runs the ViGEmBus installer on Windows, so it is
    unpacked, not installed; ``MQTTRL_VGAMEPAD_SRC`` names the folder) imported by a Windows CPython
    under Wine, which cannot load a kernel driver: absent, then present without the bus, twice."""
    src = os.environ.get("MQTTRL_VGAMEPAD_SRC", "")
    if not src or not os.path.isdir(os.path.join(src, "vgamepad")):
        pytest.skip("set MQTTRL_VGAMEPAD_SRC to an unpacked vgamepad sdist (pip download vgamepad --no-deps)")
    from helpers.paths import REPO, TESTS
    from helpers.wine import WindowsPython, winpath

    wpy, why = WindowsPython.build(REPO / ".wine-py", tmp_path / "wine")
    if wpy is None:
        pytest.skip(f"no Windows CPython under Wine here: {why}")
    try:
        code, out = wpy.run([winpath(TESTS / "helpers" / "gamepad_wine.py"), winpath(REPO / "plugins"), winpath(src)])
    finally:
        wpy.shutdown()
    assert code == 0 and "Traceback" not in out, out[-3000:]
    seen = json.loads(out.strip().splitlines()[-1])
    print(seen)
    assert seen["platform"] == "win32"
    assert "pip install vgamepad" in seen["absent"] and "not installed" in seen["absent"]
    for key in ("no_bus", "no_bus_again"):
        line = seen[key]
        assert "\n" not in line and "pip install vgamepad" in line and "ViGEmBus" in line, line
        assert "VIGEM_ERROR_BUS_NOT_FOUND" in line, line  # its ViGEmClient.dll loaded and asked for the bus
