"""Building environments from an id: plugin names, ``module:Env-v0`` and gymnasium ids."""

from __future__ import annotations

import importlib

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


#: words in gymnasium's "not installed" message -> the mqttrl extra that installs the package
EXTRA_HINTS = {"box2d": "box2d", "minatar": "minatar", "ale-py": "atari", "ale_py": "atari"}


def make_env(env_id: str, kwargs: dict | None = None, registry: Registry | None = None) -> gym.Env:
    """Make one env (see :func:`_make`); an env whose package is missing is a
    :class:`MissingDependency` naming the extra to install, not an "unknown env"."""
    try:
        return _make(env_id, kwargs, registry)
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
