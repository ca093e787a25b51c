"""Minari in and out (mqttrl/demos/minari_io.py, `mqttrl record --to-minari / --minari`): a dataset
goes to Minari and comes back the same; a Minari dataset Minari cannot open is one line."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("minari")

from mqttrl.cli import main
from mqttrl.demos import DatasetError, read_dataset
from mqttrl.demos.minari_io import from_minari


@pytest.fixture(autouse=True)
def minari_home(tmp_path, monkeypatch):
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    return tmp_path / "minari"


def expert(obs):
    return int(obs[2] + 0.5 * obs[3] > 0)


def test_a_dataset_goes_to_minari_and_comes_back_the_same(tmp_path, minari_home, capsys):
    out = tmp_path / "demos"
    main(["record", str(out), "--env", "CartPole-v1", "--policy", "test_demos_minari:expert", "--episodes", "2", "--max-steps", "30", "--to-minari", "mqttrl/cartpole/expert-v0"])  # fmt: skip
    assert (minari_home / "mqttrl" / "cartpole" / "expert-v0" / "data").is_dir()
    import minari

    md = minari.load_dataset("mqttrl/cartpole/expert-v0")
    assert md.total_episodes == 2 and md.total_steps == 60 and md.env_spec.id == "CartPole-v1"
    back_dir = tmp_path / "back"
    main(["record", str(back_dir), "--minari", "mqttrl/cartpole/expert-v0"])
    orig, back = read_dataset(out), read_dataset(back_dir)
    assert back.env_id == "CartPole-v1" and back.action_space == gym.spaces.Discrete(2)
    for a, b in zip(orig.episodes, back.episodes, strict=True):
        np.testing.assert_array_equal(a.obs, b.obs)
        np.testing.assert_array_equal(a.actions, b.actions)
        np.testing.assert_array_equal(a.rewards, b.rewards)
        assert (a.terminated, a.truncated) == (b.terminated, b.truncated)
        assert b.played_by == "minari:mqttrl/cartpole/expert-v0"


def test_a_corrupt_minari_dataset_is_one_line(tmp_path, minari_home):
    from mqttrl.demos import DatasetWriter, Episode
    from mqttrl.demos.minari_io import to_minari

    w = DatasetWriter(tmp_path / "d", "CartPole-v1", gym.make("CartPole-v1").observation_space, gym.spaces.Discrete(2))
    w.add(Episode(np.zeros((4, 4), np.float32), np.zeros(3, np.int64), np.ones(3, np.float32), True, False))
    folder = to_minari(read_dataset(tmp_path / "d"), "mqttrl/broken/x-v0")
    h5 = next((folder / "data").glob("*.hdf5"))
    h5.write_bytes(h5.read_bytes()[:200])
    with pytest.raises(DatasetError) as e:
        from_minari(str(folder), tmp_path / "out")
    assert "\n" not in str(e.value) and "Minari cannot" in str(e.value)
