"""Seed 003 sec. 6.2: W2(avg-agent iterate law, exact posterior) vs iteration, Bayesian linear regression d = 2.

Data (fixed seeds): x_true = N(0, I_2) draw from default_rng(3003); for b agents, agent rows come from
default_rng([3003, b]): z_l ~ N(0, I_2), y_l = x_trueᵀz_l + N(0, ξ²), ξ = 4, n_i = 50 rows per agent.
Prior N(0, λI), λ = 10 (prior_scale = sqrt(10)); known noise sd ξ = 4 (LinearRegression(noise_sd=4)).
Each algorithm runs 100 independent chains (executor="local", burn_in=0, thin=1, num_rounds=T); the Gaussian
fitted to the 100 chains' agent-average draws at iteration t is compared with the exact posterior (W2).
Initialisation: the paper draws x_i^(0) ~ N(0, I) per agent; raysampler takes one (K, d) init shared by the
agents of a chain, so every chain starts at its own N(0, I) draw, identical for all agents of that chain.
D-ADMMS runs twice: with raysampler's default noise ("curvature", see raysampler/algorithms/dadmm.py) and with the
paper's scale √2/(2ρ) (noise="paper", "D-ADMMS (paper)"); on edgeless graphs both are the same deterministic
recursion, so only the default is run there. D-ULA uses the noise N(0, b·I) of eq. 25.

    python benchmarks/papers/seed003_linear_w2.py [T (default 1000)] [T for D-ADMMS (default 1000)]

Writes benchmarks/papers/results/seed003_linear_w2.json and docs/seed003_w2.png.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import _path  # noqa: F401  (puts benchmarks/ on sys.path for harness)
import harness
import numpy as np

import raysampler as rs
from raysampler.models import LinearRegression
from raysampler.testing import exact

EVERY = 10
CHAINS = 100
XI, LAM, N_I, D = 4.0, 10.0, 50, 2
BS = (5, 20, 100)
GRAPHS = ("complete", "ring", "edgeless")
ALGS = ("dadmms", "dadmms_paper", "dsgld", "dsghmc", "dula")
LABELS = {
    "dadmms": "D-ADMMS",
    "dadmms_paper": "D-ADMMS (paper noise)",
    "dsgld": "D-SGLD",
    "dsghmc": "D-SGHMC",
    "dula": "D-ULA",
}


def make_data(b):
    x_true = np.random.default_rng(3003).standard_normal(D)
    rng = np.random.default_rng([3003, b])
    shards = []
    for _ in range(b):
        Z = rng.standard_normal((N_I, D))
        y = Z @ x_true + XI * rng.standard_normal(N_I)
        shards.append((Z, y))
    return shards


def algo_params(alg, graph, b):
    if alg == "dadmms":
        return {"rho": 5.0}
    if alg == "dadmms_paper":
        return {"rho": 5.0, "noise": "paper"}
    if alg == "dsgld":
        return {"step_size": 0.009}
    if alg == "dsghmc":
        return {"step_size": 0.1, "friction": 7.0}
    if alg == "dula":
        # paper: δ1 = 0.55, δ2 = 0.05 on the complete graph (b = 5, 20); δ1 = δ2 = 0.05 on ring / edgeless
        d1 = 0.55 if graph == "complete" else 0.05
        return {"alpha0": 8.2e-4, "beta0": 0.48, "b1": 230.0, "b2": 230.0, "delta1": d1, "delta2": 0.05}
    raise ValueError(alg)


def w2_curve(draws, m, S):
    ts = np.arange(EVERY - 1, draws.shape[1], EVERY)
    out = []
    for t in ts:
        x = draws[:, t, :]
        out.append(exact.gaussian_w2(x.mean(0), np.cov(x.T), m, S))
    return ts + 1, np.array(out)


def arguments() -> argparse.ArgumentParser:
    ap = harness.parser(__doc__, __file__)
    ap.add_argument("T", nargs="?", type=int, default=1000, help="iterations of every sampler (default 1000)")
    # D-ADMMS costs more per round (a prox solve and, for the default noise, a Hessian eigendecomposition per chain)
    ap.add_argument("T_admm", nargs="?", type=int, default=1000, help="iterations of D-ADMMS (default 1000)")
    return ap


def measure(args: argparse.Namespace) -> harness.Report:
    results: dict[str, Any] = {}
    curves = {}
    init = np.random.default_rng(7).standard_normal((CHAINS, D))
    for b in BS:
        shards = make_data(b)
        model = LinearRegression(prior_scale=np.sqrt(LAM), noise_sd=XI, n_features=D)
        m, S = model.posterior(shards)
        for graph in GRAPHS:
            for alg in ALGS:
                if alg == "dadmms_paper" and graph == "edgeless":
                    continue  # no noise without edges: identical to "dadmms"
                key = f"b{b}_{graph}_{alg}"
                T = args.T_admm if alg.startswith("dadmms") else args.T
                results[key], curve = run_one(model, shards, alg, graph, b, T, init, m, S)
                if curve is None:
                    print(key, "ERROR", results[key]["error"], flush=True)
                    continue
                curves[key] = curve
                print(key, f"W2(T)={results[key]['final_w2']:.4g}", f"{results[key]['wall_s']:.1f}s", flush=True)
        results[f"b{b}_posterior"] = {"mean": m.tolist(), "cov": S.tolist()}
    results["settings"] = {
        "T": args.T,
        "T_dadmms": args.T_admm,
        "every": EVERY,
        "chains": CHAINS,
        "n_i": N_I,
        "xi": XI,
        "lambda": LAM,
    }
    plot(results, curves, harness.plot_path(args, "seed003_w2.png"))
    table = harness.Table(
        f"Seed 003 sec. 6.2: W2(agent-average iterate, posterior), {CHAINS} chains",
        ["run", "W2 at T", "min W2", "wall s"],
        [[k, r["final_w2"], r["min_w2"], r["wall_s"]] for k, r in results.items() if k in curves],
    )
    return harness.Report("seed003_linear_w2", results, [table])


def run_one(model, shards, alg, graph, b, T, init, m, S):
    """One sampler on one graph: its JSON record and its W2 curve ((iterations, W2), None if it failed)."""
    params = algo_params(alg, graph, b)
    t0 = time.perf_counter()
    try:
        res = rs.sample(
            model,
            rs.shard(shards),
            alg.split("_")[0],
            chains=CHAINS,
            num_rounds=T,
            burn_in=0,
            thin=1,
            seed=1,
            executor="local",
            progress=False,
            topology=graph,
            init=init,
            **params,
        )
    except Exception as e:
        return {"error": f"{type(e).__name__}: {e}", "params": params}, None
    ts, w = w2_curve(res.draws, m, S)
    record = {
        "final_w2": float(w[-1]),
        "min_w2": float(w.min()),
        "w2_at": {str(int(t)): float(v) for t, v in zip(ts, w) if t in (10, 50, 100, 150, 500, 1000, T)},
        "params": params,
        "wall_s": round(time.perf_counter() - t0, 2),
    }
    return record, (ts, w)


def plot(results, curves, path):
    plt = harness.pyplot()
    if plt is None:
        return
    fig, axes = plt.subplots(len(BS), len(GRAPHS), figsize=(13, 10), sharex=True)
    for r, b in enumerate(BS):
        for c, graph in enumerate(GRAPHS):
            ax = axes[r, c]
            for alg in ALGS:
                k = f"b{b}_{graph}_{alg}"
                if k in curves:
                    ax.plot(*curves[k], label=LABELS[alg], ls="--" if alg == "dadmms_paper" else "-")
                elif k in results:
                    ax.plot([], [], label=LABELS[alg] + " (failed)")
            ax.set_yscale("log")
            ax.set_title(f"b = {b}, {graph}")
            if r == len(BS) - 1:
                ax.set_xlabel("iteration t")
            if c == 0:
                ax.set_ylabel("W2(avg iterate, posterior)")
            ax.legend(fontsize=7)
    fig.suptitle(f"Seed 003 sec. 6.2 reproduction: linear regression d=2, n_i=50, {CHAINS} chains")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"plot written to {path}", flush=True)


def main(argv: list[str] | None = None) -> None:
    harness.run(arguments(), measure, argv)


if __name__ == "__main__":
    main()
