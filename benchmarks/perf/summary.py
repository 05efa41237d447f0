"""Posterior summary latency and cost (issue 24), against a real `raysampler serve` subprocess over HTTP.

1. A finished run of `--chains` × `--draws` draws × `--dim` parameters is written through the service's real record
   store and draw files, and its table made as the manager makes it when a run ends (`results.summary_of` into the
   run directory); then GET /v1/runs/{id}/summary: cold (the first request of a fresh service: it reads the table
   made at the run's end), warm (the in-memory cache), computed on request (the stored table removed: a run that
   ended before tables were made at the end), after a restart; the computation alone in-process next to arviz-stats'
   own DataTree `summary` on the same draws.
2. A run page on a running run: a real run (`--live-chains` chains, local executor) samples; once it has
   `--open-at` draws per chain stored the page opens (the first GET's latency) and polls the summary every
   `--poll-s` seconds for `--watch-s` seconds. The server's CPU time in summaries over that window is read from
   its /metrics (raysampler_summary_cpu_seconds_total) as a share of one core.

    python benchmarks/perf/summary.py [--chains 64] [--draws 10000] [--dim 30] [--warm 5] [--watch-s 60]
Results: benchmarks/perf/results/summary.json.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import _path  # noqa: F401  (puts benchmarks/ on sys.path for harness)
import harness
import httpx
import numpy as np

from raysampler.client import Client
from raysampler.result import Result
from raysampler.service.drawfiles import DrawFiles
from raysampler.service.local import LocalService
from raysampler.service.results import summary_of
from raysampler.service.schemas import RunSpec
from raysampler.service.settings import Settings
from raysampler.service.store import SQLiteStore
from raysampler.service.summaries import DEFAULT_CI_PROB, SUMMARY_FILE_PREFIX, SummaryCache, summary_table
from raysampler.wire import RunStatus

RUN_ID = "run-summary-bench"
CHUNK = 1000  # draws per stored chunk, as a running service writes them


def arguments() -> argparse.ArgumentParser:
    ap = harness.parser(__doc__, __file__)
    ap.add_argument("--chains", type=int, default=64)
    ap.add_argument("--draws", type=int, default=10_000)
    ap.add_argument("--dim", type=int, default=30)
    ap.add_argument("--warm", type=int, default=5, help="warm requests (the median is reported)")
    ap.add_argument("--skip-reference", action="store_true", help="do not time arviz-stats' DataTree summary")
    ap.add_argument("--live-chains", type=int, default=64)
    ap.add_argument("--open-at", type=int, default=2000, help="draws per chain stored when the page opens")
    ap.add_argument("--poll-s", type=float, default=2.0)
    ap.add_argument("--watch-s", type=float, default=60.0)
    return ap


def write_finished_run(data_dir: Path, tenant: str, chains: int, draws: int, dim: int) -> tuple[np.ndarray, float]:
    """A SUCCEEDED run with AR(1) draws (autocorrelated like a sampler's), stored as the service stores them, and
    its table made as the manager makes it at the run's end; returns the draws and how long the table took."""
    settings = Settings(data_dir=data_dir)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    store, files = SQLiteStore(str(settings.db_path)), DrawFiles(settings.runs_dir)
    spec = RunSpec.model_validate(
        {
            "model": {"family": "logistic_regression"},
            "data": {"dataset": "builtin:breast_cancer"},
            "chains": chains,
            "num_rounds": draws,
            "run_id": RUN_ID,
        }
    )
    rec = store.create_run(tenant, RUN_ID, spec, "bench", None, draws, draws)
    rng = np.random.default_rng(0)
    theta = np.empty((draws, chains, dim))
    theta[0] = rng.normal(size=(chains, dim))
    for t in range(1, draws):
        theta[t] = 0.7 * theta[t - 1] + rng.normal(size=(chains, dim)) * np.sqrt(1 - 0.7**2)
    for start in range(0, draws, CHUNK):
        files.append(tenant, RUN_ID, start, theta[start : start + CHUNK])
    now = time.time()
    store.update_run(
        tenant,
        rec.id,
        status=RunStatus.SUCCEEDED,
        started_at=now,
        finished_at=now,
        rounds_done=draws,
        draws_stored=draws,
        dim=dim,
        param_names=[f"x{j}" for j in range(dim)],
    )
    rec = store.get_run(tenant, RUN_ID)
    assert rec is not None
    t = time.perf_counter()
    summary_of(rec, files, DEFAULT_CI_PROB, SummaryCache())  # what RunManager._summarise_final does
    at_end = time.perf_counter() - t
    store.close()
    return theta, at_end


def timed_get(url: str, key: str, run_id: str = RUN_ID) -> tuple[float, dict[str, Any]]:
    t = time.perf_counter()
    r = httpx.get(
        f"{url}/v1/runs/{run_id}/summary", headers={"Authorization": f"Bearer {key}"}, timeout=600.0
    ).raise_for_status()
    return time.perf_counter() - t, r.json()


def summary_cpu_s(url: str) -> float:
    """The server's raysampler_summary_cpu_seconds_total."""
    for line in httpx.get(f"{url}/metrics", timeout=60.0).raise_for_status().text.splitlines():
        if line.startswith("raysampler_summary_cpu_seconds_total "):
            return float(line.split()[1])
    raise AssertionError("no raysampler_summary_cpu_seconds_total in /metrics")


def live_page(args: argparse.Namespace, tmp: Path, env: dict[str, str]) -> dict[str, Any]:
    """A run page open on a running run: the first summary's latency, then a poll every `poll_s` for `watch_s`."""
    spec = {
        "model": {"family": "logistic_regression"},
        "data": {"dataset": "builtin:logistic_synthetic", "options": {"n": 2000, "d": args.dim}},
        "chains": args.live_chains,
        "num_rounds": 10_000_000,
        "burn_in": 100,
        "seed": 0,
    }
    with LocalService(tmp / "live", env=env) as svc, Client(svc.url, svc.api_key) as client:
        run = client.submit(spec)
        while (info := run.info())["progress"]["draws_stored"] < args.open_at:
            assert info["status"] in ("PENDING", "RUNNING"), info
            time.sleep(0.2)
        cpu0 = summary_cpu_s(svc.url)
        first, body = timed_get(svc.url, svc.api_key, run.id)
        t0, latencies, summarised = time.monotonic(), [], [body["draws_per_chain"]]
        while (elapsed := time.monotonic() - t0) < args.watch_s:
            time.sleep(max(0.0, args.poll_s - (elapsed % args.poll_s)))
            dt, body = timed_get(svc.url, svc.api_key, run.id)
            latencies.append(dt)
            summarised.append(body["draws_per_chain"])
        window = time.monotonic() - t0
        cpu = summary_cpu_s(svc.url) - cpu0
        stored = run.info()["progress"]["draws_stored"]
        run.cancel()
    return {
        "live_chains": args.live_chains,
        "open_at_draws": summarised[0],
        "first_summary_s": first,
        "poll_median_s": statistics.median(latencies),
        "poll_max_s": max(latencies),
        "polls": len(latencies) + 1,
        "window_s": window,
        "summary_cpu_s": cpu,
        "summary_core_share": cpu / window,
        "tables_served": len(set(summarised)),
        "draws_at_close": stored,
    }


def measure(args: argparse.Namespace) -> harness.Report:
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        theta, at_end = write_finished_run(data, "default", args.chains, args.draws, args.dim)
        env = {"RAYSAMPLER_EXECUTOR": "local", "OPENBLAS_NUM_THREADS": "1"}
        with LocalService(data, env=env) as svc:
            cold, body = timed_get(svc.url, svc.api_key)
            warm = statistics.median(timed_get(svc.url, svc.api_key)[0] for _ in range(args.warm))
            key = svc.api_key
        for path in (data / "runs" / "default" / RUN_ID).glob(f"{SUMMARY_FILE_PREFIX}*"):
            path.unlink()  # a run that ended before tables were made at the end: computed on request
        with LocalService(data, env=env, keys={"default": key}) as svc:
            on_request, computed = timed_get(svc.url, svc.api_key)
        with LocalService(data, env=env, keys={"default": key}) as svc:
            restarted, again = timed_get(svc.url, svc.api_key)
        assert again["rows"] == body["rows"] == computed["rows"]
        live = live_page(args, Path(tmp), env)
        result = Result(np.ascontiguousarray(theta.transpose(1, 0, 2)), [f"x{j}" for j in range(args.dim)], {})
        t = time.perf_counter()
        summary_table(result.draws, result.param_blocks, 0.94)
        compute = time.perf_counter() - t
        reference = None
        if not args.skip_reference:
            t = time.perf_counter()
            result.summary()
            reference = time.perf_counter() - t
    payload = {
        "chains": args.chains,
        "draws": args.draws,
        "dim": args.dim,
        "cold_s": cold,
        "warm_s": warm,
        "computed_on_request_s": on_request,
        "after_restart_s": restarted,
        "table_at_run_end_s": at_end,
        "compute_s": compute,
        "arviz_datatree_summary_s": reference,
        "live": live,
        "environment": harness.environment(),
    }
    finished = harness.Table(
        f"GET /summary of a finished {args.chains} × {args.draws} × {args.dim} run (seconds)",
        [
            "cold",
            "warm (median)",
            "computed on request",
            "after a restart",
            "table at run end",
            "computation alone",
            "arviz-stats summary",
        ],
        [[cold, warm, on_request, restarted, at_end, compute, reference]],
        notes=[
            "cold: a fresh service's first request, reading the table made when the run ended (off the request path)",
            "computed on request: no stored table (the read of the draws and the computation in the request)",
        ],
    )
    page = harness.Table(
        f"A run page on a running {args.live_chains}-chain × {args.dim}-parameter run, polling every "
        f"{args.poll_s:g} s for {args.watch_s:g} s",
        [
            "draws/chain at open",
            "first summary (s)",
            "poll median (s)",
            "poll max (s)",
            "tables served",
            "summary CPU (s)",
            "share of one core",
        ],
        [
            [live[k] for k in ("open_at_draws", "first_summary_s", "poll_median_s", "poll_max_s", "tables_served")]
            + [live["summary_cpu_s"], live["summary_core_share"]]
        ],
        notes=["the CPU is the server's raysampler_summary_cpu_seconds_total over the window"],
    )
    return harness.Report("summary", payload, [finished, page])


def main(argv: list[str] | None = None) -> None:
    harness.run(arguments(), measure, argv)


if __name__ == "__main__":
    main()
