"""A person's returns beside the agent's (issue 45): ``[train] human_baseline`` read once at the
start (a bad file is one line, exit 2, before anything starts), and ``summary.json``'s
human-normalised score, ``(agent - random) / (human - random)``, or the share of the person's
mean where the file holds no random play."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mqttrl.config.settings import ConfigError
from mqttrl.trainer.baseline import Baseline, load_baseline

ROOT = Path(__file__).parent.parent


def test_the_normalised_score_is_0_at_random_and_1_at_the_person():
    b = Baseline("h.json", human=40.0, random=10.0)
    assert b.score(10.0) == 0.0 and b.score(40.0) == 1.0 and b.score(25.0) == 0.5
    fields = b.fields(final=25.0, best=46.0)
    assert fields["human_normalized_final"] == 0.5 and fields["human_normalized_best"] == 1.2
    assert fields["human_mean"] == 40.0 and fields["random_mean"] == 10.0
    only = Baseline("h.json", human=40.0).fields(final=10.0, best=None)
    assert only["of_human_final"] == 0.25 and only["of_human_best"] is None and "human_normalized_final" not in only
    assert Baseline("h.json", human=0.0).fields(final=3.0, best=3.0)["of_human_final"] is None  # no division by 0


def test_the_file_mqttrl_play_writes_is_read_and_a_bad_one_is_one_line(tmp_path):
    good = tmp_path / "h.json"
    good.write_text(json.dumps({"mean": 30.0, "std": 2.0, "episodes": [], "random": {"mean": 5.0}}))
    assert load_baseline(str(good)) == Baseline(str(good), 30.0, 5.0)
    assert load_baseline("") is None
    with pytest.raises(ConfigError, match="no such file .*mqttrl play"):
        load_baseline(str(tmp_path / "missing.json"))
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ConfigError, match="not a baseline file"):
        load_baseline(str(tmp_path / "bad.json"))
    (tmp_path / "empty.json").write_text("{}")
    with pytest.raises(ConfigError, match="no 'mean'"):
        load_baseline(str(tmp_path / "empty.json"))


def test_mqttrl_train_refuses_a_missing_baseline_before_anything_starts(tmp_path):
    argv = [str(Path(sys.executable).parent / "mqttrl"), "train", str(ROOT / "configs" / "cartpole_dqn.toml")]
    argv += ["--set", f"train.human_baseline={tmp_path / 'none.json'}", "--run-dir", str(tmp_path / "run")]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr[-2000:]
    assert (
        "train.human_baseline" in out.stderr.strip().splitlines()[-1]
        and not (tmp_path / "run" / "config.json").exists()
    )
