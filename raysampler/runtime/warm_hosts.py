"""Coordinator actors kept between runs (`WarmHosts`): a run on Ray takes an idle one of this driver's Ray session
instead of starting a process.

A new actor's process costs a run its fork and Ray's and raysampler's imports before its first round, which is most
of a small model's default run (docs/performance.md, "Measurements behind choices in the code"). A coordinator
actor reserves no CPU (`num_cpus=0`), and a closed `CoordinatorHost` holds nothing of its run
(`CoordinatorHost.close` drops its pool and coordinator, whose worker actors it killed), so keeping
`RAYSAMPLER_WARM_HOSTS` of them idle costs only their memory. Only a host whose close succeeded is kept: one whose
run was cancelled during its set-up, failed to start, or lost its process is killed, and one found dead when taken
is replaced. Hosts are kept per Ray session and node (the driver's, where coordinators run), so a new `ray.init`
never gets a handle of an earlier cluster.
"""

from __future__ import annotations

import threading
from typing import Any

#: Seconds a kept host may take to answer before it is taken for dead and replaced (a live idle one answers at once).
READY_WAIT_S = 5.0


class WarmHosts:
    """Idle coordinator actors by (Ray session, node); thread-safe (the service drives runs from several threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: dict[tuple[str, str], list[Any]] = {}

    def take(self, key: tuple[str, str]) -> Any | None:
        """An idle live host of `key`, or None (dead ones found on the way are killed and dropped)."""
        import ray

        while True:
            with self._lock:
                for other in [k for k in self._idle if k[0] != key[0]]:  # another Ray session's: its handles are void
                    del self._idle[other]
                idle = self._idle.get(key)
                if not idle:
                    return None
                actor = idle.pop()
            try:
                ray.get(actor.__ray_ready__.remote(), timeout=READY_WAIT_S)
                return actor
            except Exception:  # lost (its process killed, its node gone) or hung: never reuse it
                _kill(actor)

    def give_back(self, key: tuple[str, str], actor: Any, keep: int) -> bool:
        """Keep `actor` (closed, alive) for the next run if fewer than `keep` of `key` are idle; else False (the
        caller kills it)."""
        with self._lock:
            idle = self._idle.setdefault(key, [])
            if len(idle) >= keep:
                return False
            idle.append(actor)
            return True

    def clear(self) -> None:
        """Kill every idle host (their processes end; a later run starts a new one)."""
        with self._lock:
            actors = [a for idle in self._idle.values() for a in idle]
            self._idle.clear()
        for a in actors:
            _kill(a)

    def count(self) -> int:
        with self._lock:
            return sum(len(v) for v in self._idle.values())


def _kill(actor: Any) -> None:
    import ray

    try:
        ray.kill(actor)
    except Exception:
        pass  # already gone


def session_key() -> tuple[str, str]:
    """This driver's Ray session and node: where its coordinators run, and what a kept host must match."""
    import ray

    ctx = ray.get_runtime_context()
    return (f"{ctx.get_session_name()}/{ctx.get_job_id()}", ctx.get_node_id())


#: The driver's kept coordinator actors (one per process: a Ray session's handles belong to its driver).
WARM_HOSTS = WarmHosts()
