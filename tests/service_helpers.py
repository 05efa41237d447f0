"""What the service tests share: the tenants' keys, a small run spec, auth headers, polling."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from conftest import SERVICE_KEYS

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
