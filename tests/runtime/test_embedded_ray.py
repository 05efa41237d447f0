"""The embedded default starts its own Ray: with another Ray cluster on this machine, recorded in Ray's temp dir as
`ray start` records one, `rs.sample(executor="ray")` and `raysampler serve` without an address start a private local
Ray instead of joining it (the service used to die with "When connecting to an existing cluster, object_store_memory
must not be provided"); and that service SIGKILLed mid-run restarts on the same data dir despite its Ray's leftovers
(orphaned agents, the session folder), clears them, and resumes the run to SUCCEEDED."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import pytest
from support.service_helpers import ALICE, service_env, spec, wait_until

from raysampler.client import Client
from raysampler.runtime.executors import MAX_RAY_TEMP_DIR, cluster_address, embedded_ray_dir, session_processes
from raysampler.service.local import LocalService

# starts Ray clusters and servers of its own (subprocesses)
pytestmark = [pytest.mark.service, pytest.mark.ray, pytest.mark.slow]

OTHER_CLUSTER = """
import json, os, sys, time
from ray.cluster_utils import Cluster

c = Cluster(initialize_head=True, head_node_args={
    "num_cpus": 1, "object_store_memory": 80 * 2**20, "include_dashboard": False})
with open(sys.argv[1] + ".tmp", "w") as fh:
    json.dump({"address": c.address, "node_id": c.head_node.node_id}, fh)
os.replace(sys.argv[1] + ".tmp", sys.argv[1])  # up: its address is in Ray's temp dir
time.sleep(3600)  # until killed
"""

SAMPLE = """
import json, ray
from ray._private.services import canonicalize_bootstrap_address
import raysampler as rs

would_join = canonicalize_bootstrap_address(None)  # what a bare ray.init() here would connect to
X, y = rs.datasets.load("breast_cancer")
res = rs.sample(rs.models.LogisticRegression(), rs.shard(X, y, num_shards=2), executor="ray", chains=2,
                num_rounds=20, burn_in=10, seed=1, progress=False, balance=False)
print(json.dumps({"would_join": would_join, "gcs_address": ray.get_runtime_context().gcs_address,
                  "node_ids": [n["NodeID"] for n in ray.nodes()], "shape": list(res.draws.shape)}))
"""


def _env(ray_tmp: Path) -> dict[str, str]:
    """The tests' small service (conftest.service_env: 2 CPUs, 100 MB object store, Ray's files under `ray_tmp`,
    token auth off) with no Ray address anywhere: one in the runner's environment would be an explicit choice."""
    return service_env(str(ray_tmp), own_ray=True) | {"RAY_ADDRESS": ""}


def _kill_rays_under(root: Path) -> None:
    """SIGKILL every process of every Ray session under `root` (this test's own temp dir only)."""
    for pid in session_processes(sorted(root.glob("**/session_2*"))):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def _sessions(ray_dir: Path) -> list[Path]:
    return sorted(p for p in ray_dir.glob("session_2*") if not p.is_symlink())


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def _start_other_cluster(ray_tmp: Path, env: dict[str, str]) -> tuple[subprocess.Popen, dict[str, str]]:
    """A ray.cluster_utils.Cluster in another process (it records its address in Ray's temp dir, as `ray start`
    does); returns the process and {address, node_id} once the cluster is up."""
    info_path = ray_tmp / "other-cluster.json"
    with open(ray_tmp / "other-cluster.log", "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-c", OTHER_CLUSTER, str(info_path)],
            env=os.environ | env,
            stdout=subprocess.DEVNULL,
            stderr=log,
            start_new_session=True,
        )
    deadline = time.monotonic() + 300
    while not info_path.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"the other cluster did not start:\n{(ray_tmp / 'other-cluster.log').read_text()}")
        time.sleep(0.2)
    return proc, json.loads(info_path.read_text())


def _stop(proc: subprocess.Popen | None) -> None:
    if proc is not None and proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


def test_only_an_explicit_address_joins_a_cluster(monkeypatch, tmp_path):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert cluster_address(None) is None and cluster_address("local") is None and cluster_address("") is None
    assert cluster_address("auto") == "auto" and cluster_address("10.0.0.1:6379") == "10.0.0.1:6379"
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.2:6379")  # Ray's own variable is an explicit choice too
    assert cluster_address(None) == "10.0.0.2:6379" and cluster_address("10.0.0.1:6379") == "10.0.0.1:6379"
    monkeypatch.setenv("RAY_ADDRESS", "local")
    assert cluster_address(None) is None
    monkeypatch.setenv("RAY_TMPDIR", "/tmp")  # Ray's Unix socket paths bound the private temp dir's length
    short, deep = Path("/srv/rs"), tmp_path / ("d" * 60)
    assert embedded_ray_dir(short) == Path("/srv/rs/ray").resolve()
    fallback = embedded_ray_dir(deep)
    assert fallback.parent == Path("/tmp").resolve() and len(str(fallback)) <= MAX_RAY_TEMP_DIR
    assert embedded_ray_dir(deep) == fallback != embedded_ray_dir(tmp_path / "other")


@pytest.mark.timeout(600)  # the work of two tests: a cluster, a Ray in a subprocess, a service started twice
def test_sample_and_serve_start_their_own_ray_beside_another_cluster_and_a_killed_service_resumes(
    tmp_path, monkeypatch
):
    """Beside another cluster: `rs.sample` in a fresh process and `raysampler serve` each start a private Ray instead
    of joining it. The service is then SIGKILLed mid-run (as the OOM killer would): it restarts on the same data dir
    despite its Ray's leftovers, clears them (and nothing of the other cluster), and resumes the run to SUCCEEDED.
    One service serves both checks (its start and the run it resumes are what each needs)."""
    ray_tmp = Path(tempfile.mkdtemp(prefix="rs-emb-"))
    env = _env(ray_tmp)
    cluster: subprocess.Popen | None = None
    svc: LocalService | None = None
    try:
        cluster, other = _start_other_cluster(ray_tmp, env)
        assert (ray_tmp / "ray" / "ray_current_cluster").read_text().strip() == other["address"]

        t0 = time.monotonic()
        out = subprocess.run(
            [sys.executable, "-c", SAMPLE], env=os.environ | env, capture_output=True, text=True, timeout=300
        )
        assert out.returncode == 0, out.stderr[-4000:]
        got = json.loads(out.stdout.strip().splitlines()[-1])
        assert got["would_join"] == other["address"], "Ray's own default would have joined the other cluster"
        assert got["gcs_address"] != other["address"] and other["node_id"] not in got["node_ids"]
        assert len(got["node_ids"]) == 1 and got["shape"] == [2, 20, 31]
        print(f"rs.sample beside another cluster: {time.monotonic() - t0:.1f} s")

        monkeypatch.setenv("RAY_TMPDIR", str(ray_tmp))  # as the service sees it
        data = ray_tmp / "data"  # a short path: the private Ray's temp dir is <data dir>/ray
        private = embedded_ray_dir(data)
        assert private == data.resolve() / "ray"
        svc = LocalService(data, keys={"alice": ALICE}, env=env, log=tmp_path / "svc.log")
        t0 = time.monotonic()
        svc.start()
        health = httpx.get(svc.url + "/v1/health", timeout=10).json()
        assert health["ray_connected"] and health["executor"] == "ray"
        # the service started a Ray itself: Ray names a session after the process that starts it
        crashed = _sessions(private)
        assert [p.name.rsplit("_", 1)[1] for p in crashed] == [str(svc.proc.pid)]
        with Client(svc.url, ALICE) as c:
            run = c.submit(spec(num_rounds=10_000, burn_in=20, chains=2, seed=5))  # still sampling at the kill
            wait_until(
                lambda: (i := run.info())["status"] == "RUNNING" and i["progress"]["draws_stored"] >= 20,
                what="a RUNNING run with stored draws",
            )
            print(f"serve beside another cluster, start and a run's first draws: {time.monotonic() - t0:.1f} s")
            os.kill(svc.proc.pid, signal.SIGKILL)  # the server process alone, as the OOM killer would
            svc.proc.wait()
            left = session_processes(crashed)  # what outlived it: Ray's agents (and, briefly, its workers)
            assert left, "SIGKILL of the server left none of its Ray's processes"

            t0 = time.monotonic()
            svc.start()  # same data dir, same private Ray temp dir
            print(f"restart after SIGKILL: {time.monotonic() - t0:.1f} s; leftovers were {left}")
            assert not [pid for pid in left if _alive(pid)], "the restart clears its crashed Ray's processes"
            sessions = _sessions(private)
            assert crashed[0] in sessions and sessions[-1].name.endswith(f"_{svc.proc.pid}")
            info = wait_until(
                lambda: (i := run.info())["status"] in ("SUCCEEDED", "FAILED") and i,
                timeout=300,
                what="the resumed run to end",
            )
        assert info["status"] == "SUCCEEDED", info
        assert info["restarts"] == 1 and info["progress"]["draws_stored"] == 10_000
        assert cluster.poll() is None  # the other cluster lives on, untouched by either start
        assert (ray_tmp / "ray" / "ray_current_cluster").read_text().strip() == other["address"]
    finally:
        if svc is not None:
            svc.kill()
        _stop(cluster)
        _kill_rays_under(ray_tmp)
        shutil.rmtree(ray_tmp, ignore_errors=True)
