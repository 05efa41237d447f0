"""The round floor of same-node transports between the coordinator and its worker processes, side by side.

One round = the coordinator sends one request to each of W worker processes (all requests first) and then collects
the W replies; the worker's handler does no work (it echoes). Setups, as RayPool lays out b shards on P actors:
  W=1        one worker process owning one shard;
  W=2        two worker processes owning one shard each;
  b=4 on 2   two worker processes owning two shards each (the realistic layout of b = 4 shards on 2 CPUs).
Payloads: "tiny" — each shard's request item is a small int, echoed back (the transport's own floor); "dglmc" —
each item is DG-LMC's round message (raysampler.algorithms.dglmc.Message: a (4, 31) float64 θ and two scalars), the
reply per shard is DG-LMC's Reply (a (4, 31) array and a (4,) acceptance array), wrapped like ShardHost.step's
(replies, seconds) — so pickling is included.

Candidates (workers are real Ray actors, num_cpus=1 each, serving from a background thread as ShardHost does — so
they run at Ray's worker niceness, 15 unless RAY_worker_niceness says otherwise; the coordinator is this driver
process, at the shell's niceness):
  in-process          the handler called directly, no copy or pickle: the baseline every overhead is taken from;
  pickle only         in-process, but every request and reply pickled and unpickled (serially, in this process):
                      the serialisation part of any pickling transport's overhead;
  ray actor calls     plain `actor.step.remote(...)` + `ray.get` (RayPool's fallback);
  ray compiled graph  `ray.dag` InputNode → one step per actor → MultiOutputNode, `experimental_compile()`; its own
                      two actors (num_cpus=0), compiled and torn down around every block (its readers poll while a
                      graph is up), each block guarded by a timeout;
  tcp socket          raysampler.runtime.channel (length-prefixed pickles over TCP to the node's address: today's);
  unix socket         the same protocol over an abstract AF_UNIX socket (benchmark-only: isolates TCP's cost);
  zmq ipc / zmq tcp   pyzmq REQ/REP over ipc:// (abstract) and tcp:// (benchmark-only);
  shm+eventfd         raysampler.runtime.shm_channel: memfd regions, eventfd wake-ups, a watchdog thread per side
                      for a dead peer; "spin N us": both readers first watch shared memory for N µs
                      before blocking (yielding the core between looks since the runs' 1 ms default came in;
                      results/transports.json was measured before, with a pure spin);
  shm+fifo / shm+sem / shm+futex   benchmark-only: a multiprocessing.shared_memory segment with a named pipe, a
                      POSIX named semaphore (ctypes) or a raw futex (ctypes syscall) as the blocking wake-up;
  wake-up floor       shm+fifo with the same 8 bytes each way whatever the payload, no pickling and no handler:
                      what is left is waking the processes (and Python's own cost per system call).

Every figure is a median over `--repeats` repeats; within a repeat all candidates run back to back on each
setup×payload (order rotated each repeat), so the machine's noise hits them alike. Per block: `--rounds` timed
rounds after a warm-up (ray actor calls and the compiled graph: fewer). Reported: µs/round (block mean), the
median single round, the overhead above in-process (paired per repeat), the ratio to the tcp socket (paired), and the
CPU seconds the coordinator and the workers burn per round (from /proc, 10 ms ticks) — the price of spinning.

    python benchmarks/perf/transports.py             # full: 7 repeats × 2000 rounds (≈ 5–8 min on 2 busy cores)
    python benchmarks/perf/transports.py --quick     # smoke test

Writes benchmarks/perf/results/transports.json (transports_quick.json with --quick or a subset: --only, --setups,
--payloads) and prints the tables.
"""

from __future__ import annotations

import argparse
import itertools
import os
import pickle
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import _path  # noqa: F401  (puts benchmarks/ on sys.path for harness)
import harness
import numpy as np
from transport_candidates import FUTEX_AVAILABLE, BenchShmClient, BenchWorker, UnixClient, ZmqClient, echo

from raysampler.algorithms.dglmc import Message
from raysampler.runtime.channel import ChannelClient, answer, unwrap
from raysampler.runtime.executors import WORKER_ENV
from raysampler.runtime.shm_channel import ShmChannelClient

CHAINS, DIM = 4, 31
TARGET_OVERHEAD_US = 50.0
SHM_SPINS_US = (0, 20, 100)
CG_TIMEOUT_S = 60.0


class Setup(NamedTuple):
    name: str
    workers: int
    shards: int


SETUPS = (Setup("W=1", 1, 1), Setup("W=2", 2, 2), Setup("b=4 on 2", 2, 4))
PAYLOADS = ("tiny", "dglmc")


def shard_items(payload: str, shards: int) -> list[Any]:
    """Each shard's request item of one round; DG-LMC sends every shard the same θ array (as its coordinator does)."""
    if payload == "tiny":
        return list(range(shards))
    phi = np.random.default_rng(0).standard_normal((CHAINS, DIM))
    return [Message(phi=phi, n_steps=10 + i, warmup=False) for i in range(shards)]


@dataclass(frozen=True)
class Candidate:
    name: str
    kind: str  # "inproc", "pickle", "actor", "cgraph", or a BenchWorker.serve kind
    spin_us: int = 0


def candidates(have_zmq: bool, skip_cgraph: bool) -> list[Candidate]:
    out = [
        Candidate("in-process", "inproc"),
        Candidate("pickle only (no transport)", "pickle"),
        Candidate("ray actor calls", "actor"),
    ]
    if not skip_cgraph:
        out.append(Candidate("ray compiled graph", "cgraph"))
    out += [Candidate("tcp socket (current)", "tcp socket"), Candidate("unix socket", "unix socket")]
    if have_zmq:
        out += [Candidate("zmq ipc", "zmq ipc"), Candidate("zmq tcp", "zmq tcp")]
    out += [Candidate(f"shm+eventfd spin {s}us" if s else "shm+eventfd", "shm+eventfd", s) for s in SHM_SPINS_US]
    out += [Candidate("shm+fifo", "shm+fifo"), Candidate("shm+sem", "shm+sem")]
    if FUTEX_AVAILABLE:
        out.append(Candidate("shm+futex", "shm+futex"))
    out.append(Candidate("wake-up floor (8 B, no pickle)", "raw fifo"))
    return out


def make_client(c: Candidate, address: Any, token: bytes | None) -> Any:
    if c.kind == "tcp socket":
        return ChannelClient(tuple(address), token)
    if c.kind == "unix socket":
        return UnixClient(address)
    if c.kind.startswith("zmq"):
        return ZmqClient(address)
    if c.kind == "shm+eventfd":
        return ShmChannelClient(address, token, spin_s=c.spin_us * 1e-6)
    return BenchShmClient(tuple(address), raw=c.kind == "raw fifo")


# ------------------------------------------------------------------------------------------- timing


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process `pid` so far (all its threads), from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed_rounds(one_round: Callable[[], Any], rounds: int, warmup: int, pids: list[int]) -> dict[str, float]:
    """Run warm-up then `rounds` timed rounds: mean and median µs per round, CPU µs per round per process."""
    for _ in range(warmup):
        one_round()
    cpu0 = [cpu_seconds(p) for p in pids]
    times = np.empty(rounds)
    t_start = time.perf_counter()
    for t in range(rounds):
        t0 = time.perf_counter()
        one_round()
        times[t] = time.perf_counter() - t0
    total = time.perf_counter() - t_start
    cpu = [(cpu_seconds(p) - c) / rounds * 1e6 for p, c in zip(pids, cpu0)]
    return {
        "us_per_round": 1e6 * total / rounds,
        "median_round_us": 1e6 * float(np.median(times)),
        "p90_round_us": 1e6 * float(np.quantile(times, 0.9)),
        "coordinator_cpu_us": cpu[0],
        "workers_cpu_us": float(sum(cpu[1:])),
    }


def split(items: list[Any], workers: int) -> list[list[Any]]:
    """Each worker's items, shards spread over workers as RayPool does (contiguous, balanced)."""
    return [[items[i] for i in g] for g in np.array_split(np.arange(len(items)), workers)]


def run_block(
    ray: Any,
    c: Candidate,
    setup: Setup,
    payload: str,
    clients: dict,
    actors: list,
    cg_actors: list,
    rounds: int,
    warmup: int,
) -> dict[str, float]:
    groups = split(shard_items(payload, setup.shards), setup.workers)
    workers = actors[: setup.workers]
    me = os.getpid()
    if c.kind == "inproc":
        return timed_rounds(lambda: [echo(g) for g in groups], rounds, warmup, [me])
    if c.kind == "pickle":  # each request and reply pickled and unpickled here, one worker after another

        def pickled_round() -> list[Any]:
            out = []
            for g in groups:
                request = pickle.loads(pickle.dumps(g, protocol=5))
                out.append(unwrap(pickle.loads(pickle.dumps(answer(echo, request), protocol=5))))
            return out

        return timed_rounds(pickled_round, rounds, warmup, [me])
    if c.kind == "actor":
        pids = [me] + ray.get([a.pid.remote() for a in workers])
        return timed_rounds(lambda: ray.get([a.step.remote(g) for a, g in zip(workers, groups)]), rounds, warmup, pids)
    if c.kind == "cgraph":
        return run_cgraph(ray, cg_actors[: setup.workers], groups, rounds, warmup)
    chans = clients[c.name][: setup.workers]
    pids = [me] + clients["pids"][: setup.workers]

    def one_round() -> list[Any]:
        for ch, g in zip(chans, groups):
            ch.send(g)
        return [ch.receive() for ch in chans]

    return timed_rounds(one_round, rounds, warmup, pids)


def run_cgraph(ray: Any, actors: list, groups: list[list[Any]], rounds: int, warmup: int) -> dict[str, float]:
    """One compiled-graph block: compile, time, tear down — every step under a timeout."""
    from ray.dag import InputNode, MultiOutputNode

    pids = [os.getpid()] + ray.get([a.pid.remote() for a in actors], timeout=CG_TIMEOUT_S)
    with InputNode() as inp:
        dag = MultiOutputNode([a.step.bind(inp[i]) for i, a in enumerate(actors)])
    box: dict[str, Any] = {}

    def compile_it() -> None:
        box["dag"] = dag.experimental_compile(_submit_timeout=CG_TIMEOUT_S)

    th = threading.Thread(target=compile_it, daemon=True)
    th.start()
    th.join(CG_TIMEOUT_S)
    if "dag" not in box:
        raise TimeoutError(f"compiling the graph took over {CG_TIMEOUT_S:.0f} s")
    cdag = box["dag"]
    deadline = time.perf_counter() + CG_TIMEOUT_S

    def one_round() -> list[Any]:
        if time.perf_counter() > deadline:
            raise TimeoutError(f"the compiled-graph block ran past {CG_TIMEOUT_S:.0f} s")
        return ray.get(cdag.execute(*groups), timeout=10.0)

    try:
        return timed_rounds(one_round, rounds, warmup, pids)
    finally:
        cdag.teardown()


# --------------------------------------------------------------------------------------------- main


def arguments() -> argparse.ArgumentParser:
    ap = harness.parser(__doc__, __file__, ray=True)
    ap.add_argument("--quick", action="store_true", help="smoke test: 2 repeats, few rounds")
    ap.add_argument("--repeats", type=int, default=None, help="interleaved repeats (default 7; quick 2)")
    ap.add_argument("--rounds", type=int, default=None, help="timed rounds per block (default 2000; quick 200)")
    ap.add_argument(
        "--slow-rounds",
        type=int,
        default=None,
        help="timed rounds per block of ray actor calls and the compiled graph (default 300; quick 50)",
    )
    ap.add_argument("--no-cgraph", action="store_true", help="leave out Ray compiled graphs")
    ap.add_argument(
        "--only",
        nargs="+",
        default=None,
        metavar="NAME",
        help="run only the candidates whose names start with these (in-process is always run)",
    )
    ap.add_argument("--setups", nargs="+", default=None, choices=[s.name for s in SETUPS], help="setups to run")
    ap.add_argument("--payloads", nargs="+", default=None, choices=PAYLOADS, help="payloads to run")
    return ap


@dataclass(frozen=True)
class Plan:
    """The options with the defaults of a full or a --quick run filled in."""

    quick: bool
    repeats: int
    rounds: int
    slow_rounds: int
    cgraph: bool
    candidates: list[Candidate]
    setups: list[Setup]
    payloads: list[str]
    partial: bool  # a subset of candidates, setups or payloads: written as transports_quick.json

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Plan:
        try:
            import zmq  # noqa: F401

            have_zmq = True
        except ImportError:
            have_zmq = False
        return cls(
            quick=args.quick,
            repeats=args.repeats or (2 if args.quick else 7),
            rounds=args.rounds or (200 if args.quick else 2000),
            slow_rounds=args.slow_rounds or (50 if args.quick else 300),
            cgraph=not args.no_cgraph,
            candidates=[
                c
                for c in candidates(have_zmq, args.no_cgraph)
                if args.only is None or c.kind == "inproc" or any(c.name.startswith(o) for o in args.only)
            ],
            setups=[s for s in SETUPS if args.setups is None or s.name in args.setups],
            payloads=[p for p in PAYLOADS if args.payloads is None or p in args.payloads],
            partial=args.only is not None or args.setups is not None or args.payloads is not None,
        )


def measure(args: argparse.Namespace) -> harness.Report:
    plan = Plan.from_args(args)
    load_start = os.getloadavg()
    t_start = time.perf_counter()
    print(
        f"transports benchmark: {plan.repeats} repeats, {plan.rounds} rounds per block ({plan.slow_rounds} for ray "
        f"actor calls and the compiled graph); candidates: {', '.join(c.name for c in plan.candidates)}",
        flush=True,
    )
    with harness.local_ray(object_store_mb=200, num_cpus=args.cpus) as ray:
        raw, errors = run_all(ray, plan, t_start)
    names = [c.name for c in plan.candidates]
    summary = summarise(raw, names)
    targets = targets_of(summary)
    payload = {
        "settings": {
            "load_average_start": load_start,
            "load_average_end": os.getloadavg(),
            "quick": plan.quick,
            "repeats": plan.repeats,
            "rounds": plan.rounds,
            "slow_rounds": plan.slow_rounds,
            "chains": CHAINS,
            "dim": DIM,
            "setups": [s._asdict() for s in SETUPS],
            "payloads": PAYLOADS,
            "shm_spins_us": SHM_SPINS_US,
            "total_time_s": time.perf_counter() - t_start,
        },
        "summary": summary,
        "targets": targets,
        "errors": errors,
        "raw": raw,
    }
    name = "transports_quick" if plan.quick or plan.partial else "transports"
    return harness.Report(name, payload, report(summary, names, targets, errors))


def run_all(ray: Any, plan: Plan, t_start: float) -> tuple[dict[str, dict[str, list[dict]]], dict[str, str]]:
    """Every candidate on every setup × payload, repeat by repeat (the order rotated each repeat): the blocks'
    figures by "setup | payload" and candidate, and the candidates that failed (each is dropped at its first error)."""
    env = {"env_vars": WORKER_ENV}
    worker_cls = ray.remote(num_cpus=1, max_concurrency=1, runtime_env=env)(BenchWorker)
    actors = [worker_cls.remote() for _ in range(2)]
    cg_actors = [ray.remote(num_cpus=0, runtime_env=env)(BenchWorker).remote() for _ in range(2)] if plan.cgraph else []
    clients: dict[str, Any] = {"pids": ray.get([a.pid.remote() for a in actors])}
    raw: dict[str, dict[str, list[dict[str, float]]]] = {}
    errors: dict[str, str] = {}
    cands = plan.candidates
    try:
        for c in cands:
            if c.kind not in ("inproc", "pickle", "actor", "cgraph"):
                opened = ray.get([a.serve.remote(c.kind, c.spin_us * 1e-6) for a in actors])
                clients[c.name] = [make_client(c, addr, tok) for addr, tok in opened]
        for rep in range(plan.repeats):
            order = cands[rep % len(cands) :] + cands[: rep % len(cands)]
            for setup, payload in itertools.product(plan.setups, plan.payloads):
                for c in (c for c in order if c.name not in errors):
                    n = plan.slow_rounds if c.kind in ("actor", "cgraph") else plan.rounds
                    warmup = max(5, n // 10) if c.kind in ("actor", "cgraph") else max(50, n // 10)
                    try:
                        m = run_block(ray, c, setup, payload, clients, actors, cg_actors, n, warmup)
                    except Exception as exc:  # a candidate that misbehaves is reported, not fatal
                        errors[c.name] = f"{type(exc).__name__}: {exc}"
                        print(f"  {c.name} failed: {errors[c.name]}", flush=True)
                        continue
                    raw.setdefault(f"{setup.name} | {payload}", {}).setdefault(c.name, []).append(m)
            print(f"  repeat {rep + 1}/{plan.repeats} done [{time.perf_counter() - t_start:.0f} s]", flush=True)
    finally:
        for c in cands:
            for ch in clients.get(c.name, []):
                try:
                    ch.close()
                except OSError:
                    pass
    return raw, errors


def summarise(raw: dict[str, dict[str, list[dict]]], names: list[str]) -> list[dict[str, Any]]:
    """Medians over repeats of every figure, and of the per-repeat differences/ratios to in-process and tcp."""
    rows = []
    for combo, by_cand in raw.items():
        base = by_cand.get("in-process", [])
        tcp = by_cand.get("tcp socket (current)", [])
        for name in names:
            reps = by_cand.get(name)
            if not reps:
                continue
            row = {
                "setup": combo.split(" | ")[0],
                "payload": combo.split(" | ")[1],
                "candidate": name,
                "repeats": len(reps),
            }
            for key in ("us_per_round", "median_round_us", "p90_round_us", "coordinator_cpu_us", "workers_cpu_us"):
                row[key] = harness.median(r[key] for r in reps)
            row["overhead_us"] = harness.median(r["us_per_round"] - b["us_per_round"] for r, b in zip(reps, base))
            row["median_overhead_us"] = harness.median(
                r["median_round_us"] - b["median_round_us"] for r, b in zip(reps, base)
            )
            row["ratio_to_tcp"] = harness.median(r["us_per_round"] / t["us_per_round"] for r, t in zip(reps, tcp))
            rows.append(row)
    return rows


def _b4_dglmc(summary: list[dict]) -> list[dict]:
    """The summary rows of the realistic case: b = 4 shards on 2 workers, DG-LMC's messages."""
    return [r for r in summary if r["setup"] == "b=4 on 2" and r["payload"] == "dglmc"]


def targets_of(summary: list[dict]) -> list[dict[str, Any]]:
    return [
        {
            "target": f"{r['candidate']}: b=4 on 2 overhead ≤ {TARGET_OVERHEAD_US:.0f} µs above in-process",
            "value": r["overhead_us"],
            "pass": r["overhead_us"] <= TARGET_OVERHEAD_US,
        }
        for r in _b4_dglmc(summary)
        if r["candidate"] != "in-process"
    ]


def report(summary: list[dict], names: list[str], targets: list[dict], errors: dict[str, str]) -> list[harness.Table]:
    tables = []
    for payload in PAYLOADS:
        cols = ["candidate"]
        for s in SETUPS:
            cols += [f"{s.name} µs", "-inproc", "/tcp"]
        by_key = {(r["setup"], r["candidate"]): r for r in summary if r["payload"] == payload}
        rows = []
        for name in names:
            row: list[Any] = [name]
            for s in SETUPS:
                r = by_key.get((s.name, name))
                row += [r["us_per_round"], r["overhead_us"], r["ratio_to_tcp"]] if r else [None] * 3
            rows.append(row)
        tables.append(
            harness.Table(
                f"Round floor, payload {payload!r}: µs/round (block means), overhead above in-process, ratio to "
                "the tcp socket (medians over repeats of paired differences/ratios)",
                cols,
                rows,
                [
                    "coordinator = this driver; workers = Ray actors serving from a thread (compiled graph: its own "
                    "actors); spin = µs a reader polls shared memory before blocking."
                ],
            )
        )
    tables.append(
        harness.Table.of(
            "b=4 on 2, DG-LMC messages: single-round medians and CPU burnt per round",
            _b4_dglmc(summary),
            [("candidate", "candidate"), ("µs/round", "us_per_round"), ("median round µs", "median_round_us")]
            + [("p90 round µs", "p90_round_us"), ("median -inproc", "median_overhead_us")]
            + [("coord CPU µs", "coordinator_cpu_us"), ("workers CPU µs", "workers_cpu_us")],
            [
                "CPU = user+system seconds of the coordinator / both workers over the block, per round (10 ms "
                "ticks; includes Ray's own threads)."
            ],
        )
    )
    tables.append(
        harness.Table.of(
            "Target (b=4 on 2, DG-LMC messages, mean round)",
            targets,
            [("target", "target"), ("value µs", "value"), ("result", "pass")],
            [f"{name}: FAILED — {err}" for name, err in errors.items()],
        )
    )
    return tables


def main(argv: list[str] | None = None) -> None:
    harness.run(arguments(), measure, argv)


if __name__ == "__main__":
    main()
