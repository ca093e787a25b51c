"""The O(B K) C51 projection (``plugins/dqn/heads.c51_project``, two scatter-adds) equals the
(B, K, K) hat formula it replaced, m_i = sum_j [1 - |Tz_j - z_i| / dz]_0^1 p_j, kept here as the
reference; and the edge-atom mass the learner reports."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from mqttrl_plugins.dqn.heads import c51_project, edge_mass  # noqa: E402


def hat_projection(next_probs, reward, discount, support):
    """The old formula: a (B, K, K) tensor of hat weights, summed over the shifted atoms j."""
    v_min, v_max = float(support[0]), float(support[-1])
    dz = (v_max - v_min) / (support.numel() - 1)
    tz = (reward.unsqueeze(1) + discount.unsqueeze(1) * support.unsqueeze(0)).clamp(v_min, v_max)
    weight = (1.0 - (tz.unsqueeze(1) - support.view(1, -1, 1)).abs() / dz).clamp(min=0.0)
    return (weight * next_probs.unsqueeze(1)).sum(dim=2)


def _random_case(rng, batch, k, v_min, v_max):
    support = torch.linspace(v_min, v_max, k)
    probs = torch.from_numpy(rng.dirichlet(np.ones(k), batch).astype(np.float32))
    span = v_max - v_min
    # rewards well beyond the support on both sides, and inside it
    reward = torch.from_numpy(rng.uniform(v_min - span, v_max + span, batch).astype(np.float32))
    discount = torch.from_numpy(rng.choice(np.array([0.0, 0.5, 0.9703, 0.99, 1.0], np.float32), batch))
    return probs, reward, discount, support


@pytest.mark.parametrize("k, v_min, v_max", [(51, -10.0, 10.0), (51, 0.0, 100.0), (11, -3.0, 4.0), (2, -1.0, 1.0)])
def test_scatter_projection_equals_the_hat_formula_on_random_inputs(k, v_min, v_max):
    rng = np.random.default_rng(k)
    probs, reward, discount, support = _random_case(rng, 256, k, v_min, v_max)
    got = c51_project(probs, reward, discount, support)
    np.testing.assert_allclose(got.numpy(), hat_projection(probs, reward, discount, support).numpy(), atol=1e-6)
    np.testing.assert_allclose(got.sum(1).numpy(), 1.0, atol=1e-5)  # float32 sums of 51 terms


def test_edge_cases_terminal_beyond_the_support_and_exactly_on_atoms():
    support = torch.linspace(-2.0, 2.0, 5)  # dz = 1
    probs = torch.tensor([[0.1, 0.2, 0.3, 0.25, 0.15]]).repeat(8, 1)
    reward = torch.tensor([1.0, -2.0, 2.0, 7.0, -9.0, 0.0, 1.0, 0.5])
    # terminal on an inner atom, on v_min, on v_max, beyond both edges; discount 1 shifts every atom
    # onto another atom (0: identity; 1: up by one, the top two clipped to v_max); 0.5 halves onto atoms
    discount = torch.tensor([0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.5])
    got = c51_project(probs, reward, discount, support)
    np.testing.assert_allclose(got.numpy(), hat_projection(probs, reward, discount, support).numpy(), atol=1e-6)
    one_hot = np.eye(5)
    for row, atom in zip(range(5), (3, 0, 4, 4, 0)):  # terminal: all mass on the atom of r (clipped)
        np.testing.assert_allclose(got[row].numpy(), one_hot[atom], atol=1e-7)
    np.testing.assert_allclose(got[5].numpy(), probs[5].numpy(), atol=1e-7)  # r 0, discount 1: unchanged
    np.testing.assert_allclose(got[6].numpy(), [0.0, 0.1, 0.2, 0.3, 0.4], atol=1e-7)


def test_support_edges_for_float_rounding_of_linspace():
    """Targets a hair inside or outside v_max land on the top atom, never past the array."""
    support = torch.linspace(-10.0, 10.0, 51)
    probs = torch.full((4, 51), 1.0 / 51)
    reward = torch.tensor([10.0, 10.0 - 1e-6, -10.0 + 1e-6, 1e9])
    got = c51_project(probs, reward, torch.zeros(4), support)
    np.testing.assert_allclose(got.numpy(), hat_projection(probs, reward, torch.zeros(4), support).numpy(), atol=1e-6)
    assert got[0, -1] == pytest.approx(1.0) and got[3, -1] == pytest.approx(1.0)


def test_edge_mass_is_the_share_on_the_two_edge_atoms():
    m = torch.tensor([[0.5, 0.0, 0.0, 0.0, 0.5], [0.0, 0.2, 0.6, 0.2, 0.0], [0.1, 0.2, 0.4, 0.2, 0.1]])
    assert float(edge_mass(m)) == pytest.approx((1.0 + 0.0 + 0.2) / 3)
    # every target of a terminal reward beyond the support sits on an edge atom
    support = torch.linspace(-10.0, 10.0, 51)
    probs = torch.full((3, 51), 1.0 / 51)
    far = c51_project(probs, torch.tensor([50.0, -50.0, 0.0]), torch.zeros(3), support)
    assert float(edge_mass(far)) == pytest.approx(2 / 3)
