"""The turn-key default on real data: breast_cancer logistic regression (b = 4) against a long exact reference.

The reference (tests/data/breast_cancer_reference.npz) is pooled-data HMC with exact Metropolis correction,
made by scripts/make_reference.py; its Monte-Carlo error is below 0.001 posterior sd.
"""

from __future__ import annotations

import pathlib

import numpy as np
import pytest
from support.stats_helpers import Z

import raysampler as rs

REF = pathlib.Path(__file__).resolve().parents[1] / "data" / "breast_cancer_reference.npz"


@pytest.fixture(scope="module")
def default_run():
    X, y = rs.datasets.load("breast_cancer")
    return rs.sample(
        rs.models.LogisticRegression(prior_scale=1.0),
        rs.shard(X, y, num_shards=4),
        chains=32,
        num_rounds=6000,
        burn_in=1000,
        seed=0,
        executor="local",
        progress=False,
    )


def test_default_means_and_sds_match_exact_reference(default_run):
    """Means within z MCSE (run and reference) plus the run's stated bias budget δ (in sd); sds between
    1 − z·se and 1 + δ + z·se of the reference, δ bounding π_ρ's sd inflation (Laplace approximation)."""
    ref = np.load(REF)
    res = default_run
    budget = res.setup.plan.bias_budget
    assert budget <= 0.05 + 1e-12
    ess = res.ess("bulk")
    mean, sd = res.draws.mean(axis=(0, 1)), res.draws.std(axis=(0, 1))
    mcse = np.sqrt(sd**2 / ess + ref["mcse_mean"] ** 2)
    mean_err = np.abs(mean - ref["mean"])
    assert np.all(mean_err <= Z * mcse + budget * ref["sd"]), np.max(mean_err / ref["sd"])
    se_sd = 1.0 / np.sqrt(2.0 * res.ess("sd"))
    ratio = sd / ref["sd"]
    assert np.all(ratio >= 1 - Z * se_sd) and np.all(ratio <= 1 + budget + Z * se_sd), (ratio.min(), ratio.max())
    assert ess.min() > 500  # the check above is only meaningful with enough effective draws


def test_default_run_is_converged(default_run):
    table = default_run.summary()
    assert table["r_hat"].max() < 1.05  # ~20 effective draws per chain: 1.01 needs far more
    assert 0.5 < default_run.sample_stats["local_accept"].mean() <= 1.0


def test_paper_rules_run_and_report_their_settings():
    """preconditioner=None keeps the paper's plain rules: ρ_i = 1/M_i, γ_i = 0.25ρ_i/(ρ_iM_i + 1), N = 4, LMC."""
    X, y = rs.datasets.load("breast_cancer")
    res = rs.sample(
        rs.models.LogisticRegression(),
        rs.shard(X, y, num_shards=4),
        chains=2,
        num_rounds=50,
        burn_in=10,
        executor="local",
        progress=False,
        preconditioner=None,
    )
    M = res.run_stats.M
    np.testing.assert_allclose(res.run_stats.rho, 1 / M)
    np.testing.assert_allclose(res.run_stats.gamma, 0.25 * (1 / M) / 2)
    assert list(res.run_stats.N) == [4, 4, 4, 4]
    assert res.setup.plan.local_kernel == "lmc"
