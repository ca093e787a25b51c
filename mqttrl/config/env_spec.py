"""The run's env spec: its spaces, made once where the game is and carried with the run.

On a split deployment the learner runs on a GPU box without the game, its extras or a display.
Everything that needs only the env's *shape* (the learner, the inference servers, ``load_policy``,
``mqttrl export``, the demos check) reads this record instead of building the env (Sample
Factory's ``env_info`` does the same: the spec obtained once). It is made by the process that has
the game (``mqttrl train``'s trainer, the first worker, or the user in the TOML as ``[env.spec]``),
kept in the run's config (``env.spec``, so in ``config.json`` and the retained config message) and,
from a worker, published retained on ``mqttrl/<run>/env_spec`` for a learner that waits for it.

A worker whose env disagrees with the run's spec is refused in one line naming the difference
(:class:`SpecMismatch`), before it plays: its samples would be refused one by one otherwise.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from typing import Any

import attrs
import gymnasium as gym

from mqttrl.config.settings import ConfigError
from mqttrl.config.spaces import SpaceError, space_from_json, space_to_json

#: bumped when the record changes in a way an older reader cannot take
SPEC_VERSION = 1


class SpecError(ConfigError):
    """An ``env.spec`` (from the TOML, config.json or the broker) that is not a spec."""


class SpecMismatch(ConfigError):
    """This process's env is not the run's: another game, version or setting."""


@attrs.frozen
class EnvSpec:
    """The observation and action spaces of the run's env (after every wrapper every node applies:
    the action history of ``act_buf_len``), which env made them and who."""

    observation_space: gym.Space
    action_space: gym.Space
    env_id: str
    #: who made it: "trainer@HOST", "worker NAME@HOST", "config" (declared by the user)
    made_by: str = ""

    @property
    def spaces(self) -> tuple[gym.Space, gym.Space]:
        return self.observation_space, self.action_space

    def to_json(self) -> dict[str, Any]:
        return {
            "version": SPEC_VERSION,
            "env_id": self.env_id,
            "observation": space_to_json(self.observation_space),
            "action": space_to_json(self.action_space),
            "made_by": self.made_by,
        }

    @classmethod
    def from_json(cls, data: Any, where: str = "env.spec") -> EnvSpec:
        """The spec ``data`` describes; SpecError (one line naming ``where``) when it is not one."""
        if not isinstance(data, Mapping):
            raise SpecError(f"{where}: expected a table with observation and action, got {data!r}")
        missing = [k for k in ("observation", "action") if k not in data]
        if missing:
            raise SpecError(f"{where}: {' and '.join(missing)} missing (run `mqttrl env-spec CONFIG` to write one)")
        version = data.get("version", SPEC_VERSION)
        if not isinstance(version, int) or version > SPEC_VERSION:
            raise SpecError(f"{where}: version {version!r} is newer than this mqttrl reads ({SPEC_VERSION}): upgrade")
        try:
            obs, act = space_from_json(data["observation"]), space_from_json(data["action"])
        except SpaceError as e:
            raise SpecError(f"{where}: {e}") from None
        return cls(obs, act, str(data.get("env_id", "")), str(data.get("made_by", "")))

    def differences(self, run_spec: EnvSpec) -> list[str]:
        """How this env's spaces differ from ``run_spec``'s, one phrase each ([] when they agree)."""
        out = []
        for what, mine, theirs in (
            ("observation", self.observation_space, run_spec.observation_space),
            ("action", self.action_space, run_spec.action_space),
        ):
            a, b = space_to_json(mine), space_to_json(theirs)
            for key in ("type", "shape", "dtype", "n", "nvec", "start", "low", "high"):
                if a.get(key) != b.get(key):
                    out.append(f"{what} {key} {_short(a.get(key))} here, {_short(b.get(key))} in the run's spec")
                    break  # the first difference of a space says enough
        return out


def _short(value: Any) -> str:
    text = repr(tuple(value) if isinstance(value, list) and len(value) <= 8 else value)
    return text if len(text) <= 60 else text[:57] + "..."


def spec_of(env: gym.Env, env_id: str, made_by: str) -> EnvSpec:
    """The spec of a made env (its spaces as every node sees them)."""
    return EnvSpec(env.observation_space, env.action_space, env_id, made_by)


def made_by(role: str) -> str:
    """``ROLE@HOST``: who made a spec, for the line a mismatch prints."""
    return f"{role}@{socket.gethostname()}"


def spec_of_config(config: Any) -> EnvSpec | None:
    """The run's spec as its config carries it (``env.spec``), or None when it has none yet."""
    data = config.env.spec
    if not data:
        return None
    return EnvSpec.from_json(data)


def with_spec(config: Any, spec: EnvSpec) -> Any:
    """A run config with ``env.spec`` set to ``spec`` (a new config; the one given is not changed)."""
    return attrs.evolve(config, env=attrs.evolve(config.env, spec=spec.to_json()))


def check_env_against(mine: EnvSpec, run_spec: EnvSpec) -> None:
    """SpecMismatch (one line) when this process's env differs from the run's spec."""
    diffs = mine.differences(run_spec)
    if diffs:
        who = f" (made by {run_spec.made_by})" if run_spec.made_by else ""
        raise SpecMismatch(
            f"this env ({mine.env_id}) does not match the run's env spec{who}: {'; '.join(diffs)}. "
            f"Check the game's version and settings on this machine, or start a new run for it"
        )
