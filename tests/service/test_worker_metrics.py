"""Per-run and per-worker series at /metrics from a real server on a real local Ray (fixture `service`, 2 shards):
rounds/s, τ_i, N_i, idle fraction and restarts of a running run, labelled by tenant, run id, shard and site; gone
once the run ends (bounded cardinality); a resumed run's restart counted."""

from __future__ import annotations

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from support.service_helpers import ALICE, spec, wait_until

from raysampler.client import Client

pytestmark = [pytest.mark.service]


def _series(svc, run_id: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """(metric name, labels) → value of every sample labelled with `run_id`."""
    text = httpx.get(f"{svc.url}/metrics", timeout=30).raise_for_status().text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.labels.get("run_id") == run_id
    }


def _value(series, name: str, **labels: str) -> float | None:
    return next((v for (n, ls), v in series.items() if n == name and dict(ls).items() >= labels.items()), None)


def test_running_runs_have_worker_series_that_go_when_they_end(service):
    with Client(service.url, ALICE) as c:
        run = c.submit(spec(num_rounds=10**6, burn_in=10, chains=2, num_shards=2, seed=8))
        # τ_i is refreshed every LIVE_STATS_S (2 s) while it samples
        series = wait_until(
            lambda: (
                (s := _series(service, run.id))
                and _value(s, "raysampler_worker_step_seconds", shard="1")
                and _value(s, "raysampler_run_rounds_per_second")
                and s
            ),
            timeout=120,
            what="per-worker series",
        )
        ids = {"tenant": "alice", "run_id": run.id}
        assert _value(series, "raysampler_run_rounds_per_second", **ids) > 0
        assert _value(series, "raysampler_run_restarts", **ids) == 0
        for shard in ("0", "1"):
            assert _value(series, "raysampler_worker_step_seconds", **ids, shard=shard) > 0
            assert _value(series, "raysampler_worker_local_steps", **ids, shard=shard) >= 1
            assert 0 <= _value(series, "raysampler_worker_idle_fraction", **ids, shard=shard) <= 1
            assert _value(series, "raysampler_worker_restarts", **ids, shard=shard) == 0
        assert {dict(ls).get("site") for (n, ls) in series if n.startswith("raysampler_worker")} == {""}  # no sites
        wait_until(lambda: run.info()["progress"]["draws_stored"] > 0, what="a checkpoint")
        run.cancel()
        wait_until(lambda: run.status() == "CANCELLED", what="CANCELLED")
        assert _series(service, run.id) == {}  # an ended run's series are dropped

        run.resume()
        series = wait_until(
            lambda: (s := _series(service, run.id)) and _value(s, "raysampler_run_rounds_per_second") and s,
            timeout=120,
            what="the resumed run's series",
        )
        assert _value(series, "raysampler_run_restarts", **ids) == 1
        run.cancel()
        wait_until(lambda: run.status() == "CANCELLED", what="CANCELLED")
        assert _series(service, run.id) == {}
