"""The batched Pareto smoothing (raysampler.evaluation.psis) against arviz-stats' own `psislw`, the oracle, on random
matrices (light and heavy tails, S from 100 to 4,000, r_eff 1 and below) and on real log-likelihood matrices; the
rule for flat rows (uniform weights within the bound docs/evaluation.md derives) and its PSIS-LOO on a data set
where arviz-stats gives NaN; how a site's CPUs are shared among its shards."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from arviz_stats.base import array_stats
from scipy.special import expit, logsumexp

import raysampler as rs
from raysampler.errors import ArgumentError
from raysampler.evaluation import FLAT_K, FLAT_SPAN, loo_block, pareto_smooth, split_parts
from raysampler.models.contract import DataSpec

TOL = 1e-10


def oracle(log_ratios: np.ndarray, r_eff: float) -> tuple[np.ndarray, np.ndarray]:
    """arviz-stats' PSIS, one row at a time (its `psislw` takes the log-likelihood, i.e. minus the log-ratios)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return array_stats.psislw(-log_ratios, r_eff=r_eff, axis=-1)


def assert_equals_oracle(log_ratios: np.ndarray, r_eff: float) -> int:
    """Our log weights and k̂ equal arviz-stats' to TOL on every row where arviz-stats is finite and the row is not
    flat; the number of rows compared."""
    lw_ref, k_ref = oracle(log_ratios, r_eff)
    lw, k = pareto_smooth(log_ratios, r_eff)
    span = np.ptp(log_ratios, axis=1)
    rows = np.isfinite(k_ref) & np.all(np.isfinite(lw_ref), axis=1) & (span >= FLAT_SPAN)
    np.testing.assert_allclose(k[rows], k_ref[rows], rtol=0, atol=TOL)
    np.testing.assert_allclose(lw[rows], lw_ref[rows], rtol=0, atol=TOL)
    return int(rows.sum())


def random_log_ratios(kind: str, rows: int, S: int, rng: np.random.Generator) -> np.ndarray:
    """Log-ratios whose weights have light tails (normal log-ratios: log-normal weights), exactly Pareto tails
    (exponential log-ratios with scale c: weights of shape k = c, up to 1.5) or Student-t tails (c log|t_2|: weights
    |t_2|^c, of shape k = c / 2, up to 1.5)."""
    if kind == "normal":
        return rng.normal(size=(rows, S)) * rng.uniform(0.05, 3.0, size=(rows, 1))
    if kind == "pareto":
        return rng.exponential(size=(rows, S)) * rng.uniform(0.1, 1.5, size=(rows, 1))
    return np.log(np.abs(rng.standard_t(2, size=(rows, S)))) * rng.uniform(0.5, 3.0, size=(rows, 1))


@pytest.mark.parametrize("S", [100, 250, 1000, 4000])
@pytest.mark.parametrize("kind", ["normal", "pareto", "student"])
def test_batched_psis_equals_arviz_on_random_matrices(kind, S):
    rng = np.random.default_rng([S, len(kind)])
    lr = random_log_ratios(kind, 30 if S < 4000 else 12, S, rng)
    for r_eff in (1.0, 0.35):
        assert assert_equals_oracle(lr, r_eff) == lr.shape[0]


def test_heavy_tails_are_seen_as_heavy():
    """Exponential log-ratios with scale c give Pareto weights of shape k = c: k̂ within 3 of its standard errors,
    (1 + k) / √M for a tail of M draws, of c (S = 4,000)."""
    rng = np.random.default_rng(5)
    c = np.array([0.2, 0.5, 0.9, 1.3])
    _, k = pareto_smooth(rng.exponential(size=(4, 4000)) * c[:, None])
    assert np.all(np.abs(k - c) < 3 * (1 + c) / math.sqrt(math.floor(3 * math.sqrt(4000))))


def breast_cancer_laplace(draws_per_chain: int = 250, seed: int = 0):
    """breast_cancer (569 rows, 31 coefficients) under the default logistic model, with draws from the Laplace
    approximation of its posterior (4 chains): a real log-likelihood matrix, many of whose rows are classified with
    near certainty. The bound model, X, y and the draws (4, draws_per_chain, 31)."""
    X, y = rs.datasets.load("breast_cancer")
    model = rs.models.LogisticRegression().bind(DataSpec(X.shape[1], n_rows=len(y)))
    prec = np.broadcast_to(model.prior().precision, (X.shape[1],))
    beta = np.zeros(X.shape[1])
    for _ in range(12):  # Newton's method: converged to rounding well before
        p = expit(X @ beta)
        H = (X * (p * (1 - p))[:, None]).T @ X + np.diag(prec)
        beta -= np.linalg.solve(H, X.T @ (p - y) + prec * beta)
    draws = np.random.default_rng(seed).multivariate_normal(beta, np.linalg.inv(H), size=(4, draws_per_chain))
    return model, X, y, draws


def diabetes_exact(seed: int = 0):
    """diabetes with a known-noise linear model: exact posterior draws (4 × 250) of its Gaussian posterior."""
    X, y = rs.datasets.load("diabetes")
    model = rs.models.LinearRegression(noise_sd=0.7).bind(DataSpec(X.shape[1], n_rows=len(y)))
    mean, cov = model.posterior([(X, y)])
    return model, X, y, np.random.default_rng(seed).multivariate_normal(mean, cov, size=(4, 250))


@pytest.fixture(scope="module")
def breast_cancer():
    return breast_cancer_laplace()


@pytest.mark.parametrize("which", ["breast_cancer", "diabetes"])
def test_batched_psis_equals_arviz_on_real_log_likelihoods(which, request):
    """Every third row of each data set (its log-likelihood under 1,000 posterior draws)."""
    model, X, y, draws = request.getfixturevalue("breast_cancer") if which == "breast_cancer" else diabetes_exact()
    ll = model.log_likelihood(X[::3], y[::3], draws.reshape(-1, draws.shape[2]))
    assert assert_equals_oracle(-ll, 0.9) > 0.5 * ll.shape[0]


def test_too_few_draws_for_a_tail_is_an_error_naming_draws():
    with pytest.raises(ArgumentError) as err:
        pareto_smooth(np.random.default_rng(0).normal(size=(3, 20)))
    assert err.value.path == ("draws",)


def test_flat_rows_get_uniform_weights_within_the_stated_bound():
    """A row whose log-likelihood spans δ < FLAT_SPAN: raw importance weights within e^(±δ) of 1/S (so uniform to
    e^δ − 1), the raw-IS elpd −log mean e^(−ll) below log mean e^ll by at most δ²/4. It gets uniform weights —
    elpd_i = log mean exp(ll_i), p_loo_i = 0, k̂ = FLAT_K — and a row just above the tolerance is smoothed as
    arviz-stats smooths it (its elpd_i = log Σ_s w_s p_s with arviz-stats' weights)."""
    rng = np.random.default_rng(1)
    S = 1000
    spans = np.array([1e-12, 1e-9, 1e-6, 0.9 * FLAT_SPAN, 2 * FLAT_SPAN, 0.5])
    z = rng.lognormal(size=(len(spans), S))  # a heavy right tail of log-ratios, scaled to each span
    u = (z - z.min(axis=1, keepdims=True)) / np.ptp(z, axis=1, keepdims=True)
    ll = -1e-3 - spans[:, None] * u
    delta = np.ptp(ll, axis=1)
    raw = -ll - logsumexp(-ll, axis=1, keepdims=True)
    assert np.all(np.abs(raw + math.log(S)) <= delta[:, None] + 1e-15)
    uniform_elpd = logsumexp(ll, axis=1) - math.log(S)
    is_elpd = -(logsumexp(-ll, axis=1) - math.log(S))
    assert np.all((uniform_elpd - is_elpd >= -1e-15) & (uniform_elpd - is_elpd <= delta**2 / 4 + 1e-15))
    pw = loo_block(ll, 1.0)
    flat = delta < FLAT_SPAN
    assert flat.tolist() == [True, True, True, True, False, False]
    np.testing.assert_array_equal(pw.flat, flat)
    np.testing.assert_allclose(pw.elpd[flat], uniform_elpd[flat], rtol=1e-15)
    assert np.all(pw.k[flat] == FLAT_K) and np.all(pw.p_loo[flat] == 0)
    lw_ref, k_ref = oracle(-ll[~flat], 1.0)
    np.testing.assert_allclose(pw.k[~flat], k_ref, rtol=0, atol=TOL)
    np.testing.assert_allclose(pw.elpd[~flat], logsumexp(lw_ref + ll[~flat], axis=1), rtol=1e-12)


def test_loo_block_equals_full_psis_weights_on_rows_that_vary():
    """The two-pass elpd (the terms outside the tail summed in closed form) is log Σ_s w_s p_s with the full PSIS
    weights, and p_loo_i = lppd_i − elpd_i."""
    rng = np.random.default_rng(3)
    ll = -np.exp(rng.normal(size=(50, 800)) * rng.uniform(0.1, 2.0, size=(50, 1)))
    pw = loo_block(ll, 0.8)
    lw, k = pareto_smooth(-ll, 0.8)
    np.testing.assert_allclose(pw.elpd, logsumexp(lw + ll, axis=1), rtol=1e-12)
    np.testing.assert_array_equal(pw.k, k)
    np.testing.assert_allclose(pw.p_loo, logsumexp(ll, axis=1) - math.log(800) - pw.elpd, rtol=1e-10, atol=1e-13)


def test_a_row_without_a_tail_to_fit_keeps_raw_weights_and_counts_as_high():
    """100 of 500 draws tie at the largest log-ratio, more than the tail of 67 (arviz-stats refuses such a tail):
    the raw weights (elpd_i = −log mean exp(−ll_i)), and k̂ = ∞."""
    ll = np.empty((1, 500))
    ll[0, :100] = -3.0
    ll[0, 100:] = np.linspace(-2.9, 0.0, 400)
    with pytest.raises(ValueError, match="tail"):
        oracle(-ll, 1.0)
    pw = loo_block(ll, 1.0)
    assert pw.k[0] == np.inf and not pw.flat[0]
    np.testing.assert_allclose(pw.elpd[0], math.log(500) - logsumexp(-ll[0]), rtol=1e-12)


def test_loo_on_breast_cancer_is_finite_and_equals_the_pooled_computation_under_the_same_rule(breast_cancer):
    """Where arviz-stats' loo is NaN (a row constant across draws to 1e-12), ours is finite and equals the pooled
    computation under the flat rule: arviz-stats' PSIS on the rows that vary, log mean exp(ll_i) on flat rows; the
    k̂ bands count only rows whose weights vary."""
    import arviz_stats as azs

    model, X, y, draws = breast_cancer
    res = rs.Result(draws, model.param_names(), model=model, data=rs.shard(X, y, num_shards=4), executor="local")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = azs.loo(res.to_arviz(log_likelihood=True), pointwise=True)
    ll = model.log_likelihood(X, y, draws.reshape(-1, X.shape[1]))
    flat = np.ptp(ll, axis=1) < FLAT_SPAN
    assert flat.sum() > 50 and not np.isfinite(ref.elpd_i.values[flat]).all()  # what the rule is for
    want = np.where(flat, logsumexp(ll, axis=1) - math.log(ll.shape[1]), ref.elpd_i.values)
    lo = res.loo(pointwise=True)
    assert np.isfinite(lo.elpd) and np.isfinite(lo.se)
    np.testing.assert_allclose(lo.elpd_i.values, want, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(lo.elpd, want.sum(), rtol=1e-12)
    np.testing.assert_allclose(lo.se, math.sqrt(len(want) * np.var(want)), rtol=1e-9)
    k_ref = ref.pareto_k.values
    np.testing.assert_allclose(lo.pareto_k.values[~flat], k_ref[~flat], rtol=0, atol=TOL)
    assert np.all(lo.pareto_k.values[flat] == FLAT_K) and lo.flat_i.values.tolist() == flat.tolist()
    high = ~flat & (k_ref >= 0.7)
    assert (lo.k_flat, lo.k_ok, lo.k_high) == (int(flat.sum()), int((~flat & (k_ref < 0.7)).sum()), int(high.sum()))
    assert sorted(r.index for r in lo.high_k_rows) == np.flatnonzero(high).tolist()
    assert f"flat (span < {FLAT_SPAN:g}" in str(lo)


@pytest.mark.parametrize(
    "rows, cpus, want",
    [
        ([100, 100, 100, 100], 16, [4, 4, 4, 4]),
        ([100, 100, 100], 16, [6, 5, 5]),
        ([300, 100], 8, [6, 2]),
        ([100, 100, 100, 100], 2, [1, 1, 1, 1]),
        ([None, 50, None], 6, [2, 2, 2]),
        ([10], 1, [1]),
    ],
)
def test_a_sites_cpus_are_shared_among_its_shards_by_rows(rows, cpus, want):
    assert split_parts(rows, cpus) == want
