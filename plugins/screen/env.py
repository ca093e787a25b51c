"""The screen kit's env: a game's window in, its keys out, reward and end from the user's function.

A step holds the action's keys (only changes are sent; or taps them, ``key_mode = "tap"``: down at
the step's start, up ``tap_s`` later, so that a game polling the keys once a frame sees them),
waits until ``step_s`` (or ``1 / control_hz``) after the last frame, grabs the window, hands the
full-size RGB frame to the reward function and returns the shrunk, stacked frames. The game runs
on its own clock all along: this env never pauses it. It also speaks mqttrl's real-time protocol
(``send_action``/``read_obs``), so with ``[env] control_hz`` the worker's clock paces it instead.

A game that is not there is waited for (``window_wait_s``, at the start and at a reset); one that
goes away or hangs is an error at the next frame, never a run of frames of something else: a
window that closed or is no longer shown, and frames that stopped changing for ``frozen_s``. A step
whose frame equals the one before says so (``info["still_s"]``): a worker holds such steps back
and drops them when the game is then found frozen, so a hung game's picture is never trained on.

One window is one env: at reset an env claims its window (an X property naming host, process
and env) and leaves a window another live env plays alone; ``display = [...]`` lists displays
with a copy of the game each, and an env takes a free one (a worker's, an evaluator's episodes).
"""

from __future__ import annotations

import itertools
import os
import socket
import sys
import threading
import time
import weakref
from typing import Any

import gymnasium as gym
import numpy as np

from mqttrl.plugin import RealTimeGameEnv, launched_game_pid

from .capture import FrameStack, Grabber, Stillness, rgb
from .gamepad import Gamepad, Layout, make_backend
from .keys import KeyActions, Keyboard, make_keyboard, sleep_until
from .options import ScreenOptions, check_result, load_reward, parse_options
from .takeover import open_takeover
from .window import (
    Finder,
    Region,
    ScreenEnvError,
    ShownWindow,
    Window,
    claim_window,
    log,
    release_window,
    wait_for_window,
)

#: this process's envs that hold a window, by the serial in their claim (a claim of this process
#: whose env is gone, never closed, is free)
_LIVE: dict[str, weakref.ref] = {}
#: an episode's first action this long (or 3 steps) after the reset's frame is logged as late
LATE_START_S = 0.25
_SERIALS = itertools.count()


def _alive(pid: int, serial: str) -> bool:
    """Whether the env that made a claim of this host still plays: its process runs (and, in this
    process, the env object is still open)."""
    if pid == os.getpid():
        ref = _LIVE.get(serial)
        return ref is not None and ref() is not None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def open_pad(o: ScreenOptions, keyboard: Keyboard) -> Gamepad:
    """The virtual gamepad of ``o.gamepad``, opened (one line when it cannot be: the keys closed)."""
    layout = Layout(list(o.gamepad), o.gamepad_deadzone, o.gamepad_threshold)
    try:
        return Gamepad(make_backend(o.gamepad_backend), layout)
    except ScreenEnvError:
        keyboard.close()
        raise


def pad_space(pad: Gamepad) -> gym.spaces.Box:
    """The Box action of a pad's layout: a dimension a control, 0..1 for a trigger, -1..1 otherwise."""
    low, high = pad.layout.bounds()
    return gym.spaces.Box(low, high, dtype=np.float32)


class FrozenCheck:
    """``frozen_s``: frames pixel-equal that long are a hung game (a frozen window stays on the
    screen, and its last picture would be played on). Counts the steps since the frames stopped
    changing: they carry ``still_s`` in their info, and a worker drops them (the error says how many)."""

    def __init__(self, frozen_s: float):
        self.frozen_s = frozen_s
        self.still = Stillness()
        #: steps in a row whose frame equalled the one before
        self.steps = 0

    def restart(self, frame: np.ndarray, at: float) -> None:
        """A new episode's first frame: the count starts from it."""
        self.still.restart()
        self.still.seen(frame, at)
        self.steps = 0

    def check(self, frame: np.ndarray, at: float, what) -> float:
        """Seconds the frames have been equal up to ``frame`` (0: it changed, or frozen_s = 0: not
        checked); a :class:`ScreenEnvError` naming ``what()`` when that reaches ``frozen_s``."""
        if not self.frozen_s:
            return 0.0
        still = self.still.seen(frame, at)
        self.steps = self.steps + 1 if still > 0 else 0
        if still >= self.frozen_s:
            f = self.frozen_s
            raise ScreenEnvError(
                f"screen env: {what()} has not changed for {f:g} s: the game hangs (frozen_s = {f:g}; its "
                f"{self.steps - 1} steps since the frames stopped changing are not trained on; a game that may "
                "show a still picture longer needs a larger one, 0 turns the check off)"
            )
        return still


def first_window(o: ScreenOptions, displays: list, owner: int | None) -> Window | None:
    """One display: the game's window now (waiting up to window_wait_s for it); several (or a
    screen region): None, and the first reset takes a window no other env plays."""
    if not o.window or len(displays) != 1:
        return None
    return wait_for_window(o.window, displays[0], o.window_exact, o.window_wait_s, owner=owner)


class LateStart:
    """One log line when an episode's first action comes long after the reset's frame: the game
    played on meanwhile (a ball that falls in half a second is missed before the agent acts).
    The worker was busy (a loaded machine, a long batch or model swap between reset and step)."""

    def __init__(self) -> None:
        #: such episodes so far
        self.count = 0

    def check(self, frame_at: float, period: float) -> None:
        late = time.monotonic() - frame_at
        if late > max(LATE_START_S, 3 * period):
            self.count += 1
            log.info(
                "screen env: the episode's first action came %.2f s after the reset's frame (%d such episodes): "
                "the game played on meanwhile; was the worker busy?",
                late,
                self.count,
            )


class ScreenEnv(RealTimeGameEnv):
    """``id = "screen"``: see :class:`~.options.ScreenOptions` for the kwargs."""

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012 (gymnasium's class attribute)

    def __init__(self, **kwargs: Any):
        self.opts = o = parse_options(kwargs)
        self.reward_fn = load_reward(o.reward)
        self.displays = o.displays
        self.display = self.displays[0]
        #: the launched game whose window this env plays (its pid), or None: any process's window
        self.owner = launched_game_pid() if o.window_process == "launched" else None
        self.window = first_window(o, self.displays, self.owner)
        self._shown = ShownWindow()
        self._still = FrozenCheck(o.frozen_s)
        self.taps = KeyActions(o.key_mode, o.tap_s)
        #: seconds a step lasts when the worker's clock does not pace it (step_s, or 1 / control_hz)
        self.period = 1.0 / o.control_hz if o.control_hz else o.step_s
        self.region = self.window.region if self.window else Region(*(o.region or [0, 0, 1, 1]))
        self.actions = [tuple(k) for k in o.keys]
        focus = self.window.handle if o.focus and self.window else None
        self.keyboard = make_keyboard(o.keys_backend, self.display, focus)
        self._keys_for = (self.display, focus)
        self._serial = str(next(_SERIALS))
        self.token = f"{socket.gethostname()} {os.getpid()} {self._serial}"
        #: ``(display, window id)`` this env has claimed (X11), None before its first reset
        self.claimed: tuple[str | None, int] | None = None
        self._closed = False
        #: episodes whose first action came late
        self.late = LateStart()
        try:
            self.keyboard.check({k for keys in self.actions for k in keys} | set(o.reset_keys))
        except ScreenEnvError:
            self.keyboard.close()
            raise
        self.takeover, self._person_keys = open_takeover(o, self.display, self.actions)
        #: the virtual gamepad a Box action drives (``gamepad``), else None: keys
        self.pad = open_pad(o, self.keyboard) if o.gamepad else None
        self.action_space = pad_space(self.pad) if self.pad else gym.spaces.Discrete(len(self.actions))
        self.stack = FrameStack(o.width, o.height, o.gray, o.frame_stack)
        self.observation_space = gym.spaces.Box(0, 255, self.stack.shape, np.uint8)
        self._grabber: Grabber | None = None
        self._grabber_thread = 0
        self.last_frame_at = 0.0
        self.last_bgra = np.zeros((1, 1, 4), np.uint8)
        self.steps = 0
        #: seconds the last grab took (the window's pixels to an RGB array)
        self.last_grab_s = 0.0

    reset_wait_s = property(lambda self: self.opts.window_wait_s + self.opts.reset_timeout_s)  # window, then game start

    def release_controls(self) -> None:
        """Let go of the controls: no key held, the pad neutral (a reset, an episode's end, a pause)."""
        self.taps.tap_at = None
        self.keyboard.release_all()
        if self.pad is not None:
            self.pad.neutral()

    # ---- pixels
    def grab(self) -> np.ndarray:
        """The window now, full size RGB (a view of :attr:`last_bgra`; a grabber per thread: mss
        instances are not shared)."""
        if self._grabber is None or self._grabber_thread != threading.get_ident():
            self._grabber = Grabber(self.region, self.display)
            self._grabber_thread = threading.get_ident()
        t = time.perf_counter()
        self.last_bgra = self._grabber.grab()
        self.last_frame_at = time.monotonic()
        self.last_grab_s = time.perf_counter() - t
        return rgb(self.last_bgra)

    def observe(self) -> np.ndarray:
        """Push the last grabbed frame onto the stack; the stacked observation, channels first."""
        return self.stack.push(self.last_bgra)

    def judge(self, frame: np.ndarray) -> tuple[float, bool]:
        return check_result(self.opts.reward, self.reward_fn(frame))

    # ---- a game that went away or hangs: an error, not frames of something else
    def _frame(self) -> np.ndarray:
        """The window now (:meth:`grab`); grabbed again at its new place when it moved or was resized."""
        frame = self.grab()
        if self._check_shown():
            frame = self.grab()
        return frame

    def _check_shown(self) -> bool:
        """Raise when the window played closed or is hidden (:class:`~.window.ShownWindow`); True
        when it moved or was resized: the env now grabs its new place."""
        if self.window is None or self._closed:
            return False
        moved = self._shown.check(self.window, self.display)
        if moved is None:
            return False
        self.window, self.region, self._grabber = moved, moved.region, None
        return True

    def _what(self) -> str:
        return f"the window {self.window.title!r}" if self.window else f"the screen region {self.opts.region}"

    # ---- gymnasium
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        if self.pad is not None:
            self.pad.reopen()  # a pad given up after a driver failure: plugged in again, or one line
        self.release_controls()
        if self.opts.window:  # the game may have moved or been restarted
            self._bind()
        if self.opts.reset_keys:
            self.keyboard.tap(self.opts.reset_keys)
        frame = self._wait_for_start()
        if hasattr(self.reward_fn, "reset"):
            self.reward_fn.reset(frame)
        self.stack.clear()
        self.steps = 0
        self._still.restart(self.last_bgra, self.last_frame_at)
        return self.observe(), {}

    # ---- which window: one env per window
    def _bind(self) -> None:
        """Find the game's window again and hold it: a window another live env plays (in any
        process: an X property on the window names it) is not taken; with several displays the
        env keeps its own if it can, else takes a free one. Waits up to ``reset_timeout_s`` for
        one to be free, and ``window_wait_s`` for a game that is not there (yet)."""
        with Finder() as finder:  # one X connection a display for the wait (see Finder)
            self._bind_with(finder)

    def _bind_with(self, finder: Finder) -> None:
        o = self.opts
        start = time.monotonic()
        order = sorted(self.displays, key=lambda d: d != self.display)  # the one played so far first
        announced = False
        while True:
            held, absent = [], []
            for disp in order:
                try:
                    if len(self.displays) == 1:
                        win = wait_for_window(o.window, disp, o.window_exact, o.window_wait_s, finder, self.owner)
                    else:
                        win = finder.find(o.window, disp, o.window_exact, self.owner)
                except ScreenEnvError as e:
                    if len(self.displays) == 1:
                        raise
                    absent.append(f"{disp}: {e}")
                    continue
                holder = self._claim(disp, win)
                if holder is None:
                    self._use(disp, win)
                    return
                held.append(f"{disp or '$DISPLAY'} by {holder}")
            # no game on any display: it may be starting; all held: another env may let one go
            patience = o.reset_timeout_s if held else max(o.reset_timeout_s, o.window_wait_s)
            if time.monotonic() - start > patience:
                raise ScreenEnvError(self._none_free(held, absent, patience))
            if not held and not announced:
                announced = True
                where = ", ".join(d or "$DISPLAY" for d in order)
                log.info("screen env: no window titled %r on %s yet; waiting up to %g s", o.window, where, patience)
            time.sleep(0.1)

    def _none_free(self, held: list[str], absent: list[str], waited_s: float) -> str:
        o = self.opts
        return (
            f"screen env: no free window titled {o.window!r} after {waited_s:g} s (played: "
            f"{'; '.join(held) or 'none'}{'; ' if absent else ''}{'; '.join(absent)}): one window is one env, and "
            "XTest keys go to one window a display; start another copy of the game on another X display and "
            'list them all in display = [":1", ":2", ...]'
        )

    def _claim(self, disp: str | None, win: Window) -> str | None:
        if sys.platform == "win32":  # pragma: no cover (one desktop, keys to the focused window)
            return None
        if self.claimed is not None and self.claimed != (disp, win.handle):
            self._release()
        _LIVE[self._serial] = weakref.ref(self)
        return claim_window(disp, win.handle, self.token, _alive)

    def _use(self, disp: str | None, win: Window) -> None:
        """Play ``win`` on ``disp`` from now on: its region, and keys focused on it."""
        self.claimed = (disp, win.handle)
        self.window = win
        if win.region != self.region or disp != self.display:
            self._grabber = None
        self.region, self.display = win.region, disp
        focus = win.handle if self.opts.focus else None
        if self._keys_for != (disp, focus):
            self.keyboard.close()
            self.keyboard = make_keyboard(self.opts.keys_backend, disp, focus)
            self._keys_for = (disp, focus)

    def _release_quietly(self) -> None:
        try:
            self._release()
        except Exception:  # an X server gone: the claim went with it
            pass

    def _release(self) -> None:
        if self.claimed is not None:
            disp, handle = self.claimed
            self.claimed = None
            release_window(disp, handle, self.token)
        _LIVE.pop(self._serial, None)

    def _wait_for_start(self) -> np.ndarray:
        deadline = time.monotonic() + self.opts.reset_timeout_s
        while True:
            frame = self._frame()
            _, done = self.judge(frame)
            if not done:
                return frame
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"screen env: the game is still over {self.opts.reset_timeout_s:g} s after reset "
                    f"(reset_keys = {self.opts.reset_keys}); does a key restart it?"
                )
            time.sleep(0.02)

    # ---- the real-time protocol (mqttrl.envs.realtime): [env] control_hz keeps the clock
    def send_action(self, action: int) -> None:
        """Hold the keys of ``action`` from now on, or tap them (``key_mode``), or set the gamepad to
        it (``gamepad``); returns at once. A tap's keys go up ``tap_s`` later in :meth:`step`, at
        the period's end (:meth:`read_obs`) under the worker's clock, or at the next action."""
        if self.steps == 0:
            self.late.check(self.last_frame_at, self.period)
        if self.pad is not None:
            self.pad.act(action)
        elif not self._person_plays():
            self.taps.send(self.keyboard, self.actions[int(action)])

    def _person_plays(self) -> bool:
        """Whether a person plays this step (``takeover_key``): the hands change here, once a step."""
        change = self.takeover.look(self._person_keys.take(), self.keyboard.held) if self.takeover else None
        if change:
            log.info("screen env: %s", change)
            self.release_controls()  # the policy's keys up: the person's alone reach the game
        return bool(self.takeover and self.takeover.by_person)

    def read_obs(self) -> tuple[np.ndarray, float, bool, bool, dict]:
        """The window now: ``(obs, reward, terminated, truncated, info)``, with no wait; a window
        that closed or a game that hangs is a :class:`ScreenEnvError` (the worker's restart path)."""
        self.taps.end(self.keyboard)  # the period is over: a tap lasts it at most
        return self._read()

    def _read(self) -> tuple[np.ndarray, float, bool, bool, dict]:
        frame = self._frame()
        still = self._still.check(self.last_bgra, self.last_frame_at, self._what)  # an error at frozen_s
        reward, done = self.judge(frame)
        self.steps += 1
        truncated = not done and 0 < self.opts.max_episode_steps <= self.steps
        if done or truncated:
            self.release_controls()
        # when the frame was grabbed (time.monotonic()): the worker counts capture to action from it;
        # still_s: this frame equals the one before (the worker holds the step back: a hung game's?)
        info = {"frame_at": self.last_frame_at, "still_s": still} if still else {"frame_at": self.last_frame_at}
        if self.takeover and self.takeover.by_person:  # the worker records the person's action
            info.update(demo_action=self.takeover.person_action(), intervention=True)
        return self.observe(), reward, done, truncated, info

    def step(self, action):
        """The action's keys, a wait until :attr:`period` after the last frame, the frame then. A
        tap's keys go up ``tap_s`` after they went down, or before the frame if the step is shorter
        (a step that does not wait, ``step_s = 0``, leaves them down until the next action)."""
        self.send_action(action)
        end = self.last_frame_at + self.period
        self.taps.end_by(self.keyboard, end)
        sleep_until(end)
        return self._read()

    def set_control_hz(self, hz: float) -> None:
        """The run's ``[env] control_hz`` (for mqttrl to tell the env it makes): a step that the
        worker's clock does not pace (``mqttrl enjoy``, an evaluator) lasts ``1 / hz`` s, as in
        training, whatever ``step_s`` says; 0 changes nothing."""
        if not hz:
            return
        if self.opts.control_hz and abs(self.opts.control_hz - hz) > 1e-9:
            raise ScreenEnvError(
                f"screen env: control_hz={self.opts.control_hz:g} in [env.kwargs], but the run's [env] control_hz "
                f"is {hz:g}: drop the kwarg, the run's sets the step"
            )
        self.period = 1.0 / hz

    def close(self) -> None:
        if self._closed:  # closing twice is allowed (gymnasium)
            return
        self._closed = True
        try:
            if self.pad is not None:
                self.pad.close()
            self.keyboard.close()
        finally:
            if self._person_keys is not None:
                self._person_keys.close()
            self._shown.close()
            self._release_quietly()
            if self._grabber is not None:
                try:
                    self._grabber.close()
                except Exception:
                    pass
                self._grabber = None


def make_screen_env(**kwargs: Any) -> ScreenEnv:
    """``id = "screen"``: the screen kit's env (a :class:`ScreenEnvError` is one line)."""
    try:
        return ScreenEnv(**kwargs)
    except ScreenEnvError:
        raise
    except TypeError as e:  # a kwarg of the wrong type reached a constructor
        raise ScreenEnvError(f"screen env: {e}") from None
