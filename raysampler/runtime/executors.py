"""Start a coordinator in-process ("local") or as a Ray actor that creates its own worker actors ("ray")."""
from __future__ import annotations

import os
from typing import Any, Sequence

from ..algorithms.base import Algorithm
from ..models.base import Model
from .coordinator import Coordinator, RunConfig
from .pools import LocalPool, RayPool

EXECUTORS = ("local", "ray")

#: Worker processes: single-threaded BLAS (one actor per core) and a malloc top pad so the hot loop's large
#: temporaries are not returned to the OS and page-faulted back every step (measured up to 2x).
WORKER_ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
              "MALLOC_TOP_PAD_": str(64 << 20)}


class CoordinatorHost:
    """The coordinator with its pool; in Ray mode this object lives inside the coordinator actor."""

    def start(self, executor: str, sources: Sequence[Any], model: Model, algorithm: Algorithm,
              config: RunConfig, max_actors: int | None = None, transport: str = "socket") -> None:
        """Create the worker pool and the coordinator (a method, not the constructor, so errors keep their type)."""
        if executor == "ray":
            pool = RayPool(sources, model, algorithm, config.seed, config.chains, max_actors=max_actors,
                           transport=transport)
        else:
            pool = LocalPool(sources, model, algorithm, config.seed, config.chains)
        self.coordinator = Coordinator(pool, model, algorithm, config)

    def call(self, method: str, *args: Any) -> Any:
        if method == "start":
            return self.start(*args)
        return getattr(self.coordinator, method)(*args)


class LocalHandle:
    """Calls the in-process coordinator directly, with BLAS held to one thread while it works.

    Multi-threaded BLAS on the sampler's small matrix products was measured 10–100× slower on 2 cores.
    """

    def __init__(self, host: CoordinatorHost) -> None:
        self.host = host

    def call(self, method: str, *args: Any) -> Any:
        from threadpoolctl import threadpool_limits

        with threadpool_limits(limits=1, user_api="blas"):
            return self.host.call(method, *args)

    def close(self) -> None:
        self.host.call("close")


class RayHandle:
    """Calls the coordinator actor; the caller talks to nothing else."""

    def __init__(self, actor: Any) -> None:
        import ray

        self.actor, self._ray = actor, ray

    def call(self, method: str, *args: Any) -> Any:
        try:
            return self._ray.get(self.actor.call.remote(method, *args))
        except self._ray.exceptions.RayTaskError as exc:
            raise exc.as_instanceof_cause() from None  # the coordinator's own exception type and message

    def close(self) -> None:
        try:
            self._ray.get(self.actor.call.remote("close"))
        except Exception:
            pass  # closing must not mask the error that ended the run
        finally:
            self._ray.kill(self.actor)


def ensure_ray(address: str | None = None, num_cpus: int | None = None) -> None:
    """Connect to `address` / $RAY_ADDRESS, or start a small local Ray in-process (no dashboard; `num_cpus` CPUs,
    default all; object store $RAYSAMPLER_OBJECT_STORE_BYTES, default 1 GiB)."""
    import ray

    if ray.is_initialized():
        return
    address = address or os.environ.get("RAY_ADDRESS")
    if address:
        ray.init(address=address, configure_logging=False, log_to_driver=False)
    else:
        ray.init(include_dashboard=False, configure_logging=False, log_to_driver=False, num_cpus=num_cpus,
                 object_store_memory=int(os.environ.get("RAYSAMPLER_OBJECT_STORE_BYTES", 1 << 30)))


def _ship_by_value(model: Model) -> None:
    """Let workers unpickle a user's model class whose module they cannot import (a script's sibling file, a test)."""
    import sys

    import ray.cloudpickle

    name = type(model).__module__
    module = sys.modules.get(name)
    if module is not None and name != "__main__" and not name.startswith("raysampler"):
        ray.cloudpickle.register_pickle_by_value(module)


def start(executor: str, shards: Sequence[Any], model: Model, algorithm: Algorithm, config: RunConfig,
          max_actors: int | None = None, transport: str = "socket") -> LocalHandle | RayHandle:
    """A handle on a new coordinator for this run."""
    if executor == "local":
        handle = LocalHandle(CoordinatorHost())
        handle.call("start", "local", list(shards), model, algorithm, config)
        return handle
    import ray

    ensure_ray()
    _ship_by_value(model)
    # In-memory shards go to the object store once; a worker reads a path shard itself.
    sources = [s if getattr(s, "path", None) is not None else ray.put(s.load()) for s in shards]
    handle = RayHandle(ray.remote(num_cpus=0, runtime_env={"env_vars": WORKER_ENV})(CoordinatorHost).remote())
    try:
        handle.call("start", "ray", sources, model, algorithm, config, max_actors, transport)
    except BaseException:
        handle.close()
        raise
    return handle
