"""How a round's messages travel between the coordinator and the worker actors (the `Transport` contract).

`SocketTransport` sends each round over a direct channel to every actor (the fast path): shared memory for an actor
on the coordinator's node, TCP for one on another node; `ActorTransport` uses plain Ray actor calls (the fallback
when a channel cannot be opened). Both deliver the same messages and raise `WorkerFailed` with the failing
process's record after draining the others. Side by side shared memory is faster than TCP, and plain actor calls
far slower than either (benchmarks/perf/transports.py; docs/performance.md, "Measurements behind choices in the
code").
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..errors import Failure, FailureKind, WorkerFailed
from .channel import ChannelClient
from .contracts import Broadcast, RoundTiming
from .frames import FrameWriter
from .links import RttMeter


def lost(group: Sequence[int], exc: BaseException) -> Failure:
    """The record of a worker process that died or became unreachable (first shard of its group)."""
    return Failure(
        FailureKind.WORKER_LOST,
        f"the worker process owning shards {list(group)} was lost ({type(exc).__name__}: {exc})",
        shard=group[0],
    )


def stalled(group: Sequence[int], deadline_s: float | None) -> Failure:
    """The record of a worker process whose link stayed silent past the link deadline (its site is unavailable)."""
    return Failure(
        FailureKind.SITE_UNAVAILABLE,
        f"the worker process owning shards {list(group)} did not answer within {deadline_s:g} s "
        "(RAYSAMPLER_LINK_DEADLINE_S): its link stalled or its node is gone",
        shard=group[0],
    )


def _run_meanwhile(meanwhile: Callable[[], None] | None, failures: list[Failure]) -> None:
    """The caller's own work for this round, done while the workers compute (its failure is recorded first)."""
    if meanwhile is not None:
        try:
            meanwhile()
        except WorkerFailed as exc:
            failures.append(exc.failure)


def _step(
    transport: SocketTransport | ActorTransport,
    per_group: Sequence[Any] | Broadcast,
    meanwhile: Callable[[], None] | None,
) -> tuple[list[tuple[Any, Any]], RoundTiming]:
    """One round: send, the caller's own work meanwhile (its failure is reported first), collect."""
    transport.send(per_group)
    t0 = time.perf_counter()
    failures: list[Failure] = []
    _run_meanwhile(meanwhile, failures)
    hosted = time.perf_counter() - t0
    try:
        parts, timing = transport.collect()
    except WorkerFailed as exc:
        failures.append(exc.failure)
    if failures:
        raise WorkerFailed(failures[0])
    timing.hosted_s = hosted
    return parts, timing


def _messages(per_group: Sequence[Any] | Broadcast, n: int) -> list[Any]:
    """One message per process: `per_group` itself, or the broadcast value n times."""
    return [per_group.value] * n if isinstance(per_group, Broadcast) else list(per_group)


def _owned(failure: Failure, group: Sequence[int]) -> Failure:
    """A failure reported by a process, attributed to its first shard when the record names none."""
    return failure.at(shard=group[0])


class SocketTransport:
    """One direct channel per actor, opened at construction: shared memory where `local[i]` (the actor shares the
    coordinator's node; both readers watch for `spin_s` before sleeping), TCP otherwise (raises OSError if any
    cannot be opened). `kinds` says which each got."""

    name = "socket"

    def __init__(
        self,
        actors: Sequence[Any],
        groups: Sequence[Sequence[int]],
        timeout_s: float,
        local: Sequence[bool] | None = None,
        spin_s: float = 0.0,
        deadline_s: float | None = None,
    ) -> None:
        import ray

        from .shm_channel import ShmChannelClient

        self.groups = [list(g) for g in groups]
        self.deadline_s = deadline_s
        self.writer = FrameWriter()  # one for every channel: a broadcast is encoded once
        self.meter: RttMeter | None = None  # each process's RTT, measured on its rounds (set by the pool)
        self._pending: deque[tuple[list[tuple[int, list[int], Any, float]], list[Failure], RoundTiming]] = deque()
        local = list(local) if local is not None else [False] * len(actors)
        opened = ray.get(
            [a.open_channel.remote("shm" if near else "tcp", spin_s) for a, near in zip(actors, local)],
            timeout=timeout_s,
        )
        self.channels: list[Any] = []
        self.kinds: list[str] = []
        try:
            for kind, addr, token in opened:
                self.channels.append(
                    ShmChannelClient(addr, token, spin_s=spin_s)
                    if kind == "shm"
                    else ChannelClient(tuple(addr), token, deadline_s=deadline_s)
                )
                self.kinds.append(kind)
        except BaseException:
            self.close()
            raise

    def send(self, per_group: Sequence[Any] | Broadcast) -> None:
        """Send each process its message (every worker starts before any reply is awaited); `collect` reads the
        replies. At most two sends may be outstanding (a pipelined round's two chain groups)."""
        timing = RoundTiming()
        failures: list[Failure] = []
        sent: list[tuple[int, list[int], Any, float]] = []  # (process, its shards, its channel, when it was sent)
        writer = self.writer
        common = None
        if not self.channels:  # every shard in the coordinator's process: nothing to send
            self._pending.append((sent, failures, timing))
            return
        if isinstance(per_group, Broadcast):  # encoded once, the same bytes to every process
            t0 = time.perf_counter()
            common = writer.encode(per_group.value)
            timing.encode_s = time.perf_counter() - t0
        for k, (g, c) in enumerate(zip(self.groups, self.channels)):
            t0 = time.perf_counter()
            if common is None:  # sent before the next is encoded: the writer reuses its buffer per layout
                assert not isinstance(per_group, Broadcast)
                layout, payload = writer.encode(per_group[k])
            else:
                layout, payload = common
            t1 = time.perf_counter()
            try:
                c.send_frame(writer.head(c, layout, len(payload)), payload)
                sent.append((k, g, c, time.perf_counter()))
            except TimeoutError:
                failures.append(stalled(g, self.deadline_s))
            except OSError as exc:
                failures.append(lost(g, exc))
            timing.encode_s += t1 - t0
            timing.send_s += time.perf_counter() - t1
        self._pending.append((sent, failures, timing))

    def collect(self) -> tuple[list[tuple[Any, Any]], RoundTiming]:
        """The replies to the oldest outstanding `send`, one per process, and where its time went. Every channel it
        went to is drained, even after a failure; then WorkerFailed for the first."""
        sent, failures, timing = self._pending.popleft()
        parts = []
        for k, g, c, t_sent in sent:
            try:
                t = time.perf_counter()
                c.wait()
                t_in = time.perf_counter()
                timing.wait_s += t_in - t
                part = c.receive()
                parts.append(part)
                timing.receive_s += time.perf_counter() - t_in
                if self.meter is not None:
                    self.meter.observe(k, t_in - t_sent, float(np.sum(part[1])))
            except WorkerFailed as exc:
                failures.append(_owned(exc.failure, g))
            except TimeoutError:
                failures.append(stalled(g, self.deadline_s))
            except (OSError, ConnectionError, EOFError) as exc:
                failures.append(lost(g, exc))
        if failures:
            raise WorkerFailed(failures[0])
        return parts, timing

    def step(
        self, per_group: Sequence[Any] | Broadcast, meanwhile: Callable[[], None] | None = None
    ) -> tuple[list[tuple[Any, Any]], RoundTiming]:
        return _step(self, per_group, meanwhile)

    def close(self) -> None:
        for c in self.channels:
            c.close()
            self.writer.forget(c)
        self.channels = []


class ActorTransport:
    """Plain Ray actor calls, one per actor per round."""

    name = "actor"

    def __init__(self, actors: Sequence[Any], groups: Sequence[Sequence[int]], deadline_s: float | None = None) -> None:
        self.actors, self.groups = list(actors), [list(g) for g in groups]
        self.deadline_s = deadline_s
        self.meter: RttMeter | None = None  # each process's RTT, measured on its rounds (set by the pool)
        self._pending: deque[tuple[list[Any], RoundTiming, float]] = deque()

    def send(self, per_group: Sequence[Any] | Broadcast) -> None:
        timing = RoundTiming()
        t0 = time.perf_counter()
        refs = [a.step.remote(m) for a, m in zip(self.actors, _messages(per_group, len(self.actors)))]
        timing.send_s = time.perf_counter() - t0  # Ray pickles each call's arguments as it sends them
        self._pending.append((refs, timing, t0))

    def collect(self) -> tuple[list[tuple[Any, Any]], RoundTiming]:
        import ray

        refs, timing, t_sent = self._pending.popleft()
        t0 = time.perf_counter()
        failures: list[Failure] = []
        parts = []
        for k, (g, ref) in enumerate(zip(self.groups, refs)):
            try:
                part = ray.get(ref, timeout=self.deadline_s)
                parts.append(part)
                if self.meter is not None:
                    self.meter.observe(k, time.perf_counter() - t_sent, float(np.sum(part[1])))
            except ray.exceptions.RayTaskError as exc:
                cause = exc.cause
                failures.append(
                    _owned(cause.failure, g)
                    if isinstance(cause, WorkerFailed)
                    else Failure(FailureKind.WORKER_ERROR, f"{type(cause).__name__}: {cause}", shard=g[0])
                )
            except ray.exceptions.GetTimeoutError:
                failures.append(stalled(g, self.deadline_s))
            except ray.exceptions.RayError as exc:  # the actor died (its process, or its node)
                failures.append(lost(g, exc))
        timing.wait_s = time.perf_counter() - t0
        if failures:
            raise WorkerFailed(failures[0])
        return parts, timing

    def step(
        self, per_group: Sequence[Any] | Broadcast, meanwhile: Callable[[], None] | None = None
    ) -> tuple[list[tuple[Any, Any]], RoundTiming]:
        return _step(self, per_group, meanwhile)

    def close(self) -> None:
        pass
