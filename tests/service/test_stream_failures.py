"""A draws stream that fails on the server midway (a draw file that cannot be read: `flaky_cli.py` makes the stream's
second read raise) must reach the client as a broken connection, never as the stream's end: a raw HTTP client gets a
protocol error, and the SDK resumes at its offset and gets every draw once."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import httpx
import numpy as np
import pytest
from support.service_helpers import ALICE, spec

from raysampler.client import Client
from raysampler.service.local import LocalService

pytestmark = [pytest.mark.service, pytest.mark.slow]  # a server of its own (executor "local": no Ray)


@pytest.fixture
def flaky_service(tmp_path):
    env = {
        "RAYSAMPLER_EXECUTOR": "local",
        "RAYSAMPLER_CHUNK_S": "0.05",
        "RAYSAMPLER_POLL_S": "0.05",
        "RAY_AUTH_MODE": "disabled",
    }
    svc = LocalService(
        Path(tempfile.mkdtemp(prefix="rs-flaky-")) / "data",
        keys={"alice": ALICE},
        env=env,
        log=tmp_path / "server.log",
        launcher=[sys.executable, str(Path(__file__).with_name("flaky_cli.py"))],
    )
    svc.start()
    yield svc
    svc.stop()


def test_a_stream_cut_by_a_server_error_is_a_broken_connection(flaky_service):
    with Client(flaky_service.url, ALICE) as client:
        run = client.submit(spec(num_rounds=400, burn_in=10, chains=2, seed=3))
        url = f"{flaky_service.url}/v1/runs/{run.id}/draws"
        # not a clean end after the lines before the failure
        with (
            pytest.raises(httpx.RemoteProtocolError),
            httpx.stream("GET", url, params={"follow": "true"}, headers={"Authorization": f"Bearer {ALICE}"}) as r,
        ):
            for _ in r.iter_lines():
                pass
        followed = run.draws(follow=True)  # reads succeed from here on
        info = run.info()
        assert info["status"] == "SUCCEEDED" and followed.shape[:2] == (2, 400), followed.shape
        stored = [json.loads(x) for x in httpx.get(
            f"{flaky_service.url}/v1/runs/{run.id}/draws", headers={"Authorization": f"Bearer {ALICE}"}, timeout=60
        ).text.splitlines()[1:]]  # fmt: skip
        assert [x["offset"] for x in stored] == list(range(800))
        np.testing.assert_array_equal(followed, run.draws())
