"""Seed 000 sec. 5.2: HPD relative error vs wall time on covtype_like logistic regression (d = 54, n = 581,012, b = 16).

HPD summary (docs/algorithms.md): η̂_α = (1 − α)-quantile of U(θ) over the draws, U the full-data negative log posterior
(logistic likelihood + N(0, I) prior, no constants dropped beyond raysampler's own U), α = 0.1; error
|η̂_α − η_true| / η_true with η_true from a long exact-MCMC reference. Because η_true ≈ U(θ*) ≈ 3.1e5 while the
spread of U over the posterior is ≈ 5, we also report the shift-invariant "excess" error
|η̂_α − η_true| / (η_true − U(θ*)) (θ* the MAP), which does not depend on U's additive constant.

Reference: MALA (raysampler's algorithm="mala", exact MH) on the pooled data, run on a Laplace-whitened copy of the
model (θ = θ* + Lφ, L Lᵀ the inverse Hessian at the MAP; `Whitened` below, a user model per the README's model
contract). Plain MALA is impractical here: the posterior's condition number is ≈ 3e4. Cached in
benchmarks/papers/results/seed000_covtype_hpd_reference.json (reruns skip it). MC error of η_true: batch means over
chains × time blocks.

Compared samplers (executor="local", K chains, burn_in=0, a wall-time budget each; draws of a prefix ending at draw m
use draws [m // 10, m) of every chain, i.e. the paper's T_bi = T/10 applied to the prefix):
  * DG-LMC, paper rules, N = 10: preconditioner=None (ρ_i = 1/M_i, γ_i = 0.25ρ_i/(ρ_iM_i + 1), LMC), n_local=10.
  * DG-LMC, raysampler defaults (Laplace preconditioning, Laplace-MH local kernel, ρ from bias budget 0.05), N = 1
    (the default on the local executor) and N = 10.
  * D-SGLD: algorithm "dsgld", complete graph, batch n/(10b) per agent; step η = b·h, h·λ_max(∇²U(θ*)) = 0.05.
  * FALD: algorithm "fald", variant "plain", p_comm = 1/10 (N = 10 local steps on average), τ = 1, full local
    gradients; γ = b·h, h·λ_max = 0.2 (the server average is LMC on U with step γ/b = h).
  * QLSD++: algorithm "qlsd", variant "pp", 8 levels, memory, batch n/(10b), ref_every 100; γ = h, h·λ_max = 0.2.
  Wall time of a draw: seconds since rs.sample was called (setup — MAP, preconditioner — included), taken from the
  callback's arrival time of its chunk, interpolated linearly over the rounds of the chunk.
U is evaluated after each run (not timed) on up to U_EVALS draws spread evenly over every chain.

    python benchmarks/papers/seed000_covtype_hpd.py [--smoke] [--budget S] [--ref-budget S] [--only name,...] [--part P]
    python benchmarks/papers/seed000_covtype_hpd.py --merge | --replot

docs/experiments.md's numbers: `--reference-only` (600 s of MALA), then three processes at once, each
`--budget 600 --part {a2,b2,c2} --only "<two names>"` (a2: DG-LMC default N=1, D-SGLD; b2: DG-LMC default N=10,
FALD; c2: DG-LMC paper N=10, QLSD++), then `--merge` (table, results JSON, docs/seed000_covtype_hpd.png).
"""

from __future__ import annotations

import argparse
import json
import math
import time
import warnings
from dataclasses import dataclass

import _path  # noqa: F401  (puts benchmarks/ on sys.path for harness)
import harness
import numpy as np

import raysampler as rs
from raysampler import tuning
from raysampler.models.contract import DataSpec
from raysampler.priors import GaussianPrior

ALPHA = 0.1
B = 16
CHAINS = 4
REF_CHAINS = 8
U_EVALS = 3000
warnings.filterwarnings("ignore", message="time_budget_s=")


class PooledPool:
    """The minimal ShardPool `tuning` needs, over the pooled data in this process."""

    num_shards = 1

    def __init__(self, model, X, y):
        self.model, self.X, self.y = model, X, y

    def map(self, fn, args):
        return [fn(self.model, self.X, self.y, *a) for a in args]


@dataclass(frozen=True)
class Whitened:
    """U in φ with θ = θ* + Lφ, on ONE shard holding all the data; the prior is folded into the shard's potential,
    so `prior()` is flat (zero precision). Exact: the Jacobian of the affine map is constant."""

    base: object
    shift: np.ndarray
    L: np.ndarray

    @property
    def dim(self):
        return self.L.shape[0]

    def bind(self, spec):
        return self

    def param_names(self):
        return [f"phi{j}" for j in range(self.dim)]

    def validate(self, X, y, argname="data"):
        self.base.validate(X, y, argname)

    def prior(self):
        return GaussianPrior(np.zeros(self.dim), np.zeros(self.dim))

    def _theta(self, phi):
        return self.shift + phi @ self.L.T

    def potential(self, X, y, phi):
        th = self._theta(phi)
        return self.base.potential(X, y, th) + self.base.prior().potential(th)

    def grad(self, X, y, phi):
        return self.potential_and_grad(X, y, phi)[1]

    def potential_and_grad(self, X, y, phi):
        th = self._theta(phi)
        u, g = self.base.potential_and_grad(X, y, th)
        pr = self.base.prior()
        return u + pr.potential(th), (g + pr.grad(th)) @ self.L

    def hvp(self, X, y, phi, v):
        return self.base.hvp(X, y, self._theta(phi), v @ self.L.T) @ self.L

    def hessian(self, X, y, phi):
        return self.L.T @ self.base.hessian(X, y, self._theta(phi[None])[0]) @ self.L

    def hessian_diag(self, X, y, phi):
        return np.clip(np.diag(self.hessian(X, y, phi)), 0.0, None)

    def smoothness(self, X, y):
        return 2.0


def full_U(model, X, y, thetas, block=128):
    """U(θ) = Σ_j ℓ_j(θ) + prior potential for each row of thetas (m, d)."""
    out = np.empty(len(thetas))
    prior = model.prior()
    for s in range(0, len(thetas), block):
        th = thetas[s : s + block]
        out[s : s + block] = model.potential(X, y, th) + prior.potential(th)
    return out


def hpd_eta(u):
    return float(np.quantile(u, 1.0 - ALPHA))


def thin_index(n_draws, chains, budget):
    """Per-chain draw indices (evenly spaced, always including the last) so that chains·len ≤ budget."""
    per = max(1, budget // chains)
    if n_draws <= per:
        return np.arange(n_draws)
    return np.unique(np.linspace(0, n_draws - 1, per).round().astype(int))


class Clock:
    """Callback: wall and process-CPU time of each chunk's arrival since the call started, turned into a time per
    round (linear within a chunk). CPU time (single-threaded BLAS) is the load-robust axis on a shared machine."""

    def __init__(self):
        self.t0, self.c0 = time.perf_counter(), time.process_time()
        self.marks = []

    def __call__(self, chunk):
        self.marks.append((int(chunk.rounds_done), time.perf_counter() - self.t0, time.process_time() - self.c0))

    def per_round(self, n, col=1):
        rounds = np.array([m[0] for m in self.marks])
        times = np.array([m[col] for m in self.marks])
        prev_r = np.concatenate([[0], rounds[:-1]])
        prev_t = np.concatenate([[times[0] if len(times) else 0.0], times[:-1]])
        out = np.full(n, np.nan)
        for r0, r1, t0, t1 in zip(prev_r, rounds, prev_t, times):
            if r1 > r0:
                k = np.arange(r0, min(r1, n))
                out[k] = t0 + (t1 - t0) * (k - r0 + 1) / (r1 - r0)
        return out


# ------------------------------------------------------------------------------------------- reference


def reference(model, X, y, theta_map, L, budget, seed=1):
    wm = Whitened(model, theta_map, L)
    shards = rs.shard(X, y, num_shards=1)
    burn = 300
    init = np.random.default_rng(seed).standard_normal((REF_CHAINS, len(theta_map)))
    clock = Clock()
    res = rs.sample(
        wm,
        shards,
        "mala",
        chains=REF_CHAINS,
        num_rounds=10_000_000,
        burn_in=burn,
        seed=seed,
        executor="local",
        time_budget_s=budget,
        progress=False,
        callback=clock,
        step_size=0.3,
        init=init,
    )
    phi = res.draws  # (K, T, d)
    K, T, d = phi.shape
    idx = thin_index(T, K, 16000)
    th = theta_map + phi[:, idx] @ L.T  # (K, m, d)
    t0 = time.perf_counter()
    u = full_U(model, X, y, th.reshape(-1, d)).reshape(K, len(idx))
    u_map = float(full_U(model, X, y, theta_map[None])[0])
    eta = hpd_eta(u.ravel())
    # batch means: K chains × 4 time blocks = 32 batches; the quantile of each batch, sd / √(#batches)
    nb = 4
    batches = [hpd_eta(part) for c in range(K) for part in np.array_split(u[c], nb)]
    per_chain = [hpd_eta(u[c]) for c in range(K)]
    mcse_bm = float(np.std(batches, ddof=1) / math.sqrt(len(batches)))
    mcse_chain = float(np.std(per_chain, ddof=1) / math.sqrt(K))
    # MALA reports no acceptance in sample_stats (it is computed on the coordinator): count moves instead
    accept = np.any(phi[:, 1:] != phi[:, :-1], axis=2) if T > 1 else None
    ess_u = _ess_simple(u)
    out = {
        "algorithm": "mala on the Laplace-whitened pooled posterior (raysampler 'mala', one shard)",
        "chains": K,
        "burn_in_rounds": burn,
        "draws_per_chain": T,
        "u_evaluated_per_chain": len(idx),
        "wall_s": clock.marks[-1][1],
        "cpu_s": clock.marks[-1][2],
        "u_eval_s": time.perf_counter() - t0,
        "step_size_initial": 0.3,
        "mean_accept": None if accept is None else float(np.mean(accept)),
        "eta_true": eta,
        "u_map": u_map,
        "eta_minus_umap": eta - u_map,
        "mcse_batch_means": mcse_bm,
        "mcse_per_chain": mcse_chain,
        "per_chain_eta": per_chain,
        "ess_U": ess_u,
        "u_mean": float(u.mean()),
        "u_sd": float(u.std()),
        "theta_mean": (theta_map + phi.reshape(-1, d).mean(0) @ L.T).tolist(),
    }
    print(
        f"reference: {K} chains x {T} draws in {out['wall_s']:.0f} s, accept {out['mean_accept']}, "
        f"eta_true = {eta:.3f} (U(MAP) = {u_map:.3f}), MCSE {mcse_bm:.3f} (batch means) / {mcse_chain:.3f} "
        f"(per chain), ESS(U) {ess_u}",
        flush=True,
    )
    return out


def _ess_simple(u):
    """ESS of (K, T) by Geyer's initial positive sequence on the chain-averaged autocorrelation."""
    K, T = u.shape
    x = u - u.mean(axis=1, keepdims=True)
    var = np.mean(x * x)
    rho_sum = 0.0
    for lag in range(1, T // 2, 2):
        r = np.mean([np.dot(c[:-lag], c[lag:]) / T for c in x]) / var
        r2 = np.mean([np.dot(c[: -lag - 1], c[lag + 1 :]) / T for c in x]) / var
        if r + r2 < 0:
            break
        rho_sum += r + r2
    return float(K * T / (1 + 2 * rho_sum))


# ------------------------------------------------------------------------------------------- runs


def specs(n, lam_max):
    batch = n // (10 * B)
    h_sgld, h = 0.05 / lam_max, 0.2 / lam_max
    return {
        "DG-LMC paper N=10": ("dglmc", dict(preconditioner=None, n_local=10)),
        "DG-LMC default N=1": ("dglmc", dict()),
        "DG-LMC default N=10": ("dglmc", dict(n_local=10)),
        "D-SGLD": ("dsgld", dict(step_size=B * h_sgld, topology="complete", batch_size=batch)),
        "FALD": ("fald", dict(variant="plain", step_size=B * h, p_comm=0.1, tau=1.0)),
        "QLSD++": ("qlsd", dict(variant="pp", step_size=h, levels=8, batch_size=batch, ref_every=100)),
    }


def run_one(name, alg, kw, model, X, y, shards, budget, ref, seed=0):
    clock = Clock()
    res = rs.sample(
        model,
        shards,
        alg,
        chains=CHAINS,
        num_rounds=10_000_000,
        burn_in=0,
        seed=seed,
        executor="local",
        time_budget_s=budget,
        progress=False,
        callback=clock,
        **kw,
    )
    th = res.draws  # (K, T, d)
    K, T, d = th.shape
    times, cpu = clock.per_round(T), clock.per_round(T, col=2)
    idx = thin_index(T, K, U_EVALS)
    t0 = time.perf_counter()
    u = full_U(model, X, y, th[:, idx].reshape(-1, d)).reshape(K, len(idx))
    u_eval_s = time.perf_counter() - t0
    eta_true, u_map = ref["eta_true"], ref["u_map"]
    curve = []
    grid = np.unique(np.geomspace(max(10, T // 500), T, 40).round().astype(int)) if T >= 10 else np.array([T])
    for m in grid:  # prefix of m draws per chain, burn-in m // 10
        sel = (idx >= m // 10) & (idx < m)
        if sel.sum() < 5:
            continue
        eta = hpd_eta(u[:, sel].ravel())
        curve.append(
            {
                "draws_per_chain": int(m),
                "wall_s": float(times[m - 1]),
                "cpu_s": float(cpu[m - 1]),
                "u_points": int(sel.sum() * K),
                "eta": eta,
                "rel_err": abs(eta - eta_true) / abs(eta_true),
                "excess_rel_err": abs(eta - eta_true) / (eta_true - u_map),
            }
        )
    plan = res.setup.plan.as_dict()
    keep = {
        k: plan.get(k)
        for k in (
            "rho",
            "gamma",
            "M",
            "local_kernel",
            "preconditioner",
            "step_size",
            "lmc_step_of_average",
            "p_comm",
            "tau",
            "levels",
            "omega",
            "alpha",
            "batch_size",
            "ref_every",
            "bits_per_round",
        )
        if k in plan
    }
    accept = res.sample_stats.get("local_accept")
    out = {
        "algorithm": alg,
        "params": kw,
        "plan": keep,
        "chains": K,
        "draws_per_chain": T,
        "setup_s": float(res.outcome.timings.setup_s),
        "wall_s": float(times[-1]) if T else None,
        "cpu_s": float(cpu[-1]) if T else None,
        "cpu_fraction": float(cpu[-1] / times[-1]) if T else None,
        "rounds_per_s": T / (times[-1] - res.outcome.timings.setup_s) if T else None,
        "u_eval_s": u_eval_s,
        "local_accept": None if accept is None else float(np.mean(accept)),
        "curve": curve,
        "final": curve[-1] if curve else None,
        "N": [int(v) for v in np.atleast_1d(res.run_stats.N)],
    }
    f = out["final"] or {}
    print(
        f"{name}: {T} draws/chain, setup {out['setup_s']:.1f} s, {out['wall_s']:.0f} s wall, {out['cpu_s']:.0f} s CPU, "
        f"eta {f.get('eta', float('nan')):.3f}, rel err {f.get('rel_err', float('nan')):.2e}, "
        f"excess rel err {f.get('excess_rel_err', float('nan')):.3f}  [U eval {u_eval_s:.0f} s]",
        flush=True,
    )
    return out


def first_time_below(curve, key, thr):
    """First wall time from which the error stays ≤ thr until the end of the run (None if never)."""
    t = None
    for pt in curve:
        if pt[key] <= thr:
            if t is None:
                t = pt["wall_s"]
        else:
            t = None
    return t


def plot(results, ref, path, n):
    plt = harness.pyplot()
    if plt is None:
        return
    import matplotlib.ticker

    fig, axes = plt.subplots(1, 3, figsize=(17, 4.8))
    for name, r in results.items():
        c = r["curve"]
        if not c:
            continue
        t = [p["wall_s"] for p in c]
        (line,) = axes[0].loglog(t, [max(p["rel_err"], 1e-9) for p in c], marker=".", label=name)
        axes[1].loglog(t, [max(p["excess_rel_err"], 1e-5) for p in c], marker=".", color=line.get_color())
        if "cpu_s" in c[0]:
            axes[2].loglog(
                [p["cpu_s"] for p in c], [max(p["excess_rel_err"], 1e-5) for p in c], marker=".", color=line.get_color()
            )
    axes[0].set_title(f"HPD relative error |η̂−η|/η (α = {ALPHA})")
    axes[1].set_title("excess error |η̂−η| / (η − U(θ*))")
    axes[2].set_title("excess error vs process CPU time")
    for ax in axes:
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.xaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
        ax.set_xlabel("wall time (s, setup included)")
        ax.grid(True, which="both", alpha=0.3)
    axes[2].set_xlabel("process CPU time (s, setup included)")
    mc = ref["mcse_batch_means"]
    axes[0].axhline(mc / ref["eta_true"], color="k", ls=":", lw=1, label="reference MCSE")
    for ax in axes[1:]:
        ax.axhline(mc / ref["eta_minus_umap"], color="k", ls=":", lw=1)
        ax.axhline(0.05, color="grey", ls="--", lw=0.8)
        ax.axhline(0.01, color="grey", ls="--", lw=0.8)
    axes[0].legend(fontsize=7)
    fig.suptitle(
        f"Seed 000 sec. 5.2: covtype_like logistic regression, n = {n:,}, d = 54, b = {B}, K = {CHAINS} chains; "
        "local executor, shared 2-core machine"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"plot written to {path}", flush=True)


def arguments() -> argparse.ArgumentParser:
    ap = harness.parser(__doc__, __file__)
    ap.add_argument("--smoke", action="store_true", help="n = 20,000, tiny budgets; writes *_smoke files")
    ap.add_argument("--budget", type=float, default=None, help="seconds per sampler (default 600; smoke 8)")
    ap.add_argument("--ref-budget", type=float, default=None, help="seconds of reference MALA (default 600; smoke 10)")
    ap.add_argument("--only", default=None, help="comma-separated run names (default all)")
    ap.add_argument("--reference-only", action="store_true")
    ap.add_argument(
        "--part",
        default=None,
        help="write runs to seed000_covtype_hpd[_smoke]_part-PART.json (two parts can run at once; --merge joins them)",
    )
    ap.add_argument("--replot", action="store_true", help="table and plot from the results JSON, no sampling")
    ap.add_argument("--merge", action="store_true", help="join the _part-*.json files into the results JSON")
    return ap


def measure(args: argparse.Namespace) -> harness.Report:
    suffix = "_smoke" if args.smoke else ""
    if args.replot or args.merge:
        return replot(args, suffix)
    budget = args.budget or (8.0 if args.smoke else 600.0)
    X, y, model = harness.load_model_data("covtype_like", covtype_n=20_000 if args.smoke else None)
    model = model.bind(DataSpec(n_features=X.shape[1]))
    n, d = X.shape
    pool = PooledPool(model, X, y)
    t0 = time.perf_counter()
    theta_map = tuning.find_map(model, pool, x0=np.zeros(d), dense_hessian=True)
    precond = tuning.laplace_preconditioner(model, pool, theta_map, "laplace")
    ev = np.linalg.eigvalsh(tuning.total_hessian(model, pool, theta_map))
    print(
        f"n = {n}, MAP + Laplace in {time.perf_counter() - t0:.1f} s; Hessian eigenvalues {ev[0]:.3g} .. "
        f"{ev[-1]:.3g} (condition {ev[-1] / ev[0]:.3g})",
        flush=True,
    )
    ref = cached_reference(args, suffix, model, X, y, theta_map, precond.scale)
    if args.reference_only:
        return harness.Report(None)
    shards = rs.shard(X, y, num_shards=B)
    all_specs = specs(n, float(ev[-1]))
    names = list(all_specs) if not args.only else [s.strip() for s in args.only.split(",")]
    out_name = f"seed000_covtype_hpd{suffix}" + (f"_part-{args.part}" if args.part else "")
    out_path = harness.results_dir(args) / f"{out_name}.json"
    results = json.loads(out_path.read_text()).get("runs", {}) if (args.only and out_path.exists()) else {}
    for name in names:
        alg, kw = all_specs[name]
        results[name] = run_one(name, alg, kw, model, X, y, shards, budget, ref)
        results[name]["budget_s"] = budget
        # after every run: a run takes up to `budget` seconds
        harness.write_json(args, out_name, {"settings": settings(n, budget, ev), "reference": ref, "runs": results})
    if args.part:
        return harness.Report(None)
    return summarise(args, results, ref, suffix, settings(n, budget, ev))


def cached_reference(args, suffix, model, X, y, theta_map, L):
    """The MALA reference from results/seed000_covtype_hpd_reference[_smoke].json, or run (and cached) now."""
    ref_path = harness.results_dir(args) / f"seed000_covtype_hpd_reference{suffix}.json"
    if ref_path.exists():
        ref = json.loads(ref_path.read_text())["reference"]
        print(
            f"reference loaded from {ref_path.name}: eta_true = {ref['eta_true']:.3f} ± {ref['mcse_batch_means']:.3f}"
        )
        return ref
    ref_budget = args.ref_budget or (10.0 if args.smoke else 600.0)
    ref = reference(model, X, y, theta_map, L, ref_budget)
    ref["ref_budget_s"] = ref_budget
    harness.write_json(args, f"seed000_covtype_hpd_reference{suffix}", {"reference": ref, "n": len(y)})
    return ref


def replot(args, suffix):
    """--replot: table and plot from the results JSON; --merge: the same from the _part-*.json files, written."""
    if args.merge:
        parts = sorted(harness.results_dir(args).glob(f"seed000_covtype_hpd{suffix}_part-*.json"))
        datas = [json.loads(p.read_text()) for p in parts]
        data = {
            "settings": datas[-1]["settings"],
            "reference": datas[-1]["reference"],
            "runs": {},
            "parts": {p.name: d["environment"] for p, d in zip(parts, datas)},
        }
        for name in specs(1, 1.0):
            for d in datas:
                if name in d["runs"]:
                    data["runs"][name] = d["runs"][name]
    else:
        data = json.loads((harness.results_dir(args) / f"seed000_covtype_hpd{suffix}.json").read_text())
    report = summarise(
        args,
        data["runs"],
        data["reference"],
        suffix,
        data["settings"],
        extra={"parts": data.get("parts")} if args.merge else None,
    )
    return report if args.merge else harness.Report(None, tables=report.tables)


def summarise(args, results, ref, suffix, sett, extra=None):
    """Table of final errors and times to 5% / 1%, plot; the results JSON to write."""
    rows = []
    for name, r in results.items():
        f = r["final"] or {}
        rows.append(
            [
                name,
                r["draws_per_chain"],
                r["setup_s"],
                r["wall_s"],
                r.get("cpu_s"),
                f.get("eta"),
                f.get("rel_err"),
                f.get("excess_rel_err"),
                first_time_below(r["curve"], "rel_err", 0.05),
                first_time_below(r["curve"], "rel_err", 0.01),
                first_time_below(r["curve"], "excess_rel_err", 0.05),
                first_time_below(r["curve"], "excess_rel_err", 0.01),
            ]
        )
        r["time_to"] = dict(zip(["rel5", "rel1", "excess5", "excess1"], rows[-1][-4:]))
    table = harness.Table(
        f"HPD error (alpha = {ALPHA}); eta_true = {ref['eta_true']:.3f} ± {ref['mcse_batch_means']:.3f}, "
        f"U(MAP) = {ref['u_map']:.3f}",
        ["run", "draws/chain", "setup s", "wall s", "CPU s", "eta", "rel err", "excess err", "t rel<5%", "t rel<1%"]
        + ["t exc<5%", "t exc<1%"],
        rows,
    )
    plot(results, ref, harness.plot_path(args, f"seed000_covtype_hpd{suffix}.png"), sett["n"])
    payload = {"settings": sett, "reference": ref, "runs": results, **(extra or {})}
    return harness.Report(f"seed000_covtype_hpd{suffix}", payload, [table])


def settings(n, budget, ev):
    return {
        "n": n,
        "d": 54,
        "b": B,
        "alpha": ALPHA,
        "chains": CHAINS,
        "budget_s": budget,
        "u_evals": U_EVALS,
        "hessian_eig_min": float(ev[0]),
        "hessian_eig_max": float(ev[-1]),
        "executor": "local",
        "shards": "contiguous",
        "prior": "N(0, I)",
        "burn_in": "first 10% of each prefix",
    }


def main(argv: list[str] | None = None) -> None:
    harness.run(arguments(), measure, argv)


if __name__ == "__main__":
    main()
