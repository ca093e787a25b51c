"""Where the learner gets the run's env spec: its config, the env made here, or a worker.

A learner on a GPU box has no game, no display and maybe not the game's extras. In order:

1. ``env.spec`` of its config (``mqttrl train`` writes it; a resumed run's ``config.json`` has it;
   a user may declare it): the env is never made.
2. The env made here, when it can be (a simulator such as CartPole installed on the learner host).
3. Otherwise (the env cannot be made here: no display, a package or plugin that lives only on the
   game PCs) it publishes the run's config and a "waiting" state, retained, so that workers can
   start, and waits for the spec the first worker publishes on ``mqttrl/<run>/env_spec``, saying
   once what it waits for and why (and again every 30 s).

An env id that is wrong wherever it runs (``CartPole-v9``; ``atari/Pnog``, which the installed Atari
plugin refuses) still ends the learner at once (exit 2).
"""

from __future__ import annotations

import logging
import os
import queue
import socket
import threading
import time
from typing import Any

from mqttrl import PROTOCOL_VERSION, __version__
from mqttrl.config import RunConfig
from mqttrl.envs.fit import run_spaces
from mqttrl.envs.make import UnknownEnvError
from mqttrl.envs.spec import EnvSpec, SpecError, made_by, spec_of_config, with_spec
from mqttrl.transport.client import BrokerSettings, MqttClient, Outgoing
from mqttrl.transport.topics import Topics
from mqttrl.wire import decode_json, encode_json
from mqttrl.wire.states import LearnerState

log = logging.getLogger("mqttrl.learner")

#: how often the learner repeats what it waits for
NOTE_EVERY_S = 30.0


def spec_made_here(config: RunConfig, registry: Any) -> tuple[EnvSpec | None, str]:
    """The spec of the env made on this host, or None and why it cannot be made here. An env id that
    is wrong everywhere raises (UnknownEnvError, exit 2). A game its workers launch (``env.launch``)
    is not started here."""
    if config.env.launch:
        return None, "its workers launch the game (env.launch)"
    try:
        obs, act = run_spaces(config.env, registry, launch=False)
    except UnknownEnvError as e:
        if e.anywhere:
            raise
        return None, str(e)
    except Exception as e:  # no display, the game's package or plugin only on the game PCs, no game
        return None, f"{type(e).__name__}: {e}"
    return EnvSpec(obs, act, config.env.id, made_by("learner")), ""


def learner_config(config: RunConfig, broker: BrokerSettings, registry: Any, stop: threading.Event) -> RunConfig | None:
    """``config`` with its env spec (see the module docstring); None when stopped while waiting."""
    if spec_of_config(config) is not None:
        return config
    spec, why = spec_made_here(config, registry)
    if spec is None:
        spec = wait_for_spec(config, broker, why, stop)
        if spec is None:
            return None
    return with_spec(config, spec)


def _waiting_state(config: RunConfig, reason: str) -> bytes:
    """The learner's state while it waits: what `mqttrl status` and telemetry show."""
    return LearnerState(
        status="waiting",
        reason=reason,
        run=config.run,
        algorithm=config.algorithm.name,
        model_version=-1,
        epoch=0,
        updates=0,
        host=socket.gethostname(),
        pid=os.getpid(),
        mqttrl=__version__,
        protocol=PROTOCOL_VERSION,
        time=time.time(),
    ).encode()


def wait_for_spec(config: RunConfig, broker: BrokerSettings, why: str, stop: threading.Event) -> EnvSpec | None:
    """Clear a spec an earlier run of this name left retained (it may be another game's), publish the
    run's config and a waiting state (retained), then wait for the spec a worker publishes for it.
    One client publishes all three in order, so a worker that reads this config publishes after the clear."""
    topics = Topics(config.run)
    reason = "waiting for the env spec a worker publishes"
    client = MqttClient(
        broker,
        client_id=f"mqttrl-learner-{config.run}-spec",
        subscriptions=[(topics.env_spec, 1)],
        will=Outgoing(topics.learner_state, _waiting_state(config, "connection lost"), 1, True, "state"),
    )
    client.start(wait=30)
    client.publish(topics.env_spec, b"", 1, True, "env_spec")  # an empty retained message deletes it
    client.publish(topics.config, encode_json(config.to_dict()), 1, True, "config")
    client.publish(topics.learner_state, _waiting_state(config, reason), 1, True, "state")
    note = (
        f"env {config.env.id!r} cannot be made on this host ({why}); waiting for a worker of run {config.run!r} "
        f"to publish its spec on {topics.env_spec} (or declare env.spec: `mqttrl env-spec CONFIG` on a game PC)"
    )
    log.warning("%s", note)
    last_note = time.monotonic()
    try:
        while not stop.is_set():
            try:
                msg = client.inbox.get(timeout=0.25)
            except queue.Empty:
                if time.monotonic() - last_note > NOTE_EVERY_S:
                    last_note = time.monotonic()
                    log.warning("still waiting for the env spec of run %r on %s", config.run, topics.env_spec)
                continue
            if not msg.payload:  # the clear above, or another learner's
                continue
            try:
                spec = EnvSpec.from_json(decode_json(msg.payload), where=msg.topic)
            except (SpecError, ValueError) as e:  # refused, counted in the log, never fatal
                log.warning("refused an env spec on %s: %s", msg.topic, e)
                continue
            log.info("the run's env spec, made by %s: observation %s, action %s", spec.made_by, *spec.spaces)
            return spec
        return None
    finally:
        client.stop()
