"""The worker's envs as its game PC has them: made (the game launched first), paced, placed.

What :class:`~mqttrl.nodes.worker.node.WorkerNode` builds before it plays, kept apart from the
node shell (MQTT, heartbeats, weights): the env set (an :class:`EnvSet`, or a
:class:`RealTimeEnvSet` on the run's control clock), the game process it launched (``[env]
launch``), the control periods' statistics and the control thread's priority, and the actor's
place in the fleet (its seeds and Ape-X ladder slots).
"""

from __future__ import annotations

import sys
import threading
import zlib
from collections.abc import Callable

import attrs
import gymnasium as gym

from mqttrl.config import RunConfig
from mqttrl.envs.launch import GameProcess, LaunchSettings
from mqttrl.envs.launched import LaunchedEnv
from mqttrl.envs.make import make_env
from mqttrl.envs.realtime import (
    RealTimeEnvSet,
    obs_timeout,
    real_time_settings,
    with_action_history,
    with_game_speed,
)
from mqttrl.envs.realtime_clock import ControlClock, ThreadPriority
from mqttrl.envs.rollout import EnvSet
from mqttrl.observe.timing import PeriodStats
from mqttrl.plugin.algorithm import ActorContext
from mqttrl.plugin.manager import get_registry

#: the interpreter's thread switch interval in a real-time worker (Python's default is 5 ms): the
#: control thread waking from its sleep waits for the GIL while another thread (the MQTT client's,
#: receiving a model) holds it, up to this long
REALTIME_SWITCH_INTERVAL_S = 0.0005


@attrs.define
class WorkerEnvs:
    """What :func:`make_worker_envs` built."""

    envs: EnvSet
    ctx: ActorContext
    #: the game this worker launched (``[env] launch``), None when it is started by hand
    game: GameProcess | None = None
    #: real time (``[env] control_hz``): the control periods' errors, and the control thread's priority
    period_stats: PeriodStats | None = None
    priority: ThreadPriority | None = None


def make_worker_envs(
    cfg: RunConfig,
    name: str,
    index: int | None,
    stop: threading.Event,
    num_envs: int | None = None,
    seed: int | None = None,
) -> WorkerEnvs:
    """The envs of worker ``name`` (``--index index``): ``num_envs`` (default the run's), seeded from
    ``seed`` (default from the run's seed and the worker's place); with ``[env] launch`` the game is
    started first and again whenever an env fails (``stop`` ends a wait for it)."""
    num_envs = num_envs or cfg.env.num_envs
    # without --index, the name decides: game PCs started the same way still differ
    name_hash = zlib.crc32(name.encode())
    place = index if index is not None else name_hash % 1_000_003
    seed = seed if seed is not None else cfg.train.seed * 1000 + place * 97
    registry = get_registry()

    def make_here() -> gym.Env:
        return with_game_speed(make_env(cfg.env.id, cfg.env.kwargs, registry), cfg.env)

    game, made, on_restart = _launched(cfg, num_envs, make_here, stop)
    make = lambda: with_action_history(made(), cfg.env)  # noqa: E731
    ctx = _actor_context(cfg, index, num_envs, seed, name_hash)
    rt = real_time_settings(cfg.env)
    try:
        if rt is None:
            return WorkerEnvs(EnvSet(make, num_envs, seed, env_id=cfg.env.id, on_restart=on_restart), ctx, game)
        stats = PeriodStats()
        sys.setswitchinterval(REALTIME_SWITCH_INTERVAL_S)
        envs = RealTimeEnvSet(
            make,
            num_envs,
            seed,
            env_id=cfg.env.id,
            make_clock=lambda: ControlClock(**rt, stats=stats, spin_s=cfg.worker.realtime_spin_s),
            obs_timeout_s=obs_timeout(cfg.env),
            on_restart=on_restart,
        )
        return WorkerEnvs(
            envs, ctx, game, stats, ThreadPriority(cfg.worker.realtime_priority, slice_s=cfg.worker.realtime_slice_s)
        )
    except BaseException:  # the game it launched does not outlive envs that could not be made
        if game is not None:
            game.close()
        raise


def _launched(
    cfg: RunConfig, num_envs: int, make: Callable[[], gym.Env], stop: threading.Event
) -> tuple[GameProcess | None, Callable[[], gym.Env], Callable[[int, str], None] | None]:
    """With ``[env] launch``: the game process, ``make`` once the game is up (a game over starts a new
    game: :class:`LaunchedEnv`), and the env set's restart hook that starts the game again after a
    crash (mqttrl.envs.launch); else no game and ``make`` as it is."""
    settings = LaunchSettings.of(cfg.env, num_envs)
    if settings is None:
        return None, make, None
    game = GameProcess(settings, sleep=stop.wait, stopping=stop.is_set)

    def relaunch(i: int, error: str) -> None:
        game.relaunch(f"env {i} failed: {error}" if error else f"env {i} failed")

    return game, (lambda: LaunchedEnv(game, make)), relaunch


def _actor_context(cfg: RunConfig, index: int | None, num_envs: int, seed: int, name_hash: int) -> ActorContext:
    """Where this worker's envs sit in the fleet: ``--index`` pins their ladder slots; without it
    they spread over a ladder of their own, phased by the worker's name."""
    if index is None:
        return ActorContext(num_envs=num_envs, total_envs=num_envs, seed=seed, ladder_phase=name_hash / 2**32)
    return ActorContext(
        num_envs=num_envs,
        first_env_index=index * num_envs,
        total_envs=max(cfg.train.workers, index + 1) * num_envs,
        seed=seed,
    )
