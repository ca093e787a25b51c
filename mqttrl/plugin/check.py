"""Deprecated home of the plugin conformance checks: they are :mod:`mqttrl.conformance` now.

The checks make envs and run the real-time protocol, which sit above the toolkit; kept in it, they
made an import circle (``mqttrl.plugin`` -> ``mqttrl.envs`` -> ``mqttrl.plugin``). Every name still
works from here, looked up when first used, with a DeprecationWarning.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    warnings.warn(
        f"mqttrl.plugin.check.{name} is deprecated; import it from mqttrl.conformance",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(importlib.import_module("mqttrl.conformance"), name)
