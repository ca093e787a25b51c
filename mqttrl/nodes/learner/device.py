"""The learner's torch device, from ``learner.device``: :mod:`mqttrl.devices` (inference servers use it too)."""

from __future__ import annotations

from mqttrl.devices import describe_device, resolve_device

__all__ = ["describe_device", "resolve_device"]
