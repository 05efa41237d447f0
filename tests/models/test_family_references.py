"""The families brms users fit (issue 48 item 4) at their default priors against NUTS on the pooled data (cached
references, scripts/make_family_references.py, NumPyro's own likelihoods): Student-t (σ and ν), Gamma (shape), Beta
(precision φ), Weibull with right censoring (shape), exponential with right censoring, zero-inflated Poisson (zi) and
negative binomial (φ, zi) with an offset, cumulative-logit and cumulative-probit ordinal regression (the first
threshold and the gaps). DG-LMC
runs on four shards; every reported parameter (β and the family's own, natural scale, brms names) must have its mean
within 0.1 posterior sd and its sd within 10 %, each plus Z Monte-Carlo standard errors (the run's ESS and the
reference's). And each family's curvature scale is the curvature met there."""

from __future__ import annotations

import numpy as np
import pytest
from support.reference_problems import FAMILY_PROBLEMS, reference
from support.stats_helpers import Z, ess

import raysampler as rs
from raysampler.models.contract import natural_values

#: rounds after burn-in per problem (16 chains, seed 5): enough for a bulk ESS of about 150 or more on every parameter
ROUNDS = {
    "family_student": 300,
    "family_gamma": 400,
    "family_beta": 200,
    "family_weibull": 200,
    "family_exponential": 300,
    "family_zip": 300,
    "family_zinb": 300,
    "family_cumulative": 300,
    "family_sigma": 300,
    "family_cumulative_probit": 300,
    "family_hurdle_poisson": 300,
    "family_hurdle_nb": 300,
}


def compare(res: rs.Result, name: str) -> list[str]:
    """Each parameter's (name, mean error in sds, sd error) against the reference; asserts the issue's targets."""
    ref = reference(name)
    assert sorted(res.param_names) == sorted(ref.names)
    values = natural_values(res.param_blocks, res.draws)
    where = {n: j for j, n in enumerate(res.param_names)}
    bad, report = [], []
    for k, n in enumerate(ref.names):
        x = values[..., where[n]]
        e = ess(x)
        m_err = abs(x.mean() - ref.mean[k]) / ref.sd[k]
        m_tol = 0.1 + Z * np.sqrt(1.0 / e + 1.0 / ref.ess_bulk[k])
        s_err = abs(x.std() / ref.sd[k] - 1.0)
        s_tol = 0.1 + Z * np.sqrt(1.0 / (2.0 * e) + 1.0 / (2.0 * ref.ess_bulk[k]))
        report.append(f"{n}: mean off {m_err:.3f} sd, sd off {s_err:.1%}, ESS {e:.0f}")
        if e < 100 or m_err > m_tol or s_err > s_tol:
            bad.append(f"{n}: ESS {e:.0f}, mean off {m_err:.3f} sd (tol {m_tol:.3f}), sd off {s_err:.1%}")
    assert not bad, "\n".join(bad)
    return report


@pytest.mark.parametrize("name", list(ROUNDS))
def test_family_matches_nuts(name: str) -> None:
    problem = FAMILY_PROBLEMS[name]
    X, y, cols = problem.load()
    shards = rs.shard(X, y, num_shards=4, columns=cols)
    res = rs.sample(problem.model, shards, chains=16, num_rounds=ROUNDS[name], seed=5, executor="local", progress=False)
    print(name, "\n  ".join(compare(res, name)))


@pytest.mark.parametrize("name", list(ROUNDS))
def test_the_curvature_scale_is_the_curvature_met_under_the_posterior(name: str) -> None:
    """`smoothness` is a curvature scale, not a bound (RowFamilyGLM): within a factor 4 either way of the largest
    eigenvalue of the pooled data's Hessian at the reference's posterior mean, in the sampler's coordinates."""
    problem = FAMILY_PROBLEMS[name]
    X, y, _ = problem.load()
    model = problem.bound()
    ref = reference(name)
    theta = np.array(  # the sampler's coordinates: log of a positive parameter, logit of zi
        [
            np.log(v)
            if n in ("sigma", "nu", "shape", "phi") or n.startswith("delta[")
            else np.log(v / (1 - v))
            if n == "zi"
            else v
            for n, v in zip(ref.names, ref.mean)
        ]
    )
    assert ref.names == model.param_names()
    lam = np.linalg.eigvalsh(model.hessian(X, y, theta))[-1]
    assert lam / 4 <= model.smoothness(X, y) <= 4 * lam, (model.smoothness(X, y), lam)
