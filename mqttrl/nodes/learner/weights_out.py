"""The learner's weights going out: each publish is a new model version, retained for late workers.

The exact float32 encoding is kept for ``checkpoints/best`` (the model judged is the model saved);
the wire copy is in ``learner.weights_dtype`` (float16/bfloat16 halve the bytes) and is kept too,
so the birth re-publishes it after a reconnect (a broker failed over to holds no retained weights).
"""

from __future__ import annotations

import time
from typing import Any

from mqttrl.config import RunConfig
from mqttrl.nodes.learner.best import BestModels
from mqttrl.nodes.learner.core import LearnerCore
from mqttrl.plugin.algorithm import FLEET_PROGRESS_KEY, INGESTED_KEY, UPDATES_KEY
from mqttrl.wire import WeightsMessage

#: weights go out at QoS 1 (docs/architecture.md, "Weights on a slow link", says why not 0)
WEIGHTS_QOS = 1


class WeightsPublisher:
    """Encodes the learner's weights as the core's current version and hands them to ``publish``."""

    def __init__(self, config: RunConfig, algo: Any, core: LearnerCore, best: BestModels):
        self.config = config
        self.algo = algo
        self.core = core
        self.best = best
        #: the newest published weights, re-published by the birth after a (re)connect
        self.last: bytes | None = None

    def encode(self) -> bytes:
        """The current version's weights, in the wire dtype; the exact float32 copy kept for ``best/``.
        How often this runs is bounded by ``learner.weights_every_s`` (the core opens versions no
        faster), which bounds every worker's weight traffic."""
        tensors, info = self.algo.export_weights()
        core = self.core
        info = {
            **info,
            FLEET_PROGRESS_KEY: core.env_steps_per_worker(),
            INGESTED_KEY: core.samples_total,
            UPDATES_KEY: self.algo.updates,
        }
        message = WeightsMessage(
            core.version, self.config.algorithm.name, self.config.run, tensors, info, time.time(), core.epoch
        )
        exact = message.encode()
        wire_dtype = self.config.learner.weights_dtype
        payload = exact if wire_dtype == "float32" else message.encode(wire_dtype)
        self.best.remember(message.ref, exact)
        self.last = payload
        return payload
