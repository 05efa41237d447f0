"""PSIS-LOO at the shards against the sampling run that produced the draws (issue 23): covtype_like with `--rows`
rows in `--shards` shards, DG-LMC on Ray with `--chains` chains and `--draws` kept draws in all; then
`result.loo()` on the same Ray (each shard's rows evaluated and Pareto-smoothed where they live, in a Ray task), and
each shard's LOO task once more in a Ray worker to read the peak resident memory it adds (Linux: VmHWM, reset
before the task), at the default S = 1,000 draws and at a quarter of them: memory grows with S (a block of
BLOCK_ROWS rows × S log-likelihood values at a time).

    python benchmarks/perf/loo.py [--rows 100000] [--shards 4] [--chains 4] [--draws 1000] [--cpus 2]
Results: benchmarks/perf/results/loo.json.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import _path  # noqa: F401  (puts benchmarks/ on sys.path for harness)
import harness

import raysampler as rs
from raysampler import evaluation


def arguments() -> argparse.ArgumentParser:
    ap = harness.parser(__doc__, __file__)
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--draws", type=int, default=1000, help="kept draws in all (over the chains)")
    ap.add_argument("--cpus", type=int, default=2, help="CPUs of the local Ray")
    ap.add_argument("--seed", type=int, default=0)
    return ap


def _status_mb(field: str) -> float:
    """A memory line of /proc/self/status (VmRSS: resident now, VmHWM: its peak) in MB."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024.0
    raise RuntimeError(f"no {field} in /proc/self/status")


def _shard_task_memory(task: evaluation.LooTask, i: int, shard: rs.Shard) -> dict[str, float]:
    """Runs in a Ray worker: its resident memory before one shard's LOO task and the peak during it (the peak is
    reset first, through /proc/self/clear_refs), and the task's seconds."""
    import gc

    gc.collect()
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")  # resets VmHWM to the current resident size
    before = _status_mb("VmRSS")
    t = time.perf_counter()
    evaluation.on_shard(task, i, (shard,))
    return {"baseline_mb": before, "peak_mb": _status_mb("VmHWM"), "seconds": time.perf_counter() - t}


def memory(ray: Any, result: rs.Result, draws: int) -> list[dict[str, float]]:
    """Each shard's LOO task at `draws` thinned draws, in a Ray worker, with its memory."""
    thinned = evaluation.thin_draws(result.draws, draws)
    S = thinned.shape[0] * thinned.shape[1]
    task = evaluation.LooTask(
        result.model,
        thinned,
        evaluation.r_eff(thinned, result.param_blocks),
        evaluation.good_k(S),
        tuple(result.param_names),
    )
    fresh = ray.remote(num_cpus=1)(_shard_task_memory)
    assert result.data is not None
    rows = [fresh.remote(task, i, s) for i, s in enumerate(result.data)]
    return [ray.get(r) | {"draws": S, "rows": int(s.n_rows or 0)} for r, s in zip(rows, result.data)]


def measure(args: argparse.Namespace) -> harness.Report:
    X, y = rs.datasets.load("covtype_like", n=args.rows, seed=args.seed)
    shards = rs.shard(X, y, num_shards=args.shards, seed=args.seed)
    rounds = args.draws // args.chains
    with harness.local_ray(object_store_mb=max(200, 3 * X.nbytes // 2**20), num_cpus=args.cpus) as ray:
        t = time.perf_counter()
        result = rs.sample(
            rs.models.LogisticRegression(), shards, chains=args.chains, num_rounds=rounds, executor="ray", seed=1
        )
        sample_wall = time.perf_counter() - t
        timings = result.outcome.timings if result.outcome is not None else None
        t = time.perf_counter()
        lo = result.loo()
        loo_s = time.perf_counter() - t
        mem = memory(ray, result, evaluation.DEFAULT_DRAWS) + memory(ray, result, evaluation.DEFAULT_DRAWS // 4)
    payload = {
        "options": harness.options(args),
        "rows": args.rows,
        "shards": args.shards,
        "draws": int(result.chains * result.num_draws),
        "sample_wall_s": sample_wall,
        "sampling_s": None if timings is None else timings.sampling_s,
        "setup_s": None if timings is None else timings.setup_s,
        "loo_s": loo_s,
        "elpd": lo.elpd,
        "se": lo.se,
        "p_loo": lo.p,
        "k_high": lo.k_high,
        "block_rows": evaluation.BLOCK_ROWS,
        "per_shard_memory": mem,
    }
    tables = [
        harness.Table(
            f"covtype_like n={args.rows:,} in {args.shards} shards, {payload['draws']:,} draws, Ray {args.cpus} CPUs "
            "(seconds)",
            ["rs.sample (wall)", "of which sampling", "result.loo()", "loo / sampling", "elpd_loo", "SE", "k ≥ 0.7"],
            [[sample_wall, payload["sampling_s"], loo_s, loo_s / sample_wall, lo.elpd, lo.se, lo.k_high]],
        ),
        harness.Table.of(
            "One shard's LOO task in a Ray worker: resident memory (MB)",
            mem,
            [
                ("draws S", "draws"),
                ("rows", "rows"),
                ("worker before", "baseline_mb"),
                ("peak during the task", "peak_mb"),
                ("added by the task", lambda r: r["peak_mb"] - r["baseline_mb"]),
                ("seconds", "seconds"),
            ],
            notes=[
                f"a shard's log-likelihood is held {evaluation.BLOCK_ROWS} rows × S at a time; the rows, their "
                "elpd_i and k are O(rows)",
            ],
        ),
    ]
    return harness.Report("loo", payload, tables)


def main(argv: list[str] | None = None) -> None:
    harness.run(arguments(), measure, argv)


if __name__ == "__main__":
    main()
