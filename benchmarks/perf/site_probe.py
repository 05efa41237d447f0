"""A site's first answer on a busy machine: what a run's submission waits for when it asks a site's node about its
shard file (`raysampler.runtime.sites.probe_shards`, the check the service makes before it accepts a run on site
data), with the machine's cores idle and with `--load` processes spinning on them.

On a Ray cluster on this machine (`ray.cluster_utils.Cluster`: a head with no CPUs, one 1-CPU node labelled
raysampler.io/site=s0) and a parquet file in object storage (moto's S3 server on 127.0.0.1, the site reading it
with its own credentials), each load level starts a fresh cluster and times, in order:

- "worker start": a trivial task on the site's node (Ray starts the job's first worker process there);
- "import": `import raysampler.runtime.sites` inside that worker (what unpickling the probe costs);
- "first probe", "second probe": `probe_shards` of the S3 file (the reader and its S3 client load once).

    python benchmarks/perf/site_probe.py [--load 0,8]
Results: benchmarks/perf/results/site_probe.json.
"""

from __future__ import annotations

import argparse
import io
import multiprocessing as mp
import os
import sys
import time
from pathlib import Path
from typing import Any

import _path  # noqa: F401  (puts benchmarks/ on sys.path for harness)
import harness
import numpy as np

import raysampler as rs

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))  # tests/support/servers.py: moto's S3 server


def arguments() -> argparse.ArgumentParser:
    ap = harness.parser(__doc__, __file__)
    ap.add_argument("--load", default="0,8", help="spinning processes per case, comma-separated")
    return ap


def _spin() -> None:
    while True:
        pass


def _pid() -> int:
    return os.getpid()


def _import_time() -> float:
    t0 = time.monotonic()
    import raysampler.runtime.sites  # noqa: F401

    return time.monotonic() - t0


def _case(load: int, path: str) -> dict[str, Any]:
    import ray

    from raysampler.runtime.sites import probe_shards

    spinners = [mp.Process(target=_spin, daemon=True) for _ in range(load)]
    for p in spinners:
        p.start()
    out: dict[str, Any] = {"load": load}
    try:
        with harness.site_cluster([1], object_store_mb=100) as (site,):
            where = {"label_selector": {"raysampler.io/site": site}}
            t0 = time.monotonic()
            ray.get(ray.remote(num_cpus=0)(_pid).options(**where).remote())
            out["worker_start_s"] = time.monotonic() - t0
            out["import_s"] = ray.get(ray.remote(num_cpus=0)(_import_time).options(**where).remote())
            shard = rs.Shard(path=path, site=site)
            for name in ("first_probe_s", "second_probe_s"):
                t0 = time.monotonic()
                (probe,) = probe_shards([shard], timeout_s=600)
                out[name] = time.monotonic() - t0
                assert probe is not None and probe.ok, probe
    finally:
        for p in spinners:
            p.terminate()
    return out


def measure(args: argparse.Namespace) -> harness.Report:
    import pyarrow as pa
    import pyarrow.parquet as pq
    from support.servers import S3

    s3 = S3.start()
    os.environ.update(s3.env())  # the site's node inherits them: its own credentials for the store
    bucket = s3.new_bucket()
    X = np.random.default_rng(0).normal(size=(2000, 5))
    buf = io.BytesIO()
    pq.write_table(pa.table({f"x{j}": X[:, j] for j in range(5)} | {"y": (X[:, 0] > 0).astype(float)}), buf)
    s3.client().put_object(Bucket=bucket, Key="site/part.parquet", Body=buf.getvalue())
    try:
        cases = [_case(int(n), f"s3://{bucket}/site/part.parquet") for n in args.load.split(",")]
    finally:
        s3.stop()
    table = harness.Table(
        f"A site's first answer (seconds of wall time; {os.cpu_count()} cores, a 1-CPU site node, S3 parquet)",
        ["spinning processes", "worker start", "import", "first probe", "second probe", "total"],
        [_row(c) for c in cases],
    )
    payload = {"settings": harness.options(args), "cases": cases, "table": table.markdown()}
    return harness.Report("site_probe", payload, [table])


def _row(c: dict[str, Any]) -> list[Any]:
    total = c["worker_start_s"] + c["import_s"] + c["first_probe_s"]
    return [c["load"], f"{c['worker_start_s']:.1f}", f"{c['import_s']:.1f}", f"{c['first_probe_s']:.1f}",
            f"{c['second_probe_s']:.2f}", f"{total:.1f}"]  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    harness.run(arguments(), measure, argv)


if __name__ == "__main__":
    main()
