"""What a round costs against the number of shards and of worker processes: default DG-LMC (logistic regression),
the round's parts from `RunStats.breakdown` (medians over the rounds), every variant side by side in one run, the
variants interleaved repeat by repeat.

* shards: breast_cancer's 569 rows in b = 4, 8, 16, 32 shards, 4 chains (N_i = 1): the median round in-process, on
  Ray with the default number of worker processes (chosen from the CPUs and the shards' size: one, the coordinator's,
  for shards this small), and on Ray with two worker processes (the coordinator's and an actor's: every round
  crosses a channel); the growth per extra shard from 4 to 32 shards.
* processes: 4 shards in 1, 2 and 4 worker processes (RAYSAMPLER_WORKER_PROCESSES; this section's Ray is told
  max(--cpus, 4) CPUs, so that 4 processes start on a 2-core machine), on breast_cancer (4 and 32 chains) and on
  covtype_like (--covtype-rows, 4 chains): where a second process starts to pay (`process_groups.PROCESS_WORK`).
* pipeline: rounds whole and in two pipelined halves (pipeline=True), 4 shards in 2 worker processes, on
  breast_cancer (32 chains) and covtype_like (the first of --covtype-rows, 8 chains).

    python benchmarks/perf/round_cost.py [--repeats 3] [--rounds 1000] [--only shards|processes|pipeline]

Writes benchmarks/perf/results/round_cost.json.
"""

from __future__ import annotations

import argparse
import os
import warnings
from typing import Any

import _path  # noqa: F401  (puts benchmarks/ on sys.path for harness)
import harness
import numpy as np

import raysampler as rs
from raysampler.runtime.process_groups import PROCESS_WORK

SHARDS = (4, 8, 16, 32)
PROCESSES = (1, 2, 4)


def one_run(
    X: np.ndarray,
    y: np.ndarray,
    b: int,
    chains: int,
    executor: str,
    processes: int,
    rounds: int,
    seed: int,
    pipeline: bool = False,
    coordinator_shards: bool = True,
) -> dict[str, Any]:
    """One default DG-LMC run; its median round and parts (µs), and how many processes it used."""
    os.environ["RAYSAMPLER_WORKER_PROCESSES"] = str(processes)
    os.environ["RAYSAMPLER_COORDINATOR_SHARDS"] = "1" if coordinator_shards else "0"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = rs.sample(
                rs.models.LogisticRegression(prior_scale=1.0),
                rs.shard(X, y, num_shards=b),
                chains=chains,
                num_rounds=rounds,
                burn_in=rounds // 10,
                seed=seed,
                executor=executor,
                balance=False,
                progress=False,
                pipeline=pipeline,
            )
    finally:
        os.environ.pop("RAYSAMPLER_WORKER_PROCESSES", None)
        os.environ.pop("RAYSAMPLER_COORDINATOR_SHARDS", None)
    bd = res.run_stats.breakdown()
    out = {k: (1e6 * v if k.endswith("_s") else v) for k, v in vars(bd).items()}
    out.update(transport=res.setup.transport, rounds_per_s=res.run_stats.rounds / res.run_stats.sampling_time_s)
    return {k[:-2] + "_us" if k.endswith("_s") else k: v for k, v in out.items()}


def shards_section(args: argparse.Namespace) -> tuple[list[dict[str, Any]], list[harness.Table]]:
    X, y = rs.datasets.load("breast_cancer")
    variants = (("in-process", "local", 0), ("ray, default processes", "ray", 0), ("ray, 2 processes", "ray", 2))
    runs: list[dict[str, Any]] = []
    with harness.local_ray(object_store_mb=300, num_cpus=args.cpus):
        for r in range(args.repeats):
            for b in SHARDS:
                for name, executor, procs in variants:
                    m = one_run(X, y, b, 4, executor, procs, args.rounds, args.seed)
                    m.update(section="shards", variant=name, shards=b, repeat=r)
                    runs.append(m)
                    print(f"repeat {r}, {b} shards, {name}: median round {m['round_us']:.0f} µs", flush=True)
    summary = []
    for name, _, _ in variants:
        rows = {b: _medians([m for m in runs if m["variant"] == name and m["shards"] == b]) for b in SHARDS}
        for b in SHARDS:
            summary.append({"variant": name, "shards": b, **rows[b]})
        slope = (rows[SHARDS[-1]]["round_us"] - rows[SHARDS[0]]["round_us"]) / (SHARDS[-1] - SHARDS[0])
        summary.append({"variant": name, "shards": "µs per extra shard", "round_us": slope})
    table = harness.Table.of(
        "The median round against the number of shards (breast_cancer, 4 chains; µs, medians over repeats)",
        summary,
        [("variant", "variant"), ("shards", "shards"), ("processes", lambda r: _int(r.get("processes")))]
        + [("round", "round_us"), ("coordinator", lambda r: r.get("coordinator_us"))]
        + [(p, lambda r, p=p: r.get(f"{p}_us")) for p in ("encode", "send", "hosted", "wait", "receive")]
        + [("slowest worker", lambda r: r.get("slowest_worker_us")), ("overhead", lambda r: r.get("overhead_us"))],
        [
            "overhead = round − the slowest worker process's compute (CPU time of its step); parts are medians over"
            " the rounds, so they need not add up to the median round",
        ],
    )
    return runs, [table]


def processes_section(args: argparse.Namespace) -> tuple[list[dict[str, Any]], list[harness.Table]]:
    Xb, yb = rs.datasets.load("breast_cancer")
    cases = [("breast_cancer", Xb, yb, 4), ("breast_cancer", Xb, yb, 32)]
    for n in args.covtype_rows:
        Xc, yc = rs.datasets.load("covtype_like", n=n, seed=args.seed)
        cases.append((f"covtype_like {n}", Xc, yc, 4))
    runs: list[dict[str, Any]] = []
    with harness.local_ray(object_store_mb=400, num_cpus=max(args.cpus, max(PROCESSES))):
        for r in range(args.repeats):
            for data, X, y, chains in cases:
                for p in PROCESSES:
                    m = one_run(X, y, 4, chains, "ray", p, args.rounds, args.seed)
                    m.update(section="processes", data=data, chains=chains, work=X.size * chains, wanted=p, repeat=r)
                    runs.append(m)
                    print(f"repeat {r}, {data}, {chains} chains, {p} processes: {m['round_us']:.0f} µs", flush=True)
    summary = []
    for data, X, _, chains in cases:
        base = None
        for p in PROCESSES:
            med = _medians([m for m in runs if m["data"] == data and m["chains"] == chains and m["wanted"] == p])
            base = base or med["round_us"]
            summary.append(
                {"data": data, "chains": chains, "work": X.size * chains, "processes": p, **med}
                | {"vs_one": med["round_us"] / base}
            )
    table = harness.Table.of(
        "4 shards in 1, 2 and 4 worker processes (µs, medians over repeats)",
        summary,
        [("data", "data"), ("chains", "chains"), ("element-chains", "work")]
        + [("processes", lambda r: _int(r["processes"]))]
        + [("round", "round_us"), ("÷ 1 process", "vs_one"), ("slowest worker", "slowest_worker_us")]
        + [("wait", "wait_us"), ("overhead", "overhead_us")],
        [
            f"element-chains = X's elements × chains; the default gives a process at least {PROCESS_WORK:,} of them",
        ],
    )
    return runs, [table]


#: (label, worker processes, whether the coordinator's process hosts shards)
LAYOUTS = (("coordinator + actor, 2 shards each", 2, True), ("one actor holds all 4", 1, False))


def pipeline_section(args: argparse.Namespace) -> tuple[list[dict[str, Any]], list[harness.Table]]:
    Xb, yb = rs.datasets.load("breast_cancer")
    n = args.covtype_rows[0]
    Xc, yc = rs.datasets.load("covtype_like", n=n, seed=args.seed)
    cases = [("breast_cancer", Xb, yb, 32), (f"covtype_like {n}", Xc, yc, 8)]
    runs: list[dict[str, Any]] = []
    with harness.local_ray(object_store_mb=400, num_cpus=args.cpus):
        for r in range(args.repeats):
            for data, X, y, chains in cases:
                for layout, procs, hosts in LAYOUTS:
                    for pipeline in (False, True):
                        m = one_run(X, y, 4, chains, "ray", procs, args.rounds, args.seed, pipeline, hosts)
                        m.update(section="pipeline", data=data, chains=chains, layout=layout, pipeline=pipeline)
                        m["repeat"] = r
                        runs.append(m)
                        print(f"repeat {r}, {data}, {layout}, pipeline={pipeline}: {m['round_us']:.0f} µs", flush=True)
    summary = []
    for data, _, _, chains in cases:
        for layout, _, _ in LAYOUTS:
            mine = [m for m in runs if m["data"] == data and m["layout"] == layout]
            whole = _medians([m for m in mine if not m["pipeline"]])
            halves = _medians([m for m in mine if m["pipeline"]])
            for name, med in (("whole", whole), ("pipelined", halves)):
                ratio = med["round_us"] / whole["round_us"]
                summary.append({"data": data, "chains": chains, "layout": layout, "rounds": name, **med, "vs": ratio})
    table = harness.Table.of(
        "Rounds whole and pipelined, 4 shards (µs, medians over repeats)",
        summary,
        [("data", "data"), ("chains", "chains"), ("layout", "layout"), ("rounds", "rounds"), ("round", "round_us")]
        + [("÷ whole", "vs"), ("coordinator", "coordinator_us"), ("hosted", "hosted_us"), ("wait", "wait_us")]
        + [("slowest worker", "slowest_worker_us"), ("overhead", "overhead_us")],
        ["a pipelined round is the time between two rounds' ends; its parts sum both halves"],
    )
    return runs, [table]


def _int(value: Any) -> int | None:
    return None if value is None else int(round(value))


def _medians(ms: list[dict[str, Any]]) -> dict[str, Any]:
    keys = [k for k in ms[0] if k.endswith("_us") or k in ("processes", "rounds_per_s")]
    return {k: harness.median(m[k] for m in ms) for k in keys}


def arguments() -> argparse.ArgumentParser:
    ap = harness.parser(__doc__, __file__, ray=True)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=1000, help="rounds after burn-in per run (default 1000)")
    ap.add_argument("--covtype-rows", type=lambda s: [int(v) for v in s.split(",")], default=[20_000, 80_000])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", choices=("shards", "processes", "pipeline"), default=None)
    return ap


def measure(args: argparse.Namespace) -> harness.Report:
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    runs: list[dict[str, Any]] = []
    tables: list[harness.Table] = []
    sections = (("shards", shards_section), ("processes", processes_section), ("pipeline", pipeline_section))
    for name, section in sections:
        if args.only in (None, name):
            r, t = section(args)
            runs += r
            tables += t
    return harness.Report("round_cost", {"settings": harness.options(args), "runs": runs}, tables)


def main(argv: list[str] | None = None) -> None:
    harness.run(arguments(), measure, argv)


if __name__ == "__main__":
    main()
