"""The DP mode (`privacy=rs.DP(epsilon, delta, clip)`) against the non-private run, side by side in one process.

Problem: logistic regression on covtype_like, `--sites` sites of `--rows` rows each (default 4 × 10,000), its first
`--columns` columns (default 14: the intercept, the 10 continuous features and the 3 wilderness dummies; the 40
soil dummies, many of them rare, leave directions whose curvature is the prior's, which no budget-limited Langevin
chain crosses), LogisticRegression() with its default prior.

* reference: the non-private default DG-LMC (Laplace preconditioner, laplace_mh), `--ref-chains` chains of
  `--ref-rounds` rounds (seed 101): its posterior means and sds.
* DP runs, for each ε of `--epsilons` (δ = `--delta`, clip `--clip`): the DP mode's defaults (the private set-up:
  ρ_i, γ_i, N_i from n_i and C), `--chains` chains, the run's length from the budget (R = the rounds within ε,
  `DPPlan.rounds_within`; burn-in R // 5), so the run stops with stop reason privacy_budget; `--max-rounds` caps R
  for time (then ε spent is below ε).
* reported per ε: max and median over coordinates of |mean − mean_ref| / sd_ref ("within ? sd"), the coverage
  (the fraction of coordinates whose reference mean lies in the DP run's central 95 % interval), the range of
  sd / sd_ref, the largest ε(δ) spent over the sites, the mean clip rate, rounds, min bulk ESS and seconds.

`--bias` measures instead what clipping alone does to the target, without sampling (seconds): for each C of
`--clips`, the mode of the clipped target against the non-private MAP, in the MAP's Laplace posterior sds. Rule
"features": the MAP of the weighted likelihood Σ_r w_r ℓ_r (w_r = min(1, C/‖x_r‖)) with the prior; rule "gradient":
the zero of the clipped drift Σ_r clip(∇ℓ_r, C) + the prior's gradient (not a gradient field: its stationary
chain centres there to first order). With each, the fraction of rows clipped at the MAP.

Run (about 15–20 minutes on 2 cores with the defaults; `--quick` is a smoke test):

    python benchmarks/perf/privacy_dp.py
    python benchmarks/perf/privacy_dp.py --epsilons 1 8 --clip 3 --clip-rule gradient
    python benchmarks/perf/privacy_dp.py --bias
    python benchmarks/perf/privacy_dp.py --quick

Prints the table and writes benchmarks/perf/results/privacy_dp.json (privacy_dp_quick.json with --quick,
privacy_dp_bias.json with --bias).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import _path  # noqa: F401  (puts benchmarks/ on sys.path for harness)
import harness
import numpy as np

import raysampler as rs
from raysampler.algorithms.dglmc.private import public_settings
from raysampler.privacy.accountant import DPPlan


def _data(args: argparse.Namespace) -> tuple[np.ndarray, np.ndarray]:
    X, y = rs.datasets.load("covtype_like", n=args.sites * args.rows, seed=0)
    return np.ascontiguousarray(X[:, : args.columns]), y


def _accuracy(draws: np.ndarray, ref_mean: np.ndarray, ref_sd: np.ndarray) -> dict[str, Any]:
    flat = draws.reshape(-1, draws.shape[-1])
    err = np.abs(flat.mean(axis=0) - ref_mean) / ref_sd
    lo, hi = np.quantile(flat, [0.025, 0.975], axis=0)
    ratio = flat.std(axis=0) / ref_sd
    return {
        "max_err_sd": float(err.max()),
        "median_err_sd": float(np.median(err)),
        "coverage": float(np.mean((ref_mean >= lo) & (ref_mean <= hi))),
        "sd_ratio_min": float(ratio.min()),
        "sd_ratio_max": float(ratio.max()),
    }


def clip_bias(args: argparse.Namespace) -> harness.Report:
    """What clipping alone does to the target (see the module's docstring, `--bias`)."""
    from scipy.optimize import minimize, root
    from scipy.special import expit

    from raysampler.models.contract import DataSpec

    X, y = _data(args)
    d = X.shape[1]
    prior = rs.models.LogisticRegression().bind(DataSpec(n_features=d, n_rows=len(y))).prior().gaussian
    P0 = np.asarray(prior.precision, dtype=float)
    P0 = P0 if P0.ndim == 2 else np.diag(np.broadcast_to(P0, (d,)))
    m0 = np.broadcast_to(np.asarray(prior.mean, dtype=float), (d,))

    def potential(t: np.ndarray, w: np.ndarray) -> float:
        eta = X @ t
        return float(np.sum(w * (np.logaddexp(0.0, eta) - y * eta)) + 0.5 * (t - m0) @ P0 @ (t - m0))

    def gradient(t: np.ndarray, w: np.ndarray) -> np.ndarray:
        return X.T @ (w * (expit(X @ t) - y)) + P0 @ (t - m0)

    ones = np.ones(len(y))
    theta = minimize(potential, np.zeros(d), args=(ones,), jac=gradient, method="L-BFGS-B", tol=1e-12).x
    p = expit(X @ theta)
    sd = np.sqrt(np.diag(np.linalg.inv((X * (p * (1 - p))[:, None]).T @ X + P0)))
    x_norm = np.linalg.norm(X, axis=1)
    g_norm = np.abs(p - y) * x_norm
    records = []
    for C in args.clips:
        w = np.minimum(1.0, C / x_norm)
        t_f = minimize(potential, theta, args=(w,), jac=gradient, method="L-BFGS-B", tol=1e-12).x

        def drift(t: np.ndarray, C: float = C) -> np.ndarray:
            r = expit(X @ t) - y
            scale = np.minimum(1.0, C / np.maximum(np.abs(r) * x_norm, 1e-300))
            return X.T @ (r * scale) + P0 @ (t - m0)

        t_g = root(drift, theta, method="hybr").x
        for rule, t, rate in (("features", t_f, np.mean(x_norm > C)), ("gradient", t_g, np.mean(g_norm > C))):
            err = np.abs(t - theta) / sd
            records.append(
                {"clip": C, "rule": rule, "max_shift_sd": float(err.max()), "median_shift_sd": float(np.median(err)),
                 "clip_rate": float(rate)}
            )  # fmt: skip
    table = harness.Table.of(
        f"Clipping's own shift of the target: covtype_like, {args.sites} × {args.rows} rows, d = {d}",
        records,
        [("C", "clip"), ("rule", "rule"), ("max shift/sd", "max_shift_sd"), ("median shift/sd", "median_shift_sd"),
         ("clip rate", "clip_rate")],
        notes=["shift: |mode of the clipped target − the MAP| in Laplace posterior sds, per coordinate"],
    )  # fmt: skip
    return harness.Report("privacy_dp_bias", {"settings": harness.options(args), "records": records}, [table])


def measure(args: argparse.Namespace) -> harness.Report:
    if args.bias:
        return clip_bias(args)
    if args.quick:
        args.sites, args.rows, args.epsilons, args.ref_rounds, args.max_rounds = 2, 2000, [1.0], 500, 200
    X, y = _data(args)
    shards = rs.shard(X, y, args.sites)
    model = rs.models.LogisticRegression()
    run = dict(executor="local", progress=False)
    t0 = time.perf_counter()
    ref = rs.sample(model, shards, chains=args.ref_chains, num_rounds=args.ref_rounds, seed=101, **run)
    ref_s = time.perf_counter() - t0
    flat = ref.draws.reshape(-1, ref.draws.shape[-1])
    ref_mean, ref_sd = flat.mean(axis=0), flat.std(axis=0)
    records: list[dict[str, Any]] = [
        {
            "run": "non-private",
            "epsilon": None,
            **_accuracy(ref.draws, ref_mean, ref_sd),
            "epsilon_spent": None,
            "clip_rate": None,
            "rounds": int(ref.run_stats.rounds),
            "min_ess": float(np.min(ref.ess("bulk"))),
            "seconds": ref_s,
            "stop_reason": str(ref.outcome.stop_reason),
        }
    ]
    rows = np.full(args.sites, args.rows)
    _, rho, gamma, n_steps = public_settings(rows, args.clip, args.gamma_fraction)
    for eps in args.epsilons:
        plan = DPPlan.of(eps, args.delta, args.clip, gamma, args.chains)
        budget_rounds = plan.rounds_within(n_steps)
        rounds = budget_rounds if args.max_rounds is None else min(budget_rounds, args.max_rounds)
        burn = max(1, rounds // 5)
        t0 = time.perf_counter()
        res = rs.sample(
            model,
            shards,
            chains=args.chains,
            num_rounds=rounds - burn + (1 if rounds == budget_rounds else 0),  # one past the budget: it stops there
            burn_in=burn,
            seed=args.seed,
            privacy=rs.DP(epsilon=eps, delta=args.delta, clip=args.clip, clip_rule=args.clip_rule),
            gamma_fraction=args.gamma_fraction,
            **run,
        )
        ps = res.run_stats.privacy
        records.append(
            {
                "run": f"DP ε={eps:g}",
                "epsilon": eps,
                **_accuracy(res.draws, ref_mean, ref_sd),
                "epsilon_spent": float(np.max(ps.epsilon_spent)),
                "clip_rate": float(np.mean(ps.clip_rate)),
                "rounds": int(res.run_stats.rounds),
                "min_ess": float(np.min(res.ess("bulk"))),
                "seconds": time.perf_counter() - t0,
                "stop_reason": str(res.outcome.stop_reason),
                "rho": float(rho[0]),
                "gamma": float(gamma[0]),
                "n_local": int(n_steps[0]),
                "step_sum_limit": plan.limit,
            }
        )
        print(records[-1], flush=True)
    table = harness.Table.of(
        f"DP mode vs the non-private run: covtype_like, {args.sites} sites × {args.rows} rows, d = {args.columns}, "
        f"δ = {args.delta:g}, C = {args.clip:g} ({args.clip_rule} rule), {args.chains} chains",
        records,
        [
            ("run", "run"),
            ("max |Δmean|/sd", "max_err_sd"),
            ("median |Δmean|/sd", "median_err_sd"),
            ("coverage", "coverage"),
            ("sd ratio", lambda r: f"{r['sd_ratio_min']:.2f}–{r['sd_ratio_max']:.2f}"),
            ("ε spent", "epsilon_spent"),
            ("clip rate", "clip_rate"),
            ("rounds", "rounds"),
            ("min ESS", "min_ess"),
            ("s", "seconds"),
            ("stop", "stop_reason"),
        ],
        notes=[
            "|Δmean|/sd: |mean − the non-private mean| / the non-private sd; coverage: the fraction of coordinates "
            "whose non-private mean lies in the DP run's central 95 % interval",
            "the non-private row compares the reference with itself (0 error by construction); its ESS and time "
            "are the reference run's",
        ],
    )
    name = "privacy_dp_quick" if args.quick else "privacy_dp"
    return harness.Report(name, {"settings": harness.options(args), "records": records}, [table])


def main() -> None:
    p = harness.parser(__doc__, __file__)
    p.add_argument("--sites", type=int, default=4)
    p.add_argument("--rows", type=int, default=10_000, help="rows per site")
    p.add_argument("--columns", type=int, default=14)
    p.add_argument("--epsilons", type=float, nargs="+", default=[0.5, 1.0, 2.0, 8.0])
    p.add_argument("--delta", type=float, default=1e-5)
    p.add_argument("--clip", type=float, default=2.0)
    p.add_argument("--clip-rule", default="features", choices=["gradient", "features"])
    p.add_argument("--gamma-fraction", type=float, default=0.5, help="γ_i = this · ρ_i/(ρ_i M_i + 1)")
    p.add_argument("--chains", type=int, default=2)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--max-rounds", type=int, default=None, help="cap each DP run's rounds (time)")
    p.add_argument("--ref-chains", type=int, default=4)
    p.add_argument("--ref-rounds", type=int, default=4000)
    p.add_argument("--bias", action="store_true", help="clipping's own shift of the target, without sampling")
    p.add_argument("--clips", type=float, nargs="+", default=[1.0, 2.0, 3.0, 4.0, 5.0], help="C values of --bias")
    p.add_argument("--quick", action="store_true", help="a smoke test: 2 sites × 2,000 rows, ε = 1, short runs")
    harness.run(p, measure)


if __name__ == "__main__":
    main()
