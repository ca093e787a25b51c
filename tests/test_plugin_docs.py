"""docs/plugins.md cannot drift: exact hook signatures, a test per hook, the built-ins, and the
third-party storage example, installed from the doc alone, receives every point telemetry writes."""

from __future__ import annotations

import ast
import importlib.metadata as md
import inspect
import json
import re
import sys
import threading
import time
import tomllib
from pathlib import Path

import paho.mqtt.client as mqtt
import pytest
from helpers.paths import REPO
from helpers.plugin_packages import install_package

from mqttrl.plugin import hookspecs as spec_module
from mqttrl.plugin.hookspecs import HOOKS

DOC = REPO / "docs" / "plugins.md"

#: every hookspec -> the tests in tests/test_plugins.py that exercise it
HOOK_TESTS = {
    "mqttrl_register_algorithms": [
        "test_hook_register_algorithms_takes_algorithm_info",
        "test_check_algorithm_passes_for_builtins",
        "test_check_algorithm_names_the_failing_step",
    ],
    "mqttrl_register_envs": [
        "test_hook_register_envs_exact_ids_and_namespaces",
        "test_third_party_env_and_algorithm_resolve",
    ],
    "mqttrl_register_storages": [
        "test_hook_register_storages_factory_gets_settings",
        "test_check_storage_passes_for_files",
        "test_misspelled_hook_refuses_the_plugin_by_name",
    ],
}


def doc() -> str:
    return DOC.read_text()


def hookspecs() -> dict[str, object]:
    return {n: f for n, f in vars(spec_module).items() if n.startswith("mqttrl_") and hasattr(f, "mqttrl_spec")}


def signature_text(name: str, fn) -> str:
    """``def name(arg: Ann) -> Ret`` from inspect.signature (annotations are source text)."""
    sig = inspect.signature(fn)
    params = ", ".join(f"{p.name}: {p.annotation}" for p in sig.parameters.values())
    return f"def {name}({params}) -> {sig.return_annotation}"


def code_blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", text, flags=re.S)


def test_hookspecs_are_the_hooks():
    assert set(hookspecs()) == set(HOOKS)
    for name, fn in hookspecs().items():
        assert fn.__doc__ and "register(" in fn.__doc__, name  # each says what register accepts


def test_every_hookspec_is_in_the_docs_with_its_exact_signature():
    text = doc()
    for name, fn in hookspecs().items():
        sig = signature_text(name, fn)
        assert "(register: Callable[" in sig  # typed
        assert f"### `{name}`" in text, f"docs/plugins.md has no section for {name}"
        assert sig in text, f"docs/plugins.md does not show {name} as:\n{sig}"


def test_every_hookspec_has_tests():
    tree = ast.parse((REPO / "tests" / "test_plugins.py").read_text())
    tests = {n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")}
    assert set(HOOK_TESTS) == set(HOOKS)
    for hook, names in HOOK_TESTS.items():
        missing = [n for n in names if n not in tests]
        assert names and not missing, f"{hook}: tests {missing} are not in tests/test_plugins.py"


def test_docs_list_the_builtins_and_commands():
    text = doc()
    builtins = {ep.name: ep.value for ep in md.entry_points(group="mqttrl") if ep.dist and ep.dist.name == "mqttrl"}
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["entry-points"]["mqttrl"]
    assert builtins == declared, "the installed entry points are not pyproject's: pip install -e ."
    for name, module in builtins.items():
        assert f"| `{name}` | `{module}` |" in text, f"built-in {name} ({module}) is not in the table"
    for phrase in (
        "`mqttrl plugins`",
        "MQTTRL_LOAD_PLUGINS",
        "mqttrl check-plugin NAME",
        "from mqttrl import hookimpl",
    ):
        assert phrase in text, phrase
    assert "unknown hook 'mqttrl_register_storage'" in text  # what a misspelled hook gives
    for method in ("write(points: list[Point]) -> None", "close() -> None"):
        assert method in text


def test_docs_name_every_actor_method():
    """Every method of the Actor / SyncActor protocols is in docs/plugins.md, with its parameters."""
    from mqttrl.plugin.algorithm import Actor, SyncActor

    text = " ".join(doc().split())
    for proto in (Actor, SyncActor):
        for name, fn in vars(proto).items():
            if name.startswith("_") or not callable(fn):
                continue
            params = [
                p.name if p.default is inspect.Parameter.empty else f"{p.name}={p.default!r}"
                for p in list(inspect.signature(fn).parameters.values())[1:]
            ]
            shown = f"`{name}({', '.join(params)})`"
            assert shown in text, f"docs/plugins.md does not show the {proto.__name__} method {shown}"


def test_docs_storage_contract_matches_the_protocol():
    from mqttrl.plugin.storage import Storage

    assert str(inspect.signature(Storage.write)) == "(self, points: 'list[Point]') -> 'None'"
    assert str(inspect.signature(Storage.close)) == "(self) -> 'None'"


def storage_example() -> dict[str, str]:
    """The third-party storage package exactly as docs/plugins.md shows it."""
    text = doc()
    section = text[text.index("A complete third-party storage") :]
    toml = code_blocks(section, "toml")[0]
    module = code_blocks(section, "python")[0]
    first = module.splitlines()[0]
    assert first.startswith("# ") and first.endswith(".py"), first
    return {"pyproject.toml": toml, first[2:]: module}


@pytest.fixture(scope="module")
def doc_storage_site(tmp_path_factory) -> Path:
    return install_package(tmp_path_factory.mktemp("docstorage"), storage_example())


class Recorder:
    """A storage that keeps what it is given, to compare with the doc's storage."""

    def __init__(self) -> None:
        self.points: list = []

    def write(self, points) -> None:
        self.points.extend(points)

    def close(self) -> None:
        pass


def test_storage_from_the_docs_receives_every_point(doc_storage_site, mosquitto, tmp_path, monkeypatch):
    from mqttrl.conformance import check_storage
    from mqttrl.nodes.telemetry import TelemetryNode, TelemetrySettings, make_storages
    from mqttrl.plugin.manager import get_registry
    from mqttrl.transport.client import BrokerSettings
    from mqttrl.transport.topics import Topics
    from mqttrl.wire import encode_json

    monkeypatch.syspath_prepend(str(doc_storage_site))
    monkeypatch.delenv("MQTTRL_LOAD_PLUGINS", raising=False)
    get_registry.cache_clear()
    try:
        reg = get_registry()
        assert reg.storages["jsonl"].plugin == "jsonl"
        assert all(r.ok for r in check_storage(reg.storage("jsonl"), {"path": str(tmp_path / "check.jsonl")}))

        path = tmp_path / "points.jsonl"
        (jsonl,) = make_storages(["jsonl"], {"jsonl": {"path": str(path)}})
        recorder = Recorder()
        run = "doc-storage"
        node = TelemetryNode(
            BrokerSettings(url=mosquitto.url), run, [jsonl, recorder], TelemetrySettings(interval_s=0.3)
        )
        thread = threading.Thread(target=node.run, daemon=True)
        thread.start()
        assert node.client.wait_connected(15)
        time.sleep(0.3)
        tp = Topics(run)
        pub = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="doc-storage-pub", protocol=mqtt.MQTTv5)
        pub.connect("127.0.0.1", mosquitto.port)
        pub.loop_start()
        try:
            for i in range(20):
                episode = {"return": 1.5 * i, "length": i + 1, "model_version": 3, "env_steps": 10 * i}
                pub.publish(tp.episodes("w0"), encode_json(episode), qos=1).wait_for_publish(5)
            metrics = {"updates": 7, "model_version": 3, "samples": 100, "train": {"loss": 0.5}}
            pub.publish(tp.learner_metrics, encode_json(metrics), qos=1).wait_for_publish(5)
            deadline = time.monotonic() + 20
            while node.episodes < 20 and time.monotonic() < deadline:
                time.sleep(0.1)
            assert node.episodes == 20
            time.sleep(1.0)  # a few aggregate intervals
        finally:
            node.stop()
            thread.join(30)
            pub.loop_stop()
        assert not thread.is_alive()
    finally:
        get_registry.cache_clear()
        sys.modules.pop("mqttrl_jsonl", None)

    got = [json.loads(line) for line in path.read_text().splitlines()]
    want = [
        {
            "measurement": p.measurement,
            "tags": dict(p.tags),
            "time": p.time,
            "fields": {k: v for k, v in p.fields.items() if v is not None},
        }
        for p in recorder.points
    ]
    assert len(got) == len(want) > 20 and got == want  # every point telemetry wrote, in order, closed and flushed
    episodes = [g for g in got if g["measurement"] == "episode"]
    assert [e["fields"]["return"] for e in episodes] == [1.5 * i for i in range(20)]
    assert all(e["tags"] == {"run": run, "worker": "w0"} for e in episodes)
    assert {"episode", "episode_stats", "learner", "worker", "telemetry"} <= {g["measurement"] for g in got}


def algorithm_example() -> tuple[dict[str, str], str]:
    """The linq algorithm package and its run config exactly as docs/plugins.md shows them."""
    text = doc()
    section = text[text.index("#### A whole algorithm in one file") :]
    module = code_blocks(section, "python")[0]
    pyproject, config = code_blocks(section, "toml")[:2]
    assert module.startswith("# mqttrl_linq.py") and "# linq_cartpole.toml" in config
    return {"pyproject.toml": pyproject, "mqttrl_linq.py": module}, config


@pytest.mark.e2e
def test_the_algorithm_from_the_docs_passes_check_plugin_and_trains(tmp_path):
    """A third-party algorithm written from the page alone (only ``mqttrl.plugin`` and ``hookimpl``):
    installed as a package, ``mqttrl check-plugin linq`` passes, ``mqttrl train`` trains it."""
    import os
    import subprocess

    files, config = algorithm_example()
    site = install_package(tmp_path / "linq", files)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))}
    env.pop("MQTTRL_LOAD_PLUGINS", None)
    mqttrl_cli = str(Path(sys.executable).parent / "mqttrl")
    check = subprocess.run([mqttrl_cli, "check-plugin", "linq"], capture_output=True, text=True, env=env, timeout=300)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "FAIL" not in check.stdout and "ok    train_step" in check.stdout
    (tmp_path / "linq_cartpole.toml").write_text(config)
    run_dir = tmp_path / "run"
    train = subprocess.run(
        [mqttrl_cli, "train", str(tmp_path / "linq_cartpole.toml"), "--run-dir", str(run_dir), "--no-progress"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        cwd=tmp_path,
    )
    assert train.returncode == 0, train.stdout[-3000:] + train.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["algorithm"] == "linq" and summary["updates"] > 100 and summary["episodes"] > 10, summary


def section(title: str) -> str:
    """The page from the heading ``title`` to the next heading of the same or a higher level
    (lines inside code blocks are no headings: ``# dial.py``)."""
    lines = doc()[doc().index(title) :].splitlines(keepends=True)
    level, fenced = len(title.split(" ")[0]), False
    for i, line in enumerate(lines[1:], 1):
        fenced ^= line.startswith("```")
        if not fenced and re.match(rf"#{{1,{level}}} ", line):
            return "".join(lines[:i])
    return "".join(lines)


def cli_env(site: Path | None = None) -> dict[str, str]:
    import os

    path = [str(site)] if site is not None else []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [*path, os.environ.get("PYTHONPATH")]))}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env.pop("MQTTRL_LOAD_PLUGINS", None)
    return env


def test_every_optional_algorithm_field_is_documented():
    """Each optional ``AlgorithmInfo`` field is on the page as ``info.<field>`` (with_epsilon and
    action_spaces were not)."""
    import attrs

    from mqttrl.plugin.algorithm import AlgorithmInfo

    text = doc()
    optional = [f.name for f in attrs.fields(AlgorithmInfo) if f.default is not attrs.NOTHING]
    missing = [name for name in optional if f"`info.{name}" not in text]
    assert optional and not missing, f"docs/plugins.md does not document AlgorithmInfo fields {missing}"
    assert "mqttrl check-plugin --config CONFIG" in text


def sync_example() -> tuple[dict[str, str], str, str]:
    """The linpg package, its run config and its commands exactly as docs/plugins.md shows them."""
    part = section("#### A sync-mode algorithm")
    (module,) = code_blocks(part, "python")
    pyproject, config = code_blocks(part, "toml")
    (commands,) = code_blocks(part, "bash")
    assert module.startswith("# mqttrl_linpg.py") and config.startswith("# linpg_cartpole.toml")
    return {"pyproject.toml": pyproject, "mqttrl_linpg.py": module}, config, commands


def test_the_sync_example_states_the_contract():
    from mqttrl.plugin.algorithm import SyncActor, SyncLearner

    part = " ".join(section("#### A sync-mode algorithm").split())
    for phrase in ("`pending()` at 0", "`take()` once", "`discard()`", "`train_round(batches)`", "never none"):
        assert phrase in part, phrase
    files, _, _ = sync_example()
    namespace: dict = {}
    exec(compile(files["mqttrl_linpg.py"], "docs/plugins.md", "exec"), namespace)
    actor = namespace["LinPGActor"]
    assert all(callable(getattr(actor, m, None)) for m in ("discard", "pending", "take", "truncate"))
    assert {"discard", "train_round"} <= set(vars(SyncActor)) | set(vars(SyncLearner))


@pytest.mark.e2e
def test_the_sync_algorithm_from_the_docs_passes_check_plugin_and_trains(tmp_path):
    """The sync-mode example, installed from the page alone: ``mqttrl check-plugin linpg`` passes
    (train_round and discard among its checks), ``mqttrl train`` trains it in rounds with two
    workers, and the end of the run does not offer an export it cannot do."""
    import subprocess

    files, config, commands = sync_example()
    assert "mqttrl check-plugin linpg" in commands and "mqttrl train linpg_cartpole.toml" in commands
    env = cli_env(install_package(tmp_path / "linpg", files))
    check = subprocess.run(["mqttrl", "check-plugin", "linpg"], capture_output=True, text=True, env=env, timeout=300)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "FAIL" not in check.stdout and "ok    train_round" in check.stdout and "ok    discard" in check.stdout
    (tmp_path / "linpg_cartpole.toml").write_text(config)
    run_dir = tmp_path / "run"
    train = subprocess.run(
        ["mqttrl", "train", "linpg_cartpole.toml", "--run-dir", str(run_dir), "--no-progress"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        cwd=tmp_path,
    )
    assert train.returncode == 0, train.stdout[-3000:] + train.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["algorithm"] == "linpg" and summary["updates"] >= 5 and summary["episodes"] > 10, summary
    rounds = [json.loads(line) for line in (run_dir / "rounds.jsonl").read_text().splitlines()]
    assert len(rounds) >= 5 and all(len(r["batch_versions"]) == 1 for r in rounds)
    assert any(len(r["workers"]) == 2 for r in rounds)
    [next_line] = [line for line in train.stdout.splitlines() if line.startswith("next:")]
    assert "mqttrl enjoy" in next_line and "export" not in next_line


def test_the_module_env_from_the_docs_runs_as_written(tmp_path):
    """``dial.py`` as the page shows it (with its gym.register), checked by the page's own command."""
    import subprocess

    part = section("### Real-time games")
    [module] = [b for b in code_blocks(part, "python") if b.startswith("# dial.py")]
    (tmp_path / "dial.py").write_text(module)
    [command] = [b.strip() for b in code_blocks(part, "bash") if "dial:Dial-v0" in b]
    assert command == "PYTHONPATH=. mqttrl check-plugin dial:Dial-v0"
    env = cli_env()
    env.pop("PYTHONPATH", None)
    out = subprocess.run(["bash", "-c", command], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "ok    env dial:Dial-v0" in out.stdout and "FAIL" not in out.stdout
    assert "env dial:Dial-v0: pause/resume" in out.stdout


def test_the_listing_example_is_what_mqttrl_plugins_prints():
    import subprocess

    part = section("## Listing and choosing plugins")
    (shown,) = code_blocks(part, "json")
    env = {**cli_env(), "MQTTRL_LOAD_PLUGINS": "dqn"}
    out = subprocess.run(["mqttrl", "plugins"], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [json.loads(shown)]
