"""mqttrl: distributed reinforcement learning over MQTT.

One learner trains, many workers play and stream experience, a telemetry host
watches; they meet only on an MQTT broker (see docs/architecture.md).
"""

import os as _os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    # _LAZY's names for type checkers and IDEs (at runtime ``__getattr__`` below imports them when first used)
    from mqttrl.api import Result as Result
    from mqttrl.api import train as train
    from mqttrl.plugin.hookspecs import hookimpl as hookimpl
    from mqttrl.policy import Policy as Policy
    from mqttrl.policy import load_policy as load_policy

# One BLAS/OpenMP thread per process unless the user says otherwise: workers run many small
# matmuls, where OpenBLAS's thread pool costs 10x on a busy host (measured: 3.9k vs 41k env
# steps/s for a 16-env numpy worker on 2 cores); the learner sets torch's threads itself.
# Must happen before numpy is first imported, so it lives in the package's __init__.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    _os.environ.setdefault(_var, "1")

__version__ = "0.1.0"

#: Version of the wire protocol (topic tree, headers, payload layouts).
#: Bumped on any incompatible change; every decoder checks it.
PROTOCOL_VERSION = 1


__all__ = ["PROTOCOL_VERSION", "Policy", "Result", "__version__", "hookimpl", "load_policy", "train"]

#: names imported when first used (a module ``__getattr__``), so that ``import mqttrl`` stays cheap for the nodes
_LAZY = {
    # plugin authors write ``from mqttrl import hookimpl``; imported when asked, so that the root
    # package imports nothing of its own floors (every floor may read PROTOCOL_VERSION from it)
    "hookimpl": "mqttrl.plugin.hookspecs",
    "load_policy": "mqttrl.policy",  # mqttrl/policy/__init__.py
    "Policy": "mqttrl.policy",
    "train": "mqttrl.api",  # mqttrl/api.py: a whole run on this machine from Python
    "Result": "mqttrl.api",
}

#: documented modules reachable as attributes of a bare ``import mqttrl`` (docs/python-api.md)
_SUBMODULES = ("api", "config", "policy", "plugin", "export")


def __getattr__(name: str):
    """``mqttrl.load_policy``, ``mqttrl.Policy`` (mqttrl/policy/__init__.py), ``mqttrl.train`` and
    ``mqttrl.Result`` (mqttrl/api.py), imported when first used, so that ``import mqttrl`` stays
    cheap for the nodes."""
    import importlib

    module = _LAZY.get(name)
    if module is not None:
        return getattr(importlib.import_module(module), name)
    if name in _SUBMODULES:  # ``mqttrl.api.make_config`` after a bare ``import mqttrl``
        return importlib.import_module(f"mqttrl.{name}")
    raise AttributeError(f"module 'mqttrl' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY, *_SUBMODULES])
