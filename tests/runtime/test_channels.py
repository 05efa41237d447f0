"""The coordinator↔worker channels on real Ray actors: the TCP channel and the same-node shared-memory channel.

Both must carry numpy payloads exactly, raise a worker's exception on the coordinator as WorkerFailed (its Failure
record), and report
a killed peer as ConnectionError/OSError within seconds; the shared-memory one must leave no segment behind.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from typing import Any

import numpy as np
import pytest
from ray import cloudpickle

from raysampler.algorithms.dglmc import Message
from raysampler.errors import WorkerFailed
from raysampler.runtime import shm_channel
from raysampler.runtime.channel import ChannelClient, ChannelServer
from raysampler.runtime.shm_channel import ShmChannelClient, ShmChannelServer

KINDS = ("tcp", "shm", "shm-ordered")  # shm-ordered: the wait used off x86 (no trusting of plain loads)
pytestmark = pytest.mark.timeout(120)
cloudpickle.register_pickle_by_value(sys.modules[__name__])  # Ray workers cannot import this test module by name


def memfd_count() -> int:
    """This process's open descriptors of shared-memory-channel memfds (mmap holds a duplicate of each)."""
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            n += os.readlink(f"/proc/self/fd/{fd}").startswith("/memfd:raysampler")
        except OSError:
            pass
    return n


class ChannelHost:
    """A worker actor serving one channel: requests are (op, value) pairs."""

    def open(self, kind: str) -> tuple[Any, bytes]:
        if kind == "shm-ordered":
            shm_channel.SPIN_SAFE = False  # this actor serves only this channel
        if kind == "tcp":
            self.server = ChannelServer(self.handle, "127.0.0.1")
        else:
            self.server = ShmChannelServer(self.handle, "test")
        return self.server.address, self.server.token

    def handle(self, request: tuple[str, Any]) -> Any:
        op, value = request
        if op == "echo":
            return value
        if op == "step":  # like a DG-LMC worker: a reply computed from the message's θ
            return [(m.phi * 2.0, m.n_steps + 1) for m in value]
        if op == "raise":
            raise ValueError(value)
        if op == "sleep":
            time.sleep(value)
            return None
        if op == "unpicklable":
            return threading.Lock()
        raise KeyError(op)

    def memfds(self) -> int:
        return memfd_count()

    def serving(self) -> bool:
        return self.server.thread.is_alive()


@pytest.fixture(scope="module")
def hosts() -> Any:
    """Channel-serving actors, one per kind, made on first use and shared by the tests that leave theirs alive:
    each such test opens a fresh channel on it (an actor's start is most of such a test's time)."""
    import ray

    actors: dict[str, Any] = {}
    yield actors
    if ray.is_initialized():
        for actor in actors.values():
            ray.kill(actor)


def shared_host(ray: Any, kind: str, hosts: dict[str, Any]) -> Any:
    """The kind's shared ChannelHost actor (started on first use)."""
    if kind not in hosts:
        hosts[kind] = ray.remote(num_cpus=0)(ChannelHost).remote()
    return hosts[kind]


def open_channel(
    ray: Any, kind: str, monkeypatch: pytest.MonkeyPatch | None, hosts: dict[str, Any] | None = None
) -> tuple[Any, Any]:
    """A channel of `kind` to a ChannelHost actor: a new one, or the kind's shared one from `hosts`."""
    if kind == "shm-ordered":  # read at each receive
        monkeypatch.setattr(shm_channel, "SPIN_SAFE", False)
    actor = ray.remote(num_cpus=0)(ChannelHost).remote() if hosts is None else shared_host(ray, kind, hosts)
    address, token = ray.get(actor.open.remote(kind), timeout=60)
    client = ChannelClient(tuple(address), token) if kind == "tcp" else ShmChannelClient(address, token)
    return actor, client


def round_trip(client: Any, request: Any) -> Any:
    client.send(request)
    return client.receive()


def wait_for(predicate: Any, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


@pytest.mark.parametrize("kind", KINDS)
def test_numpy_payloads_round_trip_exactly(ray_session, hosts, kind, monkeypatch):
    _, client = open_channel(ray_session, kind, monkeypatch, hosts)
    rng = np.random.default_rng(0)
    try:
        msgs = [Message(phi=rng.standard_normal((4, 31)), n_steps=i, warmup=False) for i in range(2)]
        for _ in range(3):  # several rounds over the same regions
            reply = round_trip(client, ("step", msgs))
            for (z, n), m in zip(reply, msgs):
                np.testing.assert_array_equal(z, m.phi * 2.0)
                assert n == m.n_steps + 1
        # larger than a region's initial size, both ways: the regions grow, and shrink back to small messages
        big = rng.standard_normal(3 * shm_channel.INITIAL_BYTES // 8 + 17)
        back = round_trip(client, ("echo", big))
        np.testing.assert_array_equal(back, big)
        small = round_trip(client, ("echo", np.arange(3.0)))
        np.testing.assert_array_equal(small, np.arange(3.0))
        back[:] = 0.0  # a reply is the caller's own copy: writable, and untouched by later messages
        np.testing.assert_array_equal(small, np.arange(3.0))
    finally:
        client.close()


@pytest.mark.parametrize("kind", KINDS)
def test_two_requests_in_flight_are_answered_in_order(ray_session, hosts, kind, monkeypatch):
    """A pipelined round sends its second half before the first's reply is read: two messages in flight each way
    (the shared-memory channel's two slots per direction), over and over."""
    _, client = open_channel(ray_session, kind, monkeypatch, hosts)
    try:
        for i in range(5):
            client.send(("echo", np.full(3, 2.0 * i)))
            client.send(("echo", np.full(10_000, 2.0 * i + 1)))  # grows a slot while the other holds a message
            np.testing.assert_array_equal(client.receive(), np.full(3, 2.0 * i))
            np.testing.assert_array_equal(client.receive(), np.full(10_000, 2.0 * i + 1))
    finally:
        client.close()


@pytest.mark.parametrize("kind", KINDS)
def test_worker_exception_is_raised_on_the_coordinator_and_the_channel_goes_on(ray_session, hosts, kind, monkeypatch):
    _, client = open_channel(ray_session, kind, monkeypatch, hosts)
    try:
        client.send(("raise", "shard 3 has NaN"))
        with pytest.raises(WorkerFailed, match="ValueError: shard 3 has NaN") as info:
            client.receive()
        assert "in handle" in info.value.failure.traceback
        client.send(("unpicklable", None))
        with pytest.raises((WorkerFailed, ConnectionError)):
            client.receive()
        if kind != "tcp":  # the shared-memory server turns an unpicklable reply into an error and keeps serving
            assert round_trip(client, ("echo", 7)) == 7
    finally:
        client.close()


@pytest.mark.parametrize("kind", KINDS)
def test_killed_worker_is_noticed_within_seconds(ray_session, hosts, kind, monkeypatch):
    actor, client = open_channel(ray_session, kind, monkeypatch, hosts)
    hosts.pop(kind)  # this test kills it: a later test of this kind starts a new one
    try:
        assert round_trip(client, ("echo", 1)) == 1
        client.send(("sleep", 60.0))  # the coordinator waits on a long step when the worker is killed
        threading.Timer(0.5, lambda: ray_session.kill(actor)).start()
        t0 = time.monotonic()
        with pytest.raises(OSError):  # ConnectionError is an OSError
            client.receive()
        assert time.monotonic() - t0 < 5.0
        with pytest.raises(OSError):  # and the channel stays failed
            client.send(("echo", 2))
            client.receive()
    finally:
        client.close()


def dev_shm() -> set[str]:
    return set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()


def test_shm_channel_leaves_no_segments_after_close(ray_session, hosts):
    """Closing frees both ends' memory: on the shared actor every channel opened before is freed too."""
    before_shm, before_fds = dev_shm(), memfd_count()
    actor, client = open_channel(ray_session, "shm", None, hosts)
    try:
        assert memfd_count() > before_fds and ray_session.get(actor.memfds.remote()) > 0
        round_trip(client, ("echo", np.zeros(10**5)))  # grows both regions
        client.close()
        assert memfd_count() == before_fds
        assert wait_for(lambda: ray_session.get(actor.memfds.remote()) == 0, 5.0)
        # the serving thread frees the regions, then returns: read its end with the same patience
        assert wait_for(lambda: not ray_session.get(actor.serving.remote()), 5.0)
        assert not {n for n in dev_shm() - before_shm if "raysampler" in n}
    finally:
        client.close()


_CLIENT = """
import sys, time
from raysampler.runtime.shm_channel import ShmChannelClient
c = ShmChannelClient(bytes.fromhex(sys.argv[1]).decode(), bytes.fromhex(sys.argv[2]))
c.send(("echo", 5)); assert c.receive() == 5
print("ready", flush=True)
time.sleep(120)
"""


def test_shm_worker_frees_its_memory_when_the_coordinator_is_killed(ray_session, hosts):
    actor = shared_host(ray_session, "shm", hosts)
    address, token = ray_session.get(actor.open.remote("shm"), timeout=60)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    proc = subprocess.Popen(
        [sys.executable, "-c", _CLIENT, address.encode().hex(), token.hex()], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert proc.stdout.readline().strip() == "ready"
        assert ray_session.get(actor.memfds.remote()) > 0
        proc.kill()
        proc.wait(timeout=10)
        assert wait_for(lambda: ray_session.get(actor.memfds.remote()) == 0, 5.0)
        assert wait_for(lambda: not ray_session.get(actor.serving.remote()), 5.0)
    finally:
        proc.kill()


def test_shm_channel_refuses_a_wrong_token_and_still_serves_the_right_one(ray_session, hosts):
    actor = shared_host(ray_session, "shm", hosts)
    address, token = ray_session.get(actor.open.remote("shm"), timeout=60)
    with pytest.raises(ConnectionError):
        ShmChannelClient(address, bytes(len(token)))
    client = ShmChannelClient(address, token)
    assert round_trip(client, ("echo", "ok")) == "ok"
    client.close()
    with pytest.raises(OSError):  # one client per server: the address is gone once taken
        ShmChannelClient(address, token, timeout_s=2.0)
