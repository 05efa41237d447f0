"""Rounds/s and ESS/s of default DG-LMC against the number of sites (1 to 16), with shards pinned to sites, and
each round's parts (`RunStats.breakdown`: the coordinator's compute, encoding, sending, waiting for the slowest
worker, receiving, and the overhead: round time minus the slowest worker's compute) against the sites and
processes.

Sites are Ray nodes labelled raysampler.io/site=<name>; each site holds one shard as a parquet file in its own folder
and its worker is placed on that site's node. Two series, logistic regression on covtype_like-shaped data:
  * weak scaling: fixed rows per site (--rows-per-site), so the total grows with the sites;
  * strong scaling: fixed total rows (--total-rows), split across the sites.
Efficiency (weak) = rounds/s at k sites ÷ rounds/s at 1 site; speed-up (strong) = the same ratio at fixed total work.
Beside each weak point, k processes with no Ray compute the local step's potential in lockstep on the same machine
(`contention.py`): their period at 1 ÷ at k is the efficiency the machine allows synchronous rounds.

IMPORTANT: on one machine the "sites" are simulated nodes (ray.cluster_utils.Cluster) sharing its cores, so on this
2-core machine the numbers measure the runtime's overhead with more sites (messaging, placement, more processes on
the same two cores), not the scaling of real machines. With 16 cores (one per site and a few spare) the weak
efficiency measures real parallel scaling; on a cluster it is the network's turn.

    python benchmarks/perf/scaling.py                  # weak + strong, sites 1,2,4,8,16
    python benchmarks/perf/scaling.py --quick          # sites 1,2, few rounds
    python benchmarks/perf/scaling.py --series weak --sites 1,4,8,16 --rows-per-site 25000

Prints tables and writes benchmarks/perf/results/scaling.json.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import _path  # noqa: F401  (puts benchmarks/ on sys.path for harness)
import contention
import harness
import numpy as np
import pandas as pd

import raysampler as rs


def write_sites(X: np.ndarray, y: np.ndarray, k: int, root: Path) -> list[rs.Shard]:
    """Split (X, y) into k parquet files, one per site folder, and the shards that name them."""
    names = [f"x{j}" for j in range(X.shape[1])]
    shards = []
    for i, (Xi, yi) in enumerate(zip(np.array_split(X, k), np.array_split(y, k))):
        folder = root / f"site{i}"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / "part.parquet"
        pd.DataFrame(Xi, columns=names).assign(y=yi).to_parquet(path)
        shards.append(rs.Shard(path=str(path), site=f"s{i}"))
    return shards


def measure_sites(k: int, rows: int, rounds: int, chains: int, seed: int) -> dict[str, Any]:
    """A fresh cluster of k one-CPU site nodes (and a head with one CPU for the coordinator); one default run."""
    with harness.site_cluster([1] * k, head_cpus=1, object_store_mb=100):
        X, y = rs.datasets.load("covtype_like", n=rows, seed=seed)
        with tempfile.TemporaryDirectory(prefix="rs-scaling-") as tmp:
            shards = write_sites(X, y, k, Path(tmp))
            t0 = time.perf_counter()
            res = rs.sample(
                rs.models.LogisticRegression(),
                rs.shard(shards),
                "dglmc",
                chains=chains,
                num_rounds=rounds,
                burn_in=max(20, rounds // 10),
                seed=seed,
                executor="ray",
                progress=False,
                balance=False,
            )
            wall = time.perf_counter() - t0
        ess = float(np.min(res.ess("bulk")))
        sampling = float(res.run_stats.sampling_time_s)
        hosts = {p.node_id for p in res.run_stats.placement}
        parts = {f"{k[:-2]}_ms": 1e3 * v for k, v in vars(res.run_stats.breakdown()).items() if k.endswith("_s")}
        return {
            **parts,
            "processes": res.run_stats.breakdown().processes,
            "sites": k,
            "rows": rows,
            "rounds": int(res.run_stats.rounds),
            "sampling_s": sampling,
            "wall_s": wall,
            "rounds_per_s": res.run_stats.rounds / sampling,
            "min_ess": ess,
            "ess_per_s": ess / sampling,
            "nodes_used": len(hosts),
            "idle_fraction": np.asarray(res.run_stats.idle_fraction).tolist(),
        }


def arguments() -> argparse.ArgumentParser:
    ap = harness.parser(__doc__, __file__)
    ap.add_argument("--sites", default="1,2,4,8,16")
    ap.add_argument("--rows-per-site", type=int, default=25_000)
    ap.add_argument("--total-rows", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=300)
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--series", default="weak,strong", help="comma-separated, of weak and strong")
    ap.add_argument("--quick", action="store_true")
    return ap


def measure(args: argparse.Namespace) -> harness.Report:
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    sites = [1, 2] if args.quick else [int(s) for s in args.sites.split(",")]
    rounds = 40 if args.quick else args.rounds
    words = [w.strip() for w in args.series.split(",") if w.strip()]
    unknown = sorted(set(words) - {"weak", "strong"})
    if unknown:
        raise SystemExit(f"--series: unknown {', '.join(map(repr, unknown))} (expected weak and/or strong)")
    chosen = [s for s in ("weak", "strong") if s in words]
    if not chosen:
        raise SystemExit(f"--series: expected weak and/or strong, got {args.series!r}")
    out: dict[str, list[dict[str, Any]]] = {s: [] for s in chosen}
    for series in chosen:
        for k in sites:
            rows = args.rows_per_site * k if series == "weak" else args.total_rows
            r = measure_sites(k, rows, rounds, args.chains, args.seed)
            if series == "weak":  # what k processes in lockstep reach here with no runtime, right after
                r["lockstep_period_ms"] = contention.measure_k(k, args.rows_per_site, args.chains, rounds)["period_ms"]
            out[series].append(r)
            print(
                f"  {series} k={k}: {r['rows']} rows, {r['rounds_per_s']:.1f} rounds/s, ESS/s {r['ess_per_s']:.2f}, "
                f"{r['nodes_used']} nodes",
                flush=True,
            )
    tables = [
        harness.Table.of(
            f"{series} scaling (simulated site nodes on one {os.cpu_count()}-core machine)",
            out[series],
            [("sites", "sites"), ("rows", "rows"), ("rounds/s", "rounds_per_s")]
            + [(f"{label} (rounds/s ÷ 1 site)", lambda r, s=series: r["rounds_per_s"] / out[s][0]["rounds_per_s"])]
            + _ceiling(series, out)
            + [("min ESS", "min_ess"), ("ESS/s", "ess_per_s"), ("nodes used", "nodes_used")],
        )
        for series, label in (("weak", "efficiency"), ("strong", "speed-up"))
        if series in out
    ]
    tables += [
        harness.Table.of(
            f"{series} scaling: the median round's parts (ms)",
            out[series],
            [("sites", "sites"), ("processes", "processes"), ("round", "round_ms")]
            + [(p, f"{p}_ms") for p in ("coordinator", "encode", "send", "hosted", "wait", "receive")]
            + [("slowest worker", "slowest_worker_ms"), ("overhead", "overhead_ms")],
            ["overhead = round − the slowest worker process's compute; parts are medians over the rounds"],
        )
        for series in out
    ]
    note = {"cpu_count": os.cpu_count(), "note": "simulated nodes on one machine: measures overhead"}
    return harness.Report("scaling", {"settings": harness.options(args) | note, **out}, tables)


def _ceiling(series: str, out: dict[str, list[dict[str, Any]]]) -> list[tuple[str, Any]]:
    """The weak table's column: the same processes in lockstep with no runtime (`contention.py`), period at 1 site
    ÷ period at k, the efficiency this machine allows synchronous rounds."""
    if series != "weak":
        return []
    base = out["weak"][0]["lockstep_period_ms"]
    return [("ceiling (no runtime)", lambda r: base / r["lockstep_period_ms"])]


def main(argv: list[str] | None = None) -> None:
    harness.run(arguments(), measure, argv)


if __name__ == "__main__":
    main()
