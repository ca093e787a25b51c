"""DQN's data-efficiency settings: C51's required (or derived) support, target periods in env
steps, the shipped configs' supports."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from mqttrl.config import ConfigError, load_config
from mqttrl_plugins.dqn.common import DQNParams

REPO = Path(__file__).resolve().parents[1]


def test_c51_without_a_support_is_one_clear_error():
    with pytest.raises(ConfigError, match="needs its support: set v_min and v_max"):
        DQNParams(distributional="c51")
    DQNParams(distributional="qr")  # quantiles need no support
    DQNParams()  # nor does the plain head


def test_c51_support_derived_from_reward_max_with_one_log_line(caplog):
    with caplog.at_level(logging.INFO, logger="mqttrl.dqn"):
        p = DQNParams(distributional="c51", reward_max=1.0, gamma=0.99)
    assert (p.v_min, p.v_max) == pytest.approx((-100.0, 100.0))
    lines = [r.getMessage() for r in caplog.records if r.name == "mqttrl.dqn"]
    assert len(lines) == 1 and "v_max=100" in lines[0] and "reward_max 1" in lines[0]
    # one side given: only the other is derived
    assert DQNParams(distributional="c51", reward_max=2.0, gamma=0.9, v_min=0.0).v_max == pytest.approx(20.0)
    with pytest.raises(ConfigError, match="gamma = 1"):
        DQNParams(distributional="c51", reward_max=1.0, gamma=1.0)


def _registry_params(name):
    from mqttrl.plugin.manager import get_registry

    return get_registry().algorithm(name).params


@pytest.mark.parametrize(
    ("config", "lowest", "highest"),
    # the returns each game's support must hold: LunarLander's crash and landing, CartPole's up to
    # 100 at gamma 0.99, MinAtar Breakout's 0 to the ~5 learned in 100k env steps (with room: 10;
    # its target_edge_mass stayed ~1e-4, docs/benchmarks.md, issue 24)
    [("lunarlander_dqn.toml", -100, 100), ("minatar_breakout_dqn.toml", 0, 10), ("cartpole_rainbow.toml", 0, 100)],
)
def test_shipped_configs_run_c51_with_their_own_support(config, lowest, highest):
    """The ablation's ``--set algorithm.distributional=c51`` over these configs gets a support that
    fits the game, not a clipped one."""
    cfg = load_config(REPO / "configs" / config, ["algorithm.distributional=c51"], _registry_params)
    p = cfg.algorithm.params
    assert p.v_min is not None and p.v_max is not None and p.v_min <= lowest and p.v_max >= highest


def test_shipped_configs_copy_the_target_every_so_many_env_steps():
    """Dopamine / Revisiting Rainbow: every 1,000 env steps on MinAtar, 300 on LunarLander."""
    minatar = load_config(REPO / "configs" / "minatar_breakout_dqn.toml", [], _registry_params).algorithm.params
    assert minatar.target_update_env_steps == 1000 and minatar.target_update_every == 125  # ratio 8, batch 64
    assert minatar.adam_eps == pytest.approx(1e-5)  # C51's small gradients: docs/benchmarks.md, issue 24
    lunar = load_config(REPO / "configs" / "lunarlander_dqn.toml", [], _registry_params).algorithm.params
    assert lunar.target_update_env_steps == 300 and lunar.target_update_every == 38  # ratio 16, batch 128
    assert lunar.adam_eps == pytest.approx(3.125e-4) == DQNParams().adam_eps


def test_the_minatar_rainbow_config_is_the_dqn_configs_learning_with_rainbow_and_one_reset():
    """configs/minatar_rainbow.toml, run on every MinAtar game as it is: the dqn config's network,
    optimiser, support and target period, the rainbow preset, replay ratio 32, and one reset in its
    100k-env-step budget, at 56k env steps."""
    dqn = load_config(REPO / "configs" / "minatar_breakout_dqn.toml", [], _registry_params)
    rainbow = load_config(REPO / "configs" / "minatar_rainbow.toml", [], _registry_params)
    same = ("network", "lr", "adam_eps", "gamma", "batch_size", "grad_clip", "v_min", "v_max", "noisy_sigma0")
    same += ("buffer_size", "learning_starts", "target_update_env_steps", "n_step", "double", "dueling")
    a, b = dqn.algorithm.params, rainbow.algorithm.params
    assert {k: getattr(b, k) for k in same} == {k: getattr(a, k) for k in same}
    assert (b.preset, b.distributional, b.noisy, b.prioritized, b.initial_priority) == (
        "rainbow",
        "c51",
        True,
        True,
        "actor",
    )
    assert (b.replay_ratio, rainbow.env.num_envs, rainbow.train.max_env_steps) == (32.0, 8, 100_000)
    updates = rainbow.train.max_env_steps * b.replay_ratio / b.batch_size
    assert updates == 50_000 and updates // b.reset_every == 1
    assert b.reset_every * b.batch_size / b.replay_ratio == 56_000  # env steps at the reset


@pytest.mark.parametrize("config", sorted(p.name for p in (REPO / "configs").glob("*.toml")))
def test_every_shipped_config_loads(config):
    cfg = load_config(REPO / "configs" / config, [], _registry_params)
    assert cfg.run and cfg.env.id and cfg.algorithm.name
