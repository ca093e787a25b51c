"""The worker's game loops: the free loop (step as fast as the game goes) and the real-time loop
(one step per control period, ``[env] control_hz``).

A loop owns what happens in one turn: the forward, the env step, the step record handed to the
:class:`~mqttrl.nodes.worker.step.StepRecorder`, and (real time) the chores run while a period's
actions are out, pausing games that can pause, and the gap while some games reset. What a turn
needs of the rest of the worker (messages, weights, heartbeats, batches, evaluation, idling)
it asks of the node shell through :class:`Shell`; the shell keeps MQTT and sync.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from mqttrl.envs.realtime import RealTimeEnvSet, can_pause, game_of
from mqttrl.envs.realtime_clock import ThreadPriority
from mqttrl.envs.rollout import EnvSet
from mqttrl.nodes.worker.core import IDLE_REASONS, Move, WorkerCore
from mqttrl.nodes.worker.remote_forward import InferenceUnavailable
from mqttrl.nodes.worker.step import StepRecorder, VectorStep
from mqttrl.observe.timing import BlockTimes
from mqttrl.plugin.algorithm import Actor

log = logging.getLogger("mqttrl.worker")


class Shell(Protocol):
    """What a loop asks of the worker node around a step."""

    core: WorkerCore
    actor: Actor
    blocks: BlockTimes
    priority: ThreadPriority
    name: str

    def clock(self) -> float: ...

    def drain(self, timeout: float = 0.0) -> None: ...
    def load_new_weights(self) -> None: ...
    def heartbeat_if_due(self) -> None: ...
    def heartbeat(self) -> None: ...
    def evaluate_if_due(self, envs: EnvSet) -> None: ...
    def idle_now(self) -> str | None: ...
    def send_batch(self) -> None: ...
    def send_when_due(self) -> None: ...


class GameLoop:
    """What both loops share: the forward over every env's observation, and the step's hand-off."""

    def __init__(self, shell: Shell, envs: EnvSet, recorder: StepRecorder):
        self.shell = shell
        self.envs = envs
        self.recorder = recorder
        #: whether the worker paused its games (they can pause) because it had nothing useful to do
        self.games_paused = False
        #: why a real-time worker idles now (its heartbeats say), None while it plays
        self.idle_reason: str | None = None

    def act(self) -> tuple[Any, dict, float] | None:
        """The actions for every env's observation, their extras and when the forward ended (its
        time is the ``forward`` block); None when central inference is down (logged, heartbeated)."""
        blocks = self.shell.blocks
        t0 = blocks.clock()
        try:
            actions, extras = self.shell.actor.act(self.envs.obs)
        except InferenceUnavailable as e:
            log.error("%s", e)
            self.shell.heartbeat()
            return None
        t1 = blocks.clock()
        blocks.add("forward", t1 - t0)
        return actions, extras, t1

    def tick(self) -> None:
        raise NotImplementedError

    def not_held(self) -> None:
        """The learner's update debt would hold a game that cannot pause: it plays on regardless,
        and its steps are recorded (the learner's replay ratio dips meanwhile, what it owes beyond
        ``forgive_debt_above`` forgiven), not played unrecorded. Said once (info)."""
        if not self.debt_said:
            self.debt_said = True
            log.info(
                "worker %s: the learner's flow control (update debt, e.g. at learning_starts) asks workers to "
                "pause; this game cannot pause, so it plays on and its steps are recorded",
                self.shell.name,
            )

    debt_said = False


class FreeLoop(GameLoop):
    """Step as fast as the game goes; idle in small slices while there is nothing useful to do.

    A lock-step env waits while the worker idles. A game on its own clock stepped freely (a
    screen env paced by its ``step_s``, no ``control_hz``) does not: one that can pause is paused
    meanwhile, and one that cannot plays on, as in the real-time loop (held only by the learner's
    update debt, its steps are recorded; for any other reason they are played, not recorded).
    Idling beside such a game let it play without the agent: a ball that falls in half a second
    was lost, and an episode of a one-life game ended before the agent's first action."""

    def __init__(self, shell: Shell, envs: EnvSet, recorder: StepRecorder):
        super().__init__(shell, envs, recorder)
        runs_on = [e for e in envs.envs if game_of(e) is not None]
        #: the games that run on their own clock, and whether every one of them can pause
        self.games = [game_of(e) for e in runs_on]
        self.games_pausable = bool(runs_on) and all(can_pause(e) for e in runs_on)

    def tick(self) -> None:
        """One turn: messages, new weights, heartbeat, evaluation when due, a vector step, maybe a batch."""
        shell = self.shell
        shell.drain()
        shell.load_new_weights()
        shell.heartbeat_if_due()
        if not self.recorder.hold.steps:  # an evaluation's episodes would break the held steps' sequence
            shell.evaluate_if_due(self.envs)
        idle = shell.idle_now()
        record = True
        if idle and self.games and not self.games_pausable:  # a game that cannot pause plays on
            record = idle == "learner_paused"
            if record:
                self.not_held()
        elif idle:
            self._pause_games(idle)
            # idle in small slices: messages, weights and heartbeats go on; behind a link that
            # drains its backlog in milliseconds, slices short enough to keep it busy
            shell.drain(timeout=0.005 if idle == "link_behind" else 0.05)
            return
        self._resume_games()
        if self.step(record):
            shell.send_when_due()

    def _pause_games(self, idle: str) -> None:
        if self.games and not self.games_paused:
            for game in self.games:
                game.pause()  # type: ignore[attr-defined]  # can_pause said each has it
            self.games_paused = True
            log.info("worker %s paused its games: %s", self.shell.name, IDLE_REASONS.get(idle, idle))

    def _resume_games(self) -> None:
        if self.games_paused:
            for game in self.games:
                game.resume()  # type: ignore[attr-defined]
            self.games_paused = False
            log.debug("worker %s resumed its games", self.shell.name)

    def step(self, record: bool = True) -> bool:
        """One vector step (``record``: handed to the actor; a game that plays on while the
        worker idles is stepped, not recorded); False when central inference is down (logged and
        heartbeated, retried next tick)."""
        acted = self.act()
        if acted is None:
            return False
        actions, extras, t1 = acted
        out = self.envs.step(actions)
        self.shell.blocks.add("env_step", self.shell.blocks.clock() - t1)
        self.recorder.take(self.envs, VectorStep.of(actions, extras, out), record=record, timed=False)
        return True


class RealTimeLoop(GameLoop):
    """One step per control period, the chores done while the period's actions are out."""

    envs: RealTimeEnvSet

    def __init__(self, shell: Shell, envs: RealTimeEnvSet, recorder: StepRecorder):
        super().__init__(shell, envs, recorder)
        #: a step is being played but not recorded (another game of this worker resets)
        self.in_gap = False
        self.chore_s = 0.0

    def tick(self) -> None:
        """One control period: forward, send the actions, do the chores while the period runs
        (messages, a new model, heartbeat, a batch out), wait for its end, read, record.

        A worker with nothing useful to do pauses games that can pause (resumed at once when
        there is); a game that cannot pause plays on with the newest model, its steps not
        recorded meanwhile (they would be lost or refused as stale)."""
        shell, envs = self.shell, self.envs
        if not self.recorder.hold.steps:  # as in the free loop
            shell.evaluate_if_due(envs)
        idle = self.idle_reason = self.why_idle()
        if idle and envs.pausable:
            self.pause(idle)
            return
        if self.games_paused:
            envs.resume()
            self.games_paused = False
            log.debug("worker %s resumed its games", shell.name)
        record = idle is None  # a game that cannot pause plays on; nothing is recorded while idle
        shell.priority.high()  # forward, actions out, the wait to the period's end and the reads
        acted = self.act()
        if acted is None:
            return
        actions, extras, t1 = acted
        blocks = shell.blocks
        slept0, spun0 = envs.slept, envs.spun
        self.chore_s = 0.0
        out = envs.step(actions, during=self.chores)
        slept = envs.slept - slept0
        blocks.add("wait", slept)
        if envs.spun > spun0:
            blocks.add("spin", envs.spun - spun0)  # the part of the wait spent spinning (CPU)
        blocks.add("env_step", max(0.0, blocks.clock() - t1 - slept - self.chore_s))
        if envs.resetting_rows:
            self.recorder.hold.drop(envs.failed)  # before the gap's truncations: the held steps came first
            record = self.gap_step(out, record)
        else:
            self.in_gap = False
        self.recorder.take(envs, VectorStep.of(actions, extras, out), record=record, timed=True)

    def pause(self, idle: str) -> None:
        """Nothing useful to do: the games paused (once), messages, weights and heartbeats go on."""
        shell = self.shell
        shell.priority.low()  # nothing runs against a deadline while the games are paused
        if not self.games_paused:
            self.envs.pause()
            self.games_paused = True
            # a PPO round pauses the games every round: said at debug level; the other reasons at info
            say = log.debug if shell.core.awaiting_model else log.info
            say("worker %s paused its games: %s", shell.name, idle)
        with shell.blocks.timed("paused"):
            shell.drain(timeout=0.01)
        shell.load_new_weights()
        shell.heartbeat_if_due()

    def gap_step(self, out: tuple, record: bool) -> bool:
        """A step in which some games were resetting on their threads (their rows hold no
        transition): the other games were served on time, but the actor takes every game's row
        at once, so this step is played, not recorded. At the gap's start the other games' open
        windows end where they got to (as a truncation), so no n-step return spans the gap."""
        envs = self.envs
        if record and not self.in_gap:
            obs = out[0]
            for i in range(envs.num_envs):
                if i not in envs.resetting_rows and i not in envs.failed:
                    self.shell.actor.truncate(i, obs[i])
        self.in_gap = True
        return False

    def chores(self) -> None:
        """What a real-time worker does while a period runs (the actions are out): messages,
        a new model (decoded and loaded; the transition in flight, acted on by the model before,
        is recorded under the new version: one step's label, never its data), heartbeat, a due
        batch (encoded and queued; the network thread sends it). Never waits on the network;
        its time is measured (``chores`` in the period, per block in heartbeats). They run at the
        thread's ordinary priority (threads they start inherit it); the deadline's is back after."""
        shell = self.shell
        shell.priority.low()
        t0 = shell.blocks.clock()
        with shell.blocks.timed("receive"):
            shell.drain()
        shell.load_new_weights()
        shell.heartbeat_if_due()
        if shell.core.next_move(shell.actor.pending(), shell.clock()) is Move.SEND:
            shell.send_batch()
        self.chore_s = shell.blocks.clock() - t0
        shell.priority.high()

    def why_idle(self) -> str | None:
        """Why the worker has nothing useful to do now, or None: waiting for a PPO round's model,
        or what the core's :meth:`~WorkerCore.should_idle` says (link down, learner away or
        holding workers back, outbox full); a game that can pause is paused meanwhile."""
        if self.shell.core.awaiting_model:
            return "waiting for the learner's next model"
        reason = self.shell.idle_now()
        if reason == "learner_paused" and not self.envs.pausable:
            self.not_held()
            return None
        return IDLE_REASONS[reason] if reason is not None else None


def make_loop(shell: Shell, envs: EnvSet, recorder: StepRecorder) -> GameLoop:
    """The real-time loop for envs stepped in control periods, else the free loop."""
    if isinstance(envs, RealTimeEnvSet):
        return RealTimeLoop(shell, envs, recorder)
    return FreeLoop(shell, envs, recorder)
