"""Run state as one value: capture it at a chunk boundary, resume it in a fresh run, get exactly the same draws as
running on — every algorithm, both executors (a state crosses between them); and a state never resumes into another
run."""

from __future__ import annotations

import dataclasses
import pickle

import numpy as np
import pytest

import raysampler as rs
from raysampler.algorithms import ALGORITHMS, get_algorithm
from raysampler.options import ExecutionOptions, RunOptions
from raysampler.runtime.contracts import RunState
from raysampler.sampling import Run

OPTS = RunOptions(chains=2, num_rounds=40, burn_in=10, seed=5)
LOCAL = ExecutionOptions(executor="local", balance=False)
ON_RAY = ExecutionOptions(executor="ray", balance=False)


@pytest.fixture(scope="module")
def data():
    X, y = rs.datasets.load("breast_cancer")
    return rs.shard(X, y, num_shards=3)


def _draws(run: Run) -> np.ndarray:
    return np.concatenate([c.theta for c in run.chunks()])


def _capture_and_go_on(run: Run) -> tuple[np.ndarray, RunState, np.ndarray]:
    """The first chunk's draws, the run's state at its end (through pickle: a checkpoint is a picklable value) and
    the draws of the rest of the run."""
    kept_before = run.draws_kept
    chunks = run.chunks()
    first = next(chunks)  # 20 rounds
    state = pickle.loads(pickle.dumps(run.capture()))
    assert state.rounds_done == first.rounds_done and state.draws_kept == kept_before + len(first.theta)
    return first.theta, state, np.concatenate([c.theta for c in chunks])


@pytest.mark.parametrize("executor", ["local", "ray"])
@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_restored_state_continues_with_identical_draws(request, data, algorithm, executor):
    """A state captured after the first chunk (10 burn-in rounds, 10 kept) and resumed in a fresh run gives exactly
    the draws of running on. On Ray one run crosses the seam both ways: it resumes the in-process run's state (its
    draws are that run's rest, the same bits on either executor), and the state it captures in turn continues in
    a fresh in-process run with exactly its own rest."""
    model, alg = rs.models.LogisticRegression(), get_algorithm(algorithm)
    with Run(model, data, alg, OPTS, LOCAL) as run:
        _, state, rest = _capture_and_go_on(run)
    assert len(rest) > 0
    if executor == "local":
        with Run(model, data, alg, OPTS, LOCAL, resume_from=state) as resumed:
            again = _draws(resumed)
            assert resumed.draws_kept == OPTS.num_rounds
        assert again.shape == rest.shape
        np.testing.assert_array_equal(again, rest)
        return
    request.getfixturevalue("ray_session")
    with Run(model, data, alg, OPTS, ON_RAY, resume_from=state) as on_ray:
        first, on_ray_state, on_ray_rest = _capture_and_go_on(on_ray)
        assert on_ray.draws_kept == OPTS.num_rounds and len(on_ray_rest) > 0
    np.testing.assert_array_equal(np.concatenate([first, on_ray_rest]), rest)
    with Run(model, data, alg, OPTS, LOCAL, resume_from=on_ray_state) as back:
        np.testing.assert_array_equal(_draws(back), on_ray_rest)


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
