"""``mqttrl.train()``: a whole run on this machine, from Python (a script, a notebook, any thread).

::

    import mqttrl

    result = mqttrl.train("configs/cartpole_dqn.toml", seed=1, max_seconds=120)
    print(result.solved, result.best_eval_mean, result.run_dir)

It does what ``mqttrl train CONFIG`` does (an embedded broker, the learner and the workers as
child processes, the telemetry and evaluator nodes as threads, ``summary.json``) and returns a :class:`Result`
instead of an exit code. docs/python-api.md has the details and more examples.
"""

from __future__ import annotations

import copy
import csv
import difflib
import json
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs

from mqttrl.config import (
    _SECTIONS,
    ConfigError,
    RunConfig,
    TrainConfig,
    from_dict,
    parse_override,
    read_config_data,
    set_key,
)
from mqttrl.transport.client import BrokerSettings

__all__ = ["Result", "train"]

#: the config's sections, each a keyword that takes a dict (``algorithm={"lr": 1e-3}``)
SECTIONS = ("env", "algorithm", *(s for s in _SECTIONS if s != "env"))
#: ``[train]`` keys, each a keyword of its own (``seed=1``, ``max_seconds=60``)
TRAIN_KEYS = tuple(f.name for f in attrs.fields(TrainConfig))
#: names a Stable-Baselines3 user may reach for, and where mqttrl keeps that setting
_HINTS = {
    "total_timesteps": "max_env_steps=N (all workers' env steps together)",
    "learning_rate": "overrides={'algorithm.lr': ...} or algorithm={'lr': ...}",
    "lr": "overrides={'algorithm.lr': ...} or algorithm={'lr': ...}",
    "n_envs": "env={'num_envs': N} (per worker process) and workers=N (worker processes)",
    "num_envs": "env={'num_envs': N} (per worker process) and workers=N (worker processes)",
    "gamma": "overrides={'algorithm.gamma': ...}",
    "batch_size": "overrides={'algorithm.batch_size': ...}",
    "env_id": "env='CartPole-v1'",
    "policy": "algorithm={'hidden': [64, 64]} (the network is an algorithm setting)",
    "verbose": "progress=False",
    "tensorboard_log": "telemetry_storages=['files', 'tensorboard'] (events go to <run dir>/tensorboard)",
}


@attrs.frozen
class Result:
    """What a run gave: the fields of its ``summary.json`` that matter most, the whole summary, and
    its config. ``Result.from_run_dir(path)`` reads one back from a finished run's directory."""

    #: the run directory: config.json, checkpoints/, episodes.csv, evaluations.csv, logs/, summary.json ...
    run_dir: Path
    #: the greedy evaluation mean reached ``train.target_return``
    solved: bool
    #: why the run stopped: "target reached", "time budget", "env step budget", "interrupted", ...
    stop_reason: str
    #: the best greedy evaluation mean (``train.eval_episodes`` episodes); None before any evaluation
    best_eval_mean: float | None
    #: the model with that mean (``<run dir>/best/weights.safetensors``); None before any evaluation
    best_weights: Path | None
    #: seconds from the start to the evaluation that reached the target; None if not solved
    time_to_solve_s: float | None
    #: seconds the whole run took, start-up and shutdown included
    wall_s: float
    #: env steps of all workers together
    env_steps: int
    episodes: int
    #: the learner's gradient updates (None if it never reported)
    updates: int | None
    #: the run's resolved config
    config: RunConfig = attrs.field(repr=False)
    #: everything ``summary.json`` holds (env steps at solve, restarts, rejections by reason ...)
    summary: dict = attrs.field(repr=False)
    #: the learning curve: one (env_steps, wall_s, greedy mean) per evaluation (evaluations.csv), env_steps
    #: being those the evaluated model was trained on (the learner's count when it published it), so
    #: that runs compare at equal data; plot against wall_s for the clock
    curve: list[tuple[int, float, float]] = attrs.field(factory=list, repr=False)
    #: every episode's (env_steps, return): all workers' env steps when it ended (episodes.csv)
    episode_returns: list[tuple[int, float]] = attrs.field(factory=list, repr=False)

    @classmethod
    def from_summary(cls, summary: Mapping[str, Any], config: RunConfig) -> Result:
        run_dir = Path(summary["run_dir"])
        best = run_dir / "best" / "weights.safetensors"
        return cls(
            run_dir=run_dir,
            solved=bool(summary["solved"]),
            stop_reason=str(summary["stop_reason"]),
            best_eval_mean=summary.get("best_eval_mean"),
            best_weights=best if best.exists() else None,
            time_to_solve_s=summary.get("time_to_solve_s"),
            wall_s=float(summary["wall_s"]),
            env_steps=int(summary.get("env_steps") or 0),
            episodes=int(summary.get("episodes") or 0),
            updates=summary.get("updates"),
            config=config,
            summary=dict(summary),
            curve=read_curve(run_dir / "evaluations.csv"),
            episode_returns=read_episode_returns(run_dir / "episodes.csv"),
        )

    @classmethod
    def from_run_dir(cls, run_dir: str | Path) -> Result:
        """The result of a finished run, read from its ``summary.json`` and ``config.json``."""
        run_dir = Path(run_dir)
        file = run_dir / "summary.json"
        if not file.exists():
            raise FileNotFoundError(f"{file} does not exist: not a finished mqttrl train run directory")
        summary = json.loads(file.read_text())
        summary["run_dir"] = str(run_dir)  # where it is now, should it have moved
        return cls.from_summary(summary, _resolve(read_config_data(run_dir / "config.json")))

    def load_policy(self, **kwargs: Any):
        """The run's best policy, acting in numpy: :func:`mqttrl.load_policy` of :attr:`run_dir`."""
        from mqttrl.policy import load_policy

        return load_policy(self.run_dir, **kwargs)


def _csv_rows(path: Path) -> list[dict]:
    if not path.exists():
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def read_curve(path: Path) -> list[tuple[int, float, float]]:
    """(env_steps, wall_s, mean) of each evaluation in a run's ``evaluations.csv``: the env steps its
    model was trained on (``model_env_steps``), or, in a file without them (an older run, a learner
    that does not say), all workers' env steps when the result came in (``env_steps``)."""
    return [(_model_steps(r), float(r["wall_s"]), float(r["mean"])) for r in _csv_rows(path)]


def _model_steps(row: Mapping[str, Any]) -> int:
    steps = row.get("model_env_steps")
    return int(steps) if steps not in (None, "") else int(row["env_steps"])


def read_episode_returns(path: Path) -> list[tuple[int, float]]:
    """(env_steps, return) of each episode in a run's ``episodes.csv``: its env steps are those of
    every worker together when it ended (each worker's own count as its episodes report it)."""
    by_worker: dict[str, int] = {}
    out = []
    for r in _csv_rows(path):
        if r.get("worker_env_steps"):
            by_worker[r["worker"]] = max(by_worker.get(r["worker"], 0), int(r["worker_env_steps"]))
        out.append((sum(by_worker.values()), float(r["return"])))
    return out


def train(
    config: str | Path | Mapping[str, Any] | RunConfig | None = None,
    /,
    *,
    overrides: Mapping[str, Any] | Iterable[str] | None = None,
    run_dir: str | Path | None = None,
    broker: str | BrokerSettings | None = None,
    embedded_broker: str = "auto",
    progress: bool = True,
    stop: threading.Event | None = None,
    credentials: str | Path | None = None,
    resume: bool = False,
    overwrite: bool = False,
    init_from: str | Path | None = None,
    **settings: Any,
) -> Result:
    """Train on this machine, as ``mqttrl train`` does, and return a :class:`Result`.

    ``config``: a TOML file (``"configs/cartpole_dqn.toml"``), a run directory's ``config.json``, a
    dict shaped like the TOML file, a :class:`~mqttrl.config.RunConfig`, or None (the built-in
    defaults: DQN on CartPole-v1).

    Settings over it, in this order:

    * keywords: ``run="name"``; every ``[train]`` key by its name (``seed``, ``workers``,
      ``max_seconds``, ``max_env_steps``, ``target_return`` (None: train for the whole budget),
      ``eval_every_s``, ``eval_episodes``, ``telemetry``, ``telemetry_storages``); a section by its
      name with a dict (``algorithm={"lr": 1e-3}``, ``env={"num_envs": 8}``, ``learner={...}``);
      ``env="LunarLander-v3"`` and ``algorithm="ppo"`` set the env id and the algorithm's name;
    * ``overrides``: dotted keys (``{"algorithm.lr": 1e-3, "learner.publish_every": 100}``, values
      as Python gives them), or ``--set`` strings (``["algorithm.lr=0.001"]``, values read as TOML).

    An unknown keyword or key raises ValueError naming the valid ones; a bad value raises
    :class:`~mqttrl.config.ConfigError` (a ValueError) with the key, the value and what is allowed.

    ``run_dir``: default ``runs/<run>-<timestamp>``. ``broker``: an MQTT URL or
    :class:`~mqttrl.transport.client.BrokerSettings` to run on (default: an embedded broker of kind
    ``embedded_broker``: ``auto``, ``mosquitto`` or ``amqtt``). ``progress``: the live display
    (plain lines on stderr when not on a terminal) and the closing summary lines; False prints
    nothing at all (every log line goes to ``<run dir>/logs``). ``credentials``:
    the file ``mqttrl broker add-run RUN`` wrote (a shared broker with per-run clients): each node
    logs in as its own client of the run, on the file's broker unless ``broker`` is given.

    ``resume=True``: continue the run in ``run_dir`` from its newest checkpoint; ``overwrite=True``:
    start again in a ``run_dir`` that holds a run (moved aside, never deleted); without either a
    ``run_dir`` with checkpoints raises :class:`~mqttrl.state.run_dir.RunDirInUse` (a ValueError)
    before anything starts. ``init_from``: a run directory or model file to start training from.

    Works from any thread. In the main thread Ctrl-C (SIGINT) and SIGTERM stop the run cleanly and
    the previous handlers are put back afterwards; in another thread no handler is touched, and
    setting ``stop`` (a :class:`threading.Event`) stops the run. Either way the run shuts down its
    processes and returns a Result (``stop_reason="interrupted"``).

    (Long because this docstring is the Python API's reference; the body is twenty lines.)
    """
    from mqttrl.trainer.run import train as run_training

    cfg = make_config(config, overrides, **settings)
    chosen, per_node = _broker_of(broker, credentials, cfg.run)
    summary = run_training(
        cfg,
        broker=chosen,
        broker_args=_broker_args(chosen) if chosen is not None else None,
        run_dir=Path(run_dir) if run_dir is not None else None,
        embedded=embedded_broker,
        progress=progress,
        stop=stop,
        print_summary=progress,
        credentials=per_node,
        resume=resume,
        overwrite=overwrite,
        init_from=Path(init_from) if init_from is not None else None,
        quiet=not progress,
    )
    # the config the run ran with, as its config.json holds it (with the env spec the run made)
    return Result.from_summary(summary, _resolve(read_config_data(Path(summary["run_dir"]) / "config.json")))


def _broker_of(
    broker: str | BrokerSettings | None, credentials: str | Path | None, run: str
) -> tuple[BrokerSettings | None, dict | None]:
    """The broker to run on (None: an embedded one) and, from a credentials file, each node kind's
    login; a bad URL or file fails here, with one line, before anything starts."""
    per_node = None
    if credentials is not None:
        from mqttrl.broker.dynsec import run_credentials

        url, per_node = run_credentials(credentials, run)
        if broker is None:
            if url is None:
                raise ValueError(f"{credentials} names no broker; pass broker=")
            broker = url
    if isinstance(broker, str):
        broker = BrokerSettings(url=broker)
    if broker is not None:
        broker.parsed  # noqa: B018 -- a bad URL fails here
    return broker, per_node


def make_config(
    config: str | Path | Mapping[str, Any] | RunConfig | None = None,
    overrides: Mapping[str, Any] | Iterable[str] | None = None,
    **settings: Any,
) -> RunConfig:
    """The :class:`RunConfig` that :func:`train` runs for these arguments (checked, nothing started)."""
    if config is None:
        data: dict = {}
    elif isinstance(config, RunConfig):
        data = config.to_dict()
    elif isinstance(config, Mapping):
        data = copy.deepcopy(dict(config))
    elif isinstance(config, (str, Path)):
        data = read_config_data(config)
    else:
        raise TypeError(
            f"config={config!r}: expected a path to a TOML file (or a run's config.json), a dict, a RunConfig or None"
        )
    for name, value in settings.items():
        if name == "run":
            data["run"] = value
        elif name in TRAIN_KEYS:
            set_key(data, f"train.{name}", value)
        elif name in ("env", "algorithm") and isinstance(value, str):
            set_key(data, f"{name}.{'id' if name == 'env' else 'name'}", value)
        elif name in SECTIONS:
            if not isinstance(value, Mapping):
                raise ConfigError(f"{name}={value!r}: expected a dict of [{name}] keys, e.g. {_example(name)}")
            for key, v in value.items():
                set_key(data, f"{name}.{key}", v)
        else:
            raise ValueError(_unknown_keyword(name))
    if overrides is not None:
        if isinstance(overrides, Mapping):
            for key, value in overrides.items():
                set_key(data, key, value)
        elif isinstance(overrides, str):
            raise TypeError(f"overrides={overrides!r}: expected a dict {{'section.key': value}} or a list of strings")
        else:
            for item in overrides:
                parts, value = parse_override(item)
                set_key(data, ".".join(parts), value)
    return _resolve(data)


def _resolve(data: Mapping[str, Any]) -> RunConfig:
    from mqttrl.plugin.manager import UnknownPluginError, get_registry

    registry = get_registry()
    try:
        return from_dict(data, lambda name: registry.algorithm(name).params)
    except UnknownPluginError as e:
        raise ValueError(str(e)) from None


def _example(section: str) -> str:
    return {
        "env": "{'num_envs': 8}",
        "algorithm": "{'lr': 0.001}",
        "worker": "{'batch_size': 64}",
        "learner": "{'publish_every': 100}",
        "train": "{'eval_every_s': 5}",
        "inference": "{'servers': 1}",
    }.get(section, "{}")


def _unknown_keyword(name: str) -> str:
    keywords = ["run", *TRAIN_KEYS, *SECTIONS]
    msg = f"mqttrl.train() got an unknown setting {name!r}"
    if name in _HINTS:
        msg += f"; mqttrl spells it {_HINTS[name]}"
    else:
        close = difflib.get_close_matches(name, keywords, n=1)
        if close:
            msg += f" (did you mean {close[0]!r}?)"
    return (
        f"{msg}. Keywords: {', '.join(keywords)} (a section takes a dict, e.g. algorithm={{'lr': 0.001}}); "
        "any other key through overrides={'section.key': value}, e.g. overrides={'learner.publish_every': 100} "
        "(every key: docs/configuration.md)"
    )


def _broker_args(b: BrokerSettings) -> list[str]:
    """The broker flags of the child processes (the password travels in MQTTRL_PASSWORD)."""
    out: list[str] = []
    for flag in ("username", "tls_ca", "tls_cert", "tls_key"):
        v = getattr(b, flag)
        if v:
            out += [f"--{flag.replace('_', '-')}", str(v)]
    if b.tls_insecure:
        out.append("--tls-insecure")
    return out + ["--mqtt-protocol", b.protocol]
