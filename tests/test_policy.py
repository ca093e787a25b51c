"""mqttrl.load_policy and `mqttrl enjoy`: a trained policy acts in numpy as the learner's network does,
from a run directory, a checkpoint or a weights file, in a process where torch cannot be imported."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from helpers.paths import REPO
from helpers.policy_runs import CASES, SMALL, VERSION, greedy, make_run
from helpers.procs import node_env, script
from safetensors.numpy import load_file

import mqttrl
from mqttrl import cli
from mqttrl.state.checkpoint import CheckpointStore, read_checkpoint
from mqttrl.wire import decode_weights, encode_weights

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    made = {}
    for name, (algo, env_id, params) in CASES.items():
        made[name] = make_run(tmp_path_factory.mktemp(name), algo, env_id, **{**SMALL[algo], **params})
    return made


def assert_same_outputs(got: dict, want: dict, atol: float = 1e-5) -> None:
    assert set(got) == set(want)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=atol, err_msg=k)


# ---------------------------------------------------------------- the policy equals the learner's network


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("source", ["run", "checkpoint", "weights"])
def test_predict_equals_the_learners_network(runs, case, source):
    run = runs[case]
    path = {"run": run.root, "checkpoint": run.checkpoint, "weights": run.weights}[source]
    policy = mqttrl.load_policy(path)
    assert policy.algorithm == run.config.algorithm.name and policy.model_version == VERSION
    assert policy.source.path == (run.weights if source == "weights" else run.checkpoint)
    obs = run.observations(64)
    want = run.torch_outputs(obs)
    assert_same_outputs(policy.outputs(obs), want)
    actions = policy.predict(obs)
    expected = greedy(run, want)
    if run.config.algorithm.name == "dqn" or "logits" in want:
        assert actions.dtype == np.int64 and len(set(expected.tolist())) > 1  # the comparison means something
        np.testing.assert_array_equal(actions, expected)
    else:
        np.testing.assert_allclose(actions, expected, atol=1e-5)
    one = policy.predict(obs[3])  # one observation -> one action, the same as in a batch
    assert np.shape(one) == np.shape(actions[3])
    np.testing.assert_allclose(one, actions[3], atol=1e-6)
    assert run.act_space.contains(np.asarray(one, dtype=run.act_space.dtype))


TORCH_FREE = textwrap.dedent(
    """
    import importlib.abc, json, sys

    class NoTorch(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "torch" or name.startswith("torch."):
                raise ImportError(f"torch is blocked in this process ({name})")

    sys.meta_path.insert(0, NoTorch())
    import numpy as np
    import mqttrl

    assert "mqttrl.policy" not in sys.modules  # `import mqttrl` stays light; load_policy is imported on use
    jobs = json.loads(sys.argv[1])
    out = {}
    for i, (path, obs_file) in enumerate(jobs):
        policy = mqttrl.load_policy(path)
        obs = np.load(obs_file)
        out[f"{i}.actions"] = np.asarray(policy.predict(obs))
        for k, v in policy.outputs(obs).items():
            out[f"{i}.{k}"] = v
        out[f"{i}.source"] = np.array(str(policy.source))
    np.savez(sys.argv[2], **out)
    try:
        import torch  # noqa: F401
    except ImportError:
        pass
    else:
        raise SystemExit("torch was importable")
    print(json.dumps(sorted(m for m in sys.modules if m == "torch" or m.startswith("torch."))))
    """
)


def torch_free(jobs: list[tuple[str, str]], out_file, timeout: float = 300) -> dict[str, np.ndarray]:
    """Runs the jobs (policy path, observations .npy) in a python where torch cannot be imported."""
    proc = subprocess.run(
        [sys.executable, "-c", TORCH_FREE, json.dumps(jobs), str(out_file)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=node_env(PYTHONPATH=str(REPO / "tests")),
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == []  # no torch module was loaded
    with np.load(out_file) as f:
        return {k: f[k] for k in f.files}


def test_policies_load_and_act_where_torch_cannot_be_imported(runs, tmp_path):
    jobs, wants = [], []
    for name, run in runs.items():
        obs = run.observations(32, seed=5)
        np.save(tmp_path / f"{name}.npy", obs)
        for path in (run.root, run.checkpoint, run.weights):
            jobs.append((str(path), str(tmp_path / f"{name}.npy")))
            wants.append(run.torch_outputs(obs) | {"_run": run})
    got = torch_free(jobs, tmp_path / "out.npz")
    for i, want in enumerate(wants):
        run = want.pop("_run")
        assert_same_outputs({k: got[f"{i}.{k}"] for k in want}, want)
        expected = greedy(run, want)
        np.testing.assert_allclose(got[f"{i}.actions"], expected, atol=1e-6, err_msg=jobs[i][0])


# ---------------------------------------------------------------- which model a path names


def test_a_run_directory_plays_its_greedily_judged_best_else_its_newest(runs, tmp_path):
    import shutil

    run = runs["dqn-mlp"]
    root = tmp_path / "run"
    shutil.copytree(run.root, root)
    latest = CheckpointStore(root / "checkpoints").latest()
    assert mqttrl.load_policy(root).source.path == latest
    assert mqttrl.load_policy(root / "checkpoints").source.path == latest
    assert mqttrl.load_policy(latest / "meta.json").source.path == latest  # a file of a checkpoint: the checkpoint

    # checkpoints/best/ (what telemetry judged best, by training returns): its exact weights file, version 9,
    # when asked for; a run directory plays the newest checkpoint (save_named made checkpoints/best the latest)
    tensors, meta = read_checkpoint(latest)
    meta["node"]["version"] = 9
    best = CheckpointStore(root / "checkpoints").save_named("best", tensors, meta)
    w = decode_weights(run.weights.read_bytes())
    (best / "weights.safetensors").write_bytes(encode_weights(9, "dqn", w.run, w.tensors, w.info))
    policy = mqttrl.load_policy(root, which="best")
    assert (policy.source.path, policy.model_version) == (best / "weights.safetensors", 9)
    assert mqttrl.load_policy(best).source.path == best / "weights.safetensors"
    assert mqttrl.load_policy(root).source.path == best  # the newest: the learner state it saved

    # best/weights.safetensors with the best greedy evaluation (`mqttrl train`'s score.json) wins, version 12
    (root / "best").mkdir()
    (root / "best" / "weights.safetensors").write_bytes(encode_weights(12, "dqn", w.run, w.tensors, w.info))
    score = {"score": 500.0, "model_version": 12, "judged_by": "greedy_eval", "episodes": 10}
    (root / "best" / "score.json").write_text(json.dumps(score))
    policy = mqttrl.load_policy(root)
    assert (policy.source.path, policy.model_version) == (root / "best" / "weights.safetensors", 12)
    assert policy.config.run == run.config.run  # the run's config.json, two folders up


def test_a_checkpoint_is_read_without_its_replay(runs, tmp_path):
    """The policy's tensors come out of the checkpoint's learner state (online.*), nothing else is read."""
    run = runs["dqn-mlp"]
    names = set(load_file(str(run.checkpoint / "state.safetensors")))
    assert any(n.startswith("algo/target.") for n in names) and "algo/rng.torch" in names
    policy = mqttrl.load_policy(run.checkpoint)
    assert set(policy.weights) == {n[len("algo/online.") :] for n in names if n.startswith("algo/online.")}


# ---------------------------------------------------------------- a plugin's own algorithm


@pytest.mark.parametrize("case", ["dqn-c51-noisy", "ppo-discrete"])
def test_an_algorithm_without_weights_from_checkpoint_reads_it_through_its_learner(runs, case, monkeypatch):
    """A plugin that gives no weights_from_checkpoint: its learner (torch here) loads the checkpoint and
    exports the weights; the policy is the same as through the built-ins' numpy hook."""
    import attrs

    from mqttrl.plugin.manager import get_registry

    run = runs[case]
    registered = get_registry().algorithms[run.config.algorithm.name]
    monkeypatch.setattr(registered, "obj", attrs.evolve(registered.obj, weights_from_checkpoint=None))
    obs = run.observations(32)
    assert_same_outputs(mqttrl.load_policy(run.checkpoint).outputs(obs), run.torch_outputs(obs))


# ---------------------------------------------------------------- bare weights and errors


def test_a_bare_weights_file_needs_the_spaces(runs, tmp_path):
    run = runs["dqn-c51-noisy"]
    bare = tmp_path / "weights.safetensors"
    bare.write_bytes(run.weights.read_bytes())
    with pytest.raises(ValueError, match="no run config beside it.*observation_space= and action_space="):
        mqttrl.load_policy(bare)
    policy = mqttrl.load_policy(bare, observation_space=run.obs_space, action_space=run.act_space)
    assert policy.config is None
    obs = run.observations(32)
    np.testing.assert_array_equal(policy.predict(obs), greedy(run, run.torch_outputs(obs)))  # the info's head
    with pytest.raises(ValueError, match="no run config was found"):
        policy.make_env()


@pytest.mark.parametrize(
    "make, says",
    [
        (lambda d: d / "missing", "no such file or directory; expected a run directory"),
        (lambda d: d, "holds no mqttrl model; expected"),
        (lambda d: (d / "config.json").write_text("{}") and d, "is a run directory without a model yet"),
        (lambda d: (d / "w.safetensors").write_bytes(b"\x00" * 64) and d / "w.safetensors", "not an mqttrl weights"),
        (lambda d: (d / "meta.json").write_text("[]") and (d / "state.safetensors").write_bytes(b"x") and d, "not an"),
    ],
    ids=["missing", "empty-dir", "run-without-model", "garbage-weights", "bad-checkpoint"],
)
def test_bad_paths_are_one_clear_line(tmp_path, make, says):
    path = make(tmp_path)
    with pytest.raises((ValueError, FileNotFoundError)) as e:
        mqttrl.load_policy(path)
    assert says in str(e.value) and "\n" not in str(e.value)


def test_weights_beside_another_runs_config_are_refused(runs, tmp_path):
    import shutil

    shutil.copy(runs["ppo-discrete"].root / "config.json", tmp_path / "config.json")
    shutil.copy(runs["dqn-mlp"].weights, tmp_path / "weights.safetensors")
    with pytest.raises(ValueError, match="put the run's own config.json next to the weights file"):
        mqttrl.load_policy(tmp_path / "weights.safetensors")


def test_weights_for_other_spaces_and_bad_observations_are_refused(runs):
    run = runs["dqn-mlp"]
    with pytest.raises(ValueError, match="do not fit"):
        mqttrl.load_policy(
            run.weights, observation_space=gym.spaces.Box(-1, 1, (5,), np.float32), action_space=run.act_space
        )
    policy = mqttrl.load_policy(run.weights)
    with pytest.raises(ValueError, match=r"shape \(3,\): this policy takes one observation of shape \(4,\)"):
        policy.predict(np.zeros(3, np.float32))


def test_an_unknown_algorithm_names_the_installed_ones(runs, tmp_path):
    w = decode_weights(runs["dqn-mlp"].weights.read_bytes())
    f = tmp_path / "weights.safetensors"
    f.write_bytes(encode_weights(1, "nosuchalgo", w.run, w.tensors, w.info))
    with pytest.raises(
        ValueError, match=r"algorithm 'nosuchalgo', which no installed plugin registers \(installed: .*dqn"
    ):
        mqttrl.load_policy(f, observation_space=runs["dqn-mlp"].obs_space, action_space=runs["dqn-mlp"].act_space)


# ---------------------------------------------------------------- acting stochastically


def test_dqn_stochastic_actions_follow_epsilon(runs):
    run = runs["dqn-mlp"]
    obs = np.repeat(run.observations(1), 400, axis=0)
    greedy_action = mqttrl.load_policy(run.weights).predict(obs[0])
    random_policy = mqttrl.load_policy(run.weights, epsilon=1.0, seed=1)
    share = float(np.mean(random_policy.predict(obs, deterministic=False)[0] == greedy_action))
    assert 0.4 < share < 0.6  # epsilon 1: uniform over 2 actions
    assert (random_policy.predict(obs) == greedy_action).all()  # deterministic stays greedy
    never = mqttrl.load_policy(run.weights, epsilon=0.0)
    assert (never.predict(obs, deterministic=False)[0] == greedy_action).all()
    with pytest.raises(ValueError, match="epsilon= is for algorithms that explore epsilon-greedily"):
        mqttrl.load_policy(runs["ppo-discrete"].weights, epsilon=0.1)


def test_noisy_dqn_explores_with_its_noise_and_acts_greedily_with_its_mean(runs):
    run = runs["dqn-c51-noisy"]
    policy = mqttrl.load_policy(run.weights, epsilon=1.0)  # epsilon plays no part with a noisy head
    obs = run.observations(200)
    greedy_actions = policy.predict(obs)
    sampled, _ = policy.predict(obs, deterministic=False)
    assert 0.0 < np.mean(sampled != greedy_actions) < 0.5  # the noise changes some actions, not most
    np.testing.assert_array_equal(policy.predict(obs), greedy_actions)


def test_ppo_stochastic_actions_are_samples_of_the_policy(runs):
    run = runs["ppo-discrete"]
    policy = mqttrl.load_policy(run.weights, seed=4)
    obs = run.observations(1)
    logits = policy.outputs(obs)["logits"][0].astype(np.float64)
    p1 = float(np.exp(logits[1]) / np.exp(logits).sum())
    draws, _ = policy.predict(np.repeat(obs, 4000, axis=0), deterministic=False)
    assert abs(draws.mean() - p1) < 4 * np.sqrt(p1 * (1 - p1) / 4000) + 1e-3
    box = mqttrl.load_policy(runs["ppo-box"].weights)
    acts, _ = box.predict(np.repeat(runs["ppo-box"].observations(1), 200, axis=0), deterministic=False)
    assert acts.shape == (200, 1) and len(np.unique(acts)) > 100
    assert (acts >= -2).all() and (acts <= 2).all()


# ---------------------------------------------------------------- playing: Policy.play and `mqttrl enjoy`


def test_play_yields_each_episodes_return(runs):
    policy = mqttrl.load_policy(runs["dqn-mlp"].root)
    env = policy.make_env()
    episodes = list(policy.play(env, 3, seed=10))
    env.close()
    assert len(episodes) == 3
    assert all(ret == steps and steps >= 8 for ret, steps in episodes)  # CartPole: +1 per step


def test_enjoy_prints_every_episode_and_the_mean(runs, capsys):
    run = runs["dqn-mlp"]
    cli.main(["enjoy", str(run.root), "--episodes", "3", "--seed", "10"])
    lines = capsys.readouterr().out.splitlines()
    policy = mqttrl.load_policy(run.root)
    env = policy.make_env()
    want = [ret for ret, _ in policy.play(env, 3, seed=10)]
    env.close()
    assert (
        lines[0]
        == f"playing {run.checkpoint} (model version {VERSION}, the newest checkpoint: the run has no best model)"
    )
    assert lines[1] == "dqn policy in env CartPole-v1"
    assert lines[2:5] == [f"episode {i}: return {r:.2f}, {int(r)} steps" for i, r in enumerate(want, 1)]
    assert lines[5].startswith(f"mean return {np.mean(want):.2f} over 3 episodes")


def test_enjoy_records_every_episode_as_a_video(runs, tmp_path, capsys):
    pytest.importorskip("moviepy")
    run = runs["ppo-box"]
    cli.main(["enjoy", str(run.weights), "--episodes", "2", "--max-steps", "15", "--video", str(tmp_path / "v")])
    out = capsys.readouterr().out
    assert "episode 2: return" in out and "15 steps" in out
    videos = sorted(p.name for p in (tmp_path / "v").glob("*.mp4"))
    assert videos == ["ppo-episode-0.mp4", "ppo-episode-1.mp4"]
    assert all((tmp_path / "v" / v).stat().st_size > 1000 for v in videos)


@pytest.mark.parametrize(
    "argv, code, says",
    [
        (["enjoy", "{tmp}/nope"], 2, "no such file or directory"),
        (["enjoy", "{tmp}"], 2, "holds no mqttrl model"),
        (["enjoy", "{bare}"], 2, "no run config beside it"),
    ],
    ids=["missing", "no-model", "no-config"],
)
def test_enjoy_errors_are_one_line(runs, tmp_path, capsys, argv, code, says):
    bare = tmp_path / "bare" / "weights.safetensors"
    bare.parent.mkdir()
    bare.write_bytes(runs["dqn-mlp"].weights.read_bytes())
    argv = [a.format(tmp=tmp_path / "empty", bare=bare) for a in argv]
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == code and len(err) == 1, err
    assert err[0].startswith("mqttrl enjoy: ") and says in err[0]


def test_enjoy_help_shows_the_defaults(capsys):
    with pytest.raises(SystemExit):
        cli.main(["enjoy", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    for text in ("--episodes N episodes to play (default: 5)", "(default: 0)", "(default: no video)"):
        assert text in out, text


# ---------------------------------------------------------------- end to end: a real run, then no torch


@pytest.mark.e2e
@pytest.mark.slow
def test_a_trained_run_acts_without_torch_as_the_learners_network(tmp_path):
    """`mqttrl train` (embedded broker, learner, worker, a few seconds), then the run's policy, loaded in a
    process that cannot import torch, gives the greedy actions of the learner's own network: restored
    from the run's checkpoint by the learner's load_state_dict, and loaded with the run's best weights."""
    run_dir = tmp_path / "run"
    argv = [script("mqttrl"), "train", str(REPO / "configs" / "cartpole_dqn.toml"), "--run-dir", str(run_dir)]
    argv += ["--no-progress", "--workers", "1", "--set", "train.max_seconds=12", "--set", "train.eval_every_s=2"]
    argv += ["--set", "train.target_return=10000", "--set", "algorithm.learning_starts=200"]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=node_env())
    assert out.returncode == 3, out.stdout + out.stderr  # the budget ran out, as asked
    checkpoint = CheckpointStore(run_dir / "checkpoints").latest()
    assert checkpoint is not None and (run_dir / "best" / "weights.safetensors").is_file()

    from mqttrl.config import load_config
    from mqttrl.plugin.manager import get_registry
    from mqttrl.state.torch_state import load_module

    registry = get_registry()
    config = load_config(run_dir / "config.json", [], lambda n: registry.algorithm(n).params)
    env = gym.make("CartPole-v1")
    obs_list, (o, _) = [], env.reset(seed=0)
    rng = np.random.default_rng(0)
    while len(obs_list) < 300:  # states of the game, and wider ones
        obs_list.append(o)
        o, _, term, trunc, _ = env.step(int(rng.integers(2)))
        if term or trunc:
            o, _ = env.reset()
    obs = np.concatenate([np.stack(obs_list), rng.normal(0, 1.5, (100, 4))]).astype(np.float32)
    np.save(tmp_path / "obs.npy", obs)

    def learner_actions(source: str) -> np.ndarray:
        """The learner's online network (torch), restored as the learner restores itself from a checkpoint,
        or loaded with a weights file's tensors."""
        learner = registry.algorithm("dqn").make_learner(
            config.algorithm.params, env.observation_space, env.action_space, "cpu", 0
        )
        if source.endswith(".safetensors"):
            with open(source, "rb") as f:
                load_module(learner.online, decode_weights(f.read()).tensors)
        else:
            tensors, meta = read_checkpoint(Path(source))
            learner.load_state_dict({k[5:]: v for k, v in tensors.items() if k.startswith("algo/")}, meta["algo"])
        with torch.no_grad():
            return learner.online(torch.from_numpy(obs)).argmax(dim=1).numpy()

    jobs = [(str(run_dir / "checkpoints"), str(tmp_path / "obs.npy")), (str(run_dir), str(tmp_path / "obs.npy"))]
    got = torch_free(jobs, tmp_path / "out.npz")
    # the run directory and its checkpoints folder alike: the best greedy evaluation
    assert str(got["0.source"]) == str(run_dir / "best" / "weights.safetensors")
    assert str(got["1.source"]) == str(run_dir / "best" / "weights.safetensors")
    for i in (0, 1):
        want = learner_actions(str(got[f"{i}.source"]))
        assert len(set(want.tolist())) == 2  # both actions occur: the comparison means something
        np.testing.assert_array_equal(got[f"{i}.actions"], want)

    # and as a user runs it: enjoy prints the episodes and the mean; export writes a checked ONNX file
    enjoy = subprocess.run(
        [script("mqttrl"), "enjoy", str(run_dir), "--episodes", "2"], capture_output=True, text=True, timeout=120
    )
    assert enjoy.returncode == 0, enjoy.stderr
    assert "episode 2: return" in enjoy.stdout and "mean return" in enjoy.stdout
    export = subprocess.run(
        [script("mqttrl"), "export", str(run_dir), "-o", str(tmp_path / "p.onnx")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert export.returncode == 0, export.stderr
    assert "checked: equal to the numpy policy" in export.stdout
