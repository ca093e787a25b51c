"""The plugin manager: entry points in the ``mqttrl`` group, filtered by ``MQTTRL_LOAD_PLUGINS``.

Built-ins are plugins like any other and come in through the same entry points,
so every run exercises the third-party path. ``MQTTRL_LOAD_PLUGINS`` (comma
separated entry-point names) limits which plugins load; unset loads all.

Loading goes in three steps, and a plugin that fails any of them is refused
(logged with its entry-point name, listed with an ``error`` by ``mqttrl
plugins``) while the others load:

1. import the entry point's module (a function with a hook's name but no ``@hookimpl``
   refuses it) and ``pm.register`` it (pluggy checks each
   ``@hookimpl``'s arguments against its hookspec);
2. ``pm.check_pending()``: a ``@hookimpl`` whose name matches no hookspec (a
   misspelled hook) refuses its plugin;
3. call every hook through pluggy, one plugin at a time
   (``pm.subset_hook_caller``), with a ``register`` that knows which plugin it
   serves, so each registration and override warning names its plugin. A hook
   that raises, or calls ``register`` wrongly, refuses its plugin and drops
   everything that plugin registered.
"""

from __future__ import annotations

import difflib
import importlib.metadata as md
import logging
import os
from collections.abc import Callable
from functools import lru_cache
from typing import Any

import attrs
import pluggy

from mqttrl.plugin import hookspecs
from mqttrl.plugin.algorithm import AlgorithmInfo
from mqttrl.plugin.hookspecs import HOOKS, PROJECT

log = logging.getLogger("mqttrl.plugins")
GROUP = PROJECT
ENV_VAR = "MQTTRL_LOAD_PLUGINS"

#: hook name -> the registry table (and report key) it fills
TABLES = {
    "mqttrl_register_algorithms": "algorithms",
    "mqttrl_register_envs": "envs",
    "mqttrl_register_storages": "storages",
}


class UnknownPluginError(LookupError):
    """A config names an algorithm/env/storage that no installed plugin registers."""


class MissingDependency(ImportError):
    """A plugin's thing (an env, a storage) needs a package that is not installed; the message
    names the package and the command that installs it."""


class PluginError(Exception):
    """A plugin is broken (bad hook, bad registration); the manager refuses it."""


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
    #: the ``mqttrl plugins`` report: one dict per plugin, in entry-point name order
    plugins: list[dict] = attrs.Factory(list)

    def algorithm(self, name: str) -> AlgorithmInfo:
        return self._get(self.algorithms, "algorithm", name).obj

    def storage(self, name: str) -> Callable:
        return self._get(self.storages, "storage", name).obj

    def plugin(self, name: str) -> dict | None:
        """The report entry of the plugin with that entry-point name, or None."""
        return next((p for p in self.plugins if p["name"] == name), None)

    def _get(self, table: dict, kind: str, name: str) -> Registered:
        if name in table:
            return table[name]
        installed = ", ".join(sorted(table)) or "none"
        near = difflib.get_close_matches(str(name), list(table), 1)
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        raise UnknownPluginError(
            f"unknown {kind} {name!r}{hint}; installed: {installed}. "
            f"Install a package that registers it (entry point group '{GROUP}'), "
            f"or check {ENV_VAR} if it is set"
        )


def _wanted() -> set[str] | None:
    raw = os.environ.get(ENV_VAR)
    if raw is None:
        return None
    return {x.strip() for x in raw.split(",") if x.strip()}


def _bind(name: str, factory: Callable, description: str) -> tuple[str, Callable, str]:
    return name, factory, description


def _registrar(hook: str, plugin: str, out: list[Registered]) -> Callable[..., None]:
    """The ``register`` one plugin's implementation of ``hook`` gets; it checks what it is given."""
    if hook == "mqttrl_register_algorithms":

        def register_algorithm(*args: Any, **kwargs: Any) -> None:
            given = [*args, *kwargs.values()]
            if len(given) != 1 or not isinstance(given[0], AlgorithmInfo):
                raise TypeError(
                    f"plugin {plugin!r}: mqttrl_register_algorithms' register() takes one "
                    f"mqttrl.plugin.algorithm.AlgorithmInfo, not {', '.join(type(x).__name__ for x in given) or 'nothing'}"
                )
            info = given[0]
            out.append(Registered(name=info.name, plugin=plugin, obj=info, description=info.description))

        return register_algorithm

    def register(*args: Any, **kwargs: Any) -> None:
        try:
            name, factory, description = _bind(*args, **kwargs)
        except TypeError:
            raise TypeError(f"plugin {plugin!r}: {hook}'s register() takes (name, factory, description)") from None
        if not isinstance(name, str) or not name:
            raise TypeError(f"plugin {plugin!r}: {hook}'s register() needs a non-empty str name, not {name!r}")
        if not callable(factory):
            raise TypeError(f"plugin {plugin!r}: {hook}'s register({name!r}, ...) needs a callable factory")
        if not isinstance(description, str):
            raise TypeError(f"plugin {plugin!r}: {hook}'s register({name!r}, ...) needs a str description")
        out.append(Registered(name=name, plugin=plugin, obj=factory, description=description))

    return register


def _unknown_hook_message(plugin: str, module: str, hook: str) -> str:
    close = difflib.get_close_matches(hook, HOOKS, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else f"; the hooks are {', '.join(HOOKS)}"
    return f"plugin {plugin!r} ({module}) implements unknown hook {hook!r} (no such hookspec){hint}"


def _record(ep: md.EntryPoint) -> dict:
    dist = ep.dist
    return {
        "name": ep.name,
        "module": ep.value,
        "distribution": dist.metadata["Name"] if dist else None,
        "version": dist.version if dist else None,
    }


def _refuse(record: dict, message: str) -> None:
    log.error("%s; plugin %r not loaded", message, record["name"])
    record["error"] = message
    for key in TABLES.values():
        record.pop(key, None)


def _check_pending(pm: pluggy.PluginManager, records: dict[str, dict]) -> None:
    """``pm.check_pending()`` until it passes, refusing each plugin it names (one bad hook each time)."""
    while True:
        try:
            pm.check_pending()
            return
        except pluggy.PluginValidationError as exc:
            name = pm.get_name(exc.plugin)
            if name is None:  # not ours: cannot happen with a private manager
                raise
            hook = next(
                h
                for h in vars(pm.hook)
                if not h.startswith("_")
                and not getattr(pm.hook, h).has_spec()
                and any(i.plugin is exc.plugin for i in getattr(pm.hook, h).get_hookimpls())
            )
            _refuse(records[name], _unknown_hook_message(name, records[name]["module"], hook))
            pm.unregister(name=name)


def _collect(pm: pluggy.PluginManager, name: str, others: list[object]) -> dict[str, list[Registered]]:
    """Call every hook of one plugin through pluggy; what it registers, per hook. ``others``: the other
    plugins (modules, which pluggy types as ``object``), left out of the call."""
    got: dict[str, list[Registered]] = {}
    for hook in HOOKS:
        out: list[Registered] = []
        pm.subset_hook_caller(hook, remove_plugins=others)(register=_registrar(hook, name, out))
        got[hook] = out
    return got


def _check_wanted(wanted: set[str] | None, records: dict[str, dict]) -> None:
    """A name in ``MQTTRL_LOAD_PLUGINS`` that no installed entry point has is a typo, not a wish:
    one error naming it, the installed names and the nearest one."""
    unknown = sorted((wanted or set()) - set(records))
    if not unknown:
        return
    installed = sorted(ep.name for ep in md.entry_points(group=GROUP))
    hints = [
        f"{u!r} (did you mean {near[0]!r}?)" if (near := difflib.get_close_matches(u, installed, 1)) else repr(u)
        for u in unknown
    ]
    raise PluginError(
        f"{ENV_VAR} names {', '.join(hints)}, which no installed plugin has; installed: {', '.join(installed)}"
    )


@lru_cache(maxsize=1)
def get_registry() -> Registry:
    """Load plugins once per process and collect what they register (see the module docstring)."""
    pm = pluggy.PluginManager(PROJECT)
    pm.add_hookspecs(hookspecs)
    wanted = _wanted()
    records: dict[str, dict] = {}
    for ep in sorted(md.entry_points(group=GROUP), key=lambda e: e.name):
        if wanted is not None and ep.name not in wanted:
            continue
        if ep.name in records:  # the same name from two distributions: the first one wins
            log.warning(
                "plugin %s (%s): the name is taken by %s; ignored", ep.name, ep.value, records[ep.name]["module"]
            )
            continue
        record = records[ep.name] = _record(ep)
        try:
            module = ep.load()
        except Exception as exc:  # a broken third-party plugin must not take the node down
            _refuse(record, f"plugin {ep.name!r} ({ep.value}) failed to import: {type(exc).__name__}: {exc}")
            continue
        unmarked = [
            h for h in HOOKS if callable(getattr(module, h, None)) and pm.parse_hookimpl_opts(module, h) is None
        ]
        if unmarked:  # pluggy would silently skip these
            _refuse(record, f"plugin {ep.name!r} ({ep.value}) defines {', '.join(unmarked)} without @hookimpl")
            continue
        try:
            pm.register(module, name=ep.name)
        except (pluggy.PluginValidationError, ValueError) as exc:  # a hookimpl's arguments do not match its hookspec
            _refuse(record, f"plugin {ep.name!r} ({ep.value}) has an invalid hook: {exc}")
    _check_pending(pm, records)
    _check_wanted(wanted, records)

    registry = Registry()
    plugins = dict(pm.list_name_plugin())
    for name in sorted(plugins):
        record = records[name]
        others = [m for n, m in plugins.items() if n != name]
        try:
            got = _collect(pm, name, others)
        except Exception as exc:  # a hook that raises or misuses register: refuse this plugin, keep the others
            _refuse(record, f"plugin {name!r} ({record['module']}) failed to register: {type(exc).__name__}: {exc}")
            continue
        for hook, items in got.items():
            table = getattr(registry, TABLES[hook])
            for item in items:
                if item.name in table and table[item.name].plugin != name:
                    log.warning(
                        "%s %r from plugin %s overrides the one from plugin %s",
                        TABLES[hook][:-1],
                        item.name,
                        name,
                        table[item.name].plugin,
                    )
                table[item.name] = item
                record.setdefault(TABLES[hook], []).append(item.name)
    registry.plugins = list(records.values())
    return registry


def plugins_report() -> list[dict]:
    """What ``mqttrl plugins`` prints: per plugin its entry-point name, module, distribution,
    version and what it registers (``algorithms``/``envs``/``storages``), or its ``error``."""
    return get_registry().plugins
