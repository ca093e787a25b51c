"""Demonstration datasets (mqttrl.demos) and `mqttrl record` from a scripted policy: what is written
reads back whole, and a truncated, corrupt or mismatched dataset is refused with one line."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest

from mqttrl.cli import main
from mqttrl.demos import DatasetError, DatasetWriter, Episode, EpisodeBuilder, check_fits, read_dataset
from mqttrl.demos.spaces import space_from_json, space_to_json

OBS = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
ACT = gym.spaces.Discrete(2)


def cartpole_expert(obs):
    """A scripted CartPole expert (push toward the pole's lean): returns near 500."""
    return int(obs[2] + 0.5 * obs[3] > 0)


def _episode(steps: int = 5, seed: int = 0, played_by: str = "test") -> Episode:
    rng = np.random.default_rng(seed)
    b = EpisodeBuilder(OBS, ACT, played_by)
    b.start(rng.normal(size=4))
    ep = None
    for i in range(steps):
        ep = b.step(int(rng.integers(2)), 1.0, rng.normal(size=4), terminated=i == steps - 1, truncated=False)
    return ep


def _write(tmp_path, n: int = 3):
    w = DatasetWriter(tmp_path / "ds", "CartPole-v1", OBS, ACT)
    for i in range(n):
        w.add(_episode(5 + i, seed=i))
    return tmp_path / "ds"


def test_a_dataset_reads_back_whole(tmp_path):
    path = _write(tmp_path)
    ds = read_dataset(path)
    assert [ep.steps for ep in ds.episodes] == [5, 6, 7]
    ep = ds.episodes[1]
    assert ep.obs.shape == (7, 4) and ep.obs.dtype == np.float32
    assert ep.actions.dtype == np.int64 and ep.rewards.dtype == np.float32
    assert ep.terminated and not ep.truncated and ep.played_by == "test"
    assert ds.returns == [5.0, 6.0, 7.0]
    np.testing.assert_array_equal(ep.obs, _episode(6, seed=1).obs)


def test_spaces_round_trip_through_json():
    for space in (
        OBS,
        gym.spaces.Box(0, 255, (4, 10, 10), np.uint8),
        gym.spaces.Box(np.array([-1.0, 0.0], np.float32), np.array([1.0, 2.0], np.float32), dtype=np.float32),
        gym.spaces.Discrete(5, start=1),
        gym.spaces.MultiDiscrete([3, 4]),
    ):
        d = json.loads(json.dumps(space_to_json(space)))
        assert space_from_json(d) == space


def _one_line(exc: pytest.ExceptionInfo, *words: str) -> str:
    text = str(exc.value)
    assert "\n" not in text
    for w in words:
        assert w in text, text
    return text


def test_a_truncated_episode_file_is_refused_with_one_line(tmp_path):
    path = _write(tmp_path)
    f = path / "episodes" / "000001.safetensors"
    f.write_bytes(f.read_bytes()[:-20])
    with pytest.raises(DatasetError) as e:
        read_dataset(path)
    _one_line(e, "000001.safetensors", "truncated")


def test_a_corrupt_episode_file_is_refused(tmp_path):
    path = _write(tmp_path)
    f = path / "episodes" / "000002.safetensors"
    data = bytearray(f.read_bytes())
    data[-3] ^= 0xFF
    f.write_bytes(bytes(data))
    with pytest.raises(DatasetError) as e:
        read_dataset(path)
    _one_line(e, "000002.safetensors", "corrupt")


def test_garbage_with_a_matching_checksum_is_refused_as_not_safetensors(tmp_path):
    """A file whose manifest entry was rewritten to match (no checksum to hide behind) is parsed and refused."""
    from mqttrl.demos.dataset import _checksum

    path = _write(tmp_path, 1)
    garbage = b"\xff" * 64
    (path / "episodes" / "000000.safetensors").write_bytes(garbage)
    m = json.loads((path / "manifest.json").read_text())
    m["episodes"][0].update(bytes=64, blake2b=_checksum(garbage))
    (path / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(DatasetError) as e:
        read_dataset(path)
    _one_line(e, "000000.safetensors", "not a safetensors file")


def _rewrite_episode(path, arrays):
    """Replace episode 0 by ``arrays`` with a manifest entry that matches its bytes (only the content is wrong)."""
    from safetensors.numpy import save

    from mqttrl.demos.dataset import _checksum

    data = save(arrays)
    (path / "episodes" / "000000.safetensors").write_bytes(data)
    m = json.loads((path / "manifest.json").read_text())
    m["episodes"][0].update(bytes=len(data), blake2b=_checksum(data))
    (path / "manifest.json").write_text(json.dumps(m))


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (lambda a: a.update(obs=a["obs"].astype(np.float64)), ["obs", "dtype float64"]),
        (lambda a: a.update(obs=a["obs"][:, :3].copy()), ["obs", "shape"]),
        (lambda a: a["obs"].__setitem__((2, 1), np.nan), ["obs row 2", "not finite"]),
        (lambda a: a["actions"].__setitem__(1, 7), ["actions row 1", "outside 0..1"]),
        (lambda a: a.update(extra=np.zeros(3, np.float32)), ["holds arrays"]),
        (lambda a: a.update(rewards=a["rewards"] * 2), ["rewards sum to 10.0000", "says 5.0000"]),
    ],
)
def test_bad_contents_are_refused_naming_the_file(tmp_path, change, words):
    path = _write(tmp_path, 1)
    ep = read_dataset(path).episodes[0]
    arrays = {"obs": ep.obs.copy(), "actions": ep.actions.copy(), "rewards": ep.rewards.copy()}
    change(arrays)
    _rewrite_episode(path, arrays)
    with pytest.raises(DatasetError) as e:
        read_dataset(path)
    _one_line(e, "000000.safetensors", *words)


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        (lambda m: m.update(format="other"), ["manifest.json", "format"]),
        (lambda m: m["episodes"][0].update(file="../../etc/passwd"), ["outside episodes/"]),
        (lambda m: m["episodes"][0].update(steps="5"), ["steps", "not int"]),
        (lambda m: m.update(observation_space={"type": "Tuple"}), ["observation_space", "Tuple"]),
        (lambda m: m.update(episodes=[]), ["lists no episodes"]),
    ],
)
def test_a_bad_manifest_is_refused(tmp_path, edit, words):
    path = _write(tmp_path, 1)
    m = json.loads((path / "manifest.json").read_text())
    edit(m)
    (path / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(DatasetError) as e:
        read_dataset(path)
    _one_line(e, *words)


def test_missing_and_unreadable_manifests(tmp_path):
    with pytest.raises(DatasetError) as e:
        read_dataset(tmp_path / "nope")
    _one_line(e, "nope", "no such dataset")
    (tmp_path / "ds").mkdir()
    (tmp_path / "ds" / "manifest.json").write_text('{"format": NaN')
    with pytest.raises(DatasetError) as e:
        read_dataset(tmp_path / "ds")
    _one_line(e, "manifest.json", "not readable JSON")


def test_a_dataset_over_the_size_cap_is_refused_before_reading(tmp_path):
    path = _write(tmp_path)
    with pytest.raises(DatasetError) as e:
        read_dataset(path, max_bytes=100)
    _one_line(e, "manifest.json", "more than the 100 allowed")


def test_appending_needs_the_same_env_and_spaces(tmp_path):
    path = _write(tmp_path, 1)
    with pytest.raises(DatasetError, match="already holds a dataset"):
        DatasetWriter(path, "CartPole-v1", OBS, ACT)
    with pytest.raises(DatasetError, match="action_space"):
        DatasetWriter(path, "CartPole-v1", OBS, gym.spaces.Discrete(3), append=True)
    w = DatasetWriter(path, "CartPole-v1", OBS, ACT, append=True)
    w.add(_episode(4))
    assert [ep.steps for ep in read_dataset(path).episodes] == [5, 4]


def test_check_fits_refuses_another_games_dataset(tmp_path):
    ds = read_dataset(_write(tmp_path, 1))
    check_fits(ds, OBS, ACT)
    with pytest.raises(DatasetError, match="observation space"):
        check_fits(ds, gym.spaces.Box(-1, 1, (8,), np.float32), ACT)


def test_record_from_a_scripted_policy(tmp_path, capsys):
    out = tmp_path / "demos"
    main(["record", str(out), "--env", "CartPole-v1", "--policy", "test_demos:cartpole_expert", "--episodes", "2", "--max-steps", "60"])  # fmt: skip
    ds = read_dataset(out)
    assert len(ds.episodes) == 2 and ds.env_id == "CartPole-v1"
    for i, ep in enumerate(ds.episodes):
        assert ep.steps == 60 and ep.truncated and ep.played_by == "policy:test_demos:cartpole_expert"
        assert ep.seed == i
        # the actions are the expert's on the recorded observations
        np.testing.assert_array_equal(ep.actions, [cartpole_expert(o) for o in ep.obs[:-1]])
    # replaying the actions from the recorded seed gives the recorded observations
    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=0)
    for t, a in enumerate(ds.episodes[0].actions[:10]):
        np.testing.assert_allclose(obs, ds.episodes[0].obs[t], rtol=1e-6)
        obs, *_ = env.step(int(a))


def test_record_refuses_a_bad_policy_with_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main(["record", str(tmp_path / "d"), "--env", "CartPole-v1", "--policy", "test_demos:nothing_here"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "has no 'nothing_here'" in err


def test_record_from_a_trained_run(tmp_path):
    """--from RUN: the run's greedy policy plays the run's env (the env id comes from its config)."""
    pytest.importorskip("torch")
    from helpers.policy_runs import make_run

    from mqttrl.policy import load_policy

    make_run(tmp_path / "run", "dqn", "CartPole-v1")
    main(["record", str(tmp_path / "d"), "--from", str(tmp_path / "run"), "--episodes", "1", "--max-steps", "20"])
    (ep,) = read_dataset(tmp_path / "d").episodes
    assert read_dataset(tmp_path / "d").env_id == "CartPole-v1" and ep.played_by.startswith("run:")
    policy = load_policy(tmp_path / "run")
    np.testing.assert_array_equal(ep.actions, [policy.predict(o) for o in ep.obs[:-1]])


_calls = {"n": 0}


def failing_expert(obs):
    """Plays like cartpole_expert, then fails in its third episode (at its 25th call)."""
    _calls["n"] += 1
    if _calls["n"] > 24:
        raise RuntimeError("the game crashed")
    return cartpole_expert(obs)


def test_a_recording_that_fails_keeps_the_finished_episodes(tmp_path, capsys):
    _calls["n"] = 0
    out = tmp_path / "d"
    with pytest.raises(SystemExit) as e:
        main(["record", str(out), "--env", "CartPole-v1", "--policy", "test_demos:failing_expert", "--episodes", "5", "--max-steps", "10"])  # fmt: skip
    assert e.value.code == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "the game crashed" in err and "2 episodes kept" in err
    assert [ep.steps for ep in read_dataset(out).episodes] == [10, 10]  # whole, and only what was finished
