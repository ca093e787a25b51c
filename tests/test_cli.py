"""The command table: every command is reachable, --help shows defaults, exit codes hold."""

from __future__ import annotations

import argparse
import sys
import types

import attrs
import pytest
from helpers.paths import REPO

from mqttrl import cli
from mqttrl.cli.common import DEFAULT_BROKER, broker_url, settings

EXPECTED = [
    "train",
    "learner",
    "worker",
    "telemetry",
    "plugins",
    "settings",
    "quicksave",
    "inference",
    "evaluate",
    "workers",
    "status",
    "check-plugin",
    "enjoy",
    "play",
    "compare",
    "env-spec",
    "record",
    "export",
    "broker",
    "screen",
]


def _help(argv: list[str], capsys, entry=cli.main) -> str:
    with pytest.raises(SystemExit) as e:
        entry(argv + ["--help"])
    assert e.value.code == 0
    return capsys.readouterr().out


def test_table_lists_every_command_in_order(capsys):
    assert list(cli.COMMANDS) == EXPECTED
    out = _help([], capsys)
    for name, cmd in cli.COMMANDS.items():
        assert name in out
        assert callable(cmd.add_arguments) and callable(cmd.run)


@pytest.mark.parametrize("name", EXPECTED)
def test_every_command_has_help(name, capsys):
    out = _help([name], capsys)
    assert out.startswith(f"usage: mqttrl {name}")


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["train"], ["(default: auto)", "(default: train.workers = 2)"]),
        (["evaluate"], ["default: 20", "(default 10)"]),
        (["workers"], ["default: 2", "default: worker-logs", "(default:"]),
        (["quicksave"], ["default: 30.0"]),
        (["telemetry"], ["(default 20)", "(default 2)", "default: files"]),
        (["screen", "probe"], ["(default: 5.0)", "(default: none)", "(default: probe)"]),
        (["screen", "glyphs"], ["(default: glyphs)", "(default: 128.0)"]),
    ],
)
def test_help_shows_defaults(argv, expected, capsys):
    out = " ".join(_help(argv, capsys).split())  # argparse wraps lines
    for text in expected:
        assert text in out, (text, out)


def test_help_never_prints_the_password(monkeypatch, capsys):
    monkeypatch.setenv("MQTTRL_PASSWORD", "s3cret-from-env")
    monkeypatch.setenv("MQTTRL_USERNAME", "alice")
    out = _help(["worker"], capsys)
    assert "s3cret-from-env" not in out
    assert "alice" in out  # the user name is not a secret and helps


@pytest.mark.parametrize(
    "entry, prog",
    [
        (cli.learner_main, "mqttrl-learner"),
        (cli.worker_main, "mqttrl-worker"),
        (cli.telemetry_main, "mqttrl-telemetry"),
    ],
)
def test_node_scripts_use_their_own_program_name(entry, prog, capsys):
    assert _help([], capsys, entry).startswith(f"usage: {prog} ")


def test_main_runs_the_chosen_row(monkeypatch):
    seen = []
    row = cli.COMMANDS["status"]
    monkeypatch.setitem(cli.COMMANDS, "status", attrs.evolve(row, run=seen.append))
    cli.main(["status", "--run", "r1", "--once", "0.5", "--json"])
    (args,) = seen
    assert (args.run, args.once, args.json, args.mqtt_protocol) == ("r1", 0.5, True, "auto")
    assert args.broker == "mqtt://127.0.0.1:1883"  # status defaults to a local broker, and --help says so


def test_required_flags_and_bad_choices_exit_2(capsys):
    for argv in (
        ["worker"],  # --run is required (--broker defaults to the local broker, as for every command)
        ["train"],
        ["learner"],
        ["workers", "--run", "r", "--broker", "mqtt://h", "--mqtt-protocol", "4"],
    ):
        with pytest.raises(SystemExit) as e:
            cli.main(argv)
        assert e.value.code == 2, argv
    with pytest.raises(SystemExit) as e:
        cli.main([])
    assert e.value.code == 2


def test_config_error_is_one_line(tmp_path, capsys):
    cfg = tmp_path / "c.toml"
    cfg.write_text("[learner]\npublish_evry = 3\n")
    with pytest.raises(SystemExit) as e:
        cli.main(["train", str(cfg)])
    assert e.value.code == 2  # docs/cli.md: bad arguments or config
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("mqttrl: config error: unknown key learner.publish_evry"), err
    assert "did you mean publish_every" in err[-1] or "did you mean 'publish_every'" in err[-1], err


def test_a_list_without_quotes_in_set_says_how_to_quote_it(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(
            ["train", str(REPO / "configs" / "cartpole_dqn.toml"), "--set", "train.telemetry_storages=[files, wandb]"]
        )
    assert e.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "strings inside a list or table need quotes" in last
    assert """--set 'train.telemetry_storages=["files", "wandb"]'""" in last


def test_bad_storage_option_is_one_line():
    with pytest.raises(SystemExit) as e:
        cli.telemetry_main(["--run", "r", "--broker", DEFAULT_BROKER, "--storage-opt", "nodot=1"])
    assert "expected NAME.KEY=VALUE" in str(e.value.code)


@attrs.frozen
class _Result:
    name: str
    ok: bool
    detail: str = ""


@pytest.fixture
def fake_checks(monkeypatch):
    """Stands in for mqttrl.conformance: the command's contract is run_checks(name, settings) -> [CheckResult]."""
    from mqttrl.plugin.manager import UnknownPluginError

    outcomes = {
        "good": [_Result("actor", True), _Result("round trip", True, "3 versions")],
        "bad": [_Result("actor", True), _Result("weights", False, "checksum differs")],
    }

    def run_checks(name, settings=None):
        if name not in outcomes:
            raise UnknownPluginError(f"no plugin registers {name!r}")
        return outcomes[name]

    module = types.ModuleType("mqttrl.conformance")
    module.run_checks = run_checks
    monkeypatch.setitem(sys.modules, "mqttrl.conformance", module)


def test_check_plugin_all_ok(fake_checks, capsys):
    cli.main(["check-plugin", "good"])
    assert capsys.readouterr().out.splitlines() == ["ok    actor", "ok    round trip: 3 versions"]


def test_check_plugin_failure_exits_1(fake_checks, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["check-plugin", "bad"])
    assert e.value.code == 1
    out = capsys.readouterr()
    assert out.out.splitlines() == ["ok    actor", "FAIL  weights: checksum differs"]
    assert "1 of 2 checks failed" in out.err


def test_check_plugin_unknown_exits_2_with_one_line(fake_checks, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["check-plugin", "nope"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nope" in err[0] and err[0].startswith("mqttrl check-plugin:")


@pytest.mark.parametrize(
    "url, says",
    [
        ("mqtt://a:port", "'mqtt://a:port' is not a broker URL"),
        ("http://a:1883", "scheme must be mqtt"),
        ("mqtt://a:1883,mqtt://b:x", "'mqtt://b:x' is not a broker URL"),
        ("mqtt://a:1883,http://b:1883", "'http://b:1883' is not a broker URL (scheme must be mqtt"),
        ("mqtt://a:1883,,mqtt://b:1883", "empty broker URL"),
        ("mqtt://a:1883 mqtt://b:1883", "separate several URLs with commas"),
        ("mqtts://a:8883,mqtt://b:1883", "mixes mqtts:// and mqtt://"),
    ],
)
def test_a_malformed_broker_url_is_one_line_not_a_traceback(url, says, capsys):
    with pytest.raises(SystemExit) as e:
        cli.worker_main(["--broker", url, "--run", "r"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("mqttrl-worker: error: argument --broker: ") and says in err[-1], err
    assert not any("Traceback" in line for line in err)


def test_every_broker_flag_takes_a_failover_list_and_help_says_so(capsys):
    parser = cli.build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    takes = []
    for name, p in sub.choices.items():
        (flag,) = [a for a in p._actions if "--broker" in a.option_strings] or [None]
        if flag is None:
            continue
        takes.append(name)
        assert flag.type is broker_url, name
        help_text = " ".join(_help([name], capsys).split())
        assert "a comma-separated list (mqtt://a:1883,mqtt://b:1883) fails over" in help_text, name
    assert set(takes) >= {"train", "learner", "worker", "telemetry", "quicksave", "inference", "evaluate"}
    assert set(takes) >= {"workers", "status"}


@pytest.mark.parametrize("command", ["worker", "workers", "status", "train"])
def test_a_list_of_brokers_is_accepted(command, monkeypatch):
    urls = "mqtt://a:1883,mqtt://b:1883"
    seen = []
    monkeypatch.setitem(cli.COMMANDS, command, attrs.evolve(cli.COMMANDS[command], run=seen.append))
    rest = {"worker": ["--run", "r"], "workers": ["--run", "r"], "status": ["--run", "r"], "train": ["c.toml"]}[command]
    cli.main([command, "--broker", urls, *rest])
    (args,) = seen
    assert args.broker == urls  # forwarded as given to child processes (workers, train)
    assert settings(args).urls == ("mqtt://a:1883", "mqtt://b:1883")


def test_status_with_a_dead_first_broker_uses_the_next(shared_mosquitto, capsys):
    from mqttrl.broker.embedded import free_port

    dead = f"mqtt://127.0.0.1:{free_port()}"
    cli.main(
        [
            "status",
            "--run",
            "r-failover",
            "--once",
            "0.3",
            "--wait-s",
            "0",
            "--json",
            "--broker",
            f"{dead},{shared_mosquitto.url}",
        ]
    )
    out = capsys.readouterr()
    assert '"node": "learner"' in out.out and "Traceback" not in out.err


def test_a_misspelled_storage_is_refused_before_the_run_starts(capsys):
    argv = ["train", str(REPO / "configs" / "cartpole_dqn.toml"), "--set", 'train.telemetry_storages=["file"]']
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    assert e.value.code == 5  # docs/cli.md: a plugin is not installed
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "unknown storage 'file' (did you mean 'files'?)" in last
