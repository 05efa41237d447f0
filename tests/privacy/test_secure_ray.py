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
