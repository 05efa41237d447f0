"""Rounds per second of DG-LMC in-process, on Ray, and the Ray floor, measured side by side.

What is measured (all in one process, one private 2-CPU Ray, interleaved repeat by repeat so that the
machine's noise hits every variant alike; every figure is a median over `--repeats`):

* rounds/s = stats["rounds"] / stats["sampling_time_s"] of `rs.sample(..., algorithm="dglmc", balance=False,
  n_local=N, burn_in=<small>, progress=False)` for executor="local" and executor="ray" (setup excluded;
  burn-in rounds are timed too, they cost the same), b = 4 shards, K = 1 and K = 8 chains, on
  (a) gaussian_toy (n = 20,000, d = 2, rs.models.Gaussian with the toy's noise covariance): light compute
      (each potential is one O(n_i) pass over 5,000 rows), so the Ray overhead shows;
  (b) covtype_like (n = 581,012, d = 54, rs.models.LogisticRegression): compute-bound; with the model's
      default local kernel and with local_kernel="lmc" (the paper's gradient steps).
  N local steps per round on every shard: covtype `--n-local-covtype` (default 10, the setting of
  the DG-LMC paper's covtype experiment), toy `--n-local-toy` (default 1: one local step is one O(n_i) pass, so the
      toy's round
  stays overhead-dominated); fixing N turns speed balancing off, so both executors run exactly the same steps.
* The Ray floor: RayPool's actor layout (min(b, CPUs) actors with num_cpus=1) running a no-op method that
  takes a (K, d) float64 array by value and returns it; one round = call every actor, gather the replies.
  Timed as plain actor calls from a coordinator actor (num_cpus=0, like ours) and from the driver, and over
  raysampler's direct TCP channels (RayPool's default transport, raysampler.runtime.channel) from the
  coordinator actor; reported in ms/round.
* Local-step GFLOP/s on covtype: one LMC step on a shard of n_i rows is X @ Θᵀ (n_i, 54)·(54, K) then
  Rᵀ @ X, i.e. 2·(2·n_i·54·K) flops (the element-wise work is not counted); the workers' rate is those flops
  over the measured compute time per local step, stats["worker_compute_s"][i] / (rounds · N_i). numpy's own
  rate on exactly those two products (same shapes, one BLAS thread via threadpoolctl) is measured in the same
  repeat. The default kernel's step (a potential evaluation) is counted as the first product only.

Targets (PASS/FAIL, medians of per-repeat ratios):
  (b) ray rounds/s ≥ 1.5 × local rounds/s;
  (a) per-round Ray overhead, ray ms/round − local ms/round, ≤ 1.5 × the floor ms/round (reported against
      the actor-call floor from the coordinator actor, and against the socket floor);
  (b) K = 8, LMC: the Ray workers' local-step GFLOP/s ≥ 60 % of numpy's on the same shapes.
Also reported: ray ms − local ms / P (P worker actors), Ray's cost beyond a perfect P-way split of the local
work — ray − local alone goes negative as soon as the workers' parallelism outweighs the overhead.

Run (the full run takes roughly 12–20 minutes on 2 cores, about half of it covtype set-up — the MAP and
Laplace tuning on 581,012 rows take ≈ 10 s per run and are excluded from rounds/s; `--quick` under a minute):

    python benchmarks/perf/rounds.py                 # full: 3 repeats, 5000 toy rounds, 30 covtype rounds
    python benchmarks/perf/rounds.py --quick         # smoke test: 1 repeat, few rounds, covtype n = 40,000

Prints the tables and writes benchmarks/perf/results/rounds.json (rounds_quick.json with --quick).
"""

from __future__ import annotations

import argparse
import time
from dataclasses import asdict, dataclass
from typing import Any

import _path  # noqa: F401  (puts benchmarks/ on sys.path for harness)
import harness
import numpy as np

import raysampler as rs
from raysampler.runtime.executors import WORKER_ENV

NUM_SHARDS = 4
COVTYPE_D = 54
TARGET_SPEEDUP = 1.5
TARGET_OVERHEAD_RATIO = 1.5
TARGET_GEMM_EFFICIENCY = 0.6


@dataclass(frozen=True)
class Case:
    problem: str  # "gaussian_toy" | "covtype_like"
    chains: int
    kernel: str | None  # None: the model's default local kernel

    @property
    def label(self) -> str:
        return f"{self.problem} K={self.chains} {self.kernel or 'default'}"


# ------------------------------------------------------------------------------------ the Ray floor


class EchoWorker:
    """Stands in for a ShardHost: receives a (K, d) array by value and returns it, doing no work.

    `open_channel` serves the same no-op over raysampler's direct TCP channel (RayPool's default transport).
    """

    def ready(self) -> bool:
        return True

    def step(self, x: np.ndarray) -> np.ndarray:
        return x

    def open_channel(self) -> tuple[tuple[str, int], bytes]:
        """Serve `step` over a TCP channel: (address, token) for the client."""
        import ray

        from raysampler.runtime.channel import ChannelServer

        self._channel = ChannelServer(self.step, ray.util.get_node_ip_address())
        return self._channel.address, self._channel.token


def floor_rounds(actors: list[Any], chains: int, dim: int, rounds: int, warmup: int) -> list[float]:
    """Seconds of each of `rounds` rounds 'send a (K, d) array to every actor, gather all replies'."""
    import ray

    x = np.random.default_rng(0).standard_normal((chains, dim))
    times = []
    for t in range(warmup + rounds):
        t0 = time.perf_counter()
        replies = ray.get([a.step.remote(x) for a in actors])
        if t >= warmup:
            times.append(time.perf_counter() - t0)
        x = replies[0]
    return times


class FloorCoordinator:
    """A coordinator actor (num_cpus=0, like raysampler's) that times floor rounds over given worker actors."""

    def __init__(self, actors: list[Any]) -> None:
        self.actors = actors

    def run(self, chains: int, dim: int, rounds: int, warmup: int) -> list[float]:
        return floor_rounds(self.actors, chains, dim, rounds, warmup)

    def run_socket(
        self, channels: list[tuple[tuple[str, int], bytes]], chains: int, dim: int, rounds: int, warmup: int
    ) -> list[float]:
        """The same rounds over direct TCP channels to the workers (raysampler's socket transport)."""
        from raysampler.runtime.channel import ChannelClient

        clients = [ChannelClient(tuple(address), token) for address, token in channels]
        x = np.random.default_rng(0).standard_normal((chains, dim))
        times = []
        try:
            for t in range(warmup + rounds):
                t0 = time.perf_counter()
                for c in clients:
                    c.send(x)
                replies = [c.receive() for c in clients]
                if t >= warmup:
                    times.append(time.perf_counter() - t0)
                x = replies[0]
        finally:
            for c in clients:
                c.close()
        return times


def measure_floor(ray: Any, num_shards: int, chains: int, dim: int, rounds: int) -> dict[str, float]:
    """ms/round of the floor from a coordinator actor and from the driver, on RayPool's actor layout."""
    n_actors = max(1, min(num_shards, int(ray.cluster_resources().get("CPU", 1))))
    env = {"env_vars": WORKER_ENV}
    worker_cls = ray.remote(num_cpus=1, max_concurrency=1, runtime_env=env)(EchoWorker)
    actors = [worker_cls.remote() for _ in range(n_actors)]
    coord = ray.remote(num_cpus=0, runtime_env=env)(FloorCoordinator).remote(actors)
    try:
        ray.get([a.ready.remote() for a in actors])
        warmup = max(10, rounds // 10)
        from_coord = ray.get(coord.run.remote(chains, dim, rounds, warmup))
        from_driver = floor_rounds(actors, chains, dim, rounds, warmup)
        channels = ray.get([a.open_channel.remote() for a in actors])
        over_socket = ray.get(coord.run_socket.remote(channels, chains, dim, rounds, warmup))
    finally:
        for a in [coord, *actors]:
            ray.kill(a)
    return {
        "actors": n_actors,
        "coordinator_ms": 1e3 * float(np.mean(from_coord)),
        "driver_ms": 1e3 * float(np.mean(from_driver)),
        "socket_ms": 1e3 * float(np.mean(over_socket)),
        "coordinator_median_ms": 1e3 * float(np.median(from_coord)),
        "driver_median_ms": 1e3 * float(np.median(from_driver)),
        "socket_median_ms": 1e3 * float(np.median(over_socket)),
    }


# ------------------------------------------------------------------------------------ numpy's GEMM rate


def numpy_step_rate(X: np.ndarray, chains: int, min_time_s: float) -> dict[str, float]:
    """Seconds of numpy's X @ Θᵀ and Rᵀ @ X on one shard's shapes (one BLAS thread), best of plain and out=."""
    from threadpoolctl import threadpool_limits

    rng = np.random.default_rng(1)
    n, d = X.shape
    theta = 0.01 * rng.standard_normal((chains, d))
    R = rng.random((n, chains))
    out1, out2 = np.empty((n, chains)), np.empty((chains, d))

    def timed(fn: Any) -> float:
        fn()
        reps, t_start = [], time.perf_counter()
        while len(reps) < 5 or time.perf_counter() - t_start < min_time_s:
            t0 = time.perf_counter()
            fn()
            reps.append(time.perf_counter() - t0)
        return float(np.median(reps))

    with threadpool_limits(limits=1, user_api="blas"):
        eta_s = min(timed(lambda: X @ theta.T), timed(lambda: np.matmul(X, theta.T, out=out1)))
        grad_s = min(timed(lambda: R.T @ X), timed(lambda: np.matmul(R.T, X, out=out2)))
    flops_eta = 2.0 * n * d * chains
    return {
        "rows": n,
        "eta_s": eta_s,
        "grad_s": grad_s,
        "gflops_lmc": 2 * flops_eta / (eta_s + grad_s) / 1e9,
        "gflops_potential": flops_eta / eta_s / 1e9,
    }


def worker_gflops(metrics: dict[str, Any], shard_rows: list[int], chains: int, kernel: str) -> float:
    """Achieved local-step GFLOP/s over all shards: counted flops / measured compute time per local step."""
    per_step_flops = (4.0 if kernel == "lmc" else 2.0) * np.asarray(shard_rows) * COVTYPE_D * chains
    steps = metrics["rounds"] * np.asarray(metrics["N"], dtype=float)
    step_s = np.asarray(metrics["worker_compute_s"]) / steps
    return float(per_step_flops.sum() / step_s.sum() / 1e9)


# ------------------------------------------------------------------------------------------- runs


def run_case(
    case: Case, shards: Any, model: Any, executor: str, rounds: int, burn_in: int, n_local: int, transport: str | None
) -> dict[str, Any]:
    params: dict[str, Any] = {"local_kernel": case.kernel} if case.kernel else {}
    if executor == "ray" and transport:
        params["transport"] = transport
    result = rs.sample(
        model,
        shards,
        algorithm="dglmc",
        chains=case.chains,
        num_rounds=rounds,
        burn_in=burn_in,
        executor=executor,
        balance=False,
        n_local=n_local,
        progress=False,
        seed=0,
        **params,
    )
    m = harness.run_metrics(result)
    m["shard_rows"] = list(result.setup.shard_rows)
    return m


def arguments() -> argparse.ArgumentParser:
    ap = harness.parser(__doc__, __file__, ray=True)
    ap.add_argument("--quick", action="store_true", help="smoke test: 1 repeat, few rounds, small covtype")
    ap.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="rounds after burn-in for every case (default: toy 5000, covtype 30; quick: 300, 6)",
    )
    ap.add_argument("--repeats", type=int, default=None, help="repeats (default 3; quick 1)")
    ap.add_argument("--n-local-toy", type=int, default=1, help="gaussian_toy local steps per round (default 1)")
    ap.add_argument("--n-local-covtype", type=int, default=10, help="covtype local steps per round (default 10)")
    ap.add_argument("--burn-in", type=int, default=None, help="burn-in rounds (default 5; quick 2)")
    ap.add_argument("--covtype-n", type=int, default=None, help="covtype_like rows (default 581012; quick 40000)")
    ap.add_argument("--floor-rounds", type=int, default=None, help="timed floor rounds (default 1000; quick 100)")
    ap.add_argument("--only", choices=("gaussian_toy", "covtype_like"), default=None)
    ap.add_argument(
        "--transport",
        choices=("socket", "actor"),
        default=None,
        help="round transport of the ray runs (default: raysampler's default)",
    )
    return ap


@dataclass(frozen=True)
class Plan:
    """The options with the defaults of a full or a --quick run filled in (the JSON's "settings")."""

    quick: bool
    repeats: int
    burn_in: int
    rounds: dict[str, int]
    n_local: dict[str, int]
    num_shards: int
    covtype_n: int
    floor_rounds: int

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Plan:
        quick = args.quick
        return cls(
            quick=quick,
            repeats=args.repeats or (1 if quick else 3),
            burn_in=args.burn_in if args.burn_in is not None else (2 if quick else 5),
            rounds={
                "gaussian_toy": args.rounds or (300 if quick else 5000),
                "covtype_like": args.rounds or (6 if quick else 30),
            },
            n_local={"gaussian_toy": args.n_local_toy, "covtype_like": args.n_local_covtype},
            num_shards=NUM_SHARDS,
            covtype_n=args.covtype_n or (40_000 if quick else rs.datasets.COVTYPE_N_ROWS),
            floor_rounds=args.floor_rounds or (100 if quick else 1000),
        )


def measure(args: argparse.Namespace) -> harness.Report:
    plan = Plan.from_args(args)
    problems = [args.only] if args.only else ["gaussian_toy", "covtype_like"]
    cases = [
        Case(p, k, kern)
        for p in problems
        for k in (1, 8)
        for kern in ((None,) if p == "gaussian_toy" else (None, "lmc"))
    ]
    data = {}
    for p in problems:
        X, y, model = harness.load_model_data(p, covtype_n=plan.covtype_n)
        data[p] = (rs.shard(X, y, num_shards=NUM_SHARDS), model, X.shape)
    covtype_mb = plan.covtype_n * (COVTYPE_D + 1) * 8 / 2**20 if "covtype_like" in problems else 0
    print(
        f"rounds benchmark: b={NUM_SHARDS}, N={plan.n_local}, repeats={plan.repeats}, burn-in={plan.burn_in}, "
        f"rounds={plan.rounds}, covtype n={plan.covtype_n}, floor rounds={plan.floor_rounds}",
        flush=True,
    )
    t_start = time.perf_counter()
    with harness.local_ray(object_store_mb=int(200 + 2.5 * covtype_mb), num_cpus=args.cpus) as ray:
        raw = run_repeats(ray, plan, cases, data, args.transport, t_start)
    summary, targets = summarise(cases, raw)
    payload = {
        "settings": asdict(plan) | {"total_time_s": time.perf_counter() - t_start},
        "summary": summary,
        "targets": targets,
        "raw": raw,
    }
    return harness.Report("rounds_quick" if plan.quick else "rounds", payload, report(summary, targets, plan.n_local))


def run_repeats(
    ray: Any, plan: Plan, cases: list[Case], data: dict[str, Any], transport: str | None, t_start: float
) -> dict[str, list[dict[str, Any]]]:
    """Every case on both executors in every repeat (which goes first alternates), with its floor and numpy's rate."""
    raw: dict[str, list[dict[str, Any]]] = {c.label: [] for c in cases}
    floors: dict[tuple[int, int], list[dict[str, float]]] = {}
    gemm: dict[int, list[dict[str, float]]] = {}
    for rep in range(plan.repeats):
        for case in cases:
            shards, model, shape = data[case.problem]
            entry: dict[str, Any] = {}
            for ex in ("local", "ray") if rep % 2 == 0 else ("ray", "local"):
                rounds, n_local = plan.rounds[case.problem], plan.n_local[case.problem]
                entry[ex] = run_case(case, shards, model, ex, rounds, plan.burn_in, n_local, transport)
            dim = shape[1] if case.problem == "covtype_like" else 2
            key = (case.chains, dim)
            if len(floors.get(key, [])) <= rep:
                floors.setdefault(key, []).append(measure_floor(ray, NUM_SHARDS, case.chains, dim, plan.floor_rounds))
            entry["floor"] = floors[key][rep]
            if case.problem == "covtype_like":
                if len(gemm.get(case.chains, [])) <= rep:
                    X0 = np.ascontiguousarray(shards[0].load()[0])
                    gemm.setdefault(case.chains, []).append(
                        numpy_step_rate(X0, case.chains, 0.1 if plan.quick else 0.5)
                    )
                entry["numpy"] = gemm[case.chains][rep]
            raw[case.label].append(entry)
            print(
                f"  repeat {rep + 1}/{plan.repeats} {case.label}: local {entry['local']['rounds_per_s']:.1f} "
                f"rounds/s, ray {entry['ray']['rounds_per_s']:.1f} rounds/s, floor "
                f"{entry['floor']['coordinator_ms']:.2f} ms (socket {entry['floor']['socket_ms']:.2f} ms)  "
                f"[{time.perf_counter() - t_start:.0f} s]",
                flush=True,
            )
    return raw


def summarise(cases: list[Case], raw: dict[str, list[dict[str, Any]]]) -> tuple[list[dict], list[dict]]:
    """Medians over repeats of every figure and of every per-repeat ratio; the PASS/FAIL targets."""
    summary, targets = [], []
    for case in cases:
        reps = raw[case.label]
        row: dict[str, Any] = {
            "case": case.label,
            "problem": case.problem,
            "chains": case.chains,
            "kernel": reps[0]["local"]["local_kernel"],
        }
        for ex in ("local", "ray"):
            row[f"{ex}_rounds_per_s"] = harness.median(r[ex]["rounds_per_s"] for r in reps)
            row[f"{ex}_ms_per_round"] = harness.median(r[ex]["ms_per_round"] for r in reps)
            row[f"{ex}_median_round_ms"] = harness.median(r[ex]["median_round_ms"] for r in reps)
        row["speedup"] = harness.median(r["ray"]["rounds_per_s"] / r["local"]["rounds_per_s"] for r in reps)
        row["floor_coordinator_ms"] = harness.median(r["floor"]["coordinator_ms"] for r in reps)
        row["floor_driver_ms"] = harness.median(r["floor"]["driver_ms"] for r in reps)
        row["floor_socket_ms"] = harness.median(r["floor"]["socket_ms"] for r in reps)
        row["transport"] = reps[0]["ray"]["transport"]
        row["overhead_ms"] = harness.median(r["ray"]["ms_per_round"] - r["local"]["ms_per_round"] for r in reps)
        row["overhead_over_floor"] = harness.median(
            (r["ray"]["ms_per_round"] - r["local"]["ms_per_round"]) / r["floor"]["coordinator_ms"] for r in reps
        )
        row["overhead_over_socket_floor"] = harness.median(
            (r["ray"]["ms_per_round"] - r["local"]["ms_per_round"]) / r["floor"]["socket_ms"] for r in reps
        )
        # ray − local/P: what Ray adds beyond a perfect split of the local work over its P worker actors
        row["parallel_overhead_ms"] = harness.median(
            r["ray"]["ms_per_round"] - r["local"]["ms_per_round"] / r["floor"]["actors"] for r in reps
        )
        row["parallel_overhead_over_socket_floor"] = harness.median(
            (r["ray"]["ms_per_round"] - r["local"]["ms_per_round"] / r["floor"]["actors"]) / r["floor"]["socket_ms"]
            for r in reps
        )
        row["actors"] = reps[0]["floor"]["actors"]
        if case.problem == "covtype_like":
            kern = row["kernel"]
            ref_key = "gflops_lmc" if kern == "lmc" else "gflops_potential"
            row["shard_rows"] = reps[0]["local"]["shard_rows"]
            row["numpy_gflops"] = harness.median(r["numpy"][ref_key] for r in reps)
            for ex in ("local", "ray"):
                rates = [worker_gflops(r[ex], r[ex]["shard_rows"], case.chains, kern) for r in reps]
                row[f"{ex}_worker_gflops"] = harness.median(rates)
                row[f"{ex}_gemm_efficiency"] = harness.median(g / r["numpy"][ref_key] for g, r in zip(rates, reps))
        summary.append(row)

        if case.problem == "covtype_like":
            targets.append(
                {
                    "target": f"(b) {case.label}: ray ≥ {TARGET_SPEEDUP}× local rounds/s",
                    "value": row["speedup"],
                    "pass": row["speedup"] >= TARGET_SPEEDUP,
                }
            )
            if case.chains == 8 and row["kernel"] == "lmc":
                eff = row["ray_gemm_efficiency"]
                targets.append(
                    {
                        "target": f"(b) {case.label}: Ray workers' GFLOP/s ≥ {TARGET_GEMM_EFFICIENCY:.0%} of numpy's",
                        "value": eff,
                        "pass": eff >= TARGET_GEMM_EFFICIENCY,
                    }
                )
        else:
            for key, floor in (
                ("overhead_over_floor", "actor-call floor"),
                ("overhead_over_socket_floor", "socket floor"),
            ):
                ratio = row[key]
                targets.append(
                    {
                        "target": f"(a) {case.label}: (ray − local) ms/round ≤ {TARGET_OVERHEAD_RATIO}× "
                        f"{floor} ms/round",
                        "value": ratio,
                        "pass": ratio <= TARGET_OVERHEAD_RATIO,
                    }
                )
    return summary, targets


def report(summary: list[dict], targets: list[dict], n_local: dict[str, int]) -> list[harness.Table]:
    case = [("case", lambda r: r["case"].rsplit(" ", 1)[0]), ("kernel", "kernel")]  # the case without its kernel
    transports = ", ".join(sorted({str(r["transport"]) for r in summary}))
    tables = [
        harness.Table.of(
            "Rounds per second (medians over repeats; setup excluded)",
            summary,
            case
            + [("N", lambda r: n_local[r["problem"]]), ("local r/s", "local_rounds_per_s")]
            + [("ray r/s", "ray_rounds_per_s"), ("ray/local", "speedup"), ("local ms/round", "local_ms_per_round")]
            + [("ray ms/round", "ray_ms_per_round")],
            [
                f"b={NUM_SHARDS} shards, N local steps per shard per round, balance off; ray transport: {transports}; "
                "ray/local = median of per-repeat ratios."
            ],
        ),
        harness.Table.of(
            "Per-round Ray overhead against the floor (ms/round; ratios are medians of per-repeat ratios)",
            summary,
            case
            + [("floor actor coord", "floor_coordinator_ms"), ("floor actor driver", "floor_driver_ms")]
            + [("floor socket", "floor_socket_ms"), ("ray-local", "overhead_ms")]
            + [("/actor floor", "overhead_over_floor"), ("/socket floor", "overhead_over_socket_floor")]
            + [("ray-local/P", "parallel_overhead_ms"), ("/socket floor", "parallel_overhead_over_socket_floor")],
            [
                "floor = no-op round trip on RayPool's layout (P = min(b, CPUs) actors, num_cpus=1, (K, d) array by "
                "value): plain actor calls from a coordinator actor (num_cpus=0) / from the driver, and raysampler's "
                "TCP channels (socket) from a coordinator actor.",
                "ray-local = the overhead as specified (negative when the P workers' parallelism outweighs it); "
                "ray-local/P = ray ms minus a perfect P-way split of the local work.",
            ],
        ),
    ]
    cov = [r for r in summary if r["problem"] == "covtype_like"]
    if cov:
        tables.append(
            harness.Table.of(
                "Local-step GFLOP/s on covtype_like (workers' compute time vs numpy on the same shapes, 1 thread)",
                cov,
                case
                + [("rows/shard", lambda r: r["shard_rows"][0]), ("numpy GFLOP/s", "numpy_gflops")]
                + [("local GFLOP/s", "local_worker_gflops"), ("local eff", "local_gemm_efficiency")]
                + [("ray GFLOP/s", "ray_worker_gflops"), ("ray eff", "ray_gemm_efficiency")],
                [
                    "lmc step: X@Θᵀ and Rᵀ@X, 4·n_i·54·K flops; default-kernel step (potential): X@Θᵀ only, "
                    "2·n_i·54·K.",
                    "eff = workers' GFLOP/s / numpy's GFLOP/s measured in the same repeat (median of per-repeat "
                    "ratios).",
                ],
            )
        )
    tables.append(harness.Table.of("Targets", targets, [("target", "target"), ("value", "value"), ("result", "pass")]))
    return tables


def main(argv: list[str] | None = None) -> None:
    harness.run(arguments(), measure, argv)


if __name__ == "__main__":
    main()
