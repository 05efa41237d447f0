"""What the privacy modes cost. Secure sums: the same seeded DG-LMC run on breast_cancer with 4 sites, plain, with
fixed-point sums (`DGLMC(fixed_point=True)`, no masks) and with secure sums (`secure_sums=True`), side by side in one
process: median round time, bytes each site sends per round (the release ledger), set-up round trips, and the
posterior means' largest difference from the plain run's; the secure draws must equal the fixed-point run's bit for
bit.

Repeats alternate which variant goes first; ratios are medians of per-repeat ratios.

    python benchmarks/perf/privacy.py                    # in-process executor, 3 repeats of 4000 rounds
    python benchmarks/perf/privacy.py --executor ray     # on a local Ray (the sites' processes apart)

On Ray a secure-sums run hosts no shard in the coordinator's process (a site's terms are secret from it), so every
variant runs with RAYSAMPLER_COORDINATOR_SHARDS=0 and RAYSAMPLER_WORKER_PROCESSES=4 (one process per site) there,
to compare like with like.
    python benchmarks/perf/privacy.py --quick            # a smoke test
    python benchmarks/perf/privacy.py --algorithm fald   # FALD (or qlsd, ula): their sums masked the same way

Prints a table and writes benchmarks/perf/results/privacy_secure_<executor>.json (privacy_secure_<algorithm>_<executor>
for another algorithm than DG-LMC).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time
import warnings
from typing import Any

import _path  # noqa: F401  (puts benchmarks/ on sys.path for harness)
import harness
import numpy as np

import raysampler as rs

# the plain variants draw from the site-keyed streams a secure run draws from (`RunOptions.keyed_noise`), so that
# the three runs' draws can be compared number for number
VARIANTS = {
    "plain": {"keyed_noise": True},
    "fixed_point": {"fixed_point": True, "keyed_noise": True},
    "secure": {"secure_sums": True},
}
#: the quantities a site sends every round (the rest is the set-up's, and the checkpoints')
ROUND_QUANTITIES = (
    "z",
    "z/rho",
    "status",
    "local_accept",
    "step_time",
    "x",
    "x,grad",
    "q",
    "grad",
    "bits",
    "sq_error",
    "n_steps",
)


def one(shards: Any, variant: str, args: argparse.Namespace, seed: int) -> dict[str, Any]:
    """One run: its draws' means, its median round time, bytes per round per site, set-up round trips."""
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = rs.sample(
            rs.models.LogisticRegression(),
            shards,
            args.algorithm,
            chains=args.chains,
            num_rounds=args.rounds,
            burn_in=args.burn_in,
            seed=seed,
            executor=args.executor,
            progress=False,
            balance=False,
            **VARIANTS[variant],
        )
    stats = res.run_stats
    per_round = []
    for site in stats.ledger.shards:
        rounds = [r for r in site.releases if r.quantity in ROUND_QUANTITIES]
        per_round.append(sum(r.bytes for r in rounds) / max(r.messages for r in rounds))
    return {
        "wall_s": time.perf_counter() - t0,
        "round_s": float(np.median(stats.round_time)),
        "bytes_per_round": float(np.mean(per_round)),
        "setup_trips": int(stats.trips.setup),
        "means": res.draws.mean(axis=(0, 1)),
        "draws": res.draws,
    }


def measure(args: argparse.Namespace) -> harness.Report:
    X, y = rs.datasets.load("breast_cancer")
    shards = rs.shard(X, y, num_shards=4)
    if args.executor == "ray":  # one process per site, none in the coordinator's (as a secure run has it)
        os.environ["RAYSAMPLER_COORDINATOR_SHARDS"] = "0"
        os.environ["RAYSAMPLER_WORKER_PROCESSES"] = "4"
    runs: list[dict[str, Any]] = []
    ray = harness.local_ray(object_store_mb=400, num_cpus=args.cpus) if args.executor == "ray" else None
    with ray if ray is not None else contextlib.nullcontext():
        for rep in range(1 if args.quick else args.repeats):
            order = list(VARIANTS) if rep % 2 == 0 else list(reversed(VARIANTS))
            got = {v: one(shards, v, args, seed=rep) for v in order}
            identical = bool(np.array_equal(got["secure"]["draws"], got["fixed_point"]["draws"]))
            runs.append(
                {
                    "repeat": rep,
                    "secure_equals_fixed_point_bitwise": identical,
                    "max_mean_diff_secure_vs_plain": float(
                        np.abs(got["secure"]["means"] - got["plain"]["means"]).max()
                    ),
                    "max_draw_diff_secure_vs_plain": float(
                        np.abs(got["secure"]["draws"] - got["plain"]["draws"]).max()
                    ),
                    **{v: {k: val for k, val in r.items() if k not in ("draws", "means")} for v, r in got.items()},
                }
            )
            print(
                f"  repeat {rep + 1}: round plain {1e3 * got['plain']['round_s']:.3f} ms, secure "
                f"{1e3 * got['secure']['round_s']:.3f} ms; bitwise {identical}",
                flush=True,
            )
    ratio = harness.median(r["secure"]["round_s"] / r["plain"]["round_s"] for r in runs)
    fixed_ratio = harness.median(r["fixed_point"]["round_s"] / r["plain"]["round_s"] for r in runs)
    rows = [
        [
            v,
            1e3 * harness.median(r[v]["round_s"] for r in runs),
            {"plain": 1.0, "fixed_point": fixed_ratio, "secure": ratio}[v],
            runs[0][v]["bytes_per_round"],
            runs[0][v]["bytes_per_round"] / runs[0]["plain"]["bytes_per_round"],
            runs[0][v]["setup_trips"],
        ]
        for v in VARIANTS
    ]
    summary = {
        "round_time_ratio_secure_vs_plain": ratio,
        "bytes_ratio_secure_vs_plain": runs[0]["secure"]["bytes_per_round"] / runs[0]["plain"]["bytes_per_round"],
        "max_mean_diff_secure_vs_plain": max(r["max_mean_diff_secure_vs_plain"] for r in runs),
        "secure_equals_fixed_point_bitwise": all(r["secure_equals_fixed_point_bitwise"] for r in runs),
    }
    table = harness.Table(
        f"Secure sums, {args.algorithm} on breast_cancer, 4 sites, {args.chains} chains, {args.rounds} rounds after "
        f"{args.burn_in} of burn-in, executor {args.executor}",
        ["variant", "round ms (median)", "× plain", "bytes/round/site", "× plain", "set-up trips"],
        rows,
        [
            f"secure draws equal the fixed-point run's bit for bit: {summary['secure_equals_fixed_point_bitwise']}",
            f"largest |mean(secure) − mean(plain)| over the parameters: {summary['max_mean_diff_secure_vs_plain']:.2e}",
        ],
    )
    name = (
        f"privacy_secure_{args.executor}"
        if args.algorithm == "dglmc"
        else f"privacy_secure_{args.algorithm}_{args.executor}"
    )
    return harness.Report(name, {"settings": harness.options(args), "summary": summary, "runs": runs}, [table])


def arguments() -> argparse.ArgumentParser:
    ap = harness.parser(__doc__, __file__, ray=True)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=4000)
    ap.add_argument("--burn-in", type=int, default=500)
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--executor", choices=["local", "ray"], default="local")
    ap.add_argument("--algorithm", choices=["dglmc", "fald", "qlsd", "ula"], default="dglmc")
    return ap


def main(argv: list[str] | None = None) -> None:
    args = arguments().parse_args(argv)
    if args.quick:
        args.rounds, args.burn_in = 300, 50
    harness.run(arguments(), lambda _: measure(args), argv)


if __name__ == "__main__":
    main()
