"""Running a check where each shard's rows live: a `ShardTask` on the rows of every job (one shard per model, all of
one site), in this process or as Ray tasks placed on the shard's site, a shard's rows cut into ranges so that every
CPU of its site takes part; each task returns a named record of sums, and a shard's records add up exactly."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from ..enums import Executor, parse
from ..errors import ArgumentError, Failure, FailureKind, WorkerFailed
from ..models.contract import Model
from ..shards import Shard


@dataclass(frozen=True)
class ShardRows:
    """A shard's rows as one model reads them (after `Model.shard_data`), where the task runs."""

    shard: int
    X: np.ndarray
    y: np.ndarray
    index: np.ndarray | None
    start: int = 0  # the position in the shard of the first of these rows (a task may take a range of them)

    def part(self, k: int, parts: int) -> ShardRows:
        """Range k of `parts` near-equal contiguous ranges of these rows."""
        bounds = np.linspace(0, self.X.shape[0], parts + 1).astype(int)
        a, b = int(bounds[k]), int(bounds[k + 1])
        index = None if self.index is None else self.index[a:b]
        return ShardRows(self.shard, self.X[a:b], self.y[a:b], index, self.start + a)


class ShardTask(Protocol):
    """Work a shard does on its own rows: the models that read them, and the per-shard record it returns."""

    @property
    def models(self) -> tuple[Model, ...]: ...

    def run(self, rows: tuple[ShardRows, ...]) -> Any: ...


def read_rows(i: int, shards: tuple[Shard, ...], models: tuple[Model, ...]) -> tuple[ShardRows, ...]:
    """Load a shard (once per distinct shard) and give each model its rows; errors name `shards[i]`."""
    from ..runtime.host import load_source

    out = []
    loaded: dict[int, Any] = {}
    for shard, model in zip(shards, models):
        if id(shard) not in loaded:
            loaded[id(shard)] = load_source(shard)
        table = loaded[id(shard)]
        cols = getattr(model, "columns", None)
        if cols is not None and table.columns is not None and tuple(table.columns) != tuple(cols):
            raise ArgumentError(
                ("shards", i),
                f"shards[{i}] has columns {list(table.columns)} but the run's model reads {list(cols)}",
            )
        try:
            X, y = model.shard_data(table.X, table.y, shard.index)
            model.validate(X, y, f"shards[{i}]")
        except ArgumentError:
            raise
        except ValueError as exc:
            raise ArgumentError(("shards", i), str(exc)) from None
        out.append(ShardRows(i, np.asarray(X, dtype=np.float64), np.asarray(y), shard.index))
    return tuple(out)


def on_shard(task: ShardTask, i: int, shards: tuple[Shard, ...], k: int = 0, parts: int = 1) -> Any:
    """Runs where shard i lives: read its rows, do the task on range k of `parts` of them, return its record."""
    rows = read_rows(i, shards, task.models)
    return task.run(tuple(r.part(k, parts) for r in rows) if parts > 1 else rows)


def merge(records: Sequence[Any]) -> Any:
    """The records of a shard's ranges of rows, in order, as one (each record type adds up exactly)."""
    total = records[0]
    for r in records[1:]:
        total = total + r
    return total


def run_at_shards(
    task: ShardTask, jobs: Sequence[tuple[Shard, ...]], executor: Executor | str, parts: int | None = None
) -> list[Any]:
    """`task` on every job (one shard per model, all of one site) where its rows are: in this process, or as Ray
    tasks, a site's on a node of that site (label selector). A job's rows are split into `parts` contiguous ranges,
    each its own task, so that a site with more CPUs than shards uses them all (default on Ray: the site's CPUs, or
    the cluster's for shards without a site, over its jobs; 1 in-process). The records, one per job, in job order."""
    exe = parse(Executor, executor, "executor")
    if exe == Executor.LOCAL:
        k_of = max(1, parts or 1)
        return [merge([on_shard(task, i, job, k, k_of) for k in range(k_of)]) for i, job in enumerate(jobs)]
    import ray

    from ..runtime.contracts import SITE_LABEL
    from ..runtime.executors import ensure_ray
    from ..runtime.sites import wait_for_sites
    from ..settings import EngineSettings

    ensure_ray()
    sites = [job[0].site for job in jobs]
    for i, job in enumerate(jobs):
        if len({s.site for s in job}) > 1:
            raise ArgumentError(("shards", i), f"shards[{i}] of the models compared live on different sites")
    site_cpus = wait_for_sites(sites, EngineSettings.from_env().site_wait_s)
    if parts is None:
        cpus: dict[str | None, int] = {None: int(ray.cluster_resources().get("CPU", 1))}
        cpus.update(site_cpus)
        split = {s: max(1, cpus.get(s, 1) // sites.count(s)) for s in set(sites)}
    else:
        split = {s: max(1, parts) for s in set(sites)}
    remote = ray.remote(num_cpus=1, max_retries=0)(on_shard)
    task_ref = ray.put(task)
    refs = [
        [
            remote.options(**({"label_selector": {SITE_LABEL: site}} if site is not None else {})).remote(
                task_ref, i, job, k, split[site]
            )
            for k in range(split[site])
        ]
        for i, (job, site) in enumerate(zip(jobs, sites))
    ]
    out = []
    for i, ref in enumerate(refs):
        try:
            out.append(merge(ray.get(ref)))
        except ray.exceptions.RayTaskError as exc:
            cause = getattr(exc, "cause", None)
            if isinstance(cause, (ArgumentError, WorkerFailed)):
                raise cause from None
            raise WorkerFailed(
                Failure(FailureKind.WORKER_ERROR, f"{type(cause).__name__}: {cause}", shard=i, site=sites[i])
            ) from None
    return out
