"""The DP mode (`privacy=rs.DP(...)`): DG-LMC's LMC steps with per-example clipping, against exact answers.

With C so large that no row's gradient is clipped, the DP chain is plain DG-LMC with LMC local steps, whose θ-law is
the exact stationary law of an affine Gaussian recursion (discrete Lyapunov; `raysampler.testing.exact`); tolerances
are z = 4 Monte-Carlo standard errors from the ESS. With a small C the clip rate must equal a count by hand, and a
small budget must stop the run (stop reason `privacy_budget`) with its draws kept and ε never exceeded."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from support.problems import gaussian_problem
from support.stats_helpers import assert_moments

import raysampler as rs
from raysampler.errors import ArgumentError
from raysampler.models.contract import DataSpec
from raysampler.privacy.accountant import epsilon
from raysampler.privacy.clipping import check_clippable, clipped_grad
from raysampler.testing import exact

SIZES = (6, 10, 14)
CHAINS, ROUNDS = 256, 1_250


@pytest.fixture(scope="module")
def problem():
    """Three shards of 2-D Gaussian observations, prior N(0, I): local precisions P_i = n_i Σ1⁻¹."""
    return gaussian_problem(SIZES, seed=7)


def _settings(problem, n_local=3, rho=0.1, gamma_frac=0.4):
    _, _, P, _, _ = problem
    M = np.array([np.linalg.eigvalsh(Pi).max() for Pi in P])
    rho_v = np.full(3, rho)
    return rho_v, gamma_frac * rho_v / (rho_v * M + 1), n_local


def test_unclipped_dp_chain_matches_the_lyapunov_law(problem):
    shards, model, P, m, _ = problem
    rho, gamma, n_local = _settings(problem)
    res = rs.sample(
        model, shards, chains=CHAINS, num_rounds=ROUNDS, burn_in=500, seed=3, executor="local", progress=False,
        rho=rho, gamma=gamma, n_local=n_local, privacy=rs.DP(epsilon=1e12, delta=1e-5, clip=1e3),
    )  # fmt: skip
    stats = res.run_stats.privacy
    assert res.outcome.stop_reason == "completed" and np.all(stats.clip_rate == 0.0)
    assert res.setup.plan.preconditioner == "none" and res.setup.plan.local_kernel == "lmc"
    law = exact.dglmc_lmc_law(P, m, np.eye(2), np.zeros(2), rho, gamma, [n_local] * 3)
    assert_moments(res.draws, *law)
    # ε spent: (P2) with every chain's steps of every round, burn-in included
    steps = (500 + ROUNDS) * n_local
    np.testing.assert_array_equal(stats.local_steps, [steps] * 3)
    for i in range(3):
        assert stats.epsilon_spent[i] == pytest.approx(epsilon(1e3, CHAINS * gamma[i] * steps, 1e-5), rel=1e-12)


def test_clip_rate_equals_a_count_by_hand(problem):
    """One round of one step from θ = 0: row r's gradient is Σ1⁻¹(0 − y_r), clipped where its norm exceeds C."""
    shards, model, _, _, ys = problem
    clip = 1.5
    res = rs.sample(
        model, shards, chains=4, num_rounds=1, burn_in=0, seed=0, executor="local", progress=False, n_local=1,
        privacy=rs.DP(epsilon=50.0, delta=1e-5, clip=clip),
    )  # fmt: skip
    prec = np.linalg.inv(np.array(model.noise_cov))
    by_hand = [np.mean(np.linalg.norm(y @ prec, axis=1) > clip) for y in ys]
    assert min(by_hand) > 0.0 and max(by_hand) < 1.0  # the check can fail both ways
    np.testing.assert_allclose(res.run_stats.privacy.clip_rate, by_hand, rtol=0, atol=1e-15)


def test_clipped_gradient_matches_a_loop_and_has_sensitivity_c():
    rng = np.random.default_rng(4)
    X = np.column_stack([np.ones(50), 3.0 * rng.standard_normal((50, 3))])
    y = (rng.random(50) < 0.5).astype(float)
    model = rs.models.LogisticRegression().bind(DataSpec(n_features=4, n_rows=50))
    x = rng.standard_normal((3, 4))
    clip = 1.0
    out = clipped_grad(model, X, y, x, clip)
    for k in range(3):
        rows = (1.0 / (1.0 + np.exp(-X @ x[k])) - y)[:, None] * X
        norms = np.linalg.norm(rows, axis=1)
        loop = sum(r * min(1.0, clip / nr) for r, nr in zip(rows, norms))
        np.testing.assert_allclose(out.grad[k], loop, rtol=1e-12, atol=1e-12)
        assert out.clipped[k] == np.sum(norms > clip) and 0 < out.clipped[k] < 50
    # add/remove one row: the clipped sum moves by at most C (the sensitivity of (P1))
    for r in range(50):
        keep = np.arange(50) != r
        less = clipped_grad(model, X[keep], y[keep], x, clip).grad
        assert np.all(np.linalg.norm(out.grad - less, axis=1) <= clip + 1e-12)


def test_feature_rule_is_a_weighted_likelihood_gradient_within_c():
    """clip_rule="features": row r's gradient times min(1, C/‖x_r‖), the gradient of Σ_r w_r ℓ_r: at most C per row
    at every θ (|σ − y| ≤ 1), and the clip count is the rows with ‖x_r‖ > C, whatever θ."""
    rng = np.random.default_rng(5)
    X = np.column_stack([np.ones(60), 2.0 * rng.standard_normal((60, 3))])
    y = (rng.random(60) < 0.5).astype(float)
    model = rs.models.LogisticRegression().bind(DataSpec(n_features=4, n_rows=60))
    x = 3.0 * rng.standard_normal((4, 4))
    clip = 2.5
    out = clipped_grad(model, X, y, x, clip, "features")
    w = np.minimum(1.0, clip / np.linalg.norm(X, axis=1))
    for k in range(4):
        rows = (1.0 / (1.0 + np.exp(-X @ x[k])) - y)[:, None] * X
        assert np.all(np.linalg.norm(rows * w[:, None], axis=1) <= clip + 1e-12)
        np.testing.assert_allclose(out.grad[k], (rows * w[:, None]).sum(axis=0), rtol=1e-12, atol=1e-12)
    n_big = np.sum(np.linalg.norm(X, axis=1) > clip)
    assert 0 < n_big < 60 and np.all(out.clipped == n_big)

    # the gradient of the weighted potential Σ_r w_r ℓ_r, by central differences
    def weighted(theta):
        eta = X @ theta
        return np.sum(w * (np.logaddexp(0.0, eta) - y * eta))

    h = 1e-6
    num = [(weighted(x[0] + h * e) - weighted(x[0] - h * e)) / (2 * h) for e in np.eye(4)]
    np.testing.assert_allclose(out.grad[0], num, rtol=1e-6, atol=1e-6)
    with pytest.raises(ArgumentError) as err:
        check_clippable(rs.models.PoissonRegression(), "features")
    assert err.value.path == ("privacy", "clip_rule")


@pytest.mark.filterwarnings("ignore::raysampler.diagnostics.RunWarning")  # a short run by design
def test_small_budget_stops_the_run_keeping_its_draws(problem):
    shards, model, _, _, _ = problem
    n_local, gamma = 3, np.array([4e-4, 3e-4, 2e-4])  # ~90 rounds of 4 chains within ε = 2
    dp = rs.DP(epsilon=2.0, delta=1e-5, clip=1.0)
    res = rs.sample(
        model, shards, chains=4, num_rounds=100_000, burn_in=10, seed=1, executor="local", progress=False,
        rho=0.01, gamma=gamma, n_local=n_local, privacy=dp,
    )  # fmt: skip
    assert res.outcome.stop_reason == "privacy_budget"
    stats, plan = res.run_stats.privacy, res.setup.privacy
    rounds = res.run_stats.rounds
    assert 10 < rounds < 100_010 and res.draws.shape == (4, rounds - 10, 2)
    assert np.all(stats.epsilon_spent <= dp.epsilon) and stats.epsilon_spent.max() > 0.95 * dp.epsilon
    assert not plan.allows(stats.local_steps + n_local)  # one more round would have exceeded the budget
    assert rounds == plan.rounds_within(np.full(3, n_local))


def test_dp_mode_refuses_what_it_does_not_account(problem):
    shards, model, _, _, _ = problem
    dp = rs.DP(epsilon=1.0)
    run = dict(chains=2, num_rounds=5, executor="local", progress=False, privacy=dp)
    cases = [
        ({"algorithm": "qlsd"}, ("privacy",), "dglmc"),
        ({"local_kernel": "mala"}, ("privacy",), "local_kernel"),
        ({"preconditioner": "laplace"}, ("privacy",), "preconditioner"),
    ]
    for extra, path, word in cases:
        with pytest.raises(ArgumentError) as err:
            rs.sample(model, shards, **run, **extra)
        assert err.value.path == path and word in str(err.value)
    with pytest.raises(ArgumentError) as err:
        rs.sample(model, shards, **{**run, "privacy": {"epsilon": -1.0}})
    assert err.value.path == ("privacy", "epsilon")
    with pytest.raises(ArgumentError) as err:
        rs.sample(model, shards, **run, pipeline=True)
    assert err.value.path == ("pipeline",)
    X = np.random.default_rng(0).standard_normal((40, 2))
    with pytest.raises(ArgumentError, match="linear_regression"):
        rs.sample(rs.models.LinearRegression(), rs.shard(X, X[:, 0], 2), **run)
    with pytest.raises(ArgumentError, match="group effects") as err:
        check_clippable(rs.models.LogisticRegression(group_effects=rs.GroupEffects(group="hospital")))
    assert err.value.path == ("privacy",)


def test_dp_settings_survive_a_replace():
    alg = rs.algorithms.get_algorithm("dglmc", privacy={"epsilon": 2.0, "clip": 0.5})
    assert dataclasses.replace(alg).privacy == rs.DP(2.0, 1e-5, 0.5)


@pytest.mark.filterwarnings("ignore::raysampler.diagnostics.RunWarning")  # a short run by design
def test_a_resumed_run_keeps_its_accounting(problem):
    """The accounting travels in the run's state: resumed from a mid-run capture, the run stops at the same round
    as the uninterrupted one, having spent the same ε, with the same draws."""
    from raysampler.algorithms import get_algorithm
    from raysampler.options import ExecutionOptions, RunOptions
    from raysampler.sampling import Run

    shards, model, _, _, _ = problem
    alg = get_algorithm("dglmc", rho=0.01, gamma=3e-4, n_local=3, privacy=rs.DP(epsilon=2.0, clip=1.0))
    options, execution = RunOptions(chains=4, num_rounds=100_000, burn_in=10, seed=2), ExecutionOptions("local")
    with Run(model, shards, alg, options, execution) as whole:
        draws = np.concatenate([c.theta for c in whole.chunks(target_chunk_s=1e-4)])
        spent = whole.stats().privacy.epsilon_spent
    assert whole.stop_reason == "privacy_budget"
    with Run(model, shards, alg, options, execution) as first:
        chunk = next(first.chunks(target_chunk_s=1e-4, capture=True))
        assert chunk.rounds_done < whole.rounds_done
    with Run(model, shards, alg, options, execution, resume_from=chunk.state) as rest:
        later = [c.theta for c in rest.chunks()]
        assert rest.stop_reason == "privacy_budget" and rest.rounds_done == whole.rounds_done
        np.testing.assert_array_equal(rest.stats().privacy.epsilon_spent, spent)
    np.testing.assert_array_equal(np.concatenate([chunk.theta, *later]), draws)


def test_a_budget_spent_within_the_burn_in_keeps_no_draws_and_says_so(problem):
    shards, model, _, _, _ = problem
    with pytest.warns(rs.diagnostics.RunWarning, match="no draws were kept") as caught:
        res = rs.sample(
            model, shards, chains=2, num_rounds=1000, burn_in=500, executor="local", progress=False,
            privacy=rs.DP(epsilon=0.5),
        )  # fmt: skip
    assert caught[0].message.kind == "privacy_budget"
    assert res.outcome.stop_reason == "privacy_budget" and res.draws.shape == (2, 0, 2)
    assert np.all(res.run_stats.privacy.epsilon_spent <= 0.5)


@pytest.mark.filterwarnings("ignore::raysampler.diagnostics.RunWarning")  # a short run by design
def test_dp_mode_on_ray_equals_the_in_process_run(problem):
    """On Ray the accounting, the stop and the clip counts travel through actors and stacked replies: the same
    rounds, draws, clip rates and ε as in-process."""
    shards, model, _, _, _ = problem
    run = dict(chains=2, num_rounds=100_000, burn_in=5, progress=False, rho=0.01, gamma=1e-4, n_local=2, seed=3)
    dp = rs.DP(epsilon=2.0, clip=1.5)
    here = rs.sample(model, shards, executor="local", privacy=dp, **run)
    there = rs.sample(model, shards, executor="ray", privacy=dp, **run)
    assert here.outcome.stop_reason == there.outcome.stop_reason == "privacy_budget"
    assert here.run_stats.rounds == there.run_stats.rounds
    np.testing.assert_array_equal(here.draws, there.draws)
    a, b = here.run_stats.privacy, there.run_stats.privacy
    np.testing.assert_array_equal(a.clip_rate, b.clip_rate)
    np.testing.assert_array_equal(a.epsilon_spent, b.epsilon_spent)
    assert np.all((a.clip_rate > 0) & (a.clip_rate < 1))
