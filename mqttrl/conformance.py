"""Conformance checks a plugin author runs: ``mqttrl check-plugin NAME``.

:func:`check_algorithm` runs an algorithm through the round trip a real run
makes, in one process and without a broker, with the real wire formats::

    env spaces -> make_forward (each backend that imports) -> make_learner
    -> export_weights -> weights wire -> forward/actor.load_weights
    -> actor acts on env steps -> take -> encode_batch (raw and zstd) -> decode_batch
    -> sample_spec.validate -> learner (add + train_step, or train_round)
    -> new weights -> actor loads them and acts -> state_dict round trip

and checks the mode's protocols (:mod:`mqttrl.plugin.algorithm`). :func:`check_storage`
writes a few points and closes. Each step is one :class:`CheckResult`; an
algorithm's chain stops at its first failing step (the rest depend on it).
"""

from __future__ import annotations

import contextlib
import json
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any

import attrs
import gymnasium as gym
import numpy as np

from mqttrl.config.settings import ConfigError
from mqttrl.plugin.algorithm import (
    Actor,
    ActorContext,
    AlgorithmInfo,
    AsyncLearner,
    Forward,
    SyncActor,
    SyncLearner,
)
from mqttrl.plugin.storage import Point, Storage


@attrs.frozen
class CheckResult:
    """One check: its step name, whether it passed, and what was seen."""

    name: str
    ok: bool
    detail: str = ""


class _Failed(Exception):
    pass


class _Checks:
    """Collects results; ``step`` records one and stops the chain when it fails."""

    def __init__(self) -> None:
        self.results: list[CheckResult] = []

    def ok(self, name: str, detail: str = "") -> None:
        self.results.append(CheckResult(name, True, detail))

    def fail(self, name: str, detail: str) -> None:
        self.results.append(CheckResult(name, False, detail))
        raise _Failed(name)

    @contextlib.contextmanager
    def step(self, name: str) -> Iterator[dict]:
        """Run a block as step ``name``; an exception fails it. Put a detail in the yielded dict."""
        note: dict = {}
        try:
            yield note
        except _Failed:
            raise
        except Exception as exc:
            frame = traceback.extract_tb(exc.__traceback__)[-1]
            where = f" ({frame.filename.rsplit('/', 1)[-1]}:{frame.lineno})"
            self.fail(name, f"{type(exc).__name__}: {exc}{where}")
        self.ok(name, note.get("detail", ""))

    def require(self, name: str, cond: bool, detail: str) -> None:
        if not cond:
            self.fail(name, detail)


def _arrays(name: str, out: Any, batch: int, pools: frozenset = frozenset()) -> str | None:
    """Why ``out`` is not a dict of numpy arrays with ``batch`` rows (any rows for the pool fields
    ``pools``), or None."""
    if not isinstance(out, dict):
        return f"{name} returned {type(out).__name__}, expected a dict of arrays"
    for k, v in out.items():
        if not isinstance(v, np.ndarray):
            return f"{name}[{k!r}] is {type(v).__name__}, expected numpy.ndarray"
        if v.ndim == 0 or (v.shape[0] != batch and k not in pools):
            return f"{name}[{k!r}] has shape {v.shape}, expected the batch ({batch}) as first axis"
    return None


def _scalars(name: str, metrics: Any) -> str | None:
    if not isinstance(metrics, dict):
        return f"{name} returned {type(metrics).__name__}, expected dict[str, float]"
    bad = {k: v for k, v in metrics.items() if not isinstance(v, (int, float)) or isinstance(v, bool)}
    if bad:
        return f"{name} returned non-scalar metrics {sorted(bad)}"
    return None


def _weights_wire(name: str, tensors: Any, info: Any) -> tuple[dict, dict]:
    """The weights as workers get them: through the safetensors weights message."""
    from mqttrl.wire import decode_weights, encode_weights

    if not isinstance(tensors, dict) or not all(isinstance(v, np.ndarray) for v in tensors.values()):
        raise TypeError("export_weights must return (dict[str, numpy.ndarray], dict)")
    json.dumps(info)  # JSON-able, as the wire needs
    msg = decode_weights(encode_weights(1, name, "check", tensors, info))
    return dict(msg.tensors), dict(msg.info)


class _Envs:
    """A few envs stepped one by one (no vector-env autoreset): ``next_obs`` is the final obs."""

    def __init__(self, env_id: str, n: int, seed: int) -> None:
        from mqttrl.envs.make import make_env

        self.envs = [make_env(env_id) for _ in range(n)]
        self.obs = np.stack([env.reset(seed=seed + i)[0] for i, env in enumerate(self.envs)])
        self.steps = 0

    @property
    def spaces(self) -> tuple[gym.Space, gym.Space]:
        return self.envs[0].observation_space, self.envs[0].action_space

    def step(self, actor: Any) -> None:
        n = len(self.envs)
        obs = self.obs
        actions, extras = actor.act(obs)
        next_obs, final_obs = np.empty_like(obs), np.empty_like(obs)
        rewards = np.zeros(n, np.float32)
        term, trunc = np.zeros(n, bool), np.zeros(n, bool)
        discrete = isinstance(self.envs[0].action_space, gym.spaces.Discrete)
        for i, env in enumerate(self.envs):
            a = int(actions[i]) if discrete else actions[i]
            o, rewards[i], term[i], trunc[i], _ = env.step(a)
            final_obs[i] = o
            if term[i] or trunc[i]:
                o, _ = env.reset()
            next_obs[i] = o
        actor.record(obs, actions, extras, rewards, final_obs, term, trunc)
        self.obs = next_obs
        self.steps += n

    def close(self) -> None:
        for env in self.envs:
            env.close()


def _check_actions(c: _Checks, name: str, actor: Any, obs: np.ndarray, act_space: gym.Space) -> None:
    with c.step(name) as note:
        out = actor.act(obs)
        if not (isinstance(out, tuple) and len(out) == 2):
            raise TypeError(f"act() returned {type(out).__name__}, expected (actions, extras)")
        actions, extras = out
        if not isinstance(actions, np.ndarray) or actions.shape[:1] != (len(obs),):
            raise TypeError(f"act() actions {getattr(actions, 'shape', type(actions))}: expected one row per env")
        why = _arrays("act() extras", extras, len(obs))
        if why:
            raise TypeError(why)
        for a in actions:
            if not act_space.contains(a.item() if isinstance(act_space, gym.spaces.Discrete) else a):
                raise ValueError(f"act() returned {a!r}, not in the action space {act_space}")
        note["detail"] = f"actions {actions.dtype}{list(actions.shape)}"


def _collect(c: _Checks, name: str, envs: _Envs, actor: Any, budget: int) -> int:
    """Step until the actor has transitions ready; how many."""
    with c.step(name) as note:
        while actor.pending() == 0 and envs.steps < budget:
            envs.step(actor)
        pending = actor.pending()
        if pending <= 0:
            raise RuntimeError(f"actor.pending() still 0 after {envs.steps} env steps")
        note["detail"] = f"{pending} transitions after {envs.steps} env steps"
    return pending


def _send(c: _Checks, info: AlgorithmInfo, spec: Any, actor: Any, pending: int, seq: int, version: int):
    """take -> encode_batch -> decode_batch -> validate: the batch as the learner gets it."""
    from mqttrl.wire import decode_batch, encode_batch

    with c.step("take") as note:
        arrays = actor.take()
        pools = frozenset(k for k, f in spec.fields.items() if not f.per_transition)
        why = _arrays("take()", arrays, pending, pools) if arrays else "take() returned nothing while pending() > 0"
        if why:
            raise ValueError(why)
        if actor.pending() != 0:
            raise ValueError(f"pending() is {actor.pending()} after take(), expected 0")
        note["detail"] = ", ".join(f"{k}: {v.dtype}{list(v.shape)}" for k, v in arrays.items())
    with c.step("wire") as note:
        payload = encode_batch("check", "w0", seq, version, arrays, count=pending)
        batch = decode_batch(payload)
        # the compressed path too (worker.compression): the same arrays, byte for byte
        packed = encode_batch("check", "w0", seq, version, arrays, count=pending, compression="zstd")
        for name, arr in decode_batch(packed).arrays.items():
            plain = batch.arrays[name]
            if (arr.dtype, arr.shape, arr.tobytes()) != (plain.dtype, plain.shape, plain.tobytes()):
                raise ValueError(f"{name} changed through zstd compression")
        note["detail"] = f"{batch.count} transitions, {len(payload)} bytes ({len(packed)} with zstd)"
    with c.step("sample_spec.validate"):
        spec.validate(batch.arrays, batch.count)
    return batch


def check_algorithm(
    info: AlgorithmInfo,
    env_id: str | None = None,
    params: Any = None,
    num_envs: int = 2,
    max_env_steps: int = 20_000,
) -> list[CheckResult]:
    """Run ``info`` through a worker/learner round trip on ``env_id``; one result per step.

    ``env_id`` defaults to ``info.check_env``; ``params`` to ``info.params()``; ``max_env_steps``
    bounds how long the actor may take to have transitions ready and the learner to want a train step.
    """
    c = _Checks()
    env_id = env_id or getattr(info, "check_env", "CartPole-v1")
    forwards: dict[str, Forward] = {}
    try:
        _check_algorithm(c, info, env_id, params, num_envs, max_env_steps, forwards)
    except _Failed:
        pass
    finally:
        for f in forwards.values():
            with contextlib.suppress(Exception):
                f.close()
    return c.results


def _check_algorithm(
    c: _Checks,
    info: AlgorithmInfo,
    env_id: str,
    params: Any,
    num_envs: int,
    max_env_steps: int,
    forwards: dict[str, Forward],
) -> None:
    """The round trip of the module docstring, top to bottom; each helper is one stage of it."""
    params = _check_info(c, info, params)
    with c.step("env") as note:
        envs = _Envs(env_id, num_envs, seed=0)
        obs_space, act_space = envs.spaces
        note["detail"] = f"{env_id}: obs {obs_space}, actions {act_space}"
    try:
        spec = _check_sample_spec(c, info, params, obs_space, act_space)
        _make_forwards(c, info, params, envs, forwards)
        learner = _make_learner(c, info, params, obs_space, act_space)
        tensors, winfo = _check_export(c, info, learner, forwards, envs.obs)
        actor = _make_actor(c, info, params, envs, forwards, tensors, winfo)
        _check_actions(c, "act", actor, envs.obs, act_space)
        _check_truncate(c, envs, actor)

        budget = envs.steps + max_env_steps
        pending = _collect(c, "collect", envs, actor, budget)
        batch = _send(c, info, spec, actor, pending, seq=0, version=1)
        updates0 = learner.updates
        if info.mode == "async":
            _train_async(c, spec, learner, envs, actor, batch, budget)
        else:
            _train_sync(c, learner, batch)
        c.require(
            "updates",
            isinstance(learner.updates, int) and learner.updates > updates0,
            f"learner.updates went from {updates0} to {learner.updates} after training",
        )

        new = _check_new_weights(c, info, learner, actor, tensors)
        _check_actions(c, "act after update", actor, envs.obs, act_space)
        if info.mode == "sync":
            _check_discard(c, envs, actor)
        _check_state_dict(c, info, params, envs.spaces, learner, new)
    finally:
        envs.close()


def _check_info(c: _Checks, info: AlgorithmInfo, params: Any) -> Any:
    """An AlgorithmInfo with backends, and its params (``info.params()`` unless given): the rest needs both."""
    with c.step("algorithm_info") as note:
        if not isinstance(info, AlgorithmInfo):
            raise TypeError(f"{type(info).__name__} is not an AlgorithmInfo")
        if not info.backends:
            raise ValueError("backends is empty")
        params = info.params() if params is None else params
        note["detail"] = f"{info.name}: mode {info.mode}, backends {list(info.backends)}"
    return params


def _check_sample_spec(c: _Checks, info: AlgorithmInfo, params: Any, obs_space: gym.Space, act_space: gym.Space):
    """The SampleSpec that every batch sent later is validated against."""
    with c.step("sample_spec") as note:
        spec = info.sample_spec(params, obs_space, act_space)
        if not hasattr(spec, "validate"):
            raise TypeError(f"sample_spec returned {type(spec).__name__}, expected mqttrl.wire.SampleSpec")
        note["detail"] = json.dumps(spec.describe())
    return spec


def _make_forwards(c: _Checks, info: AlgorithmInfo, params: Any, envs: _Envs, forwards: dict[str, Forward]) -> None:
    """One forward per backend that imports, into ``forwards`` (the caller closes them); a worker needs one."""
    obs_space, act_space = envs.spaces
    for backend in info.backends:
        try:
            fwd = info.make_forward(params, obs_space, act_space, backend, seed=0)
        except ImportError as exc:
            c.ok(f"forward[{backend}]", f"skipped: cannot import ({exc})")
            continue
        except Exception as exc:
            c.fail(f"forward[{backend}]", f"{type(exc).__name__}: {exc}")
        forwards[backend] = fwd
        with c.step(f"forward[{backend}]") as note:
            if not isinstance(fwd, Forward):
                raise TypeError(f"{type(fwd).__name__} lacks a Forward method (load_weights, __call__, close)")
            out = fwd(envs.obs)
            why = _arrays("forward(obs)", out, len(envs.obs))
            if why:
                raise TypeError(why)
            note["detail"] = ", ".join(f"{k}: {v.dtype}{list(v.shape)}" for k, v in out.items())
    c.require("forward", bool(forwards), f"no backend of {list(info.backends)} could be imported")


def _make_learner(c: _Checks, info: AlgorithmInfo, params: Any, obs_space: gym.Space, act_space: gym.Space):
    """The learner, and that it is the kind its mode needs (the learner node drives it by mode)."""
    with c.step("learner") as note:
        learner = info.make_learner(params, obs_space, act_space, "cpu", 0)
        note["detail"] = type(learner).__name__
    with c.step(f"protocol[{info.mode}]") as note:
        want = AsyncLearner if info.mode == "async" else SyncLearner
        if not isinstance(learner, want):
            raise TypeError(f"mode {info.mode!r} needs a {want.__name__}; {type(learner).__name__} is not one")
        note["detail"] = f"learner is a {want.__name__}"
    return learner


def _check_export(
    c: _Checks, info: AlgorithmInfo, learner: Any, forwards: dict[str, Forward], obs: np.ndarray
) -> tuple[dict, dict]:
    """The learner's weights through the wire into every forward, which then agree on ``obs``."""
    with c.step("export_weights") as note:
        tensors, winfo = _weights_wire(info.name, *learner.export_weights())
        note["detail"] = f"{len(tensors)} tensors, {sum(t.size for t in tensors.values())} values"
    outs = {}
    for backend, fwd in forwards.items():
        with c.step(f"forward[{backend}].load_weights"):
            fwd.load_weights(tensors, winfo)
            outs[backend] = fwd(obs)
    if len(outs) > 1:
        _check_backends_agree(c, outs)
    return tensors, winfo


def _check_backends_agree(c: _Checks, outs: dict[str, dict]) -> None:
    """Every backend gives the same outputs with the same weights: a worker may run any of them."""
    with c.step("backends agree") as note:
        (b0, o0), *rest = outs.items()
        for b, o in rest:
            if set(o) != set(o0):
                raise ValueError(f"{b} outputs {sorted(o)}, {b0} outputs {sorted(o0)}")
            for k in o0:
                if not np.allclose(o[k], o0[k], rtol=1e-4, atol=1e-4):
                    err = float(np.max(np.abs(o[k].astype(np.float64) - o0[k])))
                    raise ValueError(f"{k!r}: {b} and {b0} differ by up to {err:g} with the same weights")
        note["detail"] = f"{', '.join(outs)} give the same outputs"


def _make_actor(
    c: _Checks,
    info: AlgorithmInfo,
    params: Any,
    envs: _Envs,
    forwards: dict[str, Forward],
    tensors: dict,
    winfo: dict,
):
    """The actor over the first forward, of its mode's kind, with the learner's weights loaded."""
    obs_space, act_space = envs.spaces
    backend, forward = next(iter(forwards.items()))
    with c.step("actor") as note:
        num_envs = len(envs.envs)
        ctx = ActorContext(num_envs=num_envs, first_env_index=0, total_envs=num_envs, seed=0)
        actor = info.make_actor(params, obs_space, act_space, ctx, forward)
        want = SyncActor if info.mode == "sync" else Actor
        if not isinstance(actor, want):
            raise TypeError(f"mode {info.mode!r} needs a {want.__name__}; {type(actor).__name__} is not one")
        note["detail"] = f"{type(actor).__name__} over the {backend} forward"
    with c.step("actor.load_weights"):
        actor.load_weights(tensors, winfo)
    return actor


def _check_truncate(c: _Checks, envs: _Envs, actor: Any) -> None:
    """Env 0's game fails mid-episode; its next record starts a new one (a worker's env crash)."""
    with c.step("truncate") as note:
        envs.step(actor)
        envs.step(actor)
        actor.truncate(0, envs.obs[0])
        envs.obs[0] = envs.envs[0].reset()[0]
        note["detail"] = f"env 0's episode truncated after 2 steps; {actor.pending()} transitions pending"


def _train_async(c: _Checks, spec: Any, learner: Any, envs: _Envs, actor: Any, batch: Any, budget: int) -> None:
    """add, feed batches until train_due(), then one train_step: the async learner node's loop."""
    from mqttrl.wire import decode_batch, encode_batch

    with c.step("learner.add") as note:
        added = learner.add(batch)
        if not isinstance(added, int) or isinstance(added, bool):
            raise TypeError(f"add() returned {added!r}, expected the int number of transitions added")
        note["detail"] = f"added {added}"
    seq = 1
    with c.step("train_due") as note:
        while not learner.train_due():
            if envs.steps >= budget:
                raise RuntimeError(f"train_due() still False after {envs.steps} env steps")
            while actor.pending() == 0 and envs.steps < budget:
                envs.step(actor)
            count = actor.pending()
            arrays = actor.take()
            if arrays and count:
                b = decode_batch(encode_batch("check", "w0", seq, 1, arrays, count=count))
                spec.validate(b.arrays, b.count)
                learner.add(b)
                seq += 1
        bool(learner.behind())
        note["detail"] = f"due after {envs.steps} env steps"
    _check_metrics(c, "train_step", learner.train_step)


def _train_sync(c: _Checks, learner: Any, batch: Any) -> None:
    """One train_round on the round's batch: the sync learner node's step."""
    _check_metrics(c, "train_round", lambda: learner.train_round([batch]))


def _check_metrics(c: _Checks, name: str, train: Callable[[], Any]) -> None:
    """Run one training call; its metrics must be scalars (telemetry writes them as fields)."""
    with c.step(name) as note:
        metrics = train()
        why = _scalars(f"{name}()", metrics)
        if why:
            raise TypeError(why)
        note["detail"] = ", ".join(f"{k}={v:.4g}" for k, v in list(metrics.items())[:6])


def _check_new_weights(c: _Checks, info: AlgorithmInfo, learner: Any, actor: Any, tensors: dict) -> dict:
    """Training changed the exported weights (same names) and the actor loads them; the new tensors."""
    with c.step("new weights") as note:
        new, new_info = _weights_wire(info.name, *learner.export_weights())
        if set(new) != set(tensors):
            raise ValueError(f"tensor names changed: {sorted(set(new) ^ set(tensors))}")
        changed = [k for k in new if not np.array_equal(new[k], tensors[k])]
        if not changed:
            raise ValueError("training changed no exported tensor")
        actor.load_weights(new, new_info)
        note["detail"] = f"{len(changed)} of {len(new)} tensors changed; the actor loaded them"
    return new


def _check_discard(c: _Checks, envs: _Envs, actor: Any) -> None:
    """A sync actor drops a stale round's transitions on discard() (a newer model came)."""
    with c.step("discard"):
        envs.step(actor)
        actor.discard()
        if actor.pending() != 0:
            raise ValueError(f"pending() is {actor.pending()} after discard()")
        envs.step(actor)


def _check_state_dict(
    c: _Checks, info: AlgorithmInfo, params: Any, spaces: tuple, learner: Any, new: dict[str, np.ndarray]
) -> None:
    """A fresh learner restored from the state_dict exports the same weights (checkpoints resume)."""
    with c.step("state_dict") as note:
        st, meta = learner.state_dict(include_replay=False)
        json.dumps(meta)
        again = info.make_learner(params, *spaces, "cpu", 1)
        again.load_state_dict(st, meta)
        restored, _ = again.export_weights()
        differ = [k for k in new if k not in restored or not np.array_equal(restored[k], new[k])]
        if differ:
            raise ValueError(f"a learner restored from state_dict exports other weights: {differ[:5]}")
        note["detail"] = f"{len(st)} tensors; a fresh learner restored from them exports the same weights"


def _sample_points(now: float) -> list[Point]:
    return [
        Point("episode", {"run": "check", "worker": "w0"}, {"return": 12.5, "length": 13, "model_version": 2}, now),
        Point("episode", {"run": "check", "worker": "w 1,x=y"}, {"return": -1.0, "length": 1, "model_version": 2}, now),
        Point(
            "worker",
            {"run": "check", "worker": "w0"},
            {"online": 1, "env_steps_per_s": 1234.5, "version_lag": None, "last_return": 12.5},
            now + 0.5,
        ),
        Point(
            "eval", {"run": "check", "evaluator": "e0"}, {"mean": 200.0, "note": 'say "hi"', "greedy": True}, now + 1
        ),
    ]


def check_storage(factory: Callable[[dict], Any], settings: dict | None = None) -> list[CheckResult]:
    """Build a storage from ``settings``, write points as telemetry does (tags; int, float,
    str, bool and None fields; two batches), and close it."""
    c = _Checks()
    try:
        with c.step("create") as note:
            st = factory(dict(settings or {}))
            note["detail"] = type(st).__name__
        with c.step("protocol"):
            if not isinstance(st, Storage):
                raise TypeError(f"{type(st).__name__} lacks write(points) or close()")
        now = time.time()
        points = _sample_points(now)
        for i, batch in enumerate((points[:2], points[2:])):
            with c.step(f"write[{i}]") as note:
                t0 = time.monotonic()
                st.write(batch)
                took = time.monotonic() - t0
                if took > 2.0:
                    raise TimeoutError(f"write() took {took:.2f} s; it runs on telemetry's loop and must not block")
                note["detail"] = f"{len(batch)} points in {took * 1000:.1f} ms"
        with c.step("close"):
            st.close()
            left = getattr(st, "pending", 0)
            if isinstance(left, int) and left > 0:
                raise RuntimeError(f"{left} points still pending after close(): they were never stored")
    except _Failed:
        pass
    return c.results


def run_checks(name: str, settings: dict | None = None) -> list[CheckResult]:
    """The checks for ``name``: a registered algorithm, a storage, or a plugin (everything it registers).

    Raises :class:`~mqttrl.plugin.manager.UnknownPluginError` when nothing has that name.
    Storages are built from ``settings`` (default none), in a temporary working directory.
    """
    from mqttrl.plugin.manager import UnknownPluginError, get_registry

    reg = get_registry()
    if name in reg.algorithms:
        return check_algorithm(reg.algorithms[name].obj)
    if ":" in name and name not in reg.storages:  # a gymnasium env by "module:Env-v0" (a game of one's own)
        return _check_env_id(name, reg)
    if name in reg.storages:
        return _storage_in_tmp(reg.storages[name].obj, settings)
    record = reg.plugin(name)
    if record is None:
        known = sorted({*reg.algorithms, *reg.storages, *(p["name"] for p in reg.plugins)})
        raise UnknownPluginError(
            f"no algorithm, storage or plugin named {name!r}; installed: {', '.join(known) or 'none'}"
        )
    if "error" in record:
        return [CheckResult("load", False, record["error"])]
    results = [CheckResult("load", True, f"{record['module']} ({record.get('distribution')} {record.get('version')})")]
    for algo in record.get("algorithms", []):
        results += [attrs.evolve(r, name=f"{algo}: {r.name}") for r in check_algorithm(reg.algorithms[algo].obj)]
    for storage in record.get("storages", []):
        results += [
            attrs.evolve(r, name=f"{storage}: {r.name}") for r in _storage_in_tmp(reg.storages[storage].obj, settings)
        ]
    for env in record.get("envs", []):
        results.append(_check_env(env, reg))
        if results[-1].ok and not results[-1].detail.startswith("skipped"):
            results += check_realtime_game(lambda env=env: reg.envs[env].obj(), f"env {env}")
    return results


def check_run_env(config: Any) -> list[CheckResult]:
    """The env of a run config, made as the run makes it (its ``[env]`` kwargs; the game started
    first when ``[env] launch`` says so): reset and three steps inside its spaces, the real-time
    protocol where it speaks it, and its spaces against the config's ``env.spec`` when it declares one.
    What an env plugin's own check skips (a game needs a run's options: a window, keys) is checked here."""
    from mqttrl.envs.run_env import run_env_factory
    from mqttrl.envs.spec import EnvSpec, spec_of_config
    from mqttrl.plugin.manager import get_registry

    name = f"env {config.env.id} (the run's [env])"
    with run_env_factory(config.env, get_registry()) as make:
        try:
            env = make()
            obs, _ = env.reset(seed=0)
            bad = None if env.observation_space.contains(obs) else "reset()"
            for _ in range(3):
                obs, _, term, trunc, _ = env.step(env.action_space.sample())
                bad = bad or (None if env.observation_space.contains(obs) else "step()")
                if term or trunc:
                    env.reset()
            spaces = env.observation_space, env.action_space
            env.close()
        except Exception as exc:
            return [CheckResult(name, False, f"{type(exc).__name__}: {exc}")]
        if bad:
            return [CheckResult(name, False, f"{bad} returned an observation outside observation_space")]
        results = [CheckResult(name, True, f"obs {spaces[0]}, actions {spaces[1]}")]
        declared = spec_of_config(config)
        if declared is not None:
            diffs = EnvSpec(*spaces, config.env.id).differences(declared)
            results.append(
                CheckResult("env spec", not diffs, "; ".join(diffs) or "the env matches the config's env.spec")
            )
        return results + check_realtime_game(make, name)


def _storage_in_tmp(factory: Callable[[dict], Any], settings: dict | None = None) -> list[CheckResult]:
    with tempfile.TemporaryDirectory(prefix="mqttrl-check-") as tmp, contextlib.chdir(tmp):
        return check_storage(factory, dict(settings or {}))


def _check_env(name: str, reg: Any) -> CheckResult:
    if name.endswith("/"):
        return CheckResult(f"env {name}", True, "skipped: a namespace (check an id in it with a run)")
    try:
        env = reg.envs[name].obj()
        obs, _ = env.reset(seed=0)
        if not env.observation_space.contains(obs):
            return CheckResult(f"env {name}", False, "reset() returned an observation outside observation_space")
        for _ in range(3):
            obs, _, term, trunc, _ = env.step(env.action_space.sample())
            if not env.observation_space.contains(obs):
                return CheckResult(f"env {name}", False, "step() returned an observation outside observation_space")
            if term or trunc:
                env.reset()
        env.close()
    except ConfigError as exc:
        # an env that cannot be made without a run's options (a game's window, its keys): the
        # check has none to give, so it says so rather than failing a plugin that works
        return CheckResult(f"env {name}", True, f"skipped: needs options from a run's [env] section ({exc})")
    except Exception as exc:
        return CheckResult(f"env {name}", False, f"{type(exc).__name__}: {exc}")
    return CheckResult(f"env {name}", True, f"obs {env.observation_space}, actions {env.action_space}")


def _check_env_id(env_id: str, reg: Any) -> list[CheckResult]:
    """An env given as ``module:Env-v0``: made and stepped like a plugin's, and, where it speaks
    the real-time protocol, :func:`check_realtime_game`."""
    from mqttrl.envs.make import make_env

    name = f"env {env_id}"
    try:
        env = make_env(env_id, {}, reg)
        obs, _ = env.reset(seed=0)
        if not env.observation_space.contains(obs):
            return [CheckResult(name, False, "reset() returned an observation outside observation_space")]
        env.close()
    except Exception as exc:
        return [CheckResult(name, False, f"{type(exc).__name__}: {exc}")]
    return [
        CheckResult(name, True, f"obs {env.observation_space}, actions {env.action_space}"),
        *check_realtime_game(lambda: make_env(env_id, {}, reg), name),
    ]


def check_realtime_game(make: Callable[[], Any], name: str, period_s: float = 0.05) -> list[CheckResult]:
    """The real-time protocol (docs/plugins.md, "Real-time games"), where the env speaks it:
    ``send_action`` returns at once (under ``period_s``), ``read_obs`` returns ``(obs, reward,
    terminated, truncated, info)`` with the observation in the space, three periods in a row;
    ``pause``/``resume`` (both or neither) and ``set_speed`` run without error. An env that
    does not speak it gets no result (it is stepped in lock-step)."""
    from mqttrl.envs.realtime import game_of

    env = make()
    game = game_of(env)
    if game is None:
        env.close()
        return []
    c = _Checks()
    try:
        with c.step(f"{name}: real-time reset"):
            obs, _ = env.reset(seed=0)
            c.require(f"{name}: real-time reset", env.observation_space.contains(obs), "obs outside observation_space")
        for k in range(3):
            with c.step(f"{name}: send_action/read_obs {k + 1}") as note:
                t0 = time.perf_counter()
                game.send_action(env.action_space.sample())
                took = time.perf_counter() - t0
                c.require(
                    f"{name}: send_action", took < period_s, f"send_action took {took * 1000:.1f} ms: it must not wait"
                )
                time.sleep(period_s)
                out = game.read_obs()
                c.require(
                    f"{name}: read_obs",
                    isinstance(out, tuple) and len(out) == 5,
                    f"read_obs returned {type(out).__name__}, expected (obs, reward, terminated, truncated, info)",
                )
                obs, reward, term, trunc, info = out
                c.require(f"{name}: read_obs", env.observation_space.contains(obs), "obs outside observation_space")
                c.require(f"{name}: read_obs", isinstance(info, dict), "info must be a dict")
                float(reward)
                note["detail"] = f"send {took * 1000:.2f} ms"
                if term or trunc:
                    env.reset()
        has = [callable(getattr(game, m, None)) for m in ("pause", "resume")]
        if any(has):
            with c.step(f"{name}: pause/resume"):
                c.require(
                    f"{name}: pause/resume", all(has), "an env that can pause implements both pause() and resume()"
                )
                game.pause()
                game.resume()
        if callable(getattr(game, "set_speed", None)):
            with c.step(f"{name}: set_speed"):
                game.set_speed(1.0)
    except _Failed:
        pass
    finally:
        env.close()
    return c.results
