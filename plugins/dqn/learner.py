"""DQN's learner side, in torch: the Q-network, a torch forward, and the learner.

Only the learner process (and a worker or inference server that asks for the
torch forward) imports this module; :mod:`mqttrl_plugins.dqn` imports it
lazily, so a worker without torch never does.

1. ``QNetwork`` and ``TorchQForward``: the network of :func:`.common.net_info` (an MLP
   or CNN torso from :mod:`mqttrl.nets`, then the heads) and the forward over it that
   actors and inference servers can use;
2. ``DQNLearner`` (an :class:`~mqttrl.plugin.algorithm.AsyncLearner`): the shell that wires
   the update (:mod:`.update`: double-DQN targets, Huber loss or C51's or QR-DQN's, :mod:`.losses`;
   noisy heads resampled at each update, target network, Adam), the pace (:mod:`.pacing`:
   ``replay_ratio``), the replay (uniform or proportional prioritized: :mod:`.replay`,
   :mod:`.priorities`) and the options; checkpoints as numpy arrays plus JSON metadata (no
   pickle, no torch.load).
"""

from __future__ import annotations

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

from .adam_stats import AdamWatch
from .common import DQNParams, check_spaces, net_info, sample_spec
from .device_replay import DeviceReplay, choose_side
from .frames import frame_layout
from .heads import NoisyLinear, combine, expected_q, linear_layer, reset_noise_of
from .losses import LossOutput, make_loss
from .numpy_heads import HeadSpec
from .numpy_net import follow_weights, noisy_torso, torso_of
from .pacing import Pacing
from .pipeline import LaggedReadback, Staging
from .priorities import Priorities
from .replay import SumTree, make_replay
from .resets import NetworkResets
from .support_watch import SupportWatch
from .takeovers import Takeovers
from .update import Update, scheduled_lr

__all__ = ["DQNLearner", "QNetwork", "SumTree", "TorchQForward"]

log = logging.getLogger("mqttrl.dqn")

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

    #: C51's atoms (a buffer, registered in ``__init__``; declared for type checkers)
    support: torch.Tensor

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
        assert obs_space.shape is not None  # a Box: check_spaces took it
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
# 2. The learner: a shell over the update, the replay and the options
# --------------------------------------------------------------------------


class DQNLearner:
    """Ape-X's learner: replay fed by any worker at any time, trained at ``replay_ratio``.

    It wires parts that each do one thing: the update (:mod:`.update`, its loss picked from the
    config by :mod:`.losses`), the pace (:mod:`.pacing`), the replay on the host or the device and
    its priorities (:mod:`.replay`, :mod:`.device_replay`, :mod:`.priorities`), the batch made ahead
    (:mod:`.pipeline`), and the options its settings switch on, each called at its hook:
    demonstrations (:mod:`.demo_replay`), resets (:mod:`.resets`), Adam's eps share
    (:mod:`.adam_stats`), C51's support watch (:mod:`.support_watch`)."""

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
        self.online, self.target = (self._new_net().to(self.device) for _ in range(2))
        self.update = Update(self.online, self.target, make_loss(p), p, self.device, seed)
        #: the update's forwards and loss (what benchmarks/bench_gpu_learner.py times alone)
        self._compute = self.update.compute
        self.pacing = Pacing(p)
        self._replay_side(obs_space, seed)
        self._support_watch = SupportWatch.over(self.online.support) if p.distributional == "c51" else None
        self.adam_watch = AdamWatch(self.update)
        self.resets = NetworkResets(p, self.update, self._new_net, seed)
        #: after each update, in this order: Adam's eps share read, the target net's sync, a reset
        self._stepped = [self.adam_watch.stepped, self.update.stepped, self.resets.stepped]
        #: the margin loss on the rows a person took over (.takeovers)
        self.takeovers = Takeovers(p, seed)
        #: what reads or adds to each update's metrics
        self._watches = [w for w in (self._support_watch, self.adam_watch, self.takeovers) if w is not None]

    def _new_net(self) -> QNetwork:
        return _net_from_info(self._net_info(), sigma0=self.params.noisy_sigma0)

    def _net_info(self) -> dict[str, Any]:
        return net_info(self.obs_dim, self.n_actions, self.params)

    def _replay_side(self, obs_space: gym.Space, seed: int) -> None:
        """The replay (its data on the host or the device: logged) and its priorities, and the parts
        that keep a GPU's queue full: the next batch made ahead and values read back one update late."""
        p = self.params
        assert obs_space.shape is not None  # a Box: check_spaces took it
        obs_shape = tuple(int(s) for s in obs_space.shape)
        self.replay = make_replay(p.buffer_size, frame_layout(p.frames, obs_space), obs_shape, obs_dtype(obs_space))
        side, why = choose_side(p.replay_device, self.device, self.replay)
        log.info("dqn learner on %s: replay on the %s (%s)", self.device, side, why)
        #: the replay's data on the device, sampled there (None: sampled on the host)
        self.device_replay = DeviceReplay(self.replay, self.device, p.prioritized, seed) if side == "device" else None
        self.priorities = Priorities(p, p.buffer_size, self.device_replay)
        # a host batch goes to a GPU in its own dtype (uint8 images: 4x fewer bytes than float) through
        # pinned buffers allocated once (pinning per step costs more than the copy); the network makes it float
        self._staging = Staging(self.device)
        self._readback = LaggedReadback(self.device)
        self._prefetched: tuple | None = None

    # ---- what the parts hold, as the learner node and tools read it

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        return self.update.optimizer

    @optimizer.setter
    def optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        self.update.optimizer = optimizer

    @property
    def tree(self) -> SumTree | None:
        """Prioritized host replay's sum tree (None: uniform, or the priorities are on the device)."""
        return self.priorities.tree

    @property
    def updates(self) -> int:
        """Gradient updates done."""
        return self.pacing.updates

    @updates.setter
    def updates(self, n: int) -> None:  # a checkpoint's, or a test's counted update
        self.pacing.updates = n

    @property
    def samples_added(self) -> int:
        """Transitions ever added."""
        return self.pacing.samples_added

    @property
    def forgiven(self) -> float:
        """Updates owed beyond forgive_debt_above, written off (a backlog after an outage)."""
        return self.pacing.forgiven

    @property
    def size(self) -> int:
        """Transitions in replay."""
        return self.replay.size

    # ---- pacing (:mod:`.pacing`)

    def _debt(self) -> float:
        return self.pacing.debt()

    def train_due(self) -> bool:
        return self.pacing.due(self.size)

    def behind(self) -> bool:
        return self.pacing.behind(self.size)

    # ---- replay

    def add(self, batch: SampleBatch) -> int:
        self.spec.validate(batch.arrays, batch.count)  # raises Rejected; nothing is dropped silently
        n = batch.count
        # a batch larger than the buffer keeps its newest rows; frames are shared per sending process
        source = f"{batch.worker}/{batch.incarnation}"
        dr = self.device_replay
        idx = self.replay.add(batch.arrays, n, source=source) if dr is None else dr.add(batch.arrays, n, source)
        self.priorities.added(batch, n, idx)
        self.pacing.added(batch.worker, n)
        self.demos = self.takeovers.added(batch.arrays, np.asarray(idx), self.replay, self.demos)
        return n

    def _beta(self) -> float:
        return self.priorities.beta(self.updates)

    def _make_batch(self) -> tuple[Any, torch.Tensor | None, dict[str, torch.Tensor]]:
        """The next batch: its ring slots, importance-sampling weights (prioritized) and tensors on the device."""
        B, dr = self.params.batch_size, self.device_replay
        if dr is not None:
            if self.params.prioritized:
                idx, weights = dr.sample_prioritized(B, self._beta())
            else:
                idx, weights = dr.sample_uniform(B), None
            return idx, weights, dr.gather(idx)
        slots, host_weights = self._sample()
        self._staging.next_set()
        with self.timed("sample"):  # the learner node's "sample" block: the rows out of the replay
            rows = self.replay.sample(slots)
        batch = {name: self._staging.to_device(name, arr) for name, arr in rows.items()}
        if host_weights is None:
            return slots, None, batch
        return slots, self._staging.to_device("weights", host_weights.astype(np.float32)), batch

    def _sample(self) -> tuple[np.ndarray, np.ndarray | None]:
        """Indices of one batch from the host replay and, when prioritized, their importance-sampling weights."""
        B = self.params.batch_size
        if self.tree is None:
            return self.rng.integers(0, self.size, B), None
        return self.priorities.sample(self.rng, self.size, B, self._beta())

    def _prefetch(self) -> None:
        """Make the next batch now, keeping the samplers' states from before (see :meth:`_cancel_prefetch`)."""
        dr = self.device_replay
        self._before_prefetch = (self.rng.bit_generator.state, dr.generator.get_state() if dr is not None else None)
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
            assert self.device_replay is not None  # a device sampler's state comes only from one
            self.device_replay.generator.set_state(device)

    def _take_batch(self) -> tuple[Any, torch.Tensor | None, dict[str, torch.Tensor]]:
        """The batch made ahead during the last update (if it still has the batch size), else a new one."""
        ready, self._prefetched = self._prefetched, None
        if ready is not None and len(ready[0]) == self.params.batch_size:
            return ready
        return self._make_batch()

    # ---- training

    def train_step(self) -> dict[str, float]:
        """One update, top to bottom: sample, loss, optimizer step, priorities, the options' hooks.

        On a GPU the host waits for nothing it just queued: the metrics are the previous update's
        (:class:`.pipeline.LaggedReadback`), and the next batch is made (``prefetch``) while this
        update runs. Prioritized host replay reads this update's TD errors back for its sum tree."""
        idx, weights, batch = self._take_batch()
        person = batch.pop("intervention", None)  # the replay's rows a person took over (.takeovers)
        if self.demos is not None:  # demonstration rows appended (.demo_replay)
            weights, batch = self.demos.mix(weights, batch, self.device)
        self.update.begin()
        out = self._compute(
            batch["obs"], batch["action"], batch["reward"], batch["next_obs"], batch["discount"], weights
        )
        if self.demos is not None:  # the margin loss; only the replay's rows go on
            out = LossOutput(*self.demos.after_loss(self.online, batch, *out[:4]), out.edge_mass)
        out = self.takeovers.with_loss(out, self.online, batch, person)
        td_abs = (out.target.float() - out.q.float()).abs()
        grad_norm = self._optimize(out.loss)
        self.priorities.replayed_on_device(idx, out.elementwise, td_abs)
        self.pacing.updates += 1
        for stepped in self._stepped:
            stepped(self.updates)
        stats = [out.loss.detach().float(), out.q.float().mean(), td_abs.mean(), out.target.float().mean(), grad_norm]
        if out.edge_mass is not None:
            stats.append(out.edge_mass.float())
        values = self._readback.push(torch.stack(stats))  # waits for the previous update only (on a GPU)
        if self.params.prefetch:  # the host samples and gathers while the device runs this update
            self._prefetch()
        self.priorities.replayed_on_host(idx, out.elementwise, td_abs)
        return self._metrics(values)

    def _optimize(self, loss: torch.Tensor) -> torch.Tensor:
        """The update's step at the scheduled learning rate; the gradient norm before clipping."""
        return self.update.optimize(loss, scheduled_lr(self.params, self.samples_added))

    def _metrics(self, values: list[float]) -> dict[str, float]:
        metrics = dict(zip(("loss", "q_mean", "td_abs_mean", "target_mean", "grad_norm", "target_edge_mass"), values))
        metrics.update(buffer_size=float(self.size), replay_ratio=self.pacing.ratio(), updates_forgiven=self.forgiven)
        for watch in self._watches:
            watch.report(metrics)
        if self.params.prioritized:
            metrics["per_beta"] = self._beta()
        lr = scheduled_lr(self.params, self.samples_added)
        if lr is not None:
            metrics["lr"] = lr
        return metrics

    def _reset_networks(self) -> None:
        """A reset now (:mod:`.resets`), as ``reset_every`` makes them."""
        self.resets.reset(self.updates)

    # ---- weights and checkpoints

    def export_weights(self) -> tuple[Tensors, dict[str, Any]]:
        return export_module(self.online), self._net_info()

    def state_dict(self, include_replay: bool) -> tuple[Tensors, dict[str, Any]]:
        self._cancel_prefetch()
        tensors = {**export_module(self.online, "online."), **export_module(self.target, "target.")}
        opt_meta = optimizer_state(self.optimizer, tensors)  # Adam moments and steps by flat name
        tensors["rng.torch"] = torch.get_rng_state().numpy().copy()
        if self.params.noisy:
            tensors["rng.noise"] = self.update.noise_rng.get_state().numpy().copy()
        if self.device_replay is not None:  # the device replay's sampler
            tensors["rng.replay"] = self.device_replay.generator.get_state().numpy().copy()
        meta: dict[str, Any] = {
            "algorithm": "dqn",
            "net": self._net_info(),
            **self.pacing.state(),
            "max_priority": self.priorities.highest(),
            "adam_below_eps": self.adam_watch.value,  # the last reading: a resumed run reports it alike
            "optimizer": opt_meta,
            "rng_numpy": rng_to_json(self.rng.bit_generator.state),
            "replay": None,
        }
        if include_replay:
            replay_tensors, meta["replay"] = self.replay.state()
            tensors.update(replay_tensors)
            tensors.update(self.priorities.saved(self.size))
        return tensors, meta

    def load_state_dict(self, tensors: Mapping[str, np.ndarray], meta: Mapping[str, Any]) -> None:
        if meta.get("algorithm") != "dqn":
            raise ValueError(f"not a dqn checkpoint (algorithm={meta.get('algorithm')!r})")
        net, mine = dict(meta["net"]), self._net_info()
        if net != mine:
            raise ValueError(f"checkpoint network {net} differs from the configured one {mine}")
        load_module(self.online, tensors, "online.")
        load_module(self.target, tensors, "target.")
        load_optimizer_state(self.optimizer, tensors, meta["optimizer"], self.device)
        self.update.own_adam_kind()
        self.pacing.load(meta)
        self.priorities.max_priority = float(meta["max_priority"])
        below = meta.get("adam_below_eps")  # absent in checkpoints before it: the next reading fills it
        self.adam_watch.value = None if below is None else float(below)
        self.rng.bit_generator.state = rng_from_json(meta["rng_numpy"])
        torch.set_rng_state(torch.from_numpy(np.array(tensors["rng.torch"], dtype=np.uint8)))
        if "rng.noise" in tensors:
            self.update.noise_rng.set_state(torch.from_numpy(np.array(tensors["rng.noise"], dtype=np.uint8)))
        replay = meta.get("replay")
        if replay:
            self.replay.load_state(tensors, replay)
            if self.device_replay is not None:
                self.device_replay.mirror_all()
            self.priorities.load(tensors, int(replay["size"]))
        self._prefetched = None  # drawn from the state before the load
        self._readback.drain()
        if self.device_replay is not None:
            self.device_replay.load_sampler(tensors.get("rng.replay"), self.rng)
