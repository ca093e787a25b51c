"""Seeding and RNG state capture for checkpoints (JSON + tensors, no pickle)."""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

import numpy as np


def seed_everything(seed: int) -> None:
    import torch

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def rng_state() -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Python and numpy global state as JSON, torch's as a uint8 tensor."""
    import torch

    version, internal, gauss = random.getstate()
    np_state = np.random.get_state()
    meta = {
        "python": [version, list(internal), gauss],
        "numpy": [np_state[0], np_state[2], np_state[3], np_state[4]],
    }
    tensors = {"rng/numpy_keys": np.asarray(np_state[1], dtype=np.uint32), "rng/torch": torch.get_rng_state().numpy()}
    return meta, tensors


def restore_rng(meta: Mapping[str, Any], tensors: Mapping[str, np.ndarray]) -> None:
    import torch

    if "python" in meta:
        version, internal, gauss = meta["python"]
        random.setstate((version, tuple(internal), gauss))
    if "numpy" in meta and "rng/numpy_keys" in tensors:
        name, pos, has_gauss, cached = meta["numpy"]
        np.random.set_state((name, tensors["rng/numpy_keys"], pos, has_gauss, cached))
    if "rng/torch" in tensors:
        torch.set_rng_state(torch.from_numpy(np.array(tensors["rng/torch"], dtype=np.uint8)))


def rng_to_json(state: Any) -> Any:
    """A numpy bit-generator state with its big integers as strings (JSON-safe everywhere)."""
    if isinstance(state, dict):
        return {k: rng_to_json(v) for k, v in state.items()}
    if isinstance(state, (int, np.integer)) and not isinstance(state, bool):
        return str(int(state))
    return state


def rng_from_json(state: Any) -> Any:
    if isinstance(state, dict):
        return {k: rng_from_json(v) for k, v in state.items()}
    if isinstance(state, str) and state.lstrip("-").isdigit():
        return int(state)
    return state


def generator_to_json(rng: np.random.Generator) -> dict[str, Any]:
    """A numpy ``Generator``'s state, JSON-safe (:func:`rng_to_json`); :func:`generator_from_json` restores it."""
    return rng_to_json(rng.bit_generator.state)


def generator_from_json(rng: np.random.Generator, state: Any) -> None:
    """Restore ``rng`` to a state :func:`generator_to_json` wrote."""
    rng.bit_generator.state = rng_from_json(state)
