"""``mqttrl-learner --init-from``: a new run's training starts from an earlier model.

The source is a run directory (its ``best/``, else ``checkpoints/best/``, else the newest
checkpoint), a ``best/`` or checkpoint folder, or a weights file (``weights.safetensors``, the
learner's weights message). Only safetensors and JSON are read (no pickle, no ``torch.load``).

The policy's weights (the layout ``export_weights`` gives) are placed into the learner through
the algorithm contract alone: the learner's own ``state_dict`` names each network's tensors
``<net>.<name>`` (DQN's ``online.`` and ``target.``, PPO's ``agent.``) or ``<name>``, so every
tensor whose name is a policy weight's, bare or under one prefix, takes that weight; then
``load_state_dict``. The optimizer, counters and replay stay fresh: it is a new run.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from mqttrl.config import ConfigError
from mqttrl.plugin.algorithm import FLEET_PROGRESS_KEY, INGESTED_KEY, UPDATES_KEY
from mqttrl.state.checkpoint import CheckpointError, CheckpointStore, read_checkpoint

WEIGHTS_FILE = "weights.safetensors"
#: info keys that describe training progress, not the network's shape
_PROGRESS_KEYS = {"round", FLEET_PROGRESS_KEY, INGESTED_KEY, UPDATES_KEY}


class InitFromError(ConfigError):
    """The --init-from source cannot start this run (missing, unreadable, another algorithm or shape)."""


@attrs.frozen
class SourceModel:
    """A policy's weights as ``export_weights`` gives them, and where they came from."""

    tensors: dict[str, np.ndarray]
    info: dict[str, Any]
    algorithm: str
    #: one phrase for the log: the file, its run and model version
    origin: str


def _is_checkpoint(d: Path) -> bool:
    return (d / "meta.json").is_file() and (d / "state.safetensors").is_file()


def _resolve(path: Path) -> Path:
    """The weights file or checkpoint folder ``path`` names."""
    if path.is_file():
        return path
    if not path.is_dir():
        raise InitFromError(f"--init-from {path}: no such file or directory")
    for candidate in (path / WEIGHTS_FILE, path / "best" / WEIGHTS_FILE):
        if candidate.is_file():  # best/ or checkpoints/best/: the exact weights that were judged
            return candidate
    if _is_checkpoint(path):
        return path
    ckpts = path / "checkpoints" if (path / "checkpoints").is_dir() else path
    if (ckpts / "best" / WEIGHTS_FILE).is_file():
        return ckpts / "best" / WEIGHTS_FILE
    latest = CheckpointStore(ckpts).latest()
    if latest is not None and _is_checkpoint(latest):
        return latest
    raise InitFromError(
        f"--init-from {path}: holds no model (expected a run directory, a best/ or checkpoint folder, "
        f"or a {WEIGHTS_FILE} file)"
    )


def _read_weights_file(file: Path) -> SourceModel:
    from mqttrl.wire import Rejected, decode_weights

    try:
        w = decode_weights(file.read_bytes())
    except OSError as e:
        raise InitFromError(f"--init-from {file}: cannot read it ({e})") from None
    except Rejected as r:
        raise InitFromError(f"--init-from {file}: not an mqttrl weights file ({r})") from None
    origin = f"{file} (model version {w.version} of run {w.run!r})"
    return SourceModel({k: np.asarray(v) for k, v in w.tensors.items()}, dict(w.info), w.algorithm, origin)


def _read_checkpoint_weights(d: Path, registry: Any) -> SourceModel:
    try:
        tensors, meta = read_checkpoint(d)
    except CheckpointError as e:
        raise InitFromError(f"--init-from: {e}") from None
    algo_meta = meta.get("algo") if isinstance(meta.get("algo"), dict) else {}
    config = meta.get("config") if isinstance(meta.get("config"), dict) else {}
    name = (config.get("algorithm") or {}).get("name") or algo_meta.get("algorithm")
    info = registry.algorithm(str(name))
    if info.weights_from_checkpoint is None:
        raise InitFromError(
            f"--init-from {d}: algorithm {name!r} cannot read a checkpoint's weights; use a {WEIGHTS_FILE}"
        )
    state = {k[len("algo/") :]: v for k, v in tensors.items() if k.startswith("algo/")}
    try:
        policy, policy_info = info.weights_from_checkpoint(state, algo_meta)
    except (KeyError, TypeError, ValueError) as e:
        raise InitFromError(f"--init-from {d}: holds no {name} policy ({e})") from None
    version = (meta.get("node") or {}).get("version")
    origin = f"{d} (model version {version} of run {config.get('run')!r})"
    return SourceModel(dict(policy), dict(policy_info), str(name), origin)


def read_source(path: Path, registry: Any) -> SourceModel:
    """The model ``path`` names (see the module docstring); InitFromError: one line saying why not."""
    found = _resolve(Path(path))
    if found.is_file():
        return _read_weights_file(found)
    return _read_checkpoint_weights(found, registry)


def _canonical(x: Any) -> Any:
    return json.loads(json.dumps(x, default=str))


def check_fits(source: SourceModel, algorithm: str, own: Mapping[str, np.ndarray], own_info: Mapping) -> None:
    """Raise InitFromError unless ``source`` is a model of ``algorithm`` with the same network."""
    if source.algorithm != algorithm:
        raise InitFromError(f"--init-from {source.origin}: a {source.algorithm} model; this run trains {algorithm}")
    missing, unexpected = sorted(set(own) - set(source.tensors)), sorted(set(source.tensors) - set(own))
    if missing or unexpected:
        raise InitFromError(
            f"--init-from {source.origin}: another network (missing {missing[:4]}, unexpected {unexpected[:4]})"
        )
    for name, ref in own.items():
        got = tuple(np.shape(source.tensors[name]))
        if got != tuple(np.shape(ref)):
            raise InitFromError(
                f"--init-from {source.origin}: another network shape: {name} is {got}, this run's is {tuple(np.shape(ref))}"
            )
    mine, theirs = _canonical(dict(own_info)), _canonical(source.info)
    differ = sorted(k for k in set(mine) & set(theirs) - _PROGRESS_KEYS if mine[k] != theirs[k])
    if differ:
        changes = ", ".join(f"{k}={theirs[k]!r} (this run: {mine[k]!r})" for k in differ[:4])
        raise InitFromError(f"--init-from {source.origin}: another network: {changes}")


def _policy_name(state_name: str, policy: Mapping[str, Any]) -> str | None:
    """The policy weight a learner-state tensor holds: the same name, or the name under one prefix."""
    if state_name in policy:
        return state_name
    _, dot, rest = state_name.partition(".")
    return rest if dot and rest in policy else None


def load_into(learner: Any, source: SourceModel, algorithm: str) -> int:
    """Put ``source``'s weights into every network of ``learner`` (target networks too); returns the
    tensors replaced. Checks first (InitFromError), so a refused source changes nothing."""
    own, own_info = learner.export_weights()
    check_fits(source, algorithm, own, own_info)
    state, meta = learner.state_dict(include_replay=False)
    placed: set[str] = set()
    new_state = dict(state)
    for name, current in state.items():
        policy_name = _policy_name(name, own)
        if policy_name is not None:
            new_state[name] = np.array(source.tensors[policy_name], dtype=np.asarray(current).dtype)
            placed.add(policy_name)
    if placed != set(own):
        raise InitFromError(
            f"--init-from: the {algorithm} learner's state does not name its policy weights "
            f"{sorted(set(own) - placed)[:4]}; this algorithm cannot start from a model"
        )
    learner.load_state_dict(new_state, meta)
    return len([n for n in state if _policy_name(n, own) is not None])
