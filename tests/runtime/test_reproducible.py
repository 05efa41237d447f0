"""Reproducible by default: the same spec and seed give bit-identical draws run after run and on either executor;
balancing from timings switches on only when worker speeds really differ, says so, and its recorded N_i schedule
replays the draws exactly."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import raysampler as rs


@pytest.fixture(scope="module")
def data():
    X, y = rs.datasets.load("breast_cancer")
    return rs.shard(X, y, num_shards=4)


def test_same_seed_same_draws_twice_on_ray_and_locally(ray_session, data):
    """Defaults only (balance="auto", transport, preconditioning, tuning): two Ray runs and a local run agree."""
    model = rs.models.LogisticRegression()
    kw = dict(chains=2, num_rounds=150, burn_in=50, seed=21, progress=False)
    first = rs.sample(model, data, executor="ray", **kw)
    second = rs.sample(model, data, executor="ray", **kw)
    local = rs.sample(model, data, executor="local", **kw)
    assert not first.run_stats.balanced and len(first.run_stats.N_schedule) == 1
    np.testing.assert_array_equal(first.draws, second.draws)
    np.testing.assert_array_equal(first.draws, local.draws)
    assert not np.array_equal(rs.sample(model, data, executor="local", **{**kw, "seed": 22}).draws, local.draws)


def test_slow_worker_is_balanced_with_a_warning_and_its_schedule_replays(ray_session, monkeypatch):
    """A 4x slower worker (test-only delay hook) makes "auto" balance N_i; the run warns and records the schedule;
    passing it back as n_local= replays the draws exactly, even in-process and without the slow worker."""
    monkeypatch.setenv("RAYSAMPLER_WORKER_PROCESSES", "2")  # a worker process each
    X, y = rs.datasets.load("breast_cancer")
    X, y = np.repeat(X, 40, axis=0), np.repeat(y, 40)  # enough work per step (ms) that timings are meaningful
    shards = rs.shard(X, y, num_shards=2, strategy="random")
    model = rs.models.LogisticRegression()
    # 110 rounds: "auto" can switch on after AUTO_ESTIMATES (3) windows of 20 rounds, and rebalance after
    kw = dict(chains=2, num_rounds=80, burn_in=30, seed=3, progress=False, local_kernel="lmc")
    with pytest.warns(UserWarning, match="balanced from measured timings"):
        slow = rs.sample(model, shards, executor="ray", _slowdown={1: 4.0}, **kw)
    schedule = slow.run_stats.N_schedule
    assert slow.run_stats.balanced and len(schedule) >= 2
    n_fast, n_slow = schedule[-1][1]
    assert n_slow < n_fast
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        replay = rs.sample(model, shards, executor="local", n_local=schedule, **kw)
    assert replay.run_stats.N_schedule == schedule
    np.testing.assert_array_equal(replay.draws, slow.draws)
