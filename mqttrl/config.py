"""Run configuration: attrs classes with defaults, a TOML file over them, ``--set`` over that.

Unknown keys and bad values fail with the key, the value and what is allowed.
The algorithm's own hyperparameters are an attrs class supplied by its plugin,
so ``algorithm.lr`` is checked just like ``learner.publish_every``.
"""

from __future__ import annotations

import json
import re
import tomllib
import types
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import attrs

from mqttrl import PROTOCOL_VERSION


class ConfigError(ValueError):
    """A config key or value is wrong; the message says which and what is allowed."""


# attrs validators for config classes, plugins' hyperparameters included: each error names
# the key, the bad value and what is allowed.
def positive(inst, attribute, value):
    if value <= 0:
        raise ConfigError(f"{attribute.name}={value!r}: must be > 0")


def non_negative(inst, attribute, value):
    if value < 0:
        raise ConfigError(f"{attribute.name}={value!r}: must be >= 0")


def unit_interval(inst, attribute, value):
    if not 0 <= value <= 1:
        raise ConfigError(f"{attribute.name}={value!r}: must be between 0 and 1")


def unit_positive(inst, attribute, value):
    if not 0 < value <= 1:
        raise ConfigError(f"{attribute.name}={value!r}: must be > 0 and <= 1")


#: what learner.device accepts: "auto" (CUDA when torch sees it, else CPU), "cpu", "cuda", "cuda:N", "mps"
TORCH_DEVICE = re.compile(r"auto|cpu|mps|cuda(:[0-9]+)?")


def torch_device(inst, attribute, value):
    if not isinstance(value, str) or not TORCH_DEVICE.fullmatch(value):
        raise ConfigError(
            f"{attribute.name}={value!r}: must be 'auto', 'cpu', 'cuda', 'cuda:N' (N = 0, 1 ...) or 'mps'"
        )


def layer_sizes(inst, attribute, value):
    if not all(isinstance(h, int) and not isinstance(h, bool) and h > 0 for h in value):
        raise ConfigError(f"{attribute.name}={value!r}: must be a list of positive integers, e.g. [256, 256]")


@attrs.define
class EnvConfig:
    #: gymnasium id ("CartPole-v1"), "module:Env-v0", or a name an env plugin registers
    id: str = "CartPole-v1"
    #: keyword arguments for the env constructor
    kwargs: dict = attrs.field(factory=dict)
    #: environments stepped in one worker process, their policy calls batched
    num_envs: int = attrs.field(default=4, validator=positive)


@attrs.define
class WorkerConfig:
    #: transitions per sample message (more = fewer, bigger messages)
    batch_size: int = attrs.field(default=128, validator=positive)
    #: longest time a partial batch waits before it is sent
    max_batch_delay_s: float = attrs.field(default=0.5, validator=positive)
    heartbeat_interval_s: float = attrs.field(default=2.0, validator=positive)
    #: sample messages held while the broker is unreachable; the oldest go first
    outbox_limit: int = attrs.field(default=2000, validator=positive)
    torch_threads: int = attrs.field(default=1, validator=positive)
    #: sync mode: how long a worker waits for the next model version before raising a timeout error
    sync_timeout_s: float = attrs.field(default=60.0, validator=positive)
    #: where the policy runs: "auto" (numpy if the algorithm has a numpy forward, else torch),
    #: "torch", "numpy", or "remote" (central inference servers, see [inference])
    inference: str = attrs.field(default="auto", validator=attrs.validators.in_(["auto", "torch", "numpy", "remote"]))
    #: compression of a sample batch's array data: "auto" (zstd for batches of at least 64 KiB of
    #: arrays, i.e. pixel observations; none for small vector batches, where it costs more than it
    #: saves), "none", "zstd" or "lz4" (pip install 'mqttrl[lz4]' on the learner and the workers)
    compression: str = attrs.field(default="auto", validator=attrs.validators.in_(["auto", "none", "zstd", "lz4"]))


@attrs.define
class LearnerConfig:
    #: publish weights (a new model version) every this many updates
    publish_every: int = attrs.field(default=50, validator=positive)
    #: async mode: accept a batch made with a model at most this many versions older than the
    #: current one (N+1 versions: v, v-1 ... v-N; 0 accepts only the current version)
    max_staleness: int = attrs.field(default=3, validator=non_negative)
    #: write a checkpoint every this many updates (0: only on quicksave and exit)
    checkpoint_every: int = attrs.field(default=2000, validator=non_negative)
    #: checkpoints kept (the best/ and quicksave ones are not counted)
    keep_checkpoints: int = attrs.field(default=3, validator=positive)
    #: include the replay buffer in checkpoints (bigger, but resumes exactly)
    checkpoint_replay: bool = True
    metrics_interval_s: float = attrs.field(default=1.0, validator=positive)
    #: rows of the per-worker table in one metrics message: a bigger fleet takes turns, workers
    #: whose state changed first (the totals always count every worker)
    metrics_workers: int = attrs.field(default=100, validator=positive)
    #: a worker offline for this long is forgotten: its metrics row and sequence numbers (a
    #: fleet whose processes come and go under new names would otherwise grow the learner for ever)
    forget_offline_s: float = attrs.field(default=3600.0, validator=positive)
    #: a worker with no heartbeat for this long is marked offline
    worker_timeout_s: float = attrs.field(default=10.0, validator=positive)
    #: reject samples from workers that never published a birth message
    require_announce: bool = True
    #: torch device: "auto" (CUDA when torch.cuda.is_available(), else CPU), "cpu", "cuda", "cuda:N" or "mps"
    device: str = attrs.field(default="auto", validator=torch_device)
    torch_threads: int = attrs.field(default=1, validator=positive)
    max_payload_mb: float = attrs.field(default=64.0, validator=positive)
    #: sync mode: a round waits this long for every live worker's share, then trains without the missing ones
    round_timeout_s: float = attrs.field(default=30.0, validator=positive)


@attrs.define
class InferenceConfig:
    """Central inference (SEED style): servers batch observations from many workers."""

    #: inference servers `mqttrl train` starts (workers then use them when worker.inference = "remote")
    servers: int = attrs.field(default=0, validator=non_negative)
    #: a server runs at most this many observations in one forward
    batch_size: int = attrs.field(default=256, validator=positive)
    #: how long a server waits for more requests to fill a batch. 0 (greedy): it serves what is queued
    #: at once, and requests that arrive during a forward form the next batch, so batches grow with load
    #: without adding latency when the load is light
    max_delay_ms: float = attrs.field(default=0.0, validator=non_negative)
    #: "auto", "torch" or "numpy"
    backend: str = attrs.field(default="auto", validator=attrs.validators.in_(["auto", "torch", "numpy"]))
    #: a worker resends a request that got no answer in this long, to another server where it can
    timeout_s: float = attrs.field(default=2.0, validator=positive)
    retries: int = attrs.field(default=5, validator=non_negative)
    #: use MQTT 5 shared subscriptions to spread requests (falls back to per-server topics without them)
    shared: bool = True


@attrs.define
class TrainConfig:
    """Settings of ``mqttrl train`` (single-machine mode) and of evaluation."""

    workers: int = attrs.field(default=2, validator=positive)
    seed: int = 0
    #: stop when the greedy evaluation mean reaches this ("none": never; train for the whole budget)
    target_return: float | None = 475.0
    eval_episodes: int = attrs.field(default=20, validator=positive)
    #: seconds between greedy evaluations
    eval_every_s: float = attrs.field(default=10.0, validator=positive)
    #: budget; 0 means unlimited
    max_seconds: float = attrs.field(default=600.0, validator=non_negative)
    max_env_steps: int = attrs.field(default=0, validator=non_negative)
    #: when a budget ends the run, evaluate the newest model if no evaluation has seen it yet
    #: (``final_eval_mean`` in summary.json; it counts like any evaluation for best/ and the target)
    final_eval: bool = True
    #: run a telemetry process (CSV + PNG curves in <run dir>/telemetry, best-model quicksaves)
    telemetry: bool = True
    #: storage plugins telemetry writes to (influxdb reads INFLUXDB_URL/TOKEN/ORG/BUCKET)
    telemetry_storages: list = attrs.field(factory=lambda: ["files"])


@attrs.define
class AlgorithmSection:
    name: str = "dqn"
    #: the plugin's own hyperparameter object (an attrs instance)
    params: Any = None


@attrs.define
class RunConfig:
    run: str = "cartpole"
    env: EnvConfig = attrs.field(factory=EnvConfig)
    algorithm: AlgorithmSection = attrs.field(factory=AlgorithmSection)
    worker: WorkerConfig = attrs.field(factory=WorkerConfig)
    learner: LearnerConfig = attrs.field(factory=LearnerConfig)
    train: TrainConfig = attrs.field(factory=TrainConfig)
    inference: InferenceConfig = attrs.field(factory=InferenceConfig)

    def to_dict(self) -> dict:
        d = attrs.asdict(self, recurse=True)
        d["protocol"] = PROTOCOL_VERSION
        return d


_SECTIONS = {
    "env": EnvConfig,
    "worker": WorkerConfig,
    "learner": LearnerConfig,
    "train": TrainConfig,
    "inference": InferenceConfig,
}


def _allowed(cls) -> str:
    return ", ".join(f.name for f in attrs.fields(cls))


def _coerce(path: str, value: Any, typ: Any) -> Any:
    """Check ``value`` against a field's annotated type; ints may widen to floats."""
    origin = typing.get_origin(typ)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(typ)
        # TOML has no null: an optional setting is switched off with the string "none"
        if type(None) in args and (value is None or (isinstance(value, str) and value.lower() == "none")):
            return None
        errors = []
        for a in args:
            if a is type(None):
                continue
            try:
                return _coerce(path, value, a)
            except ConfigError as e:
                errors.append(str(e))
        raise ConfigError(errors[0] if errors else f"{path}={value!r}: bad value")
    if typ is Any:
        return value
    if typ is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{path}={value!r}: expected true or false")
    if typ is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(f"{path}={value!r}: expected an integer")
    if typ is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise ConfigError(f"{path}={value!r}: expected a number")
    if typ is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"{path}={value!r}: expected a string")
    if typ in (dict,) or origin is dict:
        if isinstance(value, dict):
            return value
        raise ConfigError(f"{path}={value!r}: expected a table")
    if origin in (list, tuple) or typ in (list, tuple):
        if isinstance(value, (list, tuple)):
            return (origin or typ)(value)
        raise ConfigError(f"{path}={value!r}: expected a list")
    if typing.get_origin(typ) is typing.Literal:
        choices = typing.get_args(typ)
        if value in choices:
            return value
        raise ConfigError(f"{path}={value!r}: allowed values are {', '.join(map(repr, choices))}")
    return value


def with_preset(cls: type, data: Mapping[str, Any], path: str) -> Mapping[str, Any]:
    """``data`` over the preset it names: a class with a ``PRESETS`` mapping (name -> {key: value})
    and a ``preset`` field takes ``preset = "name"``, whose keys fill in what ``data`` leaves out
    (the data's own keys win). An unknown name is one error naming the presets."""
    presets = getattr(cls, "PRESETS", None)
    if not isinstance(presets, Mapping) or "preset" not in data:
        return data
    name = data["preset"]
    if not isinstance(name, str) or name not in presets:
        raise ConfigError(f"{path}.preset={name!r}: unknown preset; presets: {', '.join(map(repr, presets))}")
    return {**presets[name], **data}


def build(cls: type, data: Mapping[str, Any], path: str) -> Any:
    """Instantiate attrs class ``cls`` from a mapping, naming any bad key or value
    (a ``preset`` key first fills in its preset's keys: :func:`with_preset`)."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{path}: expected a table, got {data!r}")
    data = with_preset(cls, data, path)
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in attrs.fields(cls)}
    kwargs = {}
    for key, value in data.items():
        if key not in fields:
            raise ConfigError(f"unknown key {path}.{key}; allowed keys in [{path}]: {_allowed(cls)}")
        kwargs[key] = _coerce(f"{path}.{key}", value, hints.get(key, Any))
    try:
        return cls(**kwargs)
    except ConfigError as e:
        raise ConfigError(f"{path}.{e}") from None
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{path}: {e}") from None


def parse_override(item: str) -> tuple[list[str], Any]:
    """Parse ``section.key=value``; the value is read as TOML, else taken as a string."""
    if "=" not in item:
        raise ConfigError(f"--set {item!r}: expected section.key=value, e.g. --set algorithm.lr=0.0005")
    key, raw = item.split("=", 1)
    parts = [p for p in key.strip().split(".") if p]
    if not parts:
        raise ConfigError(f"--set {item!r}: empty key")
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    return parts, value


def _deep_set(d: dict, parts: list[str], value: Any) -> None:
    for p in parts[:-1]:
        nxt = d.setdefault(p, {})
        if not isinstance(nxt, dict):
            raise ConfigError(f"cannot set {'.'.join(parts)}: {p} is not a table")
        d = nxt
    d[parts[-1]] = value


def load_config(
    path: str | Path | None,
    overrides: list[str] = (),
    params_class: Callable[[str], type] | None = None,
) -> RunConfig:
    """Defaults, then the TOML file (or a run's resolved ``config.json``), then ``--set`` overrides.

    ``params_class(name)`` returns the attrs class of an algorithm's
    hyperparameters (looked up through the plugins).
    """
    data = read_config_data(path) if path is not None else {}
    for item in overrides:
        parts, value = parse_override(item)
        _deep_set(data, parts, value)
    return from_dict(data, params_class)


def read_config_data(path: str | Path) -> dict:
    """The plain data of a TOML config file, or of a run directory's resolved ``config.json``."""
    p = Path(path)
    if not p.exists():
        raise ConfigError(f"config file {p} does not exist")
    if p.suffix == ".json":  # a run directory's resolved config.json
        try:
            data = json.loads(p.read_text())
        except ValueError as e:
            raise ConfigError(f"{p} is not valid JSON: {e}") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{p}: expected a JSON object")
        return data
    try:
        return tomllib.loads(p.read_text())
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{p} is not valid TOML: {e}") from None


def set_key(data: dict, key: str, value: Any) -> None:
    """Set the dotted ``key`` (``algorithm.lr``, ``env.kwargs.render_mode``) in plain config data;
    the value is taken as it is (checked later, by :func:`from_dict`)."""
    parts = [p for p in str(key).strip().split(".") if p]
    if not parts:
        raise ConfigError(f"{key!r}: empty key; expected section.key, e.g. 'algorithm.lr'")
    _deep_set(data, parts, value)


def from_dict(data: Mapping[str, Any], params_class: Callable[[str], type] | None = None) -> RunConfig:
    """Build a :class:`RunConfig` from plain data (a TOML file or a received config)."""
    data = dict(data)
    data.pop("protocol", None)
    top_allowed = {"run", "algorithm", *_SECTIONS}
    for key in data:
        if key not in top_allowed:
            raise ConfigError(f"unknown section or key {key!r}; allowed: {', '.join(sorted(top_allowed))}")
    run = data.get("run", RunConfig.run if isinstance(RunConfig.run, str) else "cartpole")
    if not isinstance(run, str):
        raise ConfigError(f"run={run!r}: expected a string")
    from mqttrl.transport.topics import check_name

    try:
        check_name("run", run)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    sections = {name: build(cls, data.get(name, {}), name) for name, cls in _SECTIONS.items()}
    algo = data.get("algorithm", {})
    if not isinstance(algo, Mapping):  # e.g. --set algorithm=dqn instead of algorithm.name=dqn
        raise ConfigError(f"algorithm={algo!r}: expected a table, e.g. --set algorithm.name=dqn")
    algo = dict(algo)
    name = algo.pop("name", "dqn")
    nested = algo.pop("params", None)  # the to_dict() form nests hyperparameters
    if isinstance(nested, Mapping):
        algo = {**nested, **algo}
    elif nested is not None:
        raise ConfigError(f"algorithm.params={nested!r}: expected a table")
    if not isinstance(name, str):
        raise ConfigError(f"algorithm.name={name!r}: expected a string")
    params = None
    if params_class is not None:
        params = build(params_class(name), algo, "algorithm")
    elif algo:
        params = algo
    return RunConfig(run=run, algorithm=AlgorithmSection(name=name, params=params), **sections)


def write_resolved(config: RunConfig, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(config.to_dict(), indent=2, sort_keys=True))
    tmp.replace(path)
