"""Long-run references for the model posteriors that have no closed form (tests/support/reference_problems.py):
writes each problem's data (CSV, seeded) and a reference from MALA on the pooled data to tests/data/models/.

MALA in Laplace-whitened coordinates (θ = θ* + Lφ, LLᵀ the inverse Hessian of the posterior potential at its mode
θ*), 32 chains vectorised, started overdispersed; the step size is adapted during warm-up towards 57% acceptance, then
fixed. The sampler is written out here on purpose, independent of raysampler's algorithms that the references test.
Stored per coordinate of θ: mean, sd, quantiles, Monte-Carlo standard error of the mean, bulk ESS and R-hat
(arviz-stats), plus a thinned subset of the draws. The run stops with an error if min ESS < 4000 or max R-hat > 1.01.

    python scripts/make_model_references.py [--draws 20000] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

import numpy as np
from scipy import optimize
from scipy.special import expit

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import arviz_stats as azs  # noqa: E402
from support.reference_problems import DATA_DIR, PROBLEMS  # noqa: E402

import raysampler as rs  # noqa: E402

PROBS = np.array([0.05, 0.25, 0.5, 0.75, 0.95])
MIN_ESS, MAX_RHAT = 4000.0, 1.01


# ----------------------------------------------------------------------------------------------------- data


def _features(rng: np.random.Generator, n: int, k: int) -> tuple[np.ndarray, list[str]]:
    return np.column_stack([np.ones(n), rng.standard_normal((n, k))]), ["(Intercept)"] + [
        f"x{j}" for j in range(1, k + 1)
    ]


def make_data(name: str) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(X, y, X's column names) of a problem, from a fixed seed."""
    rng = np.random.default_rng(20260 + list(PROBLEMS).index(name))
    if name == "linear_per_coef":
        X, cols = _features(rng, 50, 3)
        y = X @ np.array([1.0, 0.8, -0.5, 0.3]) + rng.standard_normal(50)
        return X, y, cols
    if name == "logistic_student_t":
        X, cols = _features(rng, 80, 3)
        y = (rng.random(80) < expit(X @ np.array([0.5, 3.0, -1.0, 0.0]))).astype(float)
        return X, y, cols
    if name == "poisson_offset":
        X, cols = _features(rng, 80, 2)
        expo = np.log(rng.uniform(0.5, 5.0, 80))
        y = rng.poisson(np.exp(X @ np.array([-0.5, 0.4, -0.3]) + expo)).astype(float)
        return np.column_stack([X, expo]), y, cols + ["log_exposure"]
    if name == "binomial_trials":
        X, cols = _features(rng, 40, 3)
        m = rng.integers(1, 21, 40)
        y = rng.binomial(m, expit(X @ np.array([-0.3, 0.8, -0.5, 0.2]))).astype(float)
        return np.column_stack([m.astype(float), X]), y, ["trials"] + cols
    if name == "negative_binomial":
        X, cols = _features(rng, 100, 2)
        expo = np.log(rng.uniform(0.5, 3.0, 100))
        mu = np.exp(X @ np.array([0.8, 0.5, -0.4]) + expo)
        y = rng.negative_binomial(2.0, 2.0 / (2.0 + mu)).astype(float)
        return np.column_stack([X, expo]), y, cols + ["log_exposure"]
    raise ValueError(f"unknown problem {name!r}")


def write_csv(path: pathlib.Path, X: np.ndarray, y: np.ndarray, columns: list[str]) -> None:
    np.savetxt(path, np.column_stack([y, X]), delimiter=",", header=",".join(["y"] + columns), comments="", fmt="%.17g")


# ----------------------------------------------------------------------------------------------------- MALA


def mala(model, X, y, *, chains: int, draws: int, warmup: int, seed: int) -> np.ndarray:
    """Draws (chains, draws, d) of θ from the posterior ∝ exp(−U(θ) − prior potential(θ)) on pooled data."""
    prior = model.prior()
    d = model.dim

    def value_grad(theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        u, g = model.potential_and_grad(X, y, theta)
        return u + prior.potential(theta), g + prior.grad(theta)

    fit = optimize.minimize(
        lambda t: tuple(a[0] for a in value_grad(t[None, :])),
        np.zeros(d),
        jac=True,
        method="BFGS",
        options={"gtol": 1e-8, "maxiter": 10_000},
    )
    mode = fit.x
    H = model.hessian(X, y, mode) + prior.hvp(np.repeat(mode[None, :], d, 0), np.eye(d))
    L = np.linalg.cholesky(np.linalg.inv(0.5 * (H + H.T)))

    def in_phi(phi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        u, g = value_grad(mode + phi @ L.T)
        return u, g @ L

    rng = np.random.default_rng(seed)
    phi = 1.5 * rng.standard_normal((chains, d))
    u, g = in_phi(phi)
    h = 1.0 / d ** (1 / 3)
    out = np.empty((draws, chains, d))
    for it in range(warmup + draws):
        prop = phi - h * g + np.sqrt(2 * h) * rng.standard_normal(phi.shape)
        up, gp = in_phi(prop)
        fwd = prop - phi + h * g
        bwd = phi - prop + h * gp
        log_alpha = u - up + (np.sum(fwd * fwd, 1) - np.sum(bwd * bwd, 1)) / (4 * h)
        acc = np.log(rng.random(chains)) < np.where(np.isfinite(log_alpha), log_alpha, -np.inf)
        phi = np.where(acc[:, None], prop, phi)
        u = np.where(acc, up, u)
        g = np.where(acc[:, None], gp, g)
        if it < warmup:
            h *= np.exp(0.05 * (np.mean(np.minimum(1.0, np.exp(np.minimum(log_alpha, 0.0)))) - 0.574))
        else:
            out[it - warmup] = mode + phi @ L.T
    return out.transpose(1, 0, 2)


def save_reference(
    path: pathlib.Path,
    name: str,
    names: list[str],
    draws: np.ndarray,
    ess: np.ndarray,
    rhat: np.ndarray,
    min_ess: float,
    thinned: int,
) -> None:
    """Check convergence (SystemExit if min ESS < `min_ess` or max R-hat > MAX_RHAT), then store the summaries of
    draws (chains, draws, d) and `thinned` of them (all chains together) as the tests read them (`reference`)."""
    if ess.min() < min_ess or rhat.max() > MAX_RHAT:
        raise SystemExit(f"{name}: min ESS {ess.min():.0f}, max R-hat {rhat.max():.4f}: run longer (--draws)")
    chains, n = draws.shape[:2]
    flat = draws.reshape(-1, draws.shape[-1])
    sd = flat.std(axis=0)
    step = max(1, n * chains // thinned)
    np.savez_compressed(
        path,
        names=np.array(names),
        mean=flat.mean(axis=0),
        sd=sd,
        quantiles=np.quantile(flat, PROBS, axis=0),
        probs=PROBS,
        mcse_mean=sd / np.sqrt(ess),
        ess_bulk=ess,
        rhat=rhat,
        thinned=draws[:, ::step, :],
        chains=chains,
        draws=n,
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--draws", type=int, default=20_000)
    ap.add_argument("--warmup", type=int, default=3_000)
    ap.add_argument("--chains", type=int, default=32)
    ap.add_argument("--thinned", type=int, default=4_000, help="draws kept in the file (all chains together)")
    ap.add_argument("--only", nargs="*", default=None)
    args = ap.parse_args()
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    for i, (name, problem) in enumerate(PROBLEMS.items()):
        if args.only and name not in args.only:
            continue
        t0 = time.time()
        X, y, cols = make_data(name)
        write_csv(problem.data_path, X, y, cols)
        X, y, columns = problem.load()  # read back: the reference is of exactly what the tests will read
        model = problem.bound()
        draws = mala(model, X, y, chains=args.chains, draws=args.draws, warmup=args.warmup, seed=1000 + i)
        names = model.param_names()
        res = rs.Result(draws, names)
        ess = res.ess("bulk")
        rhat = np.asarray(azs.rhat(res.to_arviz(), var_names=["theta"])["theta"].values)
        save_reference(problem.reference_path, name, names, draws, ess, rhat, MIN_ESS, args.thinned)
        print(f"{name}: d={model.dim}, min ESS {ess.min():.0f}, max R-hat {rhat.max():.4f}, {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
