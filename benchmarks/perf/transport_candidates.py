"""The worker side of benchmarks/perf/transports.py: benchmark-only transports and the worker actor class.

A module of its own (not the script) so that Ray workers import it by name: the ctypes handles the POSIX-semaphore
and futex wake-ups need cannot be pickled by value. Nothing here is part of raysampler.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import pickle
import platform
import secrets
import socket
import struct
import tempfile
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from raysampler.algorithms.dglmc import Message, Reply
from raysampler.runtime.channel import ChannelServer, _recv_exact, answer, unwrap
from raysampler.runtime.shm_channel import ShmChannelServer


def echo(items: list[Any]) -> tuple[list[Any], list[float]]:
    """A worker's no-op step over its shards, shaped like ShardHost.step's (replies, seconds) return."""
    replies = [Reply(z=m.phi.copy(), accept=np.ones(m.phi.shape[0])) if isinstance(m, Message) else m for m in items]
    return replies, [0.0] * len(items)


# ---------------------------------------------------------------------------- benchmark-only transports

_LENGTH = struct.Struct("!Q")


def send_obj(sock: socket.socket, obj: Any) -> None:
    """A length-prefixed pickle (the tcp channel's protocol before binary frames)."""
    payload = pickle.dumps(obj, protocol=5)
    sock.sendall(_LENGTH.pack(len(payload)) + payload)


def recv_obj(sock: socket.socket) -> Any:
    (size,) = _LENGTH.unpack(_recv_exact(sock, _LENGTH.size))
    return pickle.loads(_recv_exact(sock, size))


class UnixServer:
    """The tcp channel's protocol (length-prefixed pickles) over an abstract Unix socket."""

    def __init__(self, handler: Callable[[Any], Any]) -> None:
        self.handler = handler
        self.address = f"\0rs-bench-unix-{secrets.token_hex(8)}"
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.address)
        self.listener.listen(1)
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        conn, _ = self.listener.accept()
        self.listener.close()
        with conn:
            while True:
                try:
                    request = recv_obj(conn)
                except (ConnectionError, OSError):
                    return
                send_obj(conn, answer(self.handler, request))


class UnixClient:
    def __init__(self, address: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(address)

    def send(self, request: Any) -> None:
        send_obj(self.sock, request)

    def receive(self) -> Any:
        return unwrap(recv_obj(self.sock))

    def close(self) -> None:
        self.sock.close()


class ZmqServer:
    """pyzmq REP socket served from a thread; `endpoint` is ipc://@name (abstract) or tcp://ip:* ."""

    def __init__(self, handler: Callable[[Any], Any], endpoint: str) -> None:
        import zmq

        self.handler = handler
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.REP)
        self.sock.bind(endpoint)
        self.address = self.sock.getsockopt_string(zmq.LAST_ENDPOINT)
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            msg = self.sock.recv()
            if msg == b"close":
                self.sock.send(b"")
                return
            self.sock.send(pickle.dumps(answer(self.handler, pickle.loads(msg)), protocol=5))


class ZmqClient:
    def __init__(self, address: str) -> None:
        import zmq

        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.REQ)
        self.sock.connect(address)

    def send(self, request: Any) -> None:
        self.sock.send(pickle.dumps(request, protocol=5))

    def receive(self) -> Any:
        return unwrap(pickle.loads(self.sock.recv()))

    def close(self) -> None:
        self.sock.send(b"close")
        self.sock.recv()
        self.sock.close(linger=0)
        self.ctx.term()


_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
_libc.sem_open.restype = ctypes.c_void_p
_libc.sem_post.argtypes = [ctypes.c_void_p]
_libc.sem_wait.argtypes = [ctypes.c_void_p]
_libc.sem_close.argtypes = [ctypes.c_void_p]
_libc.syscall.restype = ctypes.c_long
_SYS_FUTEX = {"x86_64": 202, "aarch64": 98}.get(platform.machine())
FUTEX_AVAILABLE = _SYS_FUTEX is not None
_FUTEX_WAIT, _FUTEX_WAKE = 0, 1
_REGION = 1 << 16  # bytes per direction in the benchmark-only segments
_SLOT = struct.Struct("<IIQ")  # futex word / sequence number, padding, message length
_STOP = (1 << 64) - 1


class _Bell:
    """A blocking wake-up between two processes: `ring` once per message, `wait` returns once per ring."""

    def ring(self) -> None: ...
    def wait(self) -> None: ...
    def close(self, unlink: bool) -> None: ...


class FifoBell(_Bell):
    def __init__(self, path: str) -> None:
        self.path = path
        self.fd = os.open(path, os.O_RDWR)  # O_RDWR: opening never blocks, and EOF never comes

    def ring(self) -> None:
        os.write(self.fd, b"\0")

    def wait(self) -> None:
        os.read(self.fd, 1)

    def close(self, unlink: bool) -> None:
        os.close(self.fd)
        if unlink:
            os.unlink(self.path)


class SemBell(_Bell):
    def __init__(self, name: str, create: bool) -> None:
        self.name = name.encode()
        flags = os.O_CREAT | os.O_EXCL if create else 0
        self.sem = _libc.sem_open(self.name, flags, 0o600, 0) if create else _libc.sem_open(self.name, 0)
        if not self.sem or self.sem == ctypes.c_void_p(-1).value:
            raise OSError(ctypes.get_errno(), "sem_open failed")

    def ring(self) -> None:
        _libc.sem_post(self.sem)

    def wait(self) -> None:
        while _libc.sem_wait(self.sem) != 0:  # EINTR
            pass

    def close(self, unlink: bool) -> None:
        _libc.sem_close(self.sem)
        if unlink:
            _libc.sem_unlink(self.name)


class FutexBell(_Bell):
    """The region's 32-bit sequence word itself: the writer bumps it and wakes; the reader waits while unchanged."""

    def __init__(self, word: Any) -> None:
        self.word = word
        self.addr = ctypes.c_void_p(ctypes.addressof(word))
        self.seen = word.value

    def ring(self) -> None:
        self.word.value = (self.word.value + 1) & 0xFFFFFFFF
        _libc.syscall(_SYS_FUTEX, self.addr, _FUTEX_WAKE, 1, None, None, 0)

    def wait(self) -> None:
        while self.word.value == self.seen:
            _libc.syscall(_SYS_FUTEX, self.addr, _FUTEX_WAIT, ctypes.c_uint32(self.seen), None, None, 0)
        self.seen = self.word.value

    def close(self, unlink: bool) -> None:
        self.word = None


class _ShmEnd:
    """One side of a benchmark-only shared-memory channel: a multiprocessing.shared_memory segment with a request
    and a reply region, and a bell per direction."""

    def __init__(self, shm: Any, out_off: int, in_off: int, out_bell: _Bell, in_bell: _Bell) -> None:
        self.shm, self.out_off, self.in_off = shm, out_off, in_off
        self.out_bell, self.in_bell = out_bell, in_bell

    def send_bytes(self, payload: bytes, length: int | None = None) -> None:
        buf, off = self.shm.buf, self.out_off
        buf[off + _SLOT.size : off + _SLOT.size + len(payload)] = payload
        struct.pack_into("<Q", buf, off + 8, len(payload) if length is None else length)
        self.out_bell.ring()

    def receive_bytes(self) -> bytes | None:
        self.in_bell.wait()
        buf, off = self.shm.buf, self.in_off
        (n,) = struct.unpack_from("<Q", buf, off + 8)
        return None if n == _STOP else bytes(buf[off + _SLOT.size : off + _SLOT.size + n])


def _bells(kind: str, tag: str, shm: Any, create: bool) -> tuple[_Bell, _Bell]:
    """(request bell, reply bell) of a benchmark-only channel, created by the server, opened by the client."""
    if kind == "fifo":
        req, rep = f"{tag}-req", f"{tag}-rep"
        if create:
            os.mkfifo(req, 0o600)
            os.mkfifo(rep, 0o600)
        return FifoBell(req), FifoBell(rep)
    if kind == "sem":
        return SemBell(f"/{os.path.basename(tag)}-req", create), SemBell(f"/{os.path.basename(tag)}-rep", create)
    words = [ctypes.c_uint32.from_buffer(shm.buf, off) for off in (0, _REGION)]
    return FutexBell(words[0]), FutexBell(words[1])


class BenchShmServer:
    """Server of a benchmark-only shared-memory channel (no handshake or liveness checks: a floor, not a product)."""

    def __init__(self, handler: Callable[[Any], Any], kind: str, raw: bool = False) -> None:
        from multiprocessing import shared_memory

        self.handler, self.kind, self.raw = handler, kind, raw
        self.shm = shared_memory.SharedMemory(create=True, size=2 * _REGION)
        self.tag = os.path.join(tempfile.mkdtemp(prefix="rs-bench-"), f"rs-bench-{secrets.token_hex(6)}")
        req, rep = _bells(kind, self.tag, self.shm, create=True)
        self.end = _ShmEnd(self.shm, _REGION, 0, rep, req)
        self.address = (self.shm.name, self.tag, kind)
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            msg = self.end.receive_bytes()
            if msg is None:
                break
            if self.raw:  # the wake-up floor: bytes echoed, no pickling, no handler
                self.end.send_bytes(msg)
            else:
                self.end.send_bytes(pickle.dumps(answer(self.handler, pickle.loads(msg)), protocol=5))
        self.end.in_bell.close(unlink=True)
        self.end.out_bell.close(unlink=True)
        os.rmdir(os.path.dirname(self.tag))
        self.end = None
        self.shm.close()
        self.shm.unlink()


class BenchShmClient:
    """Client of BenchShmServer; `raw`: every request is the same 8 bytes, and the reply is returned as bytes."""

    def __init__(self, address: tuple[str, str, str], raw: bool = False) -> None:
        from multiprocessing import resource_tracker, shared_memory

        name, tag, kind = address
        self.shm = shared_memory.SharedMemory(name=name)
        resource_tracker.unregister(self.shm._name, "shared_memory")  # the server owns (and unlinks) it
        req, rep = _bells(kind, tag, self.shm, create=False)
        self.end = _ShmEnd(self.shm, 0, _REGION, req, rep)
        self.raw = raw

    def send(self, request: Any) -> None:
        self.end.send_bytes(b"8 bytes." if self.raw else pickle.dumps(request, protocol=5))

    def receive(self) -> Any:
        msg = self.end.receive_bytes()
        return msg if self.raw else unwrap(pickle.loads(msg))

    def close(self) -> None:
        self.end.send_bytes(b"", length=_STOP)
        self.end.in_bell.close(unlink=False)
        self.end.out_bell.close(unlink=False)
        self.end = None
        self.shm.close()


# ------------------------------------------------------------------------------------- worker actor


class BenchWorker:
    """A worker process: serves `echo` over any candidate transport from background threads, or as an actor method."""

    def __init__(self) -> None:
        self.servers: list[Any] = []

    def pid(self) -> int:
        return os.getpid()

    def step(self, items: list[Any]) -> tuple[list[Any], list[float]]:
        return echo(items)

    def serve(self, kind: str, spin_s: float = 0.0) -> tuple[Any, bytes | None]:
        """Start a server for transport `kind`; (address, token) for the client."""
        import ray

        if kind == "tcp socket":
            server = ChannelServer(echo, ray.util.get_node_ip_address())
        elif kind == "unix socket":
            server = UnixServer(echo)
        elif kind == "zmq ipc":
            server = ZmqServer(echo, f"ipc://@rs-bench-zmq-{secrets.token_hex(8)}")
        elif kind == "zmq tcp":
            server = ZmqServer(echo, f"tcp://{ray.util.get_node_ip_address()}:*")
        elif kind == "shm+eventfd":
            server = ShmChannelServer(echo, "bench", spin_s=spin_s)
        elif kind in ("shm+fifo", "shm+sem", "shm+futex"):
            server = BenchShmServer(echo, kind.split("+")[1])
        elif kind == "raw fifo":
            server = BenchShmServer(echo, "fifo", raw=True)
        else:
            raise ValueError(f"unknown transport kind {kind!r}")
        self.servers.append(server)
        return server.address, getattr(server, "token", None)
