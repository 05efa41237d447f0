"""The test process's small local Ray and what the suite's fixtures hold of it: `ACTIVE` (the local head, the multi-node
cluster and its site nodes while one runs), which tests/conftest.py's fixtures and hooks start and stop."""

from __future__ import annotations

import tempfile
from typing import Any

RAY_TMP = tempfile.mkdtemp(prefix="rs-ray-")
ACTIVE: dict[str, Any] = {"cluster": None, "sites": None, "head": None}


def ray_head_address() -> str:
    """The address of this test process's small local Ray (`servers.RayHead`, started on first use): the process
    itself joins it (conftest's `_local_ray`), and so do the services its tests start (`service_env`)."""
    if ACTIVE["head"] is None:
        from support.servers import RayHead

        ACTIVE["head"] = RayHead.start(RAY_TMP)
    return ACTIVE["head"].address
