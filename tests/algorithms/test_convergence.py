"""Runs that stop when they have converged (num_rounds="auto"), and warnings when a finished run has not."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from support.problems import gaussian_problem
from support.stats_helpers import assert_moments

import raysampler as rs


@pytest.fixture(scope="module")
def gauss():
    """Three shards of 2-D Gaussian observations: the posterior is Gaussian in closed form."""
    shards, model, P, m, ys = gaussian_problem((8, 12, 10), seed=3)
    return shards, model, P, m


def test_auto_stops_once_ess_and_rhat_targets_hold_and_draws_match_the_posterior(gauss):
    shards, model, P, m = gauss
    from raysampler.testing import exact

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a converged run warns about nothing
        res = rs.sample(
            model,
            shards,
            "mala",
            chains=4,
            num_rounds="auto",
            target_ess=1000,
            seed=2,
            executor="local",
            progress=False,
        )
    diag = res.outcome.diagnostics
    assert res.outcome.stop_reason == "converged"
    assert diag.min_ess_bulk >= 1000 and diag.max_rhat < 1.01
    assert res.num_draws < 100_000 // 10  # it stopped long before max_rounds
    assert_moments(res.draws, *exact.gaussian_posterior(P, m, np.eye(2), np.zeros(2)))


def test_auto_stops_at_the_same_draw_whatever_the_timing(gauss, monkeypatch):
    """Checks fall at fixed draw counts (100, then x1.5), so a seeded auto run stops at the same draw even when the
    chunks the run is cut into differ (here: 10-round chunks against half-second ones)."""
    from raysampler import sampling

    shards, model, _, _ = gauss
    kw = dict(chains=4, num_rounds="auto", target_ess=1000, seed=5, executor="local", progress=False)
    first = rs.sample(model, shards, "mala", **kw)
    counts = [sampling.FIRST_CHECK_DRAWS]
    while counts[-1] < first.num_draws:
        counts.append(int(np.ceil(counts[-1] * sampling.CHECK_GROWTH)))
    assert first.num_draws in counts  # it stopped at a check point
    original = sampling.Run.chunks
    monkeypatch.setattr(
        sampling.Run, "chunks", lambda self, target_chunk_s=0.5, capture=False: original(self, 1e-6, capture)
    )  # every chunk as short as allowed
    np.testing.assert_array_equal(rs.sample(model, shards, "mala", **kw).draws, first.draws)


def test_auto_respects_max_rounds_and_says_so(gauss):
    shards, model, _, _ = gauss
    with pytest.warns(UserWarning, match="max_rounds=300"):
        res = rs.sample(
            model,
            shards,
            "mala",
            chains=2,
            num_rounds="auto",
            target_ess=10**9,
            max_rounds=300,
            burn_in=50,
            seed=1,
            executor="local",
            progress=False,
        )
    assert res.outcome.stop_reason == "max_rounds" and res.num_draws == 300


def test_unconverged_finished_run_warns_like_arviz(gauss):
    shards, model, _, _ = gauss
    with pytest.warns(UserWarning) as record:
        rs.sample(model, shards, "mala", chains=4, num_rounds=30, burn_in=5, seed=1, executor="local", progress=False)
    text = " ".join(str(w.message) for w in record)
    assert "min bulk ESS" in text and "per chain" in text


@pytest.mark.parametrize(
    "kw,name",
    [
        ({"target_ess": 0}, "target_ess"),
        ({"max_rhat": 1.0}, "max_rhat"),
        ({"max_rounds": 10}, "max_rounds"),
        ({"num_rounds": "forever"}, "num_rounds"),
    ],
)
def test_bad_convergence_arguments_name_the_argument(gauss, kw, name):
    shards, model, _, _ = gauss
    base = {"num_rounds": "auto"} if name != "max_rounds" else {"num_rounds": 100}
    with pytest.raises(ValueError, match=name):
        rs.sample(model, shards, "mala", executor="local", progress=False, **{**base, **kw})
