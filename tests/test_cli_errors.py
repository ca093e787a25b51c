"""Every command ends a user's mistake in one line and a documented exit code, never a traceback.

The broker cases run the real console scripts against a port where nothing listens and a host
name that does not resolve (no server needed: the refusal is the point).
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from mqttrl.cli import errors

ROOT = Path(__file__).parent.parent
BIN = Path(sys.executable).parent


def free_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(argv: list[str], tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "MQTTRL_TRACEBACK": "0", **env}
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=tmp_path, env=full_env)


def assert_one_line(out: subprocess.CompletedProcess, code: int, *needles: str) -> None:
    text = out.stdout + out.stderr
    assert "Traceback" not in text, text
    assert out.returncode == code, (out.returncode, text)
    last = out.stderr.strip().splitlines()[-1]
    for needle in needles:
        assert needle in last, last


CONFIG = str(ROOT / "configs" / "cartpole_dqn.toml")
COMMANDS = {
    "mqttrl-learner": lambda b, d: [str(BIN / "mqttrl-learner"), "--config", CONFIG, "--broker", b, "--run-dir", d],
    "mqttrl-worker": lambda b, d: [str(BIN / "mqttrl-worker"), "--run", "cartpole", "--broker", b],
    "mqttrl-telemetry": lambda b, d: [str(BIN / "mqttrl-telemetry"), "--run", "cartpole", "--broker", b],
    "status": lambda b, d: [str(BIN / "mqttrl"), "status", "--run", "cartpole", "--broker", b],
    "quicksave": lambda b, d: [str(BIN / "mqttrl"), "quicksave", "--run", "cartpole", "--broker", b],
    "evaluate": lambda b, d: [str(BIN / "mqttrl"), "evaluate", "--run", "cartpole", "--broker", b],
    "train": lambda b, d: [str(BIN / "mqttrl"), "train", CONFIG, "--broker", b, "--no-progress", "--run-dir", d],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_refused_broker_is_one_line(command, tmp_path):
    out = run(COMMANDS[command](f"mqtt://127.0.0.1:{free_port()}", str(tmp_path / "run")), tmp_path)
    assert_one_line(out, errors.EXIT_BROKER, "unreachable", "Connection refused")


@pytest.mark.parametrize("command", ["status", "mqttrl-worker"])
def test_an_unresolvable_broker_is_one_line(command, tmp_path):
    out = run(COMMANDS[command]("mqtt://no-such-host.invalid:1883", str(tmp_path / "run")), tmp_path)
    assert_one_line(out, errors.EXIT_BROKER, "no-such-host.invalid")


def test_a_misspelled_plugin_in_mqttrl_load_plugins_is_named(tmp_path):
    out = run([str(BIN / "mqttrl"), "plugins"], tmp_path, MQTTRL_LOAD_PLUGINS="dqn,gym_env")
    assert_one_line(out, errors.EXIT_MISSING, "MQTTRL_LOAD_PLUGINS", "'gym_env'", "did you mean 'gym_envs'")


def test_plugins_named_in_mqttrl_load_plugins_still_load(tmp_path):
    out = run([str(BIN / "mqttrl"), "plugins"], tmp_path, MQTTRL_LOAD_PLUGINS="dqn,gym_envs")
    assert out.returncode == 0, out.stderr
    assert "dqn" in out.stdout and "ppo" not in out.stdout


@pytest.mark.parametrize(
    ("module", "extra"),
    [("rich", "learner"), ("torch.nn", "learner"), ("minatar", "minatar"), ("Box2D", "box2d"), ("ale_py", "atari")],
)
def test_a_missing_package_names_the_extra_that_installs_it(module, extra):
    line, code = errors.describe(ModuleNotFoundError(f"No module named {module!r}", name=module))
    assert code == errors.EXIT_MISSING
    assert f".[{extra}]" in line and module.split(".")[0] in line


def test_an_unknown_package_names_itself():
    line, code = errors.describe(ModuleNotFoundError("No module named 'frobnicate'", name="frobnicate"))
    assert code == errors.EXIT_MISSING and "pip install frobnicate" in line


def test_a_bug_is_one_line_that_says_so(capsys):
    def broken(_args):
        raise ZeroDivisionError("boom")

    with pytest.raises(SystemExit) as exit_info:
        errors.guarded(broken)(None)
    assert exit_info.value.code == errors.EXIT_FAILED
    err = capsys.readouterr().err
    assert "internal error: ZeroDivisionError: boom" in err and "MQTTRL_TRACEBACK=1" in err
    assert "Traceback" not in err


def test_an_env_whose_package_is_missing_names_the_extra(tmp_path):
    """LunarLander needs Box2D, which the test install leaves out: not 'unknown env', but the extra."""
    pytest.importorskip("gymnasium")
    if importlib.util.find_spec("Box2D") is not None:
        pytest.skip("Box2D is installed here")
    argv = [str(BIN / "mqttrl"), "train", CONFIG, "--set", "env.id=LunarLander-v3", "--no-progress"]
    out = run([*argv, "--run-dir", str(tmp_path / "run")], tmp_path)
    assert_one_line(out, errors.EXIT_MISSING, "LunarLander-v3", "Box2D", ".[box2d]")
    assert "unknown env" not in out.stderr


def test_a_misspelled_env_id_is_one_line(tmp_path):
    argv = [str(BIN / "mqttrl"), "train", CONFIG, "--set", "env.id=CartPole-v9", "--no-progress"]
    out = run([*argv, "--run-dir", str(tmp_path / "run")], tmp_path)
    text = out.stdout + out.stderr
    assert "Traceback" not in text and out.returncode == errors.EXIT_USAGE, text  # a typo, not a missing package
    assert "CartPole-v9" in out.stderr.strip().splitlines()[-1]


def test_docs_list_every_exit_code():
    """docs/cli.md's table holds exactly the codes errors.py defines."""
    doc = (ROOT / "docs" / "cli.md").read_text()
    table = doc[doc.index("<!-- exit-codes -->") : doc.index("<!-- /exit-codes -->")]
    documented = {
        int(line.split("|")[1]) for line in table.splitlines() if line.startswith("| ") and "code" not in line
    }
    defined = {v for k, v in vars(errors).items() if k.startswith("EXIT_")}
    assert documented == defined


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("mqtt://127.0.0.1:1883,notaurl", "'notaurl' is not a broker URL (write mqtt://notaurl:1883"),
        ("mqtt://127.0.0.1:", "no port after the ':'"),
        ("mqtt://:1883", "no host"),
        ("http://127.0.0.1:1883", "scheme must be mqtt://"),
    ],
)
def test_a_malformed_broker_url_is_refused_before_connecting(url, says, tmp_path):
    out = run([str(BIN / "mqttrl"), "status", "--run", "r", "--once", "0.1", "--broker", url], tmp_path)
    assert_one_line(out, errors.EXIT_USAGE, says)


@pytest.mark.parametrize("url", ["mqtt://127.0.0.1", "127.0.0.1:1883", "mqtts://broker.example:8883"])
def test_well_formed_broker_urls_pass(url):
    from mqttrl.cli.common import broker_url

    assert broker_url(url) == url


def test_mqttrl_train_without_the_learner_extra_names_it(tmp_path):
    """A torch-free install (no rich): `mqttrl train` says which extra to install, in one line."""
    code = (
        "import sys\n"
        "sys.modules['rich'] = None  # as if the learner extra was not installed\n"
        "from mqttrl.cli import main\n"
        f"main(['train', {CONFIG!r}, '--no-progress', '--run-dir', {str(tmp_path / 'run')!r}])\n"
    )
    out = run([sys.executable, "-c", code], tmp_path)
    assert_one_line(out, errors.EXIT_MISSING, "'rich' is not installed", ".[learner]")


@pytest.mark.parametrize("name", ["mqttrl", "mqttrl-learner", "mqttrl-worker", "mqttrl-telemetry"])
def test_ctrl_c_while_the_command_line_loads_ends_in_one_line(name: str, tmp_path: Path) -> None:
    """A Ctrl-C that lands while the CLI's modules import (before any command runs) is one line, exit 130.

    A ``sitecustomize`` makes the import of ``mqttrl.cli.train`` raise KeyboardInterrupt, exactly what a
    SIGINT during that import does, so the window is hit every time instead of by timing.
    """
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        "import sys\n"
        "class _CtrlC:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'mqttrl.cli.train':\n"
        "            raise KeyboardInterrupt\n"
        "        return None\n"
        "sys.meta_path.insert(0, _CtrlC())\n"
    )
    pythonpath = os.pathsep.join(filter(None, [str(hook), os.environ.get("PYTHONPATH", "")]))
    out = run([str(BIN / name), "--help"], tmp_path, PYTHONPATH=pythonpath)
    assert_one_line(out, errors.EXIT_INTERRUPTED, "interrupted")
