"""The plugin manager: entry points in the ``mqttrl`` group, filtered by ``MQTTRL_LOAD_PLUGINS``.

Built-ins are plugins like any other and come in through the same entry points,
so every run exercises the third-party path. ``MQTTRL_LOAD_PLUGINS`` (comma
separated entry-point names) limits which plugins load; unset loads all.
"""

from __future__ import annotations

import importlib.metadata as md
import logging
import os
from collections.abc import Callable
from functools import lru_cache
from typing import Any

import attrs
import pluggy

from mqttrl.algorithm import AlgorithmInfo
from mqttrl.plugin import spec as hookspecs

log = logging.getLogger("mqttrl.plugins")
GROUP = "mqttrl"
ENV_VAR = "MQTTRL_LOAD_PLUGINS"


class UnknownPluginError(LookupError):
    """A config names an algorithm/env/storage that no installed plugin registers."""


@attrs.define
class Registered:
    name: str
    plugin: str
    obj: Any
    description: str = ""


@attrs.define
class Registry:
    algorithms: dict[str, Registered] = attrs.Factory(dict)
    envs: dict[str, Registered] = attrs.Factory(dict)
    storages: dict[str, Registered] = attrs.Factory(dict)
    plugins: list[dict] = attrs.Factory(list)

    def algorithm(self, name: str) -> AlgorithmInfo:
        return self._get(self.algorithms, "algorithm", name).obj

    def storage(self, name: str) -> Callable:
        return self._get(self.storages, "storage", name).obj

    def _get(self, table: dict, kind: str, name: str) -> Registered:
        if name in table:
            return table[name]
        installed = ", ".join(sorted(table)) or "none"
        raise UnknownPluginError(
            f"unknown {kind} {name!r}; installed: {installed}. "
            f"Install a package that registers it (entry point group '{GROUP}'), "
            f"or check {ENV_VAR} if it is set"
        )


def _wanted() -> set[str] | None:
    raw = os.environ.get(ENV_VAR)
    if raw is None:
        return None
    return {x.strip() for x in raw.split(",") if x.strip()}


def _collect(
    pm: pluggy.PluginManager, hook: str, plugin_name: str, table: dict, registry_key: str, record: dict
) -> None:
    def register(name_or_info, factory=None, description: str = ""):
        if isinstance(name_or_info, AlgorithmInfo):
            info = name_or_info
            name, obj, description = info.name, info, info.description
        else:
            name, obj = name_or_info, factory
        if name in table and table[name].plugin != plugin_name:
            log.warning("%s %r from %s overrides the one from %s", registry_key, name, plugin_name, table[name].plugin)
        table[name] = Registered(name=name, plugin=plugin_name, obj=obj, description=description)
        record.setdefault(registry_key, []).append(name)

    plugin = pm.get_plugin(plugin_name)
    impl = getattr(plugin, hook, None)
    if impl is not None:
        impl(register=register)


@lru_cache(maxsize=1)
def get_registry() -> Registry:
    """Load plugins once per process and collect what they register."""
    pm = pluggy.PluginManager(GROUP)
    pm.add_hookspecs(hookspecs)
    wanted = _wanted()
    registry = Registry()
    for ep in sorted(md.entry_points(group=GROUP), key=lambda e: e.name):
        if wanted is not None and ep.name not in wanted:
            continue
        if pm.has_plugin(ep.name):
            continue
        try:
            module = ep.load()
        except Exception as exc:  # a broken third-party plugin must not take the node down
            log.error("plugin %s (%s) failed to load: %s", ep.name, ep.value, exc)
            registry.plugins.append({"name": ep.name, "module": ep.value, "error": str(exc)})
            continue
        pm.register(module, name=ep.name)
        dist = ep.dist
        record = {
            "name": ep.name,
            "module": ep.value,
            "distribution": dist.metadata["Name"] if dist else None,
            "version": dist.version if dist else None,
        }
        for hook, table, key in (
            ("mqttrl_register_algorithms", registry.algorithms, "algorithms"),
            ("mqttrl_register_envs", registry.envs, "envs"),
            ("mqttrl_register_storages", registry.storages, "storages"),
        ):
            _collect(pm, hook, ep.name, table, key, record)
        registry.plugins.append(record)
    return registry


def plugins_report() -> list[dict]:
    """What ``mqttrl plugins`` prints."""
    return get_registry().plugins
