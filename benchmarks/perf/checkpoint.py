"""What checkpointing costs: the same seeded run with and without `checkpoint_dir`, side by side in one process.

With `checkpoint_dir`, every chunk of draws (about 0.5 s of rounds) is written durably together with the run state at
its end (draws first, then the state, each fsync'd and renamed). The cost is the wall time added over the same run
without it; the run state is sampler state only, never data, so its size depends on d, chains and shards, not rows.

Repeats alternate which variant goes first; ratios are medians of per-repeat ratios. Problems: breast_cancer (tiny
shards: the worst case, rounds are cheapest) and covtype_like (n rows, --covtype-n), both default DG-LMC on Ray.

    python benchmarks/perf/checkpoint.py                      # breast_cancer + covtype_like (100k rows), 3 repeats
    python benchmarks/perf/checkpoint.py --quick              # a smoke test
    python benchmarks/perf/checkpoint.py --problems covtype_like --repeats 9

Prints a table and writes benchmarks/perf/results/checkpoint.json (checkpoint_<problem>.json for one problem).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import _path  # noqa: F401  (puts benchmarks/ on sys.path for harness)
import harness

import raysampler as rs


def one(model: Any, shards: Any, rounds: int, chains: int, seed: int, checkpoint: bool) -> dict[str, Any]:
    """A run's wall time, sampling time and, with checkpointing, the bytes written (draws and states)."""
    directory = Path(tempfile.mkdtemp(prefix="rs-ckpt-")) if checkpoint else None
    t0 = time.perf_counter()
    res = rs.sample(
        model,
        shards,
        "dglmc",
        chains=chains,
        num_rounds=rounds,
        burn_in=100,
        seed=seed,
        executor="ray",
        progress=False,
        checkpoint_dir=directory,
        balance=False,
    )
    wall = time.perf_counter() - t0
    out: dict[str, Any] = {
        "wall_s": wall,
        "sampling_s": float(res.run_stats.sampling_time_s),
        "setup_s": float(res.outcome.timings.setup_s),
    }
    if directory is not None:
        states = [p for p in directory.rglob("*") if p.is_file() and "checkpoint" in p.name]
        out["state_bytes"] = max((p.stat().st_size for p in states), default=0)
        out["dir_bytes"] = sum(p.stat().st_size for p in directory.rglob("*") if p.is_file())
        out["draw_bytes"] = int(res.draws.nbytes)
        out["write_s"] = float(res.outcome.timings.checkpoint_write_s)
        shutil.rmtree(directory)
    return out


def arguments() -> argparse.ArgumentParser:
    ap = harness.parser(__doc__, __file__, ray=True)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--covtype-n", type=int, default=100_000)
    ap.add_argument("--chains", type=int, default=8)
    ap.add_argument(
        "--problems", nargs="+", choices=["breast_cancer", "covtype_like"], default=["breast_cancer", "covtype_like"]
    )
    return ap


def measure(args: argparse.Namespace) -> harness.Report:
    rounds = {"breast_cancer": 3000 if args.quick else 20000, "covtype_like": 50 if args.quick else 400}
    problems = list(dict.fromkeys(args.problems))
    rows, raw = [], []
    with harness.local_ray(object_store_mb=400, num_cpus=args.cpus):
        for name in problems:
            row, runs = measure_problem(name, rounds[name], args)
            rows.append(row)
            raw += runs
    table = harness.Table(
        "Checkpoint cost (default DG-LMC on Ray, b = 4; medians over repeats)",
        ["problem", "rounds", "chains", "plain wall s", "checkpointed wall s", "added %", "write % of run"]
        + ["state bytes", "directory bytes"],
        rows,
        [
            "added % = median over repeats of (checkpointed / plain − 1); negative = within the machine's noise.",
            "write % = time spent writing draws + state durably (stats['checkpoint_write_s']) / checkpointed wall.",
            "directory bytes = draws and their sample stats plus the latest state.",
        ],
    )
    name = "checkpoint" if len(problems) == 2 else "checkpoint_" + "_".join(problems)
    return harness.Report(name, {"settings": harness.options(args), "rows": rows, "runs": raw}, [table])


def measure_problem(name: str, rounds: int, args: argparse.Namespace) -> tuple[list[Any], list[dict[str, Any]]]:
    """Plain and checkpointed runs of one problem, repeat by repeat (which goes first alternates): its table row
    (medians over repeats) and the raw runs."""
    X, y, model = harness.load_model_data(name, covtype_n=args.covtype_n)
    shards = rs.shard(X, y, num_shards=4, strategy="random", seed=0)
    pairs, raw = [], []
    for rep in range(1 if args.quick else args.repeats):
        order = (False, True) if rep % 2 == 0 else (True, False)
        got = {flag: one(model, shards, rounds, args.chains, rep, flag) for flag in order}
        pairs.append(got)
        raw.append({"problem": name, "repeat": rep, "plain": got[False], "checkpointed": got[True]})
        print(
            f"  {name} repeat {rep + 1}: plain {got[False]['wall_s']:.2f} s, checkpointed {got[True]['wall_s']:.2f} s",
            flush=True,
        )
    row = [
        name,
        rounds,
        args.chains,
        harness.median(p[False]["wall_s"] for p in pairs),
        harness.median(p[True]["wall_s"] for p in pairs),
        100 * harness.median(p[True]["wall_s"] / p[False]["wall_s"] - 1.0 for p in pairs),
        100 * harness.median(p[True]["write_s"] / p[True]["wall_s"] for p in pairs),
        pairs[0][True]["state_bytes"],
        pairs[0][True]["dir_bytes"],
    ]
    return row, raw


def main(argv: list[str] | None = None) -> None:
    harness.run(arguments(), measure, argv)


if __name__ == "__main__":
    main()
