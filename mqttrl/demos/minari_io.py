"""Minari (the Farama Foundation's format for offline RL datasets) in and out of mqttrl datasets.

``pip install -e '.[minari]'`` (minari with its HDF5 storage: h5py; no pickle: Minari keeps spaces
as JSON and episodes as HDF5 arrays). Export writes a Minari dataset under Minari's data folder
(``MINARI_DATASETS_PATH``, default ``~/.minari/datasets``) with ``minari.create_dataset_from_buffers``;
import reads one (by its id in that folder, or a path to its folder) episode by episode and writes
an mqttrl dataset, so every episode goes through the same checks as a recording (dtypes, shapes,
NaN, actions in the space) and then the whole dataset is read back as ``--demos`` would read it.
A dataset Minari cannot open (a corrupt HDF5 file) is one :class:`DatasetError` line.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

from .dataset import Dataset, DatasetWriter, read_dataset
from .episode import Episode, EpisodeBuilder
from .validate import DatasetError


def _minari():
    try:
        import minari
    except ImportError:
        raise DatasetError("minari", "the Python package minari is not installed: pip install -e '.[minari]'") from None
    return minari


def to_minari(dataset: Dataset, dataset_id: str, author: str | None = None) -> Path:
    """Write ``dataset`` as the Minari dataset ``dataset_id`` (e.g. ``"mqttrl/lunarlander/heuristic-v0"``);
    returns its folder."""
    minari = _minari()
    from minari.data_collector import EpisodeBuffer

    buffers = [
        EpisodeBuffer(
            id=i,
            seed=ep.seed,
            observations=list(ep.obs),
            actions=list(ep.actions),
            rewards=ep.rewards.astype(np.float64).tolist(),
            terminations=[False] * (ep.steps - 1) + [bool(ep.terminated)],
            truncations=[False] * (ep.steps - 1) + [bool(ep.truncated and not ep.terminated)],
        )
        for i, ep in enumerate(dataset.episodes)
    ]
    players = sorted({ep.played_by for ep in dataset.episodes if ep.played_by})
    import gymnasium as gym

    env = dataset.env_id if dataset.env_id in gym.registry else None  # Minari makes the env from its id
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # Minari's nags about optional fields (author, permalink)
            out = minari.create_dataset_from_buffers(
                dataset_id,
                buffers,
                env=env,
                eval_env=env,
                algorithm_name=", ".join(players) or None,
                author=author,
                observation_space=dataset.observation_space,
                action_space=dataset.action_space,
                description=f"exported by mqttrl from {dataset.path}",
                data_format="hdf5",
            )
    except Exception as e:  # Minari's ValueError for an id that exists, a bad id, ...
        raise DatasetError(dataset_id, f"Minari cannot write it ({type(e).__name__}: {e})") from None
    return Path(out.storage.data_path).parent


def _open(source: str):
    minari = _minari()
    try:
        if Path(source).exists():
            data = Path(source) / "data" if (Path(source) / "data").is_dir() else Path(source)
            return minari.MinariDataset(data)
        return minari.load_dataset(source)
    except Exception as e:  # h5py's OSError for a corrupt file, Minari's FileNotFoundError / ValueError
        raise DatasetError(source, f"Minari cannot open it ({type(e).__name__}: {e})") from None


def from_minari(source: str, out: str | Path, env_id: str | None = None, append: bool = False) -> Dataset:
    """The Minari dataset ``source`` (an id in Minari's data folder, or a path) as an mqttrl dataset at
    ``out``, read back whole; ``env_id`` when the Minari dataset names no env."""
    md = _open(source)
    spec = md.env_spec
    env = env_id or (spec.id if spec is not None else None)
    if env is None:
        raise DatasetError(source, "the Minari dataset names no env; give its env id")
    writer = DatasetWriter(out, env, md.observation_space, md.action_space, {}, append)
    builder = EpisodeBuilder(md.observation_space, md.action_space, played_by=f"minari:{md.spec.dataset_id}")
    try:
        for ep in md.iterate_episodes():
            writer.add(_episode(builder, ep, source))
    except DatasetError:
        raise
    except Exception as e:  # a truncated or corrupt HDF5 file found while reading episodes
        raise DatasetError(source, f"Minari cannot read its episodes ({type(e).__name__}: {e})") from None
    return read_dataset(out)


def _episode(builder: EpisodeBuilder, ep, source: str) -> Episode:
    obs, actions = np.asarray(ep.observations), np.asarray(ep.actions)
    rewards = np.asarray(ep.rewards, dtype=np.float64)
    T = len(rewards)
    if T == 0 or len(obs) != T + 1 or len(actions) != T:
        raise DatasetError(source, f"episode {ep.id} has {len(obs)} observations, {len(actions)} actions, {T} rewards")
    builder.start(obs[0], None)
    done = None
    for t in range(T):
        last = t == T - 1
        done = builder.step(actions[t], rewards[t], obs[t + 1], last and bool(ep.terminations[t]), last)
    return done
