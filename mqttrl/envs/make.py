"""Building environments from an id: plugin names, ``module:Env-v0`` and gymnasium ids."""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Callable
from typing import Any

import gymnasium as gym

from mqttrl.config.settings import ConfigError
from mqttrl.plugin.manager import MissingDependency, Registry, UnknownPluginError, get_registry


class UnknownEnvError(UnknownPluginError, ConfigError):
    """``env.id`` names no env (a typo, a version that does not exist): a config mistake (exit 2),
    not a missing plugin. An :class:`UnknownPluginError` still, for callers that catch that.

    ``anywhere``: False when the name is unknown here but may be known where the game is (no env of
    that name at all, e.g. its plugin is installed only on the game PCs); True for a wrong version of
    a known env, or a name an installed plugin refuses (``atari/Pnog``): a typo wherever it runs."""

    def __init__(self, message: str, anywhere: bool = True):
        super().__init__(message)
        self.anywhere = anywhere


class UnknownGameName(UnknownEnvError, gym.error.NameNotFound):
    """An installed env plugin refuses the name (``atari/Pnog``); a gymnasium NameNotFound still."""


class UnknownGameVersion(UnknownEnvError, gym.error.VersionNotFound):
    """An installed env plugin has no such version (``atari/Pong-v3``); a gymnasium VersionNotFound still."""


class EnvKwargError(ConfigError):
    """``env.kwargs`` gives the env an argument it does not take (a typo, another env's setting):
    a config mistake (exit 2) naming the env, the argument and those it takes."""


#: how Python words a call with a keyword the callee does not take
_UNEXPECTED_KWARG = re.compile(r"unexpected keyword argument '([^']+)'")
#: what gym.make itself takes besides the env's own arguments (so env.kwargs may give them too)
GYM_MAKE_ARGS = ("max_episode_steps", "disable_env_checker")


#: words in gymnasium's "not installed" message -> the mqttrl extra that installs the package
EXTRA_HINTS = {"box2d": "box2d", "minatar": "minatar", "ale-py": "atari", "ale_py": "atari"}


def make_env(env_id: str, kwargs: dict | None = None, registry: Registry | None = None) -> gym.Env:
    """Make one env (see :func:`_make`); an env whose package is missing is a
    :class:`MissingDependency` naming the extra to install, not an "unknown env"."""
    try:
        return _make(env_id, kwargs, registry)
    except TypeError as exc:  # a kwarg the env does not take is the config's mistake; any other, a bug
        refusal = _kwarg_refusal(env_id, kwargs or {}, registry or get_registry(), exc)
        if refusal is None:
            raise
        raise refusal from None
    except gym.error.DependencyNotInstalled as exc:
        text = str(exc)
        extra = next((e for word, e in EXTRA_HINTS.items() if word in text.lower()), None)
        named = "mqttrl[" in text  # an mqttrl env plugin already names its extra
        hint = f"; with mqttrl: pip install -e '.[{extra}]' (or 'mqttrl[{extra}]')" if extra and not named else ""
        raise MissingDependency(f"env {env_id!r} needs a package that is not installed: {text}{hint}") from None


def _make(env_id: str, kwargs: dict | None, registry: Registry | None) -> gym.Env:
    """Make one env.

    Order: an exact name an env plugin registered; a registered namespace
    (``"ns/"`` prefix); ``"module:Env-v0"`` (imports the module, whose import
    registers the env with gymnasium); a plain gymnasium id.
    """
    kwargs = dict(kwargs or {})
    registry = registry or get_registry()
    try:
        if env_id in registry.envs:
            return registry.envs[env_id].obj(**kwargs)
        for name, reg in registry.envs.items():
            if name.endswith("/") and env_id.startswith(name):
                return reg.obj(env_id[len(name) :], **kwargs)
    except gym.error.NameNotFound as exc:  # a plugin's own "no such game": a config mistake (exit 2)
        raise UnknownGameName(str(exc)) from None
    except gym.error.VersionNotFound as exc:
        raise UnknownGameVersion(str(exc)) from None
    if ":" in env_id:
        module, _, inner = env_id.partition(":")
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise UnknownPluginError(f"env {env_id!r}: cannot import module {module!r} ({exc})") from None
        env_id = inner
    try:
        return gym.make(env_id, **kwargs)
    except gym.error.DependencyNotInstalled:
        raise  # make_env names the extra
    except gym.error.Error as exc:
        plugin_envs = ", ".join(sorted(registry.envs)) or "none"
        raise UnknownEnvError(
            f"unknown env {env_id!r} ({exc}). Use a gymnasium id, 'module:Env-v0', "
            f"or a name registered by a plugin (installed: {plugin_envs})",
            anywhere=not isinstance(exc, gym.error.NameNotFound),
        ) from None


def _kwarg_refusal(env_id: str, kwargs: dict, registry: Registry, exc: TypeError) -> EnvKwargError | None:
    """The config error for a TypeError that says the env took no keyword ``kwargs`` gave it, or
    None for any other TypeError (one about an argument the user did not give is a bug)."""
    found = _UNEXPECTED_KWARG.search(str(exc))
    if found is None or found.group(1) not in kwargs:
        return None
    name = found.group(1)
    what, accepted = env_arguments(env_id, registry)
    if accepted is None:
        takes = ""
    else:
        takes = f"; it takes: {', '.join(accepted)}" if accepted else "; it takes no arguments"
    return EnvKwargError(f"env {env_id!r}{what} takes no argument {name!r} (env.kwargs.{name}){takes}")


def env_arguments(env_id: str, registry: Registry) -> tuple[str, list[str] | None]:
    """`` (ENTRY POINT)`` and the keyword arguments env ``env_id`` takes, from the signature of the
    callable that makes it (a plugin's factory, a gymnasium entry point's class or function);
    None when they cannot be read (a ``**kwargs`` that passes them on, a C extension)."""
    try:
        creator, extra, skip = _creator(env_id, registry)
        params = inspect.signature(creator).parameters.values()
    except Exception:  # no signature to read: the line names the argument only
        return "", None
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return _named(creator), None
    names = [p.name for p in params if p.kind in kinds and p.name != "self"][skip:]
    return _named(creator), names + [a for a in extra if a not in names]


def _creator(env_id: str, registry: Registry) -> tuple[Callable[..., Any], tuple[str, ...], int]:
    """What makes ``env_id`` (as :func:`_make` finds it), the arguments gym.make adds, and how many
    leading parameters it is given positionally (a namespace's factory takes the game name first)."""
    if env_id in registry.envs:
        return registry.envs[env_id].obj, (), 0
    for name, reg in registry.envs.items():
        if name.endswith("/") and env_id.startswith(name):
            return reg.obj, (), 1
    if ":" in env_id:
        module, _, env_id = env_id.partition(":")
        importlib.import_module(module)
    entry = gym.spec(env_id).entry_point
    creator = gym.envs.registration.load_env_creator(entry) if isinstance(entry, str) else entry
    return creator, GYM_MAKE_ARGS, 0


def _named(creator: Callable[..., Any]) -> str:
    """`` (module:Name)`` for the line, or nothing when the callable has no such name."""
    module, name = getattr(creator, "__module__", None), getattr(creator, "__qualname__", None)
    return f" ({module}:{name})" if module and name else ""
