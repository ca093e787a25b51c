"""A person at the keyboard: a pygame window shows the game, held keys map to actions, one env step
per frame at the game's rate (``mqttrl record --keys FILE.toml``).

The key map is TOML, as gymnasium's ``utils.play`` maps keys (a combination of held keys names one
action; nothing mapped held: the ``noop`` action)::

    # keys/lunarlander.toml
    noop = 0
    [actions]
    up = 2              # pygame key names: up, down, left, right, space, a, w, ...
    left = 1
    right = 3
    "up+left" = 2       # a combination: every key of it held, and no other mapped key

A Box action space takes lists (``up = [1.0, 0.0]``). The window shows the env's ``rgb_array``
frame; Escape or closing the window ends the recording (the open episode is dropped, finished
ones are kept). Tests drive it with posted pygame events under ``SDL_VIDEODRIVER=dummy``.

A gamepad (pygame's joystick API, any pad SDL knows) takes part in the same map: besides key
names, a combination may name ``button:N`` (button N held), ``axis:N:pos`` / ``axis:N:neg``
(axis N pushed past ``[gamepad] deadzone`` that way) and ``hat:N:up`` / ``down`` / ``left`` /
``right`` (the d-pad). For a Box action space, ``[gamepad.axes]`` sets action dimensions straight
from sticks: ``"0" = {axis = 1, scale = -1.0}`` makes dimension 0 axis 1's position times -1
(inside the deadzone 0), over whatever the keys and buttons chose, clipped to the box::

    noop = 0
    [actions]
    up = 2
    "button:0" = 2
    "axis:0:neg" = 1
    "hat:0:right" = 3
    [gamepad]
    deadzone = 0.3

Every pad present when the recording starts, or plugged in during it, is opened. The tests post
pygame's JOYAXISMOTION, JOYBUTTONDOWN/UP and JOYHATMOTION events (no pad attached: pygame has no
virtual joystick to attach, so the device side, SDL reading a real pad, is not tested here).
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from .episode import Episode, EpisodeBuilder
from .sources import SourceError, env_action

os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")

#: steps per second when neither --fps nor the env's metadata says
DEFAULT_FPS = 30.0


#: a gamepad input in a held set: ("button", n), ("axis", n, "pos" | "neg"), ("hat", n, direction)
PadInput = tuple
HAT_DIRECTIONS = ("up", "down", "left", "right")


def pad_input(name: str) -> PadInput | None:
    """The gamepad input a key-map name means (``button:0``, ``axis:1:neg``, ``hat:0:up``), None for a
    key name; SourceError (its message without the file) for a malformed one."""
    parts = name.split(":")
    if parts[0] not in ("button", "axis", "hat"):
        return None
    ok = len(parts) >= 2 and parts[1].isdigit()
    if parts[0] == "button" and ok and len(parts) == 2:
        return ("button", int(parts[1]))
    if parts[0] == "axis" and ok and len(parts) == 3 and parts[2] in ("pos", "neg"):
        return ("axis", int(parts[1]), parts[2])
    if parts[0] == "hat" and ok and len(parts) == 3 and parts[2] in HAT_DIRECTIONS:
        return ("hat", int(parts[1]), parts[2])
    raise SourceError(f"{name!r} is not a gamepad input (button:N, axis:N:pos, axis:N:neg, hat:N:up/down/left/right)")


class KeyMap:
    """Held keys -> action: ``combos`` maps a frozenset of pygame key codes (and gamepad inputs,
    :func:`pad_input`) to an action; ``axes`` maps Box action dimensions to (axis, scale)."""

    def __init__(
        self,
        combos: dict[frozenset, Any],
        noop: Any,
        deadzone: float = 0.3,
        axes: dict[int, tuple[int, float]] | None = None,
    ):
        self.combos = combos
        self.noop = noop
        self.keys = frozenset().union(*combos) if combos else frozenset()
        self.deadzone = float(deadzone)
        self.axes = dict(axes or {})
        self.space: gym.Space | None = None

    def action(self, held: set, axis_values: dict[int, float] | None = None) -> Any:
        action = self.combos.get(frozenset(held & self.keys), self.noop)
        if not self.axes:
            return action
        action = np.array(action, copy=True)
        for dim, (axis, scale) in self.axes.items():
            v = float((axis_values or {}).get(axis, 0.0))
            action[dim] = 0.0 if abs(v) < self.deadzone else v * scale
        if self.space is not None:
            action = np.clip(action, self.space.low, self.space.high).astype(self.space.dtype)
        return action

    def pad_events(self, event, held: set, axis_values: dict[int, float]) -> None:
        """Take one pygame gamepad event into ``held`` and ``axis_values``."""
        import pygame

        if event.type == pygame.JOYBUTTONDOWN:
            held.add(("button", event.button))
        elif event.type == pygame.JOYBUTTONUP:
            held.discard(("button", event.button))
        elif event.type == pygame.JOYAXISMOTION:
            axis_values[event.axis] = float(event.value)
            held.discard(("axis", event.axis, "pos"))
            held.discard(("axis", event.axis, "neg"))
            if event.value >= self.deadzone:
                held.add(("axis", event.axis, "pos"))
            elif event.value <= -self.deadzone:
                held.add(("axis", event.axis, "neg"))
        elif event.type == pygame.JOYHATMOTION:
            x, y = event.value
            for d in HAT_DIRECTIONS:
                held.discard(("hat", event.hat, d))
            for d, on in (("left", x < 0), ("right", x > 0), ("down", y < 0), ("up", y > 0)):
                if on:
                    held.add(("hat", event.hat, d))

    @classmethod
    def from_toml(cls, path: str | Path, act_space: gym.Space) -> KeyMap:
        import pygame

        try:
            data = tomllib.loads(Path(path).read_text())
        except (OSError, tomllib.TOMLDecodeError) as e:
            raise SourceError(f"--keys {path}: cannot read it as TOML ({e})") from None
        actions = data.get("actions")
        if not isinstance(actions, dict) or not actions:
            raise SourceError(f"--keys {path}: needs an [actions] table of key = action, e.g. left = 1")
        if "noop" not in data:
            raise SourceError(f"--keys {path}: needs noop = ACTION (the action when no mapped key is held)")
        pygame.display.init()  # key names are read through the video subsystem
        combos: dict[frozenset, Any] = {}
        for combo, action in actions.items():
            codes: list = []
            for name in combo.split("+"):
                try:
                    pad = pad_input(name.strip())
                except SourceError as e:
                    raise SourceError(f"--keys {path}: {e}") from None
                if pad is not None:
                    codes.append(pad)
                    continue
                try:
                    codes.append(pygame.key.key_code(name.strip()))
                except ValueError:
                    raise SourceError(
                        f"--keys {path}: {name.strip()!r} is not a pygame key name (e.g. left, a, space) "
                        "or gamepad input (button:0, axis:1:neg, hat:0:up)"
                    ) from None
            combos[frozenset(codes)] = _checked(action, act_space, f"--keys {path}: {combo}")
        deadzone, axes = _gamepad_section(data.get("gamepad", {}), act_space, f"--keys {path}: [gamepad]")
        keymap = cls(combos, _checked(data["noop"], act_space, f"--keys {path}: noop"), deadzone, axes)
        keymap.space = act_space if isinstance(act_space, gym.spaces.Box) else None
        return keymap


def _gamepad_section(section: Any, space: gym.Space, where: str) -> tuple[float, dict[int, tuple[int, float]]]:
    """``[gamepad]``: (deadzone, {action dimension: (axis, scale)}), checked."""
    if not isinstance(section, dict):
        raise SourceError(f"{where} must be a table")
    unknown = set(section) - {"deadzone", "axes"}
    if unknown:
        raise SourceError(f"{where}: unknown key(s) {sorted(unknown)} (deadzone, axes)")
    deadzone = section.get("deadzone", 0.3)
    if not isinstance(deadzone, int | float) or not 0 <= deadzone < 1:
        raise SourceError(f"{where}: deadzone = {deadzone!r} must be >= 0 and < 1")
    axes: dict[int, tuple[int, float]] = {}
    table = section.get("axes", {})
    if table and not isinstance(space, gym.spaces.Box):
        raise SourceError(f"{where}.axes sets action dimensions: only for a Box action space, not {space}")
    for dim, spec in dict(table).items():
        size = int(np.prod(space.shape)) if isinstance(space, gym.spaces.Box) else 0
        if not str(dim).isdigit() or int(dim) >= size:
            raise SourceError(f"{where}.axes: {dim!r} is not an action dimension (0..{size - 1})")
        if not isinstance(spec, dict) or not isinstance(spec.get("axis"), int) or set(spec) - {"axis", "scale"}:
            raise SourceError(f'{where}.axes: "{dim}" = {spec!r}; write {{axis = N, scale = 1.0}}')
        axes[int(dim)] = (int(spec["axis"]), float(spec.get("scale", 1.0)))
    return float(deadzone), axes


def _checked(action: Any, space: gym.Space, where: str) -> Any:
    value = np.asarray(action)
    if isinstance(space, gym.spaces.Discrete):
        if value.shape != () or value.dtype.kind not in "iu" or not space.contains(int(value)):
            raise SourceError(f"{where} = {action!r} is not an action of {space}")
        return int(value)
    value = value.astype(space.dtype)
    if value.shape != space.shape or not space.contains(value):
        raise SourceError(f"{where} = {action!r} is not an action of {space}")
    return value


class KeyboardPlayer:
    """Plays ``env`` (made with ``render_mode="rgb_array"``) from the keyboard at ``fps`` steps a second.

    ``before_frame(step)`` runs before each frame's events are read (tests post key events there)."""

    def __init__(
        self,
        env: gym.Env,
        keymap: KeyMap,
        fps: float | None = None,
        before_frame: Callable[[int], None] | None = None,
    ):
        self.env = env
        self.keymap = keymap
        self.fps = float(fps or env.metadata.get("render_fps") or DEFAULT_FPS)
        self.before_frame = before_frame
        self.held: set = set()
        #: the gamepads' axis positions (axis -> value in [-1, 1])
        self.axis_values: dict[int, float] = {}
        self.pads: list = []  # the opened joysticks (pygame delivers events only for opened ones)
        self.frames = 0
        self.stopped = False

    @classmethod
    def from_toml(cls, path: str | Path, env: gym.Env, fps: float | None = None) -> KeyboardPlayer:
        return cls(env, KeyMap.from_toml(path, env.action_space), fps)

    def play(
        self, episodes: int, played_by: str, seed: int | None = 0, max_steps: int | None = None
    ) -> Iterator[Episode]:
        """Up to ``episodes`` episodes, each yielded when it ends; fewer if the person stops."""
        import pygame

        if self.env.render_mode != "rgb_array":
            raise SourceError("the keyboard player needs the env made with render_mode='rgb_array'")
        pygame.display.init()
        self._open_pads()
        try:
            clock = pygame.time.Clock()
            builder = EpisodeBuilder(self.env.observation_space, self.env.action_space, played_by)
            screen = None
            for i in range(episodes):
                s = None if seed is None else seed + i
                obs, _ = self.env.reset(seed=s)
                builder.start(obs, s)
                ep = None
                while ep is None:
                    screen = self._show(screen)
                    self._read_events()
                    if self.stopped:
                        return
                    action = self.keymap.action(self.held, self.axis_values)
                    obs, reward, terminated, truncated, _ = self.env.step(env_action(action, self.env.action_space))
                    cut = max_steps is not None and builder.steps + 1 >= max_steps
                    ep = builder.step(action, float(reward), obs, terminated, truncated or cut)
                    clock.tick(self.fps)
                yield ep
        finally:
            pygame.display.quit()

    def _show(self, screen):
        """The env's frame in the window (made at the frame's size on first use)."""
        import pygame

        frame = np.asarray(self.env.render())
        if frame.ndim == 2:
            frame = np.repeat(frame[:, :, None], 3, axis=2)
        if screen is None:
            screen = pygame.display.set_mode((frame.shape[1], frame.shape[0]))
            pygame.display.set_caption("mqttrl record (Esc ends)")
        pygame.surfarray.blit_array(screen, np.ascontiguousarray(frame.swapaxes(0, 1)))
        pygame.display.flip()
        return screen

    def _read_events(self) -> None:
        import pygame

        if self.before_frame is not None:
            self.before_frame(self.frames)
        self.frames += 1
        for event in pygame.event.get():
            if event.type == pygame.QUIT or (event.type == pygame.KEYDOWN and event.key == pygame.K_ESCAPE):
                self.stopped = True
            elif event.type == pygame.KEYDOWN:
                self.held.add(event.key)
            elif event.type == pygame.KEYUP:
                self.held.discard(event.key)
            elif event.type == pygame.JOYDEVICEADDED:
                self._open_pads()
            else:
                self.keymap.pad_events(event, self.held, self.axis_values)

    def _open_pads(self) -> None:
        """Open every gamepad SDL sees (none attached: nothing; no joystick support: nothing)."""
        import pygame

        try:
            pygame.joystick.init()
            self.pads = [pygame.joystick.Joystick(i) for i in range(pygame.joystick.get_count())]
        except pygame.error:
            self.pads = []
