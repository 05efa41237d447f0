"""Many short chains on real data: num_rounds="auto" with 16 or more chains stops on nested R-hat over superchains
(raysampler/diagnostics.py), at the first or second check for 64 chains, and its means agree with the exact
reference of tests/data/breast_cancer_reference.npz (see tests/algorithms/test_logistic_reference.py)."""

from __future__ import annotations

import pathlib
import warnings

import numpy as np
import pytest
from support.stats_helpers import Z

import raysampler as rs
from raysampler import sampling
from raysampler.diagnostics import superchains_for

REF = pathlib.Path(__file__).resolve().parents[1] / "data" / "breast_cancer_reference.npz"


def _auto_run(chains: int) -> rs.Result:
    X, y = rs.datasets.load("breast_cancer")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a run that converged warns about nothing (ESS is held per superchain)
        return rs.sample(
            rs.models.LogisticRegression(prior_scale=1.0),
            rs.shard(X, y, num_shards=4),
            chains=chains,
            num_rounds="auto",
            burn_in=200,
            seed=0,
            executor="local",
            progress=False,
        )


@pytest.mark.slow
@pytest.mark.parametrize("chains", [64, 32, 16])
def test_many_short_chains_stop_on_nested_rhat_with_the_reference_means(chains):
    """Measured (seed 0): 64 chains stop at the first check, 100 draws per chain (nested R-hat 1.0077, split R-hat
    1.105, min bulk ESS 470); 32 chains at 225 draws (1.0075, 1.057, 618); 16 chains at 338 (1.0069, 1.028, 580).
    Means within 0.1 posterior sd of the reference: 0.098, 0.076 and 0.081 sd, i.e. 2.8, 2.2 and 2.1 Monte-Carlo
    standard errors at the worst of 31 coordinates (seeds 1-8 with 64 chains: 0.059-0.091 sd, stops at 100 or 150)."""
    res = _auto_run(chains)
    diag = res.outcome.diagnostics
    assert res.outcome.stop_reason == "converged"
    assert diag.rule == "nested_rhat" and diag.superchains == superchains_for(chains) == 4
    assert diag.min_ess_bulk >= 400 and diag.max_nested_rhat < 1.01
    if chains == 64:
        first, second = sampling.FIRST_CHECK_DRAWS, int(np.ceil(sampling.FIRST_CHECK_DRAWS * sampling.CHECK_GROWTH))
        assert res.num_draws in (first, second)
        assert diag.max_rhat > 1.01  # split R-hat of such short chains would not have let the run stop here
    ref = np.load(REF)
    mean, sd = res.draws.mean(axis=(0, 1)), res.draws.std(axis=(0, 1))
    err = np.abs(mean - ref["mean"])
    assert np.all(err <= 0.1 * ref["sd"]), np.max(err / ref["sd"])
    # and, in Monte-Carlo standard errors plus the stated bias budget (the check that stays meaningful if the
    # draws change: at ESS ≈ 400-850 the 0.1 sd above is only 2-3 standard errors)
    mcse = np.sqrt(sd**2 / res.ess("bulk") + ref["mcse_mean"] ** 2)
    assert np.all(err <= Z * mcse + res.setup.plan.bias_budget * ref["sd"])
