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


SERVICE_KEYS = {"alice": "alice-key-0123456789", "bob": "bob-key-0123456789"}


def service_env(tmp: str) -> dict[str, str]:
    """A small service: 2 Ray CPUs, 100 MB object store, fast keep-alives and chunks, a 200 kB upload limit."""
    return {"RAYSAMPLER_RAY_NUM_CPUS": "2", "RAYSAMPLER_OBJECT_STORE_BYTES": str(100 * 2**20),
            "RAYSAMPLER_KEEPALIVE_S": "0.5", "RAYSAMPLER_CHUNK_S": "0.2", "RAYSAMPLER_POLL_S": "0.05",
            "RAYSAMPLER_MAX_UPLOAD_BYTES": "200000", "RAY_AUTH_MODE": "disabled", "RAY_TMPDIR": tmp,
            "OPENBLAS_NUM_THREADS": "1"}


@pytest.fixture(scope="session")
def service(tmp_path_factory):
    """A real `raysampler serve` (uvicorn + local Ray + SQLite) on 127.0.0.1 and a free port, for the session."""
    from raysampler.service.local import LocalService

    root = tmp_path_factory.mktemp("service")
    ray_tmp = tempfile.mkdtemp(prefix="rs-svc-")
    svc = LocalService(root / "data", keys=SERVICE_KEYS, env=service_env(ray_tmp), log=root / "server.log")
    svc.start()
    yield svc
    svc.stop()


def inprocess_settings(data_dir, **over):
    """Settings of an in-process service: executor "local" (no Ray), the test tenants, small limits, fast polls."""
    from raysampler.service.settings import Settings

    keys = ",".join(f"{t}:{k}" for t, k in SERVICE_KEYS.items())
    return Settings(data_dir=data_dir, api_keys=keys, api_keys_file=None, executor="local", max_upload_bytes=200_000,
                    chunk_s=0.2, poll_s=0.05, keepalive_s=0.5, **over)


@pytest.fixture(scope="session")
def app_client(tmp_path_factory):
    """The ASGI app in-process (lifespan run: store, run manager with executor "local") behind a TestClient."""
    import warnings

    with warnings.catch_warnings():  # Starlette would rather its test client ran on httpx2
        warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient`")
        from fastapi.testclient import TestClient

    from api import create_app

    with TestClient(create_app(inprocess_settings(tmp_path_factory.mktemp("app") / "data"))) as client:
        yield client
