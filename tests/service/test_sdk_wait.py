"""The SDK's `wait` on a resumed run waits for the resumed attempt's end, not the earlier CANCELLED in the run's event
history, against a real server (executor "local": the point is the SDK and the event stream, not Ray)."""

from __future__ import annotations

import asyncio

import pytest
from support.service_helpers import ALICE, spec, wait_until

from raysampler.client import AsyncClient, Client

pytestmark = [pytest.mark.service]

# cancelled at 20 draws: enough rounds left that a fast machine (5,000 rounds/s seen) is still sampling when the
# cancel lands (750 rounds took 0.15 s there)
RESUMABLE = dict(num_rounds=10_000, burn_in=20, chains=2, seed=5)


def _cancelled_with_draws(c: Client, seed: int):
    run = c.submit(spec(**{**RESUMABLE, "seed": seed}))
    wait_until(lambda: run.info()["progress"]["draws_stored"] >= 20, what="stored draws")
    run.cancel()
    wait_until(lambda: run.status() == "CANCELLED", what="CANCELLED")
    return run


def test_wait_after_a_resume_waits_for_the_resumed_attempt(local_service):
    with Client(local_service.url, ALICE) as c:
        run = _cancelled_with_draws(c, 5)
        assert run.resume()["status"] in ("PENDING", "RUNNING")
        info = run.wait(progress=True, timeout=300)
        assert info["status"] == "SUCCEEDED" and info["stop_reason"] == "num_rounds"
        assert info["progress"]["draws_stored"] == info["progress"]["draws_total"]
        ends = [e["data"]["status"] for e in run.events(follow=False) if e["event"] == "status"]
        assert ends.count("CANCELLED") == 1 and ends[-1] == "SUCCEEDED"
        assert run.wait(timeout=30)["status"] == "SUCCEEDED"  # an ended run: at once


def test_async_wait_after_a_resume_waits_for_the_resumed_attempt(local_service):
    with Client(local_service.url, ALICE) as c:
        run_id = _cancelled_with_draws(c, 6).id

    async def go():
        async with AsyncClient(local_service.url, ALICE) as ac:
            run = await ac.run(run_id)
            await run.resume()
            return await run.wait(timeout=300)

    info = asyncio.run(go())
    assert info["status"] == "SUCCEEDED" and info["progress"]["draws_stored"] == info["progress"]["draws_total"]
