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

Run (about 10–15 minutes on 2 cores with the defaults; `--quick` is a smoke test):

    python benchmarks/perf/privacy_dp.py
    python benchmarks/perf/privacy_dp.py --epsilons 1 8 --clip 2
    python benchmarks/perf/privacy_dp.py --quick

Prints the table and writes benchmarks/perf/results/privacy_dp.json (privacy_dp_quick.json with --quick).
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


def measure(args: argparse.Namespace) -> harness.Report:
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
    p.add_argument("--quick", action="store_true", help="a smoke test: 2 sites × 2,000 rows, ε = 1, short runs")
    harness.run(p, measure)


if __name__ == "__main__":
    main()
