"""docs/benchmarks.md's comparison table is what ``benchmarks/results/*.json`` gives, each results file
agrees with itself and names a scenario that exists, and the runner runs a scenario end to end into a
results file the report reads."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import report
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
