"""Gymnasium spaces as JSON and back: a dataset's manifest and the run's env spec.

A dataset names the spaces it was recorded in so that a reader can check every array against
them and refuse a dataset made for another game before training on it; the run's env spec
(:mod:`mqttrl.envs.spec`) carries them to the nodes that never make the env. Box, Discrete,
MultiDiscrete and MultiBinary are described (what mqttrl's algorithms take); a Box's bounds are
one number when they are all alike (an image's 0..255), and infinities are the strings
``"inf"``/``"-inf"`` (JSON has no literal for them).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np


class SpaceError(ValueError):
    """A space that cannot be described, or a description that is not a space."""


def _bounds_json(a: np.ndarray) -> Any:
    flat = np.asarray(a, dtype=np.float64).ravel()
    if flat.size and np.all(flat == flat[0]):
        flat = flat[:1]
    out = [x if np.isfinite(x) else ("inf" if x > 0 else "-inf") for x in flat.tolist()]
    return out[0] if len(out) == 1 else out


def _bounds_from(value: Any, shape: tuple[int, ...], what: str) -> np.ndarray:
    items = value if isinstance(value, list) else [value]
    try:
        flat = np.array([float(x) for x in items], dtype=np.float64)  # float("inf") reads "inf"
    except (TypeError, ValueError):
        raise SpaceError(f"Box {what} {value!r} is not a number or a list of numbers") from None
    if flat.size == 1:
        return np.full(shape, flat[0])
    if flat.size != int(np.prod(shape)):
        raise SpaceError(f"Box {what} has {flat.size} values for shape {list(shape)}")
    return flat.reshape(shape)


def space_to_json(space: gym.Space) -> dict[str, Any]:
    """A JSON-able description of ``space``; SpaceError for a kind of space not described."""
    if isinstance(space, gym.spaces.Box):
        return {
            "type": "Box",
            "shape": list(space.shape),
            "dtype": space.dtype.name,
            "low": _bounds_json(space.low),
            "high": _bounds_json(space.high),
        }
    if isinstance(space, gym.spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, gym.spaces.MultiDiscrete):
        return {"type": "MultiDiscrete", "nvec": space.nvec.tolist(), "dtype": space.dtype.name}
    if isinstance(space, gym.spaces.MultiBinary):
        return {"type": "MultiBinary", "n": list(np.atleast_1d(space.n).tolist())}
    raise SpaceError(f"{type(space).__name__} spaces cannot be described (Box, Discrete, MultiDiscrete, MultiBinary)")


def space_from_json(d: Any) -> gym.Space:
    """The space a :func:`space_to_json` description names; SpaceError when it is not one."""
    if not isinstance(d, dict) or not isinstance(d.get("type"), str):
        raise SpaceError(f"{d!r} is not a space description (an object with a type)")
    try:
        kind = d["type"]
        if kind == "Box":
            shape = tuple(int(s) for s in d["shape"])
            dtype = np.dtype(d["dtype"])
            low, high = _bounds_from(d["low"], shape, "low"), _bounds_from(d["high"], shape, "high")
            return gym.spaces.Box(low.astype(dtype), high.astype(dtype), shape, dtype)
        if kind == "Discrete":
            return gym.spaces.Discrete(int(d["n"]), start=int(d.get("start", 0)))
        if kind == "MultiDiscrete":
            return gym.spaces.MultiDiscrete(np.asarray(d["nvec"], dtype=np.int64), dtype=d.get("dtype", "int64"))
        if kind == "MultiBinary":
            n = d["n"]
            return gym.spaces.MultiBinary(n[0] if len(n) == 1 else n)
    except SpaceError:
        raise
    except (KeyError, TypeError, ValueError, AssertionError) as e:
        raise SpaceError(f"{kind} description {d!r} is not valid ({type(e).__name__}: {e})") from None
    raise SpaceError(f"unknown space type {kind!r} (Box, Discrete, MultiDiscrete, MultiBinary)")


def same_space(a: gym.Space, b: gym.Space) -> bool:
    """Whether two spaces have the same description (kind, shape, dtype, bounds)."""
    try:
        return space_to_json(a) == space_to_json(b)
    except SpaceError:
        return False
