"""A dataset is checked like any sample batch: names, dtypes, shapes, finite values, ranges, sizes.

Each check raises :class:`DatasetError` with one line that names the file and the problem; the
reader runs them all before it hands out a single episode, so a dataset either loads whole or
not at all.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from mqttrl.config.settings import ConfigError

#: the arrays of one episode file, and nothing else
EPISODE_ARRAYS = ("obs", "actions", "rewards")
#: an episode longer than this is refused as oversize (a corrupt manifest, not a game)
MAX_EPISODE_STEPS = 10_000_000


class DatasetError(ConfigError):
    """A dataset that cannot be used: ``str(e)`` is one line naming the file and the problem (a
    ConfigError: a command that was given the dataset ends with that line and exit code 2)."""

    def __init__(self, file: Path | str, problem: str):
        self.file = str(file)
        self.problem = problem
        super().__init__(f"{file}: {problem}")


def expect(cond: bool, file: Path | str, problem: str) -> None:
    if not cond:
        raise DatasetError(file, problem)


def field(d: Any, key: str, kind: type | tuple[type, ...], file: Path | str, where: str = "") -> Any:
    """``d[key]`` checked to be of ``kind`` (bool is not an int here)."""
    expect(isinstance(d, dict) and key in d, file, f"{where}missing key {key!r}")
    value = d[key]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    ok = isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds)
    names = "/".join(k.__name__ for k in kinds)
    expect(ok, file, f"{where}{key} = {value!r} is not {names}")
    return value


def check_episode_arrays(
    arrays: dict[str, np.ndarray], steps: int, obs_space: gym.Space, act_space: gym.Space, file: Path | str
) -> None:
    """Names, dtypes, shapes, finite floats and action ranges of one episode's arrays."""
    from mqttrl.demos.episode import action_dtype
    from mqttrl.envs.rollout import obs_dtype

    names = sorted(arrays)
    expect(names == sorted(EPISODE_ARRAYS), file, f"holds arrays {names}, expected {sorted(EPISODE_ARRAYS)}")
    want = {
        "obs": (obs_dtype(obs_space), (steps + 1, *obs_space.shape)),
        "actions": (action_dtype(act_space), (steps, *(act_space.shape or ()))),
        "rewards": (np.dtype(np.float32), (steps,)),
    }
    for name, (dtype, shape) in want.items():
        a = arrays[name]
        expect(a.dtype == dtype, file, f"{name} has dtype {a.dtype}, expected {dtype}")
        expect(tuple(a.shape) == shape, file, f"{name} has shape {list(a.shape)}, expected {list(shape)}")
        if a.dtype.kind == "f":
            bad = np.flatnonzero(~np.isfinite(a.reshape(len(a), -1)).all(axis=1)) if a.size else []
            expect(len(bad) == 0, file, f"{name} row {bad[0] if len(bad) else 0} is not finite (NaN or inf)")
    _check_actions(arrays["actions"], act_space, file)


def _check_actions(actions: np.ndarray, space: gym.Space, file: Path | str) -> None:
    if isinstance(space, gym.spaces.Discrete):
        lo, hi = int(space.start), int(space.start + space.n - 1)
        bad = np.flatnonzero((actions < lo) | (actions > hi))
        expect(
            len(bad) == 0,
            file,
            f"actions row {bad[0] if len(bad) else 0} is {actions[bad[0]] if len(bad) else ''}, outside {lo}..{hi}",
        )
    elif isinstance(space, gym.spaces.MultiDiscrete):
        bad = np.flatnonzero(((actions < 0) | (actions >= space.nvec)).reshape(len(actions), -1).any(axis=1))
        expect(len(bad) == 0, file, f"actions row {bad[0] if len(bad) else 0} is outside the action space's nvec")
    elif isinstance(space, gym.spaces.MultiBinary):
        bad = np.flatnonzero(((actions != 0) & (actions != 1)).reshape(len(actions), -1).any(axis=1))
        expect(len(bad) == 0, file, f"actions row {bad[0] if len(bad) else 0} holds a value other than 0 or 1")
