"""Everything a plugin author needs, in one package.

- ``hookspecs.py``: the hooks a plugin module implements with ``@hookimpl``;
- ``algorithm.py``: the algorithm seam (``Forward``, ``Actor``/``SyncActor``,
  ``AsyncLearner``/``SyncLearner``, ``AlgorithmInfo``);
- ``storage.py``: the telemetry storage seam (``Point``, ``Storage``);
- ``SampleSpec``/``FieldSpec`` (from :mod:`mqttrl.wire`): what a sample batch must hold;
- ``NumpyTorso``, ``pick_network`` (from :mod:`mqttrl.nets`): network torsos shared by torch and numpy;
- ``manager.py`` loads plugins (entry points, ``MQTTRL_LOAD_PLUGINS``) and ``check.py`` is
  ``mqttrl check-plugin``.

``from mqttrl.plugin import AlgorithmInfo, SampleSpec, Point`` and so on; the seams are
imported on first use so that ``import mqttrl`` pulls in neither numpy nor gymnasium.
"""

from mqttrl.plugin.hookspecs import hookimpl, hookspec

#: public name -> module that defines it (imported when first used)
_CONTRACT = {
    "ActorContext": "mqttrl.plugin.algorithm",
    "Forward": "mqttrl.plugin.algorithm",
    "Actor": "mqttrl.plugin.algorithm",
    "SyncActor": "mqttrl.plugin.algorithm",
    "AsyncLearner": "mqttrl.plugin.algorithm",
    "SyncLearner": "mqttrl.plugin.algorithm",
    "AlgorithmInfo": "mqttrl.plugin.algorithm",
    "Mode": "mqttrl.plugin.algorithm",
    "Tensors": "mqttrl.plugin.algorithm",
    "Point": "mqttrl.plugin.storage",
    "Storage": "mqttrl.plugin.storage",
    "SampleSpec": "mqttrl.wire",
    "FieldSpec": "mqttrl.wire",
    "SampleBatch": "mqttrl.wire",
    "NumpyTorso": "mqttrl.nets",
    "pick_network": "mqttrl.nets",
}

__all__ = ["hookimpl", "hookspec", *_CONTRACT]


def __getattr__(name: str):
    module = _CONTRACT.get(name)
    if module is None:
        raise AttributeError(f"module 'mqttrl.plugin' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *_CONTRACT])
