"""D-ADMMS and ADMM ([D-ADMMS], Algorithm 1; docs/algorithms.md) against exact answers.

Exact law. With quadratic U_i and the prior N(m0, P0⁻¹) split as U_prior/b, V_i(x) = ½xᵀA_i x − a_iᵀx + const,
A_i = P_i + P0/b, a_i = P_i m_i + P0 m0/b. The primal step's optimality condition
A_i x − a_i + p_i + 2ρ Σ_{j∈N_i}(x − (x_i + x_j)/2 + (√2/(2ρ))w_i) = 0 gives, with H_i = A_i + 2ρ n_i I,
    x_i' = H_i⁻¹(a_i − p_i + ρ n_i x_i + ρ Σ_{j∈N_i} x_j − √2 n_i w_i),
and the dual step uses the new x's: p' = p + ρ(L ⊗ I)x' (L the graph Laplacian). Stacked, with
Hinv = blkdiag(H_i⁻¹), K = ρ((D + Adj) ⊗ I), E = −√2 Hinv (D ⊗ I), L̃ = ρ(L ⊗ I):
    x' = Hinv K x − Hinv p + Hinv a + E w
    p' = L̃ Hinv K x + (I − L̃ Hinv) p + L̃ Hinv a + L̃ E w,
i.e. s' = F s + c + T E w with T = [I; L̃], Ω = T E Eᵀ Tᵀ. Above, the noise is the paper's s_i = (√2/(2ρ))w_i;
in general x_i' = H_i⁻¹(… − 2ρ n_i s_i) with s_i ~ N(0, C_i), so E = −Hinv·blkdiag(2ρ n_i C_i^{1/2}):
C_i = I/(2ρ²) ("paper"), 2γ_i I ("langevin"), 2γ_i I + γ_i² A_i ("curvature"), γ_i = 1/(2ρ n_i).
Why "curvature" is right for the average: summing the optimality conditions over i, Σ_i p_i = 0 and
Σ_i Σ_{j∈N_i} x_j = Σ_j n_j x_j, so Σ_i [A_i x_i' − a_i + 2ρ n_i (x_i' − x_i) + 2ρ n_i s_i] = 0. With equal A_i = A
and equal degrees n (identical shards, regular graph) this is closed in x̄: x̄' = (I + hΣA)⁻¹(x̄ + h a − (1/b)Σ_i s_i),
h = 1/(2ρ n b), the implicit-Euler (proximal) Langevin step for the posterior. Its stationary covariance S solves
S = (I + hΛ)⁻¹(S + C̄)(I + hΛ)⁻¹, Λ = bA, C̄ = Cov((1/b)Σ s_i); S = Λ⁻¹ iff C̄ = 2h I + h²Λ, i.e.
C_i = b(2h I + h² b A) = 2γ I + γ² A: the "curvature" scale, exact in this case. "langevin" (C̄ = 2h I) gives
S = Λ⁻¹(I + hΛ/2)⁻¹ → Λ⁻¹ as ρ → ∞; the paper's scale gives C̄ = I/(2ρ²b), i.e. n/(2ρ) times "langevin":
the covariance shrinks like 1/ρ and grows with the degree. Heterogeneous A_i couple x̄ to the disagreement, which
leaves a small bias (checked below). Σ_i p_i is conserved (1ᵀL = 0), so F has the
eigenvalue 1 on that direction and no stationary law in the full state; p starts at 0 and stays in
{Σ_i p_i = 0} = range(Q ⊗ I) (Q an orthonormal basis of 1^⊥), so the law is computed in the reduced state
(x, q), p = (Q ⊗ I)q, where the spectral radius is < 1 for the settings used here. Draws: x̄ = (1/b)Σ_i x_i.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg
from support.problems import SIGMA1, gaussian_problem
from support.stats_helpers import assert_moments, tolerance_scale

import raysampler as rs
from raysampler import topology as topo
from raysampler.algorithms import RoundInfo, get_algorithm
from raysampler.algorithms.dadmm import ADMM, DADMMS, PAPER_RHO, prox
from raysampler.algorithms.decentralized import GraphState
from raysampler.models.contract import DataSpec
from raysampler.testing import exact

SIZES = (3, 5, 4, 6)
B = len(SIZES)
P0, M0 = np.eye(2), np.zeros(2)
#: 40,000 draws. D-ADMMS's Newton steps (a d × d Hessian, solve and eigendecomposition per chain, batched over the
#: chains) cost in proportion to the chains: only fewer draws make the run cheaper. The exact-law test checks that
#: its tolerance still rejects the law of another noise scale, so a smaller run cannot make it pass a wrong sampler
CHAINS, ROUNDS, BURN = 64, 625, 300


@pytest.fixture(scope="module")
def problem():
    """Four shards of 2-D Gaussian observations, prior N(0, I): local precisions P_i = n_i Σ1⁻¹."""
    return gaussian_problem(SIZES, seed=11)


def noise_cov(noise, rho, n_i, A_i):
    """Covariance C_i of the primal step's noise s_i (raysampler.algorithms.dadmm)."""
    gamma = 1.0 / (2 * rho * n_i)
    eye = np.eye(A_i.shape[0])
    return {"paper": eye / (2 * rho**2), "langevin": 2 * gamma * eye, "curvature": 2 * gamma * eye + gamma**2 * A_i}[
        noise
    ]


def dadmms_law(P, m, rho, top, full_state=False, noise="paper", agents=False):
    """Exact stationary law of x̄ for D-ADMMS on quadratic V_i (see the module docstring).

    full_state=True skips the reduction to Σ_i p_i = 0 (for the test that it is needed). agents=True returns the
    law of the stacked x = (x_1, …, x_b) instead of x̄."""
    b, d = len(P), P[0].shape[0]
    eye = np.eye(d)
    deg = top.degrees.astype(float)
    adj = np.diag(deg) - top.laplacian()
    A = [P[i] + P0 / b for i in range(b)]
    Hinv = scipy.linalg.block_diag(*[np.linalg.inv(A[i] + 2 * rho * deg[i] * eye) for i in range(b)])
    a = np.concatenate([P[i] @ m[i] + P0 @ M0 / b for i in range(b)])
    K = rho * np.kron(np.diag(deg) + adj, eye)
    E = -Hinv @ scipy.linalg.block_diag(
        *[2 * rho * deg[i] * np.linalg.cholesky(noise_cov(noise, rho, deg[i], A[i])) for i in range(b)]
    )
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
    if agents:
        return mean[:n], cov[:n, :n]
    M = np.tile(eye, b) / b
    return M @ mean[:n], M @ cov[:n, :n] @ M.T


def _run(problem, algorithm, seed=0, chains=CHAINS, num_rounds=ROUNDS, burn_in=BURN, **params):
    shards, model = problem[:2]
    return rs.sample(
        model,
        shards,
        algorithm,
        chains=chains,
        num_rounds=num_rounds,
        burn_in=burn_in,
        seed=seed,
        executor="local",
        progress=False,
        preconditioner=None,
        init="zeros",
        **params,
    )


# --- exact laws ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec,rho,noise,other",
    [
        ("ring", 1.0, "curvature", "langevin"),
        ("complete", 2.0, "paper", "curvature"),
        ("ring", 2.0, "langevin", "curvature"),
    ],
)
def test_dadmms_matches_exact_law(problem, spec, rho, noise, other):
    _, _, P, m, _ = problem
    top = topo.make_topology(spec, B)
    law = dadmms_law(P, m, rho, top, noise=noise)
    params = {} if noise == "curvature" else {"noise": noise}  # the default is "curvature"
    res = _run(problem, "dadmms", rho=rho, topology=spec, **params)
    assert_moments(res.draws, *law)
    # sensitivity: the law with another noise scale is farther than the tolerance and the check rejects it
    alt = dadmms_law(P, m, rho, top, noise=other)
    tol = tolerance_scale(res.draws, law[1])
    assert np.max(np.abs(np.sqrt(np.diag(law[1])) - np.sqrt(np.diag(alt[1])))) > 1.5 * tol
    with pytest.raises(AssertionError):
        assert_moments(res.draws, *alt)


def _var_ratio(law, post):
    """Eigenvalues of post^{-1/2} cov post^{-1/2}: the agent average's covariance relative to the posterior's."""
    Li = np.linalg.inv(np.linalg.cholesky(post))
    return np.linalg.eigvalsh(Li @ law[1] @ Li.T)


def test_noise_scales_exact_laws_versus_rho(problem):
    """No sampling. The default ("curvature") agent average's covariance is the posterior's within 3% for ρ ≥ 1 and
    converges to it; "langevin" converges to it from below; the paper's scale shrinks like 1/ρ."""
    _, _, P, m, _ = problem
    post = exact.gaussian_posterior(P, m, P0, M0)
    rhos = (1.0, 5.0, 20.0, 100.0)
    for spec in ("complete", "ring"):
        top = topo.make_topology(spec, B)
        r = {
            nz: np.array([_var_ratio(dadmms_law(P, m, rho, top, noise=nz), post[1]) for rho in rhos])
            for nz in ("curvature", "langevin", "paper")
        }
        dev = np.abs(r["curvature"] - 1).max(axis=1)
        assert dev[0] < 0.04 and dev[-1] < 1e-3 and np.all(np.diff(dev) < 0)
        assert np.all(np.diff(r["langevin"].min(axis=1)) > 0) and r["langevin"].min(axis=1)[0] < 0.9
        assert np.all(r["langevin"] < 1) and np.abs(r["langevin"][-1] - 1).max() < 0.01
        assert r["paper"].max(axis=1)[-1] < 0.02 and np.all(np.diff(r["paper"].max(axis=1)) < 0)
        for rho in rhos:  # the mean is the posterior mean for every scale (ADMM's fixed point)
            np.testing.assert_allclose(dadmms_law(P, m, rho, top, noise="curvature")[0], post[0], atol=1e-10)


@pytest.mark.parametrize("spec", ["complete", "ring"])
def test_curvature_noise_exact_for_identical_shards(spec):
    """Identical local precisions on a regular graph: the average's stationary law is the posterior, exactly."""
    _, _, P, m, _ = gaussian_problem((4, 4, 4, 4), seed=3, centres=[(0.5, 1.0), (-1.0, 0.0), (0.0, 2.0), (1.0, 1.0)])
    post = exact.gaussian_posterior(P, m, P0, M0)
    top = topo.make_topology(spec, 4)
    for rho in (0.3, 1.0, 5.0):
        mean, cov = dadmms_law(P, m, rho, top, noise="curvature")
        np.testing.assert_allclose(mean, post[0], atol=1e-10)
        np.testing.assert_allclose(cov, post[1], rtol=1e-9, atol=1e-12)
    # the paper's scale is off by the factor n/(2ρ) at large ρ (here n = degree)
    rho = 50.0
    ratio = _var_ratio(dadmms_law(P, m, rho, top, noise="paper"), post[1])
    np.testing.assert_allclose(ratio, top.degrees[0] / (2 * rho), rtol=0.05)


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
    assert np.allclose(res.draws[0], res.draws[1])  # noise-free: the chains coincide


def test_edgeless_is_deterministic_local_maps(problem):
    shards, model, P, m, _ = problem
    res = _run(problem, "dadmms", chains=2, num_rounds=5, burn_in=2, topology="edgeless")
    local_maps = [np.linalg.solve(Pi + P0 / B, Pi @ mi + P0 @ M0 / B) for Pi, mi in zip(P, m)]
    np.testing.assert_allclose(res.draws, np.broadcast_to(np.mean(local_maps, axis=0), res.draws.shape), atol=1e-10)


# --- the proximal map ---------------------------------------------------------------------------------------


def test_prox_closed_form_gaussian_and_linear(problem):
    _, _, P, m, ys = problem
    model = rs.models.Gaussian(prior_scale=1.0, noise_cov=SIGMA1.tolist()).bind(DataSpec(n_features=2))
    prior = model.prior()
    v = np.array([[0.3, -1.0], [2.0, 0.5]])
    gamma = 0.07
    out = prox(model, np.zeros((len(ys[1]), 0)), ys[1], prior, B, v, gamma, x0=np.zeros_like(v), newton_steps=1)
    A = P[1] + np.diag(prior.precision) / B
    want = np.linalg.solve(A + np.eye(2) / gamma, (P[1] @ m[1] + prior.precision * prior.mean / B + v / gamma).T).T
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
    res = rs.sample(
        rs.models.LogisticRegression(),
        shards,
        "dadmms",
        chains=2,
        num_rounds=50,
        burn_in=10,
        executor="local",
        progress=False,
        preconditioner=None,
        topology="ring",
    )
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
    from raysampler.algorithms.dadmm import ADMMConsts
    from raysampler.algorithms.decentralized import AgentMessage, AgentPayload

    top = topo.make_topology("ring", 4)
    payload = AgentPayload(
        0, 4, top.neighbours[0], 0.0, np.zeros(2), np.zeros((1, 2)), None, "admm", ADMMConsts(PAPER_RHO, None)
    )
    state = alg.worker_init(payload, None, None, None)
    with pytest.raises(RuntimeError, match="neighbours"):
        alg.worker_step(state, AgentMessage(0, (1, 2), (np.zeros((1, 2)),) * 2), None, None, None, None)


def test_registry_and_defaults():
    a, o = get_algorithm("dadmms"), get_algorithm("admm")
    assert isinstance(a, DADMMS) and isinstance(o, ADMM)
    assert (a.rho, a.noise, a.topology, a.init, a.newton_steps) == (None, "curvature", "complete", "map", 5)
    assert o.rho == PAPER_RHO == 5.0  # rho=None: tuned (whitened) or the paper's 5
    assert a.noisy and not o.noisy


@pytest.mark.parametrize("bad", ["exact", 1.0, None])
def test_bad_noise_names_noise(bad):
    with pytest.raises(ValueError, match="noise"):
        get_algorithm("dadmms", noise=bad)


def test_curvature_noise_falls_back_to_langevin_in_high_dimension(problem, monkeypatch):
    from raysampler.algorithms import dadmm

    monkeypatch.setattr(dadmm, "DENSE_MAX", 1)
    res = _run(problem, "dadmms", chains=2, num_rounds=3, burn_in=0)
    assert res.setup.plan.noise == "langevin"
    monkeypatch.setattr(dadmm, "DENSE_MAX", 200)
    res = _run(problem, "dadmms", chains=2, num_rounds=3, burn_in=0)
    assert res.setup.plan.noise == "curvature"


@pytest.mark.parametrize("name", ["dadmms", "admm"])
@pytest.mark.parametrize(
    "params,bad",
    [
        ({"rho": 0.0}, "rho"),
        ({"rho": -1.0}, "rho"),
        ({"rho": float("nan")}, "rho"),
        ({"rho": True}, "rho"),
        ({"newton_steps": 0}, "newton_steps"),
        ({"newton_steps": 2.5}, "newton_steps"),
        ({"topology": "grid"}, "topology"),
        ({"topology": 3}, "topology"),
        ({"init": "middle"}, "init"),
        ({"noisy": False}, "noisy"),
    ],
)
def test_bad_params_name_the_parameter(name, params, bad):
    with pytest.raises(ValueError, match=bad):
        get_algorithm(name, **params)


def test_bad_explicit_topology_at_run(problem):
    with pytest.raises(ValueError, match="topology"):
        _run(problem, "dadmms", chains=2, num_rounds=5, burn_in=1, topology=[(0, 7)])


def test_local_and_ray_draws_identical(problem, ray_session):
    shards, model = problem[:2]
    kw = dict(chains=2, num_rounds=10, burn_in=3, seed=4, progress=False, preconditioner=None, topology="ring", rho=2.0)
    local = rs.sample(model, shards, "dadmms", executor="local", **kw)
    ray = rs.sample(model, shards, "dadmms", executor="ray", **kw)
    np.testing.assert_array_equal(local.draws, ray.draws)
