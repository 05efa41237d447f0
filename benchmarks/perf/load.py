"""The service under load, on loopback: many tenants submitting, many clients following live draw and event streams.

A real `raysampler serve` in a subprocess (SQLite, draw files; executor "local" so that the load is on the API and
the store rather than on starting Ray actors, with --concurrent runs sampled at once), then, bounded in count and time:
  * --tenants × --submits submits of small runs (gaussian_toy, 2 chains) from a pool of threads;
  * --followers clients following runs' NDJSON draws (`/draws?follow=true`) and --sse clients following their
    Server-Sent Events (`/events?follow=true`), round-robin over the submitted runs;
  * status polls (`GET /v1/runs/{id}`) throughout.
Checked: no 5xx; every followed draw stream has each line exactly once (offsets 0 … draws·chains − 1, compared with
the run's stored draws at the end); every SSE stream ends with the run's final status; every run ends SUCCEEDED.
Measured: p50/p99 latency of submit and of status, the server process's RSS over time (flat is the goal).

    python benchmarks/perf/load.py                         # 4 tenants × 50 submits, 100 NDJSON + 20 SSE followers
    python benchmarks/perf/load.py --tenants 2 --submits 5 --followers 10 --sse 3

Prints a table and writes benchmarks/perf/results/load.json.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import _path  # noqa: F401  (puts benchmarks/ on sys.path for harness)
import harness
import httpx
import numpy as np

from raysampler.service.local import LocalService

SPEC = {
    "model": {"family": "gaussian"},
    "data": {"dataset": "builtin:gaussian_toy"},
    "num_shards": 2,
    "algorithm": {"name": "dglmc", "params": {}},
    "chains": 2,
    "num_rounds": 400,
    "burn_in": 20,
}


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def follow_draws(url: str, key: str, run_id: str) -> dict[str, Any]:
    offsets: list[int] = []
    with httpx.stream(
        "GET",
        f"{url}/v1/runs/{run_id}/draws",
        params={"follow": "true"},
        headers={"Authorization": f"Bearer {key}"},
        timeout=300,
    ) as r:
        status = r.status_code
        for line in r.iter_lines():
            obj = json.loads(line)
            if obj.get("type") != "header":
                offsets.append(obj["offset"])
    return {"run": run_id, "status": status, "offsets": offsets}


def follow_events(url: str, key: str, run_id: str) -> dict[str, Any]:
    last_status = None
    with httpx.stream(
        "GET",
        f"{url}/v1/runs/{run_id}/events",
        params={"follow": "true"},
        headers={"Authorization": f"Bearer {key}"},
        timeout=300,
    ) as r:
        code, event = r.status_code, None
        for line in r.iter_lines():
            if line.startswith("event:"):
                event = line.split(":", 1)[1].strip()
            elif line.startswith("data:") and event == "status":
                last_status = json.loads(line.split(":", 1)[1])["status"]
    return {"run": run_id, "status": code, "last": last_status}


def arguments() -> argparse.ArgumentParser:
    ap = harness.parser(__doc__, __file__)
    ap.add_argument("--tenants", type=int, default=4)
    ap.add_argument("--submits", type=int, default=50, help="per tenant")
    ap.add_argument("--followers", type=int, default=100)
    ap.add_argument("--sse", type=int, default=20)
    ap.add_argument("--concurrent", type=int, default=4, help="runs sampled at once by the service")
    ap.add_argument("--timeout", type=float, default=600)
    return ap


@dataclass
class Observed:
    """What the clients saw: the submitted (tenant, run id)s, the streams, every run's final record, status codes,
    latencies and the server's RSS over time."""

    runs: list[tuple[str, str]] = field(default_factory=list)
    draws: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    final: dict[str, dict[str, Any]] = field(default_factory=dict)
    codes: list[int] = field(default_factory=list)
    submit_ms: list[float] = field(default_factory=list)
    status_ms: list[float] = field(default_factory=list)
    memory: list[tuple[float, float]] = field(default_factory=list)


def measure(args: argparse.Namespace) -> harness.Report:
    keys = {f"tenant{i}": f"load-key-{i:02d}-0123456789" for i in range(args.tenants)}
    root = Path(tempfile.mkdtemp(prefix="rs-load-"))
    env = {
        "RAYSAMPLER_EXECUTOR": "local",
        "RAYSAMPLER_MAX_CONCURRENT_RUNS": str(args.concurrent),
        "RAYSAMPLER_CHUNK_S": "0.2",
        "RAYSAMPLER_POLL_S": "0.05",
        "RAY_AUTH_MODE": "disabled",
    }
    svc = LocalService(root / "data", keys=keys, env=env, log=root / "server.log")
    svc.start()
    pid = svc.proc.pid
    seen = Observed()
    stop = threading.Event()
    t_start = time.perf_counter()

    def sample_memory() -> None:
        while not stop.is_set():
            seen.memory.append((time.perf_counter() - t_start, rss_mb(pid)))
            stop.wait(1.0)

    threading.Thread(target=sample_memory, daemon=True).start()
    client = httpx.Client(base_url=svc.url, timeout=60, limits=httpx.Limits(max_connections=64))
    try:
        load(client, svc.url, keys, args, seen, t_start)
    finally:
        stop.set()
        client.close()
        svc.stop()
    rows, bad_streams = check(seen, time.perf_counter() - t_start)
    table = harness.Table(
        f"Load: {args.tenants} tenants × {args.submits} submits, {args.followers} NDJSON + {args.sse} SSE "
        f"followers, {args.concurrent} runs at once",
        ["measure", "value"],
        rows,
    )
    payload = {
        "settings": harness.options(args),
        "rows": rows,
        "memory_mb": seen.memory,
        "bad_streams": bad_streams,
        "submit_ms": seen.submit_ms,
        "status_ms": seen.status_ms,
    }
    return harness.Report("load", payload, [table])


def load(
    client: httpx.Client, url: str, keys: dict[str, str], args: argparse.Namespace, seen: Observed, t_start: float
) -> None:
    """Submit from a pool of threads, then follow draw and event streams while polling statuses until all is done."""
    lock = threading.Lock()

    def auth(tenant: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {keys[tenant]}"}

    def submit(tenant: str, i: int) -> tuple[str, str]:
        t0 = time.perf_counter()
        r = client.post("/v1/runs", json=SPEC | {"seed": i}, headers=auth(tenant))
        with lock:
            seen.submit_ms.append(1e3 * (time.perf_counter() - t0))
            seen.codes.append(r.status_code)
        return tenant, r.json()["id"]

    def active() -> int:
        return sum(
            len(client.get("/v1/runs", params={"status": s, "limit": 200}, headers=auth(t)).json()["runs"])
            for t in keys
            for s in ("PENDING", "RUNNING")
        )

    with ThreadPoolExecutor(16) as pool:
        runs = list(pool.map(lambda a: submit(*a), [(t, i) for i in range(args.submits) for t in keys]))
    seen.runs = runs
    print(f"  {len(runs)} runs submitted in {time.perf_counter() - t_start:.1f} s", flush=True)
    followed = [runs[i % len(runs)] for i in range(args.followers)]
    sse = [runs[(7 * i) % len(runs)] for i in range(args.sse)]
    with ThreadPoolExecutor(args.followers + args.sse + 8) as pool:
        draw_jobs = [pool.submit(follow_draws, url, keys[t], rid) for t, rid in followed]
        sse_jobs = [pool.submit(follow_events, url, keys[t], rid) for t, rid in sse]
        deadline = time.perf_counter() + args.timeout
        while time.perf_counter() < deadline:
            for t, rid in runs[:: max(1, len(runs) // 20)]:  # status polls, timed, on a sample of the runs
                t0 = time.perf_counter()
                r = client.get(f"/v1/runs/{rid}", headers=auth(t))
                with lock:
                    seen.status_ms.append(1e3 * (time.perf_counter() - t0))
                    seen.codes.append(r.status_code)
            if active() == 0 and all(j.done() for j in draw_jobs + sse_jobs):
                break
            time.sleep(0.2)
        seen.draws = [j.result(timeout=60) for j in draw_jobs]
        seen.events = [j.result(timeout=60) for j in sse_jobs]
    seen.final = {rid: client.get(f"/v1/runs/{rid}", headers=auth(t)).json() for t, rid in runs}


def check(seen: Observed, wall_s: float) -> tuple[list[list[Any]], list[str]]:
    """The table's rows, and the followed draw streams that missed or repeated a line."""
    bad_streams = []
    for d in seen.draws:
        info = seen.final[d["run"]]
        expect = list(range(info["progress"]["draws_stored"] * info["spec"]["chains"]))
        if d["status"] != 200 or d["offsets"] != expect:
            bad_streams.append(d["run"])
    ended = sum(e["last"] == seen.final[e["run"]]["status"] for e in seen.events)
    statuses = {s: sum(f["status"] == s for f in seen.final.values()) for s in ("SUCCEEDED", "FAILED", "CANCELLED")}
    mem = np.array([m for _, m in seen.memory])
    third = max(1, len(mem) // 3)
    submit_ms, status_ms = seen.submit_ms, seen.status_ms
    rows = [
        ["submits", len(seen.runs)],
        ["5xx responses", sum(c >= 500 for c in seen.codes)],
        ["runs SUCCEEDED / FAILED / CANCELLED", " / ".join(str(statuses[s]) for s in statuses)],
        [
            "NDJSON followers with every line exactly once",
            f"{len(seen.draws) - len(bad_streams)} / {len(seen.draws)}",
        ],
        ["SSE followers that saw the final status", f"{ended} / {len(seen.events)}"],
        ["submit latency p50 / p99 (ms)", f"{np.percentile(submit_ms, 50):.1f} / {np.percentile(submit_ms, 99):.1f}"],
        ["status latency p50 / p99 (ms)", f"{np.percentile(status_ms, 50):.1f} / {np.percentile(status_ms, 99):.1f}"],
        [
            "server RSS first third / last third / max (MB)",
            f"{mem[:third].mean():.0f} / {mem[-third:].mean():.0f} / {mem.max():.0f}",
        ],
        ["wall time (s)", f"{wall_s:.0f}"],
    ]
    return rows, bad_streams


def main(argv: list[str] | None = None) -> None:
    harness.run(arguments(), measure, argv)


if __name__ == "__main__":
    main()
