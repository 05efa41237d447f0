"""The set-up's round trips to the workers (`result.run_stats.trips.setup`, counted in-process as a pool of processes
would make them) and what they find: the MAP by Newton's method, one trip per iteration (values and gradients at
every step length of the line search, the Hessian at the full step), its last trip's Hessian and shard quadratics
used as the Laplace step's; the Laplace-marginal mode of group effects the same way; the bind with the facts the
checks read, and the worker model's bind with the states' creation. Against the L-BFGS search (`lbfgs_map`) and
the old trip-per-call tuning: the same optimum to the optimisers' tolerance and the same tuning."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import raysampler as rs
from raysampler.algorithms import get_algorithm
from raysampler.runtime.binding import bind_model
from raysampler.runtime.host import ShardSource
from raysampler.runtime.pools import LocalPool
from raysampler.tuning import laplace as lp


def _pool(model, shards):
    pool = LocalPool(
        [ShardSource(i, s, s.site, s.columns, s.index) for i, s in enumerate(shards)],
        model,
        get_algorithm("dglmc"),
        0,
        4,
    )
    return pool, bind_model(pool, model)[1]


def _breast_cancer():
    X, y = rs.datasets.load("breast_cancer", seed=0)
    return rs.models.LogisticRegression(prior_scale=1.0), rs.shard(X, y, num_shards=4)


def _poisson(n: int = 2000, seed: int = 1):
    rng = np.random.default_rng(seed)
    X = np.column_stack([np.ones(n), rng.standard_normal((n, 5))])
    y = rng.poisson(np.exp(X @ rng.normal(0.0, 0.3, 6))).astype(float)
    return rs.models.PoissonRegression(prior_scale=1.0), rs.shard(X, y, num_shards=4)


def _hospitals(per_site: int = 25):
    X, y = rs.datasets.load("hospitals", seed=0, n_groups=per_site)
    cols = rs.datasets.columns("hospitals", n_groups=per_site)
    model = rs.models.LogisticRegression(
        prior_scale=2.5, group_effects=rs.GroupEffects("hospital", sd_prior=rs.priors.HalfNormal(1.0))
    )
    return model, rs.shard(X, y, num_shards=4, columns=cols, by="hospital")


def test_default_breast_cancer_run_sets_up_in_at_most_14_trips() -> None:
    model, shards = _breast_cancer()
    res = rs.sample(model, shards, chains=4, num_rounds=50, seed=0, executor="local")
    trips = res.run_stats.trips
    # describe, bind (with the Gram matrices), 10 Newton iterations, the whitened model's bind with the states
    assert trips.setup <= 14, trips
    assert trips.warmup + trips.sampling == res.run_stats.rounds


def test_poisson_glm_sets_up_in_few_trips() -> None:
    model, shards = _poisson()
    res = rs.sample(model, shards, chains=4, num_rounds=5, burn_in=0, seed=0, executor="local")
    assert res.run_stats.trips.setup <= 10, res.run_stats.trips


def test_group_effects_set_up_in_few_trips() -> None:
    model, shards = _hospitals()
    res = rs.sample(model, shards, chains=2, num_rounds=2, burn_in=0, seed=0, executor="local")
    # describe, bind (with the Gram matrices, group labels, local blocks and centring), the marginal mode's Newton
    # iterations (one trip each), the worker model's bind with the states
    assert res.run_stats.trips.setup <= 12, res.run_stats.trips


@pytest.mark.parametrize(
    "case",
    ["breast_cancer", "poisson", "diabetes"],  # diabetes: σ unknown, U not convex at the start (|eigenvalue| steps)
)
def test_newton_map_is_the_lbfgs_optimum_and_its_tuning(case: str) -> None:
    if case == "breast_cancer":
        model, shards = _breast_cancer()
    elif case == "poisson":
        model, shards = _poisson()
    else:
        X, y = rs.datasets.load("diabetes", seed=0)
        model, shards = rs.models.LinearRegression(prior_scale=1.0), rs.shard(X, y, num_shards=4)
    pool, bound = _pool(model, shards)
    x0 = lp.map_start(0, bound.dim)
    before = pool.trips.snapshot().setup
    point = lp.newton_map(bound, pool, x0)
    assert point is not None and point.decrement <= lp.MAP_NEWTON_TOL
    assert pool.trips.snapshot().setup - before <= 10
    old = lp.lbfgs_map(bound, pool, x0=x0, dense_hessian=True)
    H = lp.total_hessian(bound, pool, point.theta)
    np.testing.assert_allclose(point.hessian, H, rtol=1e-12, atol=1e-10)
    gap = point.theta - old
    assert np.sqrt(gap @ H @ gap) < 1e-7  # in posterior sds (the Laplace metric): both optimisers' tolerance
    # the shards' quadratics the last trip brought back are those a trip of their own finds at that MAP
    lap = lp.laplace_step(bound, pool, seed=0, preconditioner="auto")
    np.testing.assert_array_equal(lap.theta_map, point.theta)
    want = lp.local_quadratics(bound, pool, lap.precond, dense=True)
    for (g, P), (wg, wP) in zip(lap.quads, want):
        np.testing.assert_allclose(g, wg, rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(P, wP, rtol=1e-10, atol=1e-10)
    ref = lp.laplace_preconditioner(bound, pool, old, "laplace")
    np.testing.assert_allclose(lap.precond.scale, ref.scale, rtol=1e-6, atol=1e-9)


@dataclasses.dataclass(frozen=True)
class FlatHessian(rs.models.LogisticRegression):
    """A user's model whose Hessian is far too small: every Newton step length overshoots, no step decreases U and
    the MAP search falls back to L-BFGS (on the gradients alone)."""

    def hessian(self, X, y, x):
        return 1e-12 * super().hessian(X, y, x)


def test_newton_falls_back_to_lbfgs_where_it_cannot_go_on() -> None:
    X, y = rs.datasets.load("breast_cancer", seed=0)
    pool, bound = _pool(FlatHessian(prior_scale=1.0), rs.shard(X, y, num_shards=4))
    x0 = lp.map_start(0, bound.dim)
    assert lp.newton_map(bound, pool, x0) is None
    good, plain = _pool(*_breast_cancer())
    want = lp.newton_map(plain, good, x0)
    assert want is not None
    theta = lp.find_map(bound, pool, x0=x0, dense_hessian=True)
    np.testing.assert_allclose(theta, want.theta, atol=1e-4)  # L-BFGS alone (its polish needs the Hessian)


def test_marginal_mode_from_the_seeded_start_is_the_mode_to_its_tolerance() -> None:
    """From the seeded start and η = 0 (the earlier set-up started at the joint mode): the mode a tighter search
    finds, to the iteration's tolerance (½gᵀH⁻¹g ≤ MARGINAL_NEWTON_TOL, about 1.4e-5 posterior sd)."""
    model, shards = _hospitals()
    pool, bound = _pool(model, shards)
    ll = lp.laplace_step_local(bound, pool, seed=0, preconditioner="auto")
    theta = ll.lap.theta_map
    tight = lp.MARGINAL_NEWTON_TOL
    try:
        lp.MARGINAL_NEWTON_TOL = 1e-16
        ref, _, marg = lp.marginal_mode(bound, pool, theta, ll.eta_map)
    finally:
        lp.MARGINAL_NEWTON_TOL = tight
    H = sum(m.hessian for m in marg) + lp.prior_hessian(bound.prior(), ref)
    gap = theta - ref
    assert np.sqrt(gap @ H @ gap) < 2e-5
    assert [e.size for e in ll.eta_map] == ll.local_dims and sum(ll.local_dims) == 25
