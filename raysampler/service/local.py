"""Start the service as a subprocess on 127.0.0.1 and a free port (the demo, the tests and the benchmarks use it)."""

from __future__ import annotations

import os
import secrets
import signal
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalService:
    """`raysampler serve` in a subprocess. `keys` maps tenant → key (default: one generated key for 'default');
    `args` are extra `serve` flags (e.g. ["--ray-address", addr]); `launcher` replaces the command that runs the
    CLI (default: this Python with `-m raysampler.cli`). With --ssl-certfile among `args` the service speaks HTTPS
    (`url` says https) and `ca_file` is the CA bundle that verifies it (default: the system's)."""

    def __init__(
        self,
        data_dir: str | os.PathLike,
        keys: dict[str, str] | None = None,
        port: int | None = None,
        env: dict[str, str] | None = None,
        log: str | os.PathLike | None = None,
        args: list[str] | None = None,
        launcher: list[str] | None = None,
        ca_file: str | os.PathLike | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.keys = keys or {"default": secrets.token_urlsafe(24)}
        self.port = port or free_port()
        self.args = list(args or [])
        self.url = f"{'https' if '--ssl-certfile' in self.args else 'http'}://127.0.0.1:{self.port}"
        self.verify: ssl.SSLContext | bool = ssl.create_default_context(cafile=os.fspath(ca_file)) if ca_file else True
        self.extra_env = env or {}
        self.log_path = Path(log) if log else self.data_dir.with_name(self.data_dir.name + ".log")
        self.launcher = list(launcher or [sys.executable, "-m", "raysampler.cli"])
        self.proc: subprocess.Popen | None = None
        self._log: IO | None = None

    @property
    def api_key(self) -> str:
        return next(iter(self.keys.values()))

    def start(self, timeout_s: float = 300.0) -> LocalService:
        """Spawn the server and wait until /v1/health answers (raises RuntimeError with the log's tail if not)."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        env = os.environ.copy() | {"RAYSAMPLER_API_KEYS": ",".join(f"{t}:{k}" for t, k in self.keys.items())}
        env |= self.extra_env
        self._log = open(self.log_path, "ab")  # noqa: SIM115 (held open for the child process's lifetime)
        self.proc = subprocess.Popen(
            [
                *self.launcher,
                "serve",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--data-dir",
                str(self.data_dir),
                *self.args,
            ],
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # its own process group: kill() takes Ray's processes down with it
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the service exited with code {self.proc.returncode}:\n{self.log_tail()}")
            try:
                if httpx.get(self.url + "/v1/health", timeout=2.0, verify=self.verify).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        self.kill()
        raise RuntimeError(f"the service did not answer within {timeout_s} s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, timeout_s: float = 60.0) -> None:
        """Graceful stop (SIGINT: runs in progress end FAILED with their draws kept)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._close_log()

    def kill(self) -> None:
        """Hard stop (SIGKILL to the server's process group, Ray included), as a crash would."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()
        self._close_log()

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> LocalService:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
