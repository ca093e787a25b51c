"""Run configuration: the sections' settings, a TOML file over their defaults, ``--set`` over that.

Every setting is declared once, below, with :func:`~mqttrl.config.settings.setting` (type, default,
unit, doc, validation); the loader, ``mqttrl settings``, ``--help``, the reference tables of
docs/configuration.md (:mod:`mqttrl.config.reference`) and the nodes' rules read that one
declaration. Values are converted to the declared types by cattrs (:mod:`mqttrl.config.convert`).
Unknown keys and bad values fail with one line naming the key, the value and what is allowed
(a misspelled key gets "did you mean ...?"). The algorithm's own hyperparameters are an attrs
class supplied by its plugin, so ``algorithm.lr`` is checked just like ``learner.publish_every``.
"""

from __future__ import annotations

import difflib
import json
import re
import tomllib
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs

from mqttrl import PROTOCOL_VERSION
from mqttrl.config.convert import structure

# the declaration vocabulary lives in mqttrl.config.settings; plugins import it from here as well
from mqttrl.config.settings import ConfigError as ConfigError
from mqttrl.config.settings import non_negative as non_negative
from mqttrl.config.settings import one_of as one_of
from mqttrl.config.settings import positive as positive
from mqttrl.config.settings import seed_range as seed_range
from mqttrl.config.settings import setting as setting
from mqttrl.config.settings import unit_interval as unit_interval
from mqttrl.config.settings import unit_positive as unit_positive

#: what learner.device accepts: "auto" (CUDA when torch sees it, else CPU), "cpu", "cuda", "cuda:N", "mps"
TORCH_DEVICE = re.compile(r"auto|cpu|mps|cuda(:[0-9]+)?")


def torch_device(inst, attribute, value):
    if not isinstance(value, str) or not TORCH_DEVICE.fullmatch(value):
        raise ConfigError(
            f"{attribute.name}={value!r}: must be 'auto', 'cpu', 'cuda', 'cuda:N' (N = 0, 1 ...) or 'mps'"
        )


torch_device.allowed = '"auto" | "cpu" | "cuda" | "cuda:N" | "mps"'


def layer_sizes(inst, attribute, value):
    if not all(isinstance(h, int) and not isinstance(h, bool) and h > 0 for h in value):
        raise ConfigError(f"{attribute.name}={value!r}: must be a list of positive integers, e.g. [256, 256]")


layer_sizes.allowed = "positive integers"


def fifo_priority(inst, attribute, value):
    if isinstance(value, bool) or not 0 <= value <= 99:
        raise ConfigError(f"{attribute.name}={value!r}: must be 0 (off) or a SCHED_FIFO priority 1-99")


fifo_priority.allowed = "0-99"

# Each setting below is declared once: type, default, unit, doc and validation. The doc is what
# docs/configuration.md, `mqttrl settings` and --help show (markdown: `code` is kept in the docs).


@attrs.define
class EnvConfig:
    id: str = setting(
        "CartPole-v1", doc='gymnasium id, `"module:Env-v0"`, or a name/namespace registered by an env plugin'
    )
    kwargs: dict = setting(factory=dict, doc="constructor keyword arguments")  # noqa: RUF009 (an attrs field)
    num_envs: int = setting(4, doc="envs per worker process; their policy calls are batched", validator=positive)
    control_hz: float = setting(
        0.0,
        unit="Hz",
        doc="real-time stepping (a game on its own clock): the worker sends the action at the start of each "
        "period of 1/control_hz s, waits for its end, then reads the observation (docs/real-time.md). 0: envs "
        "are stepped as fast as they go",
        validator=non_negative,
    )
    clock: str = setting(
        "elastic",
        doc='real-time clock: `"elastic"` (a late period is read at once, the next one is shorter: the schedule '
        'stays anchored and never bursts) or `"strict"` (observations only on the schedule: a read later than the '
        "tolerance waits for the next period, counted as skipped)",
        validator=one_of("elastic", "strict"),
    )
    overrun_tolerance: float = setting(
        0.1,
        doc="a period that ends later than this fraction of a period counts as an overrun (reported in heartbeats, "
        "`mqttrl status`, metrics and `summary.json`)",
        validator=non_negative,
    )
    act_buf_len: int = setting(
        0,
        doc="the last N actions appended to the observation (one-hot for discrete actions; a flat Box observation "
        "only): in real time each action lands a period late, so the net needs to see them",
        validator=non_negative,
    )
    obs_timeout_s: float = setting(
        10.0,
        unit="s",
        doc="real time: a game that speaks the real-time protocol and gives no observation (or finishes no reset) "
        "within this long hangs, and is handled like a crash: closed, made afresh, its samples kept. A reset may take "
        "this long plus what the env says it may wait (the screen kit's `window_wait_s` + `reset_timeout_s`, a "
        "launched game's `launch_ready_s`). 0: wait for ever",
        validator=non_negative,
    )
    game_speed: float = setting(
        0.0,
        doc="the game's speed (1: real time, 2: twice as fast). A game the worker launches (`launch`) on Linux runs "
        "under libfaketime at this rate (apt-get install libfaketime) and `control_hz` is then in game time (the "
        "wall period is 1/(control_hz x game_speed)), `set_speed` not called; otherwise a worker calls each game's "
        "`set_speed(factor)` (the real-time protocol, docs/plugins.md) once it is made and `control_hz` stays in "
        "wall-clock periods. 0: the game's own speed",
        validator=non_negative,
    )
    launch: list = setting(  # noqa: RUF009 (an attrs field)
        factory=list,
        doc="the game's command line, a list (program, arguments): a worker starts the game before making its env "
        "and starts it again when it exits, crashes or hangs (the env's step or reset raises; docs/deployment.md). "
        "Needs `num_envs = 1`. `{index}` and `{worker}` here, in `launch_cwd`, `launch_env` and the string values of "
        "`kwargs` are each worker's own `--index` and name (several games on one PC: `mqttrl workers --processes N`). "
        "Empty: the game is started by hand",
        validator=lambda _inst, attr, value: _check_command(attr.name, value),
    )
    launch_cwd: str = setting("", doc="the launched game's working directory (empty: the worker's)")
    launch_env: dict = setting(  # noqa: RUF009 (an attrs field)
        factory=dict, doc="environment variables the launched game gets besides the worker's"
    )
    launch_ready_s: float = setting(
        60.0,
        unit="s",
        doc="how long a (re)launched game may take until its env can be made (its window or API is up)",
        validator=positive,
    )
    launch_max_per_hour: int = setting(
        20,
        doc="starts of the launched game after a crash within an hour after which the worker gives up on it (a "
        "game that exits with status 0 at an episode's end, a game over, is started again without counting)",
        validator=positive,
    )
    launch_each_episode: bool = setting(
        False,
        doc="the launched game cannot start a new game itself (at game over it freezes, or shows its end until "
        "restarted, like freegames' Pacman): every episode is a new process, the game stopped and started again at "
        "each reset after an episode's end (a game over: not counted against `launch_max_per_hour`)",
    )
    spec: dict = setting(  # noqa: RUF009 (an attrs field)
        factory=dict,
        doc="the env's spaces (observation, action), made once where the game is: by `mqttrl train`, by the "
        "first worker, or declared (`mqttrl env-spec CONFIG` prints it); the learner, inference servers and "
        "`load_policy` read it and never make the env, workers whose env differs are refused. Empty: not known yet",
        validator=lambda _inst, _attr, value: _check_spec(value),
    )


def _check_command(name: str, value: object) -> None:
    """A command line as a list of strings (not one string a shell would split)."""
    if not isinstance(value, list) or not all(isinstance(a, str) and a for a in value):
        raise ConfigError(
            f'{name}={value!r}: expected a list of non-empty strings, e.g. ["python", "-m", "mygame", "--windowed"]'
        )


def _check_spec(value: object) -> None:
    """``env.spec`` is empty or a spec (mqttrl.config.env_spec); a bad one is one line naming it."""
    if value:
        from mqttrl.config.env_spec import EnvSpec

        EnvSpec.from_json(value, where="spec")  # the section names itself: "env.spec: ..."


@attrs.define
class WorkerConfig:
    batch_size: int = setting(
        128, doc="transitions per sample message (more = fewer, bigger messages)", validator=positive
    )
    max_batch_delay_s: float = setting(0.5, unit="s", doc="a partial batch is sent after this long", validator=positive)
    heartbeat_interval_s: float = setting(2.0, unit="s", doc="time between a worker's heartbeats", validator=positive)
    outbox_limit: int = setting(
        2000,
        doc="messages held while the broker is unreachable; oldest samples dropped first, and counted",
        validator=positive,
    )
    torch_threads: int = setting(1, doc="torch threads of a worker process", validator=positive)
    realtime_priority: int = setting(
        10,
        doc="real time (`env.control_hz`): the control thread runs at this SCHED_FIFO priority (1-99) from the "
        "period's reads to its actions, back at the ordinary one for the period's chores (Linux, as root or with "
        "CAP_SYS_NICE; on Windows any value above 0 means THREAD_PRIORITY_TIME_CRITICAL and a 1 ms system timer, "
        "timeBeginPeriod(1); where refused, one log line and the ordinary priority). 0: never raised",
        validator=fifo_priority,
    )
    realtime_spin_s: float = setting(
        0.0003,
        unit="s",
        doc="real time (`env.control_hz`): the last this long of each control period is spun (the clock read in a "
        "loop) instead of slept, so the OS timer's slack and the sleeping thread's wake-up latency are not added to "
        "the period's error; it costs this much CPU a period. 0: sleep to the period's end",
        validator=non_negative,
    )
    realtime_slice_s: float = setting(
        0.0001,
        unit="s",
        doc="real time, where `realtime_priority`'s SCHED_FIFO is refused (no root): the control thread asks Linux's "
        "EEVDF scheduler (6.12+) for this short a time slice instead (sched_setattr's sched_runtime, 0.1-100 ms, no "
        "privilege needed): when its sleep ends it preempts ordinary threads sooner, its share of the CPU unchanged. "
        "Not taken (an older kernel, Windows): one log line. 0: not asked. At N = 8 on 2 cores without root it took the "
        "period error's p99 from <= 4 ms to <= 1.5 ms (docs/benchmarks/real-time.md)",
        validator=non_negative,
    )
    ack_timeout_s: float = setting(
        60.0,
        unit="s",
        doc="a sample batch unacknowledged by the broker for this long means a frozen link: the worker "
        "reconnects and sends it again (0: never)",
        validator=non_negative,
    )
    sync_timeout_s: float = setting(
        60.0,
        unit="s",
        doc="sync mode (PPO): how long a worker waits for the next model version before it raises a timeout error",
        validator=positive,
    )
    inference: str = setting(
        "auto",
        doc='where the policy runs: `"auto"` (numpy if the algorithm has a numpy forward, else torch), `"torch"`, '
        '`"numpy"`, or `"remote"` (central inference servers, see `[inference]`)',
        validator=one_of("auto", "torch", "numpy", "remote"),
    )
    compression: str = setting(
        "auto",
        doc='compression of each sample batch\'s array data (the header stays plain): `"auto"` (zstd when the '
        "arrays are at least 64 KiB, i.e. pixel observations; none for small vector batches, where compressing "
        'costs more than it saves), `"none"`, `"zstd"` (level 1) or `"lz4"` (needs `pip install -e \'.[lz4]\'` '
        "on the learner and every worker; the learner refuses to start without it). Data that does not shrink is "
        "sent raw. The learner caps what a batch may decompress to at `learner.max_payload_mb`",
        validator=one_of("auto", "none", "zstd", "lz4"),
    )
    metrics_port: int = setting(
        0,
        doc="Prometheus endpoint of each worker process (`/metrics`: time per block, control-period errors; "
        "docs/telemetry.md): the worker with `--index i` listens on this port + i. 0: off",
        validator=non_negative,
    )
    record_demos_to: str = setting(
        "",
        doc="a directory on the worker's machine where it writes the episodes a person played in its games "
        '(the env reports `info["demo_action"]`) as a demonstration dataset (`mqttrl train --demos DIR` reads '
        'it; docs/demonstrations.md); `""`: none',
    )


@attrs.define
class LearnerConfig:
    publish_every: int = setting(50, doc="updates per published model version", validator=positive)
    metrics_port: int = setting(
        0,
        doc="Prometheus endpoint of the learner (`/metrics`: time per block: receive, sample, train step, publish; "
        "the workers' real-time control periods are on their own endpoints, `worker.metrics_port`). 0: off",
        validator=non_negative,
    )
    max_staleness_s: float = setting(
        60.0,
        unit="s",
        doc="async mode: accept a batch made with a model that was replaced by a newer version at most this long "
        "ago (the current model's batches are always in time). Seconds, not versions: a fast learner (more "
        "versions a second) or a slow link (weights arrive later) does not make a batch stale sooner. The default "
        "admits what a frozen link held until the worker recycled it (`worker.ack_timeout_s`); DQN's replay "
        "memory holds older data anyway. A batch of a previous learner epoch is admitted whatever its version "
        "(see docs/workers.md)",
        validator=non_negative,
    )
    max_staleness: int | None = setting(
        None,
        doc="deprecated (use `max_staleness_s`; the learner warns when it is set): also refuse a batch made more "
        'than N versions before the current one, the old rule; `"none"`: off',
        validator=attrs.validators.optional(non_negative),
    )
    weights_every_s: float = setting(
        1.0,
        unit="s",
        doc="async mode: at most one new model version (a weights message to every worker) per this many seconds, "
        "however fast the learner trains (`publish_every` updates are also needed). Bounds each worker's weight "
        "traffic to one model per interval: 68 kB/s for CartPole's DQN in float32 (docs/architecture.md, "
        '"Weights on a slow link"); 0: every `publish_every` updates',
        validator=non_negative,
    )
    weights_dtype: str = setting(
        "float32",
        doc='float tensors of the weights on the wire: `"float32"` (exact), `"float16"` or `"bfloat16"` (half '
        "the bytes; workers cast back to float32; a tensor that does not fit float16 is sent in float32). "
        "Checkpoints and `best/` keep float32",
        validator=one_of("float32", "float16", "bfloat16"),
    )
    checkpoint_every: int = setting(
        2000, doc="updates between checkpoints (0: only at exit and on quicksave)", validator=non_negative
    )
    keep_checkpoints: int = setting(
        3, doc="periodic checkpoints kept (the `best/` and quicksave ones are not counted)", validator=positive
    )
    checkpoint_replay: bool = setting(
        True, doc="include the replay buffer in checkpoints (bigger, but resumes exactly)"
    )
    metrics_interval_s: float = setting(
        1.0, unit="s", doc="time between the learner's metrics messages", validator=positive
    )
    metrics_workers: int = setting(
        100,
        doc="rows of the per-worker table (`workers`) in one metrics message; a bigger fleet takes turns, workers "
        "whose state changed (online, restarts, missing batches) first. The totals (`workers_online`, "
        "`workers_known`, `missing_batches`, ...) always count every worker",
        validator=positive,
    )
    forget_offline_s: float = setting(
        3600.0,
        unit="s",
        doc="a worker offline for this long leaves the metrics and checkpoints (the learner still remembers the "
        "sequence numbers of the last 4096 forgotten workers, so their resends stay duplicates). A fleet whose "
        "processes come and go under new names (the default name is `<host>-<pid>`) "
        "would otherwise grow the learner for ever",
        validator=positive,
    )
    worker_timeout_s: float = setting(
        10.0, unit="s", doc="no heartbeat for this long → worker offline", validator=positive
    )
    require_announce: bool = setting(True, doc="reject samples from workers without a birth message")
    device: str = setting(
        "auto",
        doc='torch device of the learner: `"auto"` (CUDA when `torch.cuda.is_available()`, else the CPU), `"cpu"`, '
        '`"cuda"`, `"cuda:N"` or `"mps"`. Checked at learner start: a device torch cannot use (`"cuda"` with a '
        'CPU-only torch, `"cuda:3"` on a 2-GPU box) stops the learner with one line that says so; the log names '
        "the device used",
        validator=torch_device,
    )
    torch_threads: int = setting(1, doc="torch threads of the learner process", validator=positive)
    max_payload_mb: float = setting(
        64.0, unit="MB", doc="larger sample messages are rejected as oversize", validator=positive
    )
    round_timeout_s: float = setting(
        30.0,
        unit="s",
        doc="sync mode (PPO): a round waits this long for every live worker's share, then trains without the "
        "missing ones",
        validator=positive,
    )

    @property
    def max_payload_bytes(self) -> int:
        """``max_payload_mb`` in bytes (MiB): what the learner's admission compares a message with."""
        return int(self.max_payload_mb * 1024 * 1024)


@attrs.define
class InferenceConfig:
    """Central inference (SEED style): servers batch observations from many workers."""

    servers: int = setting(
        0,
        doc='inference servers `mqttrl train` starts (0 with `worker.inference = "remote"`: it starts 1)',
        validator=non_negative,
    )
    batch_size: int = setting(
        256, doc="a server runs at most this many observations in one forward", validator=positive
    )
    max_delay_ms: float = setting(
        0.0,
        unit="ms",
        doc="how long a server waits for more requests to fill a batch. 0 (greedy): it serves what is queued at "
        "once, and requests that arrive during a forward form the next batch, so batches grow with load without "
        "adding latency when the load is light",
        validator=non_negative,
    )
    backend: str = setting("auto", doc='`"auto"`, `"torch"` or `"numpy"`', validator=one_of("auto", "torch", "numpy"))
    device: str = setting(
        "auto",
        doc='torch device of a server\'s forward (the torch backend): `"auto"` (CUDA when `torch.cuda.is_available()`, '
        'else the CPU), `"cpu"`, `"cuda"`, `"cuda:N"` or `"mps"`; checked when the server builds its forward, which '
        "logs the device. One forward serves the batch of every request queued (`batch_size`), so a GPU serves many "
        "workers' envs at once",
        validator=torch_device,
    )
    timeout_s: float = setting(
        2.0,
        unit="s",
        doc="a worker resends a request that got no answer in this long, to another server where it can",
        validator=positive,
    )
    retries: int = setting(
        5,
        doc="resends of an unanswered request; after them the worker fails with an error that says what to check",
        validator=non_negative,
    )
    shared: bool = setting(
        True,
        doc="spread requests with MQTT 5 shared subscriptions (falls back to per-server topics without them)",
    )


@attrs.define
class TrainConfig:
    """Settings of ``mqttrl train`` (single-machine mode) and of evaluation."""

    workers: int = setting(2, doc="worker processes (`--workers`)", validator=positive)
    seed: int = setting(0, doc="run seed (`--seed`)", validator=seed_range)
    target_return: float | None = setting(
        475.0,
        doc='stop when the greedy evaluation mean reaches it; `"none"` (TOML has no null): never, train for the '
        "whole budget and exit 0",
    )
    eval_episodes: int = setting(20, doc="episodes per greedy evaluation", validator=positive)
    eval_every_s: float = setting(10.0, unit="s", doc="time between greedy evaluations", validator=positive)
    eval_every_env_steps: int = setting(
        0,
        doc="evaluate by data instead of by time: the first model trained on each multiple of this many env steps "
        "(those the learner had taken in when it published it; SB3's `eval_freq`, for comparing runs at equal data). "
        "0: every `eval_every_s`",
        validator=non_negative,
    )
    eval_on: str = setting(
        "evaluator",
        doc='where greedy evaluations are played: `"evaluator"`, a node with a copy of the env of its own (a '
        'simulator; `mqttrl train` runs one), or `"workers"`: each worker plays them on its own game between '
        "training episodes, every `eval_every_s` for a model it has not judged (a real game: one window a PC; PPO "
        "workers between rounds, after their share is sent)",
        validator=one_of("evaluator", "workers"),
    )
    eval_workers: int = setting(
        0,
        doc='with `eval_on = "workers"`: how many workers evaluate, those started with `--index` below it (`mqttrl '
        "train`'s w0, w1, ...); the others train all the time. 0: every worker",
        validator=non_negative,
    )
    max_seconds: float = setting(600.0, unit="s", doc="time budget (0: none)", validator=non_negative)
    max_env_steps: int = setting(0, doc="step budget in env steps (0: none)", validator=non_negative)
    final_eval: bool = setting(
        True,
        doc="when a budget ends the run, evaluate the newest model if no evaluation has seen it yet (after one "
        "under way; `final_eval_mean` and `final_model_version` in `summary.json`; it counts like any evaluation "
        'for `best/` and the target). With `eval_on = "workers"`: the workers\' next evaluation, of that model or a '
        "newer one, waited for up to `eval_every_s` and the evaluation's time)",
    )
    human_baseline: str = setting(
        "",
        doc="a person's returns on this game (the JSON `mqttrl play` writes): `summary.json` puts the final and best "
        "evaluations beside them (the human-normalised score where the file holds random play too; docs/demonstrations.md)",
    )
    telemetry: bool = setting(
        True,
        doc="run the telemetry node in the trainer (CSV + PNG curves in `<run dir>/telemetry`, best-model quicksaves)",
    )
    telemetry_storages: list = setting(  # noqa: RUF009 (setting() is an attrs field, its factory a fresh list)
        factory=lambda: ["files"],
        doc="storage plugins telemetry writes to: `files`, `influxdb` (reads `INFLUXDB_URL`/`TOKEN`/`ORG`/`BUCKET`), "
        "`tensorboard` (event files in `<run dir>/tensorboard`), `wandb` (docs/telemetry.md)",
    )


def demo_ratio(inst, attribute, value):
    if not 0 <= value < 1:
        raise ConfigError(f"{attribute.name}={value!r}: must be >= 0 and < 1")


demo_ratio.allowed = ">= 0 and < 1"


@attrs.define
class DemosConfig:
    """Learning from demonstrations (`mqttrl record` datasets; docs/demonstrations.md)."""

    path: str = setting(
        "",
        doc="a demonstration dataset directory (`mqttrl train --demos DIR` sets it; `mqttrl record` writes one); "
        '`""`: none. The learner loads it whole into a part of its replay that is never evicted, or refuses to '
        "start with one line naming the bad file",
    )
    ratio: float = setting(
        0.25,
        doc="DQN: share of each update's rows drawn from the demonstrations (rows are appended to the "
        "`batch_size` replay rows, so the batch grows to batch_size / (1 − ratio))",
        validator=demo_ratio,
    )
    margin_loss: float = setting(
        1.0,
        doc="DQN: weight of DQfD's large-margin supervised loss on the demonstration rows "
        "(max_a [Q(s, a) + margin·[a ≠ a_E]] − Q(s, a_E)); 0: off. DQfD's 1.0: without it 20 "
        "episodes barely helped on MinAtar Breakout (docs/benchmarks.md)",
        validator=non_negative,
    )
    margin: float = setting(0.8, doc="DQN: the margin of that loss (DQfD's 0.8)", validator=non_negative)
    pretrain_updates: int = setting(
        1000,
        doc="gradient updates on the demonstrations alone before the first model is published (DQN: TD + "
        "margin loss, DQfD's pretraining; PPO: behaviour cloning minibatches of `algorithm.minibatch_size`); "
        "not repeated by a resumed learner",
        validator=non_negative,
    )
    pretrain_lr: float = setting(
        1e-3, doc="PPO, SAC: the learning rate of the behaviour cloning before the first model", validator=positive
    )
    bc_coef: float = setting(
        1.0,
        doc="PPO: weight of a behaviour-cloning term (−log π(a_E|s) on demonstration minibatches) added to "
        "each update during fine-tuning, decaying linearly to 0 over `bc_env_steps` (DAPG); 0: off",
        validator=non_negative,
    )
    bc_env_steps: int = setting(500_000, doc="PPO: env steps over which `bc_coef` decays to 0", validator=non_negative)
    priority_bonus: float = setting(
        0.0,
        doc="DQN with prioritized replay: demonstration transitions are drawn by priority (|TD error| + this "
        "bonus, DQfD's ε_d), against the replay's priorities, instead of at `ratio`; 0: at `ratio`",
        validator=non_negative,
    )
    max_mb: float = setting(
        4096.0, unit="MiB", doc="a dataset larger than this is refused before it is read", validator=positive
    )


@attrs.define
class AlgorithmSection:
    name: str = setting("dqn", doc="the algorithm, as a plugin registers it (`mqttrl plugins` lists them)")
    #: the plugin's own hyperparameter object (an attrs instance); not a key: its fields are [algorithm]'s
    params: Any = None


@attrs.define
class RunConfig:
    run: str = setting("cartpole", doc="run name: the topic prefix `mqttrl/<run>/` (A-Z a-z 0-9 _ . -)")
    env: EnvConfig = attrs.field(factory=EnvConfig)
    algorithm: AlgorithmSection = attrs.field(factory=AlgorithmSection)
    worker: WorkerConfig = attrs.field(factory=WorkerConfig)
    learner: LearnerConfig = attrs.field(factory=LearnerConfig)
    train: TrainConfig = attrs.field(factory=TrainConfig)
    inference: InferenceConfig = attrs.field(factory=InferenceConfig)
    demos: DemosConfig = attrs.field(factory=DemosConfig)

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
    "demos": DemosConfig,
}


def _allowed(cls) -> str:
    return ", ".join(f.name for f in attrs.fields(cls))


def did_you_mean(key: str, choices: Iterable[str]) -> str:
    """ " (did you mean X?)" for a misspelled key, else ""."""
    close = difflib.get_close_matches(key, list(choices), n=1)
    return f" (did you mean {close[0]}?)" if close else ""


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
    names = [f.name for f in attrs.fields(cls)]
    for key in data:
        if key not in names:
            raise ConfigError(
                f"unknown key {path}.{key}{did_you_mean(key, names)}; allowed keys in [{path}]: {_allowed(cls)}"
            )
    return structure(cls, data, path)


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
        if raw.strip()[:1] in ("[", "{"):  # meant as a list or table: a bare word inside lost its quotes
            raise ConfigError(
                f"--set {item!r}: {raw.strip()} is not a TOML value; strings inside a list or table need quotes, "
                f"e.g. --set '{key.strip()}={_quoted(raw.strip())}'"
            ) from None
        value = raw
    return parts, value


def _quoted(raw: str) -> str:
    """``[files, wandb]`` as ``["files", "wandb"]``: the bare words of a list quoted (for a hint)."""
    inner = [w.strip().strip("\"'") for w in raw.strip("[]{}").split(",") if w.strip()]
    return "[" + ", ".join(f'"{w}"' for w in inner) + "]"


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
    text = p.read_text()
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        from mqttrl.config.toml_text import toml_error_line

        raise ConfigError(toml_error_line(p, text, e)) from None


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
            raise ConfigError(
                f"unknown section or key {key!r}{did_you_mean(key, top_allowed)}; "
                f"allowed: {', '.join(sorted(top_allowed))}"
            )
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


def __getattr__(name: str) -> Any:
    """``mqttrl.config.write_resolved``: deprecated, it is :func:`mqttrl.state.run_dir.write_resolved`
    (writing a run directory's file is the state floor's job; the config floor imports nothing above it)."""
    if name == "write_resolved":
        import importlib
        import warnings

        warnings.warn(
            "mqttrl.config.write_resolved is deprecated; use mqttrl.state.run_dir.write_resolved",
            DeprecationWarning,
            stacklevel=2,
        )
        return importlib.import_module("mqttrl.state.run_dir").write_resolved
    raise AttributeError(f"module 'mqttrl.config' has no attribute {name!r}")
