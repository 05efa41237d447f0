"""Exact posterior moments of a hierarchical linear model with known noise and one group-intercept sd (test oracle).

Given t = log sd the model's total potential Σ_i U_i(β, t, η_i) + prior(β, t) is quadratic in w = (β, η), so
(β, η) | t, y is Gaussian, and p(t | y) ∝ exp(−f(w*(t), t)) det A(t)^(−1/2) is evaluated on a fine grid. Only the
model's own potential, gradient and Hessian are used (checked elsewhere against direct formulas and differences)."""

from __future__ import annotations

import numpy as np


def exact_moments(b, shards, t_grid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Means and sds of (β..., log sd, r...) in the sampler's draw order (θ, then each shard's r = sd ⊙ η in order)."""
    d = b.dim
    t_idx = d - 1  # one factor, intercept only: the single log sd is θ's last entry
    beta_idx = np.arange(d - 1)
    ls = [b.local_dim(X, y) for X, y in shards]
    L, k = sum(ls), d - 1 + sum(ls)
    prior = b.prior()
    logp, means, covs = [], [], []
    for t in t_grid:
        A, g0, f0 = np.zeros((k, k)), np.zeros(k), 0.0
        off = d - 1
        for (X, y), li in zip(shards, ls):
            x = np.zeros((1, d + li))
            x[0, t_idx] = t
            cols = np.concatenate([beta_idx, d + np.arange(li)])
            pos = np.concatenate([np.arange(d - 1), off + np.arange(li)])
            H = b.hessian(X, y, x[0])[np.ix_(cols, cols)]
            A[np.ix_(pos, pos)] += H
            g0[pos] += b.grad(X, y, x)[0, cols]
            f0 += b.potential(X, y, x)[0]
            off += li
        th = np.zeros((1, d))
        th[0, t_idx] = t
        A[: d - 1, : d - 1] += prior.hvp(np.repeat(th, d, axis=0), np.eye(d))[np.ix_(beta_idx, beta_idx)]
        g0[: d - 1] += prior.grad(th)[0, beta_idx]
        f0 += prior.potential(th)[0]
        cov = np.linalg.inv(A)
        m = -cov @ g0
        logp.append(-(f0 + g0 @ m + 0.5 * m @ A @ m) - 0.5 * np.linalg.slogdet(A)[1])
        means.append(m)
        covs.append(cov)
    lp = np.array(logp)
    p = np.exp(lp - lp.max())
    p /= p.sum()
    assert p[0] < 1e-12 and p[-1] < 1e-12, "the grid must cover p(log sd | y)"
    M, C, sd = np.array(means), np.array(covs), np.exp(t_grid)
    var_w = np.einsum("gkk->gk", C)
    mb = p @ M[:, : d - 1]
    vb = p @ (var_w[:, : d - 1] + M[:, : d - 1] ** 2) - mb**2
    ms, vs = p @ t_grid, p @ t_grid**2 - (p @ t_grid) ** 2  # log sd, as drawn
    mr = p @ (sd[:, None] * M[:, d - 1 :])
    vr = p @ (sd[:, None] ** 2 * (var_w[:, d - 1 :] + M[:, d - 1 :] ** 2)) - mr**2
    assert mr.size == L
    return np.concatenate([mb, [ms], mr]), np.sqrt(np.concatenate([vb, [vs], vr]))
