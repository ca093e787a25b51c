"""The end of a ``mqttrl train`` run offers ``mqttrl export`` only for an algorithm that can export."""

from __future__ import annotations

from types import SimpleNamespace

from helpers.policy_runs import make_run

from mqttrl.plugin.manager import Registered, Registry
from mqttrl.trainer.run import _print_summary, can_export, next_steps


def registry(**export_modules) -> Registry:
    """A registry of plain algorithm records: name -> its export_module (None: cannot export)."""
    algorithms = {
        name: Registered(name=name, plugin="p", obj=SimpleNamespace(export_module=fn))
        for name, fn in export_modules.items()
    }
    return Registry(algorithms=algorithms)


def test_can_export_follows_the_plugins_export_module():
    reg = registry(linq=None, mine=lambda *a: None)
    assert not can_export("linq", reg)
    assert can_export("mine", reg)
    assert not can_export("unknown", reg) and not can_export(None, reg)


def test_the_built_in_algorithms_can_export():
    assert all(can_export(name) for name in ("dqn", "ppo", "sac", "crossq"))


def test_the_next_line_leaves_out_export_where_it_cannot_work(tmp_path):
    run = make_run(tmp_path / "run", "dqn", "CartPole-v1", hidden=[8]).root
    [offered] = next_steps(run, exportable=True)
    assert f"mqttrl export {run}" in offered and f"mqttrl enjoy {run}" in offered
    [line] = next_steps(run, exportable=False)
    assert "export" not in line
    assert f"mqttrl enjoy {run}" in line and "--resume" in line


def test_the_summary_asks_the_algorithm(tmp_path, capsys):
    run = make_run(tmp_path / "run", "dqn", "CartPole-v1", hidden=[8]).root
    summary = {"run": "r", "stop_reason": "time budget", "wall_s": 1.0, "solved": False, "best_eval_mean": None}
    _print_summary({**summary, "run_dir": str(run), "algorithm": "no-such-algorithm"})
    assert "mqttrl export" not in capsys.readouterr().out
    _print_summary({**summary, "run_dir": str(run), "algorithm": "dqn"})
    assert f"mqttrl export {run}" in capsys.readouterr().out
