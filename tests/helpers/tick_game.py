"""A game for the launcher's tests: a process that ticks a counter into a file, and the env that reads it.

``python -m helpers.tick_game STATE`` writes ``"<pid> <tick>"`` to STATE every 10 ms (atomically)
until it is killed; ``--exit-after N`` quits (status 0) after N ticks (a game that quits at game
over). The env (id ``helpers.tick_game:Tick-v0``, kwarg ``state``) steps by reading STATE: a file
that is gone, a pid that is not alive, or a tick that has not moved for ``hang_s`` raise, as a real
game's env raises when the game exits, crashes or hangs. With ``over_at`` the game is over from
that tick on: the step says so (terminated), and a reset waits while it is (as the screen kit's
reset waits for a game that is still over), raising when the game exits meanwhile.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import gymnasium as gym
import numpy as np


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (exited, not yet reaped by its parent) is not alive
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


class TickEnv(gym.Env):
    observation_space = gym.spaces.Box(0.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, state: str, hang_s: float = 1.0, episode_steps: int = 50, over_at: int = 0):
        self.state, self.hang_s, self.episode_steps, self.over_at = Path(state), hang_s, episode_steps, over_at
        self.t = 0
        self._last = self._read()  # the game must be there to make the env (like a window)
        self._moved_at = time.monotonic()

    def _read(self) -> tuple[int, int]:
        try:
            pid, tick = map(int, self.state.read_text().split())
        except (OSError, ValueError) as e:
            raise RuntimeError(f"the game is not running ({e})") from None
        if not _alive(pid):
            raise RuntimeError(f"the game (pid {pid}) exited")
        return pid, tick

    def _obs(self) -> np.ndarray:
        now = self._read()
        if now != self._last:
            self._last, self._moved_at = now, time.monotonic()
        elif time.monotonic() - self._moved_at > self.hang_s:
            raise RuntimeError(f"the game (pid {now[0]}) has not ticked for {self.hang_s} s: it hangs")
        return np.array([now[1] % 100 / 100.0], dtype=np.float32)

    def _over(self) -> bool:
        return bool(self.over_at) and self._last[1] >= self.over_at

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        obs = self._obs()
        deadline = time.monotonic() + 5.0
        while self._over():  # the game is over: it never starts again by itself (it exits)
            if time.monotonic() > deadline:
                raise RuntimeError("the game is still over 5 s after reset")
            time.sleep(0.01)
            obs = self._obs()
        return obs, {}

    def step(self, action):
        time.sleep(0.005)
        self.t += 1
        obs = self._obs()
        return obs, float(action), self._over(), self.t >= self.episode_steps, {}


gym.register("Tick-v0", entry_point=TickEnv)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("state")
    p.add_argument("--exit-after", type=int, default=0)
    args = p.parse_args()
    state, tmp = Path(args.state), Path(args.state + ".tmp")
    tick = 0
    while not args.exit_after or tick < args.exit_after:
        tmp.write_text(f"{os.getpid()} {tick}")
        os.replace(tmp, state)
        tick += 1
        time.sleep(0.01)


if __name__ == "__main__":
    main()
