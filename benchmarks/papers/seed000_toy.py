"""Seed 000 sec. 5.1: the conjugate Gaussian toy, d = 2, n = 20,000, b = 10, N ∈ {1, 10} local steps.

Data: raysampler.datasets.load("gaussian_toy", seed=0) (y_j ~ N(θ_true, Σ1), Σ1 = [[1, .5], [.5, 2]], θ_true ~ N(0, I)),
split contiguously into b = 10 shards of 2,000 rows. Model: Gaussian(prior_scale=1, noise_cov=Σ1) (prior N(0, I)).
Samplers (executor="local", CHAINS chains, ROUNDS rounds in total of which ROUNDS // 10 are burn-in):
  * DG-LMC, paper rules: preconditioner=None, ρ_i = 1/(5M_i), γ_i = 0.25ρ_i/(ρ_iM_i + 1), n_local = N (LMC steps).
  * DG-LMC, raysampler defaults (Laplace preconditioning, Laplace-MH local kernel, ρ from the bias budget), n_local = N.
  * D-SGLD, batch size n/(10b) = 200: N = 1 -> algorithm "dsgld", topology "complete" (Metropolis W = 11ᵀ/b, i.e.
    exact averaging every step). raysampler's dsgld has no local-steps option, so for N = 10 we use "fald" with
    tau = 0 (independent noise per agent) and p_comm = 1/N: identical to D-SGLD on the complete graph except that the
    number of local steps between averages is Geometric(1/N) (mean N) instead of exactly N.
    Step size η: chosen so that the exact stationary law (mean and covariance, minibatch-gradient noise included)
    of the agent average at N = 1 (LMC on U with step η/b plus the minibatch error) has the same W2 to the
    posterior as DG-LMC's exact law at N = 1 (exact.dglmc_lmc_law); the same η is used at N = 10.

    python benchmarks/papers/seed000_toy.py [ROUNDS (default 10000)]

Writes benchmarks/papers/results/seed000_toy.json and docs/seed000_toy.png.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import _path  # noqa: F401  (puts benchmarks/ on sys.path for harness)
import harness
import numpy as np

import raysampler as rs
from raysampler import datasets
from raysampler.models import Gaussian
from raysampler.testing import exact

CHAINS = 2
B, N_ROWS, MAXLAG = 10, 20_000, 50
BATCH = N_ROWS // (10 * B)  # D-SGLD's minibatch per agent
KINDS = ("DG-LMC paper", "DG-LMC default", "D-SGLD")


def acf(x, maxlag=MAXLAG):
    """ACF of (chains, draws) averaged over chains."""
    out = []
    for c in x:
        c = c - c.mean()
        v = np.dot(c, c) / len(c)
        out.append([1.0] + [np.dot(c[:-k], c[k:]) / len(c) / v for k in range(1, maxlag + 1)])
    return np.mean(out, axis=0)


def arguments() -> argparse.ArgumentParser:
    ap = harness.parser(__doc__, __file__)
    ap.add_argument("rounds", nargs="?", type=int, default=10_000, help="rounds in total, burn-in included")
    return ap


def measure(args: argparse.Namespace) -> harness.Report:
    rounds, burn = args.rounds, args.rounds // 10
    X, y = datasets.load("gaussian_toy", seed=0, n=N_ROWS, d=2)
    S1 = datasets.gaussian_toy_noise_cov(2)
    model = Gaussian(prior_scale=1.0, noise_cov=S1, n_features=2)
    shards = rs.shard(X, y, B)
    loaded = [s.load() for s in shards]
    m_post, S_post = model.posterior(loaded)
    law = ExactLaws(model, loaded, S1, m_post, S_post)
    print(
        f"W2 target (DG-LMC N=1 exact law) = {law.w2_target:.4g}; M_i = {law.M[0]:.1f}, rho_i = {law.rho[0]:.3g}, "
        f"gamma_i = {law.gamma[0]:.3g}, D-SGLD eta = {law.eta:.4g}",
        flush=True,
    )
    results: dict[str, Any] = {}
    draws = {}
    for name, (alg, kw) in samplers(law).items():
        t0 = time.perf_counter()
        res = rs.sample(
            model,
            shards,
            alg,
            chains=CHAINS,
            num_rounds=rounds - burn,
            burn_in=burn,
            seed=0,
            executor="local",
            progress=False,
            **kw,
        )
        draws[name] = res.draws
        results[name] = describe(alg, kw, res.draws, m_post, S_post) | {"wall_s": round(time.perf_counter() - t0, 1)}
        a = results[name]["acf_theta1"]
        print(
            f"{name}: W2 = {results[name]['w2']:.4g}, ACF lag1/10/50 = {a[1]:.3f}/{a[10]:.3f}/{a[50]:.3f}, "
            f"{time.perf_counter() - t0:.1f}s",
            flush=True,
        )
    results["exact_posterior"] = {"mean": m_post.tolist(), "cov": S_post.tolist()}
    results["exact_dglmc_paper_law"] = {
        str(N): {"mean": l[0].tolist(), "cov": l[1].tolist(), "w2": exact.gaussian_w2(l[0], l[1], m_post, S_post)}
        for N, l in law.dglmc.items()
    }
    results["settings"] = {
        "rounds_total": rounds,
        "burn_in": burn,
        "chains": CHAINS,
        "b": B,
        "n": N_ROWS,
        "rho_i": float(law.rho[0]),
        "gamma_i": float(law.gamma[0]),
        "M_i": float(law.M[0]),
        "dsgld_step": law.eta,
        "w2_target_dglmc_N1_exact": law.w2_target,
        "dsgld_exact_law_w2_N1": exact.gaussian_w2(*law.sgld(law.eta), m_post, S_post),
        "dsgld_batch": BATCH,
    }
    plot(results, draws, m_post, S_post, rounds, harness.plot_path(args, "seed000_toy.png"))
    table = harness.Table(
        f"Seed 000 sec. 5.1 toy: W2 to the exact posterior and ACF of θ1 ({rounds} rounds incl. {burn} burn-in)",
        ["run", "W2", "ACF lag 1", "ACF lag 10", "ACF lag 50", "wall s"],
        [
            [name, r["w2"], r["acf_lag1"], r["acf_lag10"], r["acf_lag50"], r["wall_s"]]
            for name, r in results.items()
            if name in draws
        ],
    )
    return harness.Report("seed000_toy", results, [table])


def describe(alg, kw, th, m_post, S_post):
    """A run's record: its parameters, the Gaussian fitted to its draws, W2 to the posterior, the ACF of θ1."""
    flat = th.reshape(-1, 2)
    mu, S = flat.mean(0), np.cov(flat.T)
    a = acf(th[:, :, 0])
    return {
        "algorithm": alg,
        "params": {k: (v if not isinstance(v, list) else v[0]) for k, v in kw.items()},
        "mean": mu.tolist(),
        "cov": S.tolist(),
        "w2": exact.gaussian_w2(mu, S, m_post, S_post),
        "acf_theta1": a.tolist(),
        "acf_lag1": float(a[1]),
        "acf_lag10": float(a[10]),
        "acf_lag50": float(a[50]),
    }


class ExactLaws:
    """The paper's DG-LMC parameters, its exact stationary laws for N = 1 and 10, and the D-SGLD step η whose exact
    law at N = 1 has the same W2 to the posterior as DG-LMC's (bisection)."""

    def __init__(self, model: Gaussian, loaded: list, S1: np.ndarray, m_post: np.ndarray, S_post: np.ndarray):
        P1 = np.linalg.inv(S1)
        Ps = [len(yi) * P1 for _, yi in loaded]
        ms = [yi.mean(0) for _, yi in loaded]
        P0, m0 = np.eye(2), np.zeros(2)
        m_chk, S_chk = exact.gaussian_posterior(Ps, ms, P0, m0)
        assert np.allclose(m_chk, m_post) and np.allclose(S_chk, S_post)
        self.M = np.array([model.smoothness(*s) for s in loaded])
        self.rho = 1.0 / (5.0 * self.M)
        self.gamma = 0.25 * self.rho / (self.rho * self.M + 1.0)
        self.dglmc = {N: exact.dglmc_lmc_law(Ps, ms, P0, m0, self.rho, self.gamma, [N] * B) for N in (1, 10)}
        self.w2_target = exact.gaussian_w2(*self.dglmc[1], m_post, S_post)
        # On the complete graph the average follows x' = x − hP(x − m) + √(2h)ξ + h·(minibatch error), h = η/b,
        # whose covariance is Σ_i (n_i²/B)·P1 C_i P1 (C_i: shard i's empirical covariance of y; with replacement).
        self.P_tot = P0 + sum(Ps)
        self.m_post = m_post
        self.V_sg = sum((len(yi) ** 2 / BATCH) * P1 @ np.cov(yi.T, bias=True) @ P1 for _, yi in loaded)
        lo, hi = 1e-12, 1.9 * B / np.linalg.eigvalsh(self.P_tot)[-1]
        for _ in range(200):
            mid = np.sqrt(lo * hi)
            if exact.gaussian_w2(*self.sgld(mid), m_post, S_post) < self.w2_target:
                lo = mid
            else:
                hi = mid
        self.eta = float(lo)

    def sgld(self, eta: float) -> tuple[np.ndarray, np.ndarray]:
        """Exact stationary law of the D-SGLD agent average at N = 1 with step η."""
        h = eta / B
        P = self.P_tot
        return exact.stationary_law(np.eye(2) - h * P, h * P @ self.m_post, 2 * h * np.eye(2) + h * h * self.V_sg)


def samplers(law: ExactLaws) -> dict[str, tuple[str, dict[str, Any]]]:
    runs: dict[str, tuple[str, dict[str, Any]]] = {}
    for N in (1, 10):
        paper = dict(preconditioner=None, rho=list(law.rho), gamma=list(law.gamma), n_local=N)
        runs[f"DG-LMC paper N={N}"] = ("dglmc", paper)
        runs[f"DG-LMC default N={N}"] = ("dglmc", dict(n_local=N))
        if N == 1:
            runs[f"D-SGLD N={N}"] = ("dsgld", dict(step_size=law.eta, topology="complete", batch_size=BATCH))
        else:
            runs[f"D-SGLD N={N}"] = ("fald", dict(step_size=law.eta, p_comm=1.0 / N, tau=0.0, batch_size=BATCH))
    return runs


def plot(results, draws, m_post, S_post, rounds, path):
    plt = harness.pyplot()
    if plt is None:
        return
    sd = np.sqrt(np.diag(S_post))
    g1 = np.linspace(m_post[0] - 4 * sd[0], m_post[0] + 4 * sd[0], 120)
    g2 = np.linspace(m_post[1] - 4 * sd[1], m_post[1] + 4 * sd[1], 120)
    G1, G2 = np.meshgrid(g1, g2)
    Z = np.stack([G1 - m_post[0], G2 - m_post[1]], -1)
    dens = np.exp(-0.5 * np.einsum("...i,ij,...j->...", Z, np.linalg.inv(S_post), Z))
    fig, axes = plt.subplots(4, 2, figsize=(10, 17))
    for c, N in enumerate((1, 10)):
        for r, kind in enumerate(KINDS):
            ax = axes[r, c]
            name = f"{kind} N={N}"
            f = draws[name].reshape(-1, 2)
            ax.hist2d(f[:, 0], f[:, 1], bins=[g1, g2], cmap="Blues" if "DG" in kind else "Greens")
            ax.contour(G1, G2, dens, levels=np.exp(-0.5 * np.array([4.0, 1.0, 0.25])), colors="red")
            ax.set_title(f"{name}: W2 = {results[name]['w2']:.3g}", fontsize=9)
        ax = axes[3, c]
        for kind in KINDS:
            ax.plot(results[f"{kind} N={N}"]["acf_theta1"], label=kind)
        ax.axhline(0, color="k", lw=0.5)
        ax.set_title(f"ACF of θ1, N = {N}")
        ax.set_xlabel("lag")
        ax.legend(fontsize=8)
    fig.suptitle(
        f"Seed 000 sec. 5.1 toy (b = {B}, n = {N_ROWS}): red = exact posterior contours at Mahalanobis "
        f"distance 0.5, 1, 2; {rounds} rounds incl. {rounds // 10} burn-in, {CHAINS} chains",
        fontsize=9,
    )
    fig.tight_layout(rect=(0, 0, 1, 0.985))
    fig.savefig(path, dpi=100)
    print(f"plot written to {path}", flush=True)


def main(argv: list[str] | None = None) -> None:
    harness.run(arguments(), measure, argv)


if __name__ == "__main__":
    main()
