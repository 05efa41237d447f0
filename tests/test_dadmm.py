"""D-ADMMS and ADMM (seed 003, Algorithm 1; ALGORITHMS.md §4) against exact answers.

Exact law. With quadratic U_i and the prior N(m0, P0⁻¹) split as U_prior/b, V_i(x) = ½xᵀA_i x − a_iᵀx + const,
A_i = P_i + P0/b, a_i = P_i m_i + P0 m0/b. The primal step's optimality condition
A_i x − a_i + p_i + 2ρ Σ_{j∈N_i}(x − (x_i + x_j)/2 + (√2/(2ρ))w_i) = 0 gives, with H_i = A_i + 2ρ n_i I,
    x_i' = H_i⁻¹(a_i − p_i + ρ n_i x_i + ρ Σ_{j∈N_i} x_j − √2 n_i w_i),
and the dual step uses the new x's: p' = p + ρ(L ⊗ I)x' (L the graph Laplacian). Stacked, with
Hinv = blkdiag(H_i⁻¹), K = ρ((D + Adj) ⊗ I), E = −√2 Hinv (D ⊗ I), L̃ = ρ(L ⊗ I):
    x' = Hinv K x − Hinv p + Hinv a + E w
    p' = L̃ Hinv K x + (I − L̃ Hinv) p + L̃ Hinv a + L̃ E w,
i.e. s' = F s + c + T E w with T = [I; L̃], Ω = T E Eᵀ Tᵀ. Σ_i p_i is conserved (1ᵀL = 0), so F has the
eigenvalue 1 on that direction and no stationary law in the full state; p starts at 0 and stays in
{Σ_i p_i = 0} = range(Q ⊗ I) (Q an orthonormal basis of 1^⊥), so the law is computed in the reduced state
(x, q), p = (Q ⊗ I)q, where the spectral radius is < 1 for the settings used here. Draws: x̄ = (1/b)Σ_i x_i.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.linalg

import raysampler as rs
from raysampler import exact, topology as topo
from raysampler.algorithms import RoundInfo, get_algorithm
from raysampler.algorithms.dadmm import ADMM, DADMMS, prox
from raysampler.algorithms.decentralized import GraphState
from raysampler.models.base import DataSpec
from problems import SIGMA1, gaussian_problem
from stats_helpers import assert_moments, tolerance_scale

SIZES = (3, 5, 4, 6)
B = len(SIZES)
P0, M0 = np.eye(2), np.zeros(2)
CHAINS, ROUNDS, BURN = 16, 4000, 300


@pytest.fixture(scope="module")
def problem():
    """Four shards of 2-D Gaussian observations, prior N(0, I): local precisions P_i = n_i Σ1⁻¹."""
    return gaussian_problem(SIZES, seed=11)


def dadmms_law(P, m, rho, top, full_state=False):
    """Exact stationary law of x̄ for D-ADMMS on quadratic V_i (see the module docstring).

    full_state=True skips the reduction to Σ_i p_i = 0 (for the test that it is needed)."""
    b, d = len(P), P[0].shape[0]
    eye = np.eye(d)
    deg = top.degrees.astype(float)
    adj = np.diag(deg) - top.laplacian()
    Hinv = scipy.linalg.block_diag(*[np.linalg.inv(P[i] + P0 / b + 2 * rho * deg[i] * eye) for i in range(b)])
    a = np.concatenate([P[i] @ m[i] + P0 @ M0 / b for i in range(b)])
    K = rho * np.kron(np.diag(deg) + adj, eye)
    E = -math.sqrt(2.0) * Hinv @ np.kron(np.diag(deg), eye)
    Lt = rho * np.kron(top.laplacian(), eye)
    n = b * d
    F = np.block([[Hinv @ K, -Hinv], [Lt @ Hinv @ K, np.eye(n) - Lt @ Hinv]])
    c = np.concatenate([Hinv @ a, Lt @ Hinv @ a])
    T = np.vstack([np.eye(n), Lt])
    Om = T @ E @ E.T @ T.T
    R = scipy.linalg.block_diag(np.eye(n), np.kron(scipy.linalg.null_space(np.ones((1, b))), eye))
    if full_state:
        R = np.eye(2 * n)
    mean, cov = exact.stationary_law(R.T @ F @ R, R.T @ c, R.T @ Om @ R)
    M = np.tile(eye, b) / b
    return M @ mean[:n], M @ cov[:n, :n] @ M.T


def _run(problem, algorithm, seed=0, chains=CHAINS, num_rounds=ROUNDS, burn_in=BURN, **params):
    shards, model = problem[:2]
    return rs.sample(model, shards, algorithm, chains=chains, num_rounds=num_rounds, burn_in=burn_in, seed=seed,
                     executor="local", progress=False, init="zeros", **params)


# --- exact laws ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("spec,rho,other", [("ring", 1.0, 2.0), ("complete", 2.0, 1.0)])
def test_dadmms_matches_exact_law(problem, spec, rho, other):
    _, _, P, m, _ = problem
    top = topo.make_topology(spec, B)
    law = dadmms_law(P, m, rho, top)
    res = _run(problem, "dadmms", rho=rho, topology=spec)
    assert_moments(res.draws, *law)
    # sensitivity: the law at another ρ is farther than the tolerance and the check rejects it
    alt = dadmms_law(P, m, other, top)
    tol = tolerance_scale(res.draws, law[1])
    assert np.max(np.abs(np.sqrt(np.diag(law[1])) - np.sqrt(np.diag(alt[1])))) > 1.5 * tol
    with pytest.raises(AssertionError):
        assert_moments(res.draws, *alt)


def test_dadmms_full_state_has_no_stationary_law(problem):
    """Without the reduction to Σ_i p_i = 0, F has the eigenvalue 1 (the conserved dual sum): no stationary law."""
    _, _, P, m, _ = problem
    with pytest.raises(ValueError, match="unstable"):
        dadmms_law(P, m, 1.0, topo.make_topology("ring", B), full_state=True)


def test_admm_converges_to_map_on_ring(problem):
    _, _, P, m, _ = problem
    post_mean, _ = exact.gaussian_posterior(P, m, P0, M0)
    res = _run(problem, "admm", chains=2, num_rounds=5, burn_in=400, rho=1.0, topology="ring")
    np.testing.assert_allclose(res.draws[:, -1], np.broadcast_to(post_mean, (2, 2)), atol=1e-8)
    assert np.allclose(res.draws[0], res.draws[1])          # noise-free: the chains coincide


def test_edgeless_is_deterministic_local_maps(problem):
    shards, model, P, m, _ = problem
    res = _run(problem, "dadmms", chains=2, num_rounds=5, burn_in=2, topology="edgeless")
    local_maps = [np.linalg.solve(Pi + P0 / B, Pi @ mi + P0 @ M0 / B) for Pi, mi in zip(P, m)]
    np.testing.assert_allclose(res.draws, np.broadcast_to(np.mean(local_maps, axis=0), res.draws.shape),
                               atol=1e-10)


# --- the proximal map ---------------------------------------------------------------------------------------

def test_prox_closed_form_gaussian_and_linear(problem):
    _, _, P, m, ys = problem
    model = rs.models.Gaussian(prior_scale=1.0, noise_cov=SIGMA1.tolist()).bind(DataSpec(n_features=2))
    prior = model.prior()
    v = np.array([[0.3, -1.0], [2.0, 0.5]])
    gamma = 0.07
    out = prox(model, np.zeros((len(ys[1]), 0)), ys[1], prior, B, v, gamma, x0=np.zeros_like(v), newton_steps=1)
    A = P[1] + np.diag(prior.precision) / B
    want = np.linalg.solve(A + np.eye(2) / gamma, (P[1] @ m[1] + prior.precision * prior.mean / B
                                                   + v / gamma).T).T
    np.testing.assert_allclose(out, want, rtol=1e-10, atol=1e-12)

    rng = np.random.default_rng(2)
    X, beta = rng.normal(size=(30, 3)), np.array([1.0, -2.0, 0.5])
    y = X @ beta + 0.3 * rng.normal(size=30)
    lin = rs.models.LinearRegression(noise_sd=0.3).bind(DataSpec(n_features=3))
    lp = lin.prior()
    v = rng.normal(size=(3, lin.dim))
    out = prox(lin, X, y, lp, 4, v, 0.5, x0=rng.normal(size=v.shape), newton_steps=1)
    H = lin.hessian(X, y, np.zeros(lin.dim)) + np.diag(lp.precision) / 4 + 2.0 * np.eye(lin.dim)
    rhs = -lin.grad(X, y, np.zeros((1, lin.dim)))[0] + lp.precision * lp.mean / 4
    want = np.linalg.solve(H, (rhs[:, None] + v.T / 0.5)).T
    np.testing.assert_allclose(out, want, rtol=1e-9, atol=1e-10)


def test_prox_logistic_optimality():
    rng = np.random.default_rng(5)
    X = rng.normal(size=(60, 4))
    y = (rng.random(60) < 1 / (1 + np.exp(-X @ np.array([1.5, -1.0, 0.5, 2.0])))).astype(float)
    model = rs.models.LogisticRegression().bind(DataSpec(n_features=4))
    prior = model.prior()
    v = 2.0 * rng.normal(size=(3, model.dim))
    gamma = 0.3
    x = prox(model, X, y, prior, 3, v, gamma, newton_steps=8)
    g = model.grad(X, y, x) + prior.grad(x) / 3 + (x - v) / gamma
    assert np.max(np.abs(g)) < 1e-8
    # the CG path (large d) agrees with the dense one
    from raysampler.algorithms import dadmm
    old = dadmm.DENSE_MAX
    try:
        dadmm.DENSE_MAX = 0
        x_cg = prox(model, X, y, prior, 3, v, gamma, newton_steps=8)
    finally:
        dadmm.DENSE_MAX = old
    np.testing.assert_allclose(x_cg, x, atol=1e-8)


def test_dadmms_runs_on_logistic():
    rng = np.random.default_rng(6)
    X = rng.normal(size=(80, 3))
    y = (rng.random(80) < 1 / (1 + np.exp(-X @ np.array([1.0, -1.0, 0.5])))).astype(float)
    shards = rs.shard(X, y, num_shards=4)
    res = rs.sample(rs.models.LogisticRegression(), shards, "dadmms", chains=2, num_rounds=50, burn_in=10,
                    executor="local", progress=False, topology="ring")
    assert np.all(np.isfinite(res.draws))


# --- routing, params, executors -----------------------------------------------------------------------------

def test_routing_only_neighbours():
    top = topo.make_topology("ring", 5)
    xs = tuple(np.full((2, 2), float(i)) for i in range(5))
    alg = get_algorithm("dadmms", topology="ring")
    msgs = alg.messages(GraphState(top, xs), np.ones(5, dtype=int), RoundInfo(0, True))
    for i, msg in enumerate(msgs):
        expected = tuple(sorted({(i - 1) % 5, (i + 1) % 5}))
        assert msg.neighbours == expected and len(msg.values) == 2
        assert all(v is xs[j] for v, j in zip(msg.values, expected))


def test_worker_rejects_non_neighbour_values(problem):
    shards, model = problem[:2]
    alg = get_algorithm("admm", topology="ring")
    from raysampler.algorithms.decentralized import AgentMessage, AgentPayload
    top = topo.make_topology("ring", 4)
    payload = AgentPayload(0, 4, top.neighbours[0], 0.0, np.zeros(2), np.zeros((1, 2)), None, "admm", {})
    state = alg.worker_init(payload, None, None, None)
    with pytest.raises(RuntimeError, match="neighbours"):
        alg.worker_step(state, AgentMessage(0, (1, 2), (np.zeros((1, 2)),) * 2), None, None, None, None)


def test_registry_and_defaults():
    a, o = get_algorithm("dadmms"), get_algorithm("admm")
    assert isinstance(a, DADMMS) and isinstance(o, ADMM)
    assert (a.rho, a.topology, a.init, a.newton_steps) == (5.0, "complete", "map", 5)
    assert a.noisy and not o.noisy


@pytest.mark.parametrize("name", ["dadmms", "admm"])
@pytest.mark.parametrize("params,bad", [
    ({"rho": 0.0}, "rho"), ({"rho": -1.0}, "rho"), ({"rho": float("nan")}, "rho"), ({"rho": True}, "rho"),
    ({"newton_steps": 0}, "newton_steps"), ({"newton_steps": 2.5}, "newton_steps"),
    ({"topology": "grid"}, "topology"), ({"topology": 3}, "topology"), ({"init": "middle"}, "init"),
    ({"noisy": False}, "noisy"),
])
def test_bad_params_name_the_parameter(name, params, bad):
    with pytest.raises(ValueError, match=bad):
        get_algorithm(name, **params)


def test_bad_explicit_topology_at_run(problem):
    with pytest.raises(ValueError, match="topology"):
        _run(problem, "dadmms", chains=2, num_rounds=5, burn_in=1, topology=[(0, 7)])


def test_local_and_ray_draws_identical(problem, ray_session):
    shards, model = problem[:2]
    kw = dict(chains=2, num_rounds=10, burn_in=3, seed=4, progress=False, topology="ring", rho=2.0)
    local = rs.sample(model, shards, "dadmms", executor="local", **kw)
    ray = rs.sample(model, shards, "dadmms", executor="ray", **kw)
    np.testing.assert_array_equal(local.draws, ray.draws)
