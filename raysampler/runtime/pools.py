"""Worker pools: the same five calls (describe, bind, map, init_states, step), in-process or on Ray actors."""
from __future__ import annotations

import os
from typing import Any, Callable, Sequence

import numpy as np

from ..algorithms.base import Algorithm
from ..models.base import Model
from .channel import WorkerFailure
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

    def calibrate(self) -> np.ndarray:
        return np.asarray(self.host.calibrate())

    def step(self, messages: Sequence[Any]) -> tuple[list[Any], np.ndarray, np.ndarray]:
        """Replies, per-shard work seconds, and per-shard busy seconds of the process that ran it."""
        replies, times = self.host.step(messages)
        times = np.asarray(times)
        return replies, times, np.full(self.num_shards, times.sum())

    def close(self) -> None:
        pass


TRANSPORTS = ("socket", "actor")
#: Seconds the worker actors may take to start and load their shards before setup gives up.
STARTUP_TIMEOUT_S = float(os.environ.get("RAYSAMPLER_STARTUP_TIMEOUT_S", 300))


class WorkerError(RuntimeError):
    """A worker raised or died during a round; `shards` lists the shards it owned (None if unknown)."""

    def __init__(self, shards: list[int] | None, cause: BaseException) -> None:
        where = f"worker owning shards {shards}" if shards is not None else "a worker"
        super().__init__(f"{where} failed: {cause}")
        self.shards = shards


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
        free = _available_cpus()
        if max_actors is not None and max_actors > free:
            raise ValueError(f"max_actors={max_actors} but the Ray cluster has {free} free CPU(s): each worker actor "
                             "needs one (lower max_actors, or free CPUs)")
        n_actors = max(1, min(self.num_shards, max_actors or free))
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
            opened = self._ray.get([a.open_channel.remote() for a in self.actors], timeout=STARTUP_TIMEOUT_S)
            self.channels = [ChannelClient(tuple(addr), token) for addr, token in opened]
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
        """First contact: the actors must start (and load their shards) within STARTUP_TIMEOUT_S."""
        refs = [a.describe.remote() for a in self.actors]
        try:
            parts = self._ray.get(refs, timeout=STARTUP_TIMEOUT_S)
        except self._ray.exceptions.GetTimeoutError:
            raise TimeoutError(f"worker actors did not start within {STARTUP_TIMEOUT_S:.0f} s: the Ray cluster may "
                               "lack free CPUs (each worker actor needs one) or the shards may be slow to load") from None
        return [d for part in parts for d in part]

    def bind(self, model: Model) -> None:
        self._all("bind", [(model,)] * len(self.actors))

    def map(self, fn: Callable[..., Any], args: Sequence[tuple]) -> list[Any]:
        return [r for part in self._all("map", [(fn, a) for a in self._split(args)]) for r in part]

    def init_states(self, payloads: Sequence[Any]) -> None:
        self._all("init_states", [(p,) for p in self._split(payloads)])

    def set_slowdown(self, factors: dict[int, float]) -> None:
        self._all("set_slowdown", [(factors,)] * len(self.actors))

    def calibrate(self) -> np.ndarray:
        return np.asarray([t for part in self._all("calibrate", [()] * len(self.actors)) for t in part])

    def step(self, messages: Sequence[Any]) -> tuple[list[Any], np.ndarray, np.ndarray]:
        """One round on every actor. A worker that raises or dies makes this raise WorkerError naming its shards;
        the pool is then closed (a half-finished round cannot be resumed)."""
        if self.channels:
            failures = []
            for g, c, m in zip(self.groups, self.channels, self._split(messages)):
                try:
                    c.send(m)  # every worker starts before any reply is awaited
                except OSError as exc:
                    failures.append((g, exc))
            parts = []
            for g, c in zip(self.groups, self.channels):
                try:
                    parts.append(c.receive())  # drain every channel, even after a failure
                except (OSError, ConnectionError, WorkerFailure) as exc:
                    failures.append((g, exc))
            if failures:
                self.close()
                g, exc = failures[0]
                raise WorkerError(g, exc)
        else:
            try:
                parts = self._ray.get([a.step.remote(m) for a, m in zip(self.actors, self._split(messages))])
            except self._ray.exceptions.RayError as exc:
                self.close()
                raise WorkerError(None, exc) from None
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

    return max(1, int(ray.available_resources().get("CPU", 0)))
