"""Curves compared at equal env steps (``mqttrl.observe.curves``) and ``mqttrl compare`` over run directories.

The run directories are written as ``mqttrl train`` writes them (``evaluations.csv`` with the
record's columns, ``summary.json``); the figures are checked by hand.
"""

from __future__ import annotations

import csv
import json

import pytest

from mqttrl import cli
from mqttrl.observe.curves import at_budget, best_at_marks, default_marks, first_reaching, median_gap
from mqttrl.trainer.record import EVAL_COLUMNS

CURVE = [(0, 1.0, -10.0), (100, 2.0, -8.0), (100, 3.0, -6.0), (250, 4.0, -2.0), (400, 5.0, 1.0)]


def test_at_budget_is_the_last_evaluation_of_a_model_trained_on_at_most_the_budget():
    assert at_budget(CURVE, 99) == -10.0
    assert at_budget(CURVE, 100) == -6.0  # of evaluations at equal env steps the last counts
    assert at_budget(CURVE, 399) == -2.0
    assert at_budget(CURVE, 10_000) == 1.0
    assert at_budget(CURVE[1:], 50) is None  # nothing evaluated yet


def test_best_at_marks_reads_one_evaluation_a_mark():
    # a peak between two marks is not read: the newest evaluation at or before each mark is
    spiky = [(100, 1.0, 2.0), (150, 2.0, 9.0), (190, 3.0, 3.0), (300, 4.0, 4.0)]
    assert best_at_marks(spiky, [100, 200, 300]) == 4.0
    assert best_at_marks(spiky, [100, 150, 200, 300]) == 9.0
    assert best_at_marks(CURVE, [100, 200]) == -6.0  # of equal env steps the last counts
    assert best_at_marks(CURVE[1:], [50]) is None


def test_at_budget_with_a_window_averages_the_evaluations_inside_it():
    assert at_budget(CURVE, 250, window=200) == pytest.approx((-6.0 + -2.0) / 2)
    assert at_budget(CURVE, 390, window=100) == -2.0  # none inside (290, 390]: the last before


def test_at_budget_interpolated_between_the_evaluations_around_the_mark():
    assert at_budget(CURVE, 175, interpolate=True) == pytest.approx(-6.0 + 4.0 * 75 / 150)  # the later of step 100
    assert at_budget(CURVE, 250, interpolate=True) == -2.0  # an evaluation at the mark itself
    assert at_budget(CURVE, 10_000, interpolate=True) == 1.0  # nothing after: the last
    assert at_budget(CURVE[1:], 50, interpolate=True) is None  # nothing before: no figure


def test_first_reaching():
    assert first_reaching(CURVE, -6.0) == 100
    assert first_reaching(CURVE, 0.5) == 400
    assert first_reaching(CURVE, 2.0) is None


def test_median_gap_excludes_zero_only_for_a_shift_beyond_the_spread():
    a = [10.0, 11.0, 12.0, 13.0, 14.0]
    same = median_gap(a, a)
    assert same.gap == 0.0 and same.low <= 0.0 <= same.high and same.verdict == "level"
    up = median_gap([x + 100 for x in a], a)
    assert up.gap == 100.0 and up.low > 0 and up.verdict == "above"
    down = median_gap(a, [x + 100 for x in a])
    assert down.high < 0 and down.verdict == "below"
    overlap = median_gap([1.0, 5.0, 9.0], [2.0, 6.0, 10.0])  # medians 5 and 6, spreads overlapping
    assert overlap.gap == -1.0 and overlap.verdict == "level"
    assert median_gap(a, [1.0, 2.0, 3.0], seed=7) == median_gap(a, [1.0, 2.0, 3.0], seed=7)  # deterministic


def test_median_gap_with_one_value_on_a_side_has_no_interval():
    one = median_gap([5.0], [1.0, 2.0, 3.0])
    assert one.gap == 3.0 and one.low is None and one.high is None and one.verdict == "no interval"


def test_median_gap_refuses_what_it_cannot_judge():
    with pytest.raises(ValueError, match="at least one value"):
        median_gap([], [1.0])
    with pytest.raises(ValueError, match="not finite"):
        median_gap([float("nan")], [1.0])
    with pytest.raises(ValueError, match="level"):
        median_gap([1.0], [1.0], level=1.5)


def test_default_marks_are_even_and_rounded():
    assert default_marks(20_374) == [4100, 8100, 12000, 16000, 20000]
    assert default_marks(1000) == [200, 400, 600, 800, 1000]
    assert default_marks(0) == []


def write_run(path, name, curve, env_steps, target=-200.0):
    """A finished run directory as ``mqttrl train`` leaves it: evaluations.csv and summary.json."""
    path.mkdir(parents=True)
    with open(path / "evaluations.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(EVAL_COLUMNS)
        for version, (steps, mean) in enumerate(curve):
            row = {"wall_s": version, "model_version": version, "env_steps": steps + 50, "episodes": 10, "mean": mean}
            row |= {"std": 1, "min": mean, "max": mean, "eval_s": 0.1, "training_s": version, "model_env_steps": steps}
            w.writerow([row[c] for c in EVAL_COLUMNS])
    summary = {"run": name, "env_steps": env_steps, "target_return": target}
    (path / "summary.json").write_text(json.dumps(summary))
    return path


@pytest.fixture
def runs(tmp_path):
    """Two configs, three seeds each: "quick" reaches -200 by 2,000 env steps, "slow" by 4,000."""
    out = {}
    for s, jitter in enumerate((0.0, 30.0, -30.0)):
        quick = [(0, -1500 + jitter), (1000, -900 + jitter), (2000, -180 + jitter), (5000, -150 + jitter)]
        slow = [(0, -1500 + jitter), (1000, -1400 + jitter), (2000, -1000 + jitter), (4000, -190 + jitter)]
        out[f"quick{s}"] = write_run(tmp_path / f"quick-s{s}", "pendulum-quick", quick, 5000)
        out[f"slow{s}"] = write_run(tmp_path / f"slow-s{s}", "pendulum-slow", slow, 5000)
    return out


def compare_json(argv, capsys) -> dict:
    cli.main(["compare", *argv, "--json"])
    return json.loads(capsys.readouterr().out)


def test_compare_groups_seeds_by_run_name_and_reads_each_budget(runs, capsys):
    dirs = [str(runs[k]) for k in ("slow0", "slow1", "slow2", "quick0", "quick1", "quick2")]
    c = compare_json([*dirs, "--marks", "2000", "4000"], capsys)
    slow, quick = c["groups"]
    assert (slow["label"], quick["label"]) == ("pendulum-slow", "pendulum-quick")
    assert slow["at"]["2000"]["median"] == -1000.0 and quick["at"]["2000"]["median"] == -180.0
    assert sorted(quick["at"]["4000"]["values"]) == [-210.0, -180.0, -150.0]
    assert c["target"] == -200.0  # the runs' own target
    assert slow["reaches_target_at"] == 4000 and quick["reaches_target_at"] == 2000  # seed -30 reaches at 5,000
    assert quick["reached"] == 3 and slow["reached"] == 2  # slow seed 2 ends at -220
    (gap,) = c["gaps"]
    assert gap["against"] == "pendulum-slow"
    at2k = gap["at"]["2000"]
    assert at2k["gap"] == 820.0 and at2k["low"] > 0  # far beyond the seeds' spread of 60


def test_compare_labels_baseline_and_one_run_groups(runs, capsys):
    c = compare_json(
        [f"a={runs['quick0']}", f"b={runs['slow0']}", f"b={runs['slow1']}", "--baseline", "b", "--marks", "1000"],
        capsys,
    )
    assert [g["label"] for g in c["groups"]] == ["a", "b"]
    cell = c["gaps"][0]["at"]["1000"]
    assert cell["gap"] == pytest.approx(-900 - (-1400 + -1370) / 2)
    assert cell["low"] is None and cell["verdict"] == "no interval"  # one run in "a": a gap but no interval
    # a run that stopped before a mark counts with its last evaluation; before its first, it has none
    c = compare_json([str(runs["quick0"]), "--marks", "6000"], capsys)
    assert c["groups"][0]["at"]["6000"]["median"] == -150.0


def test_compare_expands_a_label_s_glob_itself(runs, capsys):
    pattern = str(runs["quick0"]).replace("quick-s0", "quick-s*")
    c = compare_json([f"q={pattern}", "--marks", "2000"], capsys)
    assert c["groups"][0]["label"] == "q" and len(c["groups"][0]["runs"]) == 3


def test_compare_table_and_plot(runs, tmp_path, capsys):
    png = tmp_path / "cmp.png"
    pytest.importorskip("matplotlib")
    cli.main(
        ["compare", str(runs["slow0"]), str(runs["slow1"]), str(runs["quick0"]), str(runs["quick1"])]
        + ["--plot", str(png)]
    )
    out = capsys.readouterr().out
    assert "pendulum-slow" in out and "pendulum-quick" in out and ">= -200 at" in out
    assert "median gap to pendulum-slow" in out
    assert png.stat().st_size > 10_000


@pytest.mark.parametrize(
    "argv, says",
    [
        (["nowhere"], "nowhere: no such run directory"),
        (["=x"], "expected DIR or LABEL=DIR"),
        (["a=nowhere-s*"], "nowhere-s*: matches no run directory"),
        (["EMPTY"], "no evaluations"),
        (["DAMAGED"], "evaluations.csv is unreadable (ValueError"),
        (["QUICK", "--baseline", "zz"], "--baseline 'zz': no such group"),
    ],
)
def test_compare_mistakes_are_one_line_exit_2(argv, says, runs, tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    damaged = write_run(tmp_path / "damaged", "d", [(0, -1.0)], 10)
    (damaged / "evaluations.csv").write_text(",".join(EVAL_COLUMNS) + "\n1,2,x,4,not-a-number,6,7,8,9,10,11\n")
    subst = {"EMPTY": str(tmp_path / "empty"), "QUICK": str(runs["quick0"]), "DAMAGED": str(damaged)}
    with pytest.raises(SystemExit) as e:
        cli.main(["compare", *[subst.get(a, a) for a in argv]])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and len(err.splitlines()) == 1 and says in err, err
