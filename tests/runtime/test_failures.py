"""One failure record end to end: a raising worker, a diverging chain and a killed worker process each stop the run
with SamplingError whose `.failure` names the kind, shard and round — no message parsing — and keeps the draws."""

from __future__ import annotations

import dataclasses
import os
import signal

import numpy as np
import pytest
from support.problems import PLAIN, FailingLogistic

import raysampler as rs
from raysampler.algorithms import DGLMC
from raysampler.errors import FailureKind
from raysampler.models.logistic import LogisticRegression
from raysampler.options import ExecutionOptions, RunOptions
from raysampler.sampling import Run


@dataclasses.dataclass(frozen=True)
class DivergingLogistic(LogisticRegression):
    """Its shard marked by X[0, 1] == 99 pushes LMC away exponentially."""

    def grad(self, X, y, x):
        g = super().grad(X, y, x)
        return g - 1e3 * x if X[0, 1] == 99.0 else g


def _marked(mark: float) -> rs.ShardSet:
    X, y = rs.datasets.load("breast_cancer")
    parts = [(Xi.copy(), yi) for Xi, yi in zip(np.array_split(X, 3), np.array_split(y, 3))]
    parts[1][0][0, 1] = mark
    return rs.shard(parts)


@pytest.mark.parametrize("executor", ["local", "ray"])
def test_raising_worker_is_a_worker_error_record(request, executor):
    if executor == "ray":
        request.getfixturevalue("ray_session")
    with pytest.raises(rs.SamplingError) as err:
        rs.sample(
            FailingLogistic(),
            _marked(77.0),
            chains=2,
            num_rounds=30,
            burn_in=0,
            executor=executor,
            progress=False,
            **PLAIN,
        )
    f = err.value.failure
    assert (f.kind, f.shard, f.round) == (FailureKind.WORKER_ERROR, 1, 0)
    assert "cannot be evaluated" in f.message and "RuntimeError" in f.traceback
    assert (executor == "ray") == (f.node_id is not None) or executor == "local"
    assert err.value.result.draws.shape == (2, 0, 31)


def test_diverging_chain_is_a_non_finite_record_with_draws_kept():
    with pytest.raises(rs.SamplingError) as err:
        rs.sample(
            DivergingLogistic(),
            _marked(99.0),
            chains=2,
            num_rounds=400,
            burn_in=0,
            executor="local",
            progress=False,
            **{**PLAIN, "gamma": 1e-3, "n_local": 5},
        )
    f = err.value.failure
    assert f.kind == FailureKind.NON_FINITE and f.shard == 1 and f.round > 0
    assert err.value.result.draws.shape[1] == f.round and np.all(np.isfinite(err.value.result.draws))


def test_killed_worker_process_is_a_worker_lost_record(ray_session, monkeypatch):
    """With no restarts allowed (RAYSAMPLER_MAX_RESTARTS=0; by default the run would recover), a killed worker
    ends the run with a WORKER_LOST record naming the shard, its node and the round."""
    monkeypatch.setenv("RAYSAMPLER_MAX_RESTARTS", "0")
    monkeypatch.setenv("RAYSAMPLER_WORKER_PROCESSES", "2")  # shard 1 on a worker actor (tiny shards: else one)
    X, y = rs.datasets.load("breast_cancer")
    with Run(
        rs.models.LogisticRegression(),
        rs.shard(X, y, num_shards=2),
        DGLMC(),
        RunOptions(chains=2, num_rounds=10**6, burn_in=5, seed=1),
        ExecutionOptions(executor="ray"),
    ) as run:
        victim = run.setup.placement[1]
        assert victim.pid is not None and victim.pid != os.getpid()
        kept = 0
        for i, chunk in enumerate(run.chunks(target_chunk_s=0.05)):
            kept += len(chunk.theta)
            if i == 2:
                os.kill(victim.pid, signal.SIGKILL)
        f = run.failure
        assert f is not None and f.kind == FailureKind.WORKER_LOST
        assert f.shard == 1 and f.round is not None and f.round > 0 and f.node_id == victim.node_id
        assert kept > 0 and run.result().draws.shape[1] == kept
