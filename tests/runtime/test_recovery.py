"""Runs that survive lost processes: a worker process SIGKILLed mid-run, or the coordinator actor killed, and the
run rolls back to its last checkpoint and finishes with exactly the draws of an uninterrupted run."""

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

KW = dict(chains=2, num_rounds=200, burn_in=50, seed=13)  # kills come at the 2nd or 4th chunk
OPTS = RunOptions(**KW)


@pytest.fixture(autouse=True)
def two_processes(monkeypatch):
    """Shard 1 on a worker actor (shards this small otherwise share the coordinator's process)."""
    monkeypatch.setenv("RAYSAMPLER_WORKER_PROCESSES", "2")


@pytest.fixture(scope="module")
def data():
    X, y = rs.datasets.load("breast_cancer")
    return rs.shard(X, y, num_shards=2)


@pytest.fixture(scope="module")
def uninterrupted(data):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return rs.sample(rs.models.LogisticRegression(), data, executor="local", progress=False, **KW).draws


def _run_with(data, kill, at_chunk=3):
    events = []
    execution = ExecutionOptions(executor="ray", on_event=events.append)
    with Run(rs.models.LogisticRegression(), data, DGLMC(), OPTS, execution) as run:
        for i, _ in enumerate(run.chunks(target_chunk_s=0.02)):
            if i == at_chunk:
                kill(run)
        res = run.result()
    return res, events


def test_killed_worker_process_rolls_back_and_finishes_identically(ray_session, data, uninterrupted):
    def kill(run):
        os.kill(run.setup.placement[1].pid, signal.SIGKILL)

    res, events = _run_with(data, kill)
    assert res.outcome.failure is None and res.outcome.restarts == 1
    assert [e.kind for e in events] == ["worker_lost", "resumed"]
    assert events[0].failure.shard == 1 and events[1].round == res.outcome.events[1].round
    assert res.run_stats.placement[1].pid != res.run_stats.placement[0].pid
    np.testing.assert_array_equal(res.draws, uninterrupted)


def test_killed_coordinator_is_recreated_from_the_checkpoint(ray_session, data, uninterrupted):
    def kill(run):
        ray_session.kill(run._handle.actor, no_restart=True)

    res, events = _run_with(data, kill)
    assert res.outcome.restarts == 1 and events[0].failure.kind.value == "coordinator_lost"
    np.testing.assert_array_equal(res.draws, uninterrupted)


def test_restart_budget_is_bounded(ray_session, data, monkeypatch):
    """With no restarts allowed a killed worker ends the run: the run and its result both carry the failure."""
    monkeypatch.setenv("RAYSAMPLER_MAX_RESTARTS", "0")

    def kill(run):
        os.kill(run.setup.placement[1].pid, signal.SIGKILL)  # placement[0] is in the coordinator's process

    res, events = _run_with(data, kill, at_chunk=1)
    failure = res.outcome.failure
    assert failure is not None and failure.kind.value == "worker_lost" and failure.shard == 1
    assert res.outcome.restarts == 0 and "resumed" not in [e.kind for e in events]
