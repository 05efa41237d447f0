"""Seed 000 sec. 5.1: the conjugate Gaussian toy, d = 2, n = 20,000, b = 10, N ∈ {1, 10} local steps.

Data: raysampler.datasets.load("gaussian_toy", seed=0) (y_j ~ N(θ_true, Σ1), Σ1 = [[1, .5], [.5, 2]], θ_true ~ N(0, I)),
split contiguously into b = 10 shards of 2,000 rows. Model: Gaussian(prior_scale=1, noise_cov=Σ1) (prior N(0, I)).
Samplers (executor="local", CHAINS chains, ROUNDS rounds in total of which BURN are burn-in):
  * DG-LMC, paper rules: preconditioner=None, ρ_i = 1/(5M_i), γ_i = 0.25ρ_i/(ρ_iM_i + 1), n_local = N (LMC steps).
  * DG-LMC, raysampler defaults (Laplace preconditioning, Laplace-MH local kernel, ρ from the bias budget), n_local = N.
  * D-SGLD, batch size n/(10b) = 200: N = 1 -> algorithm "dsgld", topology "complete" (Metropolis W = 11ᵀ/b, i.e.
    exact averaging every step). raysampler's dsgld has no local-steps option, so for N = 10 we use "fald" with
    tau = 0 (independent noise per agent) and p_comm = 1/N: identical to D-SGLD on the complete graph except that the
    number of local steps between averages is Geometric(1/N) (mean N) instead of exactly N.
    Step size η: chosen so that the exact stationary law (mean and covariance, minibatch-gradient noise included)
    of the agent average at N = 1 (LMC on U with step η/b plus the minibatch error) has the same W2 to the
    posterior as DG-LMC's exact law at N = 1 (exact.dglmc_lmc_law); the same η is used at N = 10.
Usage: python benchmarks/seed000_toy.py [ROUNDS (default 10000)]
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

import raysampler as rs
from raysampler import datasets, exact
from raysampler.models import Gaussian

ROOT = Path(__file__).resolve().parents[1]
ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
BURN = ROUNDS // 10
CHAINS = 2
B, N_ROWS, MAXLAG = 10, 20_000, 50


def acf(x, maxlag=MAXLAG):
    """ACF of (chains, draws) averaged over chains."""
    out = []
    for c in x:
        c = c - c.mean()
        v = np.dot(c, c) / len(c)
        out.append([1.0] + [np.dot(c[:-k], c[k:]) / len(c) / v for k in range(1, maxlag + 1)])
    return np.mean(out, axis=0)


def lmc_law(P, mean, h):
    """Stationary law of x' = x − hP(x − mean) + √(2h)ξ: N(mean, (P(I − hP/2))⁻¹)."""
    d = P.shape[0]
    return mean, np.linalg.inv(P @ (np.eye(d) - 0.5 * h * P))


def main():
    X, y = datasets.load("gaussian_toy", seed=0, n=N_ROWS, d=2)
    S1 = datasets.gaussian_toy_noise_cov(2)
    model = Gaussian(prior_scale=1.0, noise_cov=S1, n_features=2)
    shards = rs.shard(X, y, B)
    loaded = [s.load() for s in shards]
    m_post, S_post = model.posterior(loaded)
    P1 = np.linalg.inv(S1)
    Ps = [len(yi) * P1 for _, yi in loaded]
    ms = [yi.mean(0) for _, yi in loaded]
    P0, m0 = np.eye(2), np.zeros(2)
    m_chk, S_chk = exact.gaussian_posterior(Ps, ms, P0, m0)
    assert np.allclose(m_chk, m_post) and np.allclose(S_chk, S_post)

    M = np.array([model.smoothness(*s) for s in loaded])
    rho = 1.0 / (5.0 * M)
    gamma = 0.25 * rho / (rho * M + 1.0)
    exact_laws = {N: exact.dglmc_lmc_law(Ps, ms, P0, m0, rho, gamma, [N] * B) for N in (1, 10)}
    w2_target = exact.gaussian_w2(*exact_laws[1], m_post, S_post)
    # bisection for the D-SGLD step: W2(exact stationary law of the agent average, posterior) = W2(DG-LMC N = 1).
    # On the complete graph the average follows x' = x − hP(x − m) + √(2h)ξ + h·(minibatch error), h = η/b, whose
    # covariance is Σ_i (n_i²/B)·P1 C_i P1 (C_i: shard i's empirical covariance of y; sampling with replacement).
    P_tot = P0 + sum(Ps)
    Bsz = N_ROWS // (10 * B)
    V_sg = sum((len(yi) ** 2 / Bsz) * P1 @ np.cov(yi.T, bias=True) @ P1 for _, yi in loaded)

    def sgld_law(eta):
        h = eta / B
        return exact.stationary_law(np.eye(2) - h * P_tot, h * P_tot @ m_post, 2 * h * np.eye(2) + h * h * V_sg)

    lo, hi = 1e-12, 1.9 * B / np.linalg.eigvalsh(P_tot)[-1]
    for _ in range(200):
        mid = np.sqrt(lo * hi)
        if exact.gaussian_w2(*sgld_law(mid), m_post, S_post) < w2_target:
            lo = mid
        else:
            hi = mid
    eta = float(lo)
    print(
        f"W2 target (DG-LMC N=1 exact law) = {w2_target:.4g}; M_i = {M[0]:.1f}, rho_i = {rho[0]:.3g}, "
        f"gamma_i = {gamma[0]:.3g}, D-SGLD eta = {eta:.4g}",
        flush=True,
    )

    runs = {}
    for N in (1, 10):
        runs[f"DG-LMC paper N={N}"] = ("dglmc", dict(preconditioner=None, rho=list(rho), gamma=list(gamma), n_local=N))
        runs[f"DG-LMC default N={N}"] = ("dglmc", dict(n_local=N))
        if N == 1:
            runs[f"D-SGLD N={N}"] = ("dsgld", dict(step_size=eta, topology="complete", batch_size=N_ROWS // (10 * B)))
        else:
            runs[f"D-SGLD N={N}"] = (
                "fald",
                dict(step_size=eta, p_comm=1.0 / N, tau=0.0, batch_size=N_ROWS // (10 * B)),
            )

    results, draws = {}, {}
    for name, (alg, kw) in runs.items():
        t0 = time.perf_counter()
        res = rs.sample(
            model,
            shards,
            alg,
            chains=CHAINS,
            num_rounds=ROUNDS - BURN,
            burn_in=BURN,
            seed=0,
            executor="local",
            progress=False,
            **kw,
        )
        th = res.draws
        draws[name] = th
        flat = th.reshape(-1, 2)
        mu, S = flat.mean(0), np.cov(flat.T)
        a = acf(th[:, :, 0])
        results[name] = {
            "algorithm": alg,
            "params": {k: (v if not isinstance(v, list) else v[0]) for k, v in kw.items()},
            "mean": mu.tolist(),
            "cov": S.tolist(),
            "w2": exact.gaussian_w2(mu, S, m_post, S_post),
            "acf_theta1": a.tolist(),
            "acf_lag1": float(a[1]),
            "acf_lag10": float(a[10]),
            "acf_lag50": float(a[50]),
            "wall_s": round(time.perf_counter() - t0, 1),
        }
        print(
            f"{name}: W2 = {results[name]['w2']:.4g}, ACF lag1/10/50 = {a[1]:.3f}/{a[10]:.3f}/{a[50]:.3f}, "
            f"{time.perf_counter() - t0:.1f}s",
            flush=True,
        )
    results["exact_posterior"] = {"mean": m_post.tolist(), "cov": S_post.tolist()}
    results["exact_dglmc_paper_law"] = {
        str(N): {"mean": l[0].tolist(), "cov": l[1].tolist(), "w2": exact.gaussian_w2(l[0], l[1], m_post, S_post)}
        for N, l in exact_laws.items()
    }
    results["settings"] = {
        "rounds_total": ROUNDS,
        "burn_in": BURN,
        "chains": CHAINS,
        "b": B,
        "n": N_ROWS,
        "rho_i": float(rho[0]),
        "gamma_i": float(gamma[0]),
        "M_i": float(M[0]),
        "dsgld_step": eta,
        "w2_target_dglmc_N1_exact": w2_target,
        "dsgld_exact_law_w2_N1": exact.gaussian_w2(*sgld_law(eta), m_post, S_post),
        "dsgld_batch": N_ROWS // (10 * B),
    }
    (ROOT / "benchmarks/results").mkdir(parents=True, exist_ok=True)
    (ROOT / "benchmarks/results/seed000_toy.json").write_text(json.dumps(results, indent=1))

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sd = np.sqrt(np.diag(S_post))
    g1 = np.linspace(m_post[0] - 4 * sd[0], m_post[0] + 4 * sd[0], 120)
    g2 = np.linspace(m_post[1] - 4 * sd[1], m_post[1] + 4 * sd[1], 120)
    G1, G2 = np.meshgrid(g1, g2)
    Z = np.stack([G1 - m_post[0], G2 - m_post[1]], -1)
    dens = np.exp(-0.5 * np.einsum("...i,ij,...j->...", Z, np.linalg.inv(S_post), Z))
    kinds = ["DG-LMC paper", "DG-LMC default", "D-SGLD"]
    fig, axes = plt.subplots(4, 2, figsize=(10, 17))
    for c, N in enumerate((1, 10)):
        for r, kind in enumerate(kinds):
            ax = axes[r, c]
            name = f"{kind} N={N}"
            f = draws[name].reshape(-1, 2)
            ax.hist2d(f[:, 0], f[:, 1], bins=[g1, g2], cmap="Blues" if "DG" in kind else "Greens")
            ax.contour(G1, G2, dens, levels=np.exp(-0.5 * np.array([4.0, 1.0, 0.25])), colors="red")
            ax.set_title(f"{name}: W2 = {results[name]['w2']:.3g}", fontsize=9)
        ax = axes[3, c]
        for kind in kinds:
            ax.plot(results[f"{kind} N={N}"]["acf_theta1"], label=kind)
        ax.axhline(0, color="k", lw=0.5)
        ax.set_title(f"ACF of θ1, N = {N}")
        ax.set_xlabel("lag")
        ax.legend(fontsize=8)
    fig.suptitle(
        f"Seed 000 sec. 5.1 toy (b = {B}, n = {N_ROWS}): red = exact posterior contours at Mahalanobis "
        f"distance 0.5, 1, 2; {ROUNDS} rounds incl. {BURN} burn-in, {CHAINS} chains",
        fontsize=9,
    )
    fig.tight_layout(rect=(0, 0, 1, 0.985))
    fig.savefig(ROOT / "docs/seed000_toy.png", dpi=100)


if __name__ == "__main__":
    main()
