"""What the service tests share: the tenants' keys, a small run spec, auth headers, polling, the draws of an
uninterrupted run, and a client that follows a run's draws across restarts and replicas."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import httpx
import numpy as np

from raysampler.wire import DrawLine, LineSplitter, parse_draw_stream_line
from support.ray_head import ray_head_address

SERVICE_KEYS = {"alice": "alice-key-0123456789", "bob": "bob-key-0123456789"}


def service_env(tmp: str, own_ray: bool = False) -> dict[str, str]:
    """A small service: fast keep-alives and chunks, a 200 kB upload limit; on this test process's local Ray
    (`ray_head_address`), or with `own_ray` on a private Ray of its own (2 CPUs, 100 MB object store) as the
    embedded default starts one."""
    return {
        "RAYSAMPLER_RAY_ADDRESS": "" if own_ray else ray_head_address(),
        "RAYSAMPLER_RAY_NUM_CPUS": "2",
        "RAYSAMPLER_OBJECT_STORE_BYTES": str(100 * 2**20),
        "RAYSAMPLER_KEEPALIVE_S": "0.5",
        "RAYSAMPLER_CHUNK_S": "0.2",
        "RAYSAMPLER_POLL_S": "0.05",
        "RAYSAMPLER_MAX_UPLOAD_BYTES": "200000",
        "RAY_AUTH_MODE": "disabled",
        "RAY_TMPDIR": tmp,
        "OPENBLAS_NUM_THREADS": "1",
    }


def inprocess_settings(data_dir, **over):
    """Settings of an in-process service: executor "local" (no Ray), the test tenants, small limits, fast polls."""
    from raysampler.service.settings import Settings

    keys = ",".join(f"{t}:{k}" for t, k in SERVICE_KEYS.items())
    return Settings(
        data_dir=data_dir,
        api_keys=keys,
        api_keys_file=None,
        executor="local",
        max_upload_bytes=200_000,
        chunk_s=0.2,
        poll_s=0.05,
        keepalive_s=0.5,
        **over,
    )


ALICE, BOB = SERVICE_KEYS["alice"], SERVICE_KEYS["bob"]
T = TypeVar("T")


def spec(**over: Any) -> dict[str, Any]:
    """Logistic regression on breast_cancer (d = 31), 2 shards, 4 chains, 300 rounds after 50 of burn-in."""
    base = {
        "model": {"family": "logistic_regression", "prior_scale": 1.0},
        "data": {"dataset": "builtin:breast_cancer"},
        "num_shards": 2,
        "chains": 4,
        "num_rounds": 300,
        "burn_in": 50,
        "seed": 3,
    }
    return base | over


def hdr(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def wait_until(fn: Callable[[], T], timeout: float = 300.0, what: str = "condition") -> T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = fn()
        if out:
            return out
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def final(client, run_id: str, key: str = ALICE) -> dict[str, Any]:
    """The run object once the run has ended."""
    return wait_until(
        lambda: (
            (i := client.get(f"/v1/runs/{run_id}", headers=hdr(key)).json())["status"]
            in ("SUCCEEDED", "FAILED", "CANCELLED")
            and i
        ),
        what=f"run {run_id} to end",
    )


def uninterrupted(body: dict[str, Any]) -> np.ndarray:
    """The draws (draws, chains, d) an uninterrupted run of this spec makes (in-process: draws do not depend on the
    executor); built-in data, so no store is needed."""
    from raysampler.options import ExecutionOptions
    from raysampler.sampling import Run
    from raysampler.service.schemas import RunSpec
    from raysampler.service.specs import build, run_options

    spec_obj = RunSpec.model_validate(body)
    built = build(spec_obj, "alice", None, "local")  # type: ignore[arg-type]
    local = ExecutionOptions(executor="local")
    with Run(built.model, built.shards, built.algorithm, run_options(spec_obj), local) as run:
        return np.concatenate([c.theta for c in run.chunks()])


class Follower(threading.Thread):
    """Follows a run's draws with follow=true, reconnecting from its offset whenever the server goes away (to the
    next of `urls`: replicas of one service), until the run has ended and every stored line was read; records each
    line's offset and values, and which URL served it."""

    def __init__(self, urls: list[str], run_id: str, key: str = ALICE) -> None:
        super().__init__(daemon=True)
        self.urls, self.run_id, self.key = urls, run_id, key
        self.lines: list[DrawLine] = []
        self.served_by: list[str] = []
        self.reconnects = 0

    def run(self) -> None:
        deadline = time.monotonic() + 300
        turn = 0
        while time.monotonic() < deadline:
            url = self.urls[turn % len(self.urls)]
            try:
                with httpx.stream(
                    "GET",
                    f"{url}/v1/runs/{self.run_id}/draws",
                    headers=hdr(self.key),
                    params={"start": len(self.lines), "follow": "true"},
                    timeout=10,
                ) as r:
                    if r.status_code != 200:
                        raise httpx.TransportError(f"status {r.status_code}")
                    split = LineSplitter()
                    for text in r.iter_text():
                        for line in split.feed(text):
                            item = parse_draw_stream_line(line)
                            if isinstance(item, DrawLine):
                                self.lines.append(item)
                                self.served_by.append(url)
                info = httpx.get(f"{url}/v1/runs/{self.run_id}", headers=hdr(self.key), timeout=10).json()
                if (
                    info["status"] in ("SUCCEEDED", "FAILED", "CANCELLED")
                    and len(self.lines) >= info["progress"]["draws_stored"] * info["spec"]["chains"]
                ):
                    return
            except (httpx.TransportError, httpx.HTTPError):
                turn += 1  # that server went away: the next replica
            self.reconnects += 1
            time.sleep(0.3)
