"""DQN's learner side, in torch: the Q-network, a torch forward, the replay buffer and the learner.

Only the learner process (and a worker or inference server that asks for the
torch forward) imports this module; :mod:`mqttrl_plugins.dqn` imports it
lazily, so a worker without torch never does.

1. ``QNetwork`` and ``TorchQForward``: the network of :func:`.common.net_info` (an MLP
   or CNN torso from :mod:`mqttrl.nets`, then the heads) and the forward over it that
   actors and inference servers can use;
2. ``SumTree``: proportional priorities for prioritized replay;
3. ``DQNLearner`` (an :class:`~mqttrl.plugin.algorithm.AsyncLearner`): replay buffer
   (uniform or proportional prioritized), double-DQN targets, Huber loss (or C51's
   cross-entropy to the projected target, or QR-DQN's quantile Huber loss: :mod:`.heads`),
   noisy heads resampled at each update, target network, Adam; checkpoints as numpy arrays plus JSON metadata (no
   pickle, no torch.load).

The learner's pace is set by ``replay_ratio``: the mean number of times each
sample is replayed, ``updates * batch_size / samples_added``. The learner
trains while it is below that ratio, and ``behind()`` asks workers to pause
when it owes more than ``max_update_debt`` updates, so a slow learner sees
the same data-to-update ratio as a fast one. A backlog (the broker handing over
what workers made during an outage) would owe minutes of updates and pause every
worker that long; updates owed beyond ``forgive_debt_above`` are forgiven instead
(counted in ``updates_forgiven``): those samples are replayed less often.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from mqttrl.plugin import (
    LearnerContext,
    SampleBatch,
    Tensors,
    TorchTorso,
    export_module,
    load_module,
    load_optimizer_state,
    obs_dtype,
    optimizer_state,
    rng_from_json,
    rng_to_json,
)

from .adam_stats import adam_below_eps
from .common import DQNParams, actor_priorities, check_spaces, net_info, sample_spec
from .device_replay import DeviceReplay, choose_side
from .frames import frame_layout
from .heads import NoisyLinear, combine, expected_q, linear_layer, reset_noise_of, td_loss
from .numpy_heads import HeadSpec
from .numpy_net import follow_weights, noisy_torso, torso_of
from .pipeline import LaggedReadback, Staging, draw_noise
from .replay import SumTree, make_replay
from .resets import forget_moments, shrink_and_perturb
from .support_watch import SupportWatch

__all__ = ["DQNLearner", "QNetwork", "SumTree", "TorchQForward"]

#: a backlog is only forgiven beyond what this many batches of every sender owe (DQNLearner._forgive_above)
FORGIVE_BATCHES = 4

log = logging.getLogger("mqttrl.dqn")
#: updates between two readings of Adam's second moments (one pass over them; a device sync on a GPU)
ADAM_STATS_EVERY = 1000

#: torch's fused Adam runs on a CPU from torch 2.4 on
CPU_FUSED_ADAM = torch.torch_version.TorchVersion(torch.__version__) >= "2.4"

# --------------------------------------------------------------------------
# 1. Q-network and the torch forward
# --------------------------------------------------------------------------


class QNetwork(nn.Module):
    """The network of :func:`.common.net_info`: a torso (:class:`mqttrl.nets.torch_torso.Torso`, MLP or
    CNN, taking observations in their native dtype) as ``trunk``, then dueling value/advantage layers or
    one ``head`` (:mod:`.heads`: plain or noisy; 1, n_atoms or n_quantiles outputs per action).
    ``noisy_torso``: the torso's dense layers are noisy too (``noisy_layers = "all"``).

    ``forward`` gives the expected Q-values (N, n_actions); :meth:`outputs` the per-action outputs
    (N, n_actions, K): Q-values, C51 logits or QR quantiles. Noisy layers use the noise they
    hold (:meth:`reset_noise`) unless ``noise=False`` (the mean weights)."""

    def __init__(self, torso: Mapping[str, Any], head: HeadSpec, sigma0: float = 0.5, noisy_torso: bool = False):
        super().__init__()
        noisy_dense = (lambda n_in, n_out: NoisyLinear(n_in, n_out, sigma0)) if noisy_torso else None
        self.trunk = TorchTorso(torso, linear=noisy_dense)
        width = self.trunk.out_size
        self.spec = head
        self.dueling = head.dueling
        for name, out in head.layers():
            setattr(self, name, linear_layer(head, width, out, sigma0))
        self.register_buffer("support", torch.from_numpy(head.support()), persistent=False)
        #: every noisy layer, torso's first (the order their noise is drawn in)
        self._noisy = [m for m in self.modules() if isinstance(m, NoisyLinear)]

    def head_layers(self) -> list[nn.Module]:
        return [getattr(self, name) for name, _ in self.spec.layers()]

    def noisy_layers(self) -> list[NoisyLinear]:
        """The noisy layers, torso's first then the head's (empty without noise)."""
        return self._noisy

    def outputs(self, obs: torch.Tensor, noise: bool = True) -> torch.Tensor:
        x = self.trunk(obs, noise)
        if self.spec.noisy:
            return combine(self.spec, [layer(x, noise) for layer in self.head_layers()])
        return combine(self.spec, [layer(x) for layer in self.head_layers()])

    def q_values(self, out: torch.Tensor) -> torch.Tensor:
        """Per-action outputs -> expected Q (N, n_actions)."""
        return expected_q(self.spec, out, self.support)

    def forward(self, obs: torch.Tensor, noise: bool = True) -> torch.Tensor:
        return self.q_values(self.outputs(obs, noise))

    def reset_noise(self, rows: int | None = None, generator: torch.Generator | None = None) -> None:
        """New noise in every noisy layer (one draw, or one per row of the next ``rows``); nothing without."""
        reset_noise_of(self._noisy, rows, generator)


def _net_from_info(info: Mapping[str, Any], obs_shape: tuple[int, ...] | None = None, sigma0: float = 0.5) -> QNetwork:
    return QNetwork(torso_of(info, obs_shape), HeadSpec.of(info), sigma0, noisy_torso(info))


class TorchQForward:
    """Q-values with torch (inference mode), loaded from the exported weights; observations go in
    in their native dtype (the network converts them). A noisy head samples fresh noise at each call,
    one draw per row, from this forward's own generator (see :class:`.numpy_net.NumpyQForward`)."""

    def __init__(self, params: DQNParams, obs_space: gym.Space, act_space: gym.Space, seed: int = 0):
        self.obs_dim, self.n_actions = check_spaces(obs_space, act_space)
        self.obs_shape = tuple(int(s) for s in obs_space.shape)
        self.info = net_info(self.obs_dim, self.n_actions, params)
        with torch.random.fork_rng(devices=[]):  # leave the process-wide torch RNG alone
            torch.manual_seed(seed)
            self.net = _net_from_info(self.info, self.obs_shape, params.noisy_sigma0)
        self.net.eval()
        #: a noisy head's noise: fresh at every call, one draw per row (as the numpy forward's), seeded
        self.generator = torch.Generator().manual_seed(seed)
        #: where the network runs (:meth:`to_device`); observations come from and Q-values go back to numpy
        self.device = torch.device("cpu")

    def to_device(self, device: str) -> None:
        """Run on ``device`` (an inference server's ``inference.device``): the net moves now, loaded weights follow."""
        self.device = torch.device(device)
        self.net.to(self.device)

    def load_weights(self, tensors: Mapping[str, np.ndarray], info: Mapping[str, Any]) -> None:
        full = follow_weights(self.info, info)
        with torch.random.fork_rng(devices=[]):
            net = _net_from_info(full, self.obs_shape)
        load_module(net, tensors)  # raises before anything is replaced
        net.eval()
        net.to(self.device)
        self.net = net  # the swap: one assignment
        self.info = full

    def __call__(self, obs: np.ndarray) -> dict[str, np.ndarray]:
        obs = np.asarray(obs)
        if not obs.flags.writeable:  # e.g. a request decoded from the wire; torch warns about read-only arrays
            obs = obs.copy()
        x = torch.from_numpy(np.ascontiguousarray(obs)).to(self.device)
        with torch.inference_mode():
            net = self.net
            net.reset_noise(len(x), self.generator)
            return {"q": net(x).cpu().numpy()}

    def noiseless(self, obs: np.ndarray) -> dict[str, np.ndarray]:
        """As a call, with a noisy head's mean weights (greedy evaluation)."""
        obs = np.asarray(obs)
        if not obs.flags.writeable:
            obs = obs.copy()
        with torch.inference_mode():
            x = torch.from_numpy(np.ascontiguousarray(obs)).to(self.device)
            return {"q": self.net(x, noise=False).cpu().numpy()}

    def close(self) -> None:
        """Nothing to release."""


# --------------------------------------------------------------------------
# 2. Replay: SumTree, ArrayReplay and FrameReplay live in :mod:`.replay` (numpy only)
# --------------------------------------------------------------------------


# --------------------------------------------------------------------------
# 3. The learner
# --------------------------------------------------------------------------


class DQNLearner:
    """Ape-X's learner: replay fed by any worker at any time, trained at ``replay_ratio``."""

    #: demonstrations (``mqttrl train --demos``): a replay part never evicted (:mod:`.demo_replay`)
    demos = None

    def __init__(
        self,
        params: DQNParams,
        obs_space: gym.Space,
        act_space: gym.Space,
        device: str = "cpu",
        seed: int = 0,
        context: LearnerContext | None = None,
    ):
        self.params = p = params
        #: the learner node's block timer (``context``): drawing rows from the replay is its "sample" block
        self.timed = (context or LearnerContext()).timed
        self.obs_dim, self.n_actions = check_spaces(obs_space, act_space)
        self.spec = sample_spec(params, obs_space, act_space)
        self.device = torch.device(device)
        self.rng = np.random.default_rng(seed)
        torch.manual_seed(seed)
        self.online = _net_from_info(net_info(self.obs_dim, self.n_actions, p), sigma0=p.noisy_sigma0).to(self.device)
        self.target = _net_from_info(net_info(self.obs_dim, self.n_actions, p), sigma0=p.noisy_sigma0).to(self.device)
        self.target.load_state_dict(self.online.state_dict())
        self.target.requires_grad_(False)
        #: noisy heads' noise: the learner's own generator (on the CPU, in checkpoints as ``rng.noise``),
        #: so that neither another user of torch's global RNG nor the device changes the draws
        self.noise_rng = torch.Generator().manual_seed(seed)
        # fused Adam (CUDA, and the CPU since torch 2.4): one kernel per tensor instead of about ten
        # (on a CPU 3-5x faster a step: the optimizer was a third of a small MLP's update)
        self._fused = self.device.type == "cuda" or (self.device.type == "cpu" and CPU_FUSED_ADAM)
        self.optimizer = torch.optim.Adam(self.online.parameters(), lr=p.lr, eps=p.adam_eps, fused=self._fused)

        # replay: a ring over ``capacity`` slots; image observations as frames, each stored once
        self.capacity = cap = p.buffer_size
        obs_shape = tuple(int(s) for s in obs_space.shape)
        self.replay = make_replay(cap, frame_layout(p.frames, obs_space), obs_shape, obs_dtype(obs_space))
        self.tree = SumTree(cap) if p.prioritized else None
        self._gpu_path(seed)
        self.max_priority = 1.0  # new samples get the highest priority seen so far (already ** alpha)
        #: replayed samples' priorities: the distributional loss (Rainbow) only when the actors send none;
        #: else the expected |TD error|, the quantity the actors' priorities are (one scale for both)
        self._loss_priorities = p.distributional != "none" and not actor_priorities(p)
        #: the head's figures of the last loss (C51: target_edge_mass, the share of the projected targets
        #: on the two edge atoms: a support too narrow for the game's returns shows here)
        self._head_stats: dict[str, torch.Tensor] = {}
        #: C51: one warning when the edge mass stays high (a support the agent has outgrown)
        support = self.online.support
        self._support_watch = (
            SupportWatch(float(support[0]), float(support[-1]), len(support)) if p.distributional == "c51" else None
        )
        #: the share of parameters Adam's eps governs (.adam_stats), every ADAM_STATS_EVERY updates
        self._adam_below_eps: float | None = None
        self._seed = seed

        #: gradient updates done
        self.updates = 0
        #: transitions ever added
        self.samples_added = 0
        #: updates owed beyond forgive_debt_above, written off (a backlog after an outage)
        self.forgiven = 0.0
        #: who sent batches and the most updates one batch owed (:meth:`_forgive_above`)
        self._senders: set[str] = set()
        self._batch_debt = 0.0

    # ---- pacing

    def _debt(self) -> float:
        """Updates owed to reach replay_ratio."""
        return self.samples_added * self.params.replay_ratio / self.params.batch_size - self.updates - self.forgiven

    @property
    def size(self) -> int:
        """Transitions in replay."""
        return self.replay.size

    def train_due(self) -> bool:
        return self.size >= max(self.params.learning_starts, self.params.batch_size) and self._debt() > 0

    _paused = False

    def behind(self) -> bool:
        # before learning starts nothing can be trained, so pausing workers would deadlock
        if self.size < max(self.params.learning_starts, self.params.batch_size):
            return False
        # hysteresis: pause above max_update_debt, resume only once half of it is paid off, so the
        # retained flow message flips a few times a second at most, not on every batch
        debt = self._debt()
        if self._paused:
            self._paused = debt > self.params.max_update_debt / 2
        else:
            self._paused = debt > self.params.max_update_debt
        return self._paused

    # ---- replay

    def add(self, batch: SampleBatch) -> int:
        self.spec.validate(batch.arrays, batch.count)  # raises Rejected; nothing is dropped silently
        n = batch.count
        # a batch larger than the buffer keeps its newest rows; frames are shared per sending process
        source = f"{batch.worker}/{batch.incarnation}"
        dr = self.device_replay
        idx = self.replay.add(batch.arrays, n, source=source) if dr is None else dr.add(batch.arrays, n, source)
        if self.tree is not None:
            self.tree.set(idx, self._initial_priorities(batch, n, len(idx)))
        elif dr is not None and dr.priorities is not None:
            rows = torch.from_numpy(idx).to(self.device, non_blocking=True)
            if "priority" in batch.arrays:
                dr.set_priorities(rows, torch.from_numpy(self._initial_priorities(batch, n, len(idx))))
            else:
                dr.set_max_priority(rows)
        self.samples_added += n
        over = self._debt() - self._forgive_above(batch.worker, n)
        if over > 0:
            self.forgiven += over
        return n

    def _forgive_above(self, worker: str, n: int) -> float:
        """Updates owed beyond which a backlog is forgiven: ``forgive_debt_above``, but never less than
        what FORGIVE_BATCHES batches of every sender owe, plus what is left of the warm-up's debt (the
        samples before ``learning_starts``). At high replay ratios one batch owes hundreds of updates
        (256 transitions at ratio 64, batch 32: 512), and neither the batches still in flight when the
        workers are told to pause nor the warm-up are a backlog: forgiving them would lower the ratio."""
        p = self.params
        self._senders.add(worker)
        self._batch_debt = max(self._batch_debt, n * p.replay_ratio / p.batch_size)
        warmup = max(p.learning_starts, p.batch_size) * p.replay_ratio / p.batch_size - self.updates
        return max(p.forgive_debt_above, FORGIVE_BATCHES * len(self._senders) * self._batch_debt) + max(0.0, warmup)

    def _initial_priorities(self, batch: SampleBatch, n: int, m: int) -> np.ndarray:
        """Priorities of the ``m`` newest rows of a batch of ``n``: the actors' TD errors (Ape-X) when
        they send them, else the highest priority so far."""
        sent = batch.arrays.get("priority")
        if sent is None:
            return np.full(m, self.max_priority)
        prio = (np.asarray(sent[n - m :], np.float64) + self.params.per_eps) ** self.params.per_alpha
        self.max_priority = max(self.max_priority, float(prio.max(initial=0.0)))
        return prio

    def _gpu_path(self, seed: int) -> None:
        """Where the replay lives (logged), and the parts that keep a GPU's queue full: the next batch
        made ahead, values read back one update late, noise drawn on the device, autocast, compile."""
        p = self.params
        side, why = choose_side(p.replay_device, self.device, self.replay)
        log.info("dqn learner on %s: replay on the %s (%s)", self.device, side, why)
        #: the replay's data on the device, sampled there (None: sampled on the host)
        self.device_replay = DeviceReplay(self.replay, self.device, p.prioritized, seed) if side == "device" else None
        if self.device_replay is not None:
            self.tree = None  # the device holds the priorities
        # a host batch goes to a GPU in its own dtype (uint8 images: 4x fewer bytes than float) through
        # pinned buffers allocated once (pinning per step costs more than the copy); the network makes it float
        self._staging = Staging(self.device)
        self._readback = LaggedReadback(self.device)
        self._prefetched: tuple | None = None
        #: noisy heads' noise on a GPU: drawn there (the CPU keeps ``noise_rng``, as before)
        self._device_noise = (
            torch.Generator(device=self.device).manual_seed(seed) if self.device.type == "cuda" else None
        )
        self._compute = self._losses if p.compile == "off" else torch.compile(self._losses, mode=p.compile)

    def _autocast(self) -> contextlib.AbstractContextManager:
        if self.params.autocast == "bf16":
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def _make_batch(self) -> tuple[Any, torch.Tensor | None, dict[str, torch.Tensor]]:
        """The next batch: its ring slots, importance-sampling weights (prioritized) and tensors on the device."""
        B, dr = self.params.batch_size, self.device_replay
        if dr is not None:
            if self.params.prioritized:
                idx, weights = dr.sample_prioritized(B, self._beta())
            else:
                idx, weights = dr.sample_uniform(B), None
            return idx, weights, dr.gather(idx)
        idx, weights = self._sample()
        self._staging.next_set()
        with self.timed("sample"):  # the learner node's "sample" block: the rows out of the replay
            rows = self.replay.sample(idx)
        batch = {name: self._staging.to_device(name, arr) for name, arr in rows.items()}
        if weights is not None:
            weights = self._staging.to_device("weights", weights.astype(np.float32))
        return idx, weights, batch

    def _prefetch(self) -> None:
        """Make the next batch now, keeping the samplers' states from before (see :meth:`_cancel_prefetch`)."""
        dr = self.device_replay
        self._before_prefetch = (
            self.rng.bit_generator.state,
            dr.generator.get_state() if dr is not None else None,
        )
        self._prefetched = self._make_batch()

    def _cancel_prefetch(self) -> None:
        """Forget the batch made ahead and rewind the samplers to before it: a checkpoint then holds
        the state that draws that batch again, so a resumed learner goes on as this one does."""
        if self._prefetched is None:
            return
        self._prefetched = None
        host, device = self._before_prefetch
        self.rng.bit_generator.state = host
        if device is not None:
            self.device_replay.generator.set_state(device)

    def _take_batch(self) -> tuple[Any, torch.Tensor | None, dict[str, torch.Tensor]]:
        """The batch made ahead during the last update (if it still has the batch size), else a new one."""
        ready, self._prefetched = self._prefetched, None
        if ready is not None and len(ready[0]) == self.params.batch_size:
            return ready
        return self._make_batch()

    def _sample(self) -> tuple[np.ndarray, np.ndarray | None]:
        """Indices of one batch and, when prioritized, their importance-sampling weights."""
        B = self.params.batch_size
        if self.tree is None:
            return self.rng.integers(0, self.size, B), None
        total = self.tree.total()
        mass = (np.arange(B) + self.rng.random(B)) * (total / B)  # stratified: one draw per segment
        idx = np.minimum(self.tree.find(mass), self.size - 1)
        prio = self.tree.get(idx)
        p_min = self.tree.min(self.size)
        beta = self._beta()
        weights = (prio / p_min) ** (-beta)  # = (N P(i))^-beta / max_j (N P(j))^-beta
        return idx, weights

    def _beta(self) -> float:
        p = self.params
        return p.per_beta0 + (1.0 - p.per_beta0) * min(1.0, self.updates / p.per_beta_updates)

    # ---- training

    def train_step(self) -> dict[str, float]:
        """One update, top to bottom: sample, targets, loss, optimizer step, priorities, target sync.

        On a GPU the host waits for nothing it just queued: the metrics are the previous update's
        (:class:`.pipeline.LaggedReadback`), and the next batch is made (``prefetch``) while this
        update runs. Prioritized host replay reads this update's TD errors back for its sum tree."""
        p, dr = self.params, self.device_replay
        idx, weights, batch = self._take_batch()
        if self.demos is not None:  # demonstration rows appended (.demo_replay)
            weights, batch = self.demos.mix(weights, batch, self.device)
        self._reset_noise()
        if self.params.compile == "reduce-overhead":  # CUDA graphs: a new training step begins
            torch.compiler.cudagraph_mark_step_begin()
        loss, elementwise, target, q = self._compute(
            batch["obs"], batch["action"], batch["reward"], batch["next_obs"], batch["discount"], weights
        )
        if self.demos is not None:  # the margin loss; only the replay's rows go on
            loss, elementwise, target, q = self.demos.after_loss(self.online, batch, loss, elementwise, target, q)
        td_abs = (target.float() - q.float()).abs()
        grad_norm = self._optimize(loss)
        if dr is not None and dr.priorities is not None:
            err = elementwise.detach().double() if self._loss_priorities else td_abs.double()
            dr.set_priorities(idx, (err.clamp(min=0.0) + p.per_eps) ** p.per_alpha)

        self.updates += 1
        if self.updates % ADAM_STATS_EVERY == 1:  # the first update's too: a figure from the start
            self._adam_below_eps = adam_below_eps(self.optimizer)
        if self.updates % p.target_update_every == 0:
            self._update_target()
        if p.reset_every and self.updates % p.reset_every == 0:
            self._reset_networks()
        edge = self._head_stats.get("target_edge_mass")
        stats = torch.stack(
            [loss.detach().float(), q.float().mean(), td_abs.mean(), target.float().mean(), grad_norm]
            + ([edge.float()] if edge is not None else [])
        )
        values = self._readback.push(stats)  # waits for the previous update only (on a GPU)
        if p.prefetch:  # the host samples and gathers while the device runs this update
            self._prefetch()
        if self.tree is not None:
            self._reprioritize(idx, elementwise, td_abs.cpu().numpy().astype(np.float64))

        metrics = dict(zip(("loss", "q_mean", "td_abs_mean", "target_mean", "grad_norm", "target_edge_mass"), values))
        metrics.update(
            buffer_size=float(self.size),
            replay_ratio=self.updates * p.batch_size / max(1, self.samples_added),
            updates_forgiven=self.forgiven,
        )
        if self._support_watch is not None:
            self._support_watch.observe(metrics.get("target_edge_mass"))
        if self._adam_below_eps is not None:
            metrics["adam_below_eps"] = self._adam_below_eps
        if weights is not None:
            metrics["per_beta"] = self._beta()
        if p.lr_anneal_env_steps:
            metrics["lr"] = self.current_lr()
        return metrics

    def _reset_networks(self) -> None:
        """``reset_every``: the online net shrunk towards a fresh initialisation (:mod:`.resets`), its
        Adam moments dropped; the fresh net is drawn from (seed, updates), so a resumed run resets alike."""
        p = self.params
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self._seed * 1_000_003 + self.updates)
            fresh = _net_from_info(net_info(self.obs_dim, self.n_actions, p), sigma0=p.noisy_sigma0)
        head = {name for name, _ in self.online.spec.layers()}
        changed = shrink_and_perturb(self.online, fresh, p.reset_alpha, p.reset_head_alpha, head)
        forget_moments(self.optimizer, self.online)
        log.info(
            "update %d: network reset (%d tensors; alpha %g, head %g)",
            self.updates,
            changed,
            p.reset_alpha,
            p.reset_head_alpha,
        )

    def _reset_noise(self) -> None:
        """Rainbow: new noise for both nets at every update (on a GPU drawn there, else from ``noise_rng``)."""
        if not self.online.spec.noisy:
            return
        for net in (self.online, self.target):
            if self._device_noise is not None:
                draw_noise(net, self._device_noise)
            else:
                net.reset_noise(generator=self.noise_rng)

    def _losses(
        self,
        obs: torch.Tensor,
        action: torch.Tensor,
        reward: torch.Tensor,
        next_obs: torch.Tensor,
        discount: torch.Tensor,
        weights: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """The update's forwards and loss (what ``compile`` compiles), under ``autocast``."""
        with self._autocast():
            next_out = self._next_targets(next_obs)
            return self._loss(obs, action, reward, discount, next_out, weights)

    def _next_targets(self, next_obs: torch.Tensor) -> torch.Tensor:
        """The target net's output (B, K) at the next action, which the online net picks when ``double``."""
        net = self.online
        with torch.no_grad():
            next_target = self.target.outputs(next_obs)  # B, A, K
            if self.params.double:  # the online net's expected Q picks the next action
                next_action = self.online(next_obs).argmax(dim=1)
            else:
                next_action = net.q_values(next_target).argmax(dim=1)
            return next_target[torch.arange(len(next_action), device=self.device), next_action]  # B, K

    def _loss(
        self,
        obs: torch.Tensor,
        action: torch.Tensor,
        reward: torch.Tensor,
        discount: torch.Tensor,
        next_out: torch.Tensor,
        weights: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(loss, per-sample loss, target, Q of the taken action): the head's TD loss, weighted by
        the importance-sampling weights (on the device) when prioritized."""
        net = self.online
        out_all = net.outputs(obs)
        out = out_all[torch.arange(len(action), device=self.device), action]  # B, K
        elementwise, target = td_loss(
            net.spec, out, next_out, reward, discount, net.support, self.params.qr_kappa, self._head_stats
        )
        q = net.q_values(out_all.detach()).gather(1, action.unsqueeze(1)).squeeze(1)
        if weights is not None:
            loss = (weights * elementwise).mean()
        else:
            loss = elementwise.mean()
        return loss, elementwise, target, q

    def current_lr(self) -> float:
        """The learning rate of the next step: ``lr`` annealed over ``lr_anneal_env_steps`` (when set)."""
        p = self.params
        if not p.lr_anneal_env_steps:
            return p.lr
        done = min(1.0, self.samples_added / p.lr_anneal_env_steps)
        return p.lr * (1.0 - done * (1.0 - p.lr_final_frac))

    def _optimize(self, loss: torch.Tensor) -> torch.Tensor:
        """Backward, clip (``grad_clip`` > 0) and step; the gradient norm before clipping (a device scalar)."""
        if self.params.lr_anneal_env_steps:
            lr = self.current_lr()
            for group in self.optimizer.param_groups:
                group["lr"] = lr
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if self.params.grad_clip > 0:
            grad_norm = nn.utils.clip_grad_norm_(self.online.parameters(), self.params.grad_clip)
        else:
            grad_norm = torch.linalg.vector_norm(torch.stack([g.grad.norm() for g in self.online.parameters()]))
        self.optimizer.step()
        return grad_norm.float()

    def _reprioritize(self, idx: np.ndarray, elementwise: torch.Tensor, td_abs: np.ndarray) -> None:
        """The replayed samples' new priorities, on the actors' scale (see DQNParams.initial_priority)."""
        p = self.params
        # |E[target] - E[Z(s, a)]| (plain DQN's |TD error|), on the actors' scale; the sample's own
        # loss (Rainbow's cross-entropy, QR's quantile Huber loss) only when nothing else sets
        # priorities (initial_priority "max"): see DQNParams.initial_priority
        err = elementwise.detach().cpu().numpy().astype(np.float64) if self._loss_priorities else td_abs
        prio = (np.maximum(err, 0.0) + p.per_eps) ** p.per_alpha
        self.tree.set(idx, prio)
        self.max_priority = max(self.max_priority, float(prio.max()))

    def _update_target(self) -> None:
        tau = self.params.tau
        with torch.no_grad():
            if tau >= 1.0:
                self.target.load_state_dict(self.online.state_dict())
            else:
                for t, o in zip(self.target.parameters(), self.online.parameters()):
                    t.lerp_(o, tau)

    # ---- weights and checkpoints

    def export_weights(self) -> tuple[Tensors, dict[str, Any]]:
        return export_module(self.online), net_info(self.obs_dim, self.n_actions, self.params)

    def state_dict(self, include_replay: bool) -> tuple[Tensors, dict[str, Any]]:
        self._cancel_prefetch()
        tensors = {**export_module(self.online, "online."), **export_module(self.target, "target.")}

        opt_meta = optimizer_state(self.optimizer, tensors)  # Adam moments and steps by flat name

        tensors["rng.torch"] = torch.get_rng_state().numpy().copy()
        if self.params.noisy:
            tensors["rng.noise"] = self.noise_rng.get_state().numpy().copy()
        dr = self.device_replay
        if dr is not None:  # the device's running maximum and its sampler
            self.max_priority = max(self.max_priority, float(dr.max_priority))
            tensors["rng.replay"] = dr.generator.get_state().numpy().copy()
        meta: dict[str, Any] = {
            "algorithm": "dqn",
            "net": net_info(self.obs_dim, self.n_actions, self.params),
            "updates": self.updates,
            "samples_added": self.samples_added,
            "updates_forgiven": self.forgiven,
            # what the write-off cap counts (_forgive_above): a resumed learner caps the batches in
            # flight at its restart as the killed one would, not as a learner that met no sender yet
            "forgive_senders": sorted(self._senders),
            "forgive_batch_debt": self._batch_debt,
            "max_priority": self.max_priority,
            "adam_below_eps": self._adam_below_eps,  # the last reading: a resumed run reports it alike
            "optimizer": opt_meta,
            "rng_numpy": rng_to_json(self.rng.bit_generator.state),
            "replay": None,
        }
        if include_replay:
            replay_tensors, meta["replay"] = self.replay.state()
            tensors.update(replay_tensors)
            if self.tree is not None:
                tensors["replay.priorities"] = self.tree.get(np.arange(self.size)).copy()
            elif dr is not None and dr.priorities is not None:
                tensors["replay.priorities"] = dr.priorities_host()
        return tensors, meta

    def load_state_dict(self, tensors: Mapping[str, np.ndarray], meta: Mapping[str, Any]) -> None:
        if meta.get("algorithm") != "dqn":
            raise ValueError(f"not a dqn checkpoint (algorithm={meta.get('algorithm')!r})")
        net = meta["net"]
        mine = net_info(self.obs_dim, self.n_actions, self.params)
        if dict(net) != mine:
            raise ValueError(f"checkpoint network {dict(net)} differs from the configured one {mine}")
        load_module(self.online, tensors, "online.")
        load_module(self.target, tensors, "target.")

        load_optimizer_state(self.optimizer, tensors, meta["optimizer"], self.device)
        self._own_adam_kind()

        self.updates = int(meta["updates"])
        self.samples_added = int(meta["samples_added"])
        self.forgiven = float(meta.get("updates_forgiven", 0.0))
        self._senders = {str(s) for s in meta.get("forgive_senders", ())}
        self._batch_debt = float(meta.get("forgive_batch_debt", 0.0))
        self.max_priority = float(meta["max_priority"])
        below = meta.get("adam_below_eps")  # absent in checkpoints before it: the next reading fills it
        self._adam_below_eps = None if below is None else float(below)
        self.rng.bit_generator.state = rng_from_json(meta["rng_numpy"])
        torch.set_rng_state(torch.from_numpy(np.array(tensors["rng.torch"], dtype=np.uint8)))
        if "rng.noise" in tensors:
            self.noise_rng.set_state(torch.from_numpy(np.array(tensors["rng.noise"], dtype=np.uint8)))

        replay = meta.get("replay")
        if replay:
            n = int(replay["size"])
            self.replay.load_state(tensors, replay)
            if self.tree is not None:
                self.tree = SumTree(self.capacity)
                if "replay.priorities" in tensors:
                    prio = np.asarray(tensors["replay.priorities"], dtype=np.float64)
                else:  # saved without prioritization: start uniform
                    prio = np.full(n, self.max_priority)
                self.tree.set(np.arange(n), prio)
            self._load_device_replay(tensors, n)
        self._prefetched = None  # drawn from the state before the load
        self._readback.drain()
        dr = self.device_replay
        saved = tensors.get("rng.replay")
        if dr is not None and saved is not None and len(saved) == len(dr.generator.get_state()):
            dr.generator.set_state(torch.from_numpy(np.array(saved, dtype=np.uint8)))
        elif dr is not None:  # saved on another device kind, or by a host replay: seeded from the checkpoint
            dr.generator.manual_seed(int(self.rng.integers(2**62)))

    def _own_adam_kind(self) -> None:
        """After a checkpoint (maybe saved on another device): this learner's fused choice, and Adam's
        step counts where that kind needs them (fused: on the parameters' device, float32; else the CPU)."""
        for group in self.optimizer.param_groups:
            group["fused"] = self._fused
            if self._fused:
                group["foreach"] = None
            for param in group["params"]:
                st = self.optimizer.state.get(param)
                if st and torch.is_tensor(st.get("step")):
                    st["step"] = st["step"].to(param.device, torch.float32) if self._fused else st["step"].cpu()

    def _load_device_replay(self, tensors: Mapping[str, np.ndarray], n: int) -> None:
        """The loaded host replay copied to the device, with its priorities."""
        dr = self.device_replay
        if dr is None:
            return
        dr.mirror_all()
        dr.max_priority = torch.tensor(self.max_priority, dtype=torch.float64, device=self.device)
        if dr.priorities is not None:
            saved = tensors.get("replay.priorities")
            prio = np.asarray(saved, np.float64) if saved is not None else np.full(n, self.max_priority)
            dr.priorities.zero_()
            dr.set_priorities(torch.arange(n, device=self.device), torch.from_numpy(prio))
