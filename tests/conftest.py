"""Shared fixtures: one small local Ray (2 CPUs, 100 MB object store, no dashboard), a multi-node Ray cluster on
this machine (head with 0 CPUs and three 1-CPU nodes labelled as sites a, b, c), the service, and the real servers
the service may use: a PostgreSQL (the pgserver wheel's binaries) and an S3-compatible object store (moto's server),
each on 127.0.0.1 and a free port."""

from __future__ import annotations

import inspect
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support.ray_head import ACTIVE, ray_head_address
from support.service_helpers import SERVICE_KEYS, inprocess_settings, service_env

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
# Every Ray of the suite (the processes' own, the services', the clusters'), three or four alive at a time for 15
# minutes: Ray's log monitor globs the session's log directory ten times a second until it holds 1,000 files (every
# worker process of a run leaves two): 4 % of a core once 60 actors have come and gone, 2 % when it looks only twice a
# second (what 0 does).
os.environ.setdefault("RAY_LOG_MONITOR_MANY_FILES_THRESHOLD", "0")
# No process of the suite may ask a cloud's instance-metadata address for credentials (it is no test host): a process
# without S3 credentials then fails at once instead of calling 169.254.169.254.
os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")


def _local_ray():
    """The session's small local Ray, joined (again, after a cluster module left it)."""
    import ray

    if ray.is_initialized() and ACTIVE["cluster"] is None:
        return ray
    _stop_site_cluster()
    ray.init(address=ray_head_address(), log_to_driver=False, configure_logging=False)
    return ray


@pytest.fixture
def ray_session():
    """The local Ray (2 CPUs) for tests that run on Ray."""
    return _local_ray()


@pytest.fixture(autouse=True)
def _join_local_ray(request):
    """A test marked `ray` that is not on a cluster runs joined to the session's local Ray: an executor="ray" run
    in its body would otherwise start a private Ray in this process (`ensure_ray`)."""
    if request.node.get_closest_marker("ray") and "site_cluster" not in request.fixturenames:
        _local_ray()


@dataclass
class SiteCluster:
    """A Ray cluster on this machine: `cluster` (ray.cluster_utils.Cluster), its address, and the node of each site."""

    cluster: Any
    address: str
    nodes: dict[str, Any]

    def add_site_node(self, site: str, num_cpus: int = 1, env: dict[str, str] | None = None) -> Any:
        """A node labelled as `site`; `env` is its own environment (a site's own credentials for its store)."""
        node = self.cluster.add_node(
            num_cpus=num_cpus, labels={"raysampler.io/site": site}, object_store_memory=80 * 2**20, env_vars=env
        )
        self.nodes[site] = node
        return node


#: the modules on the multi-node cluster: they share one (`site_cluster`), so `--dist loadfile` runs them as one unit
#: in one process, one after the other (`pytest_xdist_make_scheduler`), and so does the order of a serial run
#: (HEAVY_MODULES); a cluster's start is ~10 s alone, ~20 s in the suite
CLUSTER_MODULES = ("tests/runtime/test_sites.py", "tests/service/test_sites_service.py")


def _start_site_cluster() -> SiteCluster:
    import ray
    from ray.cluster_utils import Cluster

    if ray.is_initialized():
        ray.shutdown()  # leaves the local Ray (its own process) as it is
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 0, "object_store_memory": 80 * 2**20, "include_dashboard": False},
    )
    handle = SiteCluster(cluster, cluster.address, {})
    for site in "abc":
        handle.add_site_node(site)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)
    ACTIVE["cluster"], ACTIVE["sites"] = cluster, handle
    return handle


def _stop_site_cluster() -> None:
    import ray

    if ACTIVE["cluster"] is not None:
        if ray.is_initialized():
            ray.shutdown()
        ACTIVE["cluster"].shutdown()
        ACTIVE["cluster"] = ACTIVE["sites"] = None


@pytest.fixture(scope="module")
def site_cluster():
    """Head (0 CPUs) plus three 1-CPU nodes labelled raysampler.io/site = a, b, c; the driver is connected to it.
    One cluster serves the modules that follow one another on it (CLUSTER_MODULES): each leaves it with the nodes a,
    b and c it found; it stops once the next test does not use it (`pytest_runtest_teardown`). The session's local
    Ray is left meanwhile and joined again by the next test that asks for it."""
    return ACTIVE["sites"] if ACTIVE["sites"] is not None else _start_site_cluster()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """Stop the multi-node cluster after the last of the tests in a row that use it (an idle cluster's five Ray
    processes cost CPU the other tests need)."""
    yield
    if ACTIVE["cluster"] is not None and (nextitem is None or "site_cluster" not in nextitem.fixturenames):
        _stop_site_cluster()


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: no error where the plugin is off (-p no:xdist)
def pytest_xdist_make_scheduler(config, log):
    """`--dist loadfile`, with the CLUSTER_MODULES as one unit (so they share one cluster); None for other modes."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class _Scheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return "site_cluster" if path in CLUSTER_MODULES else path

    return _Scheduling(config, log)


def pytest_configure(config: pytest.Config) -> None:
    """Compile the project's modules to bytecode once, before the test processes start. Where the environment sets
    PYTHONDONTWRITEBYTECODE (this machine and its CI do), no process writes a .pyc, so every subprocess, server and Ray
    worker of the suite compiled raysampler from source again (~0.5 s of CPU each); a .pyc written here is read by
    all of them (the flag stops writing, not reading)."""
    if hasattr(config, "workerinput"):  # an xdist worker: the controller has done it
        return
    import compileall

    root = Path(__file__).resolve().parents[1]
    for package in ("raysampler", "api"):
        compileall.compile_dir(root / package, quiet=1)


def pytest_sessionfinish(session, exitstatus):
    import sys

    ray = sys.modules.get("ray")
    _stop_site_cluster()
    if ray is not None and ray.is_initialized():
        ray.shutdown()
    if ACTIVE["head"] is not None:
        ACTIVE["head"].stop()


# ---- real servers the service can use: PostgreSQL and an S3-compatible store, started on 127.0.0.1


@pytest.fixture(scope="session")
def postgres():
    """A PostgreSQL server for the session (`servers.Postgres`): `postgres.new_database()` gives a fresh database's
    URL."""
    from support.servers import Postgres

    server = Postgres.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def s3():
    """An S3-compatible server for the session (`servers.S3`): moto's server mode on 127.0.0.1."""
    from support.servers import S3

    server = S3.start()
    yield server
    server.stop()


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


@pytest.fixture(scope="module")
def local_service(tmp_path_factory):
    """A `raysampler serve` of the module's own (executor "local", no Ray; tenant alice), for tests that cancel,
    resume or time runs where no other module's runs share the server."""
    from raysampler.service.local import LocalService

    root = tmp_path_factory.mktemp("local-service")
    env = service_env(tempfile.mkdtemp(prefix="rs-local-")) | {"RAYSAMPLER_EXECUTOR": "local"}
    with LocalService(root / "data", keys={"alice": SERVICE_KEYS["alice"]}, env=env, log=root / "server.log") as svc:
        yield svc


#: The record stores the API suite runs against: the embedded SQLite and a real PostgreSQL.
DATABASES = ("sqlite", "postgresql")


@pytest.fixture(scope="session", params=DATABASES)
def app_client(request, tmp_path_factory):
    """The ASGI app in-process (lifespan run: store, run manager with executor "local") behind a TestClient, once
    with SQLite and once with PostgreSQL as its record store (every test using it runs on both)."""
    import warnings

    with warnings.catch_warnings():  # Starlette would rather its test client ran on httpx2
        warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient`")
        from fastapi.testclient import TestClient

    from raysampler.api import create_app

    over = {}
    if request.param == "postgresql":
        over["database_url"] = request.getfixturevalue("postgres").new_database()
    settings = inprocess_settings(tmp_path_factory.mktemp("app") / "data", **over)
    with TestClient(create_app(settings)) as client:
        yield client


# ---- markers (registered in pyproject.toml; the rules: tests/support/markers.py and docs/development.md)

_RAY_CALL = re.compile(r"""executor\s*=\s*["']ray["']""")
_SLOW_MARKS = ("ray", "cluster", "ui")


def _calls_ray(item: pytest.Item) -> bool:
    """The test's own body runs something with executor="ray" (it may get Ray through request.getfixturevalue)."""
    try:
        return bool(_RAY_CALL.search(inspect.getsource(item.function)))  # type: ignore[attr-defined]
    except (AttributeError, OSError, TypeError):
        return False


#: the modules that take longest (seconds of one process, measured with --durations), longest first
HEAVY_MODULES = (
    *CLUSTER_MODULES,  # one unit of work (pytest_xdist_make_scheduler), 240 s
    "tests/api/ui/test_dashboard.py",
    "tests/algorithms/test_defaults.py",
    "tests/models/test_group_references.py",
    "tests/service/test_resume.py",
    "tests/api/test_openapi_contract.py",
    "tests/runtime/test_runtime.py",
    "tests/cli/test_cli.py",
    "tests/test_imports.py",
    "tests/models/test_group_effects.py",
    "tests/runtime/test_embedded_ray.py",
)


def _rel(root: Path, item: pytest.Item) -> str:
    return Path(item.path).resolve().relative_to(root).as_posix() if item.path.is_relative_to(root) else ""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test ray / cluster / service / ui / deploy from its fixtures and folder, and slow where it starts
    Ray, a cluster, a server or a browser, or where tests/support/markers.py lists it."""
    from support.markers import is_listed_slow

    root = config.rootpath
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        params = getattr(getattr(item, "callspec", None), "params", {})
        rel = Path(item.path).resolve().relative_to(root).as_posix() if item.path.is_relative_to(root) else ""
        own = {m.name for m in item.iter_markers()}
        marks: set[str] = set()
        if "site_cluster" in names:
            marks |= {"cluster", "ray"}
        if "ray_session" in names or params.get("executor") == "ray" or _calls_ray(item):
            marks.add("ray")
        if names & {"service", "app_client"}:
            marks.add("service")
        servers = {"postgres", "s3"}  # a database or object-store server (a fixture, or a parametrization naming one)
        if names & servers or {"postgresql", "s3"} & {str(v) for v in params.values()}:
            marks.add("slow")
        if rel.startswith("tests/api/ui/"):
            marks.add("ui")
        if rel.startswith("tests/deploy/"):
            marks.add("deploy")
        if (marks | own) & set(_SLOW_MARKS) or "service" in names:  # a Ray, a cluster, a browser, a server process
            marks.add("slow")
        if is_listed_slow(rel, item.name, getattr(item, "originalname", item.name)):
            marks.add("slow")
        for name in sorted(marks - own):
            item.add_marker(name)
    # the longest modules first (measured), so that the two processes of `--dist loadfile` finish together
    heavy = {path: rank for rank, path in enumerate(HEAVY_MODULES)}
    items.sort(key=lambda it: heavy.get(_rel(root, it), len(heavy)))
