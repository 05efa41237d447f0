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

    def copy(self) -> ShardRows:
        """These rows in arrays of their own (a range no longer keeps the whole shard's arrays alive)."""
        index = None if self.index is None else self.index.copy()
        return ShardRows(self.shard, self.X.copy(), self.y.copy(), index, self.start)


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


def split_parts(rows: Sequence[int | None], cpus: int) -> list[int]:
    """Tasks for each of a site's jobs (their row counts; None when unknown) so that the site's `cpus` CPUs all take
    part: `cpus` tasks in all (at least one a job), shared in proportion to the rows (largest remainder)."""
    known = [r for r in rows if r is not None and r > 0]
    mean = sum(known) / len(known) if known else 1.0
    size = [float(r) if r is not None and r > 0 else mean for r in rows]
    total = max(int(cpus), len(rows))
    share = [total * z / sum(size) for z in size]
    out = [max(1, int(x)) for x in share]
    for j in sorted(range(len(rows)), key=lambda j: out[j] - share[j]):
        if sum(out) >= total:
            break
        out[j] += 1
    return out


@dataclass(frozen=True)
class Placement:
    """Where each job runs on Ray: its site (None: anywhere) and how many contiguous ranges its rows are cut into."""

    sites: tuple[str | None, ...]
    parts: tuple[int, ...]

    def options(self, i: int) -> dict[str, Any]:
        """Ray options placing job i on a node of its site (label selector)."""
        from ..runtime.contracts import SITE_LABEL

        site = self.sites[i]
        return {"label_selector": {SITE_LABEL: site}} if site is not None else {}


def place(jobs: Sequence[tuple[Shard, ...]], parts: int | None = None) -> Placement:
    """Each job's site (waited for: `RAYSAMPLER_SITE_WAIT_S`) and its ranges: `parts` each, or by default the CPUs of
    its site (of the cluster for jobs without a site) shared among the site's jobs by rows (`split_parts`)."""
    import ray

    from ..runtime.executors import ensure_ray
    from ..runtime.sites import wait_for_sites
    from ..settings import EngineSettings

    ensure_ray()
    sites = [job[0].site for job in jobs]
    for i, job in enumerate(jobs):
        if len({s.site for s in job}) > 1:
            raise ArgumentError(("shards", i), f"shards[{i}] of the models compared live on different sites")
    site_cpus = wait_for_sites(sites, EngineSettings.from_env().site_wait_s)
    if parts is not None:
        return Placement(tuple(sites), tuple(max(1, parts) for _ in jobs))
    cpus: dict[str | None, int] = {None: int(ray.cluster_resources().get("CPU", 1))}
    cpus.update(site_cpus)
    split = [1] * len(jobs)
    for site in set(sites):
        mine = [i for i, s in enumerate(sites) if s == site]
        for i, n in zip(mine, split_parts([jobs[i][0].n_rows for i in mine], cpus.get(site, 1))):
            split[i] = n
    return Placement(tuple(sites), tuple(split))


def gather(refs: Sequence[Sequence[Any]], sites: Sequence[str | None]) -> list[Any]:
    """The records of each job's Ray tasks (or actor calls), merged per job; a task's ArgumentError or WorkerFailed
    is raised as itself, any other error as WorkerFailed naming the job's shard and site."""
    import ray

    out = []
    for i, ref in enumerate(refs):
        try:
            out.append(merge(ray.get(list(ref))))
        except ray.exceptions.RayActorError as exc:
            raise WorkerFailed(Failure(FailureKind.WORKER_ERROR, str(exc), shard=i, site=sites[i])) from None
        except ray.exceptions.RayTaskError as exc:
            cause = getattr(exc, "cause", None)
            if isinstance(cause, (ArgumentError, WorkerFailed)):
                raise cause from None
            raise WorkerFailed(
                Failure(FailureKind.WORKER_ERROR, f"{type(cause).__name__}: {cause}", shard=i, site=sites[i])
            ) from None
    return out


def run_at_shards(
    task: ShardTask, jobs: Sequence[tuple[Shard, ...]], executor: Executor | str, parts: int | None = None
) -> list[Any]:
    """`task` on every job (one shard per model, all of one site) where its rows are: in this process, or as Ray
    tasks, a site's on a node of that site (label selector). A job's rows are split into contiguous ranges, each its
    own task, so that every CPU of a site takes part (`place`; `parts` ranges each when given; 1 in-process). The
    records, one per job, in job order."""
    exe = parse(Executor, executor, "executor")
    if exe == Executor.LOCAL:
        k_of = max(1, parts or 1)
        return [merge([on_shard(task, i, job, k, k_of) for k in range(k_of)]) for i, job in enumerate(jobs)]
    import ray

    where = place(jobs, parts)
    remote = ray.remote(num_cpus=1, max_retries=0)(on_shard)
    task_ref = ray.put(task)
    refs = [
        [remote.options(**where.options(i)).remote(task_ref, i, job, k, n) for k in range(n)]
        for i, (job, n) in enumerate(zip(jobs, where.parts))
    ]
    return gather(refs, where.sites)


# ----------------------------------------------------------------------------------------------- sessions


class HeldTask(Protocol):
    """Work a shard does on rows it keeps between calls (`ShardSession`), with what earlier calls kept beside them."""

    def run_held(self, rows: tuple[ShardRows, ...], kept: dict[str, Any]) -> Any: ...


class ShardHolder:
    """A range of one job's rows, loaded once where they live, and what the session's tasks keep beside them."""

    def __init__(self, i: int, shards: tuple[Shard, ...], models: tuple[Model, ...], k: int, parts: int) -> None:
        self.where = (i, shards, models, k, parts)
        self.rows: tuple[ShardRows, ...] | None = None
        self.kept: dict[str, Any] = {}

    def held_rows(self) -> tuple[ShardRows, ...]:
        """The rows, read on the first call (so that a bad shard's error comes back from a call, naming it)."""
        if self.rows is None:
            i, shards, models, k, parts = self.where
            rows = read_rows(i, shards, models)
            self.rows = tuple(r.part(k, parts).copy() for r in rows) if parts > 1 else rows
        return self.rows

    def run(self, task: HeldTask) -> Any:
        return task.run_held(self.held_rows(), self.kept)


@dataclass(frozen=True)
class OneOff:
    """A `HeldTask` run as a plain `ShardTask`: the rows read for the call, nothing kept after it."""

    task: HeldTask
    models: tuple[Model, ...]

    def run(self, rows: tuple[ShardRows, ...]) -> Any:
        return self.task.run_held(rows, {})


class ShardSession:
    """Each job's rows where they live, for a check that takes several rounds (moment matching, stacking), so that a
    round sends only its task and gets back sums. In this process the rows are read once and held. On Ray, with
    `hold=True` they are held, with what the tasks keep beside them, by actors placed on each shard's site (a job's
    rows cut into ranges as `run_at_shards` cuts them); with `hold=False` each round is a set of Ray tasks that read
    the rows again (no actor to start: the better choice when nothing needs keeping between rounds). Close it (a
    context manager) to free the actors."""

    def __init__(
        self, models: tuple[Model, ...], jobs: Sequence[tuple[Shard, ...]], executor: Executor | str, hold: bool = True
    ):
        self.executor = parse(Executor, executor, "executor")
        self.models, self.jobs = models, list(jobs)
        self.local: list[list[ShardHolder]] = []
        self.actors: list[list[Any]] = []
        self.sites: tuple[str | None, ...] = tuple(job[0].site for job in jobs)
        if self.executor == Executor.LOCAL:
            self.local = [[ShardHolder(i, tuple(job), models, 0, 1)] for i, job in enumerate(jobs)]
            return
        if not hold:
            return
        import ray

        where = place(jobs)
        actor = ray.remote(num_cpus=0, max_restarts=0)(ShardHolder)
        self.actors = [
            [actor.options(**where.options(i)).remote(i, tuple(job), models, k, n) for k in range(n)]
            for i, (job, n) in enumerate(zip(jobs, where.parts))
        ]

    def run(self, task: HeldTask) -> list[Any]:
        """`task` on every job's rows; its records merged per job, in job order."""
        if self.executor == Executor.LOCAL:
            return [merge([h.run(task) for h in holders]) for holders in self.local]
        if not self.actors:
            return run_at_shards(OneOff(task, self.models), self.jobs, self.executor)
        import ray

        task_ref = ray.put(task)
        return gather([[a.run.remote(task_ref) for a in actors] for actors in self.actors], self.sites)

    def close(self) -> None:
        if self.actors:
            import ray

            for actors in self.actors:
                for a in actors:
                    ray.kill(a)
        self.actors, self.local = [], []

    def __enter__(self) -> ShardSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
