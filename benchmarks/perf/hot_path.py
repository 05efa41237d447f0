"""The Ray round loop's two same-node defaults, each switched off in turn: default DG-LMC on Ray side by side.

* RAYSAMPLER_COORDINATOR_SHARDS=1 (default): the coordinator actor's own process hosts the first group of site-less
  shards and steps it while the worker actors step theirs (0: every shard on a worker actor).
* RAYSAMPLER_SHM_SPIN_US=1000 (default): a shared-memory channel's reader watches for the next message for up to
  1 ms, yielding its core between looks, before it sleeps on its eventfd (0: it sleeps at once).

Both are about two worker processes, so every variant runs in two (RAYSAMPLER_WORKER_PROCESSES=2; by default shards
as small as breast_cancer's share the coordinator's process alone: benchmarks/perf/round_cost.py).
The draws are identical in every variant (checked here); only the time per round differs. Measured in one process
and one private 2-CPU Ray, the variants interleaved repeat by repeat, with in-process (executor="local") as the
yardstick, on
* breast_cancer, b = 4, 4 chains, default DG-LMC (the issue's ESS/s case: 142 rows per shard, a round is messaging);
* covtype_like, n = 100,000 by default, b = 4 random shards, 8 chains, default DG-LMC (compute-bound).

Reported per case and variant: medians over repeats of the sampling time (setup excluded), of the median round time
and of min bulk ESS per second; and the median over repeats of each variant's time / the time with both off. On
breast_cancer also the draws' max |mean − reference| in reference sds (and in Monte-Carlo errors, max z) against the
pooled-data HMC reference.

    python benchmarks/perf/hot_path.py [--repeats 3] [--rounds 20000] [--covtype-rounds 400]

Writes benchmarks/perf/results/hot_path.json.
"""

from __future__ import annotations

import argparse
import os
import warnings
from typing import Any

import _path  # noqa: F401  (puts benchmarks/ on sys.path for harness)
import harness
import numpy as np
from ess import accuracy, breast_cancer_reference, describe_draws

import raysampler as rs

#: (label, executor, RAYSAMPLER_COORDINATOR_SHARDS, RAYSAMPLER_SHM_SPIN_US); the settings are read by the driver
#: when a run is built, so one Ray serves every variant.
VARIANTS = (
    ("in-process", "local", "1", "1000"),
    ("ray, both off", "ray", "0", "0"),
    ("ray, coordinator hosts a group", "ray", "1", "0"),
    ("ray, readers spin 1 ms", "ray", "0", "1000"),
    ("ray, both (default)", "ray", "1", "1000"),
)
BASELINE = "ray, both off"


def run_once(problem: str, variant: tuple[str, str, str, str], args: argparse.Namespace) -> dict[str, Any]:
    name, executor, hosts, spin = variant
    os.environ["RAYSAMPLER_COORDINATOR_SHARDS"] = hosts
    os.environ["RAYSAMPLER_SHM_SPIN_US"] = spin
    os.environ["RAYSAMPLER_WORKER_PROCESSES"] = "2"  # the layout these defaults are about
    X, y, model = harness.load_model_data(problem, covtype_n=args.covtype_n)
    if problem == "breast_cancer":
        data, chains, rounds = rs.shard(X, y, num_shards=4), 4, args.rounds
    else:
        data, chains, rounds = rs.shard(X, y, num_shards=4, strategy="random", seed=0), 8, args.covtype_rounds
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = rs.sample(
            model, data, chains=chains, num_rounds=rounds, executor=executor, seed=args.seed, progress=False
        )
    m = harness.run_metrics(res)
    ess = float(np.min(np.asarray(res.ess("bulk"), dtype=float)))
    m.update(
        problem=problem,
        variant=name,
        min_ess=ess,
        ess_per_s=ess / m["sampling_time_s"],
        pids=[p.pid for p in res.run_stats.placement],
        checksum=float(np.sum(res.draws)),
    )
    if problem == "breast_cancer":  # against the pooled-data HMC reference, in its sds
        m.update(accuracy(describe_draws(res), breast_cancer_reference(None)))
    return m


def arguments() -> argparse.ArgumentParser:
    ap = harness.parser(__doc__, __file__, ray=True)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=20000, help="breast_cancer rounds after burn-in (default 20000)")
    ap.add_argument("--covtype-rounds", type=int, default=400)
    ap.add_argument("--covtype-n", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", choices=("breast_cancer", "covtype_like"), default=None)
    return ap


def measure(args: argparse.Namespace) -> harness.Report:
    problems = [args.only] if args.only else ["breast_cancer", "covtype_like"]
    runs: list[dict[str, Any]] = []
    try:
        with harness.local_ray(object_store_mb=512, num_cpus=args.cpus):
            for r in range(args.repeats):
                for problem in problems:
                    for variant in VARIANTS:
                        m = run_once(problem, variant, args)
                        m["repeat"] = r
                        runs.append(m)
                        print(f"repeat {r} {problem} {m['variant']}: {m['sampling_time_s']:.2f} s", flush=True)
    finally:
        os.environ.pop("RAYSAMPLER_COORDINATOR_SHARDS", None)
        os.environ.pop("RAYSAMPLER_SHM_SPIN_US", None)
        os.environ.pop("RAYSAMPLER_WORKER_PROCESSES", None)
    summary = [summarise(runs, problem, name) for problem in problems for name, *_ in VARIANTS]
    table = harness.Table.of(
        "The Ray round loop's same-node defaults (medians over repeats)",
        summary,
        [("problem", "problem"), ("variant", "variant"), ("sampling s", "sampling_time_s")]
        + [("median round ms", "median_round_ms"), ("ESS/s", "ess_per_s"), ("time / both off", "time_vs_both_off")]
        + [("identical draws", "identical_draws")],
    )
    return harness.Report("hot_path", {"settings": harness.options(args), "summary": summary, "runs": runs}, [table])


def summarise(runs: list[dict[str, Any]], problem: str, variant: str) -> dict[str, Any]:
    """One variant on one problem: medians over repeats, and its time over the both-off variant's per repeat."""
    mine = [m for m in runs if m["problem"] == problem]
    ms = [m for m in mine if m["variant"] == variant]
    base = {b["repeat"]: b["sampling_time_s"] for b in mine if b["variant"] == BASELINE}
    per = [m["sampling_time_s"] / base[m["repeat"]] for m in ms]
    return {
        "problem": problem,
        "variant": variant,
        "sampling_time_s": harness.median(m["sampling_time_s"] for m in ms),
        "median_round_ms": harness.median(m["median_round_ms"] for m in ms),
        "ess_per_s": harness.median(m["ess_per_s"] for m in ms),
        "min_ess": harness.median(m["min_ess"] for m in ms),
        "time_vs_both_off": harness.median(per),
        "time_vs_both_off_per_repeat": per,
        "identical_draws": len({m["checksum"] for m in mine}) == 1,
        "max_err_sd": ms[0].get("max_err_sd"),  # the same draws in every repeat and variant
        "max_z": ms[0].get("max_z"),
    }


def main(argv: list[str] | None = None) -> None:
    harness.run(arguments(), measure, argv)


if __name__ == "__main__":
    main()
