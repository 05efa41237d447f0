"""Real servers for the tests, on 127.0.0.1 and a free port: PostgreSQL (the binaries of the `pgserver` wheel, run as
an unprivileged user when the tests run as root, as PostgreSQL requires) and an S3-compatible object store (moto's
server mode), and a small local Ray in a process of its own that the test process and the services join. Each starts
in a couple of seconds and is stopped at the end of the session."""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

from raysampler.service.local import free_port


@dataclass
class Postgres:
    """A PostgreSQL server owned by this process: `url(database)`, `new_database()`."""

    proc: subprocess.Popen
    port: int
    root: str

    @classmethod
    def start(cls, timeout_s: float = 60.0) -> Postgres:
        import warnings

        import psycopg

        with warnings.catch_warnings():  # pgserver's import asks platformdirs for a runtime dir it never uses here
            warnings.simplefilter("ignore")
            from pgserver._commands import POSTGRES_BIN_PATH

        bin_dir = POSTGRES_BIN_PATH
        root = tempfile.mkdtemp(prefix="rs-pg-")
        user = None
        if os.geteuid() == 0:  # PostgreSQL refuses to run as root: the wheel's helper makes a system user for it
            import pwd

            from pgserver.utils import ensure_folder_permissions, ensure_prefix_permissions, ensure_user_exists

            user = "pgserver"
            ensure_user_exists(user)
            ensure_prefix_permissions(bin_dir)
            ensure_folder_permissions(bin_dir, stat.S_IRGRP | stat.S_IROTH | stat.S_IXGRP | stat.S_IXOTH)
            ensure_folder_permissions(bin_dir.parent / "lib", stat.S_IRGRP | stat.S_IROTH)
            pw = pwd.getpwnam(user)
            os.chmod(root, 0o700)
            os.chown(root, pw.pw_uid, pw.pw_gid)
        data = os.path.join(root, "data")
        subprocess.run(
            [str(bin_dir / "initdb"), "-D", data, "--auth=trust", "-U", "postgres", "--encoding=utf8", "--no-sync"],
            check=True,
            user=user,
            capture_output=True,
            timeout=120,
        )
        port = free_port()
        log = open(os.path.join(root, "server.log"), "wb")  # noqa: SIM115 (the server's own log, kept open)
        proc = subprocess.Popen(
            [str(bin_dir / "postgres"), "-D", data, "-h", "127.0.0.1", "-p", str(port), "-k", ""]
            + ["-c", "fsync=off", "-c", "max_connections=200"],
            user=user,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        server = cls(proc, port, root)
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                psycopg.connect(server.url("postgres"), connect_timeout=2).close()
                return server
            except psycopg.OperationalError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    with open(os.path.join(root, "server.log")) as f:
                        why = f.read()
                    server.stop()
                    raise RuntimeError(f"PostgreSQL did not start: {why}") from None
                time.sleep(0.1)

    def url(self, database: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def new_database(self) -> str:
        """The URL of a new, empty database."""
        import psycopg

        name = "t_" + secrets.token_hex(6)
        with psycopg.connect(self.url("postgres"), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return self.url(name)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # "fast" shutdown: ends open sessions
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.root, ignore_errors=True)


@dataclass
class S3:
    """moto's S3 server: `endpoint`, `client()` (boto3, test credentials), `new_bucket()`, and `env(...)`: the
    standard AWS variables a process needs to reach it with the given credentials."""

    server: Any
    endpoint: str
    buckets: list[str] = field(default_factory=list)

    ACCESS_KEY = "test-access-key"
    SECRET_KEY = "test-secret-key"
    REGION = "us-east-1"

    @classmethod
    def start(cls) -> S3:
        from moto.server import ThreadedMotoServer

        server = ThreadedMotoServer(ip_address="127.0.0.1", port=free_port(), verbose=False)
        server.start()
        host, port = server.get_host_and_port()
        return cls(server, f"http://{host}:{port}")

    def env(self, access_key: str = ACCESS_KEY, secret_key: str = SECRET_KEY) -> dict[str, str]:
        return {
            "AWS_ACCESS_KEY_ID": access_key,
            "AWS_SECRET_ACCESS_KEY": secret_key,
            "AWS_REGION": self.REGION,
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_EC2_METADATA_DISABLED": "true",
        }

    def client(self) -> Any:
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name=self.REGION,
            aws_access_key_id=self.ACCESS_KEY,
            aws_secret_access_key=self.SECRET_KEY,
        )

    def new_bucket(self) -> str:
        name = "rs-" + secrets.token_hex(6)
        self.client().create_bucket(Bucket=name)
        return name

    def stop(self) -> None:
        self.server.stop()


# The head's process: start a local Ray, say its address, hold it until stdin closes (the session's end, or the test
# process's death), then stop it.
_RAY_HEAD = """
import sys, ray
ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False,
         object_store_memory=100 * 2**20, _temp_dir=sys.argv[1])
print(ray.get_runtime_context().gcs_address, flush=True)
sys.stdin.read()
ray.shutdown()
"""


@dataclass
class RayHead:
    """A local Ray (2 CPUs, 100 MB object store, no dashboard) held by a process of its own: `address` is what a
    driver joins. The test process joins it, and so do the services the tests start (`--ray-address`): one Ray per
    test process instead of one per service (a Ray of its own costs a service ~6.5 s more CPU to start), and it
    outlives the test process's visits to other clusters."""

    proc: subprocess.Popen
    address: str

    @classmethod
    def start(cls, temp_dir: str, timeout_s: float = 120.0) -> RayHead:
        proc = subprocess.Popen(
            [sys.executable, "-c", _RAY_HEAD, temp_dir],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            start_new_session=True,
        )
        assert proc.stdout is not None
        line = proc.stdout.readline().decode().strip()  # blocks until Ray has started (or the process died)
        if not line:
            proc.kill()
            raise RuntimeError(f"the tests' Ray head did not start (exit status {proc.wait(timeout_s)})")
        return cls(proc, line)

    def stop(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()  # the head stops its Ray and exits
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
