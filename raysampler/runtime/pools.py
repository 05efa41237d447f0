"""Worker pools: the same five calls (describe, bind, map, init_states, step), in-process or on Ray actors."""
from __future__ import annotations

import os
from typing import Any, Callable, Sequence

import numpy as np

from ..algorithms.base import Algorithm
from ..models.base import Model
from .host import ShardHost


class LocalPool:
    """All shards in this process, stepped one after another."""

    parallel = False

    def __init__(self, sources: Sequence[Any], model: Model, algorithm: Algorithm, seed: int, chains: int) -> None:
        self.num_shards = len(sources)
        self.host = ShardHost(range(self.num_shards), sources, model, algorithm, seed, chains)
        self.groups = [list(range(self.num_shards))]

    def describe(self) -> list[dict]:
        return self.host.describe()

    def bind(self, model: Model) -> None:
        self.host.bind(model)

    def map(self, fn: Callable[..., Any], args: Sequence[tuple]) -> list[Any]:
        return self.host.map(fn, args)

    def init_states(self, payloads: Sequence[Any]) -> None:
        self.host.init_states(payloads)

    def set_slowdown(self, factors: dict[int, float]) -> None:
        self.host.set_slowdown(factors)

    def step(self, messages: Sequence[Any]) -> tuple[list[Any], np.ndarray, np.ndarray]:
        """Replies, per-shard work seconds, and per-shard busy seconds of the process that ran it."""
        replies, times = self.host.step(messages)
        times = np.asarray(times)
        return replies, times, np.full(self.num_shards, times.sum())

    def close(self) -> None:
        pass


TRANSPORTS = ("socket", "actor")


class RayPool:
    """Shards spread over Ray actors (no more actors than CPUs; an actor may own several shards).

    Each actor loads its shards itself: from a file path, or from an object-store reference, so the data
    never passes through the coordinator. Round messages go by value, one request per actor per round, over
    a direct TCP channel (`transport="socket"`, the fast path) or as plain actor calls (`"actor"`, also the
    fallback when a channel cannot be opened).
    """

    parallel = True

    def __init__(self, sources: Sequence[Any], model: Model, algorithm: Algorithm, seed: int, chains: int,
                 max_actors: int | None = None, transport: str = "socket") -> None:
        import ray

        self.num_shards = len(sources)
        n_actors = max(1, min(self.num_shards, max_actors or _available_cpus()))
        self.groups = [list(map(int, g)) for g in np.array_split(np.arange(self.num_shards), n_actors)]
        from .executors import WORKER_ENV

        actor_cls = ray.remote(num_cpus=1, max_concurrency=1, runtime_env={"env_vars": WORKER_ENV})(ShardHost)
        self.actors = [actor_cls.remote(g, [sources[i] for i in g], model, algorithm, seed, chains) for g in self.groups]
        self._ray = ray
        self.channels: list[Any] = []
        self.transport = "actor"
        if transport == "socket":
            self._open_channels()

    def _open_channels(self) -> None:
        from .channel import ChannelClient

        try:
            addresses = self._ray.get([a.open_channel.remote() for a in self.actors])
            self.channels = [ChannelClient(tuple(addr)) for addr in addresses]
            self.transport = "socket"
        except (OSError, ConnectionError) as exc:  # e.g. a firewall between nodes: plain actor calls still work
            import warnings

            warnings.warn(f"raysampler: direct worker channels unavailable ({exc}); using plain actor calls")
            for c in self.channels:
                c.close()
            self.channels = []

    def _all(self, method: str, per_group: Sequence[tuple]) -> list[Any]:
        return self._ray.get([getattr(a, method).remote(*args) for a, args in zip(self.actors, per_group)])

    def _split(self, items: Sequence[Any]) -> list[list[Any]]:
        return [[items[i] for i in g] for g in self.groups]

    def describe(self) -> list[dict]:
        return [d for part in self._all("describe", [()] * len(self.actors)) for d in part]

    def bind(self, model: Model) -> None:
        self._all("bind", [(model,)] * len(self.actors))

    def map(self, fn: Callable[..., Any], args: Sequence[tuple]) -> list[Any]:
        return [r for part in self._all("map", [(fn, a) for a in self._split(args)]) for r in part]

    def init_states(self, payloads: Sequence[Any]) -> None:
        self._all("init_states", [(p,) for p in self._split(payloads)])

    def set_slowdown(self, factors: dict[int, float]) -> None:
        self._all("set_slowdown", [(factors,)] * len(self.actors))

    def step(self, messages: Sequence[Any]) -> tuple[list[Any], np.ndarray, np.ndarray]:
        if self.channels:
            for c, m in zip(self.channels, self._split(messages)):
                c.send(m)  # every worker starts before any reply is awaited
            parts = [c.receive() for c in self.channels]
        else:
            parts = self._ray.get([a.step.remote(m) for a, m in zip(self.actors, self._split(messages))])
        replies = [None] * self.num_shards
        times = np.empty(self.num_shards)
        busy = np.empty(self.num_shards)
        for g, (rep, tm) in zip(self.groups, parts):
            total = float(sum(tm))
            for j, i in enumerate(g):
                replies[i], times[i], busy[i] = rep[j], tm[j], total
        return replies, times, busy

    def close(self) -> None:
        for c in self.channels:
            c.close()
        self.channels = []
        for a in self.actors:
            self._ray.kill(a)
        self.actors = []


def _available_cpus() -> int:
    import ray

    cpus = int(ray.cluster_resources().get("CPU", 0)) or (os.cpu_count() or 1)
    return max(1, cpus)
