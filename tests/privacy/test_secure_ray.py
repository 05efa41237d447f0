"""A secure-sums run on Ray: a worker process lost mid-run fails that round (its partners' masks no longer cancel),
and the run rolls back to its last checkpoint, agrees new keys and finishes with exactly the draws of an
uninterrupted secure run."""

from __future__ import annotations

import os
import signal
import warnings

import numpy as np
import pytest

import raysampler as rs
from raysampler.algorithms import DGLMC
from raysampler.options import ExecutionOptions, RunOptions
from raysampler.sampling import Run

KW = dict(chains=2, num_rounds=200, burn_in=50, seed=13, secure_sums=True)


@pytest.fixture(autouse=True)
def two_processes(monkeypatch):
    monkeypatch.setenv("RAYSAMPLER_WORKER_PROCESSES", "2")


def test_a_lost_site_process_rolls_back_and_the_secure_run_finishes_identically(ray_session):
    X, y = rs.datasets.load("breast_cancer")
    data = rs.shard(X, y, num_shards=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        uninterrupted = rs.sample(rs.models.LogisticRegression(), data, executor="local", progress=False, **KW)
    events = []
    execution = ExecutionOptions(executor="ray", on_event=events.append)
    with Run(rs.models.LogisticRegression(), data, DGLMC(), RunOptions(**KW), execution) as run:
        assert len({p.pid for p in run.setup.placement}) == 2  # secure sums: no shard in the coordinator's process
        for i, _ in enumerate(run.chunks(target_chunk_s=0.02)):
            if i == 3:
                os.kill(run.setup.placement[1].pid, signal.SIGKILL)
        res = run.result()
    assert res.outcome.failure is None and res.outcome.restarts == 1
    assert [e.kind for e in events] == ["worker_lost", "resumed"]
    np.testing.assert_array_equal(res.draws, uninterrupted.draws)
    z = {r.quantity: r for r in res.run_stats.ledger.shards[1].releases}["z/rho"]
    assert z.mode == "masked" and z.messages >= res.run_stats.rounds


@pytest.mark.parametrize(("algorithm", "params"), [("fald", {"variant": "star"}), ("qlsd", {})])
def test_fald_and_qlsd_secure_runs_on_ray_give_the_in_process_draws(ray_session, algorithm, params):
    """Each site's process masks its term (one reply per shard): the sums, and so the draws, are the in-process
    secure run's, number for number."""
    X, y = rs.datasets.load("breast_cancer")
    data = rs.shard(X, y, num_shards=3)
    kw = {**KW, "num_rounds": 60, "burn_in": 20, "algorithm": algorithm, "progress": False, **params}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        local = rs.sample(rs.models.LogisticRegression(), data, executor="local", **kw)
        on_ray = rs.sample(rs.models.LogisticRegression(), data, executor="ray", **kw)
    assert len({p.pid for p in on_ray.run_stats.placement}) == 2
    np.testing.assert_array_equal(on_ray.draws, local.draws)
    quantity = "x,grad" if algorithm == "fald" else "q"
    for site in on_ray.run_stats.ledger.shards:
        assert {r.quantity: r.mode for r in site.releases}[quantity] == "masked"
