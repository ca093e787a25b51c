"""What one comparison runs: its sides (mqttrl configs, baseline libraries), budget and headline
measure. A scenario is a module of ``benchmarks.scenarios`` with a ``SCENARIO``; ``python -m
benchmarks.run NAME`` runs it."""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from typing import Any

#: a scenario's target when it has none (its sides are compared by best or last greedy mean): out of
#: every game's reach, so runs take their whole budget; figures leave it out
NO_TARGET = 1e9

#: the figures a scenario's headline can be (:func:`benchmarks.harness.figures.run_figures`)
MEASURES = {
    "seconds_to_target": "seconds to a greedy mean ≥ {target:g}",
    "training_seconds_to_target": "training seconds to a greedy mean ≥ {target:g}",
    "steps_to_target": "env steps to a greedy mean ≥ {target:g}",
    "best": "best greedy mean",
    "final": "last greedy mean",
}


@dataclasses.dataclass(frozen=True)
class Mqttrl:
    """``mqttrl train CONFIG`` with ``--set``s; with ``demos``, on that many demonstration episodes of
    the scenario's demonstrator, recorded by ``mqttrl record`` before the runs; ``eval_env``: the env
    id its last checkpoint is evaluated on where the run's own env id cannot make the game alone
    (a game the worker launches: the baselines' launched env)."""

    name: str
    config: str
    sets: tuple[str, ...] = ()
    demos: int | None = None
    role: str = "mqttrl"
    eval_env: str | None = None


@dataclasses.dataclass(frozen=True)
class Baseline:
    """A baseline library's algorithm (``library`` "sb3" or "sb3_contrib", ``algo`` its class name) on
    ``env``, made as mqttrl makes it. ``linear``: the hyperparameters decayed linearly to 0 (the zoo's
    ``lin_``); ``torso``: a features extractor of :mod:`benchmarks.harness.sb3_side` by name;
    ``exploration_steps``: DQN's epsilon decays over this many env steps."""

    name: str
    library: str
    algo: str
    env: str
    hyperparameters: dict[str, Any]
    policy: str = "MlpPolicy"
    n_envs: int = 1
    linear: tuple[str, ...] = ()
    torso: str | None = None
    exploration_steps: int | None = None
    role: str = "peer"


@dataclasses.dataclass(frozen=True)
class RandomPolicy:
    """Uniformly random actions on ``env`` (made as mqttrl makes it) for ``episodes`` episodes, within
    the scenario's seconds: the floor a learner must clear (:mod:`benchmarks.harness.random_side`)."""

    name: str
    env: str
    episodes: int = 20
    role: str = "floor"


@dataclasses.dataclass(frozen=True)
class Scenario:
    """A comparison. Budget: ``seconds`` and ``env_steps`` (0: none) per run, on either side; a run
    also stops at a greedy mean of ``target`` when ``stop_at_target``. Baselines are evaluated every
    ``eval_every_steps`` env steps (or ``eval_every_s`` training seconds), ``episodes`` greedy
    episodes, their clock stopped meanwhile (mqttrl evaluates as its config says, on the same cores)."""

    title: str
    page: str
    target: float
    measure: str
    sides: tuple[Mqttrl | Baseline | RandomPolicy, ...]
    seconds: float = 600.0
    env_steps: int = 0
    stop_at_target: bool = True
    seeds: int = 3
    episodes: int = 20
    eval_every_steps: int | None = 5000
    eval_every_s: float | None = None
    demonstrator: str | None = None
    headline: bool = True

    def __post_init__(self):
        if self.measure not in MEASURES:
            raise ValueError(f"measure {self.measure!r}: one of {', '.join(MEASURES)}")

    def side(self, name: str) -> Mqttrl | Baseline | RandomPolicy:
        return next(s for s in self.sides if s.name == name)


def names() -> list[str]:
    """Every scenario's name (the modules of ``benchmarks.scenarios``)."""
    import benchmarks.scenarios as package

    return sorted(m.name for m in pkgutil.iter_modules(package.__path__))


def load(name: str) -> Scenario:
    """The scenario ``benchmarks.scenarios.<name>``."""
    if name not in names():
        raise SystemExit(f"no scenario {name!r}; there are: {', '.join(names())}")
    return importlib.import_module(f"benchmarks.scenarios.{name}").SCENARIO
