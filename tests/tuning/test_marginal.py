"""The Laplace-marginal tuning step for group effects against exact answers. In a hierarchical linear model with known
noise U_i is quadratic in η, so Laplace's method is exact: V_i(β, log sd) is −log p(y_i | β, sd) up to a constant,
with y_g ~ N(X_g β, diag(s_g²) + sd² 1 1ᵀ) per group. Its differences, gradient and Hessian, and the mode of
prior + Σ V_i that `laplace_step_local` finds, must be that marginal's."""

from __future__ import annotations

import numpy as np
import scipy.optimize
import scipy.stats
from support.problems import InProcessPool

import raysampler as rs
from raysampler.models.contract import DataSpec
from raysampler.tuning.laplace import laplace_step_local
from raysampler.tuning.shards import shard_marginal


def _problem(seed: int = 0, G: int = 12, n: int = 120):
    rng = np.random.default_rng(seed)
    g = rng.integers(0, G, n).astype(float)
    x = rng.normal(size=n)
    s = rng.uniform(0.5, 1.5, n)
    y = 0.3 + 0.8 * x + rng.normal(scale=0.6, size=G)[g.astype(int)] + s * rng.normal(size=n)
    X = np.column_stack([np.ones(n), x, g, s])
    cols = ("(Intercept)", "x", "g", "s")
    model = rs.models.LinearRegression(noise_sd="s", group_effects=rs.GroupEffects("g"))
    b = model.bind(DataSpec(X.shape[1], None, n, cols))
    shards = rs.shard(X, y, num_shards=3, columns=cols, by="g")
    data = [b.shard_data(sh.X, sh.y, None) for sh in shards]
    raw = [(sh.X, sh.y) for sh in shards]
    return b, data, raw


def _exact_v(raw, theta: np.ndarray) -> float:
    """−log p(y | β, sd) over the given rows: each group's rows are jointly normal."""
    beta, sd = theta[:2], np.exp(theta[2])
    total = 0.0
    for X, y in raw:
        for lab in np.unique(X[:, 2]):
            r = X[:, 2] == lab
            cov = np.diag(X[r, 3] ** 2) + sd**2
            total -= scipy.stats.multivariate_normal(X[r, :2] @ beta, cov).logpdf(y[r])
    return total


def _fd_grad_hess(f, x: np.ndarray, h: float = 1e-4) -> tuple[np.ndarray, np.ndarray]:
    d = x.size
    e = np.eye(d) * h
    g = np.array([(f(x + e[j]) - f(x - e[j])) / (2 * h) for j in range(d)])
    H = np.array(
        [
            [
                (f(x + e[j] + e[k]) - f(x + e[j] - e[k]) - f(x - e[j] + e[k]) + f(x - e[j] - e[k])) / (4 * h * h)
                for k in range(d)
            ]
            for j in range(d)
        ]
    )
    return g, H


def test_shard_marginal_is_the_exact_marginal_likelihood() -> None:
    b, data, raw = _problem()
    (X, y), rx = data[0], [raw[0]]
    l = b.local_dim(X, y)
    th1, th2 = np.array([0.2, 0.7, np.log(0.5)]), np.array([0.4, 0.9, np.log(0.9)])
    m1 = shard_marginal(b, X, y, th1, np.zeros(l), True)
    m2 = shard_marginal(b, X, y, th2, m1.eta, True)
    np.testing.assert_allclose(m1.value - m2.value, _exact_v(rx, th1) - _exact_v(rx, th2), rtol=0, atol=1e-8)
    g, H = _fd_grad_hess(lambda t: _exact_v(rx, t), th1)
    np.testing.assert_allclose(m1.grad, g, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(m1.hessian, H, rtol=2e-3, atol=2e-3)
    # η̂ is the conditional mode: the gradient in η vanishes there
    full = b.grad(X, y, np.concatenate([th1, m1.eta])[None, :])[0]
    assert np.abs(full[3:]).max() < 1e-8


def test_laplace_step_local_centres_on_the_marginal_mode() -> None:
    """θ* is the mode of prior(θ) + Σ_i V_i(θ) (not the joint mode of (θ, η), which puts the scale elsewhere), and the
    preconditioner's Hessian is the exact marginal's there."""
    b, data, raw = _problem(seed=3)
    prior = b.prior()

    def f(t: np.ndarray) -> float:
        return _exact_v(raw, t) + float(prior.potential(t[None, :])[0])

    want = scipy.optimize.minimize(f, np.zeros(3), method="BFGS", options={"gtol": 1e-9}).x
    ll = laplace_step_local(b, InProcessPool(data, b), seed=0, preconditioner="laplace")
    np.testing.assert_allclose(ll.lap.theta_map, want, atol=1e-5)
    _, H = _fd_grad_hess(f, want)
    L = ll.lap.precond.matrix()
    assert ll.lap.precond.kind == "laplace" and L is not None
    np.testing.assert_allclose(L @ L.T, np.linalg.inv(H), rtol=1e-3)
    # in φ the shards' quadratics and the prior's add up to the identity
    np.testing.assert_allclose(sum(P for _, P in ll.lap.quads) + ll.lap.prior_P, np.eye(3), atol=1e-3)
    # the joint mode of (θ, η) is elsewhere: its log sd is more than one posterior sd away
    ls = [b.local_dim(X, y) for X, y in data]
    cuts = np.cumsum([3, *ls])

    def joint(v: np.ndarray) -> tuple[float, np.ndarray]:
        th = v[None, :3]
        value, grad = float(prior.potential(th)[0]), np.zeros_like(v)
        grad[:3] = prior.grad(th)[0]
        for i, (X, y) in enumerate(data):
            u, g = b.potential_and_grad(X, y, np.concatenate([v[:3], v[cuts[i] : cuts[i + 1]]])[None, :])
            value += float(u[0])
            grad[:3] += g[0, :3]
            grad[cuts[i] : cuts[i + 1]] = g[0, 3:]
        return value, grad

    v = scipy.optimize.minimize(joint, np.zeros(int(cuts[-1])), jac=True, method="L-BFGS-B").x
    assert abs(v[2] - want[2]) > np.sqrt(np.linalg.inv(H)[2, 2])
