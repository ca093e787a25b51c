"""mqttrl export: a policy's network as ONNX (run here with onnxruntime) or TorchScript gives the numpy
policy's outputs within 1e-5, for every built-in head and torso; `mqttrl export`'s errors are one line."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys

import numpy as np
import pytest
import torch
from helpers.paths import REPO
from helpers.policy_runs import CASES, SMALL, VERSION, greedy, make_run
from helpers.procs import node_env

import mqttrl
from mqttrl import cli
from mqttrl.export import export_policy, run_exported

torch.set_num_threads(1)
ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    made = {}
    for name, (algo, env_id, params) in CASES.items():
        made[name] = make_run(tmp_path_factory.mktemp(name), algo, env_id, **{**SMALL[algo], **params})
    return made


def onnx_outputs(path, obs: np.ndarray) -> dict[str, np.ndarray]:
    """What any ONNX Runtime program computes: feed ``obs``, read the outputs by name (onnxruntime here)."""
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, {"obs": obs})))


def assert_within(got: dict, want: dict, atol: float = 1e-5) -> None:
    assert list(got) == list(want)  # the same outputs, in the forward's order
    for k in want:
        assert got[k].shape == want[k].shape, k
        np.testing.assert_allclose(got[k], want[k], rtol=0, atol=atol, err_msg=k)


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.slow
def test_onnx_equals_the_numpy_policy(runs, case, tmp_path):
    run = runs[case]
    policy = mqttrl.load_policy(run.root)
    path = export_policy(policy, tmp_path / "policy.onnx", "onnx")
    obs = run.observations(64, seed=2)
    want = policy.outputs(obs)
    got = onnx_outputs(path, obs)
    assert_within(got, want)
    # the greedy actions a program derives from the outputs are the policy's
    np.testing.assert_allclose(greedy(run, got), policy.predict(obs), atol=1e-5)
    assert_within(onnx_outputs(path, obs[:1]), policy.outputs(obs[:1]))  # any batch size, 1 included

    model = onnx.load(str(path))
    (inp,) = model.graph.input
    assert inp.name == "obs"
    assert onnx.helper.tensor_dtype_to_np_dtype(inp.type.tensor_type.elem_type) == run.obs_space.dtype
    meta = {p.key: json.loads(p.value) for p in model.metadata_props}
    assert meta["mqttrl.algorithm"] == run.config.algorithm.name and meta["mqttrl.model_version"] == VERSION
    assert meta["mqttrl.outputs"] == list(want) and meta["mqttrl.obs_shape"] == list(run.obs_space.shape)
    assert meta["mqttrl.run"] == run.config.run


@pytest.mark.parametrize("case", ["dqn-c51-noisy", "dqn-cnn", "ppo-box"])
def test_torchscript_equals_the_numpy_policy(runs, case, tmp_path):
    run = runs[case]
    policy = mqttrl.load_policy(run.checkpoint)
    path = export_policy(policy, tmp_path / "policy.pt", "torchscript")
    obs = run.observations(64, seed=2)
    assert_within(run_exported(path, obs, "torchscript"), policy.outputs(obs))


@pytest.mark.slow
def test_the_noisy_head_exports_its_mean_weights(runs, tmp_path):
    """A noisy head's sigma is in the file's weights, but the exported model uses the mean, as greedy
    acting does: the same outputs every call, equal to the numpy forward's noiseless ones."""
    run = runs["dqn-c51-noisy"]
    policy = mqttrl.load_policy(run.weights)
    assert any(name.endswith("weight_sigma") for name in policy.weights)
    path = export_policy(policy, tmp_path / "noisy.onnx")
    obs = run.observations(16)
    first, second = onnx_outputs(path, obs)["q"], onnx_outputs(path, obs)["q"]
    np.testing.assert_array_equal(first, second)
    noisy_q = policy._forward(obs)["q"]  # a call of the forward samples noise: not what is exported
    assert np.abs(noisy_q - first).max() > 1e-3


def test_an_algorithm_without_export_module_says_it_cannot_be_exported(runs, monkeypatch, tmp_path, capsys):
    import attrs

    from mqttrl.plugin.manager import get_registry

    registered = get_registry().algorithms["dqn"]
    monkeypatch.setattr(registered, "obj", attrs.evolve(registered.obj, export_module=None))
    with pytest.raises(SystemExit) as e:
        cli.main(["export", str(runs["dqn-mlp"].root), "-o", str(tmp_path / "x.onnx")])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 1 and len(err) == 1
    assert "algorithm 'dqn' cannot be exported: its plugin gives no export_module" in err[0]


# ---------------------------------------------------------------- the command


@pytest.mark.slow
def test_export_command_writes_and_checks(runs, tmp_path, capsys):
    run = runs["ppo-discrete"]
    cli.main(["export", str(run.root), "-o", str(tmp_path / "out" / "p.onnx")])
    out = capsys.readouterr().out.splitlines()
    assert (
        out[0]
        == f"exporting {run.checkpoint} (model version {VERSION}, the newest checkpoint: the run has no best model)"
    )
    assert out[1].startswith(f"wrote {tmp_path / 'out' / 'p.onnx'} (onnx): ppo model version {VERSION}")
    assert out[1].endswith("outputs logits, value")
    assert out[2].startswith("checked: equal to the numpy policy within")
    cli.main(["export", str(run.weights), "--format", "torchscript", "-o", str(tmp_path / "p.pt")])
    assert "checked: equal to the numpy policy" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv, code, says",
    [
        (["export", "{tmp}/nope", "-o", "{tmp}/x.onnx"], 2, "no such file or directory; expected a run directory"),
        (["export", "{run}", "--format", "tflite", "-o", "{tmp}/x.onnx"], 2, "--format 'tflite': use one of onnx"),
        (["export", "{tmp}", "-o", "{tmp}/x.onnx"], 2, "holds no mqttrl model"),
    ],
    ids=["missing-path", "unknown-format", "no-model"],
)
def test_export_errors_are_one_line(runs, tmp_path, capsys, argv, code, says):
    argv = [a.format(tmp=tmp_path, run=runs["dqn-mlp"].root) for a in argv]
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == code and len(err) == 1, err
    assert err[0].startswith("mqttrl export: ") and says in err[0]
    assert not (tmp_path / "x.onnx").exists()


BLOCKED = """
import importlib.abc, importlib.machinery, sys

class Missing(importlib.abc.Loader):  # as if not installed: the import fails, find_spec() finds no file
    def create_module(self, spec):
        raise ModuleNotFoundError(f"No module named {spec.name!r}", name=spec.name)

    def exec_module(self, module):
        pass

class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in sys.argv[1].split(","):
            return importlib.machinery.ModuleSpec(name, Missing(), origin=None)

sys.meta_path.insert(0, Block())
from mqttrl.cli import main
main(sys.argv[2:])
"""


@pytest.mark.parametrize(
    "blocked, fmt, says",
    [
        ("onnx", "onnx", "ONNX export needs onnx and onnxscript"),
        ("onnxscript", "onnx", "ONNX export needs onnx and onnxscript"),
        ("torch", "onnx", "exporting a policy needs torch"),
        ("torch", "torchscript", "exporting a policy needs torch"),
    ],
)
@pytest.mark.slow
def test_a_missing_package_is_one_line_naming_the_extra(runs, tmp_path, blocked, fmt, says):
    out = tmp_path / f"p.{fmt}"
    proc = subprocess.run(
        [sys.executable, "-c", BLOCKED, blocked, "export", str(runs["dqn-mlp"].root), "--format", fmt, "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        env=node_env(PYTHONPATH=str(REPO / "tests")),
    )
    err = proc.stderr.strip().splitlines()
    assert proc.returncode == 5 and len(err) == 1, proc.stderr
    assert err[0].startswith("mqttrl export: ") and says in err[0] and "pip install 'mqttrl[" in err[0]
    assert not out.exists()


@pytest.mark.slow
def test_without_onnxruntime_the_file_is_written_and_said_unchecked(runs, tmp_path):
    out = tmp_path / "p.onnx"
    proc = subprocess.run(
        [sys.executable, "-c", BLOCKED, "onnxruntime", "export", str(runs["dqn-qr"].root), "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        env=node_env(PYTHONPATH=str(REPO / "tests")),
    )
    assert proc.returncode == 0, proc.stderr
    assert "not checked against the numpy policy: onnxruntime is not installed" in proc.stdout
    obs = runs["dqn-qr"].observations(8)
    assert_within(onnx_outputs(out, obs), mqttrl.load_policy(runs["dqn-qr"].root).outputs(obs))


def test_export_help_shows_the_defaults(capsys):
    with pytest.raises(SystemExit):
        cli.main(["export", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    for text in ("onnx or torchscript (default: onnx)", "(default: 18)", "(default: compare"):
        assert text in out, text


# ---------------------------------------------------------------- the docs run as written


def code_blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", text, flags=re.S)


def doc_texts() -> dict[str, str]:
    readme = (REPO / "README.md").read_text()
    start = readme.index("### Use your trained agent")
    return {
        "docs/export.md": (REPO / "docs" / "export.md").read_text(),
        "README.md": readme[start : readme.index("\n## ", start)],
    }


@pytest.mark.slow
def test_every_command_and_python_example_in_the_docs_runs(runs, tmp_path, monkeypatch, capsys):
    """docs/export.md and the README's "Use your trained agent", in a folder holding runs/cartpole (a DQN
    CartPole run made here; `mqttrl train` itself is only parsed): every `mqttrl` command runs and exits
    0, every python block runs, in order; `pip install` lines name extras that exist."""
    import shutil
    import tomllib

    pytest.importorskip("moviepy")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")  # --render: a window nobody sees
    # docs/export.md trains with --run-dir runs/cartpole; the README names the run (runs/cartpole-dqn), which
    # means the newest runs/cartpole-dqn-<timestamp>/ that `mqttrl train configs/cartpole_dqn.toml` makes
    for name in ("cartpole", "cartpole-dqn-20261124-000000"):
        shutil.copytree(runs["dqn-mlp"].root, tmp_path / "runs" / name)
        (tmp_path / "runs" / name / "best").mkdir()
        shutil.copy(runs["dqn-mlp"].weights, tmp_path / "runs" / name / "best" / "weights.safetensors")
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    ran = {"mqttrl": 0, "python": 0}
    for doc, text in doc_texts().items():
        for block in code_blocks(text, "bash"):
            for line in block.splitlines():
                command = line.split("  #")[0].strip()
                argv = shlex.split(command)
                if argv[:1] == ["pip"]:
                    for extra in re.findall(r"\.\[([\w,]+)\]", command)[0].split(","):
                        assert extra in extras, f"{doc}: {command}: no extra {extra!r}"
                    continue
                assert argv[0] == "mqttrl", f"{doc}: {command}"
                if argv[1] == "train":  # minutes of training: parsed, not run
                    assert cli.build_parser().parse_args(argv[1:]).config == "configs/cartpole_dqn.toml"
                    continue
                cli.main(argv[1:])  # raises SystemExit on any failure
                ran["mqttrl"] += 1
        for block in code_blocks(text, "python"):
            exec(compile(block, f"{doc} python block", "exec"), {})
            ran["python"] += 1
    out = capsys.readouterr().out
    assert "mean return" in out and "checked: equal to the numpy policy" in out and "return " in out
    assert ran == {"mqttrl": 7, "python": 3}
    assert sorted(p.name for p in (tmp_path / "videos").glob("*.mp4")) == ["dqn-episode-0.mp4", "dqn-episode-1.mp4"]
    assert (tmp_path / "cartpole.onnx").is_file() and (tmp_path / "cartpole.pt").is_file()
