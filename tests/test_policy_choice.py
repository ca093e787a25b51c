"""Which model a path names, and why (mqttrl.policy.source): every path a user would try loads, a run
directory means its best model only when a greedy evaluation judged it (else its newest checkpoint),
the choice is printed; predict answers Stable-Baselines3's call shape; every bad path is one line."""

from __future__ import annotations

import json
import logging
import shutil

import numpy as np
import pytest
import torch
from helpers.policy_runs import SMALL, VERSION, make_run

import mqttrl
from mqttrl import cli
from mqttrl.policy import PolicyLoadError
from mqttrl.state.checkpoint import CheckpointStore, read_checkpoint
from mqttrl.wire import decode_weights, encode_weights

torch.set_num_threads(1)

#: the model versions of the learner-and-workers run below: telemetry's best, then the final checkpoint
BEST_VERSION, FINAL_VERSION = 5, 9


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    return make_run(tmp_path_factory.mktemp("dqn"), "dqn", "CartPole-v1", **SMALL["dqn"])


def learner_run(made, root):
    """A learner-and-workers run as it is left: telemetry's best (``checkpoints/best/``, judged by
    training returns, version 5) saved before the final checkpoint (``ckpt-...20``, version 9)."""
    shutil.copytree(made.root, root)
    store = CheckpointStore(root / "checkpoints")
    tensors, meta = read_checkpoint(store.latest())
    w = decode_weights(made.weights.read_bytes())
    best_json = {"model_version": BEST_VERSION, "mean_return": 313.6, "window": 100}
    files = {
        "best.json": json.dumps(best_json).encode(),
        "weights.safetensors": encode_weights(BEST_VERSION, "dqn", w.run, w.tensors, w.info),
    }
    meta["node"]["version"] = 8
    store.save_named("best", tensors, meta)
    for name, data in files.items():
        (root / "checkpoints" / "best" / name).write_bytes(data)
    meta["node"]["version"] = FINAL_VERSION
    final = store.save_periodic(20, tensors, meta)
    return final


def write_best(root, made, version, score):
    """``best/`` as the trainer and telemetry write it now: the weights and ``score.json``."""
    w = decode_weights(made.weights.read_bytes())
    (root / "best").mkdir(exist_ok=True)
    (root / "best" / "weights.safetensors").write_bytes(encode_weights(version, "dqn", w.run, w.tensors, w.info))
    if score is not None:
        (root / "best" / "score.json").write_text(json.dumps(score))
    return root / "best" / "weights.safetensors"


# ---------------------------------------------------------------- a run directory: best or newest, and why


def test_a_run_whose_best_was_judged_by_training_returns_plays_its_newest_checkpoint(made, tmp_path, caplog):
    root = tmp_path / "run"
    final = learner_run(made, root)
    with caplog.at_level(logging.INFO, logger="mqttrl.policy"):
        policy = mqttrl.load_policy(root)
    assert (policy.source.path, policy.source.model_version, policy.model_version) == (final, 9, 9)
    assert policy.source.reason == (
        "the newest checkpoint: the best model (version 5) was judged by training returns only (mean 313.6 over 100 "
        "episodes), which are noisy and include exploration; which=best plays it"
    )
    assert str(final) in caplog.text and "model version 9" in caplog.text

    best = mqttrl.load_policy(root, which="best")  # asked for: telemetry's judged weights
    assert (best.source.path, best.model_version) == (root / "checkpoints" / "best" / "weights.safetensors", 5)
    assert "asked for with which=best" in best.source.reason and "training returns" in best.source.reason
    latest = mqttrl.load_policy(root / "checkpoints", which="latest")
    assert (latest.source.path, latest.source.reason) == (final, "the newest checkpoint, asked for with which=latest")


def test_a_best_model_judged_by_a_greedy_evaluation_is_played(made, tmp_path):
    root = tmp_path / "run"
    learner_run(made, root)
    score = {"score": 500.0, "model_version": 12, "judged_by": "greedy_eval", "episodes": 10}
    weights = write_best(root, made, 12, score)
    for path in (root, root / "checkpoints"):
        policy = mqttrl.load_policy(path)
        assert (policy.source.path, policy.model_version) == (weights, 12)
        assert (
            policy.source.reason
            == "the best model, judged best by a greedy evaluation: mean return 500.0 over 10 episodes"
        )
    assert mqttrl.load_policy(root, which="latest").model_version == FINAL_VERSION


@pytest.mark.parametrize(
    "score, says",
    [
        ({"score": 313.6, "model_version": 12, "judged_by": "training_returns", "episodes": 100}, "training returns"),
        (None, "is not judged (it has no score file"),
        ("{not json", "does not read"),
    ],
    ids=["training-returns", "no-score", "corrupt-score"],
)
def test_a_best_model_not_judged_greedily_gives_way_to_the_newest_checkpoint(made, tmp_path, score, says):
    root = tmp_path / "run"
    final = learner_run(made, root)
    write_best(root, made, 12, None)
    if score is not None:
        (root / "best" / "score.json").write_text(score if isinstance(score, str) else json.dumps(score))
    policy = mqttrl.load_policy(root)
    assert policy.source.path == final and says in policy.source.reason
    assert mqttrl.load_policy(root, which="best").model_version == 12  # best/ before checkpoints/best/


def test_a_trainer_run_before_score_json_keeps_its_greedy_evaluation(made, tmp_path):
    """best/evaluation.json (what `mqttrl train` wrote before score.json) is a greedy evaluation."""
    root = tmp_path / "run"
    learner_run(made, root)
    weights = write_best(root, made, 12, None)
    (root / "best" / "evaluation.json").write_text(json.dumps({"model_version": 12, "episodes": 10, "mean": 480.5}))
    policy = mqttrl.load_policy(root)
    assert policy.source.path == weights and "greedy evaluation: mean return 480.5 over 10 episodes" in str(
        policy.source.reason
    )


def test_a_run_with_only_a_best_model_plays_it_and_says_why(made, tmp_path):
    root = tmp_path / "run"
    root.mkdir()
    shutil.copy(made.root / "config.json", root / "config.json")
    weights = write_best(root, made, 12, {"score": 90.0, "model_version": 12, "judged_by": "training_returns"})
    policy = mqttrl.load_policy(root)
    assert policy.source.path == weights
    assert (
        policy.source.reason
        == "the best model, judged best by training returns: mean return 90.0; the run has no checkpoint"
    )
    with pytest.raises(PolicyLoadError, match=r"which='latest', but .*checkpoints holds no checkpoint"):
        mqttrl.load_policy(root, which="latest")


# ---------------------------------------------------------------- every path a user would try


def test_every_path_a_user_would_try_loads(made, tmp_path):
    root = tmp_path / "run"
    final = learner_run(made, root)
    store = CheckpointStore(root / "checkpoints")
    quick = store.save_named("quicksave-0000000025", *read_checkpoint(final))
    store._set_latest(final.name)  # the final checkpoint is the newest again
    weights = write_best(
        root, made, 12, {"score": 500.0, "model_version": 12, "judged_by": "greedy_eval", "episodes": 5}
    )
    ckpt_best = root / "checkpoints" / "best" / "weights.safetensors"
    want = {
        root: (weights, 12),
        root / "checkpoints": (weights, 12),
        root / "checkpoints" / "latest": (final, 9),
        final: (final, 9),
        quick: (quick, 9),
        root / "best": (weights, 12),
        weights: (weights, 12),
        root / "checkpoints" / "best": (ckpt_best, 5),
        root / "config.json": (weights, 12),
    }
    obs = made.observations(16)
    expected = mqttrl.load_policy(made.weights).predict(obs)
    for path, (source, version) in want.items():
        policy = mqttrl.load_policy(path)
        assert (policy.source.path, policy.model_version) == (source, version), path
        assert policy.config.run == made.config.run, path
        np.testing.assert_array_equal(policy.predict(obs), expected, err_msg=str(path))
    assert "checkpoints/latest names it" in mqttrl.load_policy(root / "checkpoints" / "latest").source.reason
    assert mqttrl.load_policy(root / "best").source.reason.startswith("the best model, judged best by a greedy")


def test_latest_naming_telemetrys_best_reads_the_learner_state_it_saved(made, tmp_path):
    """save_named makes checkpoints/best the newest: its learner state (version 8) is newer than its judged
    weights (version 5), so the newest model is the state."""
    root = tmp_path / "run"
    learner_run(made, root)
    CheckpointStore(root / "checkpoints")._set_latest("best")
    policy = mqttrl.load_policy(root)
    assert (policy.source.path, policy.model_version) == (root / "checkpoints" / "best", 8)
    assert mqttrl.load_policy(root / "checkpoints" / "latest").source.path == root / "checkpoints" / "best"


# ---------------------------------------------------------------- the choice is printed


def test_enjoy_prints_what_it_plays_and_why(made, tmp_path, capsys):
    root = tmp_path / "run"
    final = learner_run(made, root)
    cli.main(["enjoy", str(root), "--episodes", "1", "--max-steps", "5"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"playing {final} (model version 9, the newest checkpoint: the best model (version 5)")
    assert lines[0].endswith("; which=best plays it)") and lines[1] == "dqn policy in env CartPole-v1"
    cli.main(["enjoy", str(root), "--which", "best", "--episodes", "1", "--max-steps", "5"])
    best = root / "checkpoints" / "best" / "weights.safetensors"
    assert capsys.readouterr().out.splitlines()[0].startswith(f"playing {best} (model version 5, the best model, asked")


def test_export_prints_what_it_exports_and_why(made, tmp_path, capsys):
    pytest.importorskip("onnx")
    root = tmp_path / "run"
    final = learner_run(made, root)
    cli.main(["export", str(root), "--which", "latest", "-o", str(tmp_path / "p.onnx"), "--no-check"])
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"exporting {final} (model version 9, the newest checkpoint, asked for with which=latest)"


# ---------------------------------------------------------------- predict: Stable-Baselines3's call shape


def test_predict_answers_stable_baselines3s_call_shape(made):
    policy = mqttrl.load_policy(made.weights)
    obs = made.observations(2)
    want = policy.predict(obs)  # the plain call: the actions alone
    assert want.shape == (2,)
    action, state = policy.predict(obs, deterministic=True)  # a batch of two: not two actions unpacked
    np.testing.assert_array_equal(action, want)
    assert state is None
    one, state = policy.predict(obs[1], state=None, episode_start=np.array([True]), deterministic=True)
    assert (one, state) == (want[1], None)
    actions, _ = policy.predict(obs, deterministic=False)
    assert actions.shape == (2,)
    with pytest.raises(ValueError, match=r"keeps no recurrent state; pass state=None"):
        policy.predict(obs, state=np.zeros(3))
    with pytest.raises(ValueError, match=r"deterministic='yes'\): expected True \(greedy\) or False"):
        policy.predict(obs, deterministic="yes")
    with pytest.raises(TypeError):  # SB3's positional state: refused, never taken for `deterministic`
        policy.predict(obs, None)


# ---------------------------------------------------------------- every bad path: one line


def _truncated(root, made):
    weights = write_best(root, made, 3, {"score": 1.0, "model_version": 3, "judged_by": "greedy_eval"})
    weights.write_bytes(weights.read_bytes()[:200])
    return root


def _bad_state(root, made):
    shutil.copytree(made.checkpoint, root / "ckpt")
    state = root / "ckpt" / "state.safetensors"
    data = state.read_bytes()
    state.write_bytes(data[: len(data) // 2])
    return root / "ckpt"


def _marker_to_nowhere(root, made):
    (root / "checkpoints").mkdir()
    (root / "checkpoints" / "latest").write_text("ckpt-0000000099")
    return root / "checkpoints" / "latest"


def _marker_of_garbage(root, made):
    (root / "latest").write_bytes(b"\x00\xff" * 500)
    return root / "latest"


def _run_with_garbage_marker(root, made):
    shutil.copytree(made.root, root / "run")
    (root / "run" / "checkpoints" / "latest").write_bytes(b"\x00\xff" * 500)
    return root / "run"


BAD = {
    "run-with-garbage-marker": (_run_with_garbage_marker, "expected the name of a checkpoint folder"),
    "empty-folder": (lambda root, made: root, "holds no mqttrl model; expected a run directory"),
    "truncated-weights": (_truncated, "is not an mqttrl weights file"),
    "torch-file": (
        lambda root, made: (root / "model.pt").write_bytes(b"PK\x03\x04" + b"\x00" * 100) and root / "model.pt",
        "model.pt is not an mqttrl weights file",
    ),
    "json-file": (
        lambda root, made: (root / "x.json").write_text('{"a": 1}') and root / "x.json",
        "x.json is not an mqttrl weights file",
    ),
    "damaged-state": (_bad_state, "state.safetensors"),
    "marker-to-nowhere": (_marker_to_nowhere, "names 'ckpt-0000000099', which is no checkpoint in"),
    "marker-of-garbage": (_marker_of_garbage, "which is no checkpoint in"),
    "meta-without-version": (
        lambda root, made: (
            shutil.copytree(made.checkpoint, root / "c")
            and (root / "c" / "meta.json").write_text(
                json.dumps({"algo": {}, "config": {"algorithm": "dqn"}, "node": []})
            )
            and root / "c"
        ),
        "names no algorithm or model version",
    ),
}


@pytest.mark.parametrize("case", list(BAD))
def test_every_bad_path_is_one_line_naming_it(made, tmp_path, capsys, case):
    make, says = BAD[case]
    root = tmp_path / "bad"
    root.mkdir()
    path = make(root, made)
    with pytest.raises(PolicyLoadError) as e:
        mqttrl.load_policy(path)
    message = str(e.value)
    assert says in message and "\n" not in message and str(path.parent) in message, message
    for command in ("enjoy", "export"):
        argv = [command, str(path)] + (["-o", str(tmp_path / "p.onnx")] if command == "export" else [])
        with pytest.raises(SystemExit) as exit_:
            cli.main(argv)
        err = capsys.readouterr().err.strip().splitlines()
        assert exit_.value.code == 2 and len(err) == 1 and err[0].startswith(f"mqttrl {command}: "), err
        assert says in err[0]


def test_which_is_checked(made, tmp_path, capsys):
    with pytest.raises(PolicyLoadError, match=r"which='newest': use one of auto, best, latest"):
        mqttrl.load_policy(made.root, which="newest")
    with pytest.raises(PolicyLoadError, match=r"names one model; which='best' chooses .* pass the run directory"):
        mqttrl.load_policy(made.weights, which="best")
    with pytest.raises(PolicyLoadError, match=r"which='best', but the run has no best model"):
        mqttrl.load_policy(made.root, which="best")
    assert mqttrl.load_policy(made.root, which="latest").model_version == VERSION
    with pytest.raises(SystemExit) as e:
        cli.main(["enjoy", str(made.root), "--which", "newest"])
    assert e.value.code == 2 and "invalid choice: 'newest'" in capsys.readouterr().err


def test_a_run_name_means_its_newest_timestamped_run_directory(tmp_path):
    """README: after `mqttrl train configs/cartpole_dqn.toml`, `runs/cartpole-dqn` plays the newest
    `runs/cartpole-dqn-<timestamp>/` (only folders that are runs count; a missing name is one line)."""
    import os
    import shutil

    from mqttrl.policy.source import locate

    runs = tmp_path / "runs"
    older = runs / "cartpole-dqn-20260101-000000"
    newer = runs / "cartpole-dqn-20260102-000000"
    for d in (older, newer):
        (d / "checkpoints").mkdir(parents=True)
        (d / "config.json").write_text("{}")
    (runs / "cartpole-dqn-notes").mkdir()  # not a run: ignored
    os.utime(older, (1, 1))
    assert newest_run(runs / "cartpole-dqn") == newer
    shutil.rmtree(newer)
    assert newest_run(runs / "cartpole-dqn") == older
    with pytest.raises(FileNotFoundError, match="no such file"):
        locate(runs / "lunarlander")


def newest_run(path):
    from mqttrl.policy.source import newest_run_named

    return newest_run_named(path)
