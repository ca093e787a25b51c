"""learner.device: "auto" by default, checked by the config and resolved at learner start with a one-line error."""

from __future__ import annotations

import subprocess
from types import SimpleNamespace

import pytest
from helpers.procs import node_env, script

from mqttrl.config import ConfigError, LearnerConfig, load_config
from mqttrl.nodes.learner.device import describe_device, resolve_device


def fake_torch(cuda: int = 0, built_with_cuda: bool = True, mps: bool = False) -> SimpleNamespace:
    """A stand-in for the torch module: ``cuda`` GPUs visible."""
    return SimpleNamespace(
        cuda=SimpleNamespace(
            is_available=lambda: cuda > 0,
            device_count=lambda: cuda,
            current_device=lambda: 0,
            get_device_name=lambda i: f"Fake GPU {i}",
        ),
        version=SimpleNamespace(cuda="12.4" if built_with_cuda else None),
        backends=SimpleNamespace(mps=SimpleNamespace(is_available=lambda: mps)),
    )


def test_default_is_auto():
    assert LearnerConfig().device == "auto"


@pytest.mark.parametrize("name", ["auto", "cpu", "cuda", "cuda:0", "cuda:12", "mps"])
def test_config_accepts_device_names(name):
    assert load_config(None, [f"learner.device={name}"]).learner.device == name


@pytest.mark.parametrize("name", ["gpu", "CUDA", "cuda:", "cuda:x", "cuda:-1", "cpu:0", "", " cpu", "tpu", "cuda:0:1"])
def test_config_rejects_malformed_device_names(name):
    with pytest.raises(ConfigError, match=r"learner\.device=.*'auto', 'cpu', 'cuda', 'cuda:N'"):
        load_config(None, [f"learner.device={name!r}"])
    with pytest.raises(ConfigError, match=r"learner\.device="):
        resolve_device(name, fake_torch())


def test_cpu_and_auto_without_a_gpu_are_the_cpu():
    torch = fake_torch(cuda=0)
    assert resolve_device("cpu", torch) == "cpu"
    assert resolve_device("auto", torch) == "cpu"
    assert describe_device("cpu", torch) == "cpu"


def test_auto_takes_a_visible_gpu():
    torch = fake_torch(cuda=2)
    assert resolve_device("auto", torch) == "cuda"
    assert resolve_device("cpu", torch) == "cpu"
    assert resolve_device("cuda:1", torch) == "cuda:1"
    assert describe_device("cuda", torch) == "cuda:0 (Fake GPU 0)"
    assert describe_device("cuda:1", torch) == "cuda:1 (Fake GPU 1)"


def test_the_real_torch_resolves_auto():
    torch = pytest.importorskip("torch")
    assert resolve_device("auto") == ("cuda" if torch.cuda.is_available() else "cpu")
    assert resolve_device("cpu") == "cpu"


def test_cuda_on_cpu_only_torch_is_one_clear_line():
    with pytest.raises(ConfigError) as info:
        resolve_device("cuda", fake_torch(cuda=0, built_with_cuda=False))
    assert str(info.value) == (
        "learner.device='cuda' but torch.cuda.is_available() is False (CPU-only torch); use 'auto' or 'cpu'"
    )
    with pytest.raises(ConfigError, match=r"'cuda:0' but torch.cuda.is_available\(\) is False \(no GPU or driver"):
        resolve_device("cuda:0", fake_torch(cuda=0, built_with_cuda=True))


def test_a_gpu_index_torch_does_not_see():
    with pytest.raises(
        ConfigError, match=r"learner.device='cuda:2' but torch sees 2 CUDA devices \(cuda:0 to cuda:1\)"
    ):
        resolve_device("cuda:2", fake_torch(cuda=2))
    with pytest.raises(ConfigError, match=r"learner.device='cuda:1' but torch sees 1 CUDA device \(cuda:0\); use"):
        resolve_device("cuda:1", fake_torch(cuda=1))


def test_mps_must_be_there():
    assert resolve_device("mps", fake_torch(mps=True)) == "mps"
    with pytest.raises(ConfigError, match=r"learner.device='mps' but torch.backends.mps.is_available\(\) is False"):
        resolve_device("mps", fake_torch(mps=False))


@pytest.mark.e2e
@pytest.mark.slow
def test_learner_stops_with_one_line_for_a_device_or_env_it_cannot_use(tmp_path):
    """Through mqttrl-learner: no traceback, one line naming the problem (before any broker is needed)."""
    torch = pytest.importorskip("torch")
    config = tmp_path / "c.toml"
    config.write_text('run = "device-check"\n[env]\nid = "CartPole-v1"\n')
    cases = [
        (
            "env.id=atari/Pnog",
            "mqttrl: config error: atari/Pnog: unknown Atari game 'Pnog'; did you mean atari/Pong?",
            2,
        )
    ]
    if not torch.cuda.is_available():
        cases.append(
            (
                "learner.device=cuda",
                "mqttrl: config error: learner.device='cuda' but torch.cuda.is_available() is False",
                2,
            )
        )
    for override, line, code in cases:
        r = subprocess.run(
            [script("mqttrl-learner"), "--config", str(config), "--set", override, "--run-dir", str(tmp_path / "run")],
            capture_output=True,
            text=True,
            timeout=120,
            env=node_env(),
        )
        assert r.returncode == code, (override, r.stdout, r.stderr)
        assert "Traceback" not in r.stderr, r.stderr
        assert r.stderr.strip().splitlines()[-1].startswith(line), r.stderr
