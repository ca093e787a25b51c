"""docs/benchmarks.md's comparison table is what ``benchmarks/results/*.json`` gives, each results file
agrees with itself and names a scenario that exists, and the runner runs a scenario end to end into a
results file the report reads."""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import report, run
from benchmarks.harness import scenario
from benchmarks.harness.figures import summarize
from benchmarks.harness.results import load_all

ROOT = Path(__file__).resolve().parent.parent
RESULTS = load_all()


def test_the_page_table_is_the_results():
    page = report.PAGE.read_text()
    assert report.regenerate(page, report.headline_table(RESULTS)) == page, (
        "docs/benchmarks.md and benchmarks/results/ disagree: run python -m benchmarks.report"
    )


@pytest.mark.parametrize("res", RESULTS, ids=[r["scenario"] for r in RESULTS])
def test_a_results_file_agrees_with_itself_and_its_scenario(res):
    sc = scenario.load(res["scenario"])
    assert (res["title"], res["measure"], res["headline"]) == (sc.title, sc.measure, sc.headline)
    for side in res["sides"]:
        assert side["role"] == sc.side(side["name"]).role
        if side["runs"]:
            assert side["summary"] == summarize(side["runs"]), f"{side['name']}: summary is not its runs'"
    if res["source"] == "transcribed":
        assert res["transcribed_from"].startswith("docs/benchmarks/") and res["command"] and res["date"]


def test_the_ratio_pairs_seeds_and_falls_back_to_the_medians():
    def side(*values):
        runs = [{"seed": s, "figures": {"best": v}} for s, v in enumerate(values)]
        return {"runs": runs, "summary": summarize(runs)}

    assert report.ratio(side(2.0, 6.0, 6.0), side(4.0, 6.0, 3.0), "best") == 1.0  # ratios 0.5, 1, 2
    assert report.ratio(side(2.0, 6.0, 6.0), side(4.0, None, 3.0), "best") == pytest.approx(6.0 / 3.5)


def test_the_gaps_compare_chosen_sides_to_the_first_one(capsys):
    def side(name, *values):
        runs = [{"seed": s, "figures": {"best": v}} for s, v in enumerate(values)]
        return {"name": name, "runs": runs, "summary": summarize(runs)}

    res = {"scenario": "x", "sides": [side("a, Breakout", 9.0, 10.0, 11.0), side("a, Freeway", 1.0, 1.0, 1.0)]}
    res["sides"].append(side("b, Breakout", 4.0, 5.0, 6.0))
    chosen = report.only_sides(res, ["b, Breakout", "a, Breakout"])
    assert [s["name"] for s in chosen["sides"]] == ["b, Breakout", "a, Breakout"]
    report.print_gaps(chosen, ["best"])
    rows = capsys.readouterr().out.splitlines()
    assert rows[2] == "| b, Breakout | 5.00 |"
    # a 5 ahead on every seed: the interval excludes 0; per-seed ratios 9/4, 10/5, 11/6 -> median 2
    assert rows[3].startswith("| a, Breakout | 10.00 (+5.00 [+") and rows[3].endswith("; 2.00×) |")
    assert "above" in rows[3]
    with pytest.raises(SystemExit, match="no side 'c'"):
        report.only_sides(res, ["c"])


def test_the_best_read_at_a_cadence_gives_every_side_as_many_readings():
    """A side evaluated 4 times a mark and one evaluated once: by the best of all evaluations the
    first wins on a lucky peak between marks; read once every 100 env steps, they tie."""

    def side(name, curve):
        runs = [{"seed": 0, "curve": curve, "figures": {"best": max(p[2] for p in curve)}}]
        return {"name": name, "runs": runs, "summary": summarize(runs)}

    often = [(25 * i, 0.0, 5.0 if i == 6 else 1.0 + (i >= 8)) for i in range(1, 13)]
    seldom = [(100, 0.0, 1.0), (200, 0.0, 2.0), (300, 0.0, 2.0)]
    res = report.with_best_every({"scenario": "x", "sides": [side("peer", seldom), side("mqttrl", often)]}, 100)
    peer, mqttrl = res["sides"]
    assert mqttrl["runs"][0]["figures"]["best"] == 5.0 and mqttrl["summary"]["best_every_100"] == 2.0
    assert peer["summary"]["best_every_100"] == peer["summary"]["best"] == 2.0


def test_a_scenario_run_in_parts_adds_its_runs_to_one_file():
    from benchmarks.harness import results

    sc = scenario.load("minatar_games_100k")
    first = results.new_results("minatar_games_100k", sc, ["SB3 DQN, Freeway"])
    results.add_run(first, "SB3 DQN, Freeway", {"seed": 0, "curve": [], "figures": {"best": 4.0}})
    later = results.continued(first, "minatar_games_100k", sc, ["SB3 DQN, Freeway", "mqttrl dqn, Freeway"])
    results.add_run(later, "SB3 DQN, Freeway", {"seed": 1, "curve": [], "figures": {"best": 6.0}})
    sb3, new = later["sides"]
    assert [r["seed"] for r in sb3["runs"]] == [0, 1] and sb3["summary"]["best"] == 5.0
    assert new["name"] == "mqttrl dqn, Freeway" and new["runs"] == []
    assert later["command"].count("; then ") == 1
    with pytest.raises(SystemExit, match="not 'smoke'"):
        results.continued(first, "smoke", scenario.load("smoke"), ["mqttrl DQN"])


@pytest.mark.e2e
def test_a_scenario_runs_end_to_end_into_a_file_the_report_reads(tmp_path):
    out = tmp_path / "smoke.json"
    argv = [sys.executable, "-m", "benchmarks.run", "smoke", "--out", str(out)]
    subprocess.run(argv, cwd=ROOT, check=True, capture_output=True, timeout=120)
    res = json.loads(out.read_text())
    assert res["source"] == "run" and res["command"].startswith("python -m benchmarks.run smoke")
    (side,) = res["sides"]
    (run,) = side["runs"]
    assert run["curve"] and run["figures"]["best"] == max(p[2] for p in run["curve"])
    assert side["summary"] == summarize(side["runs"])
    printed = subprocess.run(
        [sys.executable, "-m", "benchmarks.report", str(out)], cwd=ROOT, capture_output=True, text=True
    )
    assert printed.returncode == 0 and "| mqttrl DQN | median |" in printed.stdout


#: placeholders the pages' commands use for what varies between their runs
PLACEHOLDERS = {"S": "0", "SEED": "0", "VARIANT": "dqn", "STEPS": "100000", "SCENARIO": "smoke", "N": "1"}
PLACEHOLDERS |= {"FILE": "a.json", "PNG": "a.png", "...": None, "\\": None}


def _documented_commands() -> list[tuple[str, str]]:
    """(page, command) of every ``python -m benchmarks.X ...`` in the docs and the README: inline code
    up to its closing backtick, a code block's line up to its end or comment; optional ``[...]`` parts left out."""
    found = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        text = page.read_text()
        for m in re.finditer(r"python -m\s+benchmarks\.", text):
            line_start = text.rfind("\n", 0, m.start()) + 1
            in_block = text[line_start:].startswith("    ") or text.count("\n```", 0, m.start()) % 2 == 1
            end = text.find("\n", m.start()) if in_block else text.find("`", m.start())
            while in_block and text[:end].endswith("\\"):  # a line continued
                end = text.find("\n", end + 1)
            command = text[m.start() : end].split("  #")[0] if in_block else text[m.start() : end]
            found.append((page.name, re.sub(r"\[[^\]]*\]", "", command.replace("\n", " "))))
    return found


@pytest.mark.parametrize("page, command", _documented_commands())
def test_every_documented_benchmark_command_names_what_exists(page, command):
    """A page's command names a benchmark module that exists; a ``benchmarks.run`` command a scenario,
    its sides and options as the runner parses them (the commands run from the repository root)."""
    argv = [PLACEHOLDERS.get(a, a) for a in shlex.split(command)[2:] if PLACEHOLDERS.get(a, a)]
    module = argv.pop(0)
    assert importlib.util.find_spec(module), f"{page}: no module {module}"
    if module == "benchmarks.run":
        args = run.parse_args(argv)
        names = {s.name for s in scenario.load(args.scenario).sides} if args.scenario else set()
        assert set(args.sides or []) <= names, f"{page}: {command}: sides {args.sides} not in {sorted(names)}"
    elif module == "benchmarks.report":
        args = report.parse_args(argv)
        assert all(f.suffix == ".json" for f in args.files) and (args.plot is None or args.plot.suffix == ".png"), (
            command
        )
        for f in (ROOT / f for f in args.files if args.sides and (ROOT / f).exists()):
            names = {s["name"] for s in json.loads(f.read_text())["sides"]}
            assert set(args.sides) <= names, f"{page}: {command}: sides {args.sides} not in {sorted(names)}"


def test_a_failed_evaluation_of_the_last_checkpoint_leaves_the_run_filed(monkeypatch, tmp_path, capsys):
    """The runner evaluates a run's last checkpoint after the run; a game that does not come up
    then (one pilot's post-run evaluation died an hour in) is one line, and the run is still filed."""
    import mqttrl
    from benchmarks.harness import mqttrl_side

    def broken(*_args, **_kwargs):
        raise RuntimeError("the game did not come up")

    monkeypatch.setattr(mqttrl, "load_policy", lambda *_a, **_k: object())
    monkeypatch.setattr(mqttrl_side, "greedy_mean", broken)
    sc = scenario.load("cartpole_ppo")
    assert mqttrl_side._last_checkpoint(tmp_path / "run-s1", "CartPole-v1", sc) is None
    assert "the last checkpoint's evaluation failed (RuntimeError: the game did not come up)" in capsys.readouterr().err
