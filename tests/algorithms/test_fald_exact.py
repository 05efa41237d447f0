"""FALD (plain, FALD*, VR-FALD*) against its exact stationary law on Gaussian potentials.

Exact law of the server average at communication times. With G_i(x) = H_i x − h_i, H_i = P_i + P0/b,
h_i = P_i m_i + P0 m0/b (prior split evenly), a local step of client i is affine:

    X^i ← (I − γH_i) X^i + D_i a + e_i + ε_i,   ε ~ N(0, Σε), Σε = 2γ[(τ/b) J_b ⊗ I_d + (1 − τ) I_{bd}],

plain: D_i = 0, e_i = γh_i; star / vr_star (anchor a, c_i = G_i(a)): D_i = γ(H_i − H̄), e_i = γh̄.
Stack the clients, w = (X^1, …, X^b), B = blockdiag(I − γH_i); every client starts from X̄_t (w_0 = E X̄_t),
so after N steps X̄_{t+1} = R w_N = R B^N E X̄_t + R G_N D a_t + R G_N e + R Σ_{k<N} B^k ε_k, G_N = Σ_{k<N} B^k,
noise covariance R V_N Rᵀ with V_N = Σ_{k<N} B^k Σε B^kᵀ (R averages the clients). The sampler's anchor moves
to the last collected average X̄_t with probability q (star: q = 1, so a_{t+1} = X̄_t). So the state
s_t = (X̄_t, a_t) follows s' = A_{N,R} s + c_N + η_N, with N ~ Geometric(p) and R ~ Bernoulli(q) independent of s:

    A_{N,R} = [[R B^N E, R G_N D], [R·I, (1 − R)·I]],  c_N = (R G_N e, 0),  Ω_N = blockdiag(R V_N Rᵀ, 0).

Averaging over (N, R) (N summed to where the geometric tail mass < 1e-14): the stationary mean solves
m = Ā m + c̄ and the second moment M = E[s sᵀ] solves M = Σ w (A M Aᵀ + A m cᵀ + c mᵀ Aᵀ + c cᵀ + Ω), i.e.
(I − Σ w A ⊗ A) vec M = vec(rhs); covariance M − m mᵀ. The law is a Gaussian mixture; its first two moments
are exact and the tests check them with ESS-based tolerances (z = 4 MCSE).
"""

from __future__ import annotations

import numpy as np
import pytest
from support.problems import SIGMA1, gaussian_problem
from support.stats_helpers import assert_moments, tolerance_scale

import raysampler as rs
from raysampler.algorithms import FALD, get_algorithm
from raysampler.algorithms.fald import geometric_steps
from raysampler.testing import exact

SIZES = (6, 10, 14, 8)
CENTRES = [(1.5, -1.0), (0.0, 0.5), (-1.0, -1.5), (0.5, 1.0)]  # heterogeneous shards: the schedule matters
GAMMA = 0.02
#: 320,000 draws as 128 chains of 2,500 rounds (an in-process round costs about the same for 64 or 128 chains). Not
#: more chains and fewer rounds: every chain follows the same communication schedule, so the schedule's own
#: randomness averages out over rounds only and must stay a small part of the MC error the ESS measures
ROUNDS, CHAINS = 2_500, 128


@pytest.fixture(scope="module")
def problem():
    """Four shards of 2-D Gaussian observations, prior N(0, I): U_i(θ) = ½(θ − m_i)ᵀP_i(θ − m_i) + const."""
    return gaussian_problem(SIZES, seed=7, centres=CENTRES)


def fald_law(P, m, P0, m0, gamma, p, tau, variant="plain", q=1.0, grad_noise=None, tail=1e-14):
    """Exact stationary mean and covariance of FALD's server average at communication times (module docstring).

    `grad_noise`: per-client covariances C_i of an additive, state-independent gradient error (minibatches on a
    Gaussian model, plain / star): it adds γ²C_i to client i's block of Σε."""
    b, d = len(P), P0.shape[0]
    I = np.eye(d)
    H = [Pi + P0 / b for Pi in P]
    h = [Pi @ mi + P0 @ m0 / b for Pi, mi in zip(P, m)]
    Hbar, hbar = sum(H) / b, sum(h) / b
    B = np.zeros((b * d, b * d))
    for i in range(b):
        B[i * d : (i + 1) * d, i * d : (i + 1) * d] = I - gamma * H[i]
    if variant == "plain":
        D = np.zeros((b * d, d))
        e = gamma * np.concatenate(h)
        q = 1.0
    else:
        D = gamma * np.vstack([Hi - Hbar for Hi in H])
        e = gamma * np.tile(hbar, b)
        q = 1.0 if variant == "star" else q
    Sig = 2 * gamma * ((tau / b) * np.kron(np.ones((b, b)), I) + (1 - tau) * np.eye(b * d))
    if grad_noise is not None:
        for i, Ci in enumerate(grad_noise):
            Sig[i * d : (i + 1) * d, i * d : (i + 1) * d] += gamma**2 * Ci
    E = np.kron(np.ones((b, 1)), I)
    R = np.kron(np.ones((1, b)) / b, I)
    terms = []
    Bk, G, V = np.eye(b * d), np.zeros((b * d, b * d)), np.zeros((b * d, b * d))
    n = 0
    while True:
        n += 1
        G = G + Bk
        V = V + Bk @ Sig @ Bk.T
        Bk = Bk @ B
        wN = p * (1 - p) ** (n - 1)
        top = np.hstack([R @ Bk @ E, R @ G @ D])
        c = np.concatenate([R @ G @ e, np.zeros(d)])
        Om = np.zeros((2 * d, 2 * d))
        Om[:d, :d] = R @ V @ R.T
        for r, wr in ((1.0, q), (0.0, 1.0 - q)):
            if wr > 0:
                A = np.vstack([top, np.hstack([r * I, (1 - r) * I])])
                terms.append((wN * wr, A, c, Om))
        if (1 - p) ** n < tail:
            break
    k = 2 * d
    Abar = sum(w * A for w, A, _, _ in terms)
    cbar = sum(w * c for w, _, c, _ in terms)
    mean = np.linalg.solve(np.eye(k) - Abar, cbar)
    rhs = sum(w * (np.outer(A @ mean, c) + np.outer(c, A @ mean) + np.outer(c, c) + Om) for w, A, c, Om in terms)
    K2 = sum(w * np.kron(A, A) for w, A, _, _ in terms)
    assert np.max(np.abs(np.linalg.eigvals(K2))) < 1
    M2 = np.linalg.solve(np.eye(k * k) - K2, rhs.reshape(-1)).reshape(k, k)
    cov = M2 - np.outer(mean, mean)
    cov = 0.5 * (cov + cov.T)
    return mean[:d], cov[:d, :d]


def _law(problem, **kw):
    _, _, P, m, _ = problem
    return fald_law(P, m, np.eye(2), np.zeros(2), GAMMA, **kw)


def test_law_with_every_step_communicating_is_lmc_with_step_gamma_over_b(problem):
    """p = 1: X̄' = X̄ − (γ/b)∇U(X̄) + √(2γ/b)ξ for every τ and variant (Lyapunov law of that recursion)."""
    _, _, P, m, _ = problem
    h = GAMMA / len(P)
    Lam = np.eye(2) + sum(P)
    lmc = exact.stationary_law(np.eye(2) - h * Lam, h * sum(Pi @ mi for Pi, mi in zip(P, m)), 2 * h * np.eye(2))
    for kw in (dict(tau=1.0), dict(tau=0.0), dict(tau=0.4, variant="star"), dict(tau=0.4, variant="vr_star", q=0.3)):
        mean, cov = _law(problem, p=1.0, **kw)
        np.testing.assert_allclose(mean, lmc[0], rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(cov, lmc[1], rtol=1e-9, atol=1e-14)
    # ... and that law is close to (not equal to) the posterior: LMC's O(γ/b) bias
    post = exact.gaussian_posterior(P, m, np.eye(2), np.zeros(2))
    assert 0 < exact.gaussian_w2(*lmc, *post) < 0.05


CASES = [
    dict(variant="plain", p_comm=1.0, tau=1.0, other=dict(p=0.3)),
    dict(variant="plain", p_comm=0.3, tau=1.0, other=dict(p=1.0)),
    dict(variant="plain", p_comm=0.3, tau=0.0, other=dict(p=0.15)),
    # FALD*'s law hardly depends on p_comm (that is its point): the alternative is plain FALD's law.
    dict(variant="star", p_comm=0.3, tau=0.5, other=dict(variant="plain")),
    dict(variant="vr_star", p_comm=0.3, tau=1.0, q=0.3, other=dict(variant="plain")),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c['variant']}-p{c['p_comm']}-tau{c['tau']}")
def test_draws_match_exact_law(problem, case):
    shards, model, P, m, _ = problem
    case = dict(case)
    other = case.pop("other")
    res = rs.sample(
        model,
        shards,
        "fald",
        chains=CHAINS,
        num_rounds=ROUNDS,
        burn_in=300,
        seed=3,
        executor="local",
        progress=False,
        preconditioner=None,
        step_size=GAMMA,
        init="zeros",
        **case,
    )
    assert res.draws.shape == (CHAINS, ROUNDS, 2)
    law_kw = dict(p=case["p_comm"], tau=case["tau"], variant=case["variant"], q=case.get("q", 1.0))
    mean, cov = _law(problem, **law_kw)
    assert_moments(res.draws, mean, cov)
    # The check can fail: the law for another p_comm (or without control variates) is farther than the tolerance.
    o_mean, o_cov = _law(problem, **{**law_kw, **other})
    tol = tolerance_scale(res.draws, cov)
    gap = max(np.max(np.abs(o_mean - mean)), np.max(np.abs(np.sqrt(np.diag(o_cov)) - np.sqrt(np.diag(cov)))))
    assert gap > 1.5 * tol, (gap, tol)
    # The schedule: one geometric block per round, the same for every chain, mean 1/p_comm.
    steps = res.sample_stats["local_steps"]
    assert steps.shape == (CHAINS, ROUNDS)
    assert np.all(steps == steps[:1]) and steps.min() >= 1
    p = case["p_comm"]
    per_round = steps[0]
    se = np.sqrt((1 - p) / p**2 / per_round.size)
    assert abs(per_round.mean() - 1 / p) <= 4 * se + 1e-12
    assert abs(np.mean(per_round == 1) - p) <= 4 * np.sqrt(p * (1 - p) / per_round.size) + 1e-12


def test_control_variates_change_the_law_but_not_at_p1(problem):
    """FALD* removes the heterogeneity drift: its law differs from plain FALD's at p < 1 (by more than the
    tolerances used above), and the variants coincide when every step communicates."""
    a, b_ = _law(problem, p=0.3, tau=1.0), _law(problem, p=0.3, tau=1.0, variant="star")
    assert np.max(np.abs(a[0] - b_[0])) > 0.02
    post_mean = exact.gaussian_posterior(*problem[2:4], np.eye(2), np.zeros(2))[0]
    assert np.max(np.abs(b_[0] - post_mean)) < np.max(np.abs(a[0] - post_mean))


def test_minibatch_plain_matches_exact_law_with_gradient_noise(problem):
    """Minibatches on a Gaussian model: Ĝ^i − G_i = −n_iΣ1⁻¹(ȳ_S − ȳ_i), state-free noise with covariance
    C_i = n_i²Σ1⁻¹S_iΣ1⁻¹/B (S_i the shard's population covariance; indices drawn with replacement)."""
    shards, model, P, m, ys = problem
    B = 2
    prec = np.linalg.inv(SIGMA1)
    C = [len(y) ** 2 * prec @ np.cov(y.T, bias=True) @ prec / B for y in ys]
    res = rs.sample(
        model,
        shards,
        "fald",
        chains=16,
        num_rounds=3000,
        burn_in=200,
        seed=5,
        executor="local",
        progress=False,
        preconditioner=None,
        step_size=GAMMA,
        init="zeros",
        p_comm=0.5,
        tau=0.5,
        batch_size=B,
    )
    law = fald_law(P, m, np.eye(2), np.zeros(2), GAMMA, p=0.5, tau=0.5, grad_noise=C)
    assert_moments(res.draws, *law)
    full = fald_law(P, m, np.eye(2), np.zeros(2), GAMMA, p=0.5, tau=0.5)
    tol = tolerance_scale(res.draws, law[1])
    assert np.max(np.abs(np.sqrt(np.diag(full[1])) - np.sqrt(np.diag(law[1])))) > 1.5 * tol


def test_vr_star_minibatch_shares_the_minibatch(problem):
    """Same minibatch for Ĝ^i(X^i) and Ĝ^i(ref): on a Gaussian model the (additive) minibatch error cancels
    exactly, so VR-FALD* with minibatches reproduces the full-gradient chain to rounding."""
    shards, model, _, _, _ = problem
    kw = dict(
        chains=3,
        num_rounds=200,
        burn_in=10,
        seed=9,
        executor="local",
        progress=False,
        preconditioner=None,
        variant="vr_star",
        q=0.3,
        tau=0.5,
        p_comm=0.3,
        step_size=GAMMA,
        init="zeros",
    )
    full = rs.sample(model, shards, "fald", **kw)
    mini = rs.sample(model, shards, "fald", batch_size=2, **kw)
    np.testing.assert_allclose(mini.draws, full.draws, rtol=0, atol=1e-9)
    plain = rs.sample(model, shards, "fald", batch_size=2, **{**kw, "variant": "plain"})
    assert np.max(np.abs(plain.draws - full.draws)) > 1e-3


def test_geometric_inversion():
    u = (np.arange(200_000) + 0.5) / 200_000
    n = np.array([geometric_steps(x, 0.25) for x in u])
    assert n.min() == 1
    assert abs(n.mean() - 4.0) < 1e-3
    assert abs(np.mean(n == 1) - 0.25) < 1e-4 and abs(np.mean(n == 3) - 0.25 * 0.75**2) < 1e-4
    assert geometric_steps(0.7, 1.0) == 1 and geometric_steps(0.0, 0.5) >= 1


def test_defaults_and_registry(problem):
    shards, model, P, _, _ = problem
    alg = get_algorithm("fald")
    assert isinstance(alg, FALD) and alg.name == "fald"
    assert (alg.variant, alg.p_comm, alg.tau, alg.step_size, alg.init) == ("plain", 0.2, 1.0, None, "map")
    res = rs.sample(
        model,
        shards,
        "fald",
        chains=2,
        num_rounds=50,
        burn_in=10,
        seed=0,
        executor="local",
        progress=False,
        preconditioner=None,
    )
    M = np.array([np.linalg.eigvalsh(Pi).max() for Pi in P])
    plan = res.setup.plan
    np.testing.assert_allclose(plan.step_size, 0.1 / np.max(M + 1.0 / len(P)), rtol=1e-10)
    post = exact.gaussian_posterior(P, problem[3], np.eye(2), np.zeros(2))
    np.testing.assert_allclose(plan.theta_map, post[0], atol=1e-6)
    assert np.all(np.isfinite(res.draws))


@pytest.mark.parametrize(
    "bad, word",
    [
        (dict(p_comm=0.0), "p_comm"),
        (dict(p_comm=1.5), "p_comm"),
        (dict(p_comm=True), "p_comm"),
        (dict(tau=-0.1), "tau"),
        (dict(tau=1.01), "tau"),
        (dict(step_size=0.0), "step_size"),
        (dict(step_size=-1e-3), "step_size"),
        (dict(step_size=float("nan")), "step_size"),
        (dict(variant="fancy"), "variant"),
        (dict(q=0.0), "q"),
        (dict(init="random"), "init"),
        (dict(batch_size=0), "batch_size"),
        (dict(batch_size=2.5), "batch_size"),
    ],
)
def test_bad_params_raise_naming_the_parameter(bad, word):
    with pytest.raises(ValueError, match=word):
        get_algorithm("fald", **bad)


def test_local_and_ray_draws_identical(ray_session, problem):
    shards, model, _, _, _ = problem
    kw = dict(
        chains=3,
        num_rounds=6,
        burn_in=2,
        seed=11,
        progress=False,
        preconditioner=None,
        variant="vr_star",
        q=0.5,
        tau=0.5,
        p_comm=0.4,
        step_size=GAMMA,
        batch_size=2,
    )
    local = rs.sample(model, shards, "fald", executor="local", **kw)
    on_ray = rs.sample(model, shards, "fald", executor="ray", **kw)
    np.testing.assert_array_equal(local.draws, on_ray.draws)
    np.testing.assert_array_equal(local.sample_stats["local_steps"], on_ray.sample_stats["local_steps"])
