"""Shards stepped as one batch (runtime/batches.py) draw bit for bit what each draws stepped alone: over rounds that
use up the noise streams' blocks, N_i that differ between shards and change mid-run, a capture in between, both
kernels that batch; a failing shard inside a batch is still the one named."""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pytest
from support.problems import PLAIN, FailingLogistic

import raysampler as rs
from raysampler.algorithms.dglmc import DGLMC, RECENTRE_BELOW, Reply
from raysampler.errors import SamplingError
from raysampler.models.contract import ShardStack
from raysampler.models.logistic import LogisticRegression
from raysampler.options import ExecutionOptions, RunOptions
from raysampler.runtime.batches import _runs_of, join_blocks, nonfinite_shard
from raysampler.sampling import Run


@dataclasses.dataclass(frozen=True)
class OneByOne(DGLMC):
    """DG-LMC with one message per shard: every shard stepped alone, as before shards were batched."""

    def round_message(self, state, local_steps, info):
        return self.messages(state, local_steps, info)


@pytest.fixture(scope="module")
def shards():
    X, y = rs.datasets.load("breast_cancer")
    return rs.shard(X, y, num_shards=7)  # rows 82, 82, 81, ...: one batch of two runs of equal row counts


def _run(shards, algorithm, chains=3, rounds=320, capture_at=150, burn_in=0):
    """Draws and the final run state of an in-process run, captured once mid-run too."""
    opts = RunOptions(chains=chains, num_rounds=rounds, burn_in=burn_in, seed=7)
    model, local = LogisticRegression(prior_scale=1.0), ExecutionOptions(executor="local")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with Run(model, shards, algorithm, opts, local) as run:
            for chunk in run.chunks(target_chunk_s=0.01):
                if chunk.rounds_done >= capture_at and capture_at:
                    run.capture()  # writes the batches back to per-shard states, then goes on from them
                    capture_at = 0
            return run.result().draws, run.capture()


@pytest.mark.parametrize(
    "params",
    [
        {},  # the default kernel (laplace_mh), one N_i for all
        {"n_local": ((0, (1, 2, 1, 2, 3, 1, 1)), (90, (2, 1, 1, 1, 1, 3, 1)))},  # batches split, then regrouped
        {"preconditioner": None, "local_kernel": "lmc", "n_local": 2},  # the paper's rules
        {"recentre": True, "n_local": ((0, (1, 2, 1, 2, 3, 1, 1)), (90, (2, 1, 1, 1, 1, 3, 1)))},  # re-centred
        {"recentre": "auto", "burn_in": 30},  # re-centred after burn-in by some shards only: batches split by it
    ],
    ids=["laplace_mh", "laplace_mh-uneven-N", "lmc", "recentred-uneven-N", "recentre-auto-mixed"],
)
def test_batched_shards_draw_bit_for_bit_what_each_draws_alone(shards, params):
    params = dict(params)
    burn_in = params.pop("burn_in", 0)
    batched, state_b = _run(shards, DGLMC(**params), burn_in=burn_in)
    alone, state_a = _run(shards, OneByOne(**params), burn_in=burn_in)
    if params.get("recentre") == "auto":  # the case is worth its name: some shards re-centre, some do not
        coord = state_b.coordinator
        flags = coord.warm_accept / coord.warm_count < RECENTRE_BELOW
        assert flags.any() and not flags.all() and not flags[0] == flags[1] == flags[2], flags
    np.testing.assert_array_equal(batched, alone)
    for a, b in zip(state_a.shards, state_b.shards):
        for x, y in zip(a.algorithm.chains, b.algorithm.chains):
            if isinstance(x, np.ndarray):
                np.testing.assert_array_equal(x, y)
        assert a.noise == b.noise  # the streams' positions: generator states, pending blocks, rows used


def test_join_blocks_and_the_first_nonfinite_shard():
    z = np.arange(24.0).reshape(4, 3, 2)
    parts = [(np.array([0, 2]), Reply(z[[0, 2]], None)), (np.array([1, 3]), Reply(z[[1, 3]], None))]
    joined = join_blocks(parts, 4)
    np.testing.assert_array_equal(joined.z, z)
    assert joined.accept is None and nonfinite_shard(joined) is None
    joined.z[2, 1, 0] = np.nan
    joined.z[3, 0, 1] = np.inf
    assert nonfinite_shard(joined) == 2


def test_a_failing_shard_inside_a_batch_is_named(shards):
    """Shard 3 shares its batch with shards of its size: the batch raises, and stepping its shards one at a time
    finds the one that fails."""
    parts = [(s.X.copy(), s.y) for s in shards]
    parts[3][0][0, 1] = 77.0
    with pytest.raises(SamplingError, match=r"worker 3 failed in round 0.*cannot be evaluated") as err:
        kw = dict(chains=2, num_rounds=20, burn_in=0, executor="local", progress=False)
        rs.sample(FailingLogistic(), rs.shard(parts), **kw, **PLAIN)
    assert err.value.worker == 3 and err.value.round == 0 and "in grad" in err.value.failure.traceback


def test_a_stack_of_unequal_row_counts_applies_the_model_run_by_run():
    """`ShardStack`: a model's stacked method once per run of equal row counts, joined in shard order; a shard alone;
    the rows; and picking some shards of a group (`_runs_of`) keeps them in order, as views where they are
    consecutive."""
    rng = np.random.default_rng(0)
    model = LogisticRegression(prior_scale=1.0)
    sizes = (5, 5, 4, 4, 4)
    Xs = [rng.normal(size=(n, 3)) for n in sizes]
    ys = [(rng.random(n) < 0.5).astype(float) for n in sizes]
    stacks = [(np.stack(Xs[:2]), np.stack(ys[:2])), (np.stack(Xs[2:]), np.stack(ys[2:]))]
    data = ShardStack(tuple(stacks))
    x = rng.normal(size=(5, 2, 3))
    alone = np.stack([model.potential(Xs[j], ys[j], x[j]) for j in range(5)])
    np.testing.assert_array_equal(data.apply(model.potential_stacked, x), alone)
    np.testing.assert_array_equal(data.rows(), sizes)
    assert len(data.rows()) == 5 and data.shard(3).runs[0][0].shape == (1, 4, 3)
    np.testing.assert_array_equal(data.shard(3).runs[0][0][0], Xs[3])
    picked = _runs_of(stacks, [(0, 1), (1, 0), (1, 2)])
    assert [X.shape[:2] for X, _ in picked] == [(1, 5), (2, 4)]
    np.testing.assert_array_equal(picked[1][0], np.stack([Xs[2], Xs[4]]))
    assert np.shares_memory(_runs_of(stacks, [(1, 1), (1, 2)])[0][0], stacks[1][0])
