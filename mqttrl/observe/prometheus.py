"""A node's Prometheus endpoint: where its time goes and how its control periods keep time.

``serve_metrics(port, node, blocks, stats, gauges)`` starts ``prometheus_client``'s HTTP server
on its own registry (nothing global) with a collector that reads, at scrape time, the node's
:class:`~mqttrl.observe.timing.BlockTimes` totals, a real-time worker's
:class:`~mqttrl.observe.timing.PeriodStats` and a few gauges: nothing is done on the control thread
for Prometheus. Metrics (label ``node``; ``block`` for the first two):

- ``mqttrl_block_seconds_total``, ``mqttrl_block_calls_total``: time and calls per block
  (a worker: forward, env_step, wait, receive, encode, publish, load, record, paused; a learner:
  receive, sample, train_step, publish, checkpoint);
- ``mqttrl_control_period_error_seconds`` (histogram), ``mqttrl_control_overruns_total``,
  ``mqttrl_control_skipped_periods_total``, ``mqttrl_control_lost_seconds_total``,
  ``mqttrl_paused_seconds_total``: real-time workers only;
- ``mqttrl_<gauge>``: what ``gauges()`` returns (env steps, model version, updates ...).

``port`` 0 is off. A port in use is one warning, and the node runs on without an endpoint.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from mqttrl.observe.timing import ERROR_BUCKETS_MS, BlockTimes, PeriodStats

log = logging.getLogger("mqttrl.observe.prometheus")


class NodeCollector:
    def __init__(
        self,
        node: str,
        blocks: BlockTimes,
        stats: Callable[[], PeriodStats | None] | None = None,
        gauges: Callable[[], Mapping[str, float]] | None = None,
    ):
        self.node = node
        self.blocks = blocks
        self.stats = stats or (lambda: None)
        self.gauges = gauges or dict

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

        seconds = CounterMetricFamily("mqttrl_block_seconds", "seconds spent per block", labels=["node", "block"])
        calls = CounterMetricFamily("mqttrl_block_calls", "times each block ran", labels=["node", "block"])
        total, counts = dict(self.blocks.total), dict(self.blocks.counts)
        for block, s in sorted(total.items()):
            seconds.add_metric([self.node, block], s)
            calls.add_metric([self.node, block], counts.get(block, 0))
        yield seconds
        yield calls
        st = self.stats()
        if st is not None:
            hist, acc, buckets = list(st.hist), 0, []
            for edge, c in zip([*(e / 1000.0 for e in ERROR_BUCKETS_MS), float("inf")], hist):
                acc += c
                buckets.append(("+Inf" if edge == float("inf") else repr(edge), acc))
            h = HistogramMetricFamily(
                "mqttrl_control_period_error_seconds", "how late control periods ended", labels=["node"]
            )
            h.add_metric([self.node], buckets, st.err_sum)
            yield h
            for name, value, doc in (
                ("mqttrl_control_overruns", st.overruns, "periods later than the tolerance"),
                ("mqttrl_control_skipped_periods", st.skipped, "whole periods skipped (never a burst)"),
                ("mqttrl_control_lost_seconds", st.lost_s, "time of the skipped periods"),
                ("mqttrl_paused_seconds", st.paused_s, "time the games were paused"),
            ):
                c = CounterMetricFamily(name, doc, labels=["node"])
                c.add_metric([self.node], value)
                yield c
        for name, value in dict(self.gauges()).items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                g = GaugeMetricFamily(f"mqttrl_{name}", name.replace("_", " "), labels=["node"])
                g.add_metric([self.node], float(value))
                yield g


def serve_metrics(
    port: int,
    node: str,
    blocks: BlockTimes,
    stats: Callable[[], PeriodStats | None] | None = None,
    gauges: Callable[[], Mapping[str, float]] | None = None,
    addr: str = "0.0.0.0",
):
    """Start the endpoint on ``port`` (0: off); returns the server (``shutdown()`` stops it) or None."""
    if not port:
        return None
    try:
        from prometheus_client import CollectorRegistry, start_http_server
    except ImportError:
        log.warning("metrics_port=%d: prometheus_client is not installed (pip install prometheus_client)", port)
        return None
    registry = CollectorRegistry(auto_describe=False)
    registry.register(NodeCollector(node, blocks, stats, gauges))
    try:
        server, _thread = start_http_server(port, addr=addr, registry=registry)
    except OSError as e:
        log.warning("%s: no Prometheus endpoint on port %d (%s); running on without it", node, port, e)
        return None
    log.info("%s: Prometheus metrics on http://%s:%d/metrics", node, addr, port)
    return server
