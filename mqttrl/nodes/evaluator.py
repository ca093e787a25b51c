"""The evaluator node: greedy evaluation of a live run's newest weights, from any machine.

Reads the run config and weights from their retained messages (like a worker; or is handed the
config, as ``mqttrl train`` does), evaluates every ``every_s`` seconds when a newer model exists
(:func:`mqttrl.envs.rollout.evaluate_model`: the one evaluation, seeded by model version), and
publishes each result on ``eval/<name>``, with ``env_steps``: the env steps the learner had taken
in when it published the evaluated model, so that curves compare runs at equal data. ``mqttrl
evaluate`` runs it in the foreground and can stop once a target is met; ``mqttrl train`` runs the same node in a thread, takes each result
through ``on_result`` and asks for a last evaluation of the newest model with :meth:`final`.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import uuid
from collections.abc import Callable

import attrs

from mqttrl.config import RunConfig, from_dict
from mqttrl.envs.eval_schedule import EvalSchedule, trained_env_steps
from mqttrl.envs.greedy import greedy_actor
from mqttrl.envs.rollout import evaluate_model
from mqttrl.plugin.manager import get_registry
from mqttrl.transport.client import BrokerSettings, MqttClient
from mqttrl.transport.dispatch import Dispatcher
from mqttrl.transport.topics import Kind, Topics
from mqttrl.wire import NO_MODEL, ModelRef, WeightsMessage, decode_json, decode_weights
from mqttrl.wire.evaluation import Evaluation
from mqttrl.wire.model_ref import newest_match

log = logging.getLogger("mqttrl.evaluate")


@attrs.frozen
class Result:
    """An evaluation and who played it: this evaluator (its name) or a worker on its game."""

    evaluation: Evaluation
    evaluator: str


#: ``on_result(result, weights, payload)``: the result, the decoded model it judged and its bytes
#: (None for both: a worker's result of a model no longer kept)
ResultCallback = Callable[[Result, WeightsMessage | None, bytes | None], None]


def model_env_steps(weights: WeightsMessage) -> int | None:
    """The env steps (samples) the learner had taken in when it published ``weights`` (None: a
    learner that does not say, as one older than this key)."""
    return trained_env_steps(weights.info)


#: the models a listening evaluator keeps (by :class:`ModelRef`: a resumed learner's new epoch
#: numbers its models lower than the old one's), for the results of workers that evaluated them
RECENT_MODELS = 16


class _Latest:
    """What the evaluator has read from the run's retained topics: its handler table."""

    def __init__(self, topics: Topics, episodes: int, config: RunConfig | None = None, listen: bool = False):
        self.episodes = episodes
        self.registry = get_registry()
        self.config = self.actor = self.make = None
        self.weights: WeightsMessage | None = None
        self.payload: bytes | None = None
        #: when the earliest model this evaluator received was published (the run's first model
        #: when it watched from the start, as in ``mqttrl train``)
        self.first_published_at: float | None = None
        #: why the run's config cannot be evaluated here (unknown algorithm, bad value): raised by the loop
        self.error: Exception | None = None
        #: with ``listen``: the recent models by reference, and the workers' results not handed on yet
        self.recent: dict[ModelRef, tuple[WeightsMessage, bytes]] = {}
        self.results: list[Result] = []
        handlers = {Kind.CONFIG: self.on_config, Kind.WEIGHTS: self.on_weights}
        if listen:
            handlers[Kind.EVAL] = self.on_eval
        self.dispatch = Dispatcher(topics, handlers, log)
        self.rejections = self.dispatch.rejections
        if config is not None:  # handed over: an env that cannot be made raises here, before anything runs
            self.actor, self.make = greedy_actor(config, episodes)
            self.config = config

    def subscriptions(self) -> list[tuple[str, int]]:
        kinds = [k for k in self.dispatch.handlers if not (k is Kind.CONFIG and self.config is not None)]
        return [self.dispatch.topics.subscription(k) for k in kinds]

    def on_config(self, name: str, payload: bytes) -> None:
        if self.config is not None:
            return
        data = decode_json(payload)  # a refusal here is counted by the dispatcher
        try:
            config = from_dict(data, lambda n: self.registry.algorithm(n).params)
            self.actor, self.make = greedy_actor(config, self.episodes)
        except Exception as e:  # a config this host cannot run ends the evaluator
            self.error = e
            return
        self.config = config

    def on_weights(self, name: str, payload: bytes) -> None:
        w = decode_weights(payload)
        if self.first_published_at is None or w.published_at < self.first_published_at:
            self.first_published_at = w.published_at
        if w.newer_than(self.weights):  # a restarted learner's new epoch wins at a lower version
            self.weights, self.payload = w, payload
        self.recent[w.ref] = (w, payload)
        while len(self.recent) > RECENT_MODELS:  # the oldest by epoch, then version
            del self.recent[min(self.recent)]

    def model_of(self, evaluation: Evaluation) -> tuple[ModelRef, WeightsMessage | None, bytes | None]:
        """The model a worker's ``evaluation`` judged: its reference (that of the kept model where
        it names no epoch) and the kept weights, or None for them when no longer kept."""
        asked = evaluation.model
        ref = newest_match(self.recent, asked)
        return (asked, None, None) if ref is None else (ref, *self.recent[ref])

    def on_eval(self, name: str, payload: bytes) -> None:
        """A worker's greedy evaluation (``eval_on = "workers"``): kept for the loop to hand on."""
        self.results.append(Result(Evaluation.decode(payload), name))


class EvaluatorNode:
    """Evaluates the newest model every ``every_s`` s (the first after ``first_after_s``), or every
    ``every_env_steps`` of data."""

    def __init__(
        self,
        broker: BrokerSettings,
        run: str,
        episodes: int = 20,
        every_s: float = 10.0,
        name: str | None = None,
        *,
        config: RunConfig | None = None,
        first_after_s: float = 0.0,
        on_result: ResultCallback | None = None,
        play: bool = True,
        every_env_steps: int = 0,
    ):
        """``play=False``: the workers play the evaluations on their games (``[train] eval_on =
        "workers"``); this node hands their results on (``on_result``) with the model each judged.
        ``every_env_steps``: evaluate the first model trained on each multiple of it instead of
        every ``every_s`` (:class:`~mqttrl.envs.eval_schedule.EvalSchedule`)."""
        self.topics = Topics(run)
        self.name = name or f"eval-{uuid.uuid4().hex[:6]}"
        self.episodes, self.every_s, self.first_after_s = episodes, every_s, first_after_s
        self.every_env_steps = every_env_steps
        self.on_result = on_result
        self.play = play
        self.seen = _Latest(self.topics, episodes, config, listen=not play)
        self.rejections = self.seen.rejections
        #: every result, in order
        self.results: list[Result] = []
        #: the newest model evaluated (NO_MODEL: none)
        self.evaluated: ModelRef = NO_MODEL
        self._stop = threading.Event()
        self._final = threading.Event()
        #: with ``play=False``: the newest model when the final evaluation was asked for (the workers'
        #: first evaluation of it or a newer one ends the loop)
        self.final_model: ModelRef | None = None
        self._done = threading.Event()
        self.client = MqttClient(broker, client_id=f"mqttrl-{self.name}", subscriptions=self.seen.subscriptions())

    @property
    def latest_version(self) -> int:
        """The newest model version received (-1: none yet)."""
        return self.latest.version

    @property
    def latest(self) -> ModelRef:
        """The newest model received (NO_MODEL: none yet)."""
        return self.seen.weights.ref if self.seen.weights is not None else NO_MODEL

    def start(self) -> EvaluatorNode:
        """Connect (raises when the broker cannot be reached); :meth:`serve` then runs the loop."""
        self.client.start(wait=30)
        return self

    def run(self, target: float | None = None, max_seconds: float | None = None) -> Result | None:
        """Connect and serve; returns the first result that met ``target`` (None when stopped)."""
        return self.start().serve(target, max_seconds)

    def serve(self, target: float | None = None, max_seconds: float | None = None) -> Result | None:
        """The loop, in the calling thread: returns the first result that met ``target``, or None
        at ``max_seconds``, at :meth:`stop` or after the evaluation :meth:`final` asked for."""
        t0 = time.monotonic()
        schedule = EvalSchedule(self.every_s, self.every_env_steps, first_after_s=self.first_after_s)
        try:
            while not self._stop.is_set() and (max_seconds is None or time.monotonic() - t0 < max_seconds):
                self._pump(0.2)
                if self.seen.error is not None:
                    raise self.seen.error
                if not self.play:  # the workers evaluate: hand their results on
                    self._hand_on_workers_results(t0)
                    if self._final.is_set():  # the final one: theirs of the newest model, or a newer one
                        if self.final_model is None:
                            self.final_model = self.latest
                        if self.evaluated >= self.final_model:
                            return None
                    continue
                if self._final.is_set():
                    self._evaluate_newest(t0)
                    return None
                w = self.seen.weights
                steps = None if w is None else model_env_steps(w)
                if w is None or not schedule.due(w.ref, steps):
                    continue
                result = self._evaluate_newest(t0)
                if result is None:
                    continue
                schedule.judged(w.ref, steps)  # w: the model just evaluated
                if target is not None and result.evaluation.mean >= target:
                    return result
            return None
        finally:
            try:
                self.client.stop(flush_timeout=2)  # the last result goes out
            finally:
                self._done.set()

    def _pump(self, timeout: float) -> None:
        """Handle what the inbox holds (waiting up to ``timeout`` s for the first message)."""
        try:
            m = self.client.inbox.get(timeout=timeout)
            while True:
                self.seen.dispatch(m.topic, m.payload)
                m = self.client.inbox.get_nowait()
        except queue.Empty:
            pass

    def _evaluate_newest(self, t0: float) -> Result | None:
        """Evaluate the newest model if no evaluation has seen it; publish and hand on the result."""
        seen, w, payload = self.seen, self.seen.weights, self.seen.payload
        if seen.actor is None or w is None or payload is None or w.ref <= self.evaluated:
            return None
        self.evaluated = w.ref
        record = attrs.evolve(
            evaluate_model(seen.actor, seen.make, w, self.episodes),
            wall_s=round(time.monotonic() - t0, 2),
            # the data this model was trained on: curves compare runs at equal env steps
            env_steps=model_env_steps(w),
            # from the first model this evaluator received to this one's publication: the training
            # time to this model when it watched from the run's start (no start-up, no eval cadence)
            training_s=None if seen.first_published_at is None else round(w.published_at - seen.first_published_at, 2),
        )
        result = Result(record, self.name)
        self.results.append(result)
        self.client.publish(self.topics.evaluation(self.name), record.encode(), qos=1, kind="eval")
        log.debug("model %s: mean %.1f ± %.1f over %d episodes", w.ref, record.mean, record.std, self.episodes)
        if self.on_result is not None:
            self.on_result(result, w, payload)
        return result

    def _hand_on_workers_results(self, t0: float) -> None:
        """The workers' results received since the last call, each with the model it judged (one too
        old to be kept is handed on without it: it counts, but cannot become ``best/``)."""
        seen = self.seen
        while seen.results:
            theirs = seen.results.pop(0)
            ref, w, payload = seen.model_of(theirs.evaluation)
            training_s = theirs.evaluation.training_s
            if w is not None and seen.first_published_at is not None:
                training_s = round(w.published_at - seen.first_published_at, 2)
            evaluation = attrs.evolve(theirs.evaluation, wall_s=round(time.monotonic() - t0, 2), training_s=training_s)
            result = attrs.evolve(theirs, evaluation=evaluation)
            self.results.append(result)
            self.evaluated = max(self.evaluated, ref)
            if self.on_result is not None:
                self.on_result(result, w, payload)

    def final(self, timeout: float, cancel: threading.Event | None = None) -> bool:
        """Evaluate the newest model unless an evaluation has seen it (after the one under way),
        then end the loop (``play=False``: wait for the workers' evaluation of it or of a newer one,
        which they play on their schedule). True once it ended; False when that took over ``timeout`` s or
        ``cancel`` (Ctrl-C) was set first: the loop then ends after what it is doing."""
        self._final.set()
        deadline = time.monotonic() + timeout
        while not self._done.wait(min(0.25, max(0.0, deadline - time.monotonic()))):
            if time.monotonic() >= deadline or (cancel is not None and cancel.is_set()):
                return False
        return True

    def stop(self) -> None:
        """End the loop after what it is doing; never blocks."""
        self._stop.set()


def run_evaluator(
    broker: BrokerSettings,
    run: str,
    episodes: int = 20,
    every_s: float = 10.0,
    target: float | None = None,
    max_seconds: float | None = None,
    name: str | None = None,
    every_env_steps: int = 0,
) -> Result | None:
    """``mqttrl evaluate``: prints each result; returns the first that met ``target`` (or None at the time limit)."""

    def show(result: Result, weights: WeightsMessage | None, payload: bytes | None) -> None:
        ev = result.evaluation
        print(
            f"model v{ev.model_version}: mean {ev.mean:.1f} ± {ev.std:.1f} over "
            f"{ev.episodes} episodes (min {ev.min:.0f}, max {ev.max:.0f})",
            flush=True,
        )

    node = EvaluatorNode(broker, run, episodes, every_s, name, on_result=show, every_env_steps=every_env_steps)
    return node.run(target, max_seconds)
