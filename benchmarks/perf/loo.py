"""PSIS-LOO at the shards against the sampling run that produced the draws (issues 23 and 28): covtype_like with
`--rows` rows in `--shards` shards, DG-LMC on a local Ray with `--cpus` CPUs (default: all of this machine's),
`--chains` chains and `--draws` kept draws in all; then, side by side on the same Ray and draws:

* `result.loo()`: each shard's rows cut into ranges by its site's CPUs (here the local Ray's), one Ray task each,
  evaluated and Pareto-smoothed in blocks of rows by the batched PSIS;
* before (unless `--no-before`): the same tasks with arviz-stats' `psislw` run one row at a time, as `result.loo()`
  did before issue 28 (the reference: its elpd must be the same);

and each shard's first task once more, alone in a fresh Ray worker, to read the peak resident memory it adds
(Linux: VmHWM, reset before the task), for both, at the default S = 1,000 draws and at a quarter of them.

    python benchmarks/perf/loo.py [--rows 100000] [--shards 4] [--chains 4] [--draws 1000] [--cpus N] [--no-before]
Results: benchmarks/perf/results/loo.json.
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import dataclass
from typing import Any

import _path  # noqa: F401  (puts benchmarks/ on sys.path for harness)
import harness
import numpy as np
from scipy.special import logsumexp

import raysampler as rs
from raysampler import evaluation
from raysampler.evaluation import Moments, ShardRows
from raysampler.evaluation.shard_tasks import place
from raysampler.models.contract import Model


def arguments() -> argparse.ArgumentParser:
    ap = harness.parser(__doc__, __file__, ray=True)
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--draws", type=int, default=1000, help="kept draws in all (over the chains)")
    ap.add_argument("--no-before", action="store_true", help="skip the per-row arviz-stats reference")
    ap.add_argument("--seed", type=int, default=0)
    return ap


@dataclass(frozen=True)
class ArvizLooTask:
    """The reference: a shard's PSIS-LOO as `result.loo()` computed it before the batched PSIS, arviz-stats' `psislw`
    one row at a time on each block of BLOCK_ROWS rows; its record is the elpd's moments."""

    model: Model
    draws: np.ndarray  # (chains, S, d)
    r_eff: float
    names: tuple[str, ...]

    @property
    def models(self) -> tuple[Model, ...]:
        return (self.model,)

    def run(self, rows: tuple[ShardRows, ...]) -> Moments:
        from arviz_stats.base import array_stats

        r = rows[0]
        theta = evaluation.flat_draws(self.draws)
        total = Moments()
        for a in range(0, r.X.shape[0], evaluation.BLOCK_ROWS):
            Xb, yb = r.X[a : a + evaluation.BLOCK_ROWS], r.y[a : a + evaluation.BLOCK_ROWS]
            ll = self.model.log_likelihood(Xb, yb, self.model.evaluation_x(Xb, yb, theta, self.names, 0))
            lw, _ = array_stats.psislw(
                ll.reshape(ll.shape[0], self.draws.shape[0], -1), r_eff=self.r_eff, axis=(-2, -1)
            )
            total = total + Moments.of(logsumexp(lw.reshape(ll.shape) + ll, axis=1))
        return total


def _status_mb(field: str) -> float:
    """A memory line of /proc/self/status (VmRSS: resident now, VmHWM: its peak) in MB."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024.0
    raise RuntimeError(f"no {field} in /proc/self/status")


def _shard_task_memory(task: Any, i: int, shard: rs.Shard, parts: int) -> dict[str, float]:
    """Runs in a Ray worker: its resident memory before the first of shard i's `parts` tasks and the peak during it
    (the peak is reset first, through /proc/self/clear_refs), and the task's seconds."""
    import gc

    gc.collect()
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")  # resets VmHWM to the current resident size
    before = _status_mb("VmRSS")
    t = time.perf_counter()
    evaluation.on_shard(task, i, (shard,), 0, parts)
    return {"baseline_mb": before, "peak_mb": _status_mb("VmHWM"), "seconds": time.perf_counter() - t}


def tasks(result: rs.Result, draws: int) -> dict[str, Any]:
    """The LOO task of each kind at `draws` thinned draws."""
    thinned = evaluation.thin_draws(result.draws, draws)
    S = thinned.shape[0] * thinned.shape[1]
    reff = evaluation.r_eff(thinned, result.param_blocks)
    assert result.model is not None
    names = tuple(result.param_names)
    return {
        "batched": evaluation.LooTask(result.model, thinned, reff, evaluation.good_k(S), names),
        "arviz per row": ArvizLooTask(result.model, thinned, reff, names),
    }


def memory(ray: Any, result: rs.Result, draws: int, kinds: list[str]) -> list[dict[str, Any]]:
    """Each shard's first task of each kind at `draws` thinned draws, alone in a fresh Ray worker, with its memory."""
    assert result.data is not None
    jobs = [(s,) for s in result.data]
    parts = place(jobs).parts
    fresh = ray.remote(num_cpus=1, max_calls=1)(_shard_task_memory)
    out = []
    for kind, task in tasks(result, draws).items():
        if kind not in kinds:
            continue
        for i, (s, n) in enumerate(zip(result.data, parts)):
            got = ray.get(fresh.remote(task, i, s, n))
            rows = math.ceil(int(s.n_rows or 0) / n)
            S = int(task.draws.shape[0] * task.draws.shape[1])
            out.append(got | {"task": kind, "shard": i, "draws": S, "rows": rows, "tasks_of_shard": n})
    return out


def measure(args: argparse.Namespace) -> harness.Report:
    X, y = rs.datasets.load("covtype_like", n=args.rows, seed=args.seed)
    shards = rs.shard(X, y, num_shards=args.shards, seed=args.seed)
    rounds = args.draws // args.chains
    kinds = ["batched"] if args.no_before else ["batched", "arviz per row"]
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
        t = time.perf_counter()
        lo_again = result.loo()
        loo_again_s = time.perf_counter() - t
        before_s = before_elpd = None
        if not args.no_before:
            t = time.perf_counter()
            ref = evaluation.run_at_shards(
                tasks(result, evaluation.DEFAULT_DRAWS)["arviz per row"], [(s,) for s in shards], "ray"
            )
            before_s = time.perf_counter() - t
            before_elpd = sum(ref, Moments()).total
        parts = list(place([(s,) for s in shards]).parts)
        mem = memory(ray, result, evaluation.DEFAULT_DRAWS, kinds) + memory(
            ray, result, evaluation.DEFAULT_DRAWS // 4, kinds
        )
    assert lo_again.elpd == lo.elpd
    payload = {
        "options": harness.options(args),
        "rows": args.rows,
        "shards": args.shards,
        "cpus": args.cpus,
        "tasks_per_shard": parts,
        "draws": int(result.chains * result.num_draws),
        "sample_wall_s": sample_wall,
        "sampling_s": None if timings is None else timings.sampling_s,
        "setup_s": None if timings is None else timings.setup_s,
        "loo_s": loo_s,
        "loo_again_s": loo_again_s,
        "loo_before_s": before_s,
        "elpd": lo.elpd,
        "elpd_before": before_elpd,
        "se": lo.se,
        "p_loo": lo.p,
        "k_flat": lo.k_flat,
        "k_high": lo.k_high,
        "block_rows": evaluation.BLOCK_ROWS,
        "per_task_memory": mem,
    }
    head = ["rs.sample (wall)", "of which sampling", "result.loo()", "again", "loo / run"]
    row: list[Any] = [sample_wall, payload["sampling_s"], loo_s, loo_again_s, loo_s / sample_wall]
    if before_s is not None:
        head += ["before (arviz per row)", "before / run"]
        row += [before_s, before_s / sample_wall]
    tables = [
        harness.Table(
            f"covtype_like n={args.rows:,} in {args.shards} shards, {payload['draws']:,} draws, Ray {args.cpus} CPUs, "
            f"tasks per shard {parts} (seconds)",
            head,
            [row],
        ),
        harness.Table(
            "PSIS-LOO",
            ["elpd_loo", "SE", "p_loo", "flat rows", "k ≥ 0.7", "elpd before"],
            [[lo.elpd, lo.se, lo.p, lo.k_flat, lo.k_high, before_elpd]],
        ),
        harness.Table.of(
            "A shard's first LOO task alone in a fresh Ray worker: resident memory (MB)",
            mem,
            [
                ("task", "task"),
                ("draws S", "draws"),
                ("rows", "rows"),
                ("worker before", "baseline_mb"),
                ("peak during the task", "peak_mb"),
                ("added by the task", lambda r: r["peak_mb"] - r["baseline_mb"]),
                ("seconds", "seconds"),
            ],
            notes=[
                f"a task holds its shard's rows, and {evaluation.BLOCK_ROWS} rows × S log-likelihood values (with the "
                "smoothing's work arrays) at a time; its elpd_i and k̂ are O(rows)",
            ],
        ),
    ]
    return harness.Report("loo", payload, tables)


def main(argv: list[str] | None = None) -> None:
    harness.run(arguments(), measure, argv)


if __name__ == "__main__":
    main()
