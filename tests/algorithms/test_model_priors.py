"""Every sampler on models with unknown noise, flat, per-coefficient and Student-t priors, offsets and trials, checked
against exact answers: the Normal–Inverse-Gamma posterior of linear regression (closed form, `exact.nig_posterior`)
for every algorithm, and the cached long-run references of tests/models for the default algorithm. Tolerances: the
bias budget of the unadjusted algorithms (0.05 sd, doubled for the non-Gaussian tails) plus Z Monte-Carlo standard
errors from the ESS."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from support.reference_problems import PROBLEMS, reference
from support.stats_helpers import Z

import raysampler as rs
from raysampler.models import DataSpec
from raysampler.priors import InverseGamma, Normal
from raysampler.testing import exact

SAMPLERS = sorted(set(rs.algorithms.ALGORITHMS) - {"admm"})  # admm is an optimiser (the MAP), not a sampler
BIAS = 0.1  # sd units: twice the unadjusted algorithms' budget δ = 0.05, which holds exactly for Gaussian targets
#: (chains, rounds after burn-in) of the Normal–Inverse-Gamma runs: 6,000 draws. An in-process round costs about the
#: same for 4 or 16 chains (one vectorised step), so 16 chains of 375 rounds; D-ADMMS solves its Newton system
#: chain by chain (its round costs in proportion to the chains), so it keeps 4 chains of 1,500 rounds
NIG_RUN = {"dadmms": (4, 1500)}
NIG_DEFAULT_RUN = (16, 375)


def _quiet_sample(*args, **kwargs) -> rs.Result:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # short runs: the convergence warnings are expected
        return rs.sample(*args, **kwargs)


def _assert_close(res: rs.Result, mean: np.ndarray, sd: np.ndarray, names: list[str], sd_check: bool = True) -> None:
    draws = res.draws
    ess = res.ess()
    err = (draws.mean(axis=(0, 1)) - mean) / sd
    tol = BIAS + Z / np.sqrt(ess)
    bad = [f"{n}: {e:+.3f} sd (tol {t:.3f})" for n, e, t in zip(names, err, tol) if abs(e) > t]
    assert not bad, "means off: " + "; ".join(bad)
    if sd_check:
        ratio = draws.std(axis=(0, 1)) / sd
        tol = BIAS + Z / np.sqrt(2 * ess)
        bad = [f"{n}: sd × {r:.3f} (tol {t:.3f})" for n, r, t in zip(names, ratio, tol) if abs(r - 1) > t]
        assert not bad, "sds off: " + "; ".join(bad)


@pytest.fixture(scope="module")
def nig_problem():
    """n = 400 rows, an intercept and two covariates on scales 1 and 5, flat β prior, σ² ~ InvGamma(2, 1)."""
    rng = np.random.default_rng(3)
    n = 400
    X = np.column_stack([np.ones(n), rng.standard_normal((n, 2)) * [1.0, 5.0]])
    y = X @ np.array([1.0, -0.5, 0.2]) + 0.7 * rng.standard_normal(n)
    shards = rs.shard(X, y, num_shards=4)
    model = rs.models.LinearRegression(coef_prior=Normal(0.0, np.inf), sigma_prior=InverseGamma(2.0, 1.0))
    post = exact.linear_regression_posterior(model.bind(DataSpec(3)), [(s.X, s.y) for s in shards])
    return model, shards, post


@pytest.mark.parametrize("algorithm", SAMPLERS)
def test_unknown_noise_and_flat_prior_match_the_normal_inverse_gamma_posterior(nig_problem, algorithm):
    model, shards, post = nig_problem
    chains, rounds = NIG_RUN.get(algorithm, NIG_DEFAULT_RUN)
    res = _quiet_sample(
        model,
        shards,
        algorithm,
        chains=chains,
        num_rounds=rounds,
        burn_in=500,
        seed=1,
        executor="local",
        progress=False,
    )
    assert res.param_names == ["beta[0]", "beta[1]", "beta[2]", "sigma"]
    _assert_close(res, post.theta_mean(), post.theta_sd(), res.param_names)
    sigma = res.posterior()["sigma"]  # reported on the natural scale
    np.testing.assert_allclose(sigma, np.exp(res.draws[..., 3]))


@pytest.mark.parametrize("name", list(PROBLEMS))
def test_default_sampler_matches_the_cached_references(name):
    """Per-coefficient scales with a half-Cauchy σ, Student-t coefficients, an offset column, a trials column and a
    negative binomial dispersion: default DG-LMC against the long MALA reference."""
    problem = PROBLEMS[name]
    X, y, columns = problem.load()
    ref = reference(name)
    res = _quiet_sample(
        problem.model,
        rs.shard(X, y, num_shards=4, columns=columns),
        chains=16,  # 8,000 draws: 16 chains of 500 rounds cost about a quarter of 4 chains of 2,000
        num_rounds=500,
        burn_in=500,
        seed=2,
        executor="local",
        progress=False,
    )
    assert res.param_names == ref.names
    _assert_close(res, ref.mean, ref.sd, ref.names, sd_check=False)


def test_offset_array_follows_each_shard_to_its_ray_worker(ray_session):
    """An offset given as an array over the original rows reaches each worker with its shard's rows (Shard.index),
    on Ray as in-process: the same draws, and the right posterior."""
    problem = PROBLEMS["poisson_offset"]
    X, y, columns = problem.load()
    j = columns.index("log_exposure")
    keep = [c for c in range(X.shape[1]) if c != j]
    model = rs.models.PoissonRegression(coef_prior=problem.model.coef_prior, offset=X[:, j])
    shards = rs.shard(X[:, keep], y, num_shards=4, strategy="random", seed=5, columns=[columns[c] for c in keep])
    kw = dict(chains=2, num_rounds=60, burn_in=20, seed=4, progress=False, balance=False)
    local = _quiet_sample(model, shards, executor="local", **kw)
    ray = _quiet_sample(model, shards, executor="ray", **kw)
    np.testing.assert_array_equal(local.draws, ray.draws)
    ref = reference("poisson_offset")
    assert np.all(np.abs(local.draws.mean(axis=(0, 1)) - ref.mean) < 1.0 * ref.sd)  # the offset was applied


def test_flat_prior_on_collinear_columns_is_refused_before_sampling(ray_session):
    X = np.column_stack([np.ones(40), np.arange(40.0), 2 * np.arange(40.0)])
    y = np.arange(40.0) % 3
    model = rs.models.LinearRegression(coef_prior=Normal(0.0, np.inf))
    for executor in ("local", "ray"):
        with pytest.raises(ValueError, match=r"coef_prior: flat prior .* improper"):
            rs.sample(model, rs.shard(X, y, num_shards=2), chains=2, num_rounds=5, executor=executor, progress=False)
