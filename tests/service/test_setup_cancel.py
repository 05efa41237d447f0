"""A cancel while a run sets up (its data loading, Ray workers starting, tuning) ends it CANCELLED where the set-up is,
against a real server on a real local Ray (fixture `service`): no set-up event, stop reason cancelled, and sooner
than the same run's set-up takes when it is left to finish."""

from __future__ import annotations

import time

from support.service_helpers import spec, wait_until

#: a set-up of several seconds on 2 CPUs: 4 worker actors to start, a larger data set to tune on
SLOW_SETUP = {
    "data": {"dataset": "builtin:logistic_synthetic", "options": {"n": 40000, "d": 40}},
    "num_shards": 4,
    "num_rounds": 10**6,
    "burn_in": 0,
}


def _events(run) -> list[dict]:
    return list(run.events(follow=False))


def test_a_cancel_during_setup_stops_the_run_before_its_setup_ends(alice):
    # the same run's set-up left to finish: how long it takes here, now
    ref = alice.submit(spec(**SLOW_SETUP, seed=11))
    wait_until(lambda: ref.status() == "RUNNING", what="reference RUNNING")
    t0 = time.monotonic()
    wait_until(lambda: any(e["event"] == "setup" for e in _events(ref)), what="the set-up event")
    setup_s = time.monotonic() - t0
    ref.cancel()
    wait_until(lambda: ref.status() == "CANCELLED", what="reference CANCELLED")

    run = alice.submit(spec(**SLOW_SETUP, seed=12))
    wait_until(lambda: run.status() == "RUNNING", what="RUNNING")
    t0 = time.monotonic()
    run.cancel()
    wait_until(lambda: run.status() == "CANCELLED", timeout=120, what="CANCELLED")
    took = time.monotonic() - t0
    info = run.info()
    kinds = [e["event"] for e in _events(run)]
    assert info["stop_reason"] == "cancelled" and info["progress"]["draws_stored"] == 0
    assert "setup" not in kinds and kinds[-1] == "status"  # stopped before its set-up ended
    assert took < max(2.0, setup_s / 2), (took, setup_s)
