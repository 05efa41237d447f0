"""How a round's messages travel between the coordinator and the worker actors (the `Transport` contract).

`SocketTransport` sends each round over a direct channel to every actor (the fast path): shared memory for an actor
on the coordinator's node, TCP for one on another node; `ActorTransport` uses plain Ray actor calls (the fallback
when a channel cannot be opened). Both deliver the same messages and raise `WorkerFailed` with the failing
process's record after draining the others. Measured side by side (benchmarks/perf/transports.py, b = 4 shards on 2
workers, DG-LMC messages): shared memory 0.82× the TCP round time, plain actor calls 5.4×.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..errors import Failure, FailureKind, WorkerFailed
from .channel import ChannelClient


def lost(group: Sequence[int], exc: BaseException) -> Failure:
    """The record of a worker process that died or became unreachable (first shard of its group)."""
    return Failure(
        FailureKind.WORKER_LOST,
        f"the worker process owning shards {list(group)} was lost ({type(exc).__name__}: {exc})",
        shard=group[0],
    )


def _run_meanwhile(meanwhile: Callable[[], None] | None, failures: list[Failure]) -> None:
    """The caller's own work for this round, done while the workers compute (its failure is recorded first)."""
    if meanwhile is not None:
        try:
            meanwhile()
        except WorkerFailed as exc:
            failures.append(exc.failure)


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
    ) -> None:
        import ray

        from .shm_channel import ShmChannelClient

        self.groups = [list(g) for g in groups]
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
                    ShmChannelClient(addr, token, spin_s=spin_s) if kind == "shm" else ChannelClient(tuple(addr), token)
                )
                self.kinds.append(kind)
        except BaseException:
            self.close()
            raise

    def step(
        self, per_group: Sequence[Sequence[Any]], meanwhile: Callable[[], None] | None = None
    ) -> list[tuple[list[Any], list[float]]]:
        failures: list[Failure] = []
        sent = []
        for g, c, m in zip(self.groups, self.channels, per_group):
            try:
                c.send(m)  # every worker starts before any reply is awaited
                sent.append((g, c))
            except OSError as exc:
                failures.append(lost(g, exc))
        _run_meanwhile(meanwhile, failures)
        parts = []
        for g, c in sent:
            try:
                parts.append(c.receive())  # drain every channel, even after a failure
            except WorkerFailed as exc:
                failures.append(_owned(exc.failure, g))
            except (OSError, ConnectionError, EOFError) as exc:
                failures.append(lost(g, exc))
        if failures:
            raise WorkerFailed(failures[0])
        return parts

    def close(self) -> None:
        for c in self.channels:
            c.close()
        self.channels = []


class ActorTransport:
    """Plain Ray actor calls, one per actor per round."""

    name = "actor"

    def __init__(self, actors: Sequence[Any], groups: Sequence[Sequence[int]]) -> None:
        self.actors, self.groups = list(actors), [list(g) for g in groups]

    def step(
        self, per_group: Sequence[Sequence[Any]], meanwhile: Callable[[], None] | None = None
    ) -> list[tuple[list[Any], list[float]]]:
        import ray

        refs = [a.step.remote(m) for a, m in zip(self.actors, per_group)]
        failures: list[Failure] = []
        _run_meanwhile(meanwhile, failures)
        parts = []
        for g, ref in zip(self.groups, refs):
            try:
                parts.append(ray.get(ref))
            except ray.exceptions.RayTaskError as exc:
                cause = exc.cause
                failures.append(
                    _owned(cause.failure, g)
                    if isinstance(cause, WorkerFailed)
                    else Failure(FailureKind.WORKER_ERROR, f"{type(cause).__name__}: {cause}", shard=g[0])
                )
            except ray.exceptions.RayError as exc:  # the actor died (its process, or its node)
                failures.append(lost(g, exc))
        if failures:
            raise WorkerFailed(failures[0])
        return parts

    def close(self) -> None:
        pass
