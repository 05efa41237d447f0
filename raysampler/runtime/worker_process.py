"""A Ray worker process set up for stepping shards: one BLAS/OpenMP thread and malloc tuned for the hot loop
(`tune_worker_process`), and the actor class that does it before it loads its shards (`WorkerHost`).

`pools.RayPool` starts its actors as `WorkerHost`s; the executor tunes the coordinator actor's process with it too
(`executors`).
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Sequence

from ..algorithms.base import Algorithm
from ..models.contract import Model
from .host import ShardHost, ShardSource

#: A worker process's malloc top pad (M_TOP_PAD), so the hot loop's large temporaries are not returned to the OS and
#: page-faulted back every step, which slowed the step (docs/performance.md, "Measurements behind choices in the code").
MALLOC_TOP_PAD = 64 << 20
#: Its mmap threshold (M_MMAP_THRESHOLD; 32 MiB is glibc's largest). Setting the top pad turns off malloc's dynamic
#: mmap threshold (mallopt(3)), which leaves it at 128 kB; the pad keeps the main thread's heap from reaching it, but
#: a shard stepped by a channel's reader thread allocates from a heap of that thread's own, where every temporary over
#: 128 kB was a fresh mmap, page-faulted in and unmapped again at each step, and such a shard's step cost more than
#: the same step in the coordinator's main thread (docs/performance.md, "Measurements behind choices in the code").
MALLOC_MMAP_THRESHOLD = 32 << 20
_M_TOP_PAD, _M_MMAP_THRESHOLD = -2, -3  # glibc's mallopt parameter numbers


def tune_worker_process() -> None:
    """Set up a Ray worker process for stepping shards: one BLAS/OpenMP thread (one actor per core; multi-threaded
    BLAS is far slower on the sampler's small products: docs/performance.md, "The two same-node defaults") and
    malloc's top pad and mmap threshold.

    Done inside the process when its actor starts, not as environment variables in the actor's `runtime_env`: an
    actor with environment variables of its own cannot take one of Ray's prestarted worker processes and waits for a
    fresh one, several times as long, at every run's set-up (docs/performance.md, "Measurements behind choices in
    the code")."""
    import scipy.linalg  # noqa: F401  # load scipy's own BLAS too, so the limit reaches it
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=1)  # a call, not a context: it holds for the life of the process
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None)
            libc.mallopt(_M_TOP_PAD, MALLOC_TOP_PAD)
            libc.mallopt(_M_MMAP_THRESHOLD, MALLOC_MMAP_THRESHOLD)
        except (OSError, AttributeError):  # not glibc: its allocator keeps its own defaults
            pass


class WorkerHost(ShardHost):
    """A `ShardHost` in a Ray worker process of its own, set up by `tune_worker_process` before it loads shards."""

    def __init__(
        self,
        sources: Sequence[ShardSource],
        model: Model,
        algorithm: Algorithm | None,
        seed: int,
        chains: int,
        secure: bool = False,
        keyed: bool = False,
    ) -> None:
        tune_worker_process()
        super().__init__(sources, model, algorithm, seed, chains, secure, keyed)
