"""What the learner trains, made before it connects, in the order a failure should stop it.

The env's spaces (its spec, or the env made once), torch and the device, the algorithm's learner
and the core that drives it (a new epoch), its networks loaded from ``--init-from``; after a
resume, the demonstrations. Each mistake is one line (ConfigError exit 2, MissingDependency
exit 5), never a traceback.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import attrs
import gymnasium as gym

from mqttrl.config import ConfigError, RunConfig
from mqttrl.envs.fit import check_fit, spaces_of_run
from mqttrl.nodes.learner.core import LearnerCore, LearnerRules
from mqttrl.nodes.learner.device import describe_device, resolve_device
from mqttrl.observe.timing import BlockTimes
from mqttrl.plugin.algorithm import AlgorithmInfo, LearnerContext, takes_context
from mqttrl.plugin.manager import MissingDependency
from mqttrl.state.init_from import load_into, read_source
from mqttrl.state.rng import seed_everything
from mqttrl.wire import check_compression

log = logging.getLogger("mqttrl.learner")

#: the core's clock: worker liveness and round ages are measured on it
clock = time.monotonic


@attrs.define
class Training:
    """The algorithm's learner over the run's spaces, on its device, and the core that drives it."""

    info: AlgorithmInfo
    obs_space: gym.Space
    act_space: gym.Space
    device: Any
    spec: Any
    algo: Any
    core: LearnerCore


def set_up_training(config: RunConfig, registry: Any, blocks: BlockTimes) -> Training:
    """The spaces, torch and the device, the learner and its core in a new epoch."""
    info = registry.algorithm(config.algorithm.name)
    obs_space, act_space = env_spaces(config, registry)
    device = set_up_torch(config)
    params = config.algorithm.params
    spec = info.sample_spec(params, obs_space, act_space)
    make = info.make_learner
    context = LearnerContext(device, config.train.seed, blocks.timed, log)
    extra = {"context": context} if takes_context(make) else {}  # an older plugin: called as before
    algo = make(params, obs_space, act_space, device, config.train.seed, **extra)
    core = LearnerCore.create(LearnerRules.from_config(config), spec, info.mode, algo, clock())
    # a new epoch per learner process: its weights win over any earlier learner's, even at a lower version
    core.epoch = time.time_ns() // 1_000_000
    return Training(info, obs_space, act_space, device, spec, algo, core)


def env_spaces(config: RunConfig, registry: Any) -> tuple[gym.Space, gym.Space]:
    """The run's env's spaces: its spec (``env.spec``; :mod:`.env_spec` sets it) or, without one, the env
    made once and closed; checked against the algorithm. An unknown env id or an algorithm that cannot
    act in it is a ConfigError (exit 2), a missing package a MissingDependency (exit 5), each one line."""
    spaces = spaces_of_run(config, registry)
    check_fit(config.algorithm.name, config.algorithm.params, config.env.id, spaces, registry)
    return spaces


def set_up_torch(config: RunConfig) -> Any:
    """torch, the device (one line if it cannot be used), the seed and the thread count; the device."""
    torch = import_torch()
    lc = config.learner
    try:
        device = resolve_device(lc.device, torch)
        check_compression(config.worker.compression)  # the workers' batches must decompress here
    except (ConfigError, ValueError) as e:  # one line, exit 2 (docs/cli.md)
        raise ConfigError(str(e)) from None
    log.info("learner device: %s (learner.device = %r)", describe_device(device, torch), lc.device)
    seed_everything(config.train.seed)
    torch.set_num_threads(lc.torch_threads)
    return device


def import_torch() -> Any:
    """torch, which only the learner needs; its absence is one line saying what to install."""
    try:
        import torch
    except ImportError:  # one line, exit 5 (docs/cli.md)
        raise MissingDependency(
            "the learner needs torch: pip install 'mqttrl[learner]' "
            "(on a CPU-only machine: pip install torch==<version> first, or the CPU wheel index)"
        ) from None
    return torch


def init_from(algo: Any, path: Path, registry: Any, algorithm: str) -> str:
    """A new run from an earlier model: its weights in every network before the first update (the
    run's first published version); where they came from. InitFromError (one line, exit 2) when
    they do not fit."""
    source = read_source(path, registry)
    load_into(algo, source, algorithm)
    log.info("initialised the %s networks from %s", algorithm, source.origin)
    return source.origin


def take_demos(config: RunConfig, training: Training, fresh: bool) -> None:
    """``demos.path``: the demonstration dataset, read whole and checked against the run's spaces,
    handed to the algorithm (``AlgorithmInfo.learn_from_demos``) before any sample; pretraining only
    in a new run (``fresh``), not a resumed one. A dataset that cannot be used, or an algorithm that
    does not learn from demonstrations, stops the learner with one line (a ConfigError, exit 2)."""
    settings = config.demos
    if not settings.path:
        return
    if training.info.learn_from_demos is None:
        raise ConfigError(
            f"demos.path is set, but algorithm {config.algorithm.name!r} does not learn from demonstrations"
        )
    from mqttrl.demos.dataset import read_for_run

    dataset = read_for_run(settings, training.obs_space, training.act_space)
    started = time.monotonic()
    figures = training.info.learn_from_demos(training.algo, dataset, settings, fresh)
    log.info(
        "demonstrations: %s; %s (%.1f s)",
        dataset.describe(),
        ", ".join(f"{k} {v:g}" for k, v in figures.items()),
        time.monotonic() - started,
    )
