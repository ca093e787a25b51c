"""A scenario's results as one JSON file, ``benchmarks/results/<scenario>.json``: what ran (command,
commit, machine, date), each side's runs (seed, curve, figures) and their summary. Files transcribed
from a page's figures instead of run say so (``"source": "transcribed"``, ``transcribed_from``)."""

from __future__ import annotations

import json
from pathlib import Path

from .figures import summarize
from .machine import REPO, command_line, git_commit, machine, now
from .scenario import MEASURES, Scenario

RESULTS = REPO / "benchmarks" / "results"


def new_results(name: str, scenario: Scenario, sides: list[str]) -> dict:
    """The results of a run of ``scenario`` about to start, its sides without runs yet."""
    return {
        "scenario": name,
        "title": scenario.title,
        "page": scenario.page,
        "measure": scenario.measure,
        "measure_text": MEASURES[scenario.measure].format(target=scenario.target),
        "target": scenario.target,
        "headline": scenario.headline,
        "source": "run",
        "date": now(),
        "command": command_line(),
        "commit": git_commit(),
        "machine": machine(),
        "sides": [{"name": s, "role": scenario.side(s).role, "runs": [], "summary": {}} for s in sides],
    }


def continued(earlier: dict, name: str, scenario: Scenario, sides: list[str]) -> dict:
    """``earlier`` (a results file of the same scenario) to add this run's runs to: a scenario run in
    parts (more seeds, sides that did not fit before). Its commands, commits and dates list every
    part; a side new to it is added without runs."""
    if earlier.get("scenario") != name:
        raise SystemExit(f"--append: that file holds scenario {earlier.get('scenario')!r}, not {name!r}")
    part = new_results(name, scenario, sides)
    out = {**earlier}
    for key in ("command", "commit", "date"):
        out[key] = f"{earlier[key]}; then {part[key]}"
    known = {s["name"] for s in out["sides"]}
    out["sides"] = [*out["sides"], *(s for s in part["sides"] if s["name"] not in known)]
    return out


def add_run(results: dict, side: str, run: dict) -> None:
    """File a finished run under its side and bring the side's summary up to date."""
    entry = next(s for s in results["sides"] if s["name"] == side)
    entry["runs"].append(run)
    entry["summary"] = summarize(entry["runs"])


def write(results: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=1, ensure_ascii=False) + "\n")


def load_all(folder: Path = RESULTS) -> list[dict]:
    """Every results file in ``folder``, by scenario name."""
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]
