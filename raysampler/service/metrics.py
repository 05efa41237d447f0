"""Prometheus metrics of one service instance (its own registry, so several apps can live in one process).

Per-run and per-worker series (rounds/s, τ_i, N_i, idle fraction, restarts) exist only while a run runs: the run
manager's `LiveRun`s, read at scrape time, so their number is bounded by the runs running at once."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from ..wire import RunStatus
from .schemas import WorkerStats
from .store import RecordStore


@dataclass
class LiveRun:
    """A running run's numbers as /metrics shows them: its round rate over the last chunk, its restarts (resumes
    from a checkpoint), and per worker (shard) τ_i, N_i, idle fraction and how often it was lost."""

    tenant: str
    run_id: str
    rounds_per_s: float | None = None
    restarts: int = 0
    workers: list[WorkerStats] = field(default_factory=list)
    worker_lost: dict[int, int] = field(default_factory=dict)  # shard → times its worker was lost


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

    def watch_live_runs(self, source: Callable[[], list[LiveRun]]) -> None:
        """Show the running runs `source` returns (at each scrape) as per-run and per-worker series."""
        self.registry.register(_LiveRuns(source))


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


class _LiveRuns(Collector):
    """raysampler_run_* {tenant, run_id} and raysampler_worker_* {tenant, run_id, shard, site} of running runs."""

    def __init__(self, source: Callable[[], list[LiveRun]]) -> None:
        self.source = source

    def collect(self) -> Iterator[GaugeMetricFamily]:
        run_labels, worker_labels = ["tenant", "run_id"], ["tenant", "run_id", "shard", "site"]
        rate = GaugeMetricFamily(
            "raysampler_run_rounds_per_second", "Rounds per second over the run's last chunk", labels=run_labels
        )
        restarts = GaugeMetricFamily(
            "raysampler_run_restarts", "Times the run resumed from its checkpoint", labels=run_labels
        )
        tau = GaugeMetricFamily(
            "raysampler_worker_step_seconds", "Measured seconds per local step (tau_i)", labels=worker_labels
        )
        steps = GaugeMetricFamily("raysampler_worker_local_steps", "Local steps per round (N_i)", labels=worker_labels)
        idle = GaugeMetricFamily(
            "raysampler_worker_idle_fraction", "Share of the round the worker waited", labels=worker_labels
        )
        lost = GaugeMetricFamily(
            "raysampler_worker_restarts",
            "Times the worker was lost (the run then resumed from its checkpoint)",
            labels=worker_labels,
        )
        for run in self.source():
            ids = [run.tenant, run.run_id]
            if run.rounds_per_s is not None and math.isfinite(run.rounds_per_s):
                rate.add_metric(ids, run.rounds_per_s)
            restarts.add_metric(ids, run.restarts)
            for w in run.workers:
                labels = [*ids, str(w.shard), w.site or ""]
                for family, value in ((tau, w.tau_s), (steps, w.local_steps), (idle, w.idle_fraction)):
                    if value is not None:
                        family.add_metric(labels, value)
                lost.add_metric(labels, run.worker_lost.get(w.shard, 0))
        yield from (rate, restarts, tau, steps, idle, lost)
