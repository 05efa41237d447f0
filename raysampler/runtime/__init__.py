"""The runtime: moves states and messages between an algorithm's pure functions, in-process or on Ray.

`executors.start` gives the driver a `CoordinatorHandle`; the coordinator (`coordinator.Coordinator`) runs rounds
over a `WorkerPool` (`pools.LocalPool` or `pools.RayPool`, whose `Transport` carries each round); `host.ShardHost`
owns shards where they live. The types that cross these seams are in `contracts`.
"""

from __future__ import annotations

from ..extras import engine as _requires_engine  # noqa: F401 (the import checks that the engine extra is installed)
from .contracts import (
    SITE_LABEL,
    Chunk,
    CoordinatorHandle,
    Placement,
    RunConfig,
    RunState,
    RunStats,
    SetupInfo,
    ShardFacts,
    ShardState,
    StepResult,
    Transport,
    WorkerPool,
)
from .executors import ensure_ray, start
from .host import ShardHost, ShardSource

__all__ = [
    "SITE_LABEL",
    "Chunk",
    "CoordinatorHandle",
    "Placement",
    "RunConfig",
    "RunState",
    "RunStats",
    "SetupInfo",
    "ShardFacts",
    "ShardHost",
    "ShardSource",
    "ShardState",
    "StepResult",
    "Transport",
    "WorkerPool",
    "ensure_ray",
    "start",
]
