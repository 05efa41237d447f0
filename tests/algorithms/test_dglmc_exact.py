"""DG-LMC against exact answers on Gaussian potentials (docs/algorithms.md, "Exact test targets").

With LMC local steps the chain is an affine Gaussian recursion: its θ-draws must follow the exact stationary
law from the discrete Lyapunov equation, for N_i = 1, N_i = 5 and unequal N_i. With exact (MALA) local steps
the θ-marginal is π_ρ in closed form. Tolerances are z = 4 Monte-Carlo standard errors from the ESS.
"""

from __future__ import annotations

import numpy as np
import pytest
from support.problems import gaussian_problem
from support.stats_helpers import Z, assert_moments, ess, tolerance_scale

import raysampler as rs
from raysampler.testing import exact
from raysampler.tuning.overrelax import gibbs_autocorrelation, gibbs_iat

SIZES = (6, 10, 14)
#: 320,000 draws as 256 chains of 1,250 rounds: an in-process round costs about the same for 64 or 256 chains
#: (one vectorised step), so 4× the chains and a quarter of the rounds give the same ESS for a third of the rounds
CHAINS, ROUNDS = 256, 1_250


@pytest.fixture(scope="module")
def problem():
    """Three shards of 2-D Gaussian observations, prior N(0, I): local precisions P_i = n_i Σ1⁻¹."""
    return gaussian_problem(SIZES, seed=7)[:4]


def _run_lmc(problem, n_local, rho=0.1, gamma_frac=0.4, rounds=ROUNDS, chains=CHAINS, seed=0):
    shards, model, P, m = problem
    M = np.array([np.linalg.eigvalsh(Pi).max() for Pi in P])
    rho_v = np.full(3, rho)
    gamma = gamma_frac * rho_v / (rho_v * M + 1)
    res = rs.sample(
        model,
        shards,
        chains=chains,
        num_rounds=rounds,
        burn_in=500,
        seed=seed,
        executor="local",
        progress=False,
        preconditioner=None,
        local_kernel="lmc",
        rho=rho_v,
        gamma=gamma,
        n_local=n_local,
        init="zeros",
    )
    law = exact.dglmc_lmc_law(P, m, np.eye(2), np.zeros(2), rho_v, gamma, np.broadcast_to(n_local, (3,)))
    return res, law


@pytest.mark.parametrize("n_local", [1, 5, [1, 3, 7]], ids=["N=1", "N=5", "N=unequal"])
def test_lmc_matches_lyapunov_law(problem, n_local):
    res, (mean, cov) = _run_lmc(problem, n_local)
    assert res.draws.shape == (CHAINS, ROUNDS, 2)
    assert_moments(res.draws, mean, cov)
    # The check can fail: π_ρ (the same chain without LMC's γ-bias) differs by more than the tolerance.
    _, model, P, m = problem
    other_mean, other_cov = exact.pi_rho(P, m, np.eye(2), np.zeros(2), [0.1] * 3)
    tol = tolerance_scale(res.draws, cov)
    assert (
        np.max(np.abs(np.sqrt(np.diag(other_cov)) - np.sqrt(np.diag(cov)))) > 1.5 * tol
        or np.max(np.abs(other_mean - mean)) > 1.5 * tol
    )


def test_lmc_law_tends_to_pi_rho_as_gamma_vanishes(problem):
    """Consistency of the two exact targets: γ → 0 with Nγ fixed removes the LMC bias, leaving π_ρ."""
    _, _, P, m = problem
    rho = [0.1] * 3
    target = exact.pi_rho(P, m, np.eye(2), np.zeros(2), rho)
    errs = []
    for gamma, n in [(1e-3, 20), (1e-4, 200)]:
        law = exact.dglmc_lmc_law(P, m, np.eye(2), np.zeros(2), rho, [gamma] * 3, [n] * 3)
        errs.append(exact.gaussian_w2(*law, *target))
    assert errs[1] < errs[0] / 5 and errs[1] < 1e-3


@pytest.mark.parametrize(("overrelax", "seed"), [(0.0, 1), (-0.7, 3)], ids=["plain", "overrelaxed"])
def test_mala_within_gibbs_targets_pi_rho(problem, overrelax, seed):
    """Exact local steps: the θ-marginal is π_ρ (no γ-bias), here without preconditioning; also with the θ-update
    over-relaxed by hand."""
    shards, model, P, m = problem
    res = rs.sample(
        model,
        shards,
        chains=CHAINS,
        num_rounds=ROUNDS,
        burn_in=1000,
        seed=seed,
        executor="local",
        progress=False,
        preconditioner=None,
        local_kernel="mala",
        rho=0.1,
        n_local=3,
        init="zeros",
        overrelax=overrelax,
    )
    assert res.setup.plan.overrelax == overrelax
    mean, cov = exact.pi_rho(P, m, np.eye(2), np.zeros(2), [0.1] * 3)
    assert_moments(res.draws, mean, cov)
    assert 0.3 < res.sample_stats["local_accept"].mean() < 0.95


def test_default_run_targets_whitened_pi_rho_within_bias_budget(problem):
    """The turn-key default (Laplace-whitened coupling, Laplace-MH local steps, ρ from the bias budget, over-relaxed
    Gibbs updates) samples π_ρ with coupling metric ρLLᵀ exactly, and π_ρ's sd inflation over the true posterior
    stays within the budget."""
    shards, model, P, m = problem
    res = rs.sample(
        model, shards, chains=CHAINS, num_rounds=ROUNDS, burn_in=1000, seed=2, executor="local", progress=False
    )
    assert -1 < res.setup.plan.overrelax < 0  # the check covers the over-relaxed updates
    rho = res.run_stats.rho
    post_mean, post_cov = exact.gaussian_posterior(P, m, np.eye(2), np.zeros(2))
    mean, cov = exact.pi_rho(P, m, np.eye(2), np.zeros(2), rho, metric=post_cov)  # LLᵀ = Laplace covariance
    assert_moments(res.draws, mean, cov)
    plan = res.setup.plan
    inflation = np.max(np.sqrt(np.diag(cov) / np.diag(post_cov)) - 1)
    mean_bias = np.max(np.abs(mean - post_mean) / np.sqrt(np.diag(post_cov)))
    # Quadratic U_i: the tuner's Laplace prediction of π_ρ's bias is exact, and ρ is the largest within budget.
    np.testing.assert_allclose(
        [plan.bias.sd_error, plan.bias.mean_shift_sd], [inflation, mean_bias], rtol=1e-6, atol=1e-12
    )
    assert max(inflation, mean_bias) <= plan.bias_budget == 0.05


def test_overrelaxation_autocorrelation_matches_its_prediction():
    """One dimension, Gaussian shards: the per-direction recursion behind overrelax="auto" is then exact, so the
    chain's autocorrelations at lags 1–5 must match `tuning.overrelax.gibbs_autocorrelation`, for the chosen α and
    for plain Gibbs (tolerance: 4 standard errors, Bartlett-type, from the predicted IAT of θ²); and the chosen α
    must give at least twice plain Gibbs's bulk ESS."""
    rng = np.random.default_rng(11)
    sizes = (20, 40, 60)
    ys = [0.3 + rng.normal(size=(n, 1)) for n in sizes]
    shards = rs.shard([(np.zeros((len(y), 0)), y) for y in ys])
    model = rs.models.Gaussian(prior_scale=1.0, noise_scale=1.0)
    bulk = {}
    for overrelax in ("auto", 0.0):
        res = rs.sample(
            model, shards, chains=CHAINS, num_rounds=ROUNDS, burn_in=500, seed=4, executor="local", progress=False,
            overrelax=overrelax,
        )  # fmt: skip
        plan = res.setup.plan
        alpha, rho = plan.overrelax, np.asarray(plan.rho)
        var = 1.0 / (1.0 + sum(sizes))  # whitened coordinates: the Laplace metric is the posterior variance
        p0, p = var, np.array(sizes) * var
        c, lam = gibbs_autocorrelation(alpha, p0, p, rho)
        lags = np.arange(1, 6)
        predicted = np.real(np.sum(c[None, :] * lam[None, :] ** lags[:, None], axis=1))
        x = res.draws[..., 0] - res.draws[..., 0].mean()
        measured = np.array([np.mean(x[:, t:] * x[:, :-t]) for t in lags]) / np.mean(x * x)
        se = np.sqrt(4.0 * gibbs_iat(alpha, p0, p, rho)[1] / x.size)
        np.testing.assert_array_less(np.abs(measured - predicted), Z * se, err_msg=f"overrelax={overrelax}")
        bulk[overrelax] = ess(res.draws[..., 0])
    assert alpha == 0.0 and bulk["auto"] > 2.0 * bulk[0.0]


def test_bias_budget_also_bounds_the_mean_when_shards_disagree():
    """Shards whose local posteriors sit far apart (local precisions 0.9 and 0.1 per observation row, means
    −20 and 180): the curvature rule alone would move π_ρ's mean by ≈ 1.6 sd; the tuner lowers ρ until the
    exact shift is within the budget."""
    y1 = np.full((9, 1), -20.0) + np.linspace(-1, 1, 9)[:, None]
    y2 = np.full((1, 1), 180.0)
    model = rs.models.Gaussian(prior_scale=100.0, noise_scale=1.0)
    shards = rs.shard([(np.zeros((9, 0)), y1), (np.zeros((1, 0)), y2)])
    res = rs.sample(model, shards, chains=2, num_rounds=10, burn_in=5, executor="local", progress=False)
    plan = res.setup.plan
    P = [np.array([[9.0]]), np.array([[1.0]])]
    m = [y1.mean(axis=0), y2.mean(axis=0)]
    prior = np.array([[1e-4]])
    post_mean, post_cov = exact.gaussian_posterior(P, m, prior, np.zeros(1))
    curvature_rule = ((1.05) ** 2 - 1) / plan.M.max()
    shift_at = lambda r: abs(exact.pi_rho(P, m, prior, np.zeros(1), [r, r], metric=post_cov)[0][0] - post_mean[0])
    assert shift_at(curvature_rule) / np.sqrt(post_cov[0, 0]) > 0.5  # the old rule's bias
    assert res.run_stats.rho[0] < curvature_rule
    assert shift_at(res.run_stats.rho[0]) / np.sqrt(post_cov[0, 0]) <= 0.05 + 1e-9
    np.testing.assert_allclose(
        plan.bias.mean_shift_sd, shift_at(res.run_stats.rho[0]) / np.sqrt(post_cov[0, 0]), rtol=1e-6
    )


def test_pi_rho_bias_is_order_rho(problem):
    """W2(π_ρ, π) → 0 linearly in ρ ([DG-LMC], Prop. 3): halving ρ roughly halves the distance."""
    _, _, P, m = problem
    post = exact.gaussian_posterior(P, m, np.eye(2), np.zeros(2))
    w = [exact.gaussian_w2(*exact.pi_rho(P, m, np.eye(2), np.zeros(2), [r] * 3), *post) for r in (0.04, 0.02, 0.01)]
    assert w[0] > w[1] > w[2] > 0
    assert 1.7 < w[0] / w[1] < 2.3 and 1.7 < w[1] / w[2] < 2.3


def _logistic_pi_rho(shards, rho, prior_scale=1.0):
    """Mean and variance of π_ρ's θ-marginal for one logistic coefficient, by quadrature on a grid:
    π_ρ(θ) ∝ N(θ; 0, prior_scale²) Π_i ∫ exp(−U_i(z) − (z − θ)²/(2ρ)) dz."""
    from scipy.special import logsumexp

    grid = np.linspace(-12.0, 12.0, 3001)
    log_pi = -0.5 * (grid / prior_scale) ** 2
    for X, y in shards:
        eta = np.outer(grid, X[:, 0])
        U = (np.logaddexp(0.0, eta) - y[None, :] * eta).sum(axis=1)  # U_i on the grid of z
        log_pi += logsumexp(-U[None, :] - (grid[None, :] - grid[:, None]) ** 2 / (2.0 * rho), axis=1)
    w = np.exp(log_pi - log_pi.max())
    w /= w.sum()
    mean = w @ grid
    return mean, w @ (grid - mean) ** 2


def test_default_local_kernel_targets_pi_rho_of_non_gaussian_potentials():
    """Logistic shards of one coefficient and five rows each (local potentials with kinks on the conditional's scale
    √ρ): the re-centred Laplace proposal is not Π_ρ(z_i | θ), so only its tilted acceptance ratio makes the chain exact
    (accepting on the plain remainder instead puts the mean 20 MCSE off). Its θ-marginal must be π_ρ, computed by
    quadrature (ρ = 0.3 in θ's own coordinates; over-relaxed updates; re-centred from the first round, as "auto"
    would not: the plain proposal's acceptance, 0.93, is above its threshold)."""
    xs = ([3.0, -2.0, 1.5, -1.0, 0.5], [2.5, -3.0, 1.0, -0.5, 2.0], [-2.5, 1.0, 3.0, -1.5, 0.7])
    ys = ([1, 0, 1, 1, 0], [1, 0, 1, 0, 1], [0, 0, 1, 1, 1])
    parts = [(np.array(x)[:, None], np.array(y, dtype=float)) for x, y in zip(xs, ys)]
    rho = 0.3
    res = rs.sample(
        rs.models.LogisticRegression(prior_scale=1.0), rs.shard(parts), chains=CHAINS, num_rounds=ROUNDS, burn_in=500,
        seed=7, executor="local", progress=False, preconditioner=None, local_kernel="laplace_mh", rho=rho,
        recentre=True,
    )  # fmt: skip
    assert -1 < res.setup.plan.overrelax < 0
    assert 0.8 < res.sample_stats["local_accept"].mean() < 0.97  # the proposal is not the conditional
    mean, var = _logistic_pi_rho(parts, rho)
    assert_moments(res.draws, np.array([mean]), np.array([[var]]))


def test_recentre_auto_switches_where_the_plain_proposal_is_often_rejected():
    """recentre="auto": breast_cancer's plain Laplace proposal is accepted ~0.82 of the time during burn-in, so
    every shard re-centres after it (acceptance then ~0.97, as with recentre=True); Gaussian shards accept every
    plain proposal and never re-centre (the draws equal recentre=False's, bit for bit)."""
    X, y = rs.datasets.load("breast_cancer")
    shards = rs.shard(X, y, num_shards=4)
    kw = dict(chains=4, num_rounds=300, burn_in=100, seed=3, executor="local", progress=False)
    accept = {
        mode: rs.sample(rs.models.LogisticRegression(), shards, recentre=mode, **kw).sample_stats["local_accept"].mean()
        for mode in ("auto", True, False)
    }
    assert accept[False] < 0.88 < 0.95 < min(accept["auto"], accept[True])
    gshards, gmodel = gaussian_problem(SIZES, seed=7)[:2]
    auto = rs.sample(gmodel, gshards, **kw)
    np.testing.assert_array_equal(auto.draws, rs.sample(gmodel, gshards, recentre=False, **kw).draws)
