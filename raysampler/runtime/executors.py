"""Start a coordinator in-process ("local") or as a Ray actor on the driver's node that creates its own worker
actors ("ray"); either way the driver holds a `CoordinatorHandle`."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

from ..algorithms.base import Algorithm
from ..errors import Failure, FailureKind, WorkerFailed
from ..models.base import Model
from .contracts import Chunk, CoordinatorHandle, RunConfig, RunState, RunStats, SetupInfo
from .coordinator import Coordinator
from .host import ShardSource
from .pools import WORKER_ENV, LocalPool, RayPool

EXECUTORS = ("local", "ray")


class CoordinatorHost:
    """The coordinator with its pool; in Ray mode this object lives inside the coordinator actor.

    `start` creates the pool (a method, not the constructor, so errors keep their type through Ray); `setup` or
    `resume` then builds the coordinator complete.
    """

    def __init__(self) -> None:
        self.coordinator: Coordinator | None = None
        self.pool: LocalPool | RayPool | None = None

    def start(
        self,
        executor: str,
        sources: Sequence[ShardSource],
        model: Model,
        algorithm: Algorithm,
        config: RunConfig,
        max_actors: int | None = None,
        transport: str = "socket",
    ) -> None:
        if executor == "ray":
            self.pool = RayPool(
                sources,
                model,
                algorithm,
                config.seed,
                config.chains,
                max_actors=max_actors,
                transport=transport,
                site_wait=config.site_wait_s,
                coordinator_shards=config.coordinator_shards,
                spin_s=config.shm_spin_s,
            )
        else:
            self.pool = LocalPool(sources, model, algorithm, config.seed, config.chains)
        self.model, self.algorithm, self.config = model, algorithm, config

    def setup(self, slowdown: dict[int, float] | None = None) -> SetupInfo:
        assert self.pool is not None, "start() first"
        self.coordinator = Coordinator.start(self.pool, self.model, self.algorithm, self.config, slowdown)
        return self.coordinator.setup

    def resume(self, state: RunState) -> SetupInfo:
        assert self.pool is not None, "start() first"
        self.coordinator = Coordinator.resume(self.pool, self.model, self.algorithm, self.config, state)
        return self.coordinator.setup

    def recover(self, state: RunState) -> SetupInfo:
        """A worker was lost: wait for the workers to come back (up to the site wait), then resume from `state`."""
        assert self.pool is not None, "start() first"
        self.pool.revive(self.config.site_wait_s)
        self.coordinator = Coordinator.resume(self.pool, self.model, self.algorithm, self.config, state)
        return self.coordinator.setup

    def _coordinator(self) -> Coordinator:
        if self.coordinator is None:
            raise RuntimeError("the coordinator is not set up (call setup() or resume() first)")
        return self.coordinator

    def run(self, max_rounds: int, time_left_s: float | None = None, capture: bool = False) -> Chunk:
        return self._coordinator().run(max_rounds, time_left_s, capture)

    def capture(self) -> RunState:
        return self._coordinator().capture()

    def stats(self) -> RunStats:
        return self._coordinator().stats()

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()


class LocalHandle:
    """Calls the in-process coordinator directly, with BLAS held to one thread while it works.

    Multi-threaded BLAS on the sampler's small matrix products was measured 10–100× slower on 2 cores.
    """

    def __init__(self, host: CoordinatorHost) -> None:
        from threadpoolctl import threadpool_limits

        self.host = host
        self._limits = threadpool_limits

    def _one_thread(self) -> Any:
        return self._limits(limits=1, user_api="blas")

    def setup(self, slowdown: dict[int, float] | None = None) -> SetupInfo:
        with self._one_thread():
            return self.host.setup(slowdown)

    def resume(self, state: RunState) -> SetupInfo:
        with self._one_thread():
            return self.host.resume(state)

    def run(self, max_rounds: int, time_left_s: float | None = None, capture: bool = False) -> Chunk:
        with self._one_thread():
            return self.host.run(max_rounds, time_left_s, capture)

    def capture(self) -> RunState:
        return self.host.capture()

    def recover(self, state: RunState) -> SetupInfo:
        with self._one_thread():
            return self.host.recover(state)

    def stats(self) -> RunStats:
        return self.host.stats()

    def close(self) -> None:
        self.host.close()


class RayHandle:
    """Calls the coordinator actor; the driver talks to nothing else. Errors arrive with their own type."""

    def __init__(self, actor: Any) -> None:
        import ray

        self.actor, self._ray = actor, ray

    def _get(self, ref: Any) -> Any:
        try:
            return self._ray.get(ref)
        except self._ray.exceptions.RayTaskError as exc:
            raise exc.as_instanceof_cause() from None  # the coordinator's own exception type and message
        except self._ray.exceptions.RayActorError as exc:  # its process (or node) died: the run's state is elsewhere
            raise WorkerFailed(
                Failure(FailureKind.COORDINATOR_LOST, f"the coordinator process was lost ({type(exc).__name__})")
            ) from None

    def start(self, *args: Any) -> None:
        self._get(self.actor.start.remote(*args))

    def setup(self, slowdown: dict[int, float] | None = None) -> SetupInfo:
        return self._get(self.actor.setup.remote(slowdown))

    def resume(self, state: RunState) -> SetupInfo:
        return self._get(self.actor.resume.remote(state))

    def run(self, max_rounds: int, time_left_s: float | None = None, capture: bool = False) -> Chunk:
        return self._get(self.actor.run.remote(max_rounds, time_left_s, capture))

    def capture(self) -> RunState:
        return self._get(self.actor.capture.remote())

    def recover(self, state: RunState) -> SetupInfo:
        return self._get(self.actor.recover.remote(state))

    def stats(self) -> RunStats:
        return self._get(self.actor.stats.remote())

    def close(self) -> None:
        try:
            self._ray.get(self.actor.close.remote())
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
        ray.init(
            include_dashboard=False,
            configure_logging=False,
            log_to_driver=False,
            num_cpus=num_cpus,
            object_store_memory=int(os.environ.get("RAYSAMPLER_OBJECT_STORE_BYTES", 1 << 30)),
        )


def _ship_by_value(model: Model) -> None:
    """Let workers unpickle a user's model class whose module they cannot import (a script's sibling file, a test)."""
    import ray.cloudpickle

    name = type(model).__module__
    module = sys.modules.get(name)
    if module is not None and name != "__main__" and not name.startswith("raysampler"):
        ray.cloudpickle.register_pickle_by_value(module)


def start(
    executor: str,
    sources: Sequence[ShardSource],
    model: Model,
    algorithm: Algorithm,
    config: RunConfig,
    max_actors: int | None = None,
    transport: str = "socket",
) -> CoordinatorHandle:
    """A handle on a new coordinator for this run (its pool started; call setup() or resume() next)."""
    if executor == "local":
        host = CoordinatorHost()
        host.start("local", list(sources), model, algorithm, config)
        return LocalHandle(host)
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    ensure_ray()
    _ship_by_value(model)
    # In-memory shards go to the object store once; a worker reads a path shard itself, on its node.
    placed = [
        s
        if getattr(s.data, "path", None) is not None
        else ShardSource(
            s.shard, ray.put(s.data.load() if hasattr(s.data, "load") else s.data), s.site, s.columns, s.index
        )
        for s in sources
    ]
    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    actor = ray.remote(  # type: ignore[call-overload]  # Ray's stubs omit these actor options
        num_cpus=0, runtime_env={"env_vars": WORKER_ENV}, scheduling_strategy=here
    )(CoordinatorHost)
    handle = RayHandle(actor.remote())
    try:
        handle.start("ray", placed, model, algorithm, config, max_actors, transport)
    except BaseException:
        handle.close()
        raise
    return handle
