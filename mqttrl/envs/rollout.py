"""Stepping a set of envs with an algorithm's actor: shared by workers and evaluators.

Envs are stepped one by one (no vector-env autoreset quirks): where an episode
ends, the true final observation goes to the actor as ``next_obs`` and the env
is reset for the next step. Policy calls are batched over all envs.

A game that crashes does not take the process down: an env whose ``step`` or
``reset`` raises is closed and made afresh (``env_restarts`` counts it), with
exponential backoff between attempts; ``EnvSet.step`` lists in ``failed`` the envs
whose step produced no transition. Only an env that keeps failing,
``max_consecutive_failures`` times without a successful step in between, raises
:class:`EnvFailing`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import attrs
import gymnasium as gym
import numpy as np

from mqttrl.config.settings import ConfigError
from mqttrl.observe.timing import LatencyStats
from mqttrl.wire.evaluation import Evaluation
from mqttrl.wire.model_ref import ModelRef

log = logging.getLogger("mqttrl.envs")


@attrs.define
class EpisodeEnd:
    env_index: int
    episode_return: float
    length: int
    terminated: bool
    #: a person played some of its steps (the env reported ``info["demo_action"]``)
    demo: bool = False


class EnvFailing(RuntimeError):
    """One env failed ``max_consecutive_failures`` times without a successful step in between."""


_NO_FAILURES: list[int] = []
_NO_DEMO: dict[int, object] = {}
_NO_STILL: dict[int, float] = {}


def obs_dtype(space: gym.Space) -> np.dtype:
    """The dtype observations keep from the env to the network: integer and bool images stay as
    they are (a uint8 frame is 4x smaller than its float32 copy); floats become float32."""
    dtype = np.dtype(getattr(space, "dtype", None) or np.float32)
    return dtype if dtype.kind in "biu" else np.dtype(np.float32)


class EnvSet:
    """``num_envs`` envs made by ``make``, stepped together; crashed envs are made afresh.

    ``sleep`` (injectable for tests) waits between restart attempts of one env: none before
    the first, then ``backoff_s`` doubling up to ``max_backoff_s``.
    """

    def __init__(
        self,
        make: Callable[[], gym.Env],
        num_envs: int,
        seed: int,
        *,
        env_id: str = "",
        max_consecutive_failures: int = 5,
        backoff_s: float = 0.5,
        max_backoff_s: float = 30.0,
        sleep: Callable[[float], None] = time.sleep,
        on_restart: Callable[[int, str], None] | None = None,
    ):
        self.make = make
        #: called with the env's index and its last error (a line) before each remake of a failed env (a
        #: worker that launched its game starts the game again there: mqttrl.envs.launch)
        self.on_restart = on_restart
        #: the last failure, as a line: the exception itself would keep the failed env's frames alive
        self._last_error = ""
        self.envs = [make() for _ in range(num_envs)]
        self.num_envs = num_envs
        self.seed = seed
        self.env_id = env_id
        self.max_consecutive_failures = max_consecutive_failures
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.sleep = sleep
        #: the observations' dtype, kept from the env to the network (see :func:`obs_dtype`)
        self.dtype = obs_dtype(self.envs[0].observation_space)
        obs = [env.reset(seed=seed + i)[0] for i, env in enumerate(self.envs)]
        self.obs = np.stack(obs).astype(self.dtype, copy=False)
        #: capture to action: how old each step's observations were when their actions went out
        self.act_latency = LatencyStats()
        #: when the observations in :attr:`obs` were captured (None: not to be counted, e.g. after a pause)
        self.obs_at: float | None = time.monotonic()
        self.returns = np.zeros(num_envs, dtype=np.float64)
        self.lengths = np.zeros(num_envs, dtype=np.int64)
        self.total_steps = 0
        #: envs closed and made afresh after their step or reset raised (attempts, all envs)
        self.env_restarts = 0
        #: the envs whose step raised in the last :meth:`step`: their rows hold no transition
        self.failed: list[int] = _NO_FAILURES
        #: this step's actions that a person took instead of the policy (``info["demo_action"]``), by env
        self.demo_actions: dict[int, object] = _NO_DEMO
        self._in_demo: set[int] = set()  # envs whose open episode has such steps
        #: env steps a person played so far (a takeover of the screen kit, a game's demo mode)
        self.person_steps = 0
        #: this step's envs whose frame equalled the one before, by env: the seconds it has stood still
        #: (``info["still_s"]``, the screen kit's frozen check); a worker holds their steps back
        self.still: dict[int, float] = _NO_STILL
        #: per env, failures since its last successful step
        self.failures = [0] * num_envs
        self._failing = False

    def step(self, actions: np.ndarray):
        """Step all envs; returns (obs, rewards, next_obs, terminated, truncated, ended).

        The envs whose step raised are listed in :attr:`failed` (empty when none did):
        each was made afresh and reset (``obs`` of the next step starts its new
        episode), its partial episode is not in ``ended``, and its rows are
        placeholders (``next_obs`` = ``obs``, reward 0, not ended) that a caller
        recording transitions must not record as they are (:meth:`step_env` gets a
        real one). Raises :class:`EnvFailing` when an env keeps failing.
        """
        obs = self.obs
        self.answered()
        # python scalars for discrete actions (tolist is far cheaper than per-element .item())
        acts = actions.tolist() if actions.ndim == 1 else list(actions)
        results: list = []
        append = results.append
        self.failed = _NO_FAILURES
        try:
            for env, a in zip(self.envs, acts):
                append(env.step(a))
        except Exception as e:  # a game crashed: the other envs step on
            self._step_rest(results, acts, e)
        else:
            if self._failing:  # every env stepped: no failure is "in a row" any more
                self.failures = [0] * self.num_envs
                self._failing = False
        next_obs = np.array([r[0] for r in results], dtype=self.dtype).reshape(obs.shape)
        rewards64 = np.array([r[1] for r in results], dtype=np.float64)  # episode returns keep full precision
        rewards = rewards64.astype(np.float32)
        terminated = np.array([r[2] for r in results], dtype=bool)
        truncated = np.array([r[3] for r in results], dtype=bool)
        self._read_infos(results)
        self.returns += rewards64
        self.lengths += 1
        new_obs = next_obs
        ended: list[EpisodeEnd] = []
        done = np.flatnonzero(terminated | truncated)
        if len(done):
            new_obs = next_obs.copy()
            for i in done:
                demo = int(i) in self._in_demo
                self._in_demo.discard(int(i))
                ended.append(
                    EpisodeEnd(int(i), float(self.returns[i]), int(self.lengths[i]), bool(terminated[i]), demo)
                )
                self.returns[i] = 0.0
                self.lengths[i] = 0
                new_obs[i] = self._reset(int(i))
        if self.failed:
            new_obs = self._restart_failed(new_obs, next_obs)
        self.obs = new_obs
        # an env that says when it captured its observation (info["frame_at"], time.monotonic(): the
        # screen kit) is held to that; else the observation counts from when its step returned
        stamps = [r[4]["frame_at"] for r in results if "frame_at" in r[4]]
        self.obs_at = min(stamps) if stamps else time.monotonic()
        if len(done) or self.failed:  # a reset (a relaunch) ran since those frames: not capture to action
            self.obs_at = None
        self.total_steps += self.num_envs
        return obs, rewards, next_obs, terminated, truncated, ended

    def _read_infos(self, results: list) -> None:
        """What the step's infos say: a person's actions (demonstrations), frames standing still."""
        self.demo_actions = {i: r[4]["demo_action"] for i, r in enumerate(results) if "demo_action" in r[4]} or _NO_DEMO
        self._in_demo.update(self.demo_actions)
        self.person_steps += len(self.demo_actions)
        self.still = {i: r[4]["still_s"] for i, r in enumerate(results) if "still_s" in r[4]} or _NO_STILL

    def answered(self) -> None:
        """The actions for :attr:`obs` go out now: their capture-to-action time is counted (once)."""
        at = self.obs_at
        if at is not None:
            self.act_latency.record(time.monotonic() - at)
            self.obs_at = None

    def taken(self, actions: np.ndarray) -> np.ndarray:
        """The actions the envs really took in the last :meth:`step`: ``actions``, except where an env
        reported another in ``info["demo_action"]`` (a person playing that game), so that what is
        recorded is what happened."""
        if not self.demo_actions:
            return actions
        actions = actions.copy()
        for i, a in self.demo_actions.items():
            actions[i] = a
        return actions

    # ---- crashed games -------------------------------------------------------------
    def _step_rest(self, results: list, acts: list, error: Exception) -> None:
        """The slow path: the env after ``results`` raised ``error``; step the rest one by one.
        A failed env's result is a placeholder (the obs it had, reward 0, not ended)."""
        self.failed = []
        err: Exception | None = error
        for i in range(len(results), self.num_envs):
            if err is None:
                try:
                    results.append(self.envs[i].step(acts[i]))
                    continue
                except Exception as e:
                    err = e
            self._note_failure(i, "step", err)
            self.failed.append(i)
            results.append((self.obs[i], 0.0, False, False, {}))
            err = None
        for i in range(self.num_envs):
            if i not in self.failed:
                self.failures[i] = 0

    def _restart_failed(self, new_obs: np.ndarray, next_obs: np.ndarray) -> np.ndarray:
        """Make the failed envs afresh; their partial episodes end unreported (counted as restarts)."""
        if new_obs is next_obs:
            new_obs = next_obs.copy()  # the caller fills next_obs's failed rows; the envs' obs stays theirs
        for i in self.failed:
            self.returns[i] = 0.0
            self.lengths[i] = 0
            new_obs[i] = self._restart(i)
        return new_obs

    def _note_failure(self, i: int, what: str, error: Exception) -> None:
        self._failing = True
        self._last_error = f"{what} raised {type(error).__name__}: {error}"
        self.failures[i] += 1
        n = self.failures[i]
        if n >= self.max_consecutive_failures:
            name = f" ({self.env_id})" if self.env_id else ""
            raise EnvFailing(
                f"env {i}{name} failed {n} times in a row (max_consecutive_failures={self.max_consecutive_failures}); "
                f"last: {what} raised {type(error).__name__}: {error}"
            ) from error
        log.warning(
            "env %d%s: %s raised %s: %s; restarting it (%d failures in a row)",
            i,
            f" ({self.env_id})" if self.env_id else "",
            what,
            type(error).__name__,
            error,
            n,
        )

    def _restart(self, i: int) -> np.ndarray:
        """Close env ``i`` and make it afresh until it resets; its first observation. Raises
        :class:`EnvFailing` once it failed ``max_consecutive_failures`` times in a row."""
        while True:
            try:
                self.envs[i].close()
            except Exception as e:
                log.warning("env %d: close raised %s: %s (ignored)", i, type(e).__name__, e)
            n = self.failures[i]  # >= 1: the failure that brought us here
            if n > 1:
                self.sleep(min(self.max_backoff_s, self.backoff_s * 2 ** (n - 2)))
            self.env_restarts += 1
            try:
                if self.on_restart is not None:
                    self.on_restart(i, self._last_error)
                self.envs[i] = self.make()
                obs0 = self.envs[i].reset(seed=self.seed + self.num_envs * self.env_restarts + i)[0]
            except (EnvFailing, ConfigError):  # a game that cannot run (its launcher gave up), a bad command
                raise
            except Exception as e:
                self._note_failure(i, "make/reset", e)
                continue
            return np.asarray(obs0, dtype=self.dtype).reshape(self.obs.shape[1:])

    def _reset(self, i: int) -> np.ndarray:
        """Reset env ``i`` after its episode ended (the step was real); made afresh if reset raises."""
        try:
            return self.envs[i].reset()[0]
        except Exception as e:
            self._note_failure(i, "reset", e)
            return self._restart(i)

    def reset_all(self, seed: int | None = None) -> None:
        """Every env reset for a new episode, its return and length from zero (after a worker's greedy
        evaluation played on them, or one that an env's failure cut short); an env whose reset raises
        is made afresh (:meth:`_restart`). With ``seed``, env ``i`` is reset with ``seed + i`` (as the
        first reset was: a simulator replays its first episode). The base class's plain reset, also
        for subclasses that reset on threads: nothing runs meanwhile."""
        obs = []
        for i in range(self.num_envs):
            try:
                kwargs = {} if seed is None else {"seed": seed + i}
                obs.append(np.asarray(self.envs[i].reset(**kwargs)[0], dtype=self.dtype))
            except Exception as e:
                self._note_failure(i, "reset", e)
                obs.append(self._restart(i))
        self.obs = np.stack(obs).astype(self.dtype, copy=False).reshape(self.obs.shape)
        self.obs_at = time.monotonic()
        self.returns[:] = 0.0
        self.lengths[:] = 0
        self._in_demo.clear()

    def step_env(self, i: int, action) -> tuple | None:
        """Step env ``i`` alone (after a failure, to get a real transition for its row).

        Returns ``(obs, reward, next_obs, terminated, truncated, episode_end)`` with
        ``next_obs`` the final obs where the episode ended (``episode_end`` then says how
        it went, else None), and the env reset for its next step; or None when the step
        raised: the env was made afresh (``obs[i]`` is its new start). Raises
        :class:`EnvFailing` when the env keeps failing.
        """
        self.obs = self.obs.copy()  # never a row of an array handed out by step()
        obs = self.obs[i].copy()
        if np.ndim(action) == 0:  # a discrete action as step() passes it: a python scalar
            action = np.asarray(action).item()
        try:
            o, r, term, trunc, info = self.envs[i].step(action)
        except Exception as e:
            self._note_failure(i, "step", e)
            self.returns[i] = 0.0
            self.lengths[i] = 0
            self.obs[i] = self._restart(i)
            return None
        self.failures[i] = 0
        if "still_s" in info:  # the game made afresh may still be frozen: held back as in step()
            self.still = {**self.still, i: info["still_s"]}
        next_obs = np.asarray(o, dtype=self.dtype).reshape(obs.shape)
        self.returns[i] += r
        self.lengths[i] += 1
        end = None
        if term or trunc:
            end = EpisodeEnd(i, float(self.returns[i]), int(self.lengths[i]), bool(term))
            self.returns[i] = 0.0
            self.lengths[i] = 0
            self.obs[i] = self._reset(i)
        else:
            self.obs[i] = next_obs
        return obs, float(r), next_obs, bool(term), bool(trunc), end

    def close(self) -> None:
        for i, env in enumerate(self.envs):
            try:
                env.close()
            except Exception as e:
                log.warning("env %d: close raised %s: %s (ignored)", i, type(e).__name__, e)


#: the reset seed of model version 0's first evaluation episode: above the training envs' seeds
#: (a worker's env i starts from ``train.seed * 1000 + index * 97 + i``) for ``train.seed`` < 1000
EVAL_SEED_BASE = 10**6


def evaluation_seed(version: int, episodes: int) -> int:
    """The reset seed of the first of ``episodes`` greedy episodes of model ``version`` (episode i
    starts from this + i): ``EVAL_SEED_BASE + version * episodes``.

    Why by version: a model always meets the same start states, however often and by whichever
    evaluator (``mqttrl evaluate``, ``mqttrl train``) it is evaluated, so two evaluations of one
    model agree and the curves of two runs compare model against model; successive versions meet
    disjoint start states, so a run is not tuned to one fixed set.
    """
    return EVAL_SEED_BASE + max(int(version), 0) * episodes


def evaluate_model(actor, make: Callable[[], gym.Env], weights, episodes: int) -> Evaluation:
    """The one greedy evaluation of mqttrl: load ``weights`` (a decoded weights message) into
    ``actor`` and play ``episodes`` episodes side by side, seeded by :func:`evaluation_seed`; the
    record an evaluator publishes on ``eval/<name>`` (:class:`mqttrl.wire.evaluation.Evaluation`)."""
    actor.load_weights(weights.tensors, weights.info)
    started = time.monotonic()
    returns = evaluate(actor, make, episodes, evaluation_seed(weights.version, episodes))
    return Evaluation.of_returns(ModelRef.of(weights), returns, time.monotonic() - started)


def evaluate(actor, make: Callable[[], gym.Env], episodes: int, seed: int, max_steps: int = 100_000) -> list[float]:
    """Greedy returns of ``episodes`` episodes, run side by side with batched policy calls; episode
    i is reset with ``seed + i``. Evaluators call it through :func:`evaluate_model`, which picks the
    seed; a caller with a seed of its own (a benchmark, a test) calls it directly."""
    envs = [make() for _ in range(episodes)]
    try:
        return greedy_returns(envs, obs_dtype(envs[0].observation_space), actor, episodes, seed, max_steps)
    finally:
        for env in envs:
            env.close()


def greedy_returns(
    envs: list[gym.Env],
    dtype: np.dtype,
    actor,
    episodes: int,
    seed: int,
    max_steps: int = 100_000,
    during: Callable[[], None] | None = None,
) -> list[float]:
    """The greedy returns of ``episodes`` episodes played on ``envs`` side by side (a policy call per
    step over the envs still playing), episode k reset with ``seed + k``; with fewer envs than
    episodes, an env that ends starts the next episode. Returns in episode order; an episode still
    open after ``max_steps`` steps counts with its return so far. ``during`` runs after each step
    (a worker's messages and heartbeats while it evaluates on its own game)."""
    returns: dict[int, float] = {}
    live: dict[int, tuple[int, np.ndarray]] = {}  # env index -> (episode, its observation)
    started = 0
    for i in range(min(len(envs), episodes)):
        live[i] = (started, np.asarray(envs[i].reset(seed=seed + started)[0]))
        returns[started] = 0.0
        started += 1
    steps = 0
    while live and steps < max_steps:
        idx = sorted(live)
        actions, _ = actor.act(np.stack([live[i][1] for i in idx]).astype(dtype, copy=False), greedy=True)
        for j, i in enumerate(idx):
            a = actions[j]
            episode = live[i][0]
            o, r, term, trunc, _ = envs[i].step(a.item() if np.ndim(a) == 0 else a)
            returns[episode] += float(r)
            if not (term or trunc):
                live[i] = (episode, np.asarray(o))
            elif started < episodes:
                live[i] = (started, np.asarray(envs[i].reset(seed=seed + started)[0]))
                returns[started] = 0.0
                started += 1
            else:
                del live[i]
        steps += 1
        if during is not None:
            during()
    return [returns[k] for k in sorted(returns)]
