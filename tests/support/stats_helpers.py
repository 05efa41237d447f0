"""Monte-Carlo tolerances from effective sample sizes (arviz-stats), for tests against exact laws."""

from __future__ import annotations

import numpy as np

import raysampler as rs

Z = 4.0  # tolerance in Monte-Carlo standard errors: a correct sampler fails a check with probability ~6e-5


def ess(series: np.ndarray) -> float:
    """Bulk ESS of a (chains, draws) series."""
    return float(rs.Result(series[..., None], ["x"]).ess("bulk")[0])


def assert_moments(draws: np.ndarray, mean: np.ndarray, cov: np.ndarray, z: float = Z) -> dict:
    """Check the empirical mean and covariance of draws (chains, draws, d) against an exact Gaussian law.

    Every mean coordinate and covariance entry must lie within z Monte-Carlo standard errors, each error
    computed from the ESS of the series it averages. Returns the largest error in units of its MCSE.
    """
    d = draws.shape[-1]
    worst = 0.0
    for j in range(d):
        x = draws[..., j]
        se = np.sqrt(cov[j, j] / ess(x))
        err = abs(x.mean() - mean[j]) / se
        worst = max(worst, err)
        assert err < z, f"mean[{j}] = {x.mean():.5f}, exact {mean[j]:.5f}, off by {err:.1f} MCSE"
    centred = draws - mean
    for j in range(d):
        for k in range(j, d):
            prod = centred[..., j] * centred[..., k]
            se = prod.std() / np.sqrt(ess(prod))
            err = abs(prod.mean() - cov[j, k]) / se
            worst = max(worst, err)
            assert err < z, f"cov[{j},{k}] = {prod.mean():.5f}, exact {cov[j, k]:.5f}, off by {err:.1f} MCSE"
    return {"worst_mcse": worst}


def tolerance_scale(draws: np.ndarray, cov: np.ndarray) -> float:
    """The largest per-coordinate mean tolerance z·sd/√ESS: the smallest mean difference a check can see."""
    return max(Z * np.sqrt(cov[j, j] / ess(draws[..., j])) for j in range(draws.shape[-1]))
