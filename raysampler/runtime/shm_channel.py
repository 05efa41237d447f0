"""A same-node channel between the coordinator and one worker actor: shared memory carries the messages, eventfds
wake the reader, a Unix socket hands both over and reports a dead peer.

Same interface as the TCP channel (`ChannelServer` / `ChannelClient`), for a worker on the coordinator's node. Each
direction has two memfds that both processes map (message s goes to the one numbered s mod 2, so that a pipelined
round can have a second message in flight while the first is still being read): a header (sequence number, length),
then the message as a binary frame (frames.py: fixed layout, no pickling per message), written with one copy and read
with one, whatever its size. After writing, the writer rings that direction's eventfd, on which the reader sleeps in a
blocking read. A watchdog thread on each side waits in poll() on the socket and on a pidfd of the peer's process; when
the peer ends (killed or closed: end-of-file on the socket, or the pidfd turning readable) it rings the reader's own
eventfd, so a blocked reader raises ConnectionError at once. Optionally the reader first watches the sequence number
for `spin_s` seconds, yielding its core between looks (sched_yield), so that a message arriving within that time
costs no sleep and wake-up while any other runnable process on the core still gets it (benchmarks/perf/hot_path.py
measures the run's default). No named segment ever exists: the memfds and eventfds are handed over the socket
(SCM_RIGHTS), and the kernel frees them when both processes have closed them, however the processes end. Linux only:
elsewhere the constructors raise OSError and the caller keeps the TCP channel.
"""

from __future__ import annotations

import hmac
import mmap
import os
import pickle
import platform
import secrets
import select
import socket
import struct
import threading
import time
from collections.abc import Callable
from typing import Any

from ..errors import Failure, FailureKind
from .channel import Reply, _recv_exact, answer, unwrap
from .frames import HEADER, FrameReader, FrameWriter

#: Bytes each direction's region starts with; it grows (doubling) when a message needs more.
INITIAL_BYTES = 1 << 16
#: Spinning reads a message without a system call in between, which relies on x86's in-order stores and loads;
#: elsewhere readers only block (the eventfd's kernel locking then orders the writer's stores before the reads).
SPIN_SAFE = platform.machine().lower() in ("x86_64", "amd64", "i386", "i686")
#: Default seconds a reader watches for a message before it blocks (runs choose theirs: `EngineSettings.shm_spin_us`).
DEFAULT_SPIN_S = 0.0
_HANDSHAKE_TIMEOUT_S = 10.0
_HEADER = struct.Struct("<QQ")  # sequence number of the last message written, its length in bytes
_U64 = struct.Struct("<Q")
_HELLO = b"raysampler-shm-2"


def supported() -> bool:
    """Whether this platform has what the channel needs (memfd, eventfd, descriptor passing, abstract Unix sockets)."""
    return (
        hasattr(os, "memfd_create")
        and hasattr(os, "eventfd")
        and hasattr(socket, "send_fds")
        and hasattr(socket, "AF_UNIX")
        and platform.system() == "Linux"
    )


def _require_support() -> None:
    if not supported():
        raise OSError("the shared-memory channel needs Linux (memfd, eventfd, abstract Unix sockets): use TCP")


class _Region:
    """One direction's shared memory: a memfd mapped by both processes, header then the message's frame."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.map = mmap.mmap(fd, os.fstat(fd).st_size)

    def seq(self) -> int:
        return _U64.unpack_from(self.map, 0)[0]

    def write(self, head: bytes, payload: bytes | bytearray, seq: int) -> None:
        """Store the frame (its head, then its payload), then its length, then the sequence number (a reader acts on
        the sequence number)."""
        start = _HEADER.size + len(head)
        end = start + len(payload)
        if end > len(self.map):
            size = max(end, 2 * len(self.map))
            size = -(-size // mmap.PAGESIZE) * mmap.PAGESIZE
            os.ftruncate(self.fd, size)
            self._remap(size)
        self.map[_HEADER.size : start] = head
        self.map[start:end] = payload
        _U64.pack_into(self.map, 8, end - _HEADER.size)
        _U64.pack_into(self.map, 0, seq)

    def read(self, reader: FrameReader) -> Any:
        """The current message, its payload copied once out of the shared memory (nothing returned refers to it)."""
        end = _HEADER.size + _U64.unpack_from(self.map, 8)[0]
        if end > len(self.map):  # the writer grew the memfd
            self._remap(os.fstat(self.fd).st_size)
        kind, ident, def_len, size = HEADER.unpack_from(self.map, _HEADER.size)
        start = _HEADER.size + HEADER.size
        with memoryview(self.map) as whole:
            definition = bytes(whole[start : start + def_len]) if def_len else b""
            payload = bytearray(whole[start + def_len : start + def_len + size])
        return reader.value(kind, ident, definition, payload)

    def _remap(self, size: int) -> None:
        self.map.close()
        self.map = mmap.mmap(self.fd, size)

    def close(self) -> None:
        self.map.close()
        os.close(self.fd)


class _Slots:
    """One direction's two regions: message s goes to region s mod 2, so that a second message may be written while
    the reader still has the first to read (a pipelined round keeps two in flight; never more)."""

    def __init__(self, fds: tuple[int, int]) -> None:
        self.regions = (_Region(fds[0]), _Region(fds[1]))

    def seq(self, want: int) -> int:
        """The sequence number in the region message `want` goes to."""
        return self.regions[want % 2].seq()

    def write(self, head: bytes, payload: bytes | bytearray, seq: int) -> None:
        self.regions[seq % 2].write(head, payload, seq)

    def read(self, seq: int, reader: FrameReader) -> Any:
        return self.regions[seq % 2].read(reader)

    def close(self) -> None:
        for region in self.regions:
            region.close()


class _Endpoint:
    """One side of an open channel: writes to `outbox` and rings `ring_fd`; reads `inbox`, sleeping on `wait_fd`.

    The reader sleeps in a plain blocking read of its eventfd (one system call per message). A watchdog thread,
    blocked in poll() on the socket and the peer's pidfd, rings that same eventfd when the peer ends, so the sleeping
    reader wakes up and raises ConnectionError instead of waiting for ever.
    """

    def __init__(
        self, sock: socket.socket, outbox: _Slots, inbox: _Slots, ring_fd: int, wait_fd: int, spin_s: float
    ) -> None:
        self.sock, self.outbox, self.inbox = sock, outbox, inbox
        self.ring_fd, self.wait_fd = ring_fd, wait_fd
        self.spin_s = spin_s if SPIN_SAFE else 0.0
        self.sent = self.seen = self.arrived = 0
        self.rung = 0  # rings read from the eventfd: every message up to this one is complete (each rings once)
        self.peer_gone: str | None = None  # why the peer is known to be gone, set by the watchdog
        self.peer_fd = _peer_pidfd(sock)
        self.writer, self.reader = FrameWriter(), FrameReader()
        self.closed = False
        self.watchdog = threading.Thread(target=self._watch, name="raysampler-shm-watchdog", daemon=True)
        self.watchdog.start()

    def send(self, obj: Any) -> None:
        layout, payload = self.writer.encode(obj)
        self.send_frame(self.writer.head(self, layout, len(payload)), payload)

    def send_frame(self, head: bytes, payload: bytes | bytearray) -> None:
        """Send a frame encoded by any writer (its head made for this channel)."""
        if self.closed:
            raise ConnectionError("the shared-memory channel is closed")
        if self.peer_gone:
            raise ConnectionError(self.peer_gone)
        self.sent += 1
        self.outbox.write(head, payload, self.sent)
        os.eventfd_write(self.ring_fd, 1)

    def wait(self) -> None:
        """Until the next message has arrived (`receive` then reads it); ConnectionError once the peer's process has
        ended or either side closed the channel."""
        want = self.seen + 1
        if self.arrived == want:
            return
        if SPIN_SAFE:
            self._wait_trusting_loads(want)
        else:
            self._wait_ordered(want)
        self.arrived = want

    def receive(self) -> Any:
        """The next message (waiting for it first, if `wait` did not)."""
        self.wait()
        self.seen = self.arrived
        return self.inbox.read(self.seen, self.reader)

    def _wait_trusting_loads(self, want: int) -> None:
        """x86: the writer's stores are seen in order, so a current sequence number means the message is complete."""
        inbox = self.inbox
        if inbox.seq(want) != want and self.spin_s > 0:
            deadline = time.perf_counter() + self.spin_s
            while inbox.seq(want) != want and time.perf_counter() < deadline:
                # cheap when nothing else wants the core; hands it over when something does (docs/performance.md,
                # "Measurements behind choices in the code")
                os.sched_yield()
        while inbox.seq(want) != want:  # a ring may be stale (its message was taken while spinning): sleep again
            self._sleep()

    def _wait_ordered(self, want: int) -> None:
        """Elsewhere: look at a region only once the eventfd reads have counted its message's ring, the kernel's
        locking ordering the writer's stores before this side's loads (one read may count two rings; a ring from the
        watchdog counts too, so the sequence number must agree, else the next sleep reports the peer gone)."""
        while self.rung < want or self.inbox.seq(want) != want:
            self._sleep()

    def _sleep(self) -> None:
        if self.closed:
            raise ConnectionError("the shared-memory channel is closed")
        if self.peer_gone:
            raise ConnectionError(self.peer_gone)
        self.rung += os.eventfd_read(self.wait_fd)

    def _watch(self) -> None:
        """Wait for the peer to end (socket end-of-file or its pidfd readable), then wake this side's reader."""
        poller = select.poll()
        poller.register(self.sock.fileno(), select.POLLIN)
        if self.peer_fd is not None:
            poller.register(self.peer_fd, select.POLLIN)
        while not self.closed:
            events = dict(poller.poll())
            if self.closed:
                return
            if self.peer_fd is not None and self.peer_fd in events:
                self.peer_gone = "the shared-memory channel's peer process has exited"
            elif self.sock.fileno() in events:
                try:
                    data = self.sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
                except BlockingIOError:
                    continue
                except OSError as exc:
                    data = b""
                    self.peer_gone = f"the shared-memory channel's peer is gone ({exc})"
                if data:  # the socket carries nothing after the handshake
                    self.peer_gone = "unexpected bytes on the shared-memory channel's socket"
                self.peer_gone = self.peer_gone or (
                    "the shared-memory channel's peer closed it or died (worker or coordinator died?)"
                )
            else:
                continue
            os.eventfd_write(self.wait_fd, 1)
            return

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the watchdog; the peer sees end-of-file
        except OSError:
            pass
        os.eventfd_write(self.wait_fd, 1)  # wakes a reader blocked in another thread, which then sees `closed`
        if self.watchdog is not threading.current_thread():
            self.watchdog.join(timeout=5.0)
        self.sock.close()
        for region in (self.outbox, self.inbox):
            region.close()
        for fd in (self.ring_fd, self.wait_fd) + ((self.peer_fd,) if self.peer_fd is not None else ()):
            os.close(fd)


def _peer_pidfd(sock: socket.socket) -> int | None:
    """A pidfd of the process at the socket's other end (readable once it exits), or None where unavailable.

    The socket's end-of-file already reports a dead peer, unless a child the peer forked still holds the socket."""
    try:
        pid, _, _ = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
        return os.pidfd_open(pid) if pid > 0 else None
    except (OSError, AttributeError):
        return None


class ShmChannelServer:
    """Worker side: accept the coordinator on an abstract Unix socket, then answer each request with `handler`
    from a background thread, over shared memory.

    `label` only names the socket (e.g. the worker's shards); the channel works within one node. Only a client that
    first sends the secret `token` (handed to the coordinator through Ray) is served. A handler exception is sent
    back as its `Failure` record and raised on the coordinator side as WorkerFailed. The thread ends, releasing the
    shared
    memory, when the client closes the channel or its process ends.
    """

    def __init__(
        self,
        handler: Callable[[Any], Any],
        label: str = "",
        spin_s: float = DEFAULT_SPIN_S,
        accept_timeout_s: float = 300.0,
    ) -> None:
        _require_support()
        self.handler = handler
        self.spin_s = spin_s
        self.token = secrets.token_bytes(16)
        tag = "".join(c for c in label if c.isalnum() or c in "-_")[:40]
        self.address = f"\0raysampler-{tag}-{secrets.token_hex(8)}"
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.address)
        self.listener.listen(1)
        self.listener.settimeout(accept_timeout_s)
        self.thread = threading.Thread(target=self._serve, name="raysampler-shm-channel", daemon=True)
        self.thread.start()

    def _accept(self) -> socket.socket | None:
        """The first connection that presents the token (None if none comes within the accept timeout)."""
        with self.listener:
            while True:
                try:
                    conn, _ = self.listener.accept()
                except OSError:
                    return None
                conn.settimeout(_HANDSHAKE_TIMEOUT_S)
                try:
                    if hmac.compare_digest(bytes(_recv_exact(conn, len(self.token))), self.token):
                        return conn
                except OSError:
                    pass
                conn.close()

    def _open(self, conn: socket.socket) -> _Endpoint:
        """Create both regions and both eventfds (request bell, reply bell) and hand them to the client."""
        fds: list[int] = []
        try:
            for name in ("raysampler-request", "raysampler-request", "raysampler-reply", "raysampler-reply"):
                fd = os.memfd_create(name, os.MFD_CLOEXEC)
                fds.append(fd)
                os.ftruncate(fd, INITIAL_BYTES)
            for _ in range(2):
                fds.append(os.eventfd(0, os.EFD_CLOEXEC))
            socket.send_fds(conn, [_HELLO], fds)
            request, reply = _Slots((fds[0], fds[1])), _Slots((fds[2], fds[3]))
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise
        conn.settimeout(None)
        return _Endpoint(conn, outbox=reply, inbox=request, ring_fd=fds[5], wait_fd=fds[4], spin_s=self.spin_s)

    def _serve(self) -> None:
        conn = self._accept()
        if conn is None:
            return
        try:
            endpoint = self._open(conn)
        except OSError:
            conn.close()
            return
        try:
            while True:
                try:
                    request = endpoint.receive()
                except (ConnectionError, OSError):
                    return
                reply = answer(self.handler, request)
                try:
                    endpoint.send(reply)
                except (pickle.PicklingError, TypeError, AttributeError) as exc:  # an unpicklable return value
                    endpoint.send(
                        Reply(
                            False,
                            Failure(
                                FailureKind.WORKER_ERROR,
                                f"{type(exc).__name__}: the worker's reply could not be pickled: {exc}",
                            ),
                        )
                    )
        finally:
            endpoint.close()


class ShmChannelClient:
    """Coordinator side of one worker's shared-memory channel: `send` a request, `receive` its reply (one thread
    uses a client; `spin_s` is honoured on x86 only)."""

    def __init__(self, address: str, token: bytes, timeout_s: float = 10.0, spin_s: float = DEFAULT_SPIN_S) -> None:
        _require_support()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(timeout_s)
            sock.connect(address)
            sock.sendall(token)
            hello, fds, _, _ = socket.recv_fds(sock, len(_HELLO), 6)
            if hello != _HELLO or len(fds) != 6:
                for fd in fds:
                    os.close(fd)
                raise ConnectionError("the shared-memory channel's handshake failed (wrong token or address?)")
            sock.settimeout(None)
        except BaseException:
            sock.close()
            raise
        self.endpoint = _Endpoint(
            sock,
            outbox=_Slots((fds[0], fds[1])),
            inbox=_Slots((fds[2], fds[3])),
            ring_fd=fds[4],
            wait_fd=fds[5],
            spin_s=spin_s,
        )

    def send(self, request: Any) -> None:
        self.endpoint.send(request)

    def send_frame(self, head: bytes, payload: bytes | bytearray) -> None:
        """Send a request another writer encoded (a round's message, encoded once for every worker)."""
        self.endpoint.send_frame(head, payload)

    def wait(self) -> None:
        """Until the worker's reply has arrived (ConnectionError if its process ended)."""
        self.endpoint.wait()

    def receive(self) -> Any:
        """The worker's reply: WorkerFailed if its handler raised, ConnectionError if its process ended."""
        return unwrap(self.endpoint.receive())

    def close(self) -> None:
        self.endpoint.close()
