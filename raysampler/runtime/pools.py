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


class RayPool:
    """Shards spread over Ray actors (no more actors than CPUs; an actor may own several shards).

    Each actor loads its shards itself: from a file path, or from an object-store reference, so the data
    never passes through the coordinator. Messages go by value, one call per actor per round.
    """

    parallel = True

    def __init__(self, sources: Sequence[Any], model: Model, algorithm: Algorithm, seed: int, chains: int,
                 max_actors: int | None = None) -> None:
        import ray

        self.num_shards = len(sources)
        n_actors = max(1, min(self.num_shards, max_actors or _available_cpus()))
        self.groups = [list(map(int, g)) for g in np.array_split(np.arange(self.num_shards), n_actors)]
        from .executors import WORKER_ENV

        actor_cls = ray.remote(num_cpus=1, max_concurrency=1, runtime_env={"env_vars": WORKER_ENV})(ShardHost)
        self.actors = [actor_cls.remote(g, [sources[i] for i in g], model, algorithm, seed, chains) for g in self.groups]
        self._ray = ray

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
        for a in self.actors:
            self._ray.kill(a)
        self.actors = []


def _available_cpus() -> int:
    import ray

    cpus = int(ray.cluster_resources().get("CPU", 0)) or (os.cpu_count() or 1)
    return max(1, cpus)
