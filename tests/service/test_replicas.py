"""Two replicas of the service (`raysampler serve` twice) sharing one PostgreSQL and one S3 bucket, as the KubeRay
example deploys them. Either serves any run's reads and streams; a run is driven by the replica holding its lease.
The driving replica is frozen (SIGSTOP) until its lease has passed to the other; the new driver is SIGKILLed mid-run
and the frozen one thawed: it has lost its lease and writes nothing anyone reads, and it takes the run over from the
last checkpoint within the documented bound (lease + a keeper period + set-up). The run succeeds with exactly the
draws of an uninterrupted run, and a client following its draws across the replicas receives every draw exactly
once."""

from __future__ import annotations

import json
import os
import re
import signal
import tempfile
import time

import numpy as np
import pytest
from support.service_helpers import ALICE, Follower, service_env, spec, uninterrupted, wait_until

from raysampler.client import Client
from raysampler.service.local import LocalService

pytestmark = [pytest.mark.service, pytest.mark.slow]  # starts servers of its own (LocalService), PostgreSQL and S3

LEASE_S = 2.0
RUN = dict(num_rounds=10_000, burn_in=20, chains=2, seed=11)  # a fast machine samples 3,000 draws a second here


def _replica(tmp_path, name: str, database: str, storage: str, s3) -> LocalService:
    env = service_env(tempfile.mkdtemp(prefix=f"rs-{name}-")) | s3.env()
    env |= {
        "RAYSAMPLER_DATABASE_URL": database,
        "RAYSAMPLER_STORAGE_URL": storage,
        "RAYSAMPLER_REPLICA_ID": name,
        "RAYSAMPLER_LEASE_S": str(LEASE_S),
        "RAYSAMPLER_CHUNK_S": "0.3",
    }
    return LocalService(
        tmp_path / name, keys={"alice": ALICE}, env=env, log=tmp_path / f"{name}.log", args=["--executor", "local"]
    )


def _epoch_chunks(s3, bucket: str, prefix: str) -> dict[int, list[int]]:
    """First draw index of every draw chunk in the bucket under `prefix`, by the lease epoch that wrote it."""
    out: dict[int, list[int]] = {}
    listed = s3.client().list_objects_v2(Bucket=bucket, Prefix=prefix)
    for obj in listed.get("Contents", []):
        m = re.search(r"draws/(\d{12})(?:\.e(\d+))?\.npy$", obj["Key"])
        if m:
            out.setdefault(int(m.group(2) or 0), []).append(int(m.group(1)))
    return {e: sorted(v) for e, v in out.items()}


def test_replicas_share_runs_and_take_over_a_frozen_or_killed_driver_without_losing_a_draw(
    tmp_path, postgres, s3
) -> None:
    database, bucket = postgres.new_database(), s3.new_bucket()
    storage = f"s3://{bucket}/raysampler/"
    replicas = {name: _replica(tmp_path, name, database, storage, s3) for name in ("replica-a", "replica-b")}
    for r in replicas.values():
        r.start()
    body = spec(**RUN)
    timings: dict[str, float] = {}
    try:
        with Client(replicas["replica-a"].url, ALICE) as c:
            run = c.submit(body)
            first = wait_until(lambda: run.info()["replica"], what="a replica to drive the run")
            second = next(n for n in replicas if n != first)
            # the replica that does not drive the run serves its stream (then the other, when it goes away)
            follower = Follower([replicas[second].url, replicas[first].url], run.id)
            follower.start()
            clients = [Client(r.url, ALICE) for r in replicas.values()]
            views = {n: cl.run(run.id) for n, cl in zip(replicas, clients)}
            info = lambda name: views[name].info()
            wait_until(lambda: info(second)["progress"]["draws_stored"] >= 300, what="draws before the freeze")

            # 1. the driver freezes (SIGSTOP) until its lease has passed to the other replica, which goes on
            frozen = replicas[first].proc
            assert frozen is not None
            os.killpg(frozen.pid, signal.SIGSTOP)
            try:
                t_stop = time.monotonic()
                wait_until(lambda: info(second)["replica"] == second, timeout=60, what="the first takeover")
                timings["frozen_lease_taken_s"] = time.monotonic() - t_stop
                resumed_at = info(second)["progress"]["draws_stored"]
                wait_until(lambda: info(second)["progress"]["draws_stored"] > resumed_at + 300, what="progress")

                # 2. SIGKILL of the new driver mid-run (at once: a fast machine samples the rest of the run within a
                # second), then the frozen one thaws: it has lost its lease, what it still does changes nothing
                # anyone reads, and it takes the run over from the last checkpoint
                at_kill = info(second)["progress"]["draws_stored"]
                replicas[second].kill()
                t_kill = time.monotonic()
            finally:
                os.killpg(frozen.pid, signal.SIGCONT)
            assert at_kill < RUN["num_rounds"], "killed mid-run"
            wait_until(lambda: "lost" in (tmp_path / f"{first}.log").read_text(), timeout=60, what="the thawed one")
            wait_until(lambda: info(first)["replica"] == first, timeout=60, what="the second takeover")
            timings["lease_taken_s"] = time.monotonic() - t_kill
            wait_until(lambda: info(first)["progress"]["draws_stored"] > at_kill, timeout=60, what="new draws")
            timings["sampling_again_s"] = time.monotonic() - t_kill
            final = wait_until(
                lambda: (i := info(first))["status"] in ("SUCCEEDED", "FAILED") and i, timeout=240, what="the end"
            )
            assert final["status"] == "SUCCEEDED", final
            assert final["restarts"] == 2 and final["replica"] is None  # ended: nobody drives it
            stored = views[first].draws()
            kinds = [e["event"] for e in views[first].events(follow=False)]
            for cl in clients:
                cl.close()
        follower.join(120)
        assert not follower.is_alive()

        expected = uninterrupted(body)
        assert stored.shape == (RUN["chains"], RUN["num_rounds"], 31)
        np.testing.assert_array_equal(stored.transpose(1, 0, 2), expected)
        offsets = [line.offset for line in follower.lines]
        assert offsets == list(range(RUN["num_rounds"] * RUN["chains"])), "every draw exactly once, in order"
        got = np.array([line.values for line in follower.lines]).reshape(RUN["num_rounds"], RUN["chains"], 31)
        np.testing.assert_array_equal(got, expected)
        assert follower.served_by[0] == replicas[second].url and follower.served_by[-1] == replicas[first].url
        assert kinds.count("resumed") == 2 and kinds[-1] == "status"

        # the frozen replica wrote nothing after its successor took over: of its epoch's draw files, at most the one
        # it had begun when it froze starts where the successor resumed; none lies past it
        chunks = _epoch_chunks(s3, bucket, f"raysampler/runs/alice/{run.id}/")
        assert sorted(chunks) == [1, 2, 3], chunks
        assert max(chunks[1]) <= min(chunks[2]), chunks
        assert timings["lease_taken_s"] < LEASE_S + LEASE_S / 3 + 10, timings  # the bound, with room for a busy CI
    finally:
        for r in replicas.values():
            r.kill()
        print(json.dumps({"takeover": timings}))


def test_at_the_default_lease_a_killed_driver_on_ray_is_taken_over_within_the_bound(tmp_path, postgres, s3) -> None:
    """The defaults of a replicated head: RAYSAMPLER_LEASE_S left alone (15 s) and the runs on Ray. SIGKILL of the
    replica driving a run: the other takes it over within lease + a third (docs/service.md, "Replicas"), finishes
    it, and a client following it receives every draw exactly once."""
    from raysampler.service.settings import Settings

    lease = Settings.model_fields["lease_s"].default
    database, bucket = postgres.new_database(), s3.new_bucket()
    replicas = {}
    for name in ("replica-a", "replica-b"):
        env = service_env(tempfile.mkdtemp(prefix=f"rs-{name}-")) | s3.env()
        env |= {
            "RAYSAMPLER_DATABASE_URL": database,
            "RAYSAMPLER_STORAGE_URL": f"s3://{bucket}/raysampler/",
            "RAYSAMPLER_REPLICA_ID": name,
        }
        replicas[name] = LocalService(tmp_path / name, keys={"alice": ALICE}, env=env, log=tmp_path / f"{name}.log")
    for r in replicas.values():
        r.start()
    body = spec(num_rounds=20_000, burn_in=20, chains=2, seed=11)
    taken_s = None
    try:
        with Client(replicas["replica-a"].url, ALICE) as c:
            run = c.submit(body)
            first = wait_until(lambda: run.info()["replica"], what="a replica to drive the run")
            second = next(n for n in replicas if n != first)
            follower = Follower([replicas[second].url], run.id)
            follower.start()
            with Client(replicas[second].url, ALICE) as other:
                view = other.run(run.id)
                wait_until(lambda: view.info()["progress"]["draws_stored"] >= 1000, what="draws before the kill")
                at_kill = view.info()["progress"]["draws_stored"]
                replicas[first].kill()
                t_kill = time.monotonic()
                wait_until(lambda: view.info()["replica"] == second, timeout=120, what="the takeover")
                taken_s = time.monotonic() - t_kill
                final = wait_until(
                    lambda: (i := view.info())["status"] in ("SUCCEEDED", "FAILED") and i, timeout=300, what="the end"
                )
        follower.join(120)
        assert not follower.is_alive()
        assert at_kill < body["num_rounds"], "killed mid-run"
        assert final["status"] == "SUCCEEDED" and final["restarts"] == 1, final
        offsets = [line.offset for line in follower.lines]
        assert offsets == list(range(body["num_rounds"] * body["chains"])), "every draw exactly once, in order"
        assert taken_s < lease + lease / 3 + 10, taken_s  # the bound, with room for a busy CI
    finally:
        for r in replicas.values():
            r.kill()
        print(json.dumps({"default_lease_takeover_s": taken_s}))
