"""Posterior summary latency (issue 24): a finished run of `--chains` × `--draws` draws × `--dim` parameters is
written through the service's real record store and draw files, then a real `raysampler serve` subprocess answers
GET /v1/runs/{id}/summary over HTTP: cold (computed: the service has never summarised the run), warm (the same
request again: the in-memory cache), after a restart of the service (the summary stored next to the draws), and
the computation alone in-process next to arviz-stats' own DataTree `summary` on the same draws.

    python benchmarks/perf/summary.py [--chains 64] [--draws 10000] [--dim 30] [--warm 5]
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

from raysampler.result import Result
from raysampler.service.drawfiles import DrawFiles
from raysampler.service.local import LocalService
from raysampler.service.schemas import RunSpec
from raysampler.service.settings import Settings
from raysampler.service.store import SQLiteStore
from raysampler.service.summaries import summary_table
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
    return ap


def write_finished_run(data_dir: Path, tenant: str, chains: int, draws: int, dim: int) -> np.ndarray:
    """A SUCCEEDED run with AR(1) draws (autocorrelated like a sampler's), stored as the service stores them."""
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
    store.close()
    return theta


def timed_get(url: str, key: str) -> tuple[float, dict[str, Any]]:
    t = time.perf_counter()
    r = httpx.get(
        f"{url}/v1/runs/{RUN_ID}/summary", headers={"Authorization": f"Bearer {key}"}, timeout=600.0
    ).raise_for_status()
    return time.perf_counter() - t, r.json()


def measure(args: argparse.Namespace) -> harness.Report:
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        theta = write_finished_run(data, "default", args.chains, args.draws, args.dim)
        env = {"RAYSAMPLER_EXECUTOR": "local", "OPENBLAS_NUM_THREADS": "1"}
        with LocalService(data, env=env) as svc:
            cold, body = timed_get(svc.url, svc.api_key)
            warm = statistics.median(timed_get(svc.url, svc.api_key)[0] for _ in range(args.warm))
            key = svc.api_key
        with LocalService(data, env=env, keys={"default": key}) as svc:
            restarted, again = timed_get(svc.url, svc.api_key)
        assert again["rows"] == body["rows"]
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
        "after_restart_s": restarted,
        "compute_s": compute,
        "arviz_datatree_summary_s": reference,
        "environment": harness.environment(),
    }
    table = harness.Table(
        f"GET /summary of a finished {args.chains} × {args.draws} × {args.dim} run (seconds)",
        ["cold (computed)", "warm (median)", "after a restart (stored)", "computation alone", "arviz-stats summary"],
        [[cold, warm, restarted, compute, reference]],
        notes=["cold computes the table and stores it next to the draws; warm is the in-memory cache"],
    )
    return harness.Report("summary", payload, [table])


def main(argv: list[str] | None = None) -> None:
    harness.run(arguments(), measure, argv)


if __name__ == "__main__":
    main()
