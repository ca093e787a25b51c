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


class KeyMap:
    """Held keys -> action: ``combos`` maps a frozenset of pygame key codes to an action."""

    def __init__(self, combos: dict[frozenset[int], Any], noop: Any):
        self.combos = combos
        self.noop = noop
        self.keys = frozenset().union(*combos) if combos else frozenset()

    def action(self, held: set[int]) -> Any:
        return self.combos.get(frozenset(held & self.keys), self.noop)

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
        combos: dict[frozenset[int], Any] = {}
        for combo, action in actions.items():
            codes = []
            for name in combo.split("+"):
                try:
                    codes.append(pygame.key.key_code(name.strip()))
                except ValueError:
                    raise SourceError(
                        f"--keys {path}: {name.strip()!r} is not a pygame key name (e.g. left, a, space)"
                    ) from None
            combos[frozenset(codes)] = _checked(action, act_space, f"--keys {path}: {combo}")
        return cls(combos, _checked(data["noop"], act_space, f"--keys {path}: noop"))


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
        self.held: set[int] = set()
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
                    action = self.keymap.action(self.held)
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
