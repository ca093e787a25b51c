"""A node's Prometheus endpoint scraped by a real Prometheus (Debian's package): the blocks'
time, the control-period histogram (its p99 through PromQL) and the gauges arrive as exposed."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request

import pytest

from benchmarks.harness.procs import stop_server
from mqttrl.broker.embedded import _wait_port, free_port
from mqttrl.observe.prometheus import serve_metrics
from mqttrl.observe.timing import BlockTimes, PeriodStats


def query(port: int, promql: str) -> list:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.load(r)["data"]["result"]


def test_prometheus_scrapes_a_nodes_blocks_and_control_periods(tmp_path):
    if not shutil.which("prometheus"):
        pytest.fail("prometheus is not on PATH: apt-get install prometheus (scripts/test.sh does this)")
    blocks = BlockTimes()
    blocks.add("forward", 0.25)
    blocks.add("env_step", 1.5)
    stats = PeriodStats()
    for _ in range(98):
        stats.record(0.0004)
    stats.record(0.012)
    stats.record(0.012)
    stats.overruns = 2
    node_port = free_port()
    server = serve_metrics(node_port, "w0", blocks, lambda: stats, lambda: {"env_steps": 1234}, addr="127.0.0.1")
    assert server is not None
    prom_port = free_port()
    conf = tmp_path / "prometheus.yml"
    conf.write_text(
        "global:\n  scrape_interval: 1s\n"
        f"scrape_configs:\n  - job_name: mqttrl\n    static_configs:\n      - targets: ['127.0.0.1:{node_port}']\n"
    )
    log = open(tmp_path / "prometheus.log", "ab")
    proc = subprocess.Popen(
        [
            "prometheus",
            f"--config.file={conf}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{prom_port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        assert _wait_port(prom_port, 15), f"prometheus did not start; see {tmp_path / 'prometheus.log'}"
        deadline = time.monotonic() + 20
        got: list = []
        while not got and time.monotonic() < deadline:
            time.sleep(0.5)
            got = query(prom_port, 'mqttrl_block_seconds_total{block="env_step",node="w0"}')
        assert got, "Prometheus never scraped the endpoint"
        assert float(got[0]["value"][1]) == 1.5
        p99 = query(prom_port, "histogram_quantile(0.99, mqttrl_control_period_error_seconds_bucket)")
        assert 0.0075 < float(p99[0]["value"][1]) <= 0.015  # in the bucket of the two 12 ms periods
        assert float(query(prom_port, "mqttrl_control_overruns_total")[0]["value"][1]) == 2
        assert float(query(prom_port, 'mqttrl_env_steps{node="w0"}')[0]["value"][1]) == 1234
    finally:
        stop_server(proc, log)
        server.shutdown()
