"""docs/deployment.md and docs/windows.md say what runs as written: the runs their commands join are
shipped configs' runs, a central inference server they start is one the workers use, the learner's
``--set`` loads, telemetry's output folder is named, and every ``python -m build`` has ``build``
installed first."""

from __future__ import annotations

import re
import shlex
import tomllib

from helpers.paths import REPO

from mqttrl.cli.common import load

DEPLOYMENT, WINDOWS = REPO / "docs" / "deployment.md", REPO / "docs" / "windows.md"


def shipped_runs() -> set[str]:
    return {tomllib.loads(p.read_text())["run"] for p in (REPO / "configs").glob("*.toml")}


def code_blocks(text: str) -> list[str]:
    return re.findall(r"```[a-z]*\n(.*?)```", text, flags=re.S)


def test_every_run_the_pages_join_is_a_shipped_configs():
    runs = shipped_runs()
    for page in (DEPLOYMENT, WINDOWS):
        named = set(re.findall(r"--run ([A-Za-z0-9_.-]+)", page.read_text())) - {"NAME"}
        assert named and named <= runs, f"{page.name}: --run {sorted(named - runs)} is no configs/*.toml run"


def test_the_inference_server_is_one_the_workers_use():
    """A block that starts ``mqttrl inference`` has its learner set ``worker.inference=remote``,
    and that learner command loads as written."""
    blocks = [b for b in code_blocks(DEPLOYMENT.read_text()) if "mqttrl inference " in b]
    assert blocks, "docs/deployment.md starts no inference server"
    for block in blocks:
        [learner] = [line for line in block.splitlines() if line.startswith("mqttrl-learner ")]
        argv = shlex.split(learner)
        overrides = [argv[i + 1] for i, a in enumerate(argv) if a == "--set"]
        assert "worker.inference=remote" in overrides, learner
        config = argv[argv.index("--config") + 1]
        assert load(str(REPO / config), overrides).worker.inference == "remote"


def test_the_page_says_where_telemetry_writes(tmp_path, monkeypatch):
    from mqttrl.nodes.telemetry import make_storages

    text = " ".join(DEPLOYMENT.read_text().split())
    assert "writes into `telemetry/` in the directory `mqttrl-telemetry` was started from" in text
    monkeypatch.chdir(tmp_path)
    (files,) = make_storages(["files"], {})  # what mqttrl-telemetry makes without --storage
    files.close()
    assert (tmp_path / "telemetry").is_dir()


def test_the_screen_extra_is_named_not_pip_install_xlib():
    text = DEPLOYMENT.read_text()
    assert "pip install 'mqttrl[screen]'" in text and "python-xlib" in text


def test_build_is_installed_before_it_is_run():
    text = WINDOWS.read_text()
    found = list(re.finditer(r"python -m build", text))
    assert found
    for m in found:
        assert "pip install build" in text[max(0, m.start() - 120) : m.start()], m.start()
