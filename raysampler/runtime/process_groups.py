"""How many worker processes a run's shards get, and which shards each owns: a process per site's CPU at most, and
no more than the shards' work per round pays for (`shard_work`, `processes_for`, `plan_groups`).

Pure functions of the shards' sites and sizes and the cluster's CPUs, so `RayPool` and the tests plan alike.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..models.contract import Model
from ..models.foreign import as_model
from .host import ShardSource

#: Element-chains (X's elements times chains times the model's `work_per_element`, plus its `work_per_step`, summed
#: over the shards) that a worker process must have to step each round for it to pay for itself: every process adds
#: its messages and its wake-up to every round, which buys nothing while the compute it would take over is smaller
#: (benchmarks/perf/round_cost.py, 4 shards in 1, 2 and 4 processes; docs/performance.md, "Measurements behind
#: choices in the code").
PROCESS_WORK = 2_000_000
#: The same where the node has CPUs to spare, at least two per shard: each process then has a core of its own besides
#: the coordinator's and Ray's, and costs far less. On a 16-core machine four processes stepped breast_cancer's four
#: shards faster than one from 564,448 element-chains on and slower at 70,556; on 2 cores one process was the
#: fastest at both (docs/performance.md, "Measurements behind choices in the code").
PROCESS_WORK_SPARE = 100_000


def shard_work(sources: Sequence[ShardSource], model: Model, chains: int) -> list[int | None]:
    """Each shard's work per round in element-chains: X's elements × chains × the model's `work_per_element`, plus
    its `work_per_step` that no size changes (None where X's size is unknown before its worker reads it)."""
    m = as_model(model)  # a user's own model class gets the defaults
    per_element, per_step = float(m.work_per_element()), float(m.work_per_step())
    return [None if s.elements is None else int(s.elements * chains * per_element + per_step) for s in sources]


def processes_for(work: Sequence[int | None], cap: int) -> int:
    """Worker processes for one node's (or the site-less) shards with `work` element-chains each (None: unknown, as
    for a file the worker reads): as many as fit `cap` CPUs and the shards, but no more than the work pays for
    (`PROCESS_WORK` each, `PROCESS_WORK_SPARE` where `cap` is at least twice the shards)."""
    per_process = PROCESS_WORK_SPARE if cap >= 2 * len(work) else PROCESS_WORK
    n = len(work) if any(w is None for w in work) else int(sum(w for w in work if w is not None) // per_process)
    return max(1, min(len(work), cap, n))


def plan_groups(
    sites: Sequence[str | None],
    site_cpus: dict[str, int],
    free_cpus: int,
    max_actors: int | None,
    work: Sequence[int | None] | None = None,
    processes: int = 0,
) -> list[list[int]]:
    """Shards per worker process: a process owns shards of one site only (or only site-less shards); each site gets
    at most as many processes as its nodes have CPUs, site-less shards at most `max_actors` or the free CPUs, and
    within that `processes` each (0: as many as the shards' `work` pays for, `processes_for`)."""
    groups: list[list[int]] = []
    by_site: dict[str | None, list[int]] = {}
    for i, s in enumerate(sites):
        by_site.setdefault(s, []).append(i)
    for site, shards in by_site.items():
        cap = site_cpus[site] if site is not None else (max_actors or free_cpus)
        sizes = [work[i] for i in shards] if work is not None else [None] * len(shards)
        wanted = processes or processes_for(sizes, cap)
        n = max(1, min(len(shards), cap, wanted))
        groups += [[int(i) for i in part] for part in np.array_split(np.asarray(shards), n)]
    return sorted(groups)
