"""Telemetry says what it refused: the count in its ``telemetry`` point (rejected_total) and a log
line by reason, not only the per-message warnings."""

from __future__ import annotations

import logging

from mqttrl.nodes.telemetry import TelemetryNode
from mqttrl.transport.client import BrokerSettings
from mqttrl.transport.topics import Topics


def test_telemetry_publishes_and_logs_what_it_refused(shared_mosquitto, caplog):
    run = "tel-rejections"
    node = TelemetryNode(BrokerSettings(shared_mosquitto.url), run, storages=[])  # not started: handle() only
    topics = Topics(run)
    assert node.telemetry_point(2.0, 0, 0.0).fields["rejected_total"] == 0
    node.handle(topics.heartbeat("w0"), b"not json")
    node.handle(topics.episodes("w0"), b"\x00garbage")
    assert node.telemetry_point(2.0, 2, 0.0).fields["rejected_total"] == 2
    caplog.set_level(logging.WARNING, logger="mqttrl.telemetry")
    node.report_rejections(100.0)
    node.report_rejections(101.0)  # nothing new: no second line
    lines = [r.getMessage() for r in caplog.records if "telemetry refused" in r.getMessage()]
    assert len(lines) == 1 and "refused 2 message(s)" in lines[0], lines
    node.handle(topics.heartbeat("w0"), b"[]")
    node.report_rejections(102.0)  # within the minute: quiet
    node.report_rejections(103.0, final=True)  # at the end: said
    lines = [r.getMessage() for r in caplog.records if "telemetry refused" in r.getMessage()]
    assert len(lines) == 2 and "refused 3 message(s)" in lines[1], lines
