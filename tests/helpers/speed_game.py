"""A simulated game PC (WallClock CartPole) that notes each ``set_speed`` call in a file, so a
test sees what a worker process asked of its game: ``helpers.speed_game:SpeedGame-v0``."""

from __future__ import annotations

import os

import gymnasium as gym

from mqttrl.envs.realtime_sim import WallClockGame


class SpeedGame(WallClockGame):
    def __init__(self, record_to: str, **kwargs):
        super().__init__(**kwargs)
        self.record_to = record_to

    def set_speed(self, factor: float) -> None:
        super().set_speed(factor)
        with open(self.record_to, "a") as f:
            f.write(f"{os.getpid()} {factor}\n")


gym.register("SpeedGame-v0", entry_point=SpeedGame, disable_env_checker=True)
