"""Shared fixtures: one small local Ray for the whole session (2 CPUs, 100 MB object store, no dashboard)."""
from __future__ import annotations

import os
import tempfile

import pytest


@pytest.fixture(scope="session")
def ray_session():
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import ray

    tmp = tempfile.mkdtemp(prefix="rs-ray-")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, object_store_memory=100 * 2**20,
             configure_logging=False, _temp_dir=tmp)
    yield ray
    ray.shutdown()
