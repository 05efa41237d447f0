"""Run state as one value: capture it at a chunk boundary, resume it in a fresh run, get exactly the same draws as
running on — every algorithm, both executors; and a state never resumes into another run."""

from __future__ import annotations

import dataclasses
import pickle

import numpy as np
import pytest

import raysampler as rs
from raysampler.algorithms import ALGORITHMS, get_algorithm
from raysampler.options import ExecutionOptions, RunOptions
from raysampler.sampling import Run

OPTS = RunOptions(chains=2, num_rounds=40, burn_in=10, seed=5)
LOCAL = ExecutionOptions(executor="local", balance=False)


@pytest.fixture(scope="module")
def data():
    X, y = rs.datasets.load("breast_cancer")
    return rs.shard(X, y, num_shards=3)


def _draws(run: Run) -> np.ndarray:
    return np.concatenate([c.theta for c in run.chunks()])


@pytest.mark.parametrize("executor", ["local", "ray"])
@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_restored_state_continues_with_identical_draws(request, data, algorithm, executor):
    if executor == "ray":
        request.getfixturevalue("ray_session")
    model = rs.models.LogisticRegression()
    alg, execution = get_algorithm(algorithm), ExecutionOptions(executor=executor, balance=False)
    with Run(model, data, alg, OPTS, execution) as run:
        chunks = run.chunks()
        first = next(chunks)  # 20 rounds: 10 burn-in, 10 kept
        state = pickle.loads(pickle.dumps(run.capture()))  # a checkpoint is a picklable value
        assert state.rounds_done == first.rounds_done and state.draws_kept == len(first.theta)
        rest = np.concatenate([c.theta for c in chunks])
    with Run(model, data, alg, OPTS, execution, resume_from=state) as resumed:
        again = _draws(resumed)
        assert resumed.draws_kept == OPTS.num_rounds
    assert again.shape == rest.shape and len(rest) > 0
    np.testing.assert_array_equal(again, rest)


def test_state_of_another_run_is_refused(data):
    model = rs.models.LogisticRegression()
    ula, mala = get_algorithm("ula"), get_algorithm("mala")
    with Run(model, data, ula, OPTS, LOCAL) as run:
        next(run.chunks())
        state = run.capture()
    with pytest.raises(ValueError, match="another run"):
        Run(model, data, ula, dataclasses.replace(OPTS, seed=6), LOCAL, resume_from=state)
    with pytest.raises(ValueError, match="another run"):
        Run(model, data, mala, OPTS, LOCAL, resume_from=state)
    with pytest.raises(TypeError, match="resume_from"):
        Run(model, data, ula, OPTS, LOCAL, resume_from={"round": 3})  # type: ignore[arg-type]
