"""Service benchmarks (issue 4), against a real `raysampler serve` subprocess on 127.0.0.1 with a local Ray:

1. draws/s delivered to an NDJSON client for d = 54 (logistic_synthetic with 54 features): a finished run's stored
   draws read in full (a) as raw NDJSON lines (httpx, no parsing), (b) parsed with json.loads, (c) through the SDK
   into numpy; and (d) the live rate while the run samples (follow=true), next to the sampler's own rate;
2. the API's added latency per submit: POST /v1/runs wall time (client side, median of 30) next to the same
   validation done in-process (`raysampler.service.specs.build`) and the HTTP floor (GET /v1/health).

    python benchmarks/perf/service.py [--draws 5000] [--chains 8]
Results: benchmarks/perf/results/service.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import _path  # noqa: F401  (puts benchmarks/ on sys.path for harness)
import harness
import httpx
import numpy as np

from raysampler.client import Client
from raysampler.service.local import LocalService
from raysampler.service.schemas import RunSpec
from raysampler.service.specs import build
from raysampler.service.store import SQLiteStore

#: the run whose submit latency is measured: validated and queued, then cancelled
SMALL = {
    "model": {"family": "logistic_regression"},
    "data": {"dataset": "builtin:breast_cancer"},
    "num_shards": 4,
    "chains": 4,
    "num_rounds": 10**6,
}


def arguments() -> argparse.ArgumentParser:
    ap = harness.parser(__doc__, __file__)
    ap.add_argument("--draws", type=int, default=5000)
    ap.add_argument("--chains", type=int, default=8)
    ap.add_argument("--submits", type=int, default=30)
    return ap


def measure(args: argparse.Namespace) -> harness.Report:
    spec = {
        "model": {"family": "logistic_regression"},
        "data": {"dataset": "builtin:logistic_synthetic", "options": {"n": 20000, "d": 54}},
        "num_shards": 2,
        "chains": args.chains,
        "num_rounds": args.draws,
        "burn_in": 100,
        "seed": 0,
    }
    with (
        tempfile.TemporaryDirectory() as tmp,
        LocalService(f"{tmp}/data", env={"RAYSAMPLER_RAY_NUM_CPUS": "2", "OPENBLAS_NUM_THREADS": "1"}) as svc,
        Client(svc.url, svc.api_key) as client,
    ):
        delivery, delivery_table = draw_delivery(svc, client, spec, args.chains)
        latency, latency_table = submit_latency(svc, f"{tmp}/scratch.sqlite3", args.submits)
    return harness.Report("service", {"spec": spec, **delivery, **latency}, [delivery_table, latency_table])


def draw_delivery(svc: Any, client: Any, spec: dict, chains: int) -> tuple[dict[str, Any], harness.Table]:
    """1. Follow a run live while it samples, then read its stored draws in full three ways."""
    headers = {"Authorization": f"Bearer {svc.api_key}"}
    run = client.submit(spec)
    t0, n_live, first, n_first = time.perf_counter(), 0, None, 0
    for batch in run.stream_draws(follow=True):  # rate measured from the first batch (after set-up) on
        n_live += len(batch)
        if first is None:
            first, n_first = time.perf_counter() - t0, len(batch)
    t_live = time.perf_counter() - t0
    assert first is not None, "no draws streamed"
    live_rate = (n_live - n_first) / (t_live - first)
    info = run.info()
    lines = info["progress"]["draws_stored"] * chains
    assert info["status"] == "SUCCEEDED" and n_live == lines, (info["status"], n_live, lines)
    sampler_rate = lines / info["timings"]["sampling_s"]

    def raw() -> int:
        with httpx.stream("GET", f"{svc.url}/v1/runs/{run.id}/draws", headers=headers, timeout=None) as r:
            return sum(1 for line in r.iter_lines() if line) - 1

    def parsed() -> int:
        with httpx.stream("GET", f"{svc.url}/v1/runs/{run.id}/draws", headers=headers, timeout=None) as r:
            return sum(1 for line in r.iter_lines() if line and "values" in json.loads(line))

    def sdk() -> int:
        return int(np.prod(run.draws().shape[:2]))

    out: dict[str, Any] = {}
    rows = []
    for name, fn in (("raw NDJSON lines", raw), ("json.loads per line", parsed), ("SDK run.draws() → numpy", sdk)):
        best = min(_timed(fn, lines, name) for _ in range(3))
        rows.append([name, lines, f"{best:.2f}", f"{lines / best:,.0f}"])
        out[name] = {"lines": lines, "seconds": best, "draws_per_s": lines / best}
    rows.append(["live follow=true (run sampling)", lines - n_first, f"{t_live - first:.2f}", f"{live_rate:,.0f}"])
    out["live"] = {
        "lines": n_live,
        "seconds": t_live,
        "draws_per_s": live_rate,
        "first_batch_s": first,
        "sampler_draws_per_s": sampler_rate,
    }
    table = harness.Table(
        f"Draw delivery, d = 54, {chains} chains x {info['progress']['draws_stored']} draws",
        ["path", "draw lines", "seconds", "draws/s"],
        rows,
        [f"sampler's own rate during the run: {sampler_rate:,.0f} draws/s (lines per second of sampling)"],
    )
    return out, table


def _timed(fn: Callable[[], int], lines: int, name: str) -> float:
    t = time.perf_counter()
    n = fn()
    seconds = time.perf_counter() - t
    assert n == lines, (name, n, lines)
    return seconds


def submit_latency(svc: Any, scratch: str, submits: int) -> tuple[dict[str, Any], harness.Table]:
    """2. Median wall time of GET /v1/health, POST /v1/runs, and the same validation in-process."""
    headers = {"Authorization": f"Bearer {svc.api_key}"}
    health, submit, inproc = [], [], []
    for _ in range(submits):
        t = time.perf_counter()
        httpx.get(f"{svc.url}/v1/health")
        health.append(time.perf_counter() - t)
    for k in range(submits):
        t = time.perf_counter()
        r = httpx.post(f"{svc.url}/v1/runs", json=SMALL | {"seed": k}, headers=headers, timeout=60)
        submit.append(time.perf_counter() - t)
        assert r.status_code == 202, r.text
        httpx.post(f"{svc.url}/v1/runs/{r.json()['id']}/cancel", headers=headers, timeout=60)
    store = SQLiteStore(scratch)
    for k in range(submits):
        t = time.perf_counter()
        build(RunSpec.model_validate(SMALL | {"seed": k}), "x", store)
        inproc.append(time.perf_counter() - t)
    med = {k: statistics.median(v) * 1e3 for k, v in (("health", health), ("submit", submit), ("build", inproc))}
    table = harness.Table(
        f"Submit latency (median of {submits}, ms)",
        ["GET /v1/health", "POST /v1/runs", "in-process validation (build)", "added by the API"],
        [
            [
                f"{med['health']:.1f}",
                f"{med['submit']:.1f}",
                f"{med['build']:.1f}",
                f"{med['submit'] - med['build']:.1f}",
            ]
        ],
    )
    return {"submit_latency_ms": med | {"added_ms": med["submit"] - med["build"]}}, table


def main(argv: list[str] | None = None) -> None:
    harness.run(arguments(), measure, argv)


if __name__ == "__main__":
    main()
