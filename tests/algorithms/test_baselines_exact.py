"""Baselines (ULA, MALA, D-SGLD, D-SGHMC, D-ULA) against exact answers on Gaussian potentials.

With quadratic U_i(x) = ½(x − m_i)ᵀP_i(x − m_i) and the prior N(0, I) split as U_prior/b per agent, agent i's
gradient is ∇Ũ_i(x) = A_i x − a_i with A_i = P_i + P0/b, a_i = P_i m_i + P0 m0/b. Each sampler is then an
affine recursion s' = F s + c + N(0, Ω) in its full state; its stationary law comes from `exact.stationary_law`
and the draws' law (θ, or x̄ = M s with M = (1/b)[I … I]) is N(Mμ, M S Mᵀ). Tolerances: 4 MCSE from the ESS.
"""

from __future__ import annotations

import numpy as np
import pytest
from support.problems import gaussian_problem, ula_law
from support.stats_helpers import assert_moments, tolerance_scale

import raysampler as rs
from raysampler import topology as topo
from raysampler.algorithms import RoundInfo, get_algorithm
from raysampler.algorithms.decentralized import GraphState
from raysampler.testing import exact

SIZES = (3, 5, 4, 6, 2)
B = len(SIZES)
P0, M0 = np.eye(2), np.zeros(2)
#: 128,000 draws as 256 chains of 500 rounds: an in-process round costs about the same for 64 or 256 chains (one
#: vectorised step), so the same ESS comes from 1,000 rounds instead of 2,500
CHAINS, ROUNDS, BURN = 256, 500, 500


@pytest.fixture(scope="module")
def problem():
    """Five shards of 2-D Gaussian observations, prior N(0, I): local precisions P_i = n_i Σ1⁻¹."""
    return gaussian_problem(SIZES, seed=11)[:4]


def _run(problem, algorithm, seed=0, **params):
    shards, model, _, _ = problem
    return rs.sample(
        model,
        shards,
        algorithm,
        chains=CHAINS,
        num_rounds=ROUNDS,
        burn_in=BURN,
        seed=seed,
        executor="local",
        progress=False,
        preconditioner=None,
        init="zeros",
        **params,
    )


def _local_affine(P, m):
    """Blocks A = blkdiag(A_i) (bd, bd) and a = (a_i) (bd,) of the agents' gradients ∇Ũ_i(x) = A_i x − a_i."""
    b, d = len(P), P[0].shape[0]
    A = np.zeros((b * d, b * d))
    a = np.zeros(b * d)
    for i in range(b):
        A[i * d : (i + 1) * d, i * d : (i + 1) * d] = P[i] + P0 / b
        a[i * d : (i + 1) * d] = P[i] @ m[i] + P0 @ M0 / b
    return A, a


def _average_law(mean, cov, b, d, n_state=None):
    """Law of x̄ = M s, M = (1/b)[I_d … I_d] (padded with zeros for extra state such as v)."""
    n = n_state or b * d
    M = np.zeros((d, n))
    M[:, : b * d] = np.tile(np.eye(d), b) / b
    return M @ mean, M @ cov @ M.T


def dsgld_law(P, m, eta, W):
    """x' = (W ⊗ I − ηA)x + ηa + √(2η)ξ on the stacked x = (x_1, …, x_b)."""
    A, a = _local_affine(P, m)
    F = np.kron(W, np.eye(2)) - eta * A
    mean, cov = exact.stationary_law(F, eta * a, 2 * eta * np.eye(len(a)))
    return _average_law(mean, cov, len(P), 2)


def dsghmc_law(P, m, eta, gam, W):
    """State (x, v): v' = (1 − ηγ)v − ηAx + ηa + n, x' = (W⊗I)x + ηv' with n ~ N(0, 2γη I), i.e.
    F = [[W⊗I − η²A, η(1 − ηγ)I], [−ηA, (1 − ηγ)I]], c = (η²a, ηa), Ω = 2γη [[η²I, ηI], [ηI, I]]."""
    A, a = _local_affine(P, m)
    n = len(a)
    eye = np.eye(n)
    F = np.block([[np.kron(W, np.eye(2)) - eta**2 * A, eta * (1 - eta * gam) * eye], [-eta * A, (1 - eta * gam) * eye]])
    c = np.concatenate([eta**2 * a, eta * a])
    Om = 2 * gam * eta * np.block([[eta**2 * eye, eta * eye], [eta * eye, eye]])
    mean, cov = exact.stationary_law(F, c, Om)
    return _average_law(mean, cov, len(P), 2, 2 * n)


def dula_law(P, m, alpha, beta, L, noise_var=None, agents=False):
    """Constant steps: x' = (I − β L⊗I − αbA)x + αb a + N(0, 2αb I) (eq. 25's w ~ N(0, b I)), L the Laplacian.
    noise_var overrides the per-agent noise variance (2α: the rule without the factor b). agents=True: law of x_1."""
    A, a = _local_affine(P, m)
    b = len(P)
    F = np.eye(len(a)) - beta * np.kron(L, np.eye(2)) - alpha * b * A
    var = 2 * alpha * b if noise_var is None else noise_var
    mean, cov = exact.stationary_law(F, alpha * b * a, var * np.eye(len(a)))
    if agents:
        return mean[:2], cov[:2, :2]
    return _average_law(mean, cov, b, 2)


def _ratio(cov, post):
    """Eigenvalues of post^{-1/2} cov post^{-1/2}."""
    Li = np.linalg.inv(np.linalg.cholesky(post))
    return np.linalg.eigvalsh(Li @ cov @ Li.T)


def _assert_sensitive(res, law, other):
    """The check can fail: the law at another step size differs by more than the tolerance."""
    tol = tolerance_scale(res.draws, law[1])
    sd, sd_o = np.sqrt(np.diag(law[1])), np.sqrt(np.diag(other[1]))
    assert np.max(np.abs(sd - sd_o)) > 1.5 * tol or np.max(np.abs(law[0] - other[0])) > 1.5 * tol


# --- exact laws ---------------------------------------------------------------------------------------------


def test_ula_matches_lyapunov_law(problem):
    _, _, P, m = problem
    L = sum(np.linalg.eigvalsh(Pi).max() for Pi in P) + 1.0
    gamma = 0.8 / L
    res = _run(problem, "ula", step_size=gamma)
    law = ula_law(P, m, gamma)
    assert_moments(res.draws, *law)
    _assert_sensitive(res, law, ula_law(P, m, gamma / 10))


def test_ula_default_step_is_tenth_of_inverse_lipschitz(problem):
    shards, model, P, _ = problem
    res = rs.sample(
        model, shards, "ula", chains=2, num_rounds=5, burn_in=0, executor="local", progress=False, preconditioner=None
    )
    L = sum(np.linalg.eigvalsh(Pi).max() for Pi in P) + 1.0
    assert res.setup.plan.step_size == pytest.approx(0.1 / L)


def test_mala_targets_exact_posterior(problem):
    _, _, P, m = problem
    res = _run(problem, "mala")
    post = exact.gaussian_posterior(P, m, P0, M0)
    assert_moments(res.draws, *post)
    # Sensitivity: the check would see an unadjusted chain's bias (ULA's law at step 1/L).
    L = sum(np.linalg.eigvalsh(Pi).max() for Pi in P) + 1.0
    _assert_sensitive(res, post, ula_law(P, m, 1.0 / L))


def test_mala_reverse_density_uses_gradient_at_proposal(problem):
    """One accept/reject by hand: log α must use ∇U(θ') in q(θ | θ'); the buggy (old-gradient) ratio differs."""
    from raysampler.algorithms.gradient import MALA, MALAState, ValueGradReply

    _, model, P, m = problem
    Lam = P0 + sum(P)
    b_vec = sum(Pi @ mi for Pi, mi in zip(P, m))
    U = lambda x: 0.5 * np.einsum("ki,ij,kj->k", x, Lam, x) - x @ b_vec
    G = lambda x: x @ Lam - b_vec
    theta = np.array([[0.3, -0.2], [1.0, 1.0]])
    h = 0.05
    state = MALAState(
        theta,
        U(theta),
        G(theta),
        np.array([[0.5, -1.0], [0.2, 0.3]]),
        np.log(h),
        np.log(h),
        (0, 0.0, np.log(h)),
        False,
        0.574,
        rs.priors.GaussianPrior(np.zeros(2), np.zeros(2)),
        np.ones(2),
    )
    info = RoundInfo(100, False)
    alg = MALA(adapt=False)
    prop = alg.messages(state, np.ones(1, dtype=int), info)[0].theta
    np.testing.assert_allclose(prop, theta - h * G(theta) + np.sqrt(2 * h) * state.xi)

    class FixedNoise:
        def uniform(self, n):
            return np.full((n, 2), 1e-300)  # log u ≈ −690: always accept, α recorded

        def normal(self, n):
            return np.zeros((n, 2, 2))

    new, draws = alg.coordinator_step(state, [ValueGradReply(U(prop), G(prop))], FixedNoise(), info)
    fwd = prop - theta + h * G(theta)
    right = -(U(prop) - U(theta)) + (np.sum(fwd**2, 1) - np.sum((theta - prop + h * G(prop)) ** 2, 1)) / (4 * h)
    buggy = -(U(prop) - U(theta)) + (np.sum(fwd**2, 1) - np.sum((theta - prop + h * G(theta)) ** 2, 1)) / (4 * h)
    np.testing.assert_allclose(new.accept, np.exp(np.minimum(right, 0)))
    assert not np.allclose(np.exp(np.minimum(buggy, 0)), new.accept)
    np.testing.assert_allclose(draws, prop)
    np.testing.assert_allclose(new.grad, G(prop))


def test_dsgld_ring_matches_lyapunov_law(problem):
    _, _, P, m = problem
    W = topo.metropolis_weights(topo.make_topology("ring", B))
    eta = 0.1
    res = _run(problem, "dsgld", step_size=eta, topology="ring")
    law = dsgld_law(P, m, eta, W)
    assert_moments(res.draws, *law)
    _assert_sensitive(res, law, dsgld_law(P, m, eta / 10, W))


def test_dsghmc_ring_matches_lyapunov_law(problem):
    _, _, P, m = problem
    W = topo.metropolis_weights(topo.make_topology("ring", B))
    eta, gam = 0.3, 1.0
    res = _run(problem, "dsghmc", step_size=eta, friction=gam, topology="ring")
    law = dsghmc_law(P, m, eta, gam, W)
    assert_moments(res.draws, *law)
    _assert_sensitive(res, law, dsghmc_law(P, m, eta / 4, gam, W))


def test_dula_constant_steps_matches_lyapunov_law(problem):
    _, _, P, m = problem
    L = topo.make_topology("ring", B).laplacian()
    alpha, beta = 0.02, 0.3
    res = _run(problem, "dula", alpha0=alpha, beta0=beta, delta1=0.0, delta2=0.0, topology="ring")
    law = dula_law(P, m, alpha, beta, L)
    assert_moments(res.draws, *law)
    _assert_sensitive(res, law, dula_law(P, m, alpha / 4, beta, L))
    with pytest.raises(AssertionError):  # the noise √(2α)ξ (no factor b) is rejected
        assert_moments(res.draws, *dula_law(P, m, alpha, beta, L, noise_var=2 * alpha))


def test_agent_average_targets_posterior_exact_laws(problem):
    """No sampling. The agent average of D-SGLD, D-SGHMC and D-ULA (noise N(0, b I)) has the posterior as its
    small-step limit (its covariance ratio → 1 with the step); a single agent's iterate is over-dispersed by the
    disagreement; D-ULA with noise √(2α)ξ (no factor b) would give the average ≈ 1/b of the posterior."""
    _, _, P, m = problem
    post = exact.gaussian_posterior(P, m, P0, M0)
    top = topo.make_topology("ring", B)
    W, L = topo.metropolis_weights(top), top.laplacian()
    Lmax = max(np.linalg.eigvalsh(Pi).max() for Pi in P)
    for scale in (0.1, 0.02):
        eta = scale / Lmax
        for law in (dsgld_law(P, m, eta, W), dsghmc_law(P, m, eta, 1.0, W), dula_law(P, m, eta / B, 0.2, L)):
            r = _ratio(law[1], post[1])
            assert np.all(np.abs(r - 1) < 5 * scale), (scale, r)
            np.testing.assert_allclose(law[0], post[0], atol=0.05 * np.sqrt(np.diag(post[1])).min())
    eta = 0.02 / Lmax
    assert _ratio(dula_law(P, m, eta / B, 0.2, L, agents=True)[1], post[1]).max() > 1.05  # agent: too wide
    assert _ratio(dsgld_law(P, m, eta, W)[1], post[1]).max() < 1.02
    wrong = dula_law(P, m, eta / B, 0.2, L, noise_var=2 * eta / B)  # 2α instead of 2αb
    np.testing.assert_allclose(_ratio(wrong[1], post[1]), 1 / B, rtol=0.03)


def test_dula_schedule():
    """The paper's schedule under the plain rules; explicit constants as given."""
    paper = get_algorithm("dula").schedule(tuned=False)
    assert (paper["alpha0"], paper["beta0"], paper["b1"], paper["b2"]) == (8.2e-4, 0.48, 230.0, 230.0)
    alg = get_algorithm("dula")
    assert alg.alpha(10) == pytest.approx(8.2e-4 / 240 ** paper["delta2"])
    assert alg.beta(10) == pytest.approx(0.48 / 240 ** paper["delta1"])
    const = get_algorithm("dula", alpha0=0.01, beta0=0.2, delta1=0.0, delta2=0.0)
    assert const.alpha(500) == 0.01 and const.beta(500) == 0.2
    assert get_algorithm("dula", alpha0=0.01).schedule(tuned=True)["delta2"] == 0.0  # tuned: constant steps


# --- topology and routing -----------------------------------------------------------------------------------


@pytest.mark.parametrize("spec", ["complete", "ring", "star", "edgeless", [(0, 1), (1, 2), (3, 1), (1, 0)]])
def test_metropolis_weights(spec):
    top = topo.make_topology(spec, 5)
    W = topo.metropolis_weights(top)
    np.testing.assert_allclose(W, W.T)
    np.testing.assert_allclose(W.sum(axis=0), 1.0)
    np.testing.assert_allclose(W.sum(axis=1), 1.0)
    assert np.all(W >= 0)
    adj = np.zeros((5, 5), dtype=bool)
    for i, j in top.edges:
        adj[i, j] = adj[j, i] = True
    off = ~adj & ~np.eye(5, dtype=bool)
    assert np.all(W[off] == 0)
    for i, j in top.edges:
        assert W[i, j] == pytest.approx(1 / (1 + max(len(top.neighbours[i]), len(top.neighbours[j]))))
    for i in range(5):
        assert list(top.neighbours[i]) == sorted(top.neighbours[i]) and i not in top.neighbours[i]


def test_topology_shapes():
    assert topo.make_topology("ring", 5).neighbours[0] == (1, 4)
    assert topo.make_topology("star", 4).neighbours == ((1, 2, 3), (0,), (0,), (0,))
    assert topo.make_topology("complete", 3).edges == ((0, 1), (0, 2), (1, 2))
    assert topo.make_topology("edgeless", 3).edges == ()
    assert topo.make_topology([(2, 0), (0, 2)], 3).edges == ((0, 2),)


@pytest.mark.parametrize("spec", [[(0, 5)], [(1, 1)], [(0, -1)], "grid", [(0, 1, 2)], 3])
def test_bad_topology_names_topology(spec):
    with pytest.raises(ValueError, match="topology"):
        topo.make_topology(spec, 5)


def test_routing_only_neighbours():
    """On a ring of 5, worker i's message holds exactly x_{i−1}, x_{i+1} (by identity), nothing else."""
    top = topo.make_topology("ring", 5)
    xs = tuple(np.full((2, 2), float(i)) for i in range(5))
    alg = get_algorithm("dsgld", step_size=0.1, topology="ring")
    msgs = alg.messages(GraphState(top, xs), np.ones(5, dtype=int), RoundInfo(0, True))
    for i, msg in enumerate(msgs):
        expected = tuple(sorted({(i - 1) % 5, (i + 1) % 5}))
        assert msg.neighbours == expected
        assert len(msg.values) == 2
        assert all(v is xs[j] for v, j in zip(msg.values, expected))
        assert {float(v[0, 0]) for v in msg.values} == set(map(float, expected))
    for i, (ids, vals) in enumerate(topo.route(top, xs)):
        assert ids == top.neighbours[i] and len(vals) == len(ids)
    edgeless = topo.route(topo.make_topology("edgeless", 5), xs)
    assert all(ids == () and vals == () for ids, vals in edgeless)


# --- registry, params, executors ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name,params,bad",
    [
        ("ula", {"step_size": -1.0}, "step_size"),
        ("ula", {"init": "middle"}, "init"),
        ("mala", {"step_size": 0.0}, "step_size"),
        ("mala", {"target_accept": 1.5}, "target_accept"),
        ("dsgld", {"step_size": float("nan")}, "step_size"),
        ("dsgld", {"step_size": 0.1, "topology": "grid"}, "topology"),
        ("dsghmc", {"step_size": 0.1, "friction": 0.0}, "friction"),
        ("dsghmc", {"step_size": True}, "step_size"),
        ("dula", {"alpha0": -1.0}, "alpha0"),
        ("dula", {"beta0": 0.0}, "beta0"),
        ("dula", {"delta1": -0.5}, "delta1"),
        ("dula", {"b2": "x"}, "b2"),
        ("dsgld", {"step_size": 0.1, "batch_size": 0}, "batch_size"),
        ("dsghmc", {"step_size": 0.1, "batch_size": 2.5}, "batch_size"),
    ],
)
def test_bad_params_name_the_parameter(name, params, bad):
    with pytest.raises(ValueError, match=bad):
        get_algorithm(name, **params)


def test_dula_beta_times_degree_checked(problem):
    shards, model, _, _ = problem
    with pytest.raises(ValueError, match="beta0"):
        rs.sample(
            model,
            shards,
            "dula",
            beta0=0.3,
            delta1=0.0,
            topology="complete",
            chains=2,
            num_rounds=5,
            executor="local",
            progress=False,
            preconditioner=None,
        )  # 0.3 · 4 ≥ 1


def test_bad_explicit_topology_at_run(problem):
    shards, model, _, _ = problem
    with pytest.raises(ValueError, match="topology"):
        rs.sample(
            model,
            shards,
            "dsgld",
            step_size=0.01,
            topology=[(0, 7)],
            chains=2,
            num_rounds=5,
            executor="local",
            progress=False,
            preconditioner=None,
        )


def test_local_and_ray_draws_identical(problem, ray_session):
    shards, model, _, _ = problem
    kw = dict(
        chains=3, num_rounds=20, burn_in=5, seed=4, progress=False, preconditioner=None, step_size=0.02, topology="ring"
    )
    local = rs.sample(model, shards, "dsgld", executor="local", **kw)
    ray = rs.sample(model, shards, "dsgld", executor="ray", **kw)
    np.testing.assert_array_equal(local.draws, ray.draws)


def test_minibatch_gradient_unbiased_and_deterministic(problem):
    """batch_size: (n_i/B)Σ∇ℓ_r over B rows drawn from the worker's uniform stream is unbiased for ∇U_i."""
    from raysampler.algorithms.decentralized import local_gradient
    from raysampler.streams import ChainNoise

    shards, model, P, m = problem
    rng = np.random.default_rng(3)
    ys = rng.normal(size=(12, 2))
    bound = model.bind(rs.models.DataSpec(n_features=2))
    X, x = np.zeros((12, 0)), np.array([[0.3, -0.4], [1.0, 2.0]])
    full = bound.grad(X, ys, x)
    noise = ChainNoise(0, 2, role=1, dim=2)
    est = np.stack([local_gradient(bound, X, ys, x, 3, noise) for _ in range(4000)])
    se = est.std(axis=0) / np.sqrt(len(est))
    assert np.all(np.abs(est.mean(axis=0) - full) < 4 * se)
    np.testing.assert_array_equal(local_gradient(bound, X, ys, x, 12, noise), full)  # n_i ≤ B: exact
    kw = dict(
        chains=2,
        num_rounds=30,
        burn_in=5,
        seed=1,
        executor="local",
        progress=False,
        preconditioner=None,
        step_size=0.02,
        topology="ring",
        batch_size=2,
    )
    a, b = rs.sample(model, shards, "dsgld", **kw), rs.sample(model, shards, "dsgld", **kw)
    np.testing.assert_array_equal(a.draws, b.draws)
    assert np.all(np.isfinite(a.draws))
