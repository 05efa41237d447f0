"""NUTS references for the group-effects problems (tests/support/reference_problems.py, GROUP_PROBLEMS): writes each
problem's data (CSV, seeded) and a reference from NumPyro's NUTS on the pooled data to tests/data/models/.

The NumPyro model is written out here from the model's definition, independently of raysampler's own potentials:
β ~ the problem's Normal prior, sd ~ HalfNormal(1) per effect, η_g ~ N(0, I), r_g = sd ⊙ η_g (non-centred; with
correlated effects r_g = diag(sd) L η_g, L the Cholesky factor of Ω ~ LKJ(1), NumPyro's LKJCholesky), the
family's likelihood on x·β + z·r_g (+ offset); linear regression adds σ ~ HalfNormal(10). Stored per reported
parameter (brms names, natural scale: sd and σ, not their logs): mean, sd, quantiles, Monte-Carlo standard error of
the mean, bulk ESS and R-hat (arviz-stats), plus a thinned subset of the draws. The run stops with an error if
min ESS < 2000 or max R-hat > 1.01. Needs the `jax` extra.

    python scripts/make_group_references.py [--draws 5000] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

import numpy as np
from scipy.special import expit

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import arviz_base as azb  # noqa: E402
import arviz_stats as azs  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpyro  # noqa: E402
import numpyro.distributions as dist  # noqa: E402
from make_model_references import save_reference  # noqa: E402  (scripts/ is on sys.path: the script's own folder)
from numpyro.infer import MCMC, NUTS  # noqa: E402
from support.reference_problems import DATA_DIR, GROUP_PROBLEMS, GroupProblem  # noqa: E402

jax.config.update("jax_enable_x64", True)

MIN_ESS = 2000.0


def make_data(name: str) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(X, y, X's column names) of a problem, from a fixed seed; column "g" holds the group labels 1..G."""
    rng = np.random.default_rng(31000 + list(GROUP_PROBLEMS).index(name))

    def groups(G: int, lo: int, hi: int) -> np.ndarray:
        return np.repeat(np.arange(G), rng.integers(lo, hi + 1, G))

    if name == "hier_linear":  # varying intercept and slope, σ unknown
        g = groups(20, 6, 20)
        n, x = g.size, rng.standard_normal(g.size)
        r = rng.normal(size=(20, 2)) * [0.8, 0.4]
        y = 1.0 + 0.5 * x + r[g, 0] + r[g, 1] * x + 0.8 * rng.standard_normal(n)
        return np.column_stack([np.ones(n), x, g + 1.0]), y, ["(Intercept)", "x", "g"]
    if name in ("hier_logistic", "hier_funnel"):  # the funnel: a few rows per group, weak data on each effect
        G, lo, hi = (30, 10, 40) if name == "hier_logistic" else (40, 2, 5)
        g = groups(G, lo, hi)
        n, x = g.size, rng.standard_normal(g.size)
        r = 0.7 * rng.standard_normal(G)
        y = (rng.random(n) < expit(-0.3 + 0.8 * x + r[g])).astype(float)
        return np.column_stack([np.ones(n), x, g + 1.0]), y, ["(Intercept)", "x", "g"]
    if name == "hier_correlated":  # a varying intercept and slope, correlated 0.6
        g = groups(48, 20, 45)
        n, x = g.size, rng.standard_normal(g.size)
        cov = np.array([[0.8**2, 0.6 * 0.8 * 0.5], [0.6 * 0.8 * 0.5, 0.5**2]])
        r = rng.multivariate_normal(np.zeros(2), cov, 48)
        y = (rng.random(n) < expit(-0.3 + 0.8 * x + r[g, 0] + r[g, 1] * x)).astype(float)
        return np.column_stack([np.ones(n), x, g + 1.0]), y, ["(Intercept)", "x", "g"]
    if name in ("hier_poisson", "hier_many"):  # hier_many: 400 groups (100 per shard of four)
        G, lo, hi = (25, 5, 30) if name == "hier_poisson" else (400, 3, 8)
        g = groups(G, lo, hi)
        n, x = g.size, rng.standard_normal(g.size)
        expo = np.log(rng.uniform(0.5, 3.0, n))
        r = 0.5 * rng.standard_normal(G)
        y = rng.poisson(np.exp(0.2 + 0.4 * x + r[g] + expo)).astype(float)
        return np.column_stack([np.ones(n), x, expo, g + 1.0]), y, ["(Intercept)", "x", "log_exposure", "g"]
    raise ValueError(f"unknown problem {name!r}")


def write_csv(path: pathlib.Path, X: np.ndarray, y: np.ndarray, columns: list[str]) -> None:
    np.savetxt(path, np.column_stack([y, X]), delimiter=",", header=",".join(["y"] + columns), comments="", fmt="%.17g")


def numpyro_model(problem: GroupProblem, X: np.ndarray, columns: tuple[str, ...]):
    """The problem's hierarchical GLM in NumPyro, on the pooled data."""
    cols = list(columns)
    coef = [c for c in cols if c not in ("g", "log_exposure")]
    Xc = jnp.asarray(X[:, [cols.index(c) for c in coef]])
    labels, code = np.unique(X[:, cols.index("g")], return_inverse=True)
    G = labels.size
    effects = [np.ones(X.shape[0])] + [X[:, cols.index(s)] for s in problem.slopes]
    Z = jnp.asarray(np.column_stack(effects))
    offset = jnp.asarray(X[:, cols.index("log_exposure")]) if "log_exposure" in cols else 0.0
    code_j = jnp.asarray(code)

    def model(y=None):
        beta = numpyro.sample("beta", dist.Normal(0.0, problem.coef_scale).expand([len(coef)]))
        sd = numpyro.sample("sd", dist.HalfNormal(1.0).expand([Z.shape[1]]))
        eta = numpyro.sample("eta", dist.Normal(0.0, 1.0).expand([G, Z.shape[1]]))
        if problem.correlated:  # r_g = diag(sd) L η_g, L the Cholesky factor of Ω ~ LKJ(1)
            L = numpyro.sample("L", dist.LKJCholesky(Z.shape[1], 1.0))
            numpyro.deterministic("cor", (L @ L.T)[jnp.triu_indices(Z.shape[1], 1)])
            r = numpyro.deterministic("r", (eta @ L.T) * sd)
        else:
            r = numpyro.deterministic("r", sd * eta)
        lin = Xc @ beta + jnp.sum(Z * r[code_j], axis=1) + offset
        if problem.family == "linear":
            sigma = numpyro.sample("sigma", dist.HalfNormal(10.0))
            numpyro.sample("y", dist.Normal(lin, sigma), obs=y)
        elif problem.family == "logistic":
            numpyro.sample("y", dist.Bernoulli(logits=lin), obs=y)
        else:
            numpyro.sample("y", dist.Poisson(jnp.exp(lin)), obs=y)

    effect_names = ["(Intercept)", *problem.slopes]
    names = [f"beta[{c}]" for c in coef]
    names += ["sigma"] if problem.family == "linear" else []
    names += [f"sd_g[{e}]" for e in effect_names]
    if problem.correlated:
        q = len(effect_names)
        names += [f"cor_g[{effect_names[a]},{effect_names[b]}]" for a in range(q) for b in range(a + 1, q)]
    names += [f"r_g[{int(v)},{e}]" for v in labels for e in effect_names]
    return model, names


def flat_draws(samples: dict, family: str) -> np.ndarray:
    """NUTS draws (chains, draws, ·) in `names` order: β, (σ), sd, (the correlations, pairs in order a < b), r (groups
    × effects, row-major)."""
    c, n = samples["beta"].shape[:2]
    parts = [samples["beta"]]
    if family == "linear":
        parts.append(samples["sigma"][..., None])
    parts += [samples["sd"]] + ([samples["cor"]] if "cor" in samples else []) + [samples["r"].reshape(c, n, -1)]
    return np.concatenate([np.asarray(p) for p in parts], axis=-1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--draws", type=int, default=5_000)
    ap.add_argument("--warmup", type=int, default=1_500)
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--thinned", type=int, default=400, help="draws kept in the file (all chains together)")
    ap.add_argument("--only", nargs="*", default=None)
    args = ap.parse_args()
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    for i, (name, problem) in enumerate(GROUP_PROBLEMS.items()):
        if args.only and name not in args.only:
            continue
        t0 = time.time()
        X, y, cols = make_data(name)
        write_csv(problem.data_path, X, y, cols)
        X, y, columns = problem.load()  # read back: the reference is of exactly what the tests will read
        model, names = numpyro_model(problem, X, columns)
        mcmc = MCMC(
            NUTS(model, target_accept_prob=0.9),
            num_warmup=args.warmup,
            num_samples=args.draws,
            num_chains=args.chains,
            chain_method="vectorized",
            progress_bar=False,
        )
        mcmc.run(jax.random.PRNGKey(2000 + i), y=jnp.asarray(y))
        draws = flat_draws(mcmc.get_samples(group_by_chain=True), problem.family)
        tree = azb.from_dict({"posterior": {"theta": draws}}, dims={"theta": ["param"]})
        ess = np.asarray(azs.ess(tree, var_names=["theta"])["theta"].values)
        rhat = np.asarray(azs.rhat(tree, var_names=["theta"])["theta"].values)
        save_reference(problem.reference_path, name, names, draws, ess, rhat, MIN_ESS, args.thinned)
        print(f"{name}: {len(names)} parameters, min ESS {ess.min():.0f}, max R-hat {rhat.max():.4f}, "
              f"{time.time() - t0:.1f}s")  # fmt: skip


if __name__ == "__main__":
    main()
