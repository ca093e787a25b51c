"""DQN's losses (plugins/dqn/losses.py) and one update (plugins/dqn/update.py) on plain tensors.

Each loss kind is checked against a hand computation on a batch of two transitions whose Q-values
(or atoms' probabilities, or quantiles) are set in a table "network": the next action each picks,
the TD target, the per-sample loss and the batch's loss, worked out below in the comments.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from mqttrl_plugins.dqn.common import DQNParams  # noqa: E402
from mqttrl_plugins.dqn.heads import expected_q  # noqa: E402
from mqttrl_plugins.dqn.losses import (  # noqa: E402
    CategoricalTD,
    HuberTD,
    QuantileTD,
    TDLoss,
    make_loss,
)
from mqttrl_plugins.dqn.numpy_heads import HeadSpec  # noqa: E402
from mqttrl_plugins.dqn.update import Update  # noqa: E402


class TableNet(torch.nn.Module):
    """A Q-network whose observation is a state's index: per-action outputs (S, A, K) from a table,
    the interface the losses use (``outputs``, ``q_values``, the expected Q as the call, ``support``)."""

    def __init__(self, spec: HeadSpec, table):
        super().__init__()
        self.spec = spec
        self.table = torch.nn.Parameter(torch.tensor(table, dtype=torch.float32))
        self.register_buffer("support", torch.from_numpy(spec.support()), persistent=False)

    def outputs(self, obs: torch.Tensor) -> torch.Tensor:
        return self.table[obs.long()]

    def q_values(self, out: torch.Tensor) -> torch.Tensor:
        return expected_q(self.spec, out, self.support)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.q_values(self.outputs(obs))


#: the batch: states 0 and 1, next states 2 and 3; the second transition ends the episode (discount 0)
OBS, NEXT_OBS = torch.tensor([0.0, 1.0]), torch.tensor([2.0, 3.0])
ACTION = torch.tensor([1, 0])


def _batch(reward, discount):
    return OBS, ACTION, torch.tensor(reward), NEXT_OBS, torch.tensor(discount)


def _plain_nets():
    """Q-values per state (rows) and action (columns); the target net knows only the next states."""
    spec = HeadSpec(n_actions=2, dueling=False)
    online = TableNet(spec, [[[1.0], [2.0]], [[0.5], [-1.0]], [[3.0], [0.0]], [[0.0], [1.0]]])
    target = TableNet(spec, [[[0.0], [0.0]], [[0.0], [0.0]], [[1.0], [4.0]], [[2.0], [0.5]]])
    return online, target


def test_q_learning_takes_the_target_nets_greedy_action_and_huber_loss_by_hand():
    online, target = _plain_nets()
    # a 3-step transition at gamma 0.9 (discount 0.729), then a terminal one
    out = TDLoss(HuberTD(), double=False)(online, target, *_batch([1.0, -1.0], [0.729, 0.0]))
    # next action: the target's argmax: s2 -> a1 (4.0), s3 -> a0 (2.0)
    # targets: 1 + 0.729 * 4 = 3.916; -1 + 0 * 2 = -1;  Q(s0, a1) = 2, Q(s1, a0) = 0.5
    # Huber (delta 1): |3.916 - 2| = 1.916 -> 1.416; |-1 - 0.5| = 1.5 -> 1.0; mean 1.208
    torch.testing.assert_close(out.target, torch.tensor([3.916, -1.0]))
    torch.testing.assert_close(out.q, torch.tensor([2.0, 0.5]))
    torch.testing.assert_close(out.elementwise, torch.tensor([1.416, 1.0]))
    torch.testing.assert_close(out.loss, torch.tensor(1.208))
    assert out.edge_mass is None


def test_double_q_learning_takes_the_online_nets_action_and_weights_by_hand():
    online, target = _plain_nets()
    loss = TDLoss(HuberTD(), double=True)
    out = loss(online, target, *_batch([1.0, -1.0], [0.9, 0.0]))
    # next action: the online net's argmax: s2 -> a0 (3.0), valued by the target: 1.0; s3 -> a1: 0.5
    # targets: 1 + 0.9 * 1 = 1.9; -1;  TD errors -0.1 and -1.5 -> Huber 0.5 * 0.01 = 0.005 and 1.0
    torch.testing.assert_close(out.target, torch.tensor([1.9, -1.0]))
    torch.testing.assert_close(out.elementwise, torch.tensor([0.005, 1.0]))
    torch.testing.assert_close(out.loss, torch.tensor(0.5025))
    weighted = loss(online, target, *_batch([1.0, -1.0], [0.9, 0.0]), torch.tensor([0.5, 1.0]))
    torch.testing.assert_close(weighted.loss, torch.tensor((0.5 * 0.005 + 1.0) / 2))
    # the gradient reaches the online net's taken actions only: (Q - target) / B inside Huber's
    # quadratic part, the clipped slope sign(Q - target) / B outside it; none reaches the target net
    weighted.loss.backward()
    grad = torch.zeros(4, 2, 1)
    grad[0, 1, 0], grad[1, 0, 0] = 0.5 * 0.1 / 2, 1.0 * 1.0 / 2
    torch.testing.assert_close(online.table.grad, grad)
    assert target.table.grad is None


def test_c51_projects_the_target_distribution_and_takes_the_cross_entropy_by_hand():
    spec = HeadSpec(n_actions=2, dueling=False, distributional="c51", k=3, v_min=-1.0, v_max=1.0)

    def log(probs):
        return np.log(probs).tolist()

    # next states' atoms' probabilities (support -1, 0, 1): s2: a0 (0.2, 0.3, 0.5), E 0.3; a1 E -0.4
    nxt = [[log([0.2, 0.3, 0.5]), log([0.6, 0.2, 0.2])], [log([0.1, 0.1, 0.8]), log([0.8, 0.1, 0.1])]]
    online = TableNet(spec, [[[0.0] * 3, log([0.25, 0.25, 0.5])], [log([0.5, 0.25, 0.25]), [0.0] * 3]] + nxt)
    target = TableNet(spec, [[[0.0] * 3] * 2] * 2 + nxt)
    out = TDLoss(CategoricalTD(spec.v_min, spec.v_max), double=False)(online, target, *_batch([0.5, 2.0], [0.5, 0.0]))
    # s2 -> a0: Tz = 0.5 + 0.5 (-1, 0, 1) = (0, 0.5, 1): 0.2 to atom 0, 0.3 split 0.15 / 0.15, 0.5 to atom 1
    #   m = (0, 0.35, 0.65), E = 0.65; edge mass 0.65
    # terminal, r = 2 beyond v_max: all the mass on the last atom, m = (0, 0, 1), E = 1; edge mass 1
    torch.testing.assert_close(out.target, torch.tensor([0.65, 1.0]))
    torch.testing.assert_close(out.edge_mass, torch.tensor(0.825))
    # cross-entropy -sum m log p of the taken actions: p(s0, a1) = (0.25, 0.25, 0.5), p(s1, a0) = (0.5, 0.25, 0.25)
    ce = [-(0.35 * math.log(0.25) + 0.65 * math.log(0.5)), -math.log(0.25)]
    torch.testing.assert_close(out.elementwise, torch.tensor(ce))
    torch.testing.assert_close(out.loss, torch.tensor(sum(ce) / 2))
    torch.testing.assert_close(out.q, torch.tensor([0.25, -0.25]))  # the expected values of those


def test_qr_takes_the_quantile_huber_loss_to_the_shifted_quantiles_by_hand():
    spec = HeadSpec(n_actions=2, dueling=False, distributional="qr", k=2)
    nxt = [[[1.0, 3.0], [-5.0, -5.0]], [[0.0, 0.0], [-1.0, -1.0]]]  # the greedy next action is a0 in both
    online = TableNet(spec, [[[0.0, 0.0], [0.0, 1.0]], [[2.0, 4.0], [0.0, 0.0]]] + nxt)
    target = TableNet(spec, [[[0.0, 0.0]] * 2] * 2 + nxt)
    out = TDLoss(QuantileTD(kappa=1.0), double=False)(online, target, *_batch([1.0, 1.0], [0.5, 0.0]))
    # tau = (0.25, 0.75); rho_tau(u) = |tau - 1{u < 0}| L(u), L(u) = u^2 / 2 (|u| <= 1) else |u| - 1/2
    # s0, a1: theta (0, 1), T theta = 1 + 0.5 (1, 3) = (1.5, 2.5)
    #   i=0: u = 1.5, 2.5 -> 0.25 (1.0, 2.0) -> mean 0.375;  i=1: u = 0.5, 1.5 -> 0.75 (0.125, 1.0) -> 0.421875
    # s1, a0: theta (2, 4), terminal: T theta = (1, 1)
    #   i=0: u = -1 -> 0.75 * 0.5 = 0.375;  i=1: u = -3 -> 0.25 * 2.5 = 0.625
    torch.testing.assert_close(out.elementwise, torch.tensor([0.796875, 1.0]))
    torch.testing.assert_close(out.loss, torch.tensor(0.8984375))
    torch.testing.assert_close(out.target, torch.tensor([2.0, 1.0]))
    torch.testing.assert_close(out.q, torch.tensor([0.5, 3.0]))


@pytest.mark.parametrize(
    "settings, head",
    [
        ({}, HuberTD),
        ({"distributional": "c51", "v_min": -1.0, "v_max": 1.0}, CategoricalTD),
        ({"distributional": "qr"}, QuantileTD),
    ],
)
@pytest.mark.parametrize("double", [True, False])
def test_the_config_picks_the_loss_once(settings, head, double):
    loss = make_loss(DQNParams(double=double, **settings))
    assert isinstance(loss.head, head) and loss.double is double


def test_one_update_steps_the_online_net_and_syncs_the_target_on_its_period():
    params = DQNParams(lr=0.1, adam_eps=1e-8, target_update_every=2, grad_clip=0.0)
    online, target = _plain_nets()
    update = Update(online, target, TDLoss(HuberTD(), double=False), params, torch.device("cpu"), 0)
    torch.testing.assert_close(target.table, online.table)  # the target starts as the online net
    before = online.table.detach().clone()
    out = update.compute(*_batch([1.0, -1.0], [0.9, 0.0]), None)
    grad_norm = update.optimize(out.loss)
    # targets 1 + 0.9 * 4 = 4.6 and -1; both errors (2 - 4.6, 0.5 + 1) are past Huber's knee: the
    # gradients are sign(Q - target) / B = -0.5 and +0.5, their norm sqrt(0.5)
    torch.testing.assert_close(grad_norm, torch.tensor(math.sqrt(0.5)))
    moved = (online.table.detach() - before).flatten().nonzero().flatten().tolist()
    assert moved == [1, 2]  # (s0, a1) and (s1, a0); Adam's first step is lr against the gradient's sign
    torch.testing.assert_close(online.table.detach().flatten()[[1, 2]], torch.tensor([2.1, 0.4]))
    update.stepped(1)
    assert not torch.equal(target.table, online.table)
    update.stepped(2)
    torch.testing.assert_close(target.table, online.table)
