"""What one machine allows its simulated sites, with no Ray and no messages: k processes, each holding its own
covtype_like-shaped shard (--rows-per-site × 54, as `scaling.py`'s weak series), step the default local kernel's
arithmetic (the logistic potential of --chains proposals: X Θᵀ and the softplus sum, one BLAS thread) in lockstep,
a barrier after every step as a synchronous round has.

Per k: each process's median compute per step (mean and max over the processes) and the lockstep period (the
median time from one barrier to the next). Period at 1 ÷ period at k is the weak-scaling efficiency that a runtime
with no overhead at all would reach on this machine: the processes share its memory bandwidth and caches, and each
round waits for the slowest. `scaling.py`'s efficiencies are to be read against it.

    python benchmarks/perf/contention.py [--processes 1,4,8,16] [--rows-per-site 25000] [--steps 300]
Results: benchmarks/perf/results/contention.json.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import time
from typing import Any

import _path  # noqa: F401  (puts benchmarks/ on sys.path for harness)
import harness
import numpy as np

WARMUP = 20


def _worker(rank: int, rows: int, chains: int, steps: int, barrier: Any, out: Any) -> None:
    """One simulated site: its own shard, `steps` potentials of `chains` proposals, a barrier after each."""
    from threadpoolctl import threadpool_limits

    import raysampler as rs

    threadpool_limits(limits=1)
    X, y = rs.datasets.load("covtype_like", n=rows, seed=rank)
    model = rs.models.LogisticRegression()
    Xs, ys = X[None], np.asarray(y, dtype=np.float64)[None]
    rng = np.random.default_rng(rank)
    compute, period = [], []
    barrier.wait()
    last = time.perf_counter()
    for k in range(WARMUP + steps):
        theta = 0.01 * rng.standard_normal((1, chains, X.shape[1]))
        t0 = time.perf_counter()
        model.potential_stacked(Xs, ys, theta)
        t1 = time.perf_counter()
        barrier.wait()
        now = time.perf_counter()
        if k >= WARMUP:
            compute.append(t1 - t0)
            period.append(now - last)
        last = now
    out.put((rank, float(np.median(compute)), float(np.median(period))))


def measure_k(k: int, rows: int, chains: int, steps: int) -> dict[str, Any]:
    """k processes in lockstep: their median compute per step (mean, max) and the lockstep period, in ms."""
    ctx = mp.get_context("spawn")
    barrier, out = ctx.Barrier(k), ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(r, rows, chains, steps, barrier, out)) for r in range(k)]
    for p in procs:
        p.start()
    got = [out.get() for _ in procs]
    for p in procs:
        p.join()
    compute = np.array([g[1] for g in got]) * 1e3
    period = float(np.median([g[2] for g in got])) * 1e3
    return {"processes": k, "compute_mean_ms": float(compute.mean()), "compute_max_ms": float(compute.max()),
            "period_ms": period}  # fmt: skip


def arguments() -> argparse.ArgumentParser:
    ap = harness.parser(__doc__, __file__)
    ap.add_argument("--processes", default="1,4,8,16", help="comma-separated process counts")
    ap.add_argument("--rows-per-site", type=int, default=25_000)
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--steps", type=int, default=300)
    return ap


def measure(args: argparse.Namespace) -> harness.Report:
    counts = [int(v) for v in args.processes.split(",")]
    if not counts or min(counts) < 1:
        raise SystemExit(f"--processes: expected positive counts, got {args.processes!r}")
    runs = []
    for k in counts:
        r = measure_k(k, args.rows_per_site, args.chains, args.steps)
        runs.append(r)
        print(f"  {k} processes: compute {r['compute_mean_ms']:.3f} ms (max {r['compute_max_ms']:.3f}), "
              f"period {r['period_ms']:.3f} ms", flush=True)  # fmt: skip
    base = runs[0]["period_ms"]
    table = harness.Table.of(
        f"Simulated sites in lockstep, no runtime ({os.cpu_count()} CPUs; {args.rows_per_site} rows × 54 per site, "
        f"{args.chains} chains)",
        runs,
        [
            ("processes", "processes"),
            ("compute ms (mean)", "compute_mean_ms"),
            ("compute ms (max)", "compute_max_ms"),
            ("lockstep period ms", "period_ms"),
            ("efficiency ceiling", lambda r: base / r["period_ms"]),
        ],
        [f"efficiency ceiling = period at {counts[0]} process(es) ÷ period at k: what synchronous rounds reach here"],
    )
    return harness.Report("contention", {"settings": harness.options(args), "runs": runs}, [table])


def main(argv: list[str] | None = None) -> None:
    harness.run(arguments(), measure, argv)


if __name__ == "__main__":
    main()
