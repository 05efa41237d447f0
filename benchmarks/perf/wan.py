"""raysampler across slow links: default DG-LMC at sites behind emulated wide-area links, on this one machine
(tests/support/wan_harness.py: a network namespace per host, a delaying TCP relay in each site's, the Ray head and one
labelled Ray node per site; each site's rows in a file that only its node's worker reads; the driver, hence the
coordinator, at the head). Each round's messages and Ray's own traffic cross the links.

Per round-trip time (RTT, head ↔ site; each site's link delays each way by RTT / 2) and per case, one run to
convergence (`num_rounds="auto"`, the default chains), the same seed throughout:

- "breast_cancer_2", "breast_cancer_4": breast_cancer (569 rows) split over 2 and 4 sites;
- "covtype_like_2", "covtype_like_4": covtype_like, 2 and 4 sites × 25,000 rows (`--covtype-rows`);
- "hospitals_4": the hierarchical logistic model of benchmarks/perf/groups.py, 4 sites × 100 hospitals.

Reported: wall seconds of `rs.sample` at the driver, its set-up (binding, tuning, starting the workers), the rest
outside the rounds (wall - set-up - sampling: the state captured after each chunk, convergence checks), rounds,
round trips by phase (`RunStats.trips`), the chains chosen (`chains="auto"`) and the warm-up's length, the median
round, min bulk ESS over every parameter, ESS/s over sampling seconds and over wall seconds, and the accuracy
against the LAN run (RTT 0: the same namespaces with no relay, or with `--lan-relay` through relays with no delay,
which measures the relays' own cost): max |Δmean| in the LAN run's posterior sds, and whether the draws are the
same bit for bit. Also: the RTT measured from the head to site a, each site's RTT as the run measured it, and the
Ray nodes found dead at the end.

Impaired links (tests/support/wan_harness.py's relay): `--jitter-ms J` adds to each chunk's one-way delay an extra drawn
uniformly from [0, J] (a round trip then takes RTT to RTT + 2J; TCP's order is kept, so a chunk never overtakes the
one before it), `--bandwidth-mbit B` caps each link at B Mbit/s each way (bytes leave no faster, queued behind the
ones before them, then pay the delay). Both take comma-separated values: every RTT > 0 is run at each (jitter,
bandwidth) pair, on the same cluster (the relays are re-set between runs); RTT 0, the LAN reference, runs without
either. Each row carries its jitter and bandwidth, and so does each run in the JSON.

    python benchmarks/perf/wan.py                                     # every case at 0, 20, 50, 100, 200 ms
    python benchmarks/perf/wan.py --rtt-ms 0,100 --cases breast_cancer_2 --label bc2
    python benchmarks/perf/wan.py --rtt-ms 100 --jitter-ms 5 --bandwidth-mbit 10 --cases covtype_like_4
    python benchmarks/perf/wan.py --rtt-ms 0,100 --jitter-ms 0,20 --bandwidth-mbit 0,10 --cases breast_cancer_2
    python benchmarks/perf/wan.py --rtt-ms 100,300 --cases breast_cancer_2 --stall-s 30 --label stall
    python benchmarks/perf/wan.py --rtt-ms 50 --cases covtype_like_4 --pipeline false,auto  # chains in flight

Needs root, `ip netns` and iptables (apt-get install -y iptables). Results: benchmarks/perf/results/wan_<label>.json.
A run at 200 ms takes about (rounds × 0.2 s) + set-up: the whole default set is an hour or more.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _path  # noqa: F401  (puts benchmarks/ on sys.path for harness)
import harness
import numpy as np

sys.path.insert(1, str(harness.REPO_DIR / "tests"))  # the WAN harness is a test helper (tests/support/wan_harness.py)
from support import wan_harness

import raysampler as rs

SITES = ("a", "b", "c", "d")
#: case → number of sites
CASES = {"breast_cancer_2": 2, "breast_cancer_4": 4, "covtype_like_2": 2, "covtype_like_4": 4, "hospitals_4": 4}
COVTYPE_PER_SITE = 25_000
HOSPITALS_PER_SITE = 100
TRIP_PHASES = ("setup", "warmup", "sampling", "capture")


def model_of(case: str) -> Any:
    if case.startswith("breast_cancer"):
        return rs.models.LogisticRegression(prior_scale=1.0)
    if case.startswith("covtype_like"):
        return rs.models.LogisticRegression()
    if case.startswith("hospitals"):  # as benchmarks/perf/groups.py
        return rs.models.LogisticRegression(
            prior_scale=2.5, group_effects=rs.GroupEffects("hospital", sd_prior=rs.priors.HalfNormal(1.0))
        )
    raise ValueError(f"unknown case {case!r}")


def site_files(case: str, folder: Path, seed: int, covtype_rows: int = COVTYPE_PER_SITE) -> list[rs.Shard]:
    """The case's rows split over its sites, one file per site in `folder`, as site shards."""
    k = CASES[case]
    if case.startswith("hospitals"):
        import pyarrow as pa
        import pyarrow.parquet as pq

        G = k * HOSPITALS_PER_SITE
        X, y = rs.datasets.load("hospitals", seed=seed, n_groups=G)
        cols = list(rs.datasets.columns("hospitals", n_groups=G))
        out = []
        for site, shard in zip(SITES, rs.shard(X, y, num_shards=k, columns=cols, by="hospital")):
            assert shard.X is not None and shard.y is not None
            path = folder / f"{case}-{site}.parquet"
            pq.write_table(pa.table({"y": shard.y} | {c: shard.X[:, j] for j, c in enumerate(cols)}), path)
            out.append(rs.Shard(path=str(path), site=site))
        return out
    if case.startswith("covtype_like"):
        X, y = rs.datasets.load("covtype_like", seed=seed, n=k * covtype_rows)
    else:
        X, y = rs.datasets.load("breast_cancer")
    out = []
    for site, Xi, yi in zip(SITES, np.array_split(X, k), np.array_split(y, k)):
        path = folder / f"{case}-{site}.npz"
        np.savez(path, X=Xi, y=yi)
        out.append(rs.Shard(path=str(path), site=site))
    return out


def _trips(stats: Any) -> dict[str, int]:
    trips = stats.trips
    return {k: int(getattr(trips, k)) for k in TRIP_PHASES} | {"total": int(trips.total)}


def drive(case: str, shards: list[rs.Shard], options: dict[str, Any]) -> dict[str, Any]:
    """At the head (`Wan.run_python`, joined to the cluster): one run of the case, and what the table reports."""
    import ray

    t0 = time.perf_counter()
    res = rs.sample(model_of(case), shards, executor="ray", progress=False, **options)
    wall = time.perf_counter() - t0
    st, outcome = res.run_stats, res.outcome
    assert st is not None and outcome is not None and res.setup is not None
    ess = np.asarray(res.ess(), dtype=float)
    draws = np.ascontiguousarray(res.draws)
    return {
        "wall_s": wall,
        "setup_s": outcome.timings.setup_s,
        "sampling_s": st.sampling_time_s,
        "other_s": wall - outcome.timings.setup_s - st.sampling_time_s,
        "rounds": int(st.rounds),
        "trips": _trips(st),
        "median_round_ms": 1e3 * float(np.median(st.round_time)),
        "chains": int(draws.shape[0]),
        "chains_reason": res.setup.chains.reason if res.setup.chains is not None else None,
        "pipelined": bool(st.pipeline is not None and st.pipeline.on),
        "pipeline_reason": res.setup.pipeline.reason if res.setup.pipeline is not None else None,
        "pipeline_decision": st.pipeline.reason if st.pipeline is not None else None,
        "burn_in": st.burn_in,
        "site_rtt_ms": {link.site: None if link.rtt_s is None else 1e3 * link.rtt_s for link in st.links},
        "draws": int(draws.shape[1]),
        "min_ess": float(ess.min()),
        "ess_per_s": float(ess.min() / st.sampling_time_s),
        "ess_per_wall_s": float(ess.min() / wall),
        "stop_reason": str(outcome.stop_reason),
        "transport": res.setup.transport,
        "sites": [p.site for p in st.placement],
        "mean": draws.mean(axis=(0, 1)),
        "sd": draws.std(axis=(0, 1)),
        "draws_sha256": hashlib.sha256(draws.tobytes()).hexdigest(),
        "dead_nodes": sum(not n["Alive"] for n in ray.nodes()),
    }


def arguments() -> argparse.ArgumentParser:
    ap = harness.parser(__doc__, __file__)
    ap.add_argument("--rtt-ms", default="0,20,50,100,200", help="round-trip times, comma-separated (0: the LAN run)")
    ap.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of {', '.join(CASES)}")
    ap.add_argument(
        "--jitter-ms",
        default="0",
        help="the most jitter adds to each chunk's one-way delay (uniform on [0, J]), comma-separated values",
    )
    ap.add_argument(
        "--bandwidth-mbit", default="0", help="each link's cap in Mbit/s, each way (0: none), comma-separated values"
    )
    ap.add_argument("--num-rounds", default="auto", help='"auto" (to convergence, the default) or a number')
    ap.add_argument("--chains", type=int, default=None, help="chains (default: raysampler's)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--site-cpus", type=int, default=1, help="CPUs of each site's Ray node")
    ap.add_argument("--timeout-s", type=float, default=3600.0, help="the longest one run may take")
    ap.add_argument("--label", default=None, help="results go to wan_<label>.json (default: <cpus>cores)")
    ap.add_argument(
        "--lan-relay",
        action="store_true",
        help="the RTT 0 run through the relays (no delay, their own cost kept); default: direct veth links",
    )
    ap.add_argument(
        "--stall-s",
        type=float,
        default=0.0,
        help="also run each case at each RTT > 0 with site a's link stalled this long (0: no stall runs)",
    )
    ap.add_argument("--stall-after-s", type=float, default=15.0, help="the stall begins this long into the run")
    ap.add_argument(
        "--pipeline",
        default="auto",
        help='comma-separated pipeline= values to run each case with (of auto, false, true), e.g. "false,auto": '
        "chains in flight against none, side by side at each RTT",
    )
    ap.add_argument(
        "--covtype-rows",
        type=int,
        default=COVTYPE_PER_SITE,
        help="rows per site of the covtype_like cases (default %(default)s)",
    )
    ap.add_argument("--echo", action="store_true", help="show the drivers' output")
    return ap


def measure(args: argparse.Namespace) -> harness.Report:
    reason = wan_harness.unavailable()
    if reason is not None:
        raise SystemExit(f"wan.py: {reason}")
    rtts = _floats(args.rtt_ms)
    links = [(j, b) for j in _floats(args.jitter_ms) for b in _floats(args.bandwidth_mbit)]
    if not links or any(j < 0 or b < 0 for j, b in links):
        raise SystemExit("wan.py: --jitter-ms and --bandwidth-mbit take values >= 0")
    cases = [c for c in str(args.cases).split(",") if c]
    for c in cases:
        if c not in CASES:
            raise SystemExit(f"wan.py: unknown case {c!r} (of {', '.join(CASES)})")
    options: dict[str, Any] = {"seed": args.seed}
    options["num_rounds"] = "auto" if args.num_rounds == "auto" else int(args.num_rounds)
    if args.chains is not None:
        options["chains"] = args.chains
    pipelines: list[bool | str] = []
    for v in str(args.pipeline).split(","):
        if v.strip() not in ("auto", "false", "true"):
            raise SystemExit(f"wan.py: --pipeline takes auto, false or true, got {v!r}")
        pipelines.append("auto" if v.strip() == "auto" else v.strip() == "true")
    sites = SITES[: max(CASES[c] for c in cases)]
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="rs-wan-data-") as tmp:
        files = {c: site_files(c, Path(tmp), args.seed, args.covtype_rows) for c in cases}
        for rtt in rtts:
            t0 = time.perf_counter()
            variants = links if rtt > 0 else [(0.0, 0.0)]
            with wan_harness.wan_cluster(
                sites,
                delay_ms=rtt / 2,
                jitter_ms=variants[0][0],
                bandwidth=variants[0][1] * MBIT,
                site_cpus=args.site_cpus,
                direct=rtt == 0 and not args.lan_relay,
            ) as wan:
                print(f"RTT {rtt:g} ms: cluster up in {time.perf_counter() - t0:.1f} s")
                for jitter_ms, mbit in variants:
                    if rtt > 0 or args.lan_relay:
                        for site in sites:  # the next variant's links (bytes in flight keep their old timing)
                            wan.set_delay(site, rtt / 2, jitter_ms)
                            wan.set_bandwidth(site, mbit * MBIT)
                    measured = wan.rtt_ms("a")
                    link = {"rtt_ms": rtt, "jitter_ms": jitter_ms, "bandwidth_mbit": mbit, "measured_rtt_ms": measured}
                    print(f"  {_link_name(link)}: measured RTT {measured:.1f} ms")
                    for case in cases:
                        for pipeline in pipelines:
                            runs += _runs(wan, case, files[case], options | {"pipeline": pipeline}, rtt, link, args)
    _against_lan(runs)
    for r in runs:
        if "round_vs_unpipelined" in r:
            print(
                f"{r['case']} at {r['rtt_ms']:g} ms, chains in flight against none: round "
                f"{r['round_vs_unpipelined']:.3f}x, wall {r['wall_vs_unpipelined']:.3f}x, "
                f"same draws: {r['same_draws_unpipelined']}"
            )
    table = harness.Table(
        "Default DG-LMC across emulated links",
        [
            "case",
            "RTT ms",
            "jitter ms",
            "Mbit/s",
            "measured",
            "wall s",
            "set-up s",
            "other s",
            "chains",
            "warm-up",
            "rounds",
            "trips set-up/warm-up/sampling/capture",
        ]
        + ["median round ms", "min ESS", "ESS/s", "ESS/wall s", "max |Δmean|/sd vs LAN", "same draws", "dead nodes"],
        [_row(r) for r in runs],
        [
            "ESS/s: min bulk ESS over every parameter / sampling seconds; ESS/wall s: over rs.sample's wall seconds",
            "other s: wall - set-up - sampling (between the rounds: chunk captures, convergence checks, the result)",
            "LAN: the RTT 0 run of the same case, "
            + ("through the same relays with no delay" if args.lan_relay else "on the plain links (no relay)"),
            f"sites' Ray nodes {args.site_cpus} CPU each; options {options}",
            "[pipeline v: on/off]: the run's pipeline= and whether its rounds ran as two chain groups in flight; a "
            "pipelined run's draws, round and wall against its unpipelined twin's are in the JSON "
            "(same_draws_unpipelined, round_vs_unpipelined, wall_vs_unpipelined)",
            "jitter ms: the most each chunk's one-way delay gets added (uniform on [0, J]; order kept); Mbit/s: each "
            "link's cap each way (blank: none); measured: the median of 5 small round trips, head to site a",
            "a stalled run: site a's link stopped both ways for the stall's length; its |Δmean| and same draws are "
            "against the same case's unstalled run at that RTT; dead nodes: Ray nodes found dead at the end",
        ],
    )
    payload = {"settings": harness.options(args), "runs": runs, "table": table.markdown()}
    label = args.label or f"{harness.environment()['cpu_count']}cores"
    return harness.Report(f"wan_{label}", payload, [table])


MBIT = 125_000  # bytes/s in a Mbit/s


def _floats(text: str) -> list[float]:
    return [float(v) for v in str(text).split(",") if v.strip()]


def _link_name(link: dict[str, Any]) -> str:
    jitter = f" +0–{link['jitter_ms']:g} ms" if link["jitter_ms"] else ""
    cap = f" {link['bandwidth_mbit']:g} Mbit/s" if link["bandwidth_mbit"] else ""
    return f"RTT {link['rtt_ms']:g} ms{jitter}{cap}"


def _runs(
    wan: Any, case: str, shards: list[rs.Shard], options: dict[str, Any], rtt: float, link: dict[str, Any], args: Any
) -> list[dict[str, Any]]:
    """The case on the links as they are now: its plain run and, with --stall-s at an RTT > 0, its stalled one."""
    out_runs = []
    for stall_s in (0.0, args.stall_s) if args.stall_s and rtt > 0 else (0.0,):
        with contextlib.ExitStack() as stack:
            when = stack.enter_context(wan.stall("a", args.stall_after_s, stall_s)) if stall_s else {}
            out = wan.run_python(
                "wan:drive",
                {"case": case, "shards": shards, "options": options},
                path=[Path(__file__).resolve().parent],
                timeout_s=args.timeout_s,
                echo=args.echo,
            )
        out.update(case=case, stall_s=stall_s, pipeline=options.get("pipeline", "auto"), **link)
        out["stalled"] = "paused" in when  # the stall began before the run ended
        out_runs.append(out)
        print(
            f"    {case}{f' (stall {stall_s:g} s)' if stall_s else ''} pipeline={out['pipeline']} "
            f"({'on' if out['pipelined'] else 'off'}): {out['wall_s']:.1f} s "
            f"({out['setup_s']:.1f} set-up), {out['rounds']} rounds, {out['ess_per_s']:.1f} ESS/s",
            flush=True,
        )
    return out_runs


def _against_lan(runs: list[dict[str, Any]]) -> None:
    """Each run's accuracy against the case's LAN run, and a stalled run's draws against the same case and RTT's
    unstalled run (`same_draws`: bit for bit; the chains chosen depend on the RTT, so only that run compares)."""
    lan = {r["case"]: r for r in runs if r["rtt_ms"] == 0}
    calm = {_key(r): r for r in runs if not r.get("stall_s")}
    unpiped = {_key(r)[:-1]: r for r in runs if not r.get("stall_s") and not r.get("pipelined")}  # any pipeline=
    for r in runs:
        twin = unpiped.get(_key(r)[:-1])
        if r.get("pipelined") and twin is not None and twin["chains"] == r["chains"]:
            r["same_draws_unpipelined"] = r["draws_sha256"] == twin["draws_sha256"]
            r["wall_vs_unpipelined"] = r["wall_s"] / twin["wall_s"]
            r["round_vs_unpipelined"] = r["median_round_ms"] / twin["median_round_ms"]
        if r.get("stall_s"):
            ref = calm[_key(r)]
            r["max_mean_err_sd"] = float(np.max(np.abs(r["mean"] - ref["mean"]) / ref["sd"]))
            r["same_draws"] = r["draws_sha256"] == ref["draws_sha256"]
            continue
        base = lan.get(r["case"])
        if base is None:
            r["max_mean_err_sd"], r["same_draws"] = None, None
            continue
        r["max_mean_err_sd"] = float(np.max(np.abs(r["mean"] - base["mean"]) / base["sd"]))
        r["same_draws"] = r["draws_sha256"] == base["draws_sha256"]


def _key(r: dict[str, Any]) -> tuple[Any, ...]:
    """A run's case and links, the stall aside."""
    return r["case"], r["rtt_ms"], r.get("jitter_ms", 0.0), r.get("bandwidth_mbit", 0.0), r.get("pipeline", "auto")


def _row(r: dict[str, Any]) -> list[Any]:
    t = r["trips"]
    trips = "/".join(str(t[k]) for k in TRIP_PHASES)
    same = None if r["same_draws"] is None else ("yes" if r["same_draws"] else "no")
    links = [r["rtt_ms"], r.get("jitter_ms") or None, r.get("bandwidth_mbit") or None]
    timings = [*links, r["measured_rtt_ms"], r["wall_s"], r["setup_s"], r["other_s"], r["chains"], r["burn_in"]]
    timings += [r["rounds"], trips]
    timings.append(r["median_round_ms"])
    case = r["case"] + (f" (stall {r['stall_s']:g} s)" if r.get("stall_s") else "")
    case += f" [pipeline {r.get('pipeline', 'auto')}: {'on' if r.get('pipelined') else 'off'}]"
    return [case, *timings, r["min_ess"], r["ess_per_s"], r["ess_per_wall_s"], r["max_mean_err_sd"], same,
            r["dead_nodes"]]  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    harness.run(arguments(), measure, argv)


if __name__ == "__main__":
    main()
