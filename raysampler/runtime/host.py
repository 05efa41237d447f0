"""ShardHost: owns some shards, their data, random streams and algorithm states; runs worker functions on them.

The same class serves the in-process executor and, wrapped in a Ray actor, the distributed one: data is
loaded where the host lives (from a file path the host reads itself, or from the object store).
"""
from __future__ import annotations

import time
from typing import Any, Callable, Sequence

import numpy as np

from ..algorithms.base import Algorithm
from ..models.base import Model
from ..streams import ChainNoise


def load_source(source: Any) -> tuple[np.ndarray, np.ndarray]:
    """(X, y) from a Shard (in memory or a file path), an (X, y) pair, or a Ray ObjectRef to an (X, y) pair."""
    if hasattr(source, "load"):
        return source.load()
    if type(source).__name__ == "ObjectRef":
        import ray

        return ray.get(source)
    X, y = source
    return X, y


class ShardFailure(RuntimeError):
    """Shard `shard`'s local step raised; the message names the shard and the original error."""

    def __init__(self, shard: int, cause: BaseException) -> None:
        super().__init__(f"shards[{shard}]: {type(cause).__name__}: {cause}")
        self.shard = shard

    def __reduce__(self):
        return (RuntimeError, (str(self),))


class ShardHost:
    """Shards `shard_ids` with their data; worker states and noise streams are created by `init_states`."""

    def __init__(self, shard_ids: Sequence[int], sources: Sequence[Any], model: Model, algorithm: Algorithm,
                 seed: int, chains: int) -> None:
        self.shard_ids = list(shard_ids)
        self.data = [load_source(s) for s in sources]
        self.model = model
        self.algorithm = algorithm
        self.seed, self.chains = seed, chains
        self.states: list[Any] = []
        self.noises: list[ChainNoise] = []
        self.slowdown = {i: 1.0 for i in self.shard_ids}

    def describe(self) -> list[dict]:
        """Shape and label facts of each shard, so the coordinator can fix the model's dimension."""
        out = []
        for i, (X, y) in zip(self.shard_ids, self.data):
            X, y = np.asarray(X), np.asarray(y)
            finite_y = y.size == 0 or bool(np.all(np.isfinite(y))) if y.dtype.kind in "fc" else True
            out.append({
                "shard": i, "n_rows": int(X.shape[0]) if X.ndim else 0, "x_shape": tuple(X.shape),
                "y_shape": tuple(y.shape), "finite": bool(np.all(np.isfinite(X))) and finite_y,
                "y_max": float(np.max(y)) if y.size and y.dtype.kind in "iuf" and np.all(np.isfinite(y)) else None,
            })
        return out

    def bind(self, model: Model) -> None:
        """Adopt the bound model and check every shard against it (errors name the shard)."""
        for i, (X, y) in zip(self.shard_ids, self.data):
            model.validate(np.asarray(X), np.asarray(y), argname=f"shards[{i}]")
        self.model = model

    def map(self, fn: Callable[..., Any], args: Sequence[tuple]) -> list[Any]:
        return [fn(self.model, X, y, *a) for (X, y), a in zip(self.data, args)]

    def init_states(self, payloads: Sequence[Any]) -> None:
        d = self.model.dim
        self.noises = [ChainNoise(self.seed, self.chains, role=i + 1, dim=d) for i in self.shard_ids]
        self.states = []
        for i, p, (X, y) in zip(self.shard_ids, payloads, self.data):
            try:
                self.states.append(self.algorithm.worker_init(p, self.model, X, y))
            except (ValueError, FloatingPointError) as exc:
                raise type(exc)(f"shards[{i}]: {exc}") from None

    def calibrate(self, repeats: int = 3) -> list[float]:
        """Seconds per model evaluation (U_i and ∇U_i for the K chains) on each shard, slowdown included: the
        τ_i estimate taken before sampling. Touches no chain state or random stream."""
        x = np.zeros((self.chains, self.model.dim))
        out = []
        for i, (X, y) in zip(self.shard_ids, self.data):
            best = float("inf")
            for _ in range(repeats):
                t0 = time.perf_counter()
                self.model.potential_and_grad(X, y, x)
                best = min(best, time.perf_counter() - t0)
            out.append(best * self.slowdown[i])
        return out

    def set_slowdown(self, factors: dict[int, float]) -> None:
        """Test hook: shard i's local work takes `factors[i]` times as long (the host sleeps the difference)."""
        self.slowdown.update({int(k): float(v) for k, v in factors.items() if int(k) in self.slowdown})

    def open_channel(self) -> tuple[tuple[str, int], bytes]:
        """Serve `step` over a direct TCP channel (the round loop's fast path): (address, token) to connect with."""
        import ray

        from .channel import ChannelServer

        self._channel = ChannelServer(self.step, ray.util.get_node_ip_address())
        return self._channel.address, self._channel.token

    def step(self, messages: Sequence[Any]) -> tuple[list[Any], list[float]]:
        """One local step on every shard: (replies, seconds of work per shard)."""
        replies, times = [], []
        for j, (msg, (X, y)) in enumerate(zip(messages, self.data)):
            t0 = time.perf_counter()
            try:
                self.states[j], reply = self.algorithm.worker_step(self.states[j], msg, self.model, X, y, self.noises[j])
            except Exception as exc:
                raise ShardFailure(self.shard_ids[j], exc) from exc
            factor = self.slowdown[self.shard_ids[j]]
            if factor != 1.0:
                time.sleep((factor - 1.0) * (time.perf_counter() - t0))
            times.append(time.perf_counter() - t0)
            replies.append(reply)
        return replies, times
