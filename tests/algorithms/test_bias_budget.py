"""The bias budget: the stationary laws raysampler.tuning.laws derives from the Laplace model agree with the exact
laws the sampler tests verify; on a Gaussian target (where the Laplace model is exact) every unadjusted algorithm's
tuned default keeps its exact-law bias within δ, samples that law, and a step 1.5× larger (or ρ 1.5× smaller) would
not."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from support.problems import gaussian_problem
from support.stats_helpers import assert_moments
from test_baselines_exact import dsghmc_law as ref_dsghmc
from test_baselines_exact import dsgld_law as ref_dsgld
from test_baselines_exact import dula_law as ref_dula
from test_baselines_exact import ula_law
from test_dadmm import dadmms_law as ref_dadmms

import raysampler as rs
from raysampler import topology as topo
from raysampler.runtime.binding import bind_model
from raysampler.runtime.host import ShardSource
from raysampler.runtime.pools import LocalPool
from raysampler.tuning import budget, laplace_step, laws

SIZES = (3, 5, 4, 6, 2)
DELTA = 0.05
#: (chains, rounds after burn-in) of the tuned-default runs: 48,000 draws. An in-process round costs about the same
#: for 16 or 64 chains (one vectorised step), so 64 chains of 750 rounds; D-ADMMS solves its Newton system chain by
#: chain (its round costs in proportion to the chains), so it keeps 16 chains of 3,000 rounds
RUN = {"dadmms": (16, 3000)}
DEFAULT_RUN = (64, 750)


@pytest.fixture(scope="module")
def problem():
    """Five heterogeneous shards of 2-D Gaussian observations, prior N(0, I) (as tests/test_baselines_exact.py)."""
    return gaussian_problem(SIZES, seed=11)[:4]


def laplace(problem, preconditioner):
    shards, model, _, _ = problem
    pool = LocalPool([ShardSource(i, s) for i, s in enumerate(shards)], model, None, 0, 2)
    _, bound, _ = bind_model(pool, model)
    return laplace_step(bound, pool, seed=0, preconditioner=preconditioner)


def in_theta(lap, law):
    """A law in the Laplace model's coordinates z = φ − centre, as a law of θ = shift + L(z + centre)."""
    mean, cov = law
    L = lap.precond.matrix()
    L = np.eye(len(mean)) if L is None else L
    return lap.precond.to_theta((mean + lap.centre)[None, :])[0], L @ cov @ L.T


def close(a, b):
    np.testing.assert_allclose(a[0], b[0], rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(a[1], b[1], rtol=1e-6, atol=1e-10)


def test_budget_laws_equal_the_verified_exact_laws(problem):
    """In θ coordinates (preconditioner=None) the budget's laws are the laws the sampler tests check draws against."""
    _, _, P, m = problem
    lap = laplace(problem, None)
    b = len(P)
    ring = topo.make_topology("ring", b)
    W = topo.metropolis_weights(ring)
    close(in_theta(lap, laws.ula_law_moments(lap, 0.02)), ula_law(P, m, 0.02))
    close(in_theta(lap, laws.dsgld_law(lap, W, 0.02)), ref_dsgld(P, m, 0.02, W))
    close(in_theta(lap, laws.dsghmc_law(lap, W, 0.05, 0.7)), ref_dsghmc(P, m, 0.05, 0.7, W))
    close(in_theta(lap, laws.dula_law(lap, ring.laplacian(), 0.004, 0.2)), ref_dula(P, m, 0.004, 0.2, ring.laplacian()))
    for noise in ("curvature", "langevin", "paper"):
        close(in_theta(lap, laws.dadmms_law(lap, ring, 2.0, noise)), ref_dadmms(P, m, 2.0, ring, noise=noise))


ALGS = {  # algorithm → (report field of its tuned value, its law, whether the search lowers (step) or raises (rho))
    "ula": ("step_size", lambda lap, v, plan, W, top: laws.ula_law_moments(lap, v), "step"),
    "qlsd": ("step_size", lambda lap, v, plan, W, top: laws.qlsd_law(lap, v, 0.0, True), "step"),
    "dsgld": ("step_size", lambda lap, v, plan, W, top: laws.dsgld_law(lap, W, v), "step"),
    "dsghmc": ("step_size", lambda lap, v, plan, W, top: laws.dsghmc_law(lap, W, v, plan.friction), "step"),
    "dula": ("alpha0", lambda lap, v, plan, W, top: laws.dula_law(lap, top.laplacian(), v, plan.beta0), "step"),
    "dadmms": ("rho", lambda lap, v, plan, W, top: laws.dadmms_law(lap, top, v, plan.noise), "rho"),
}


@pytest.mark.parametrize("algorithm", sorted(ALGS))
def test_tuned_default_keeps_the_exact_law_within_budget_and_samples_it(problem, algorithm):
    shards, model, _, _ = problem
    key, law_of, kind = ALGS[algorithm]
    extra = {"levels": None} if algorithm == "qlsd" else {}
    chains, rounds = RUN.get(algorithm, DEFAULT_RUN)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = rs.sample(
            model,
            shards,
            algorithm,
            chains=chains,
            num_rounds=rounds,
            burn_in=500,
            seed=3,
            executor="local",
            progress=False,
            **extra,
        )
    plan = res.setup.plan
    lap = laplace(problem, "auto")
    top = topo.make_topology("complete", len(SIZES))
    W = topo.metropolis_weights(top)
    value = getattr(plan, key)
    law = law_of(lap, value, plan, W, top)
    pred = budget.compare(lap, *law)
    assert pred.worst <= DELTA + 1e-9 and pred.worst == pytest.approx(plan.bias.worst)
    assert_moments(res.draws, *in_theta(lap, law))
    beyond = law_of(lap, value * 1.5 if kind == "step" else value / 1.5, plan, W, top)
    if algorithm != "dadmms":  # D-ADMMS's ρ is bounded below by the non-Gaussian cap, not by this law
        assert beyond is None or budget.compare(lap, *beyond).worst > DELTA


def test_fald_tuned_default_keeps_the_exact_law_within_budget(problem):
    """FALD's budget law has the exact mean (client drift) and the homogeneous-shards covariance; the exact law
    (second moments averaged over the geometric schedule, tests/test_fald_exact.py) at the tuned step is within δ
    (plus 0.01 for that approximation), and the draws follow it."""
    from test_fald_exact import fald_law

    shards, model, P, m = problem
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = rs.sample(
            model, shards, "fald", chains=32, num_rounds=1500, burn_in=500, seed=3, executor="local", progress=False
        )  # 48,000 draws; not more chains: every chain follows the same communication schedule (test_fald_exact)
    plan = res.setup.plan
    lap = laplace(problem, "auto")
    L, s = lap.precond.matrix(), lap.precond.shift
    Li = np.linalg.inv(L)
    P_phi = [L.T @ Pi @ L for Pi in P]
    m_phi = [Li @ (mi - s) for mi in m]
    exact = fald_law(P_phi, m_phi, L.T @ L, Li @ (np.zeros(2) - s), plan.step_size, plan.p_comm, plan.tau)
    predicted = laws.fald_law(lap, plan.step_size, plan.p_comm, plan.tau)
    np.testing.assert_allclose(predicted[0], exact[0] - lap.centre, atol=1e-6)  # exact (to the tail cut)
    assert budget.compare(lap, exact[0] - lap.centre, exact[1]).worst <= DELTA + 0.01
    assert_moments(res.draws, *in_theta(lap, (exact[0] - lap.centre, exact[1])))
