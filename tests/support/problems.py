"""Shared test problems with exact answers, and a user model that fails on a marked shard."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

import raysampler as rs
from raysampler.models.logistic import LogisticRegression

SIGMA1 = np.array([[1.0, 0.5], [0.5, 2.0]])


def gaussian_problem(sizes: Sequence[int], seed: int, centres: Sequence[Sequence[float]] | None = None):
    """Shards of 2-D Gaussian observations y ~ N(centre_i, Σ1), prior N(0, I), so U_i(θ) = ½(θ − m_i)ᵀP_i(θ − m_i)
    + const with P_i = n_i Σ1⁻¹ and m_i the shard mean. Returns (shards, model, P, m, ys)."""
    rng = np.random.default_rng(seed)
    centres = centres if centres is not None else [(0.8, -0.5)] * len(sizes)
    ys = [np.array(c) + rng.multivariate_normal(np.zeros(2), SIGMA1, size=n) for n, c in zip(sizes, centres)]
    shards = rs.shard([(np.zeros((len(y), 0)), y) for y in ys])
    model = rs.models.Gaussian(prior_scale=1.0, noise_cov=SIGMA1.tolist())
    prec = np.linalg.inv(SIGMA1)
    return shards, model, [n * prec for n in sizes], [y.mean(axis=0) for y in ys], ys


def ula_law(P, m, gamma):
    """The exact stationary law of ULA on `gaussian_problem`'s potentials with its N(0, I) prior: θ' = (I − γΛ)θ +
    γ Σ P_i m_i + √(2γ)ξ, Λ = I + Σ P_i (a linear Gaussian recursion: the discrete Lyapunov equation)."""
    from raysampler.testing import exact

    Lam = np.eye(2) + sum(P)
    F = np.eye(2) - gamma * Lam
    c = gamma * sum(Pi @ mi for Pi, mi in zip(P, m))
    return exact.stationary_law(F, c, 2 * gamma * np.eye(2))


class InProcessPool:
    """A `ShardPool` over (X, y) shards in this process, for an algorithm's `prepare` or a tuning step."""

    def __init__(self, data, model):
        self.data, self.model, self.num_shards = data, model, len(data)

    def map(self, fn, args):
        return [fn(self.model, X, y, *a) for (X, y), a in zip(self.data, args)]

    def bind(self, model):
        self.model = model


#: The paper's plain LMC rules with a fixed step and no tuning, from θ = 0: a run that reaches a user model's
#: failing shard at round 0
PLAIN = dict(local_kernel="lmc", preconditioner=None, rho=0.5, n_local=2, init="zeros", balance=False)


@dataclasses.dataclass(frozen=True)
class FailingLogistic(LogisticRegression):
    """A user's model whose gradient raises on the shard marked by X[0, 1] == 77 once θ has left zero."""

    def grad(self, X, y, x):
        if X[0, 1] == 77.0 and np.abs(x).max() > 0.0:
            raise RuntimeError("this shard's likelihood cannot be evaluated")
        return super().grad(X, y, x)
