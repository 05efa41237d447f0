"""A direct TCP channel between the coordinator and one worker actor: the round loop's fast path.

A plain Ray actor call costs many times a socket round trip per round (benchmarks/perf/rounds.py,
benchmarks/perf/transports.py; docs/performance.md, "Measurements behind choices in the code").
Ray still places the actors, loads their data and owns their
lifetime; once set up, each round's messages travel as fixed-layout binary frames (frames.py: a header, the layout's
definition the first time, then the raw bytes of the arrays; no pickling per message) over a socket the worker
serves from a background thread. It works across nodes (the worker binds its node's address); if a
connection cannot be made the pool falls back to plain actor calls. Workers on the coordinator's own node use the
faster shared-memory channel (shm_channel.py) instead. A worker's failure comes back as its `Failure` record.
"""

from __future__ import annotations

import hmac
import secrets
import socket
import threading
import traceback
from collections.abc import Callable
from typing import Any, NamedTuple

from ..errors import Failure, FailureKind, WorkerFailed
from .frames import HEADER, FrameReader, FrameWriter

_CLOSE = b"close"


class SocketFrames:
    """Frames over one connected stream socket: a writer and a reader of its own."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.writer, self.reader = FrameWriter(), FrameReader()
        self._header: tuple[int, int, int, int] | None = None  # the next frame's, read by `wait`

    def send(self, obj: Any) -> None:
        layout, payload = self.writer.encode(obj)
        self.send_frame(self.writer.head(self, layout, len(payload)), payload)

    def send_frame(self, head: bytes, payload: bytes | bytearray) -> None:
        """Send a frame encoded by any writer (its head made for this channel)."""
        view = memoryview(payload)
        sent = self.sock.sendmsg([head, view])
        total = len(head) + len(view)
        if sent < total:  # rare: the socket's buffer was full
            self.sock.sendall((head + bytes(view))[sent:])

    def wait(self) -> None:
        """Until the next frame starts arriving (its header read; `receive` reads the rest)."""
        if self._header is None:
            self._header = HEADER.unpack(_recv_exact(self.sock, HEADER.size))

    def receive(self) -> Any:
        self.wait()
        assert self._header is not None
        kind, ident, def_len, size = self._header
        self._header = None
        definition = _recv_exact(self.sock, def_len) if def_len else b""
        return self.reader.value(kind, ident, definition, _recv_exact(self.sock, size))


def _recv_exact(sock: socket.socket, n: int) -> bytearray:
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise ConnectionError("the channel closed while a message was expected (worker or coordinator died?)")
        got += k
    return buf


class Reply(NamedTuple):
    """What a channel server sends back for one request: the handler's value, or the `Failure` it raised."""

    ok: bool
    value: Any  # the handler's return value when ok, else a Failure


def answer(handler: Callable[[Any], Any], request: Any) -> Reply:
    """Run `handler` on one request; a failure becomes a reply carrying its `Failure` record (any other exception,
    picklable or not, becomes a WORKER_ERROR record of plain strings) instead of escaping."""
    try:
        return Reply(True, handler(request))
    except WorkerFailed as exc:
        return Reply(False, exc.failure)
    except BaseException as exc:
        return Reply(
            False, Failure(FailureKind.WORKER_ERROR, f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc())
        )


def unwrap(reply: Reply) -> Any:
    """The handler's value from a reply, or WorkerFailed carrying the worker-side failure."""
    if not reply.ok:
        raise WorkerFailed(reply.value)
    return reply.value


class ChannelServer:
    """Worker side: listen on (host, free port), accept the coordinator, answer each request with `handler`.

    Only a client that first sends the secret token (handed to the coordinator through Ray) is served.
    A handler failure is sent back as its `Failure` record (any other exception becomes one) and raised on the
    coordinator side as WorkerFailed.
    """

    def __init__(self, handler: Callable[[Any], Any], host: str) -> None:
        self.handler = handler
        self.token = secrets.token_bytes(16)
        self.listener = socket.create_server((host, 0))
        self.address = (host, self.listener.getsockname()[1])
        self.thread = threading.Thread(target=self._serve, name="raysampler-channel", daemon=True)
        self.thread.start()

    def _accept(self) -> socket.socket:
        while True:
            conn, _ = self.listener.accept()
            conn.settimeout(10.0)
            try:
                if hmac.compare_digest(bytes(_recv_exact(conn, len(self.token))), self.token):
                    conn.settimeout(None)
                    self.listener.close()
                    return conn
            except (OSError, ConnectionError):
                pass
            conn.close()

    def _serve(self) -> None:
        conn = self._accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        frames = SocketFrames(conn)
        with conn:
            while True:
                try:
                    request = frames.receive()
                except (ConnectionError, OSError):
                    return
                if isinstance(request, bytes) and request == _CLOSE:
                    return
                frames.send(answer(self.handler, request))


class ChannelClient:
    """Coordinator side of one worker's channel."""

    def __init__(
        self, address: tuple[str, int], token: bytes, timeout_s: float = 10.0, deadline_s: float | None = None
    ) -> None:
        self.sock = socket.create_connection(address, timeout=timeout_s)
        self.sock.sendall(token)
        self.sock.settimeout(deadline_s)  # a reply (or a send) waited for longer raises TimeoutError
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.frames = SocketFrames(self.sock)

    def send(self, request: Any) -> None:
        self.frames.send(request)

    def send_frame(self, head: bytes, payload: bytes | bytearray) -> None:
        """Send a request another writer encoded (a round's message, encoded once for every worker)."""
        self.frames.send_frame(head, payload)

    def wait(self) -> None:
        """Until the worker's reply starts arriving."""
        self.frames.wait()

    def receive(self) -> Any:
        return unwrap(self.frames.receive())

    def close(self) -> None:
        try:
            self.frames.send(_CLOSE)
        except OSError:
            pass
        self.sock.close()
