"""Where a worker's network runs (its backend) and the actor over it.

``worker.inference`` picks the forward: ``"auto"`` is the algorithm's preferred backend (the
built-ins: numpy, no torch needed and faster for small MLPs), ``"torch"`` or ``"numpy"`` that
backend, ``"remote"`` the central inference servers (:class:`RemoteForward`). The actor is the
algorithm's, over that forward; a sync-mode algorithm's must be a :class:`SyncActor`.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs
import gymnasium as gym

from mqttrl.config import RunConfig
from mqttrl.nodes.worker.remote_forward import RemoteForward
from mqttrl.plugin.algorithm import Actor, ActorContext, AlgorithmInfo, Forward, SyncActor
from mqttrl.transport.client import BrokerSettings


@attrs.define
class WorkerPolicy:
    backend: str
    forward: Forward
    actor: Actor
    #: the forward when it is the central inference servers' client (told the model version to ask for)
    remote: RemoteForward | None = None


def choose_backend(info: AlgorithmInfo, inference: str) -> str:
    """``worker.inference`` as a backend this algorithm offers (a RuntimeError naming them if not)."""
    if inference == "auto":
        return info.backends[0]
    if inference != "remote" and inference not in info.backends:
        raise RuntimeError(
            f"algorithm {info.name!r} offers no {inference} forward; "
            f"use worker.inference = one of {', '.join(info.backends)} or remote"
        )
    return inference


def make_worker_policy(
    cfg: RunConfig,
    info: AlgorithmInfo,
    obs_space: gym.Space,
    act_space: gym.Space,
    ctx: ActorContext,
    remote_as: tuple[BrokerSettings, str, str, Callable[[], None]],
) -> WorkerPolicy:
    """The forward and the actor over it. ``remote_as``: the broker, run and worker name a remote
    forward logs in with, and what it calls while it waits (the worker's heartbeat)."""
    backend = choose_backend(info, cfg.worker.inference)
    remote: RemoteForward | None = None
    forward: Forward
    if backend == "remote":
        broker, run, name, on_timeout = remote_as
        ic = cfg.inference
        remote = RemoteForward(broker, run, name, timeout_s=ic.timeout_s, retries=ic.retries, on_timeout=on_timeout)
        forward = remote
    else:
        if backend == "torch":
            import torch

            torch.set_num_threads(cfg.worker.torch_threads)
        forward = info.make_forward(cfg.algorithm.params, obs_space, act_space, backend, ctx.seed)
    actor = info.make_actor(cfg.algorithm.params, obs_space, act_space, ctx, forward)
    if info.mode == "sync" and not isinstance(actor, SyncActor):
        raise TypeError(f"algorithm {info.name!r} runs in sync mode but its actor is not a SyncActor")
    return WorkerPolicy(backend, forward, actor, remote)
