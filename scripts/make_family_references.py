"""NUTS references for the families brms users fit (tests/support/reference_problems.py, FAMILY_PROBLEMS): writes each
problem's data (CSV, seeded) and a reference from NumPyro's NUTS on the pooled data to tests/data/models/.

Each likelihood is NumPyro's own distribution, not raysampler's potentials: Student-t `StudentT(ν, η, σ)`, `Gamma(α,
α/μ)`, `Beta(μφ, (1 − μ)φ)`, `Weibull(λ, k)` with λ = μ/Γ(1 + 1/k) (brms' mean parametrisation) and
`Exponential(1/μ)`, `ZeroInflatedPoisson(zi, λ)` with λ = exp(η + log exposure), `ZeroInflatedNegativeBinomial2(μ, φ,
gate=zi)`, the hurdle families' counts `Poisson(μ)` and `NegativeBinomial2(μ, φ)` truncated at 1 by their own
`log_prob(0)`; a right-censored row adds log S(y) = log(1 − F(y)) from the distribution's own `cdf`. The priors are
the families' defaults: β ~ N(0, 10²), σ ~ HalfNormal(10), ν ~ Gamma(2, 0.1), a shape or precision ~ Gamma(0.01,
0.01), zi and hu ~ Beta(1, 1), the negative binomial's φ ~ HalfCauchy(10); the cumulative probit's likelihood is
written from jax's `log_ndtr` (NumPyro has no ordered probit); the distributional Gaussian (σ's own regression, log
σ_j = z_jᵀγ) has γ ~ N(0, 2.5²). Stored per reported parameter (brms names, natural scale): mean, sd, quantiles,
Monte-Carlo standard error of the mean, bulk ESS and R-hat (arviz-stats), plus a thinned subset of the draws. The run
stops with an error if min ESS < 4000 or max R-hat > 1.01. Needs the `jax` extra.

    python scripts/make_family_references.py [--draws 6000] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

import numpy as np
from scipy.special import expit
from scipy.special import gamma as gamma_function

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import arviz_base as azb  # noqa: E402
import arviz_stats as azs  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpyro  # noqa: E402
import numpyro.distributions as dist  # noqa: E402
from jax.scipy.special import gammaln, log_ndtr  # noqa: E402
from make_group_references import write_csv  # noqa: E402  (scripts/ is on sys.path: the script's own folder)
from make_model_references import save_reference  # noqa: E402
from numpyro.infer import MCMC, NUTS  # noqa: E402
from support.reference_problems import FAMILY_PROBLEMS  # noqa: E402

jax.config.update("jax_enable_x64", True)

MIN_ESS = 4000.0
COEF = ["(Intercept)", "x1", "x2"]


def make_data(name: str) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(X, y, X's column names) of a problem, from a fixed seed: an intercept and two standard normal covariates;
    the survival problems add the column "censored" (0: event, 1: right-censored at an exponential time)."""
    rng = np.random.default_rng(48000 + list(FAMILY_PROBLEMS).index(name))
    n = 200
    X = np.column_stack([np.ones(n), rng.standard_normal((n, 2))])
    if name == "family_student":  # heavy tails: ν = 4, a few outlying rows
        return X, X @ np.array([1.0, 0.8, -0.5]) + 0.7 * rng.standard_t(4.0, n), COEF
    if name == "family_gamma":  # shape 3
        mu = np.exp(X @ np.array([0.5, 0.4, -0.3]))
        return X, rng.gamma(3.0, mu / 3.0), COEF
    if name == "family_beta":  # precision 8
        mu = expit(X @ np.array([-0.3, 0.6, 0.4]))
        return X, np.clip(rng.beta(mu * 8.0, (1.0 - mu) * 8.0), 1e-6, 1 - 1e-6), COEF
    if name in ("family_weibull", "family_exponential"):  # shape 1.6 (Weibull) or 1; about a third censored
        k = 1.6 if name == "family_weibull" else 1.0
        mu = np.exp(X @ np.array([0.6, 0.5, -0.4]))
        t = mu / gamma_function(1.0 + 1.0 / k) * rng.weibull(k, n)
        c = rng.exponential(3.0 * np.exp(0.6), n)
        return np.column_stack([X, (c < t).astype(float)]), np.minimum(t, c), COEF + ["censored"]
    if name == "family_zip":  # a quarter structural zeros, exposures from 0.5 to 3
        expo = np.log(rng.uniform(0.5, 3.0, n))
        counts = rng.poisson(np.exp(X @ np.array([0.4, 0.5, -0.3]) + expo))
        return (
            np.column_stack([X, expo]),
            np.where(rng.random(n) < 0.25, 0, counts).astype(float),
            COEF + ["log_exposure"],
        )
    if name == "family_zinb":  # a fifth structural zeros, NB2 with φ = 3
        expo = np.log(rng.uniform(0.5, 3.0, n))
        mu = np.exp(X @ np.array([0.6, 0.5, -0.3]) + expo)
        counts = rng.negative_binomial(3.0, 3.0 / (3.0 + mu))
        zeros = rng.random(n) < 0.2
        return np.column_stack([X, expo]), np.where(zeros, 0, counts).astype(float), COEF + ["log_exposure"]
    if name in ("family_hurdle_poisson", "family_hurdle_nb"):  # a third zeros; positive counts truncated at 1
        expo = np.log(rng.uniform(0.5, 3.0, n))
        mu = np.exp(X @ np.array([0.3, 0.5, -0.4]) + expo)
        draw = (
            (lambda: rng.poisson(mu))
            if name == "family_hurdle_poisson"
            else (lambda: rng.negative_binomial(2.0, 2.0 / (2.0 + mu)))
        )
        counts = draw()
        while (counts == 0).any():  # the truncated count law: redraw the zeros
            counts = np.where(counts == 0, draw(), counts)
        zeros = rng.random(n) < 0.35
        return np.column_stack([X, expo]), np.where(zeros, 0, counts).astype(float), COEF + ["log_exposure"]
    if name == "family_cumulative":  # four ordered categories of a logistic latent variable; no intercept column
        z = X[:, 1:] @ np.array([0.9, -0.6]) + rng.logistic(size=n)
        return X[:, 1:], 1.0 + np.digitize(z, [-1.0, 0.3, 1.2]), COEF[1:]
    if name == "family_cumulative_probit":  # four ordered categories of a normal latent variable; no intercept
        z = X[:, 1:] @ np.array([0.8, -0.5]) + rng.standard_normal(n)
        return X[:, 1:], 1.0 + np.digitize(z, [-0.8, 0.2, 1.0]), COEF[1:]
    if name == "family_sigma":  # distributional: log σ = -0.5 + 0.6 x2, the sigma design (1, x2) as columns of X
        y = X @ np.array([1.0, 0.8, -0.5]) + np.exp(-0.5 + 0.6 * X[:, 2]) * rng.standard_normal(n)
        return np.column_stack([X, X[:, [0, 2]]]), y, COEF + ["sigma_(Intercept)", "sigma_x2"]
    raise ValueError(f"unknown problem {name!r}")


def numpyro_model(name: str, X: np.ndarray, columns: tuple[str, ...]):
    """The problem's regression in NumPyro on the pooled data, and its parameters' brms names."""
    cols = list(columns)
    coef = [c for c in COEF if c in cols]
    Xc = jnp.asarray(X[:, [cols.index(c) for c in coef]])
    cens = jnp.asarray(X[:, cols.index("censored")]) if "censored" in cols else None
    offset = jnp.asarray(X[:, cols.index("log_exposure")]) if "log_exposure" in cols else 0.0
    family = name.removeprefix("family_")
    names = [f"beta[{c}]" for c in coef] + {
        "student": ["sigma", "nu"],
        "gamma": ["shape"],
        "beta": ["phi"],
        "weibull": ["shape"],
        "exponential": [],
        "zip": ["zi"],
        "zinb": ["phi", "zi"],
        "hurdle_poisson": ["hu"],
        "hurdle_nb": ["phi", "hu"],
        "cumulative": ["Intercept", "delta[2]", "delta[3]"],
        "cumulative_probit": ["Intercept", "delta[2]", "delta[3]"],
        "sigma": ["b_sigma[(Intercept)]", "b_sigma[x2]"],
    }[family]

    def censored_likelihood(d, y):
        """log f(y) for an event, log S(y) for a right-censored row."""
        assert cens is not None
        log_s = jnp.log1p(-d.cdf(y))
        numpyro.factor("y", jnp.sum(jnp.where(cens == 1.0, log_s, d.log_prob(y))))

    def model(y=None):
        beta = numpyro.sample("beta", dist.Normal(0.0, 10.0).expand([len(coef)]))
        eta = Xc @ beta
        if family == "student":
            sigma = numpyro.sample("sigma", dist.HalfNormal(10.0))
            nu = numpyro.sample("nu", dist.Gamma(2.0, 0.1))
            numpyro.sample("y", dist.StudentT(nu, eta, sigma), obs=y)
        elif family == "gamma":
            shape = numpyro.sample("shape", dist.Gamma(0.01, 0.01))
            numpyro.sample("y", dist.Gamma(shape, shape / jnp.exp(eta)), obs=y)
        elif family == "beta":
            phi = numpyro.sample("phi", dist.Gamma(0.01, 0.01))
            mu = jax.nn.sigmoid(eta)
            numpyro.sample("y", dist.Beta(mu * phi, (1.0 - mu) * phi), obs=y)
        elif family == "weibull":
            shape = numpyro.sample("shape", dist.Gamma(0.01, 0.01))
            scale = jnp.exp(eta - gammaln(1.0 + 1.0 / shape))
            censored_likelihood(dist.Weibull(scale, shape), y)
        elif family == "exponential":
            censored_likelihood(dist.Exponential(jnp.exp(-eta)), y)
        elif family == "zip":
            zi = numpyro.sample("zi", dist.Beta(1.0, 1.0))
            numpyro.sample("y", dist.ZeroInflatedPoisson(zi, jnp.exp(eta + offset)), obs=y)
        elif family in ("hurdle_poisson", "hurdle_nb"):  # P(0) = hu; a count: (1 − hu) p(y)/(1 − p(0))
            mu = jnp.exp(eta + offset)
            if family == "hurdle_nb":
                phi = numpyro.sample("phi", dist.HalfCauchy(10.0))
                counts = dist.NegativeBinomial2(mu, phi)
            else:
                counts = dist.Poisson(mu)
            hu = numpyro.sample("hu", dist.Beta(1.0, 1.0))
            positive = jnp.log1p(-hu) + counts.log_prob(y) - jnp.log1p(-jnp.exp(counts.log_prob(jnp.zeros_like(y))))
            numpyro.factor("y", jnp.sum(jnp.where(y == 0, jnp.log(hu), positive)))
        elif family == "sigma":  # log σ_j = z_jᵀγ, z = (1, x2); γ ~ N(0, 2.5²)
            gamma = numpyro.sample("b_sigma", dist.Normal(0.0, 2.5).expand([2]))
            Z = jnp.asarray(X[:, [cols.index("sigma_(Intercept)"), cols.index("sigma_x2")]])
            numpyro.sample("y", dist.Normal(eta, jnp.exp(Z @ gamma)), obs=y)
        elif family == "cumulative":  # thresholds τ_1 + running sums of the gaps; NumPyro's categories are 0..K−1
            first = numpyro.sample("Intercept", dist.StudentT(3.0, 0.0, 2.5))
            gaps = numpyro.sample("delta", dist.HalfNormal(5.0).expand([2]))
            cutpoints = first + jnp.concatenate([jnp.zeros(1), jnp.cumsum(gaps)])
            numpyro.sample("y", dist.OrderedLogistic(eta, cutpoints), obs=(y - 1).astype(jnp.int32))
        elif family == "cumulative_probit":  # P(y = k) = Φ(τ_k − η) − Φ(τ_{k−1} − η), from log Φ (no NumPyro family)
            first = numpyro.sample("Intercept", dist.StudentT(3.0, 0.0, 2.5))
            gaps = numpyro.sample("delta", dist.HalfNormal(5.0).expand([2]))
            tau = first + jnp.concatenate([jnp.zeros(1), jnp.cumsum(gaps)])
            # ±1e3 for the open ends: Φ is 0 or 1 there to float64, and jax's gradients stay finite (not at ±inf)
            full = jnp.concatenate([jnp.array([-1e3]), tau, jnp.array([1e3])])
            k = jnp.asarray(y).astype(jnp.int32)
            log_hi, log_lo = log_ndtr(full[k] - eta), log_ndtr(full[k - 1] - eta)
            numpyro.factor("y", jnp.sum(log_hi + jnp.log1p(-jnp.exp(log_lo - log_hi))))
        else:
            phi = numpyro.sample("phi", dist.HalfCauchy(10.0))
            zi = numpyro.sample("zi", dist.Beta(1.0, 1.0))
            numpyro.sample("y", dist.ZeroInflatedNegativeBinomial2(jnp.exp(eta + offset), phi, gate=zi), obs=y)

    return model, names


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--draws", type=int, default=6_000)
    ap.add_argument("--warmup", type=int, default=1_500)
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--thinned", type=int, default=400, help="draws kept in the file (all chains together)")
    ap.add_argument("--only", nargs="*", default=None)
    args = ap.parse_args()
    for i, (name, problem) in enumerate(FAMILY_PROBLEMS.items()):
        if args.only and name not in args.only:
            continue
        t0 = time.time()
        X, y, cols = make_data(name)
        write_csv(problem.data_path, X, y, cols)
        X, y, columns = problem.load()  # read back: the reference is of exactly what the tests will read
        model, names = numpyro_model(name, X, columns)
        mcmc = MCMC(
            NUTS(model, target_accept_prob=0.9),
            num_warmup=args.warmup,
            num_samples=args.draws,
            num_chains=args.chains,
            chain_method="vectorized",
            progress_bar=False,
        )
        mcmc.run(jax.random.PRNGKey(4800 + i), y=jnp.asarray(y))
        samples = mcmc.get_samples(group_by_chain=True)
        parts = []  # (chains, draws, size) per parameter: β, then the family's own in `names` order
        for base in dict.fromkeys(n.split("[")[0] for n in names):
            a = np.asarray(samples[base])
            parts.append(a[..., None] if a.ndim == 2 else a)
        draws = np.concatenate(parts, axis=-1)
        tree = azb.from_dict({"posterior": {"theta": draws}}, dims={"theta": ["param"]})
        ess = np.asarray(azs.ess(tree, var_names=["theta"])["theta"].values)
        rhat = np.asarray(azs.rhat(tree, var_names=["theta"])["theta"].values)
        save_reference(problem.reference_path, name, names, draws, ess, rhat, MIN_ESS, args.thinned)
        print(f"{name}: {len(names)} parameters, min ESS {ess.min():.0f}, max R-hat {rhat.max():.4f}, "
              f"{time.time() - t0:.1f}s")  # fmt: skip


if __name__ == "__main__":
    main()
