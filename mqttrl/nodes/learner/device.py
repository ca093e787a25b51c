"""The learner's torch device, from ``learner.device``: :mod:`mqttrl.system.devices` (inference servers use it too)."""

from __future__ import annotations

from mqttrl.system.devices import describe_device, resolve_device

__all__ = ["describe_device", "resolve_device"]
