"""Prometheus metrics of one service instance (its own registry, so several apps can live in one process)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from ..wire import RunStatus
from .store import RecordStore


class Metrics:
    """Counters the run manager bumps, request latencies the API records, and run counts read from the store."""

    def __init__(self, store: RecordStore) -> None:
        self.registry = CollectorRegistry()
        self.submitted = Counter("raysampler_runs_submitted", "Runs accepted by POST /v1/runs", registry=self.registry)
        self.finished = Counter(
            "raysampler_runs_finished", "Runs that reached a final status", ["status"], registry=self.registry
        )
        self.draws = Counter(
            "raysampler_draws_stored", "Draw vectors (one chain, one index) stored durably", registry=self.registry
        )
        self.summary_cpu = Counter(
            "raysampler_summary_cpu_seconds",
            "CPU time (all threads) spent computing posterior summary tables",
            registry=self.registry,
        )
        self.requests = Histogram(
            "raysampler_http_request_duration_seconds",
            "HTTP request latency (to headers)",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.registry.register(_RunsByStatus(store))


class _RunsByStatus(Collector):
    """The gauge raysampler_runs{status=...}, read from the store at scrape time."""

    def __init__(self, store: RecordStore) -> None:
        self.store = store

    def collect(self) -> Iterator[GaugeMetricFamily]:
        g = GaugeMetricFamily("raysampler_runs", "Runs in the store by status", labels=["status"])
        counts = self.store.count_runs_by_status()
        for s in RunStatus:
            g.add_metric([s.value], counts.get(s, 0))
        yield g
