"""`rs.models.from_numpyro`: a NumPyro model against the built-in families it restates (potentials, gradients, hvps
per shard with the prior counted once; draws within Monte-Carlo error), a positive site through NumPyro's transform,
Ray against local, the site checks, pickling and the error without the `jax` extra."""

from __future__ import annotations

import pickle
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("numpyro")

import numpyro
import numpyro.distributions as dist
from support.stats_helpers import Z, ess

import raysampler as rs
from raysampler.models import DataSpec
from raysampler.priors import HalfNormal, Normal

SCALE = 2.0


def logistic(X, y=None, scale=SCALE):
    beta = numpyro.sample("beta", dist.Normal(0.0, scale).expand([X.shape[1]]).to_event(1))
    with numpyro.plate("data", X.shape[0]):
        numpyro.sample("y", dist.Bernoulli(logits=X @ beta), obs=y)


def linear(X, y=None):
    beta = numpyro.sample("beta", dist.Normal(0.0, 10.0).expand([X.shape[1]]).to_event(1))
    sigma = numpyro.sample("sigma", dist.HalfNormal(3.0))
    with numpyro.plate("data", X.shape[0]):
        numpyro.sample("y", dist.Normal(X @ beta, sigma), obs=y)


def per_row_latent(X, y=None):
    mu = numpyro.sample("mu", dist.Normal(0.0, 1.0))
    with numpyro.plate("data", X.shape[0]):
        z = numpyro.sample("z", dist.Normal(mu, 1.0))
        numpyro.sample("y", dist.Normal(z, 1.0), obs=y)


def _logistic_data(n: int = 240, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = np.column_stack([np.ones(n), rng.standard_normal((n, 2))])
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-X @ np.array([-0.5, 1.0, -0.7])))).astype(float)
    return X, y


def _bridge_logistic():
    return rs.models.from_numpyro(logistic, target_kind="binary")


def test_logistic_matches_the_builtin_per_shard_with_the_prior_once():
    X, y = _logistic_data()
    spec = DataSpec(n_features=3)
    ours = _bridge_logistic().bind(spec)
    ref = rs.models.LogisticRegression(prior_scale=SCALE).bind(spec)
    assert ours.dim == 3 and ours.param_names() == ["beta[0]", "beta[1]", "beta[2]"]
    rng = np.random.default_rng(1)
    x, v = rng.standard_normal((5, 3)), rng.standard_normal((5, 3))
    shards = np.array_split(np.arange(len(y)), 3)
    for rows in shards:
        Xi, yi = X[rows], y[rows]
        np.testing.assert_allclose(ours.potential(Xi, yi, x), ref.potential(Xi, yi, x), rtol=1e-12, atol=1e-10)
        np.testing.assert_allclose(ours.grad(Xi, yi, x), ref.grad(Xi, yi, x), rtol=1e-12, atol=1e-10)
        np.testing.assert_allclose(ours.hvp(Xi, yi, x, v), ref.hvp(Xi, yi, x, v), rtol=1e-12, atol=1e-10)
        u, g = ours.potential_and_grad(Xi, yi, x)
        np.testing.assert_allclose(u, ref.potential(Xi, yi, x), rtol=1e-12, atol=1e-10)
        np.testing.assert_allclose(g, ref.grad(Xi, yi, x), rtol=1e-12, atol=1e-10)
        np.testing.assert_allclose(ours.hessian(Xi, yi, x[0]), ref.hessian(Xi, yi, x[0]), atol=1e-10)
        np.testing.assert_allclose(ours.hessians(Xi, yi, x), ref.hessians(Xi, yi, x), atol=1e-10)
        np.testing.assert_allclose(ours.hessian_diag(Xi, yi, x), ref.hessian_diag(Xi, yi, x), atol=1e-10)
        # the estimate finds the worst case λ_max(XᵀX)/4 at θ = 0, where σ'(0) = 1/4
        assert ours.smoothness(Xi, yi) == pytest.approx(ref.smoothness(Xi, yi), rel=1e-4)

    prior = ours.prior()
    assert isinstance(prior, rs.priors.Prior) and prior.residual is not None
    assert not np.any(prior.gaussian.precision)  # all of the prior is the NumPyro sites' term, counted once

    def total(model) -> np.ndarray:
        return sum(model.potential(X[r], y[r], x) for r in shards) + model.prior().potential(x)

    diff = total(ours) - total(ref)  # equal up to the prior's normalising constant
    np.testing.assert_allclose(diff, diff[0], atol=1e-9)
    np.testing.assert_allclose(prior.grad(x), ref.prior().grad(x), atol=1e-12)
    np.testing.assert_allclose(prior.hvp(x, v), ref.prior().hvp(x, v), atol=1e-12)
    np.testing.assert_allclose(prior.hessian_diag(x), ref.prior().hessian_diag(x), atol=1e-12)
    np.testing.assert_allclose(prior.potential(x[0]), prior.potential(x)[0])  # one point (d,) works too


def _agree(a: np.ndarray, b: np.ndarray) -> None:
    """Posterior means of two runs (chains, draws, d) agree within Z Monte-Carlo standard errors (ESS-based)."""
    for j in range(a.shape[-1]):
        se = np.sqrt(a[..., j].var() / ess(a[..., j]) + b[..., j].var() / ess(b[..., j]))
        err = abs(a[..., j].mean() - b[..., j].mean()) / se
        assert err < Z, f"coordinate {j}: means {a[..., j].mean():.4f} vs {b[..., j].mean():.4f}, {err:.1f} MCSE"


@pytest.mark.filterwarnings("ignore:max R-hat:UserWarning", "ignore:min bulk ESS:UserWarning")  # short runs
def test_logistic_draws_match_the_builtin():
    X, y = _logistic_data()
    shards = rs.shard(X, y, num_shards=3)
    kw = dict(chains=4, num_rounds=400, burn_in=100, seed=5, executor="local", progress=False)
    ours = rs.sample(_bridge_logistic(), shards, **kw)
    ref = rs.sample(rs.models.LogisticRegression(prior_scale=SCALE), shards, **kw)
    assert ours.param_names == ["beta[0]", "beta[1]", "beta[2]"]
    _agree(ours.draws, ref.draws)


@pytest.mark.filterwarnings("ignore:max R-hat:UserWarning", "ignore:min bulk ESS:UserWarning")  # short runs
def test_positive_site_is_sampled_on_the_log_scale_and_reported_natural():
    rng = np.random.default_rng(2)
    X = np.column_stack([np.ones(200), rng.standard_normal(200)])
    y = X @ np.array([1.0, -2.0]) + 0.5 * rng.standard_normal(200)
    model = rs.models.from_numpyro(linear, global_sites=("beta", "sigma"))
    bound = model.bind(DataSpec(n_features=2))
    assert bound.param_names() == ["beta[0]", "beta[1]", "sigma"]
    assert [b.transform for b in bound.param_blocks()] == ["identity", "exp"]
    # same potential as the built-in family with the same priors (θ = (β, log σ), log-Jacobian in the prior)
    ref = rs.models.LinearRegression(coef_prior=Normal(0.0, 10.0), sigma_prior=HalfNormal(3.0)).bind(
        DataSpec(n_features=2)
    )
    x = np.column_stack([rng.standard_normal((4, 2)), rng.normal(-0.5, 0.3, 4)])
    d_lik = bound.potential(X, y, x) - ref.potential(X, y, x)
    d_pri = bound.prior().potential(x) - ref.prior().potential(x)
    np.testing.assert_allclose(d_lik, d_lik[0], atol=1e-8)
    np.testing.assert_allclose(d_pri, d_pri[0], atol=1e-10)
    np.testing.assert_allclose(bound.grad(X, y, x), ref.grad(X, y, x), rtol=1e-10)
    np.testing.assert_allclose(bound.prior().grad(x), ref.prior().grad(x), atol=1e-10)
    np.testing.assert_allclose(bound.constrain(x)["sigma"], np.exp(x[:, 2]))

    result = rs.sample(
        model, rs.shard(X, y, num_shards=2), chains=4, num_rounds=300, burn_in=100, seed=1, executor="local",
        progress=False,
    )  # fmt: skip
    sigma = result.posterior()["sigma"]
    np.testing.assert_allclose(sigma, np.exp(result.draws[..., 2]))  # reported on the natural scale
    assert 0.4 < sigma.mean() < 0.6
    assert "sigma" in result.summary().index


def test_unit_interval_site_is_sampled_on_the_logit_scale_and_reported_as_a_probability():
    """A Beta(2, 3) success probability of Bernoulli rows: θ holds logit p; posterior() and the summary report p,
    which is what NumPyro's constrain gives, and its posterior is the conjugate Beta(2 + Σy, 3 + n − Σy)."""

    def coin(X, y=None):
        p = numpyro.sample("p", dist.Beta(2.0, 3.0))
        numpyro.sample("y", dist.Bernoulli(probs=p).expand([X.shape[0]]), obs=y)

    rng = np.random.default_rng(4)
    X, y = np.ones((120, 1)), (rng.random(120) < 0.3).astype(float)
    model = rs.models.from_numpyro(coin, global_sites=("p",))
    bound = model.bind(DataSpec(n_features=1))
    assert [(b.name, b.transform) for b in bound.param_blocks()] == [("p", "sigmoid")]
    x = rng.normal(size=(5, 1))
    np.testing.assert_allclose(bound.param_blocks()[0].natural(x), bound.constrain(x)["p"][:, None], rtol=1e-12)
    result = rs.sample(
        model, rs.shard(X, y, num_shards=2), chains=4, num_rounds=1500, seed=2, executor="local", progress=False
    )
    p = result.posterior()["p"]
    assert np.all((p > 0) & (p < 1))
    a, b = 2.0 + y.sum(), 3.0 + y.size - y.sum()
    mean, sd = a / (a + b), np.sqrt(a * b / ((a + b) ** 2 * (a + b + 1)))
    e = ess(p)
    assert abs(p.mean() - mean) < 0.1 * sd + Z * sd / np.sqrt(e), (p.mean(), mean, e)
    assert abs(p.std() / sd - 1) < 0.1 + Z / np.sqrt(2 * e)


@pytest.mark.filterwarnings("ignore:max R-hat:UserWarning", "ignore:min bulk ESS:UserWarning")  # 20 rounds
def test_ray_draws_equal_local(ray_session):
    X, y = _logistic_data(120)
    shards = rs.shard(X, y, num_shards=2)
    kw = dict(chains=2, num_rounds=20, burn_in=10, seed=3, progress=False)
    local = rs.sample(_bridge_logistic(), shards, executor="local", **kw)
    on_ray = rs.sample(_bridge_logistic(), shards, executor="ray", max_actors=1, **kw)  # one process imports JAX
    np.testing.assert_array_equal(local.draws, on_ray.draws)


def test_sites_are_checked():
    with pytest.raises(ValueError, match="'z' is inside a plate over the data rows"):
        rs.models.from_numpyro(per_row_latent).bind(DataSpec(n_features=1))
    with pytest.raises(ValueError, match=r"latent sites not listed: \['sigma'\]"):
        rs.models.from_numpyro(linear, global_sites=("beta",)).bind(DataSpec(n_features=2))
    with pytest.raises(ValueError, match=r"observed sites \(the likelihood\): \['y'\]"):
        rs.models.from_numpyro(linear, global_sites=("beta", "sigma", "y")).bind(DataSpec(n_features=2))
    with pytest.raises(ValueError, match="target_kind"):
        rs.models.from_numpyro(logistic, target_kind="vector")
    with pytest.raises(ValueError, match="not bound"):
        _ = _bridge_logistic().dim


def test_pickles_without_compiled_functions_and_keeps_its_repr():
    X, y = _logistic_data(30)
    model = _bridge_logistic().bind(DataSpec(n_features=3))
    x = np.zeros((2, 3))
    before = model.potential(X, y, x)  # compiles: the cache must not travel
    copy = pickle.loads(pickle.dumps(model))
    assert copy._cache == {} and repr(copy) == repr(model) and "0x" not in repr(model)
    np.testing.assert_array_equal(copy.potential(X, y, x), before)


def test_import_raysampler_does_not_import_jax():
    code = "import sys, raysampler, raysampler.models as m; m.from_numpyro; m.NumPyroModel; print('jax' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_without_the_extra_the_error_names_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "numpyro", None)  # `import numpyro` now raises ImportError
    with pytest.raises(ImportError, match=r'pip install "raysampler\[jax\]"'):
        rs.models.from_numpyro(logistic)
