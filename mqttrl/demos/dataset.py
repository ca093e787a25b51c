"""A demonstration dataset on disk: one safetensors file per episode and a JSON manifest.

Layout of a dataset directory::

    manifest.json                 format, version, env id and kwargs, both spaces, created,
                                  and per episode: file, steps, return, how it ended, who
                                  played it, its size in bytes and blake2b checksum
    episodes/000000.safetensors   obs (T+1, ...), actions (T, ...), rewards (T,) float32

Only safetensors and JSON are read: no pickle, nothing executed. Why not the wire's sample
batches: those hold an algorithm's transitions (DQN's n-step returns, PPO's advantages), made
for one set of hyperparameters; a recording is the raw play, which every algorithm turns into
its own samples when it loads it (:mod:`mqttrl_plugins.dqn.demo_replay`, PPO's cloning).

:class:`DatasetWriter` writes each episode atomically (a temporary name, then a rename) and the
manifest after it, so a recording that is killed keeps every episode it finished.
:func:`read_dataset` checks everything (:mod:`.validate`) before it returns anything: a
truncated, corrupt or mismatched file is one :class:`DatasetError` line naming the file and the
problem, and a dataset never loads in part.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

import attrs
import gymnasium as gym
import numpy as np

from mqttrl.envs.spaces import SpaceError, space_from_json, space_to_json

from .episode import Episode
from .validate import MAX_EPISODE_STEPS, DatasetError, check_episode_arrays, expect, field

FORMAT = "mqttrl-demos"
VERSION = 1
MANIFEST = "manifest.json"
#: a dataset bigger than this (the manifest's sizes summed) is refused before any file is read
DEFAULT_MAX_BYTES = 8 * 1024**3


def _checksum(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(path)


@attrs.frozen(eq=False)
class Dataset:
    """A whole dataset, every episode checked."""

    path: Path
    env_id: str
    env_kwargs: dict
    observation_space: gym.Space
    action_space: gym.Space
    episodes: list[Episode]
    manifest: dict

    @property
    def steps(self) -> int:
        return sum(ep.steps for ep in self.episodes)

    @property
    def returns(self) -> list[float]:
        return [ep.episode_return for ep in self.episodes]

    def describe(self) -> str:
        r = self.returns
        mean = f", mean return {np.mean(r):.1f}" if r else ""
        return f"{self.path}: {len(self.episodes)} episodes of {self.env_id}, {self.steps} steps{mean}"


class DatasetWriter:
    """Writes episodes into ``path`` (made if missing). An existing dataset is appended to only with
    ``append=True``, and only when its env and spaces are these (DatasetError otherwise)."""

    def __init__(
        self,
        path: str | Path,
        env_id: str,
        observation_space: gym.Space,
        action_space: gym.Space,
        env_kwargs: dict | None = None,
        append: bool = False,
    ):
        self.path = Path(path)
        try:
            spaces = {
                "observation_space": space_to_json(observation_space),
                "action_space": space_to_json(action_space),
            }
        except SpaceError as e:
            raise DatasetError(self.path, str(e)) from None
        self.observation_space, self.action_space = observation_space, action_space
        manifest_file = self.path / MANIFEST
        if manifest_file.exists():
            if not append:
                raise DatasetError(self.path, "already holds a dataset (append to it, or choose another directory)")
            old = read_manifest(self.path)
            for key, value in {"env_id": env_id, **spaces}.items():
                expect(old[key] == value, manifest_file, f"{key} is {old[key]!r}; this recording's is {value!r}")
            self.manifest = old
        else:
            self.manifest = {
                "format": FORMAT,
                "version": VERSION,
                "env_id": env_id,
                "env_kwargs": dict(env_kwargs or {}),
                **spaces,
                "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "episodes": [],
            }
        (self.path / "episodes").mkdir(parents=True, exist_ok=True)

    @property
    def episodes(self) -> int:
        return len(self.manifest["episodes"])

    def add(self, ep: Episode) -> Path:
        """Write one episode (checked against the spaces first) and the manifest that lists it."""
        from safetensors.numpy import save

        arrays = {"obs": ep.obs, "actions": ep.actions, "rewards": ep.rewards}
        name = f"episodes/{self.episodes:06d}.safetensors"
        check_episode_arrays(arrays, ep.steps, self.observation_space, self.action_space, self.path / name)
        data = save({k: np.ascontiguousarray(v) for k, v in arrays.items()})
        _write_atomic(self.path / name, data)
        self.manifest["episodes"].append(
            {
                "file": name,
                "steps": ep.steps,
                "return": ep.episode_return,
                "terminated": bool(ep.terminated),
                "truncated": bool(ep.truncated),
                "played_by": ep.played_by,
                "seed": ep.seed,
                "bytes": len(data),
                "blake2b": _checksum(data),
            }
        )
        self.manifest["updated"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        _write_atomic(self.path / MANIFEST, json.dumps(self.manifest, indent=1).encode())
        return self.path / name


def read_manifest(path: str | Path) -> dict:
    """The manifest of the dataset at ``path``, its keys and types checked (episode files are not read)."""
    file = Path(path) / MANIFEST
    expect(Path(path).is_dir(), path, "no such dataset directory")
    expect(file.is_file(), file, "missing: not a demonstration dataset (mqttrl record writes one)")
    try:
        manifest = json.loads(file.read_bytes(), parse_constant=_no_constant)
    except (OSError, ValueError) as e:
        raise DatasetError(file, f"not readable JSON ({e})") from None
    expect(isinstance(manifest, dict), file, "is not a JSON object")
    expect(manifest.get("format") == FORMAT, file, f"format is {manifest.get('format')!r}, expected {FORMAT!r}")
    expect(
        manifest.get("version") == VERSION, file, f"version {manifest.get('version')!r}; this mqttrl reads {VERSION}"
    )
    field(manifest, "env_id", str, file)
    field(manifest, "env_kwargs", dict, file)
    for key in ("observation_space", "action_space"):
        try:
            space_from_json(manifest.get(key))
        except SpaceError as e:
            raise DatasetError(file, f"{key}: {e}") from None
    for i, ep in enumerate(field(manifest, "episodes", list, file)):
        where = f"episode {i}: "
        name = field(ep, "file", str, file, where)
        expect(
            name.startswith("episodes/") and ".." not in name and "\\" not in name,
            file,
            f"{where}file {name!r} is outside episodes/",
        )
        steps = field(ep, "steps", int, file, where)
        expect(1 <= steps <= MAX_EPISODE_STEPS, file, f"{where}steps = {steps}, allowed 1..{MAX_EPISODE_STEPS}")
        field(ep, "return", (float, int), file, where)
        field(ep, "terminated", bool, file, where)
        field(ep, "truncated", bool, file, where)
        field(ep, "played_by", str, file, where)
        expect(field(ep, "bytes", int, file, where) > 0, file, f"{where}bytes must be positive")
        field(ep, "blake2b", str, file, where)
    return manifest


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def read_dataset(path: str | Path, max_bytes: int = DEFAULT_MAX_BYTES) -> Dataset:
    """Every episode of the dataset at ``path``, each checked; DatasetError (one line) on the first problem."""
    from safetensors.numpy import load

    path = Path(path)
    manifest = read_manifest(path)
    obs_space = space_from_json(manifest["observation_space"])
    act_space = space_from_json(manifest["action_space"])
    entries = manifest["episodes"]
    expect(len(entries) > 0, path / MANIFEST, "lists no episodes")
    total = sum(e["bytes"] for e in entries)
    expect(total <= max_bytes, path / MANIFEST, f"episodes take {total} bytes, more than the {max_bytes} allowed")
    episodes = []
    for entry in entries:
        file = path / entry["file"]
        try:
            data = file.read_bytes()
        except OSError as e:
            raise DatasetError(file, f"cannot be read ({e.strerror or e})") from None
        expect(len(data) >= entry["bytes"], file, f"truncated: {len(data)} of {entry['bytes']} bytes")
        expect(len(data) == entry["bytes"], file, f"{len(data)} bytes, the manifest says {entry['bytes']}")
        expect(_checksum(data) == entry["blake2b"], file, "corrupt: its checksum differs from the manifest's")
        try:
            arrays = load(data)
        except Exception as e:  # safetensors' SafetensorError and friends: not a safetensors file
            raise DatasetError(file, f"not a safetensors file ({type(e).__name__}: {e})") from None
        check_episode_arrays(arrays, entry["steps"], obs_space, act_space, file)
        ep = Episode(
            obs=arrays["obs"],
            actions=arrays["actions"],
            rewards=arrays["rewards"],
            terminated=entry["terminated"],
            truncated=entry["truncated"],
            played_by=entry["played_by"],
            seed=entry.get("seed") if isinstance(entry.get("seed"), int) else None,
        )
        ret = float(entry["return"])
        expect(
            abs(ep.episode_return - ret) <= 1e-3 * max(1.0, abs(ret)),
            file,
            f"rewards sum to {ep.episode_return:.4f}, the manifest says {ret:.4f}",
        )
        episodes.append(ep)
    return Dataset(path, manifest["env_id"], manifest["env_kwargs"], obs_space, act_space, episodes, manifest)


def check_fits(dataset: Dataset, observation_space: gym.Space, action_space: gym.Space) -> None:
    """DatasetError unless the dataset was recorded in these spaces (a run's env)."""
    from mqttrl.envs.spaces import same_space

    file = dataset.path / MANIFEST
    expect(
        same_space(dataset.observation_space, observation_space),
        file,
        f"observation space {dataset.observation_space} differs from the run's {observation_space}",
    )
    expect(
        same_space(dataset.action_space, action_space),
        file,
        f"action space {dataset.action_space} differs from the run's {action_space}",
    )


def read_for_run(settings, observation_space: gym.Space, action_space: gym.Space) -> Dataset:
    """The dataset a run's ``[demos]`` section names, whole and recorded in the run's spaces, or
    DatasetError (one line)."""
    dataset = read_dataset(settings.path, max_bytes=int(settings.max_mb * 1024 * 1024))
    check_fits(dataset, observation_space, action_space)
    return dataset


def summary(dataset: Dataset) -> dict[str, Any]:
    """Figures for a log line or ``summary.json``: episodes, steps, mean return, who played."""
    r = dataset.returns
    return {
        "path": str(dataset.path),
        "episodes": len(dataset.episodes),
        "steps": dataset.steps,
        "mean_return": float(np.mean(r)),
        "played_by": sorted({ep.played_by for ep in dataset.episodes}),
    }


def check_run_demos(config) -> Dataset:
    """What the learner will do with a run config's ``[demos]``, done up front (``mqttrl train``): the
    algorithm learns from demonstrations, the dataset reads whole, in the spaces of the run's env."""
    from mqttrl.config import ConfigError
    from mqttrl.envs.make import make_env
    from mqttrl.plugin.manager import get_registry

    registry = get_registry()
    if registry.algorithm(config.algorithm.name).learn_from_demos is None:
        raise ConfigError(
            f"demos.path is set, but algorithm {config.algorithm.name!r} does not learn from demonstrations"
        )
    from mqttrl.envs.spec import spec_of_config

    spec = spec_of_config(config)  # the run's spec: the game need not be here
    if spec is not None:
        return read_for_run(config.demos, *spec.spaces)
    env = make_env(config.env.id, config.env.kwargs, registry)
    try:
        return read_for_run(config.demos, env.observation_space, env.action_space)
    finally:
        env.close()
