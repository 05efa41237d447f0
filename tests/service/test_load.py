"""A small load on a real server (the scaled-down benchmarks/perf/load.py): two tenants submitting at once, ten clients
following live NDJSON draw streams and three following SSE events. No 5xx, every followed stream has each draw line
exactly once, every event stream ends with its run's final status, and both tenants' runs all finish."""

from __future__ import annotations

import json
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from raysampler.service.local import LocalService

pytestmark = [pytest.mark.service, pytest.mark.slow]  # starts a server of its own (LocalService)

KEYS = {"t0": "load-key-00-0123456789", "t1": "load-key-01-0123456789"}
SPEC = {
    "model": {"family": "gaussian"},
    "data": {"dataset": "builtin:gaussian_toy"},
    "num_shards": 2,
    "algorithm": {"name": "dglmc", "params": {}},
    "chains": 2,
    "num_rounds": 300,
    "burn_in": 20,
}


@pytest.fixture(scope="module")
def server():
    root = Path(tempfile.mkdtemp(prefix="rs-load-"))
    env = {
        "RAYSAMPLER_EXECUTOR": "local",
        "RAYSAMPLER_MAX_CONCURRENT_RUNS": "2",
        "RAYSAMPLER_CHUNK_S": "0.1",
        "RAYSAMPLER_POLL_S": "0.05",
        "RAY_AUTH_MODE": "disabled",
    }
    svc = LocalService(root / "data", keys=KEYS, env=env, log=root / "server.log")
    svc.start()
    yield svc
    svc.stop()


def _follow_draws(url: str, key: str, run_id: str) -> tuple[int, list[int]]:
    with httpx.stream(
        "GET",
        f"{url}/v1/runs/{run_id}/draws",
        params={"follow": "true"},
        headers={"Authorization": f"Bearer {key}"},
        timeout=120,
    ) as r:
        lines = [json.loads(x) for x in r.iter_lines()]
        return r.status_code, [x["offset"] for x in lines if x.get("type") != "header"]


def _follow_events(url: str, key: str, run_id: str) -> tuple[int, str | None]:
    last, event = None, None
    with httpx.stream(
        "GET",
        f"{url}/v1/runs/{run_id}/events",
        params={"follow": "true"},
        headers={"Authorization": f"Bearer {key}"},
        timeout=120,
    ) as r:
        for line in r.iter_lines():
            if line.startswith("event:"):
                event = line.split(":", 1)[1].strip()
            elif line.startswith("data:") and event == "status":
                last = json.loads(line.split(":", 1)[1])["status"]
        return r.status_code, last


def test_concurrent_submits_and_followers_lose_nothing(server):
    codes: list[int] = []

    def submit(tenant: str, i: int) -> tuple[str, str]:
        r = httpx.post(
            f"{server.url}/v1/runs",
            json=SPEC | {"seed": i},
            timeout=60,
            headers={"Authorization": f"Bearer {KEYS[tenant]}"},
        )
        codes.append(r.status_code)
        assert r.status_code == 202, r.text
        return tenant, r.json()["id"]

    with ThreadPoolExecutor(8) as pool:
        runs = list(pool.map(lambda a: submit(*a), [(t, i) for i in range(5) for t in KEYS]))
        followed = [runs[i % len(runs)] for i in range(10)]
        draw_jobs = [pool.submit(_follow_draws, server.url, KEYS[t], rid) for t, rid in followed]
        sse_jobs = [pool.submit(_follow_events, server.url, KEYS[t], rid) for t, rid in runs[:3]]
        draws = [j.result(timeout=300) for j in draw_jobs]
        events = [j.result(timeout=300) for j in sse_jobs]
    final = {
        rid: httpx.get(f"{server.url}/v1/runs/{rid}", headers={"Authorization": f"Bearer {KEYS[t]}"}).json()
        for t, rid in runs
    }
    assert all(c < 500 for c in codes)
    assert {f["status"] for f in final.values()} == {"SUCCEEDED"}
    for (_, rid), (status, offsets) in zip(followed, draws):
        info = final[rid]
        assert status == 200
        assert offsets == list(range(info["progress"]["draws_stored"] * info["spec"]["chains"])), rid
        assert info["progress"]["draws_stored"] == 300
    for (_, rid), (status, last) in zip(runs[:3], events):
        assert status == 200 and last == final[rid]["status"]
