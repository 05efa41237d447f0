"""Runs across slow links (tests/support/wan_harness.py): the delaying relay on its own, on loopback (no root needed),
and one short DG-LMC run with breast_cancer at two sites behind a 50 ms one-way link, whose rounds must each take at
least the link's round trip: proof that the round channel crosses the delay."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.wan_harness import EchoServer, Link, LoopbackRelay, unavailable, wan_cluster

DELAY_S = 0.05  # one way, on the loopback relay


def _round_trip(port: int, size: int = 64) -> float:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        t0 = time.perf_counter()
        s.sendall(b"x" * size)
        got = b""
        while len(got) < size:
            got += s.recv(size)
        return time.perf_counter() - t0


def test_the_relay_delays_each_way_keeps_the_bytes_and_stalls_when_paused():
    with EchoServer() as echo, LoopbackRelay(("127.0.0.1", echo.port), DELAY_S) as relay:
        assert _round_trip(relay.port) >= 2 * DELAY_S  # a lower bound: the delay is on both directions
        data = os.urandom((1 << 20) + 7)  # many chunks in flight at a time, and a half-close after it
        with socket.create_connection(("127.0.0.1", relay.port), timeout=10) as s:
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
            back = bytearray()
            while chunk := s.recv(1 << 16):
                back += chunk
        assert back == data
        relay.pause(0.3)
        time.sleep(0.01)  # the pause is applied on the relay's loop
        assert _round_trip(relay.port) >= 0.3


def test_bytes_in_flight_do_not_wait_for_one_another_and_the_cap_spaces_them():
    link = Link(delay_s=0.1)
    assert [link.due("up", 65536, t) for t in (0.0, 0.001, 0.002)] == pytest.approx([0.1, 0.101, 0.102])
    capped = Link(delay_s=0.1, bandwidth=1e6)  # 1 MB/s: a 100 kB chunk takes 0.1 s on the wire
    assert [capped.due("up", 100_000, 0.0) for _ in range(3)] == pytest.approx([0.2, 0.3, 0.4])
    assert capped.due("down", 100_000, 0.0) == pytest.approx(0.2)  # each direction has its own wire
    jittered = Link(delay_s=0.1, jitter_s=0.02)  # jitter only adds: the delay is each chunk's floor
    dues = [jittered.due("up", 1, 0.0) for _ in range(200)]
    assert all(0.1 <= d <= 0.12 for d in dues) and max(dues) - min(dues) > 0.01


JITTER_S = 0.03  # the most the jittered link adds each way
RATE = 2e6  # bytes/s each way, on the capped link


@pytest.mark.slow
def test_jitter_only_adds_delay_and_keeps_the_order_and_the_cap_bounds_a_bulk_transfer():
    with EchoServer() as echo, LoopbackRelay(("127.0.0.1", echo.port), DELAY_S, jitter_s=JITTER_S) as relay:
        trips = [_round_trip(relay.port) for _ in range(12)]
        assert all(2 * DELAY_S <= t <= 2 * (DELAY_S + JITTER_S) + 0.05 for t in trips), trips
        assert max(trips) - min(trips) > JITTER_S / 4, trips  # the draws do vary
        # numbered messages written a few ms apart, each its own chunk with its own draw: none may overtake another
        with socket.create_connection(("127.0.0.1", relay.port), timeout=10) as s:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sent = b"".join(i.to_bytes(4, "big") for i in range(100))
            for i in range(0, len(sent), 4):
                s.sendall(sent[i : i + 4])
                time.sleep(0.002)
            s.shutdown(socket.SHUT_WR)
            back = bytearray()
            while chunk := s.recv(1 << 16):
                back += chunk
        assert back == sent
    size = 1_000_000  # 0.5 s on each way's wire at RATE
    with EchoServer() as echo, LoopbackRelay(("127.0.0.1", echo.port), 0.01, bandwidth=RATE) as relay:
        data = os.urandom(size)
        with socket.create_connection(("127.0.0.1", relay.port), timeout=10) as s:
            t0 = time.perf_counter()
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
            back = bytearray()
            while chunk := s.recv(1 << 16):
                back += chunk
            took = time.perf_counter() - t0
    assert back == data
    # each way's wire carries the bytes at RATE (the echo overlaps the two), plus the delay both ways
    assert size / RATE + 2 * 0.01 <= took <= 3 * size / RATE + 1.0, took


# ---- a run across the delayed links (root, `ip netns` and iptables; Ray nodes in namespaces of their own)

ONE_WAY_MS = 50.0


def drive(model: Any, shards: list[Any], **kw: Any) -> dict[str, Any]:
    """At the head (Wan.run_python): one run on Ray; what the test checks."""
    import raysampler as rs

    res = rs.sample(model, shards, executor="ray", progress=False, **kw)
    st = res.run_stats
    assert st is not None and res.setup is not None
    trips = st.trips
    return {
        "rounds": int(st.rounds),
        "round_time": np.asarray(st.round_time, dtype=float),
        "sites": [p.site for p in st.placement],
        "transport": res.setup.transport,
        "draws": res.draws.shape,
        "trips": {k: int(getattr(trips, k)) for k in TRIP_PHASES} | {"total": trips.total},
        "rtt_s": [link.rtt_s for link in st.links],
    }


TRIP_PHASES = ("setup", "warmup", "sampling", "capture")


@pytest.mark.slow
@pytest.mark.cluster
def test_a_run_across_slow_links_completes_and_each_round_pays_the_round_trip(tmp_path: Path):
    reason = unavailable()
    if reason is not None:
        pytest.skip(reason)
    import raysampler as rs

    X, y = rs.datasets.load("breast_cancer")
    shards = []
    for site, Xi, yi in zip("ab", np.array_split(X, 2), np.array_split(y, 2)):
        path = tmp_path / f"{site}.npz"  # each site's half, read only by the worker on that site's node
        np.savez(path, X=Xi, y=yi)
        shards.append(rs.Shard(path=str(path), site=site))
    kw = dict(chains=4, num_rounds=30, burn_in=10, seed=0)
    with wan_cluster(("a", "b"), delay_ms=ONE_WAY_MS) as wan:
        rtt_s = wan.rtt_ms("a") / 1000.0
        assert rtt_s >= 2 * ONE_WAY_MS / 1000.0
        out = wan.run_python(
            "test_wan:drive",
            {"model": rs.models.LogisticRegression(prior_scale=1.0), "shards": shards, **kw},
            path=[Path(__file__).parent],
            timeout_s=240,
        )
    assert out["sites"] == ["a", "b"] and out["transport"] == "socket"
    assert out["rounds"] == 40 and out["draws"] == (4, 30, X.shape[1])  # burn-in rounds, then the kept ones
    assert np.median(out["round_time"]) >= 2 * ONE_WAY_MS / 1000.0  # a lower bound: the round crosses the link
    trips = out["trips"]  # RunStats.trips: the coordinator's round trips to its workers, by phase
    assert (trips["warmup"], trips["sampling"]) == (10, 30) and 0 < trips["setup"] <= 15, trips
    assert trips["total"] == sum(trips[k] for k in TRIP_PHASES)
    # each site's RTT, measured on its round channel, is the link's: at least the delay both ways
    assert len(out["rtt_s"]) == 2 and all(r is not None and r >= 2 * ONE_WAY_MS / 1000.0 * 0.95 for r in out["rtt_s"])
