"""The shipped Grafana dashboard against a real InfluxDB 1.x.

A fake run covering every measurement of docs/telemetry.md (the contract between
telemetry storages and dashboards) is written as line protocol over HTTP; then every
panel query of broker/grafana/provisioning/dashboards/mqttrl.json runs, with Grafana's
macros substituted, and must return the values written. A second run with different
values, written 5 s later, proves the $run filter.
"""

from __future__ import annotations

import json
import math
import re
import time

import pytest
from helpers.paths import BROKER_KIT, REPO

PROVISIONING = BROKER_KIT / "grafana" / "provisioning"
DASHBOARD = PROVISIONING / "dashboards" / "mqttrl.json"
RUN = "fake-run.1"  # "." and "-" exercise the regex escaping of $run
OTHER = "other-run"
N = 60  # points per series, 10 s apart
STEP = 10


def doc_schema() -> dict[str, set[str]]:
    """measurement -> field names, from the table in docs/telemetry.md."""
    schema = {}
    text = (REPO / "docs" / "telemetry.md").read_text()
    section = text.split("\n## Measurements", 1)[1].split("\n## ", 1)[0]  # its table, not the storages'
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`"):
            fields = re.sub(r"\([^)]*\)", "", cells[2])  # drop remarks such as "(... `window` episodes)"
            schema[cells[0].strip("`")] = set(re.findall(r"`([a-z0-9_<>]+)`", fields))
    assert {"episode", "episode_stats", "learner", "worker", "rejections", "eval", "best", "telemetry"} <= set(schema)
    return schema


def fake_run(run: str, off: float, t_end: int, shift: int = 0) -> list[str]:
    """Line protocol for one run; ``off`` is added to returns and rates, so runs differ."""
    lines = []

    def point(measurement: str, tags: dict, fields: dict, t: int) -> None:
        tag = "".join(f",{k}={v}" for k, v in {"run": run, **tags}.items())
        fs = ",".join(f"{k}={v}i" if isinstance(v, int) else f"{k}={float(v)!r}" for k, v in fields.items())
        lines.append(f"{measurement}{tag} {fs} {t + shift}")

    for i in range(N):
        t = t_end - (N - 1 - i) * STEP
        for j, w in enumerate(("w0", "w1")):
            point(
                "episode",
                {"worker": w},
                {"return": 10.0 * (j + 1) + i + off, "length": 20 + i, "model_version": i, "env_steps": 100 * i},
                t,
            )
            point(
                "episode_stats",
                {"worker": w},
                {"mean_return": 100.0 * (j + 1) + i + off, "mean_length": 50.0 + i + 10 * j, "episodes": i},
                t,
            )
            point(
                "worker",
                {"worker": w},
                {
                    "online": 0 if (j == 1 and i == N - 1) else 1,
                    "env_steps": 100 * i,
                    "env_steps_per_s": 300.0 + 100 * j + off,
                    "version_lag": j + 1,
                    "last_return": 10.0 + i,
                    "outbox": 5 * j,
                    "dropped": j,
                    "person_steps": 10 * i * j,
                },
                t,
            )
        point(
            "episode_stats",
            {"worker": "all"},
            {"mean_return": 150.0 + i + off, "mean_length": 55.0 + i, "episodes": 2 * i},
            t,
        )
        point(
            "learner",
            {},
            {
                "updates": 10 * i,
                "updates_per_s": 5.0 + off,
                "samples": 1000 * i,
                "samples_per_s": 1000.0 + off,
                "model_version": i,
                "workers_online": 1 if i < 30 else 2,
                "inbox": i % 7,
                "missing_batches": 3,
                "rejected_total": (i if i < 40 else i - 40) + (4 if i >= 50 else 0),
                "train_loss": 1.0 / (i + 1),
                "train_policy_loss": 0.5,
                "train_value_loss": 0.25,
                **REALTIME_FIELDS,
                "rt_overruns": i,
            },
            t,
        )
        # cumulative counts; the learner restarts at i == 40 (stale_version resets)
        point("rejections", {"reason": "stale_version"}, {"count": i if i < 40 else i - 40}, t)
        point("rejections", {"reason": "garbage"}, {"count": 4 if i >= 50 else 0}, t)
        point(
            "telemetry",
            {},
            {"loop_ms": 0.5, "messages_per_s": 120.0 + off, "pending_points": i % 3, "rejected_total": 0},
            t,
        )
        if i % 6 == 0:
            point(
                "eval",
                {"evaluator": "train"},
                {
                    "mean": 300.0 + i + off,
                    "std": 5.0,
                    "min": 290.0 + i,
                    "max": 310.0 + i,
                    "model_version": i,
                    "episodes": 20,
                    "env_steps": 1000 * i,
                },
                t,
            )
        if i % 10 == 0:
            point("best", {}, {"mean_return": 150.0 + i + off, "model_version": i, "model_epoch": 1_796_000_000_000}, t)
    return lines


#: the learner point's timing and real-time fields (constant but rt_overruns, which counts up)
REALTIME_FIELDS = {
    "time_learner_receive_s": 0.1,
    "time_learner_sample_s": 0.2,
    "time_learner_train_step_s": 0.6,
    "time_learner_publish_s": 0.05,
    "time_workers_forward_ms": 0.4,
    "time_workers_env_step_ms": 0.3,
    "time_workers_wait_ms": 48.0,
    "time_workers_encode_ms": 0.15,
    "time_workers_publish_ms": 0.03,
    "rt_err_p50_ms": 0.2,
    "rt_err_p99_ms": 1.5,
    "rt_err_max_ms": 4.0,
    "rt_periods": 1000,
    "rt_skipped": 2,
    "rt_lost_s": 0.1,
    "rt_reset_s": 3.0,
    "rt_paused_s": 12.5,
    "rt_games_paused": 1,
    "act_latency_p50_ms": 2.5,
    "act_latency_p99_ms": 15.0,
    "act_latency_mean_ms": 3.7,
    "act_latency_max_ms": 40.0,
}

L = N - 1  # index of the last point
#: panel title -> refId -> series (its group-by tag value, or None) -> expected last row
EXPECT = {
    "Workers online": {"A": {None: {"last": 2}}},
    "Model version": {"A": {None: {"last": L}}},
    "Updates": {"A": {None: {"last": 10 * L}}},
    "Samples": {"A": {None: {"last": 1000 * L}}},
    "Best return": {"A": {None: {"last": 150.0 + 50}}},
    "Rejected messages": {"A": {None: {"last": (L - 40) + 4}}},
    "Return (moving average)": {
        "A": {"w0": {"last": 100.0 + L}, "w1": {"last": 200.0 + L}},
        "B": {None: {"last": 150.0 + L}},
        "C": {"train": {"mean": 300.0 + 54}},
    },
    "Episode length (moving average)": {
        "A": {"w0": {"last": 50.0 + L}, "w1": {"last": 60.0 + L}},
        "B": {None: {"last": 55.0 + L}},
    },
    "Throughput": {
        "A": {"w0": {"mean": 300.0}, "w1": {"mean": 400.0}},
        "B": {None: {"mean": 1000.0}},
        "C": {None: {"mean": 5.0}},
    },
    "Model version lag": {"A": {"w0": {"max": 1}, "w1": {"max": 2}}},
    "Rejections by reason": {
        "A": {"stale_version": {"non_negative_difference": 1}, "garbage": {"non_negative_difference": 0}}
    },
    "Worker availability": {"A": {None: {"last": 2}}, "B": {"w0": {"last": 1}, "w1": {"last": 0}}},
    "Rejections since learner start": {"A": {"stale_version": {"last": L - 40}, "garbage": {"last": 4}}},
    "Training loss": {"A": {None: {"mean": 1.0 / N}}, "B": {None: {"mean": 0.5}}, "C": {None: {"mean": 0.25}}},
    "Episode returns": {"A": {"w0": {"mean": 10.0 + L}, "w1": {"mean": 20.0 + L}}},
    "Learner backlog": {"A": {None: {"last": L % 7}}, "B": {None: {"last": 3}}},
    "Worker outbox and drops": {
        "A": {"w0": {"last": 0}, "w1": {"last": 5}},
        "B": {"w0": {"last": 0}, "w1": {"last": 1}},
    },
    "Evaluation": {"A": {"train": {"mean": 354.0, "min": 344.0, "max": 364.0, "std": 5.0}}},
    "Telemetry": {"A": {None: {"mean": 0.5}}, "B": {None: {"mean": 120.0}}, "C": {None: {"last": L % 3}}},
    "Control period error (real time)": {
        "A": {None: {"mean": 0.2}},
        "B": {None: {"max": 1.5}},
        "C": {None: {"max": 4.0}},
    },
    "Overruns, lost and paused time (real time)": {
        "A": {None: {"last": L}},
        "B": {None: {"last": 2}},
        "C": {None: {"last": 0.1}},
        "D": {None: {"last": 12.5}},
    },
    "Where the time goes (workers)": {
        "A": {None: {"mean": 0.4}},
        "B": {None: {"mean": 0.3}},
        "C": {None: {"mean": 48.0}},
        "D": {None: {"mean": 0.15}},
        "E": {None: {"mean": 0.03}},
    },
    "Where the time goes (learner)": {
        "A": {None: {"mean": 0.1}},
        "B": {None: {"mean": 0.2}},
        "C": {None: {"mean": 0.6}},
        "D": {None: {"mean": 0.05}},
    },
}


def panels(dashboard: dict) -> list[dict]:
    """All panels, including those nested in (collapsed) rows."""
    out = []
    for p in dashboard["panels"]:
        if p.get("type") == "row":
            out.extend(p.get("panels", []))
        else:
            out.append(p)
    return out


def grafana_regex_escape(value: str) -> str:
    return re.sub(r"([\\^$.*+?()\[\]{}|/-])", r"\\\1", value)


def interpolate(query: str, run: str) -> str:
    """What Grafana sends for a query: $run (regex-escaped inside /.../), $timeFilter, $__interval."""
    q = query.replace("/^$run$/", f"/^{grafana_regex_escape(run)}$/")
    q = q.replace("$timeFilter", "time > now() - 1h").replace("$__interval", f"{STEP}s")
    leftover = re.findall(r"\$(?!/)\w*", q)
    assert not leftover, f"unhandled Grafana variables {leftover} in {query!r}"
    return q


@pytest.fixture(scope="module")
def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


@pytest.fixture(scope="module")
def db(influxdb) -> str:
    name = "mqttrl_dashboard"
    influxdb.query(f'CREATE DATABASE "{name}"', method="POST")
    t_end = (int(time.time()) // STEP) * STEP - STEP
    influxdb.write(name, fake_run(RUN, 0.0, t_end))
    influxdb.write(
        name,
        fake_run(OTHER, 1000.0, t_end, shift=5)
        + [f"learner,run={OTHER} workers_online=99i,model_version=999i {t_end + 5}"],
    )
    return name


def run_query(influxdb, db: str, query: str) -> dict:
    """Run one query; returns {group tag value or None: list of rows as dicts}."""
    res = influxdb.query(query, db=db)["results"][0]
    assert "error" not in res, f"{res['error']}\n{query}"
    out = {}
    for s in res.get("series", []):
        tags = s.get("tags") or {}
        assert len(tags) <= 1, tags
        key = next(iter(tags.values())) if tags else None
        out[key] = [dict(zip(s["columns"], v)) for v in s["values"]]
    return out


def test_dashboard_is_influxql_over_the_documented_schema(dashboard):
    schema = doc_schema()
    assert dashboard["uid"] and dashboard["title"]
    var = {v["name"]: v for v in dashboard["templating"]["list"]}["run"]
    assert var["query"] == 'SHOW TAG VALUES FROM "learner" WITH KEY = "run"'
    ds = (PROVISIONING / "datasources" / "influxdb.yml").read_text()
    uid = re.search(r"^\s*uid:\s*(\S+)", ds, re.M).group(1)
    assert re.search(r"^\s*version:\s*InfluxQL\s*$", ds, re.M) and re.search(r"^\s*dbName:\s*mqttrl\s*$", ds, re.M)
    assert var["datasource"]["uid"] == uid
    titles = [p["title"] for p in panels(dashboard)]
    assert len(titles) == len(set(titles)), "panel titles must be unique"
    assert set(titles) == set(EXPECT), (
        f"panels without expectations here, or expectations without panels: {set(titles) ^ set(EXPECT)}"
    )
    used = set()
    for p in panels(dashboard):
        assert p.get("targets"), f"panel {p['title']!r} has no query"
        for t in p["targets"]:
            where = f"panel {p['title']!r} target {t.get('refId')}"
            assert t.get("rawQuery") is True and t.get("query", "").strip(), f"{where}: not a raw InfluxQL query"
            assert (t.get("datasource") or p["datasource"])["uid"] == uid and p["datasource"]["type"] == "influxdb", (
                where
            )
            q = t["query"]
            assert "$timeFilter" in q and '"run" =~ /^$run$/' in q, f"{where}: must filter by $run and $timeFilter: {q}"
            if "GROUP BY time(" in q:
                assert "GROUP BY time($__interval)" in q, f"{where}: use $__interval"
            m = re.search(r'FROM "(\w+)"', q)
            assert m and m.group(1) in schema, f"{where}: measurement not in docs/telemetry.md: {q}"
            used.add(m.group(1))
            for field in re.findall(r'\w+\("(\w+)"\)', q):
                ok = field in schema[m.group(1)] or (m.group(1) == "learner" and field.startswith("train_"))
                assert ok, f"{where}: field {field!r} is not a documented field of {m.group(1)}"
    assert used == set(schema), f"measurements the dashboard does not show: {set(schema) - used}"


def test_fake_run_covers_the_documented_schema():
    written: dict[str, set[str]] = {}
    for line in fake_run(RUN, 0.0, 1_000_000):
        head, fields, _ = line.split(" ")
        written.setdefault(head.split(",")[0], set()).update(f.split("=")[0] for f in fields.split(","))
    schema = doc_schema()
    assert set(written) == set(schema)
    for m, fields in schema.items():
        documented = {f for f in fields if "<" not in f}
        assert documented <= written[m], f"{m}: not written: {documented - written[m]}"
        assert written[m] - documented <= {"train_loss", "train_policy_loss", "train_value_loss"}, m


def test_every_panel_query_returns_the_written_data(influxdb, db, dashboard):
    var = dashboard["templating"]["list"][0]
    runs = run_query(influxdb, db, var["query"])[None]
    assert {r["value"] for r in runs} == {RUN, OTHER}
    for p in panels(dashboard):
        for t in p["targets"]:
            where = f"panel {p['title']!r} target {t['refId']}"
            got = run_query(influxdb, db, interpolate(t["query"], RUN))
            want = EXPECT[p["title"]][t["refId"]]
            assert set(got) == set(want), f"{where}: series {sorted(got, key=str)}, expected {sorted(want, key=str)}"
            for key, expected in want.items():
                rows = got[key]
                assert rows, f"{where}: series {key} is empty"
                last = rows[-1]
                for col, value in expected.items():
                    assert last[col] is not None and math.isclose(last[col], value, rel_tol=1e-9), (
                        f"{where} series {key}: {col} = {last[col]}, expected {value} (last row {last})"
                    )
                if "GROUP BY time(" in t["query"]:
                    assert len(rows) > 1, f"{where}: expected a time series, got {rows}"
    # the counter reset at the learner restart is not shown as a negative rate
    rej = run_query(
        influxdb,
        db,
        interpolate(
            next(p for p in panels(dashboard) if p["title"] == "Rejections by reason")["targets"][0]["query"], RUN
        ),
    )
    assert all(r["non_negative_difference"] >= 0 for rows in rej.values() for r in rows)
    assert sum(r["non_negative_difference"] for r in rej["stale_version"]) == 39 + (L - 40)
    # and the other run's values show through its own $run
    other = run_query(
        influxdb,
        db,
        interpolate(next(p for p in panels(dashboard) if p["title"] == "Workers online")["targets"][0]["query"], OTHER),
    )
    assert other[None][-1]["last"] == 99
