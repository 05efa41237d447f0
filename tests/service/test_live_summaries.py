"""Summaries through a real server (executor "local"): a run's table is made when it ends, before anyone asks; a
running run's page is served its latest table while a newer one is not yet due; the CPU time spent is in /metrics."""

from __future__ import annotations

import time

import httpx
import pytest
from support.service_helpers import ALICE, hdr, spec, wait_until

from raysampler.client import Client
from raysampler.service.summaries import RUNNING_CPU_SHARE

pytestmark = [pytest.mark.service]


def _summary(svc, run_id: str) -> dict:
    return httpx.get(f"{svc.url}/v1/runs/{run_id}/summary", headers=hdr(ALICE), timeout=120).raise_for_status().json()


def _summary_cpu(svc) -> float:
    text = httpx.get(f"{svc.url}/metrics", timeout=30).text
    return float(
        next(line.split()[1] for line in text.splitlines() if line.startswith("raysampler_summary_cpu_seconds_total"))
    )


def test_an_ended_runs_table_is_made_when_it_ends(local_service):
    with Client(local_service.url, ALICE) as c:
        run = c.submit(spec(num_rounds=200, burn_in=10, chains=2))
        info = run.wait(timeout=300)
    n = info["progress"]["draws_stored"]
    stored = local_service.data_dir / "runs" / "alice" / run.id / f"summary-{n}-0.94.json"
    wait_until(stored.exists, timeout=60, what="the table made at the run's end")  # no request has asked for it
    cpu = _summary_cpu(local_service)
    assert cpu > 0
    body = _summary(local_service, run.id)
    assert body["draws_per_chain"] == n and len(body["rows"]) == 31
    assert _summary_cpu(local_service) == cpu  # read, not computed again


def test_a_running_runs_page_is_served_its_latest_table_until_a_newer_one_is_due(local_service):
    with Client(local_service.url, ALICE) as c:
        run = c.submit(spec(num_rounds=10**6, burn_in=10, chains=8, seed=4))
        try:
            wait_until(lambda: run.info()["progress"]["draws_stored"] >= 200, what="stored draws")
            cpu0 = _summary_cpu(local_service)
            first = _summary(local_service, run.id)
            t_first = time.monotonic()
            spent = _summary_cpu(local_service) - cpu0
            assert spent > 0 and first["status"] == "RUNNING"
            n = first["draws_per_chain"]
            wait_until(lambda: run.info()["progress"]["draws_stored"] > n, what="more stored draws")
            again = _summary(local_service, run.id)
            # within the first table's CPU time / RUNNING_CPU_SHARE of it: that table again, nothing computed
            assert time.monotonic() - t_first < spent / RUNNING_CPU_SHARE
            assert again == first and _summary_cpu(local_service) - cpu0 == spent
        finally:
            run.cancel()
