"""D-MALA (decentralised MALA with gradient tracking; raysampler/algorithms/dmala.py) against exact answers.

ΔH checks. (i) correctness demands it: on U(x) = ½xᵀAx the seed's Euler step p* = p − εAx, x* = x + εp*
gives exactly ΔH = ½ε²(p*ᵀAp* − ‖Ax‖²) = ½ε²(pᵀAp − ‖Ax‖²) + O(ε³), so ½ε²(ℵ − ‖g‖²) is second-order accurate
(error ÷8 per halving of ε) while the paper's printed −½ε²(ℵ + ‖g‖²) is not (÷4). (ii) For the leapfrog step that
replaces it, ΔH itself is O(ε³): a second-order Taylor test would accept every proposal, hence the exact test.

Exact laws (tolerances: 4 MCSE from the ESS, stats_helpers).
 * One agent, or the complete graph (W = 11ᵀ/b): the rule is exactly MALA on U (h = ε²/2): draws match the
   posterior. The seed's rule (Euler step, independent momenta) has a different, closed-form law: the same
   tolerance rejects it (sensitivity check).
 * MH off, constant k, quadratic V_i(x) = ½xᵀA_i x − a_iᵀx: with g = Ax − a (A = blkdiag A_i), Wk = W^k ⊗ I and
   the tracking deviation δ = y − g(ω) (Σ_i δ_i = 0 is conserved, δ = (Q ⊗ I)e, Q an orthonormal basis of 1^⊥):
       ω' = Wk(ω + ε 1⊗p − ½ε² b (δ + Aω − a)),   δ' = Wk δ + (Wk − I)(Aω' − a),
   an affine recursion with noise ε(1⊗p), whose stationary law is exact.stationary_law.
 * 5-agent ring, k = 10 (λ₂(W)^10 ≈ 2e-3): posterior mean and covariance within 4 MCSE, and both sds within 3%.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg
from support.problems import InProcessPool, gaussian_problem
from support.stats_helpers import assert_moments

import raysampler as rs
from raysampler import topology as topo
from raysampler.algorithms import RoundInfo, get_algorithm
from raysampler.algorithms.decentralized import AgentPayload
from raysampler.algorithms.dmala import (
    DEFAULT_SCHEDULE,
    DMALA,
    PAPER_MH_BURN_IN,
    DMALAConsts,
    DMALAMessage,
    DMALAReply,
    DMALAState,
    StepAdaptation,
    mixing_rounds,
    mixing_rounds_for,
    routed_mix,
)
from raysampler.algorithms.mcmc import DualAveraging
from raysampler.testing import exact

#: the constants an agent's payload carries (a D-MALA worker reads none of them)
CONSTS = DMALAConsts(0.1, False, 0.574, 0, DEFAULT_SCHEDULE)
#: chains of the exact-law runs: an in-process round costs about the same for 8 or 32 chains (one vectorised step),
#: so each run takes a quarter of the rounds it had with 8 chains for the same number of draws
CHAINS = 32


# --- ΔH ------------------------------------------------------------------------------------------------------


def _dH(A, x, p, eps):
    ps = p - eps * A @ x
    xs = x + eps * ps
    exact_ = 0.5 * xs @ A @ xs + 0.5 * ps @ ps - 0.5 * x @ A @ x - 0.5 * p @ p
    aleph, g2 = p @ A @ p, np.sum((A @ x) ** 2)
    return exact_, 0.5 * eps**2 * (aleph - g2), -0.5 * eps**2 * (aleph + g2)


def test_delta_h_is_second_order_and_paper_sign_is_not():
    """exact ΔH − ½ε²(ℵ − ‖Ax‖²) = O(ε³): error ratio ≈ 8 per halving; the paper's −½ε²(ℵ + ‖g‖²): ratio ≈ 4."""
    rng = np.random.default_rng(0)
    M = rng.standard_normal((3, 3))
    A = M @ M.T + np.eye(3)
    x, p = rng.standard_normal(3), rng.standard_normal(3)
    errs, errs_paper = [], []
    for eps in (0.04, 0.02, 0.01, 0.005):
        ex, ours, paper = _dH(A, x, p, eps)
        errs.append(abs(ex - ours))
        errs_paper.append(abs(ex - paper))
    for r in np.array(errs[:-1]) / np.array(errs[1:]):
        assert 7.0 < r < 9.0
    for r in np.array(errs_paper[:-1]) / np.array(errs_paper[1:]):
        assert 3.5 < r < 4.5
    assert errs_paper[-1] > 100 * errs[-1]


def _leapfrog_dH(A, x, p, eps):
    ph = p - 0.5 * eps * A @ x
    xs = x + eps * ph
    ps = ph - 0.5 * eps * A @ xs
    return 0.5 * xs @ A @ xs + 0.5 * ps @ ps - 0.5 * x @ A @ x - 0.5 * p @ p


def test_leapfrog_delta_h_is_third_order():
    """Leapfrog: ΔH = O(ε³) (÷8 per halving): its second-order Taylor expansion is identically 0."""
    rng = np.random.default_rng(1)
    M = rng.standard_normal((3, 3))
    A = M @ M.T + np.eye(3)
    x, p = rng.standard_normal(3), rng.standard_normal(3)
    vals = [abs(_leapfrog_dH(A, x, p, eps)) for eps in (0.04, 0.02, 0.01, 0.005)]
    for r in np.array(vals[:-1]) / np.array(vals[1:]):
        assert 7.0 < r < 9.0


# --- helpers -------------------------------------------------------------------------------------------------


def _quadratic(model, shards, b):
    """A_i, a_i of V_i = U_i + U_prior/b (quadratic models): A_i = ∇²V_i, a_i = −∇V_i(0)."""
    prior = model.prior()
    d = prior.mean.shape[0]
    As, as_ = [], []
    for X, y in shards:
        z = np.zeros((1, d))
        As.append(model.hessian(X, y, z[0]) + np.diag(prior.precision) / b)
        as_.append(-(model.grad(X, y, z) + prior.grad(z) / b)[0])
    return As, as_


def _avg(law, b, d):
    mean, cov = law
    n = mean.shape[0]
    M = np.zeros((d, n))
    M[:, : b * d] = np.tile(np.eye(d), b) / b
    return M @ mean, M @ cov @ M.T


def dmala_law(As, as_, W, eps, k):
    """Exact stationary law of ω̄ for this module's rule with MH off and constant k (module docstring)."""
    b, d = len(As), As[0].shape[0]
    A, a = scipy.linalg.block_diag(*As), np.concatenate(as_)
    n = b * d
    I = np.eye(n)
    Wk = np.kron(np.linalg.matrix_power(W, k), np.eye(d))
    Q = np.kron(scipy.linalg.null_space(np.ones((1, b))), np.eye(d))
    h = 0.5 * eps**2 * b
    Fw, Fwe, cw = Wk @ (I - h * A), -h * Wk @ Q, h * Wk @ a
    Bw = eps * np.kron(np.ones((b, 1)), np.eye(d))
    R = Q.T @ (Wk - I) @ A
    F = np.block([[Fw, Fwe], [R @ Fw, Q.T @ Wk @ Q + R @ Fwe]])
    c = np.concatenate([cw, R @ cw - Q.T @ (Wk - I) @ a])
    B = np.vstack([Bw, R @ Bw])
    return _avg(exact.stationary_law(F, c, B @ B.T), b, d)


def euler_law(As, as_, W, eps, k):
    """The seed's rule (Algorithm 1 as published: Euler step, independent momenta, consensus after the
    move), MH off — its MH barely rejects (O(ε²)) and cannot fix the law anyway: the sensitivity yardstick."""
    b, d = len(As), As[0].shape[0]
    A, a = scipy.linalg.block_diag(*As), np.concatenate(as_)
    n = b * d
    I = np.eye(n)
    Wk = np.kron(np.linalg.matrix_power(W, k), np.eye(d))
    Q = np.kron(scipy.linalg.null_space(np.ones((1, b))), np.eye(d))
    Mee, Mew, ce = Q.T @ Wk @ Q, Q.T @ (Wk - I) @ A, -Q.T @ (Wk - I) @ a
    F = np.block([[Wk - eps**2 * b * Wk @ (Q @ Mew + A), -(eps**2) * b * Wk @ Q @ Mee], [Mew, Mee]])
    c = np.concatenate([-(eps**2) * b * Wk @ (Q @ ce - a), ce])
    Om = np.zeros((F.shape[0],) * 2)
    Om[:n, :n] = eps**2 * Wk @ Wk.T
    return _avg(exact.stationary_law(F, c, Om), b, d)


def _acceptance(draws):
    """Fraction of rounds whose draw moved (chains, draws, d): the acceptance rate with one agent or consensus."""
    return float(np.mean(np.any(np.diff(draws, axis=1) != 0, axis=-1)))


@pytest.fixture(scope="module")
def gauss1():
    shards, model, P, m, ys = gaussian_problem([6], 3)
    return shards, model, [(np.zeros((len(ys[0]), 0)), ys[0])]


@pytest.fixture(scope="module")
def linreg():
    """Linear regression d = 2, 5 shards of 6 rows, σ = 1, prior N(0, I)."""
    rng = np.random.default_rng(5)
    theta = np.array([0.7, -0.4])
    parts = []
    for _ in range(5):
        X = rng.standard_normal((6, 2))
        parts.append((X, X @ theta + rng.standard_normal(6)))
    model = rs.models.LinearRegression(prior_scale=1.0, noise_sd=1.0, n_features=2)
    return rs.shard(parts), model, parts


def _ring_W(b=5):
    return topo.metropolis_weights(topo.make_topology("ring", b))


# --- one agent: exactly MALA ---------------------------------------------------------------------------------


def test_one_agent_round_is_mala_with_exact_ratio(gauss1):
    """b = 1, by hand: proposal ω + εp − ½ε²∇U(ω), tracked y = ∇U, and the decision is MALA's exact log ratio
    log α = −ΔU + [‖ω* − ω + h∇U(ω)‖² − ‖ω − ω* + h∇U(ω*)‖²]/(4h), h = ε²/2."""
    shards, model, data = gauss1
    X, y = data[0]
    (A,), (a,) = _quadratic(model, data, 1)
    U = lambda x: 0.5 * np.einsum("kd,de,ke->k", x, A, x) - x @ a
    gradU = lambda x: x @ A - a
    eps, h = 0.4, 0.08
    x0 = np.array([[0.3, -0.2], [1.0, 0.5], [0.6, -0.5], [-0.4, 0.9]])
    alg = DMALA(
        step_size=eps, topology="edgeless", mh_burn_in=0, mixing_schedule=[(0, 3)], init=x0, preconditioner=None
    )
    plan = alg.prepare(model, InProcessPool(data, model), chains=4, seed=0, noise=rs.streams.ChainNoise(0, 4, 0, 2))
    st = plan.coordinator_state
    np.testing.assert_allclose(st.ys[0], gradU(x0), atol=1e-12)
    np.testing.assert_allclose(st.proposals[0], x0 + eps * st.p - h * gradU(x0), atol=1e-12)
    w = alg.worker_init(plan.worker_payloads[0], model, X, y)
    w, rep = alg.worker_step(w, alg.messages(st, np.ones(1, int), RoundInfo(0, False))[0], model, X, y, None)
    xs = st.proposals[0]
    np.testing.assert_allclose(rep.dv, U(xs) - U(x0), atol=1e-10)
    np.testing.assert_allclose(rep.dg, gradU(xs) - gradU(x0), atol=1e-10)
    noise = rs.streams.ChainNoise(9, 4, 0, 2)
    log_u = np.log(rs.streams.ChainNoise(9, 4, 0, 2).uniform(1)[0])
    new, draws = alg.coordinator_step(st, [rep], noise, RoundInfo(0, False))
    fwd, bwd = xs - x0 + h * gradU(x0), x0 - xs + h * gradU(xs)
    log_alpha = -(U(xs) - U(x0)) + (np.sum(fwd**2, 1) - np.sum(bwd**2, 1)) / (4 * h)
    np.testing.assert_array_equal(new.accepted[0], log_u <= log_alpha)
    assert 0 < new.accepted[0].sum() < 4  # both branches exercised
    np.testing.assert_allclose(draws, np.where((log_u <= log_alpha)[:, None], xs, x0))
    np.testing.assert_allclose(new.ys[0], gradU(draws), atol=1e-10)  # tracked gradient at the new point


def test_one_agent_exact_mh_samples_posterior_and_old_rule_is_rejected(gauss1):
    shards, model, data = gauss1
    eps = 0.5
    res = rs.sample(
        model,
        shards,
        "dmala",
        chains=CHAINS,
        num_rounds=750,
        burn_in=200,
        seed=1,
        executor="local",
        progress=False,
        preconditioner=None,
        step_size=eps,
        mh_burn_in=0,
        mixing_schedule=[(0, 1)],
        topology="edgeless",
    )
    post = model.posterior(data)
    assert_moments(res.draws, *post)
    assert 0.6 < _acceptance(res.draws) < 0.9  # measured 0.74
    old = euler_law(*_quadratic(model, data, 1), np.ones((1, 1)), eps / np.sqrt(2), 1)  # same h = ε²/2
    assert np.max(np.abs(np.diag(old[1]) / np.diag(post[1]) - 1)) > 0.25  # the seed's rule: 0.96, 0.68 …
    with pytest.raises(AssertionError):  # … which this tolerance detects
        assert_moments(res.draws, *old)


def test_one_agent_mh_off_matches_exact_ula_law(gauss1):
    shards, model, data = gauss1
    eps = 0.5
    res = rs.sample(
        model,
        shards,
        "dmala",
        chains=CHAINS,
        num_rounds=750,
        burn_in=200,
        seed=2,
        executor="local",
        progress=False,
        preconditioner=None,
        step_size=eps,
        mh_burn_in=10**9,
        mixing_schedule=[(0, 1)],
        topology="edgeless",
    )
    law = dmala_law(*_quadratic(model, data, 1), np.ones((1, 1)), eps, 1)
    assert_moments(res.draws, *law)
    np.testing.assert_allclose(law[0], model.posterior(data)[0], atol=1e-10)
    assert _acceptance(res.draws) == 1.0


# --- 5 agents, linear regression -----------------------------------------------------------------------------


def test_complete_graph_is_exact_mala(linreg):
    """Complete graph: Metropolis W = 11ᵀ/5, one round averages exactly: the posterior within 4 MCSE."""
    shards, model, parts = linreg
    res = rs.sample(
        model,
        shards,
        "dmala",
        chains=CHAINS,
        num_rounds=750,
        burn_in=300,
        seed=3,
        executor="local",
        progress=False,
        preconditioner=None,
        step_size=0.3,
        mh_burn_in=0,
        mixing_schedule=[(0, 1)],
        topology="complete",
    )
    assert_moments(res.draws, *model.posterior(parts))
    assert 0.4 < _acceptance(res.draws) < 0.7  # measured 0.52


def test_ring_close_to_posterior_and_old_rule_is_rejected(linreg):
    """5-ring, k = 10: mean and covariance within 4 MCSE, sds within 3% (measured ratio of variances 0.99).
    The seed's rule on the same ring (variance ≈ posterior/(2b)) is rejected by the same tolerance."""
    shards, model, parts = linreg
    eps, k = 0.3, 10
    res = rs.sample(
        model,
        shards,
        "dmala",
        chains=CHAINS,
        num_rounds=500,
        burn_in=300,
        seed=3,
        executor="local",
        progress=False,
        preconditioner=None,
        step_size=eps,
        mh_burn_in=0,
        mixing_schedule=[(0, k)],
        topology="ring",
    )
    mean, cov = model.posterior(parts)
    assert_moments(res.draws, mean, cov)
    sd = res.draws.reshape(-1, 2).std(axis=0)
    assert np.all(np.abs(sd / np.sqrt(np.diag(cov)) - 1) < 0.03), sd / np.sqrt(np.diag(cov))
    old = euler_law(*_quadratic(model, parts, 5), _ring_W(), eps / np.sqrt(2), k)  # same h
    assert np.all(np.diag(old[1]) / np.diag(cov) < 0.5)  # 0.42, 0.28 at this h (→ 1/(2b) as h → 0)
    with pytest.raises(AssertionError):
        assert_moments(res.draws, *old)


def test_ring_mh_off_matches_exact_law(linreg):
    shards, model, parts = linreg
    eps, k = 0.3, 2
    res = rs.sample(
        model,
        shards,
        "dmala",
        chains=CHAINS,
        num_rounds=625,
        burn_in=300,
        seed=4,
        executor="local",
        progress=False,
        preconditioner=None,
        step_size=eps,
        mh_burn_in=10**9,
        mixing_schedule=[(0, k)],
        topology="ring",
    )
    law = dmala_law(*_quadratic(model, parts, 5), _ring_W(), eps, k)
    assert_moments(res.draws, *law)


# --- tracking and routing ------------------------------------------------------------------------------------


def test_ring_tracking_converges_to_average_gradient():
    top = topo.make_topology("ring", 5)
    W = topo.metropolis_weights(top)
    rng = np.random.default_rng(0)
    g = [rng.standard_normal((2, 3)) for _ in range(5)]
    target = np.mean(g, axis=0)
    y = [np.zeros((2, 3)) for _ in range(5)]
    prev = [np.zeros((2, 3)) for _ in range(5)]
    errs = []
    for _ in range(150):
        y = routed_mix(top, W, [yi + gi - pi for yi, gi, pi in zip(y, g, prev)], 1)
        prev = g
        errs.append(max(np.linalg.norm(yi - target) for yi in y))
        np.testing.assert_allclose(np.mean(y, axis=0), target, atol=1e-12)  # the average is tracked exactly
    assert errs[10] < errs[0] and errs[-1] < 1e-10


def test_sampler_tracks_average_local_gradient_on_ring(linreg):
    """In a run on the 5-ring (k = 3) the tracked y_i follow (1/b) Σ_j ∇V_j(ω_j): exactly on average every round,
    and each y_i within 40% of the untracked error max_i |∇V_i(ω_i) − target| (the target moves every round)."""
    shards, model, parts = linreg
    data = [(X, y) for X, y in parts]
    alg = DMALA(
        step_size=0.3, topology="ring", mh_burn_in=0, mixing_schedule=[(0, 3)], init="zeros", preconditioner=None
    )
    pool = InProcessPool(data, model)
    noise = rs.streams.ChainNoise(0, 2, 0, 2)
    plan = alg.prepare(model, pool, chains=2, seed=0, noise=noise)
    st = plan.coordinator_state
    ws = [alg.worker_init(p, model, X, y) for p, (X, y) in zip(plan.worker_payloads, data)]
    prior = model.prior()
    for t in range(40):
        msgs = alg.messages(st, np.ones(5, int), RoundInfo(t, False))
        out = [alg.worker_step(w, m, model, X, y, None) for w, m, (X, y) in zip(ws, msgs, data)]
        ws = [o[0] for o in out]
        st, _ = alg.coordinator_step(st, [o[1] for o in out], noise, RoundInfo(t, False))
        local = [model.grad(X, y, w) + prior.grad(w) / 5 for (X, y), w in zip(data, st.omegas)]
        target = np.mean(local, axis=0)
        np.testing.assert_allclose(np.mean(st.ys, axis=0), target, atol=1e-10)
        err = max(np.abs(yi - target).max() for yi in st.ys)
        spread = max(np.abs(li - target).max() for li in local)  # error without tracking (y_i = local gradient)
        if t >= 5:
            assert err < 0.4 * spread, (t, err, spread)  # measured: max 0.22, mean 0.08


def test_routed_mix_uses_only_neighbours_and_equals_matrix_power(monkeypatch):
    top = topo.make_topology("ring", 5)
    W = topo.metropolis_weights(top)
    calls = []
    real = topo.route

    def spy(t, values):
        out = real(t, values)
        calls.append(out)
        return out

    monkeypatch.setattr(topo, "route", spy)
    vals = [np.full((1, 2), float(i)) for i in range(5)]
    out = routed_mix(top, W, vals, 3)
    assert len(calls) == 3
    for routed in calls:
        for i, (ids, _) in enumerate(routed):
            assert ids == top.neighbours[i] and i not in ids
    np.testing.assert_allclose(np.stack(out)[:, 0, :], np.linalg.matrix_power(W, 3) @ np.stack(vals)[:, 0, :])


def _state(b, K, d, rng, top_name="ring", eps=0.1, mh_burn_in=1000, schedule=DEFAULT_SCHEDULE):
    top = topo.make_topology(top_name, b)
    W = topo.metropolis_weights(top)
    om, y, props = (tuple(rng.standard_normal((b, K, d))) for _ in range(3))
    step = StepAdaptation(np.log(eps), np.log(eps), DualAveraging.start(np.log(eps)), False, 0.574)
    return DMALAState(
        top, W, om, y, rng.standard_normal((K, d)), props, np.zeros((b, K), bool), step, mh_burn_in, tuple(schedule)
    )


def test_messages_carry_only_own_proposal_and_worker_checks_index():
    alg = DMALA(step_size=0.1)
    st = _state(4, 1, 2, np.random.default_rng(0))
    msgs = alg.messages(st, np.ones(4, int), RoundInfo(3, False))
    assert [(m.index, m.t) for m in msgs] == [(i, 3) for i in range(4)]
    assert all(m.proposal is st.proposals[i] for i, m in enumerate(msgs))
    assert all(set(m._fields) == {"t", "index", "proposal", "moved"} for m in msgs)
    pay = AgentPayload(0, 4, (1, 3), 0.5, np.zeros(2), np.zeros((1, 2)), None, "dmala", CONSTS)
    with pytest.raises(RuntimeError, match="agent 2"):
        alg.worker_step((pay, None), DMALAMessage(0, 2, st.proposals[2], np.zeros(1, bool)), None, None, None, None)


def test_coordinator_step_equals_matrix_recursion():
    """One round by hand, ring of 4, k = 3: z = W³(y + Δg), d = W³Δv, MH with shared p, u;
    y ← W³(y + a⊙Δg); next proposal W³(ω + εp' − ½ε² b y)."""
    rng = np.random.default_rng(7)
    b, K, d, eps, k = 4, 3, 2, 0.3, 3
    st = _state(b, K, d, rng, eps=eps, mh_burn_in=10, schedule=[(0, 1), (5, k)])
    reps = [DMALAReply(rng.standard_normal((K, d)), rng.standard_normal(K), np.zeros(K, bool)) for _ in range(b)]
    alg = DMALA(step_size=eps, mh_burn_in=10, mixing_schedule=[(0, 1), (5, k)])
    Wk = np.linalg.matrix_power(st.W, k)
    dg, dv = np.stack([r.dg for r in reps]), np.stack([r.dv for r in reps])
    y = np.stack(st.ys)
    for t in (6, 10):  # MH off, MH on
        noise = rs.streams.ChainNoise(1, K, 0, d)
        ref = rs.streams.ChainNoise(1, K, 0, d)
        log_u, p_next = np.log(ref.uniform(1)[0]), ref.normal(1)[0]
        new, draws = alg.coordinator_step(st, reps, noise, RoundInfo(t, False))
        if t < 10:
            acc = np.ones((b, K), bool)
        else:
            z = np.einsum("ij,jkd->ikd", Wk, y + dg)
            ps = st.p - 0.5 * eps * b * (y + z)
            dH = b * (Wk @ dv) + 0.5 * np.sum(ps**2, -1) - 0.5 * np.sum(st.p**2, -1)
            acc = log_u <= -dH
            assert 0 < acc.sum() < acc.size
        np.testing.assert_array_equal(new.accepted, acc)
        om = np.where(acc[..., None], np.stack(st.proposals), np.stack(st.omegas))
        y_new = np.einsum("ij,jkd->ikd", Wk, y + acc[..., None] * dg)
        np.testing.assert_allclose(np.stack(new.omegas), om, atol=1e-12)
        np.testing.assert_allclose(np.stack(new.ys), y_new, atol=1e-12)
        np.testing.assert_allclose(draws, om.mean(axis=0), atol=1e-12)
        np.testing.assert_allclose(new.p, p_next)
        prop = np.einsum("ij,jkd->ikd", Wk, om + eps * p_next - 0.5 * eps**2 * b * y_new)
        np.testing.assert_allclose(np.stack(new.proposals), prop, atol=1e-12)


def test_mixing_schedule_and_nonfinite_rejected():
    assert [mixing_rounds(DEFAULT_SCHEDULE, t) for t in (0, 499, 500, 999, 1000, 10**6)] == [1, 1, 5, 5, 10, 10]
    rng = np.random.default_rng(2)
    st = _state(5, 2, 2, rng, mh_burn_in=10**9, schedule=[(0, 1)])
    alg = DMALA(step_size=0.1, mh_burn_in=10**9, mixing_schedule=[(0, 1)])
    bad = [np.array([True, False])] + [np.zeros(2, bool)] * 4
    reps = [DMALAReply(np.zeros((2, 2)), np.zeros(2), bb) for bb in bad]
    new, _ = alg.coordinator_step(st, reps, rs.streams.ChainNoise(0, 2, 0, 2), RoundInfo(0, False))
    # chain 0: agent 0 and its ring neighbours 1, 4 hear of the bad value within k = 1 round and reject
    np.testing.assert_array_equal(new.accepted[:, 0], [False, False, True, True, False])
    assert new.accepted[:, 1].all()
    # a worker never sends a non-finite number
    m = rs.models.LinearRegression(prior_scale=1.0, noise_sd=1.0, n_features=2)
    X, y = np.ones((3, 2)), np.ones(3)
    pay = AgentPayload(0, 1, (), 1.0, np.zeros(0), np.zeros((2, 2)), m.prior(), "dmala", CONSTS)
    w = alg.worker_init(pay, m, X, y)
    _, rep = alg.worker_step(
        w, DMALAMessage(0, 0, np.array([[np.inf, 0.0], [1.0, 1.0]]), np.zeros(2, bool)), m, X, y, None
    )
    assert rep.bad.tolist() == [True, False] and np.all(np.isfinite(rep.dg)) and np.all(np.isfinite(rep.dv))


# --- parameters, registry, executors -------------------------------------------------------------------------


def test_registry_and_defaults():
    """No argument required: step size, MH burn-in and mixing schedule are tuned (None) unless given; the seed's
    schedule and T_MH are the plain rules'."""
    a = get_algorithm("dmala")
    assert isinstance(a, DMALA)
    assert (a.step_size, a.topology, a.mh_burn_in, a.mixing_schedule, a.init) == (None, "complete", None, None, "map")
    assert DEFAULT_SCHEDULE == ((0, 1), (500, 5), (1000, 10)) and PAPER_MH_BURN_IN == 1000
    ring = topo.metropolis_weights(topo.make_topology("ring", 5))
    k = mixing_rounds_for(ring)
    lam2 = np.sort(np.abs(np.linalg.eigvalsh(ring)))[-2]
    assert lam2**k <= 1e-3 < lam2 ** (k - 1)
    assert mixing_rounds_for(topo.metropolis_weights(topo.make_topology("complete", 5))) == 1


@pytest.mark.parametrize(
    "params,bad",
    [
        ({"step_size": 0.0}, "step_size"),
        ({"step_size": float("nan")}, "step_size"),
        ({"step_size": 0.1, "mh_burn_in": -1}, "mh_burn_in"),
        ({"step_size": 0.1, "mh_burn_in": 1.5}, "mh_burn_in"),
        ({"step_size": 0.1, "mixing_schedule": [(1, 2)]}, "mixing_schedule"),
        ({"step_size": 0.1, "mixing_schedule": [(0, 0)]}, "mixing_schedule"),
        ({"step_size": 0.1, "mixing_schedule": [(0, 1), (0, 2)]}, "mixing_schedule"),
        ({"step_size": 0.1, "mixing_schedule": []}, "mixing_schedule"),
        ({"step_size": 0.1, "mixing_schedule": 3}, "mixing_schedule"),
        ({"step_size": 0.1, "topology": "grid"}, "topology"),
        ({"step_size": 0.1, "init": "middle"}, "init"),
        ({"step_size": 0.1, "batch_size": 3}, "batch_size"),
    ],
)
def test_bad_params_name_the_parameter(params, bad):
    with pytest.raises(ValueError, match=bad):
        get_algorithm("dmala", **params)


def test_local_and_ray_draws_identical(linreg, ray_session):
    shards, model, _ = linreg
    kw = dict(
        chains=2,
        num_rounds=8,
        burn_in=2,
        seed=4,
        progress=False,
        preconditioner=None,
        topology="ring",
        step_size=0.3,
        mh_burn_in=3,
        mixing_schedule=[(0, 1), (5, 2)],
    )
    local = rs.sample(model, shards, "dmala", executor="local", **kw)
    ray = rs.sample(model, shards, "dmala", executor="ray", **kw)
    np.testing.assert_array_equal(local.draws, ray.draws)
    assert _acceptance(local.draws) < 1.0  # MH rejections happened (t ≥ 3)
