"""Service benchmarks (issue 4), against a real `raysampler serve` subprocess on 127.0.0.1 with a local Ray:

1. draws/s delivered to an NDJSON client for d = 54 (logistic_synthetic with 54 features): a finished run's stored
   draws read in full (a) as raw NDJSON lines (httpx, no parsing), (b) parsed with json.loads, (c) through the SDK
   into numpy; and (d) the live rate while the run samples (follow=true), next to the sampler's own rate;
2. the API's added latency per submit: POST /v1/runs wall time (client side, median of 30) next to the same
   validation done in-process (`raysampler.service.specs.build`) and the HTTP floor (GET /v1/health).

    python benchmarks/service.py [--draws 5000] [--chains 8]
Results: benchmarks/results/service.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time

import httpx
import numpy as np
from common import environment, print_table, write_json

from raysampler.client import Client
from raysampler.service.local import LocalService
from raysampler.service.schemas import RunSpec
from raysampler.service.specs import build
from raysampler.service.store import SQLiteStore


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--draws", type=int, default=5000)
    ap.add_argument("--chains", type=int, default=8)
    ap.add_argument("--submits", type=int, default=30)
    args = ap.parse_args()
    spec = {
        "model": {"family": "logistic_regression"},
        "data": {"dataset": "builtin:logistic_synthetic", "options": {"n": 20000, "d": 54}},
        "num_shards": 2,
        "chains": args.chains,
        "num_rounds": args.draws,
        "burn_in": 100,
        "seed": 0,
    }
    rows, out = [], {"environment": environment(), "spec": spec}
    with (
        tempfile.TemporaryDirectory() as tmp,
        LocalService(f"{tmp}/data", env={"RAYSAMPLER_RAY_NUM_CPUS": "2", "OPENBLAS_NUM_THREADS": "1"}) as svc,
        Client(svc.url, svc.api_key) as client,
    ):
        headers = {"Authorization": f"Bearer {svc.api_key}"}
        # (d) live: follow the stream while the run samples
        run = client.submit(spec)
        t0, n_live, first = time.perf_counter(), 0, None
        for batch in run.stream_draws(follow=True):  # rate measured from the first batch (after set-up) on
            n_live += len(batch)
            if first is None:
                first, n_first = time.perf_counter() - t0, len(batch)
        t_live = time.perf_counter() - t0
        live_rate = (n_live - n_first) / (t_live - first)
        info = run.info()
        lines = info["progress"]["draws_stored"] * args.chains
        assert info["status"] == "SUCCEEDED" and n_live == lines, (info["status"], n_live, lines)
        sampler_rate = lines / info["timings"]["sampling_s"]

        # (a)-(c): the finished run, read in full
        def raw() -> int:
            with httpx.stream("GET", f"{svc.url}/v1/runs/{run.id}/draws", headers=headers, timeout=None) as r:
                return sum(1 for line in r.iter_lines() if line) - 1

        def parsed() -> int:
            with httpx.stream("GET", f"{svc.url}/v1/runs/{run.id}/draws", headers=headers, timeout=None) as r:
                return sum(1 for line in r.iter_lines() if line and "values" in json.loads(line))

        def sdk() -> int:
            return int(np.prod(run.draws().shape[:2]))

        for name, fn in (("raw NDJSON lines", raw), ("json.loads per line", parsed), ("SDK run.draws() → numpy", sdk)):
            times = []
            for _ in range(3):
                t = time.perf_counter()
                n = fn()
                times.append(time.perf_counter() - t)
                assert n == lines, (name, n, lines)
            best = min(times)
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
        print_table(
            f"Draw delivery, d = 54, {args.chains} chains x {info['progress']['draws_stored']} draws",
            ["path", "draw lines", "seconds", "draws/s"],
            rows,
            [f"sampler's own rate during the run: {sampler_rate:,.0f} draws/s (lines per second of sampling)"],
        )
        # 2. submit latency
        small = {
            "model": {"family": "logistic_regression"},
            "data": {"dataset": "builtin:breast_cancer"},
            "num_shards": 4,
            "chains": 4,
            "num_rounds": 10**6,
        }
        health, submit = [], []
        for _ in range(args.submits):
            t = time.perf_counter()
            httpx.get(f"{svc.url}/v1/health")
            health.append(time.perf_counter() - t)
        for k in range(args.submits):
            t = time.perf_counter()
            r = httpx.post(f"{svc.url}/v1/runs", json=small | {"seed": k}, headers=headers, timeout=60)
            submit.append(time.perf_counter() - t)
            assert r.status_code == 202, r.text
            httpx.post(f"{svc.url}/v1/runs/{r.json()['id']}/cancel", headers=headers, timeout=60)
        store = SQLiteStore(f"{tmp}/scratch.sqlite3")
        inproc = []
        for k in range(args.submits):
            t = time.perf_counter()
            build(RunSpec.model_validate(small | {"seed": k}), "x", store)
            inproc.append(time.perf_counter() - t)
        med = {k: statistics.median(v) * 1e3 for k, v in (("health", health), ("submit", submit), ("build", inproc))}
        out["submit_latency_ms"] = med | {"added_ms": med["submit"] - med["build"]}
        print_table(
            f"Submit latency (median of {args.submits}, ms)",
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
    print("wrote", write_json("service", out))


if __name__ == "__main__":
    main()
