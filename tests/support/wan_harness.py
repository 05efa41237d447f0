"""Slow links on this one machine: a Ray head and one Ray node per site, each host in a network namespace of its own,
every byte between a site and the rest delayed by a transparent TCP relay in the site's namespace.

The kernel here has no `sch_netem`, so the delay is made in user space. The layout, all of it created by the harness
and removed at the end (the namespaces take their interfaces and iptables rules with them):

    ns <tag>-hub:   bridge br0 (no address; nothing routes out of it: the emulated hosts reach only each other)
    ns <tag>-head:  wan0 10.77.0.1/24, the Ray head (GCS, raylet), the driver
    ns <tag>-<s>:   wan0 10.77.0.(10+i)/24, the relay, then site s's Ray node, labelled raysampler.io/site=s

In a site's namespace two iptables nat rules send every TCP connection that crosses the site's link to the relay:
OUTPUT (a site process connecting to another host) and PREROUTING (another host connecting to the site), so both
directions of both kinds are delayed. The relay finds where a connection was going (SO_ORIGINAL_DST), opens its own
connection there with SO_MARK set (a RETURN rule lets its own connections through), and delivers every chunk it
reads `delay` seconds later, from a timestamped queue per direction: bytes in flight do not wait for one another, so
a link's throughput is not one chunk per delay. Two optional impairments, per link and each way:

- jitter J: each chunk (what one read returns, up to 64 KiB) gets an extra delay drawn uniformly from [0, J], so a
  one-way trip takes between D and D + J and a head ↔ site round trip between 2D and 2D + 2J (mean 2D + J). Extra
  delay only, never less than D: the link's RTT stays its floor. TCP's order is kept: a chunk is delivered at
  max(the previous chunk's delivery, its arrival + its delay), so a short draw waits behind a long one;
- a bandwidth cap B (bytes/s): the chunks of all the link's connections in one direction share one wire, each taking
  size / B on it behind the bytes queued before it, and the delay (and jitter) counts from when it is off the wire.
  The queue is bounded by MAX_IN_FLIGHT per connection and direction (TCP's flow control holds the sender back
  beyond), so a bulk transfer through a narrow link also makes the small messages behind it wait, as on a real
  bottleneck's buffer.

Head ↔
site round trips take 2 × delay; site ↔ site 4 × delay (two links, as in a star). Ray's gRPC and raysampler's
round channel (direct sockets between the coordinator and the workers) both cross it: the site's Ray node starts
after the rules are in place. A relay can be paused (nothing delivered either way, bytes held, connections kept: a
stalled link) and its delay changed while it runs. Not emulated: loss (TCP would hide it as delay anyway) and the
connection handshake's round trip (the kernel completes it at the relay at once; the first bytes then pay it).

    from support.wan_harness import wan_cluster, unavailable

    with wan_cluster(sites=("a", "b"), delay_ms=50) as wan:       # one way: a head ↔ site round trip is 100 ms
        wan.rtt_ms("a")                                            # measured through the relay: ≈ 100
        out = wan.run_python("my_module:drive", {"x": 1})          # fn(**kwargs) in a process at the head
        wan.pause("a", 30)                                         # site a's link stalls for 30 s (returns at once)

`run_python` runs the function in a fresh interpreter inside the head's namespace (`ip netns exec`), joined to the
cluster through RAY_ADDRESS / RAYSAMPLER_RAY_ADDRESS, and returns its value (pickled back), or raises `DriverFailed`
with its traceback. The module runs as a script too: `python tests/support/wan_harness.py relay ...` is the relay
process, `... echo` and `... ping` measure a round trip.

Needs root, iproute2 (`ip netns`) and iptables (`apt-get install -y iptables`); `unavailable()` says why not, for
a test to skip with. Every process the harness starts is killed by its id (the namespaces' own pids), never by name.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import itertools
import json
import os
import pickle
import random
import shutil
import signal
import socket
import socketserver
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SITE_LABEL = "raysampler.io/site"
SO_ORIGINAL_DST = 80  # linux/netfilter_ipv4.h
SO_MARK = 36  # asm-generic/socket.h
RELAY_MARK = 0x5253  # "RS": the relay's own upstream connections, let through by the nat rules
RELAY_PORT = 4901  # below Ray's worker ports (10002-19999) and the ephemeral range
ECHO_PORT = 4902
SUBNET = "10.77.0"
HEAD_IP = f"{SUBNET}.1"
GCS_PORT = 6379
CHUNK = 1 << 16
#: bytes a direction may hold in flight before the relay stops reading from its sender (TCP's flow control then
#: holds the sender back): enough for a bandwidth-delay product of 80 MB/s × 100 ms
MAX_IN_FLIGHT = 8 << 20
REPO = Path(__file__).resolve().parents[2]
THIS = Path(__file__).resolve()


# ------------------------------------------------------------------------------------------------- the relay


@dataclass
class Link:
    """A site link's settings, shared by every connection of one relay: one-way delay and the most jitter adds to it
    (seconds, uniform on [0, jitter_s] per chunk), the bandwidth cap (bytes/s each way, 0 = none), whether it is
    paused, and when each direction's wire is next free (the cap's queue, shared by the link's connections)."""

    delay_s: float
    jitter_s: float = 0.0
    bandwidth: float = 0.0
    running: asyncio.Event = field(default_factory=asyncio.Event)
    wire_free: dict[str, float] = field(default_factory=lambda: {"up": 0.0, "down": 0.0})
    rng: random.Random = field(default_factory=lambda: random.Random(0))
    connections: int = 0
    bytes: dict[str, int] = field(default_factory=lambda: {"up": 0, "down": 0})
    _resume_at: asyncio.TimerHandle | None = None

    def __post_init__(self) -> None:
        self.running.set()

    def due(self, direction: str, size: int, now: float) -> float:
        """When a chunk of `size` bytes read now is due: once it is off the wire (behind the bytes queued before it,
        at the bandwidth cap), plus the delay and a jitter drawn on [0, jitter_s]. `Flight.put` then keeps it behind
        the chunk before it (TCP's order), so the delivery may come later still, never sooner."""
        start = now
        if self.bandwidth > 0:
            start = max(now, self.wire_free[direction]) + size / self.bandwidth
            self.wire_free[direction] = start
        jitter = self.rng.uniform(0.0, self.jitter_s) if self.jitter_s > 0 else 0.0
        return start + max(0.0, self.delay_s) + jitter

    def pause(self, seconds: float | None, loop: asyncio.AbstractEventLoop) -> None:
        if self._resume_at is not None:
            self._resume_at.cancel()
            self._resume_at = None
        self.running.clear()
        if seconds is not None:
            self._resume_at = loop.call_later(seconds, self.resume)

    def resume(self) -> None:
        if self._resume_at is not None:
            self._resume_at.cancel()
            self._resume_at = None
        self.running.set()


class Flight:
    """One direction of one connection: chunks with their delivery times, in order (TCP's order: a chunk is never
    delivered before the one read before it), and the bytes held, bounded by MAX_IN_FLIGHT."""

    def __init__(self) -> None:
        self.items: deque[tuple[float, bytes | None]] = deque()
        self.held = 0
        self.last_due = 0.0
        self.changed = asyncio.Event()
        self.room = asyncio.Event()
        self.room.set()

    def put(self, due: float, data: bytes | None) -> None:
        due = max(due, self.last_due)
        self.last_due = due
        self.items.append((due, data))
        self.held += len(data) if data else 0
        if self.held >= MAX_IN_FLIGHT:
            self.room.clear()
        self.changed.set()

    async def get(self) -> tuple[float, bytes | None]:
        while not self.items:
            self.changed.clear()
            await self.changed.wait()
        due, data = self.items.popleft()
        self.held -= len(data) if data else 0
        if self.held < MAX_IN_FLIGHT:
            self.room.set()
        return due, data


async def _read_side(reader: asyncio.StreamReader, flight: Flight, link: Link, direction: str) -> None:
    loop = asyncio.get_running_loop()
    try:
        while True:
            await flight.room.wait()
            data = await reader.read(CHUNK)
            link.bytes[direction] += len(data)
            flight.put(link.due(direction, len(data), loop.time()), data or None)
            if not data:
                return
    except (ConnectionError, OSError):
        flight.put(loop.time(), None)


async def _write_side(writer: asyncio.StreamWriter, flight: Flight, link: Link) -> None:
    loop = asyncio.get_running_loop()
    while True:
        due, data = await flight.get()
        wait = due - loop.time()
        if wait > 0:
            await asyncio.sleep(wait)
        await link.running.wait()
        if data is None:  # the sender closed its side: pass the half-close on
            if writer.can_write_eof():
                writer.write_eof()
            return
        writer.write(data)
        await writer.drain()


async def _pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter, link: Link, direction: str) -> None:
    flight = Flight()
    reading = asyncio.ensure_future(_read_side(src, flight, link, direction))
    try:
        await _write_side(dst, flight, link)
    finally:
        reading.cancel()


def original_destination(sock: socket.socket) -> tuple[str, int]:
    """Where a connection redirected by iptables REDIRECT was going (SO_ORIGINAL_DST: a struct sockaddr_in)."""
    raw = sock.getsockopt(socket.SOL_IP, SO_ORIGINAL_DST, 16)
    port, packed = struct.unpack_from("!2xH4s", raw)
    return socket.inet_ntoa(packed), port


async def _connect_marked(host: str, port: int, mark: int | None) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        if mark is not None:
            sock.setsockopt(socket.SOL_SOCKET, SO_MARK, mark)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, (host, port))
    except BaseException:
        sock.close()
        raise
    return await asyncio.open_connection(sock=sock)


class Relay:
    """The relay's server: each accepted connection joined to its destination (`target`, else the original
    destination of a redirected connection), both directions delayed by `link`."""

    def __init__(self, link: Link, target: tuple[str, int] | None, mark: int | None) -> None:
        self.link, self.target, self.mark = link, target, mark

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        up_writer: asyncio.StreamWriter | None = None
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            host, port = self.target if self.target is not None else original_destination(sock)
            await self.link.running.wait()  # a paused link opens no new connection either
            up_reader, up_writer = await _connect_marked(host, port, self.mark)
        except (OSError, ConnectionError):
            writer.close()
            return
        self.link.connections += 1
        pipes = [
            asyncio.ensure_future(_pipe(reader, up_writer, self.link, "up")),
            asyncio.ensure_future(_pipe(up_reader, writer, self.link, "down")),
        ]
        try:
            await asyncio.gather(*pipes)
        except (ConnectionError, OSError):
            pass
        finally:
            for p in pipes:
                p.cancel()
            for w in (writer, up_writer):
                with contextlib.suppress(Exception):
                    w.close()


async def _control(link: Link, stop: asyncio.Event) -> None:
    """Commands on stdin, one a line, each answered on stdout: `pause [seconds]`, `resume`, `delay SECONDS
    [JITTER]`, `bandwidth BYTES_PER_S`, `stats`, `quit`. End of input stops the relay (its owner has gone)."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while True:
        line = (await reader.readline()).decode()
        if not line:
            stop.set()
            return
        cmd, *args = line.split() or [""]
        reply: dict[str, Any] = {"ok": True}
        try:
            if cmd == "pause":
                link.pause(float(args[0]) if args else None, loop)
            elif cmd == "resume":
                link.resume()
            elif cmd == "delay":
                link.delay_s = float(args[0])
                if len(args) > 1:
                    link.jitter_s = float(args[1])
            elif cmd == "bandwidth":
                link.bandwidth = float(args[0])
            elif cmd == "stats":
                reply.update(connections=link.connections, bytes=link.bytes, paused=not link.running.is_set())
            elif cmd == "quit":
                stop.set()
            else:
                reply = {"ok": False, "error": f"unknown command {line.strip()!r}"}
        except (IndexError, ValueError) as exc:
            reply = {"ok": False, "error": str(exc)}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()
        if stop.is_set():
            return


async def serve_relay(
    listen: tuple[str, int],
    link: Link,
    target: tuple[str, int] | None = None,
    mark: int | None = RELAY_MARK,
    ready: Callable[[int], None] | None = None,
    stop: asyncio.Event | None = None,
    control: bool = False,
) -> None:
    """Run a relay on `listen` until `stop` is set (or, with `control`, stdin ends); `ready(port)` once listening."""
    stop = stop or asyncio.Event()
    relay = Relay(link, target, mark)
    server = await asyncio.start_server(relay.handle, listen[0], listen[1], reuse_address=True)
    loop = asyncio.get_running_loop()
    if control:  # SIGUSR1 pauses, SIGUSR2 resumes (by hand: `kill -USR1 <relay pid>`)
        loop.add_signal_handler(signal.SIGUSR1, link.pause, None, loop)
        loop.add_signal_handler(signal.SIGUSR2, link.resume)
    port = server.sockets[0].getsockname()[1]
    if ready is not None:
        ready(port)
    tasks = [asyncio.ensure_future(_control(link, stop))] if control else []
    async with server:
        await stop.wait()
    for t in tasks:
        t.cancel()


class LoopbackRelay:
    """A relay in a thread of this process, forwarding 127.0.0.1:`port` to `target` with `delay_s` each way (and
    `jitter_s`, `bandwidth` as `Link`'s; no root, no redirection): for testing the relay itself."""

    def __init__(self, target: tuple[str, int], delay_s: float, jitter_s: float = 0.0, bandwidth: float = 0.0):
        self._loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self.port = 0
        self.link: Link | None = None
        self._stop: asyncio.Event | None = None
        self._args = (target, delay_s, jitter_s, bandwidth)
        self._thread = threading.Thread(target=self._run, name="wan-relay", daemon=True)
        self._thread.start()
        if not self._started.wait(10):
            raise RuntimeError("the loopback relay did not start")

    def _run(self) -> None:
        target, delay_s, jitter_s, bandwidth = self._args
        asyncio.set_event_loop(self._loop)

        async def main() -> None:
            self._stop = asyncio.Event()
            self.link = Link(delay_s, jitter_s, bandwidth)

            def ready(port: int) -> None:
                self.port = port
                self._started.set()

            await serve_relay(("127.0.0.1", 0), self.link, target=target, mark=None, ready=ready, stop=self._stop)
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:  # the connections still open
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        try:
            self._loop.run_until_complete(main())
        finally:
            self._loop.close()

    def _soon(self, fn: Callable[..., Any], *args: Any) -> None:
        self._loop.call_soon_threadsafe(fn, *args)

    def pause(self, seconds: float | None = None) -> None:
        """Stall the link (both ways) until `resume`, or for `seconds`."""
        assert self.link is not None
        self._soon(self.link.pause, seconds, self._loop)

    def resume(self) -> None:
        assert self.link is not None
        self._soon(self.link.resume)

    def set_delay(self, delay_s: float, jitter_s: float | None = None) -> None:
        assert self.link is not None
        link = self.link

        def change() -> None:
            link.delay_s = delay_s
            if jitter_s is not None:
                link.jitter_s = jitter_s

        self._soon(change)

    def set_bandwidth(self, bytes_per_s: float) -> None:
        """The cap from now on, each way (0: none)."""
        assert self.link is not None
        link = self.link

        def change() -> None:
            link.bandwidth = bytes_per_s

        self._soon(change)

    def close(self) -> None:
        if self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    def __enter__(self) -> LoopbackRelay:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ------------------------------------------------------------------------------- round trips: echo and ping


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while data := self.request.recv(CHUNK):
            self.request.sendall(data)


class EchoServer(socketserver.ThreadingTCPServer):
    """Sends back every byte of every connection (a thread each) until closed; `port` is where it listens. A
    connection's end of input ends its echo (the half-close is passed on)."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        super().__init__((host, port), _Echo)
        self.port: int = self.server_address[1]
        self._thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self) -> EchoServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
        self.server_close()


def ping(host: str, port: int, count: int = 5, size: int = 64, timeout_s: float = 30.0) -> list[float]:
    """Round-trip seconds of `count` messages of `size` bytes to an echo server (after one unmeasured message, so
    that the connection's set-up is not counted)."""
    out = []
    with socket.create_connection((host, port), timeout=timeout_s) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        msg = b"x" * size
        for i in range(count + 1):
            t0 = time.perf_counter()
            s.sendall(msg)
            got = 0
            while got < size:
                chunk = s.recv(size - got)
                if not chunk:
                    raise ConnectionError("the echo server closed the connection")
                got += len(chunk)
            if i:
                out.append(time.perf_counter() - t0)
    return out


# ------------------------------------------------------------------------------------------ the harness


class WanUnavailable(RuntimeError):
    """The machine cannot host the emulated network (not root, no `ip netns`, no iptables)."""


class DriverFailed(RuntimeError):
    """A function run at the head (`Wan.run_python`) raised, or its process died; the message holds its output."""


_AVAILABLE: dict[str, str | None] = {}


def unavailable() -> str | None:
    """Why this machine cannot host the harness (for a test's skip), or None. Checked once per process by making a
    namespace with a nat rule in it, and removing it."""
    if "reason" in _AVAILABLE:
        return _AVAILABLE["reason"]
    reason: str | None = None
    if not sys.platform.startswith("linux"):
        reason = "the WAN harness needs Linux network namespaces"
    elif os.geteuid() != 0:
        reason = "the WAN harness needs root (network namespaces, iptables)"
    elif shutil.which("ip") is None:
        reason = "the WAN harness needs iproute2's `ip` (apt-get install -y iproute2)"
    elif shutil.which("iptables") is None:
        reason = "the WAN harness needs iptables (apt-get install -y iptables)"
    else:
        ns = f"rsw{os.getpid()}-probe"
        try:
            _ip("netns", "add", ns)
        except WanUnavailable as exc:
            reason = f"`ip netns add` fails here: {exc}"
        else:
            try:
                _sh("ip", "netns", "exec", ns, "iptables", "-t", "nat", "-A", "OUTPUT", "-p", "tcp", "-j", "RETURN")
            except WanUnavailable as exc:
                reason = f"iptables' nat table does not work in a network namespace: {exc}"
            finally:
                _sh("ip", "netns", "del", ns, check=False)
    _AVAILABLE["reason"] = reason
    return reason


def _sh(*cmd: str, check: bool = True, timeout: float = 30.0) -> str:
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if check and res.returncode != 0:
        raise WanUnavailable(f"{' '.join(cmd)}: {res.stderr.strip() or res.stdout.strip()}")
    return res.stdout


def _ip(*args: str, check: bool = True) -> str:
    return _sh("ip", *args, check=check)


_TAGS = itertools.count()


@dataclass
class Host:
    """An emulated host: its namespace, its address, and for a site its relay process."""

    name: str
    ns: str
    ip: str
    relay: subprocess.Popen | None = None
    ray: subprocess.Popen | None = None

    def exec(self, *cmd: str) -> list[str]:
        """`cmd` run inside this host's namespace."""
        return ["ip", "netns", "exec", self.ns, *cmd]


@dataclass
class Wan:
    """The emulated network and its Ray cluster, while `wan_cluster` runs (see the module's docstring)."""

    tag: str
    hub: str
    head: Host
    sites: dict[str, Host]
    tmp: Path
    ray_tmp: Path
    env: dict[str, str]
    delay_s: float
    _procs: list[subprocess.Popen] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def address(self) -> str:
        """The Ray cluster's address (the head's GCS), reachable from the head's namespace and through the relays."""
        return f"{self.head.ip}:{GCS_PORT}"

    # ---- the links

    def _command(self, site: str, line: str) -> dict[str, Any]:
        host = self.sites[site]
        if host.relay is None:
            raise RuntimeError(f"site {site} has no relay (a direct link)")
        assert host.relay.stdin is not None and host.relay.stdout is not None
        with self._lock:
            host.relay.stdin.write(line + "\n")
            host.relay.stdin.flush()
            reply = json.loads(host.relay.stdout.readline() or '{"ok": false, "error": "the relay has exited"}')
        if not reply.get("ok"):
            raise RuntimeError(f"relay of site {site}: {reply.get('error')}")
        return reply

    def pause(self, site: str, seconds: float | None = None) -> None:
        """Stall site's link: nothing crosses it either way (bytes are held, connections stay open) until
        `resume(site)` or, with `seconds`, until that long has passed. Returns at once."""
        self._command(site, "pause" if seconds is None else f"pause {float(seconds)}")

    def resume(self, site: str) -> None:
        self._command(site, "resume")

    @contextlib.contextmanager
    def stall(self, site: str, after_s: float, seconds: float) -> Iterator[dict[str, float]]:
        """The stall scenario: inside the block (around a `run_python`, say), site's link stalls for `seconds`,
        starting `after_s` seconds into the block (a timer thread; the relay ends the stall itself). Yields a dict
        that gets the wall-clock times (time.time()) the stall began ("paused") and was due to end ("resumes")."""
        when: dict[str, float] = {}

        def fire() -> None:
            when["paused"] = time.time()
            self.pause(site, seconds)
            when["resumes"] = when["paused"] + seconds

        timer = threading.Timer(after_s, fire)
        timer.daemon = True
        timer.start()
        try:
            yield when
        finally:
            timer.cancel()
            if "paused" in when and time.time() < when["resumes"]:
                self.resume(site)  # the block ended first: the link is not left stalled

    def set_delay(self, site: str, delay_ms: float, jitter_ms: float | None = None) -> None:
        """Site's one-way delay (and the most jitter adds to it, `jitter_ms`) from now on: bytes already in flight
        keep theirs."""
        cmd = f"delay {delay_ms / 1000.0}" + ("" if jitter_ms is None else f" {jitter_ms / 1000.0}")
        self._command(site, cmd)

    def set_bandwidth(self, site: str, bytes_per_s: float) -> None:
        """Site's bandwidth cap, each way (0: none)."""
        self._command(site, f"bandwidth {float(bytes_per_s)}")

    def relay_stats(self, site: str) -> dict[str, Any]:
        """Connections the site's relay has carried, bytes each way, whether it is paused."""
        return self._command(site, "stats")

    def rtt_ms(self, site: str, count: int = 5) -> float:
        """The median measured round trip (ms) of a small message from the head to an echo server at `site`,
        through its link."""
        host = self.sites[site]
        port = ECHO_PORT
        echo = self._spawn(host, [sys.executable, str(THIS), "echo", "--port", str(port)], wait_ready=True)
        try:
            out = subprocess.run(
                self.head.exec(sys.executable, str(THIS), "ping", host.ip, str(port), "--count", str(count)),
                capture_output=True,
                text=True,
                timeout=60 + count * 10,
                env=self.env,
            )
            if out.returncode != 0:
                raise RuntimeError(f"ping from the head to site {site} failed: {out.stderr}")
            times = json.loads(out.stdout)
            return 1000.0 * sorted(times)[len(times) // 2]
        finally:
            _kill(echo)
            self._procs.remove(echo)

    # ---- processes at the hosts

    def _spawn(self, host: Host, cmd: Sequence[str], wait_ready: bool = False, **kw: Any) -> subprocess.Popen:
        proc = subprocess.Popen(
            host.exec(*cmd),
            env=kw.pop("env", self.env),
            start_new_session=True,
            stdin=kw.pop("stdin", subprocess.DEVNULL),
            stdout=kw.pop("stdout", subprocess.PIPE if wait_ready else subprocess.DEVNULL),
            stderr=kw.pop("stderr", subprocess.DEVNULL),
            text=True,
            **kw,
        )
        self._procs.append(proc)
        if wait_ready:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            if not line.startswith("ready"):
                _kill(proc)
                raise RuntimeError(f"{' '.join(cmd)} did not start (exit {proc.poll()}): {line!r}")
        return proc

    def python_env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment of a driver at the head: the harness's, joined to this cluster."""
        env = dict(self.env)
        env.update(RAY_ADDRESS=self.address, RAYSAMPLER_RAY_ADDRESS=self.address, WAN_NODE_IP=self.head.ip)
        env.update(extra or {})
        return env

    def run_python(
        self,
        target: str,
        kwargs: Mapping[str, Any] | None = None,
        *,
        timeout_s: float = 600.0,
        env: Mapping[str, str] | None = None,
        path: Sequence[str | Path] = (),
        ray_init: bool = True,
        echo: bool = False,
    ) -> Any:
        """Call `module:function`(**kwargs) in a fresh Python inside the head's namespace and return its value.

        `path` goes first on its sys.path (this repository and tests/ are on it already). With `ray_init` the process
        joins the cluster before the call (`ray.init` at the head's address: a bare `ray.init()` there cannot tell
        its own address), so `rs.sample(..., executor="ray")` uses it as it is. `echo` copies its output to this
        process's stdout as it comes. Its exception, a timeout or its death comes back as DriverFailed, with the
        traceback and the end of its output."""
        work = Path(tempfile.mkdtemp(prefix="driver-", dir=self.tmp))
        (work / "call.pkl").write_bytes(pickle.dumps((target, dict(kwargs or {}), [str(p) for p in path])))
        extra = {"WAN_RAY_INIT": "1" if ray_init else "0", **(env or {})}
        proc = subprocess.Popen(
            self.head.exec(sys.executable, str(THIS), "call", str(work)),
            env=self.python_env(extra),
            start_new_session=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self._procs.append(proc)
        lines: deque[str] = deque(maxlen=400)

        def read() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.append(line)
                if echo:
                    sys.stdout.write(line)
                    sys.stdout.flush()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            _kill(proc)
            reader.join(5)
            raise DriverFailed(f"{target} ran past {timeout_s:.0f} s; its output ended:\n{''.join(lines)}") from None
        finally:
            _kill(proc)
            self._procs.remove(proc)
        reader.join(5)
        result = work / "result.pkl"
        if not result.exists():
            raise DriverFailed(f"{target}: its process exited {proc.returncode} with no result:\n{''.join(lines)}")
        ok, value = pickle.loads(result.read_bytes())
        shutil.rmtree(work, ignore_errors=True)
        if not ok:
            raise DriverFailed(f"{target} raised:\n{value}\nits output ended:\n{''.join(lines)}")
        return value


def _kill(proc: subprocess.Popen, grace_s: float = 5.0) -> None:
    """Stop a process the harness started, and its process group (its session), by id."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(grace_s)


def _namespace_pids(ns: str) -> list[int]:
    out = _sh("ip", "netns", "pids", ns, check=False)
    return [int(p) for p in out.split() if p.strip().isdigit()]


def _stop(procs: Sequence[subprocess.Popen], namespaces: Sequence[str], grace_s: float = 3.0) -> None:
    """Stop the processes the harness started and every process inside its namespaces (all of them its own: Ray's
    raylets, workers and agents are children of the nodes it started), by id: SIGTERM to all at once, SIGKILL to
    what is left after `grace_s`; then reap its children."""
    for proc in procs:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGTERM)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids = [pid for ns in namespaces for pid in _namespace_pids(ns)]
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        deadline = time.monotonic() + grace_s
        while pids and time.monotonic() < deadline:
            time.sleep(0.1)
            pids = [pid for ns in namespaces for pid in _namespace_pids(ns)]
        if not pids:
            break
    for proc in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(grace_s)
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _sweep_stale() -> None:
    """Remove the namespaces (and their processes) of a harness whose process has died without cleaning up: named
    rsw<pid>x..., that pid no longer alive."""
    for line in _sh("ip", "netns", "list", check=False).splitlines():
        name = line.split()[0] if line.split() else ""
        head, sep, _ = name.partition("x")
        if not (sep and head.startswith("rsw") and head[3:].isdigit()):
            continue
        pid = int(head[3:])
        if pid == os.getpid() or Path(f"/proc/{pid}").exists():
            continue
        _stop([], [name])
        _sh("ip", "netns", "del", name, check=False)


def _ray_start(host: Host, wan: Wan, head: bool, cpus: int, labels: str | None, object_store_mb: int) -> None:
    cmd = [
        str(Path(sys.executable).with_name("ray")),
        "start",
        "--block",
        "--node-ip-address",
        host.ip,
        "--num-cpus",
        str(cpus),
        "--object-store-memory",
        str(object_store_mb * 2**20),
        "--disable-usage-stats",
        "--temp-dir",
        str(wan.ray_tmp / host.ns.rpartition("-")[2]),  # a temp dir per node: two nodes' sockets never race
    ]
    if head:
        cmd += ["--head", "--port", str(GCS_PORT), "--include-dashboard", "false"]
    else:
        cmd += ["--address", wan.address]
    if labels:
        cmd += ["--labels", labels]
    with open(wan.tmp / f"ray-{host.name}.log", "a") as log:  # the node's output (the child keeps it open)
        host.ray = wan._spawn(host, cmd, stdout=log, stderr=subprocess.STDOUT)


STARTED = "Ray runtime started."  # what `ray start` prints once its node is registered with the GCS


def _wait_for_nodes(wan: Wan, starts: Mapping[str, Callable[[], None]], timeout_s: float, tries: int = 3) -> None:
    """Until every node's `ray start` says its node is registered (it waits for the GCS to list it). A node whose
    `ray start` gave up meanwhile (it waits 30 s for its raylet to register: a loaded machine behind a long delay
    can take longer) is started again, up to `tries` times in all."""
    hosts = {h.name: h for h in [wan.head, *wan.sites.values()]}
    left = dict.fromkeys(hosts, tries - 1)
    pending = set(hosts)
    deadline = time.monotonic() + timeout_s
    while pending:
        for name in sorted(pending):
            log = (wan.tmp / f"ray-{name}.log").read_text(errors="replace")
            if STARTED in log:
                pending.discard(name)
                continue
            proc = hosts[name].ray
            if proc is not None and proc.poll() is not None:
                if name == "head" or left[name] == 0:
                    raise RuntimeError(f"Ray on {name} did not start: {log[-6000:]}")
                left[name] -= 1
                wan._procs.remove(proc)
                starts[name]()
        if time.monotonic() > deadline:
            logs = {n: (wan.tmp / f"ray-{n}.log").read_text(errors="replace")[-3000:] for n in sorted(pending)}
            raise RuntimeError(f"the cluster did not come up in {timeout_s:.0f} s: still starting {logs}")
        time.sleep(0.2)


@contextlib.contextmanager
def wan_cluster(
    sites: Sequence[str] = ("a", "b"),
    delay_ms: float = 50.0,
    jitter_ms: float = 0.0,
    bandwidth: float = 0.0,
    *,
    site_cpus: int = 1,
    head_cpus: int = 1,
    object_store_mb: int = 100,
    env: Mapping[str, str] | None = None,
    start_ray: bool = True,
    direct: bool = False,
    timeout_s: float = 180.0,
    keep_logs: Path | None = None,
) -> Iterator[Wan]:
    """The emulated network (module docstring) with `delay_ms` one way on each site's link (plus up to `jitter_ms`
    per chunk, uniform; `bandwidth` bytes/s each way, 0 = none) and, with `start_ray`, a Ray head (`head_cpus`) and
    one node per site (`site_cpus`, labelled raysampler.io/site=<site>), started after the relays. `env` is added to
    every process's environment (e.g. RAY_health_check_* for every node). `direct`: no relays and no rules at all
    (the plain veth links, a LAN's baseline; pause and set_delay are then unavailable). Everything is removed at the
    end, errors included; `keep_logs` (a folder) keeps a copy of the nodes', relays' and Ray's logs first."""
    reason = unavailable()
    if reason is not None:
        raise WanUnavailable(reason)
    if len(sites) > 200 or len(set(sites)) != len(sites):
        raise ValueError(f"sites must be distinct (and fewer than 200): {sites!r}")
    _sweep_stale()
    tag = f"rsw{os.getpid()}x{next(_TAGS)}"
    tmp = Path(tempfile.mkdtemp(prefix="rs-wan-"))
    ray_tmp = Path(tempfile.mkdtemp(prefix="r", dir="/tmp"))  # short: Ray's socket paths must fit in 107 bytes
    base_env = dict(os.environ)
    base_env.update(
        RAY_AUTH_MODE="disabled",
        RAY_TMPDIR=str(ray_tmp),
        RAY_USAGE_STATS_ENABLED="0",
        RAY_LOG_MONITOR_MANY_FILES_THRESHOLD="0",
        PYTHONPATH=os.pathsep.join([str(REPO), str(REPO / "tests"), *filter(None, [os.environ.get("PYTHONPATH")])]),
        OPENBLAS_NUM_THREADS="1",
        PYTHONUNBUFFERED="1",
    )
    for k in ("RAY_ADDRESS", "RAYSAMPLER_RAY_ADDRESS"):
        base_env.pop(k, None)
    base_env.update(env or {})
    hosts = [Host("head", f"{tag}-head", HEAD_IP)] + [
        Host(s, f"{tag}-s{i}", f"{SUBNET}.{10 + i}") for i, s in enumerate(sites)
    ]
    wan = Wan(tag, f"{tag}-hub", hosts[0], {h.name: h for h in hosts[1:]}, tmp, ray_tmp, base_env, delay_ms / 1000)
    made: list[str] = []
    try:
        _ip("netns", "add", wan.hub)
        made.append(wan.hub)
        _ip("-n", wan.hub, "link", "add", "br0", "type", "bridge")
        _ip("-n", wan.hub, "link", "set", "br0", "up")
        for i, h in enumerate(hosts):
            _ip("netns", "add", h.ns)
            made.append(h.ns)
            _ip("link", "add", "wan0", "netns", h.ns, "type", "veth", "peer", "name", f"p{i}", "netns", wan.hub)
            _ip("-n", wan.hub, "link", "set", f"p{i}", "master", "br0")
            _ip("-n", wan.hub, "link", "set", f"p{i}", "up")
            _ip("-n", h.ns, "addr", "add", f"{h.ip}/24", "dev", "wan0")
            _ip("-n", h.ns, "link", "set", "wan0", "up")
            _ip("-n", h.ns, "link", "set", "lo", "up")
        for h in hosts[1:] if not direct else ():
            _redirect(h)
            with open(tmp / f"relay-{h.name}.log", "w") as err:
                h.relay = wan._spawn(
                    h,
                    [sys.executable, str(THIS), "relay", "--port", str(RELAY_PORT), "--delay", str(delay_ms / 1000)]
                    + ["--jitter", str(jitter_ms / 1000), "--bandwidth", str(bandwidth)],
                    wait_ready=True,
                    stdin=subprocess.PIPE,
                    stderr=err,
                )
        if start_ray:
            head = hosts[0]
            starts = {head.name: functools.partial(_ray_start, head, wan, True, head_cpus, None, object_store_mb)}
            for h in hosts[1:]:
                label = f"{SITE_LABEL}={h.name}"
                starts[h.name] = functools.partial(_ray_start, h, wan, False, site_cpus, label, object_store_mb)
            for start in starts.values():
                start()
            _wait_for_nodes(wan, starts, timeout_s)
        yield wan
    finally:
        _stop(list(reversed(wan._procs)), made)
        for ns in reversed(made):
            _sh("ip", "netns", "del", ns, check=False)
        if keep_logs is not None:
            with contextlib.suppress(OSError):
                shutil.copytree(tmp, keep_logs, dirs_exist_ok=True, ignore=shutil.ignore_patterns("driver-*"))
                for session in ray_tmp.glob("*/session_2*"):
                    shutil.copytree(session / "logs", keep_logs / f"ray-logs-{session.parent.name}", dirs_exist_ok=True)
        for h in hosts:
            if h.relay is not None:
                for stream in (h.relay.stdin, h.relay.stdout):
                    with contextlib.suppress(Exception):
                        stream.close()  # type: ignore[union-attr]
        shutil.rmtree(ray_tmp, ignore_errors=True)
        shutil.rmtree(tmp, ignore_errors=True)


def _redirect(h: Host) -> None:
    """Site h's nat rules: the relay's own (marked) connections pass; every other TCP connection leaving the site
    for another host, or arriving from one, goes to the relay."""
    rules = [
        ["OUTPUT", "-p", "tcp", "-m", "mark", "--mark", str(RELAY_MARK), "-j", "RETURN"],
        ["OUTPUT", "-p", "tcp", "-d", h.ip, "-j", "RETURN"],
        ["OUTPUT", "-p", "tcp", "-d", f"{SUBNET}.0/24", "-j", "REDIRECT", "--to-ports", str(RELAY_PORT)],
        ["PREROUTING", "-p", "tcp", "-i", "wan0", "-j", "REDIRECT", "--to-ports", str(RELAY_PORT)],
    ]
    for rule in rules:
        _sh("ip", "netns", "exec", h.ns, "iptables", "-t", "nat", "-A", *rule)


# --------------------------------------------------------------------------------- the module as a script


def _call(work: str) -> None:
    """Run a pickled call (`Wan.run_python`) and pickle back its value or traceback."""
    import importlib
    import traceback

    folder = Path(work)
    target, kwargs, path = pickle.loads((folder / "call.pkl").read_bytes())
    for p in reversed(path):
        sys.path.insert(0, p)
    try:
        if os.environ.get("WAN_RAY_INIT") == "1":  # joined here, at the head's address (Ray cannot find it itself
            import ray  # in a namespace with no route out: it asks a route to 8.8.8.8), so raysampler uses it as is

            ray.init(
                address=os.environ["RAY_ADDRESS"],
                _node_ip_address=os.environ["WAN_NODE_IP"],
                log_to_driver=os.environ.get("WAN_RAY_LOG_TO_DRIVER") == "1",
                configure_logging=False,
            )
        module, _, name = target.partition(":")
        fn = getattr(importlib.import_module(module), name)
        out: tuple[bool, Any] = (True, fn(**kwargs))
    except BaseException:  # everything goes back to the caller
        out = (False, traceback.format_exc())
    (folder / "result.pkl").write_bytes(pickle.dumps(out))


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="the WAN harness's processes")
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("relay", help="a transparent delaying relay (commands on stdin)")
    r.add_argument("--host", default="0.0.0.0")
    r.add_argument("--port", type=int, default=RELAY_PORT)
    r.add_argument("--delay", type=float, default=0.05, help="one-way seconds")
    r.add_argument("--jitter", type=float, default=0.0, help="most seconds added per chunk (uniform)")
    r.add_argument("--bandwidth", type=float, default=0.0, help="bytes/s each way, 0 = none")
    r.add_argument("--target", default=None, help="HOST:PORT: forward there instead of to the original destination")
    e = sub.add_parser("echo", help="an echo server")
    e.add_argument("--host", default="0.0.0.0")
    e.add_argument("--port", type=int, default=0)
    p = sub.add_parser("ping", help="round trips to an echo server, as a JSON list of seconds")
    p.add_argument("host")
    p.add_argument("port", type=int)
    p.add_argument("--count", type=int, default=5)
    c = sub.add_parser("call", help="run a pickled call (Wan.run_python)")
    c.add_argument("work")
    args = ap.parse_args(argv)

    def ready(port: int) -> None:
        print(f"ready {port}", flush=True)

    if args.cmd == "relay":
        target = None
        if args.target:
            host, _, port = args.target.rpartition(":")
            target = (host, int(port))

        async def run() -> None:
            link = Link(args.delay, args.jitter, args.bandwidth)
            await serve_relay((args.host, args.port), link, target=target, ready=ready, control=True)

        asyncio.run(run())
    elif args.cmd == "echo":
        with EchoServer(args.host, args.port) as server:
            ready(server.port)
            threading.Event().wait()
    elif args.cmd == "ping":
        print(json.dumps(ping(args.host, args.port, args.count)))
    elif args.cmd == "call":
        _call(args.work)


if __name__ == "__main__":
    main()
