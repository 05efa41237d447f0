"""A site's own cores: one site holding one file of hospitals (the built-in `hospitals` data), on a node with
`--cpus` CPUs of a Ray cluster on this machine (`ray.cluster_utils.Cluster`: a head with no CPUs, the site node
labelled raysampler.io/site=s0). Default DG-LMC with group effects, run twice in one go: the file kept whole
(`Shard(parts=1)`: one worker process) and split at the site over its cores (`parts="auto"`: as many processes as
CPUs, whole hospitals each). Reported: wall seconds per round, the workers' compute per round, min bulk ESS per
second over every parameter, and the split's speed-up.

    python benchmarks/perf/site_cores.py [--groups 200] [--cpus 2] [--rounds 1000] [--chains 4]
Results: benchmarks/perf/results/site_cores.json.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import _path  # noqa: F401  (puts benchmarks/ on sys.path for harness)
import harness
import numpy as np

import raysampler as rs


def arguments() -> argparse.ArgumentParser:
    ap = harness.parser(__doc__, __file__)
    ap.add_argument("--groups", type=int, default=200)
    ap.add_argument("--cpus", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=1000)
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    return ap


def measure(args: argparse.Namespace) -> harness.Report:
    import pyarrow as pa
    import pyarrow.parquet as pq

    X, y = rs.datasets.load("hospitals", seed=args.seed, n_groups=args.groups)
    cols = rs.datasets.columns("hospitals", n_groups=args.groups)
    folder = Path(tempfile.mkdtemp(prefix="rs-site-"))
    path = folder / "hospitals.parquet"
    pq.write_table(pa.table({"y": y} | {c: X[:, j] for j, c in enumerate(cols)}), path)
    model = rs.models.LogisticRegression(prior_scale=2.5, group_effects=rs.GroupEffects("hospital"))
    runs: dict[str, dict[str, Any]] = {}
    with harness.site_cluster([args.cpus]) as (site,):
        for name, parts in (("whole (1 process)", 1), (f"split at the site ({args.cpus} CPUs)", "auto")):
            shard = rs.Shard(path=str(path), site=site, parts=parts)
            t0 = time.perf_counter()
            res = rs.sample(model, [shard], chains=args.chains, num_rounds=args.rounds, seed=args.seed,
                            executor="ray", progress=False)  # fmt: skip
            stats = res.run_stats
            ess = res.ess()
            runs[name] = {
                "shards": len(stats.placement),
                "processes": len({p.pid for p in stats.placement}),
                "round_ms": 1000.0 * stats.sampling_time_s / stats.rounds,
                "worker_compute_ms": (1000.0 * np.asarray(stats.worker_compute_s) / stats.rounds).tolist(),
                "min_ess": float(ess.min()),
                "ess_per_s": float(ess.min() / stats.sampling_time_s),
                "setup_s": res.outcome.timings.setup_s,
                "wall_s": time.perf_counter() - t0,
            }
    whole, split = runs.values()
    speedup = whole["round_ms"] / split["round_ms"]
    table = harness.Table(
        f"A site's own cores: {args.groups} hospitals (n = {len(y)}) in one site file, a {args.cpus}-CPU site node",
        ["run", "shards", "processes", "ms per round", "min ESS", "ESS/s", "set-up s"],
        [_row(k, r) for k, r in runs.items()],
        [f"rounds {speedup:.2f}x faster split; ESS/s {split['ess_per_s'] / whole['ess_per_s']:.2f}x"],
    )
    payload = {"settings": harness.options(args), "runs": runs, "round_speedup": speedup, "table": table.markdown()}
    return harness.Report("site_cores", payload, [table])


def _row(name: str, r: dict[str, Any]) -> list[Any]:
    return [name, r["shards"], r["processes"], f"{r['round_ms']:.1f}", f"{r['min_ess']:.0f}",
            f"{r['ess_per_s']:.2f}", f"{r['setup_s']:.1f}"]  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    harness.run(arguments(), measure, argv)


if __name__ == "__main__":
    main()
