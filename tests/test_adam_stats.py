"""``adam_below_eps``: the share of parameters whose Adam step is governed by eps (sqrt(v_hat) < eps),
checked against the bias-corrected second moment written out by hand, and reported by the learner."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from helpers.replay_rows import ACT, CARTPOLE_OBS, random_arrays  # noqa: E402

from mqttrl.wire import decode_batch, encode_batch  # noqa: E402
from mqttrl_plugins.dqn.adam_stats import adam_below_eps  # noqa: E402
from mqttrl_plugins.dqn.common import DQNParams  # noqa: E402
from mqttrl_plugins.dqn.learner import DQNLearner  # noqa: E402


@pytest.mark.parametrize("fused", [False, True])
def test_the_share_is_of_elements_whose_second_moment_root_is_below_eps(fused):
    small = torch.zeros(300, requires_grad=True)  # gradients 1e-6: far below eps 1e-4
    large = torch.zeros(100, requires_grad=True)  # gradients 1e-2: far above it
    opt = torch.optim.Adam([small, large], lr=1e-3, eps=1e-4, fused=fused)
    assert adam_below_eps(opt) is None  # no step yet: no moments
    for step in range(1, 6):
        opt.zero_grad()
        small.grad = torch.full_like(small, 1e-6)
        large.grad = torch.full_like(large, 1e-2)
        opt.step()
        assert adam_below_eps(opt) == pytest.approx(0.75)
    # by hand: v_t = (1 - b2) sum_k b2^(t-k) g^2 = g^2 (1 - b2^t), so sqrt(v_hat) = |g| exactly
    v = opt.state[large]["exp_avg_sq"]
    assert float(torch.sqrt(v / (1 - 0.999**5))[0]) == pytest.approx(1e-2, rel=1e-4)


def test_a_gradient_at_the_boundary_counts_by_which_side_it_is_on():
    p = torch.zeros(4, requires_grad=True)
    opt = torch.optim.Adam([p], eps=1e-3)
    p.grad = torch.tensor([0.5e-3, 0.9e-3, 1.1e-3, 2e-3])
    opt.step()
    assert adam_below_eps(opt) == pytest.approx(0.5)


def test_the_learner_reports_the_share_in_its_metrics():
    rng = np.random.default_rng(0)
    p = DQNParams(hidden=[16, 16], batch_size=16, buffer_size=500, learning_starts=16, replay_ratio=4.0)
    learner = DQNLearner(p, CARTPOLE_OBS, ACT, "cpu", 0)
    arrays = random_arrays(64, rng)
    learner.add(decode_batch(encode_batch("r", "w", 0, 0, arrays)))
    first = learner.train_step()
    assert first["adam_below_eps"] == adam_below_eps(learner.optimizer)
    assert 0.0 <= first["adam_below_eps"] <= 1.0
