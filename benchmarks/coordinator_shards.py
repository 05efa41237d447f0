"""Does the coordinator's process hosting a group of shards pay? Default DG-LMC on Ray with and without it.

With RAYSAMPLER_COORDINATOR_SHARDS=1 (the default) the coordinator actor's own process hosts the first group of
site-less shards and steps it while the worker actors step theirs; with 0 every shard is on a worker actor. The
draws are identical (checked here); only the time per round differs. Measured side by side in one process and one
private 2-CPU Ray, the variants interleaved repeat by repeat, with in-process (executor="local") as the yardstick:

* breast_cancer, b = 4, 4 chains, default DG-LMC (the issue's ESS/s case: 142 rows per shard, a round is messaging);
* covtype_like, n = 100,000 by default, b = 4 random shards, 8 chains, default DG-LMC (compute-bound).

Reported per case: median over repeats of the sampling time (setup excluded), of the median round time, and of
min bulk ESS per second; the ratio "coordinator hosts / all on actors" of each repeat's time, then its median.

    python benchmarks/coordinator_shards.py [--repeats 3] [--rounds 20000] [--covtype-rounds 400]

Writes benchmarks/results/coordinator_shards.json.
"""

from __future__ import annotations

import argparse
import os
import warnings
from typing import Any

import numpy as np
from common import load_model_data, median, print_table, run_metrics, start_ray, stop_ray, write_json

import raysampler as rs

VARIANTS = (("local", None), ("ray", "0"), ("ray", "1"))


def label(executor: str, hosts: str | None) -> str:
    if executor == "local":
        return "in-process"
    return "ray, coordinator hosts a group" if hosts == "1" else "ray, every shard on an actor"


def run_once(problem: str, executor: str, hosts: str | None, args: argparse.Namespace) -> dict[str, Any]:
    if hosts is not None:
        os.environ["RAYSAMPLER_COORDINATOR_SHARDS"] = hosts  # read by the driver when the run is built
    X, y, model = load_model_data(problem, covtype_n=args.covtype_n)
    if problem == "breast_cancer":
        data, chains, rounds = rs.shard(X, y, num_shards=4), 4, args.rounds
    else:
        data, chains, rounds = rs.shard(X, y, num_shards=4, strategy="random", seed=0), 8, args.covtype_rounds
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = rs.sample(
            model, data, chains=chains, num_rounds=rounds, executor=executor, seed=args.seed, progress=False
        )
    m = run_metrics(res)
    ess = float(np.min(np.asarray(res.ess("bulk"), dtype=float)))
    m.update(
        problem=problem,
        variant=label(executor, hosts),
        min_ess=ess,
        ess_per_s=ess / m["sampling_time_s"],
        pids=[p["pid"] for p in res.stats["placement"]],
        checksum=float(np.sum(res.draws)),
    )
    return m


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=20000, help="breast_cancer rounds after burn-in (default 20000)")
    ap.add_argument("--covtype-rounds", type=int, default=400)
    ap.add_argument("--covtype-n", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", choices=("breast_cancer", "covtype_like"), default=None)
    args = ap.parse_args()
    start_ray(object_store_mb=512)
    problems = [args.only] if args.only else ["breast_cancer", "covtype_like"]
    runs: list[dict[str, Any]] = []
    for r in range(args.repeats):
        for problem in problems:
            for executor, hosts in VARIANTS:
                m = run_once(problem, executor, hosts, args)
                m["repeat"] = r
                runs.append(m)
                print(f"repeat {r} {problem} {m['variant']}: {m['sampling_time_s']:.2f} s", flush=True)
    stop_ray()
    os.environ.pop("RAYSAMPLER_COORDINATOR_SHARDS", None)

    summary, rows = [], []
    for problem in problems:
        mine = [m for m in runs if m["problem"] == problem]
        same = len({m["checksum"] for m in mine}) == 1
        for executor, hosts in VARIANTS:
            ms = [m for m in mine if m["variant"] == label(executor, hosts)]
            s = {
                "problem": problem,
                "variant": label(executor, hosts),
                "sampling_time_s": median(m["sampling_time_s"] for m in ms),
                "median_round_ms": median(m["median_round_ms"] for m in ms),
                "ess_per_s": median(m["ess_per_s"] for m in ms),
                "min_ess": median(m["min_ess"] for m in ms),
                "identical_draws": same,
            }
            summary.append(s)
            rows.append([problem, s["variant"], s["sampling_time_s"], s["median_round_ms"], s["ess_per_s"], same])
    ratios = []
    for problem in problems:
        per = [
            next(m for m in runs if m["problem"] == problem and m["repeat"] == r and m["variant"] == label("ray", "1"))[
                "sampling_time_s"
            ]
            / next(
                m for m in runs if m["problem"] == problem and m["repeat"] == r and m["variant"] == label("ray", "0")
            )["sampling_time_s"]
            for r in range(args.repeats)
        ]
        ratios.append({"problem": problem, "time ratio hosts / all on actors": median(per), "per_repeat": per})
    print_table(
        "Coordinator hosting a group of shards (medians over repeats)",
        ["problem", "variant", "sampling s", "median round ms", "ESS/s", "identical draws"],
        rows,
        [
            f"{r['problem']}: time ratio hosts / all on actors = {r['time ratio hosts / all on actors']:.3f}"
            for r in ratios
        ],
    )
    write_json("coordinator_shards", {"settings": vars(args), "summary": summary, "ratios": ratios, "runs": runs})


if __name__ == "__main__":
    main()
