"""The queue of runs waiting to sample: served round-robin across tenants (`FairQueue`)."""

from __future__ import annotations

import threading
from collections import OrderedDict, deque


class FairQueue:
    """Runs waiting to sample, served round-robin across tenants, so one tenant's backlog never starves another's:
    each `get` takes the oldest run of the tenant whose turn it is, then that tenant goes to the back."""

    def __init__(self) -> None:
        self._ready = threading.Condition()
        self._tenants: OrderedDict[str, deque[str]] = OrderedDict()
        self._stops = 0

    def put(self, tenant: str, run_id: str) -> None:
        """Queue a run (once: a run already waiting keeps its place)."""
        with self._ready:
            waiting = self._tenants.setdefault(tenant, deque())
            if run_id not in waiting:
                waiting.append(run_id)
                self._ready.notify()

    def stop_one(self) -> None:
        """Make one waiting `get` return None (an executor thread's signal to end)."""
        with self._ready:
            self._stops += 1
            self._ready.notify()

    def order(self) -> list[tuple[str, str]]:
        """Every waiting (tenant, run id) in the order `get` would serve them now (round-robin over tenants)."""
        with self._ready:
            lines = [(t, list(ids)) for t, ids in self._tenants.items()]
        out: list[tuple[str, str]] = []
        while lines:
            tenant, ids = lines.pop(0)
            out.append((tenant, ids.pop(0)))
            if ids:
                lines.append((tenant, ids))
        return out

    def get(self) -> tuple[str, str] | None:
        with self._ready:
            while not self._stops and not self._tenants:
                self._ready.wait()
            if self._stops:
                self._stops -= 1
                return None
            tenant, waiting = next(iter(self._tenants.items()))
            run_id = waiting.popleft()
            del self._tenants[tenant]
            if waiting:
                self._tenants[tenant] = waiting  # back of the line
            return tenant, run_id
