"""Runs that survive the service itself: SIGKILL the service mid-run (twice, the second time while it resumes) and the
run resumes from its checkpoint and SUCCEEDS with exactly the draws of an uninterrupted run, while a client
following the draws across the restarts (reconnecting with its offset) receives every draw exactly once. A graceful
stop leaves running runs to resume; a CANCELLED run resumes on request; an unusable checkpoint fails the run with the
reason and keeps its draws.

Both tests share one service (they stop, kill and restart it, and leave it running) and the draws of the
uninterrupted run they both resume (the same spec), computed once."""

from __future__ import annotations

import tempfile
import time

import numpy as np
import pytest
from support.service_helpers import ALICE, Follower, service_env, spec, uninterrupted, wait_until

from raysampler.client import Client
from raysampler.service.local import LocalService

pytestmark = [pytest.mark.service, pytest.mark.slow]  # starts, kills and restarts servers of its own (LocalService)

LONG = dict(num_rounds=10_000, burn_in=20, chains=2, seed=5)


@pytest.fixture(scope="module")
def svc(tmp_path_factory):
    """The module's service on a local Ray; each test leaves it running (a test that failed half-way may not)."""
    root = tmp_path_factory.mktemp("resume")
    ray_tmp = tempfile.mkdtemp(prefix="rs-resume-")
    svc = LocalService(root / "data", keys={"alice": ALICE}, env=service_env(ray_tmp), log=root / "data.log")
    svc.start()
    yield svc
    svc.kill()


@pytest.fixture(scope="module")
def expected() -> np.ndarray:
    """The draws (draws, chains, d) of an uninterrupted run of spec(**LONG), which both tests resume."""
    return uninterrupted(spec(**LONG))


def _running(svc: LocalService) -> LocalService:
    if svc.proc is None or svc.proc.poll() is not None:
        svc.start()
    return svc


def test_service_killed_twice_mid_run_resumes_identically_and_a_follower_gets_every_draw_once(svc, expected):
    body = spec(**LONG)
    with Client(_running(svc).url, ALICE) as c:
        run = c.submit(body)
        follower = Follower([svc.url], run.id)
        follower.start()
        wait_until(lambda: run.info()["progress"]["draws_stored"] >= 100, what="draws before the first kill")
        svc.kill()  # SIGKILL: server and its Ray, as a crash
        svc.start()
        wait_until(lambda: run.info()["restarts"] >= 1, what="the run to resume")
        svc.kill()  # again, while the resumed run goes on
        svc.start()
        info = wait_until(
            lambda: (i := run.info())["status"] in ("SUCCEEDED", "FAILED") and i, timeout=300, what="the run to end"
        )
        assert info["status"] == "SUCCEEDED", info
        assert info["restarts"] == 2 and info["checkpoint_round"] == info["progress"]["rounds_total"]
        stored = run.draws()
        kinds = [e["event"] for e in run.events(follow=False)]
        assert kinds.count("resumed") == 2 and kinds[-1] == "status"
    follower.join(120)
    assert stored.shape == (2, LONG["num_rounds"], 31)
    np.testing.assert_array_equal(stored.transpose(1, 0, 2), expected)
    offsets = [line.offset for line in follower.lines]
    assert offsets == list(range(LONG["num_rounds"] * 2)), "every draw exactly once, in order"
    assert follower.reconnects >= 2
    got = np.array([line.values for line in follower.lines]).reshape(LONG["num_rounds"], 2, 31)
    np.testing.assert_array_equal(got, expected)


def test_graceful_stop_then_cancel_and_resume_on_request_and_a_corrupt_checkpoint(svc, expected):
    body = spec(**LONG)
    with Client(_running(svc).url, ALICE) as c:
        run = c.submit(body)
        wait_until(lambda: run.info()["progress"]["draws_stored"] >= 50, what="stored draws")
        t0 = time.monotonic()
        svc.stop(timeout_s=60)  # SIGINT: the run stays RUNNING for the next start
        assert svc.proc is not None and svc.proc.returncode == 0 and time.monotonic() - t0 < 30
        svc.start()
        wait_until(lambda: run.info()["restarts"] >= 1, what="the run to resume after a graceful stop")
        run.cancel()
        info = wait_until(lambda: (i := run.info())["status"] == "CANCELLED" and i, what="CANCELLED")
        kept = info["progress"]["draws_stored"]

        # while `run` is CANCELLED: a run that is not stopped does not resume, and one whose checkpoint is unusable
        # fails with the reason and keeps its draws
        doomed = c.submit(spec(**{**LONG, "seed": 9}))
        with pytest.raises(Exception, match="409"):
            doomed.resume()  # not stopped (queued or running)
        wait_until(lambda: doomed.info()["progress"]["draws_stored"] >= 30, what="stored draws")
        svc.kill()
        (checkpoint,) = (svc.data_dir / "runs" / "alice" / doomed.id).glob("checkpoint*.pkl")  # of its lease epoch
        checkpoint.write_bytes(b"garbage")
        svc.start()
        info = wait_until(lambda: (i := doomed.info())["status"] == "FAILED" and i, what="FAILED")
        assert "cannot resume" in info["error"] and info["failure"]["kind"] == "checkpoint"
        assert doomed.draws().shape[1] == info["progress"]["draws_stored"] >= 30
        with pytest.raises(Exception, match="409|checkpoint"):
            doomed.resume()

        # the CANCELLED run stayed so across the restart; on request it resumes and ends as if never stopped
        assert run.status() == "CANCELLED"
        run.resume()
        info = wait_until(
            lambda: (i := run.info())["status"] in ("SUCCEEDED", "FAILED") and i,
            timeout=300,
            what="the resumed run to end",
        )
        assert info["status"] == "SUCCEEDED" and info["restarts"] == 2 and kept > 0
        np.testing.assert_array_equal(run.draws().transpose(1, 0, 2), expected)
