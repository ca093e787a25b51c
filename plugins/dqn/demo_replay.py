"""DQN's demonstrations (DQfD, Hester et al. 2018): a replay part that is never evicted, mixed into
every batch at a set ratio, and the large-margin supervised loss.

``DemoReplay`` turns a dataset's episodes (:mod:`mqttrl.demos`) into the same n-step transitions
the actors send (``obs, action, reward, next_obs, discount``: reward the discounted sum of up to
``n_step`` rewards, discount ``gamma ** k``, 0 where the episode terminated inside the window, so a
truncated episode still bootstraps) and holds them in arrays of their own: the main replay's ring
overwrites its oldest transitions, this part never changes after it is built.

Each update appends ``extra_rows(batch_size)`` of its rows after the main replay's ``batch_size``
rows, so that they are ``demos.ratio`` of the batch; pretraining (:func:`pretrain`) trains on
batches of demonstrations alone. Demonstration rows have importance weight 1 and are not re-prioritized.

With ``demos.priority_bonus`` (ε_d) > 0 and prioritized replay they are drawn by priority instead,
as DQfD draws from one prioritized buffer: each demonstration transition has the priority
``(|TD error| + per_eps + ε_d) ** per_alpha`` (the replay's rule plus the bonus; at first as if
its TD error were 1), updated after every update that trains on it; the rows appended are the
demonstrations' share of the priority mass of demonstrations and replay together (at most half
the batch), drawn proportionally to priority within the demonstrations, with the importance
weights the replay's rows get (``(p / p_min) ** -beta``, at most 1). The bonus keeps the
demonstrations drawn as the agent's own TD errors shrink. Their priorities are not checkpointed:
a resumed learner starts them afresh.
With ``demos.margin_loss`` > 0, the supervised loss ``max_a [Q(s, a) + l(a_E, a)] - Q(s, a_E)``
(l = ``demos.margin`` where a differs from the demonstrated a_E, else 0) over the demonstration
rows is added to the TD loss, weighted by it: the demonstrator's action is pushed above the others
by a margin, so the greedy policy imitates it where the TD targets alone say little.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import attrs
import numpy as np

from mqttrl.plugin import Episode


def nstep_transitions(episodes: Iterable[Episode], gamma: float, n_step: int) -> dict[str, np.ndarray]:
    """All n-step transitions of ``episodes``, one per step (as :class:`.actor.DQNActor` makes them)."""
    parts: dict[str, list[np.ndarray]] = {k: [] for k in ("obs", "action", "reward", "next_obs", "discount")}
    for ep in episodes:
        T = ep.steps
        r = ep.rewards.astype(np.float64)
        t = np.arange(T)
        k = np.minimum(n_step, T - t)  # rewards summed from step t
        reward = np.zeros(T)
        for j in range(n_step):
            inside = j < k
            reward[inside] += gamma**j * r[t[inside] + j]
        discount = gamma**k
        if ep.terminated:
            discount[t + k == T] = 0.0  # the terminal step is inside the window: no bootstrap
        parts["obs"].append(ep.obs[:T])
        parts["next_obs"].append(ep.obs[t + k])
        parts["action"].append(ep.actions.astype(np.int64).reshape(T))
        parts["reward"].append(reward.astype(np.float32))
        parts["discount"].append(discount.astype(np.float32))
    return {name: np.concatenate(arrs) for name, arrs in parts.items()}


@attrs.define
class DemoReplay:
    """A fixed set of demonstration transitions and how an update uses them."""

    arrays: dict[str, np.ndarray]
    #: share of each batch drawn from here once the main replay can be learned from
    ratio: float
    #: weight of the large-margin loss (0: off) and the margin l
    margin_loss: float = 0.0
    margin: float = 0.8
    rng: np.random.Generator = attrs.field(factory=np.random.default_rng)
    #: DQfD's ε_d (``demos.priority_bonus``): > 0 draws the rows by priority (needs ``replay_stats``)
    priority_bonus: float = 0.0
    per_alpha: float = 0.6
    per_eps: float = 1e-6
    #: the replay's (priority mass, smallest priority, beta) now; set by :func:`learn_from_demos`
    replay_stats: Any = None
    #: demonstration rows appended to the batch being trained (set by :meth:`mix`)
    _rows: int = attrs.field(default=0, init=False)
    #: their indices, and the priorities (``** per_alpha``) of all (priority mode)
    _idx: np.ndarray | None = attrs.field(default=None, init=False)
    priorities: np.ndarray | None = attrs.field(default=None, init=False)

    def __attrs_post_init__(self) -> None:
        if self.by_priority:
            self.priorities = np.full(self.size, (1.0 + self.per_eps + self.priority_bonus) ** self.per_alpha)

    @classmethod
    def of(
        cls, episodes: Iterable[Episode], gamma: float, n_step: int, settings, seed: int = 0, params=None
    ) -> DemoReplay:
        """``params`` (the DQN's): its ``per_alpha``/``per_eps`` for the priority mode."""
        return cls(
            nstep_transitions(episodes, gamma, n_step),
            ratio=float(settings.ratio),
            margin_loss=float(settings.margin_loss),
            margin=float(settings.margin),
            rng=np.random.default_rng(seed),
            priority_bonus=float(getattr(settings, "priority_bonus", 0.0)),
            per_alpha=float(params.per_alpha) if params is not None else 0.6,
            per_eps=float(params.per_eps) if params is not None else 1e-6,
        )

    #: rows at the start that came with the run (a dataset): never dropped; takeovers go after them
    fixed: int = attrs.field(default=-1)

    @property
    def by_priority(self) -> bool:
        return self.priority_bonus > 0

    def append(self, rows: dict[str, np.ndarray], keep: int) -> None:
        """Transitions a person took during the run (takeovers) joined to this part, at most ``keep``
        of them (beyond, the oldest takeovers go; the run's own demonstrations never)."""
        fixed = self.size if self.fixed < 0 else self.fixed
        self.fixed = fixed
        self.arrays = {
            k: np.concatenate([arr, rows[k].astype(arr.dtype, copy=False)]) for k, arr in self.arrays.items()
        }
        over = self.size - fixed - keep
        if over > 0:
            self.arrays = {k: np.concatenate([arr[:fixed], arr[fixed + over :]]) for k, arr in self.arrays.items()}
        if self.priorities is not None:  # new rows as a fresh demonstration's priority
            top = float(self.priorities.max()) if len(self.priorities) else 1.0
            grown = np.concatenate([self.priorities, np.full(len(rows["action"]), top)])
            self.priorities = np.concatenate([grown[:fixed], grown[fixed + max(over, 0) :]])

    @property
    def size(self) -> int:
        return len(self.arrays["action"])

    def sample(self, n: int) -> dict[str, np.ndarray]:
        idx = self.rng.integers(0, self.size, n)
        return {name: arr[idx] for name, arr in self.arrays.items()}

    def margin_term(self, q_all, action, n: int):
        """DQfD's supervised loss over the last ``n`` rows (torch tensors: Q-values (B, A), actions (B,)), weighted."""
        return self.margin_loss * large_margin(q_all[-n:], action[-n:], self.margin).mean()

    # ---- the learner's hooks (plugins/dqn/learner.py calls these when it has demonstrations)

    def extra_rows(self, batch_size: int) -> int:
        """Demonstration rows appended to a batch of ``batch_size`` replay rows: ``ratio`` of the whole."""
        if self.ratio <= 0:
            return 0
        return max(1, round(batch_size * self.ratio / (1.0 - self.ratio))) if self.ratio < 1 else batch_size

    def mix(self, weights, batch: dict, device) -> tuple[Any, dict]:
        """A sampled batch (tensors on ``device``) with demonstration rows appended; their importance
        weights are 1 (numpy or torch weights, as the learner keeps them). Remembers the row count
        for :meth:`after_loss`."""
        import torch

        B = len(next(iter(batch.values())))
        if self.by_priority and self.replay_stats is not None:
            idx, demo_w = self._draw_by_priority(B)
        else:
            n = self.extra_rows(B)
            idx, demo_w = self.rng.integers(0, self.size, n), np.ones(n)
        self._rows = n = len(idx)
        self._idx = idx
        if n == 0:
            return weights, batch
        demo = {name: arr[idx] for name, arr in self.arrays.items()}
        batch = {k: torch.cat([v, torch.from_numpy(demo[k]).to(device)]) for k, v in batch.items()}
        if isinstance(weights, np.ndarray):
            weights = np.concatenate([weights, demo_w.astype(weights.dtype)])
        elif weights is not None:
            weights = torch.cat([weights, torch.from_numpy(demo_w).to(weights.device, weights.dtype)])
        return weights, batch

    def share(self, replay_mass: float) -> float:
        """The demonstrations' share of the priority mass of demonstrations and replay together."""
        assert self.priorities is not None  # the priority mode's: set in __attrs_post_init__
        mass = float(self.priorities.sum())
        return mass / (mass + replay_mass) if replay_mass > 0 else 1.0

    def _draw_by_priority(self, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
        """(indices, importance weights) of the rows appended to ``batch_size`` replay rows in the
        priority mode: their count the demonstrations' share of the mass (stochastically rounded, at
        most ``batch_size``), drawn by priority, stratified as the replay draws."""
        replay_mass, p_min, beta = self.replay_stats()
        f = self.share(replay_mass)
        x = batch_size * f / (1.0 - f) if f < 0.5 else float(batch_size)
        n = min(batch_size, int(x) + int(self.rng.random() < x - int(x)))
        if n == 0:
            return np.zeros(0, np.int64), np.zeros(0)
        assert self.priorities is not None  # the priority mode's: set in __attrs_post_init__
        cdf = np.cumsum(self.priorities)
        mass = (np.arange(n) + self.rng.random(n)) * (cdf[-1] / n)
        idx = np.minimum(np.searchsorted(cdf, mass, side="right"), self.size - 1)
        weights = np.minimum(1.0, (self.priorities[idx] / p_min) ** (-beta)) if p_min > 0 else np.ones(n)
        return idx, weights

    def after_loss(self, net, batch: dict, loss, elementwise, target, q) -> tuple[Any, Any, Any, Any]:
        """The margin loss added (when on); per-row values cut to the replay's rows (only those are
        re-prioritized and reported)."""
        n = self._rows
        if n == 0:
            return loss, elementwise, target, q
        if self.by_priority:  # |TD error| + eps + the bonus, as the replay's rows are re-prioritized
            assert self.priorities is not None  # set in __attrs_post_init__
            td = (target[-n:].detach().float() - q[-n:].detach().float()).abs().cpu().numpy().astype(np.float64)
            self.priorities[self._idx] = (td + self.per_eps + self.priority_bonus) ** self.per_alpha
        if self.margin_loss > 0:
            loss = loss + self.margin_term(net(batch["obs"][-n:]), batch["action"][-n:], n)
        return loss, elementwise[:-n], target[:-n], q[:-n]


def large_margin(q, action, margin: float):
    """DQfD's large-margin loss of each row (torch: Q-values (B, A), the person's actions (B,)):
    ``max_a [Q(s, a) + margin·[a ≠ a_E]] − Q(s, a_E)``, 0 once a_E leads the others by the margin."""
    import torch

    margins = torch.full_like(q, margin)
    margins.scatter_(1, action.unsqueeze(1), 0.0)
    return (q + margins).max(dim=1).values - q.gather(1, action.unsqueeze(1)).squeeze(1)


def pretrain(learner, demos: DemoReplay, updates: int) -> dict[str, float]:
    """DQfD's pretraining: ``updates`` gradient steps on demonstration batches alone (TD loss plus the
    margin loss), the target net copied on its usual cadence. They do not count as the learner's
    ``updates`` (the replay ratio's pacing starts when the workers' samples do)."""
    import torch

    p, update = learner.params, learner.update
    net, losses = update.online, []
    for i in range(updates):
        demo = {k: torch.from_numpy(v).to(learner.device) for k, v in demos.sample(p.batch_size).items()}
        if net.spec.noisy:
            net.reset_noise(generator=update.noise_rng)
            update.target.reset_noise(generator=update.noise_rng)
        order = ("obs", "action", "reward", "next_obs", "discount")
        loss = update.loss(net, update.target, *(demo[k] for k in order)).loss
        if demos.margin_loss > 0:
            loss = loss + demos.margin_term(net(demo["obs"]), demo["action"], p.batch_size)
        learner._optimize(loss)
        losses.append(float(loss.detach()))
        if (i + 1) % p.target_update_every == 0:
            update.sync_target()
    if updates:
        update.sync_target()
    return {
        "demo_pretrain_updates": float(updates),
        "demo_pretrain_loss": float(np.mean(losses[-100:]) if losses else 0.0),
    }


def replay_stats(learner) -> tuple[float, float, float]:
    """The learner's prioritized replay now: (priority mass, smallest priority, beta), on the host
    sum tree or the device replay's priorities."""
    n, beta = learner.size, learner._beta()
    if n == 0:
        return 0.0, 0.0, beta
    tree = learner.priorities.tree
    if tree is not None:
        return float(tree.total()), float(tree.min(n)), beta
    prio = learner.priorities.device_replay.priorities[:n]
    return float(prio.sum()), float(prio.min()), beta


def learn_from_demos(learner, dataset, settings, pretrain_now: bool) -> dict[str, float]:
    """The seam's ``learn_from_demos`` for DQN: the dataset as the learner's never-evicted replay part,
    then (a new run, not a resumed one) ``demos.pretrain_updates`` updates on it alone."""
    p = learner.params
    demos = DemoReplay.of(
        dataset.episodes, p.gamma, p.n_step, settings, seed=int(learner.rng.integers(2**31)), params=p
    )
    if demos.by_priority:
        if not p.prioritized:
            from mqttrl.plugin import ConfigError

            raise ConfigError("demos.priority_bonus > 0 needs prioritized replay (algorithm.prioritized = true)")
        demos.replay_stats = lambda: replay_stats(learner)
    learner.demos = demos
    info = {"demo_transitions": float(demos.size), "demo_episodes": float(len(dataset.episodes))}
    if pretrain_now and settings.pretrain_updates > 0:
        info.update(pretrain(learner, demos, settings.pretrain_updates))
    return info
