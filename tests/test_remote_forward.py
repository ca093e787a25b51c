"""A worker acting through central inference while no server answers: it retries, says what to check,
and its heartbeats go on meanwhile (its game loop is held in the retries)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from mqttrl.nodes.worker.remote_forward import InferenceUnavailable, RemoteForward
from mqttrl.transport.client import BrokerSettings


def test_each_unanswered_attempt_calls_back_then_one_clear_error(mosquitto):
    calls: list[float] = []
    remote = RemoteForward(
        BrokerSettings(url=mosquitto.url),
        "rf-run",
        "w0",
        timeout_s=0.3,
        retries=2,
        on_timeout=lambda: calls.append(time.monotonic()),
    )
    try:
        t0 = time.monotonic()
        with pytest.raises(InferenceUnavailable, match=r"mqttrl inference --run rf-run") as err:
            remote(np.zeros((1, 4), np.float32))
        assert "\n" not in str(err.value)
        # one call per attempt, each after its own timeout: the worker heartbeats every 0.3 s, not once in 0.9 s
        assert len(calls) == 3 and remote.timeouts == 3
        gaps = np.diff([t0, *calls])
        assert all(0.25 <= g < 1.0 for g in gaps), gaps
    finally:
        remote.close()
