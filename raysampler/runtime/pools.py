"""Worker pools (the `WorkerPool` contract): every shard in this process, or shards spread over Ray actors placed on
the nodes of their sites.

Their parts live beside them: the worker process's set-up and its actor class in `worker_process`, the plan of
processes and their shards in `process_groups`, the set-up's pool in `setup_pool`. The names that moved there are
imported here too, so imports from this module keep working."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..algorithms.base import Algorithm
from ..enums import TransportKind
from ..errors import Failure, FailureKind, WorkerFailed
from ..models.contract import Model
from .batches import join_blocks
from .contracts import NO_INIT, SITE_LABEL, Broadcast, Placement, ShardFacts, ShardState, StateInit, StepResult
from .host import ShardHost, ShardSource
from .links import LinkStats, RttMeter, TripLog
from .process_groups import PROCESS_WORK as PROCESS_WORK
from .process_groups import PROCESS_WORK_SPARE as PROCESS_WORK_SPARE
from .process_groups import plan_groups, shard_work
from .process_groups import processes_for as processes_for
from .setup_pool import SetupPool as SetupPool
from .setup_pool import setup_quantity as setup_quantity
from .sites import wait_for_sites
from .transports import ActorTransport, SocketTransport, lost, stalled
from .worker_process import _M_MMAP_THRESHOLD as _M_MMAP_THRESHOLD
from .worker_process import _M_TOP_PAD as _M_TOP_PAD
from .worker_process import MALLOC_MMAP_THRESHOLD as MALLOC_MMAP_THRESHOLD
from .worker_process import MALLOC_TOP_PAD as MALLOC_TOP_PAD
from .worker_process import WorkerHost
from .worker_process import tune_worker_process as tune_worker_process

if TYPE_CHECKING:  # pydantic-settings loads only when a run starts: `import raysampler` (and the CLI) stays light
    from ..settings import EngineSettings


class LocalPool:
    """All shards in this process, stepped one after another."""

    transport = "in-process"

    def __init__(
        self,
        sources: Sequence[ShardSource],
        model: Model,
        algorithm: Algorithm,
        seed: int,
        chains: int,
        secure: bool = False,
        keyed: bool = False,
    ) -> None:
        self.num_shards = len(sources)
        self.host = ShardHost(sources, model, algorithm, seed, chains, secure, keyed)
        self.groups = [list(range(self.num_shards))]
        self._pending: deque[StepResult] = deque()
        self.trips = TripLog()  # the calls a pool of processes would make, so in-process runs report them too

    def describe(self) -> list[ShardFacts]:
        self.trips.count()
        return self.host.describe()

    def bind(self, model: Model) -> None:
        self.trips.count()
        self.host.bind(model)

    def bind_facts(self, model: Model, fns: Sequence[Callable[..., Any]]) -> list[list[Any]]:
        self.trips.count()
        return self.host.bind_facts(model, fns)

    def gram(self) -> list[np.ndarray | None]:
        self.trips.count()
        return self.host.gram()

    def map(self, fn: Callable[..., Any], args: Sequence[tuple[Any, ...]], model: Model | None = None) -> list[Any]:
        self.trips.count()
        return self.host.map(fn, args, model)

    def init_states(self, payloads: Sequence[Any], init: StateInit = NO_INIT) -> np.ndarray | None:
        self.trips.count()
        tau = self.host.init_states(payloads, init)
        return None if tau is None else np.asarray(tau, dtype=float)

    def revive(self, timeout_s: float) -> None:
        """Nothing to do: in-process shards cannot be lost."""

    def set_slowdown(self, factors: dict[int, float]) -> None:
        self.trips.count()
        self.host.set_slowdown(factors)

    def calibrate(self) -> np.ndarray:
        self.trips.count()
        return np.asarray(self.host.calibrate())

    def links(self) -> tuple[LinkStats, ...]:
        """None: every shard is in this process."""
        return ()

    def step(self, messages: Any) -> StepResult:
        self.trips.count()
        replies, times = self.host.step(messages)
        work = np.asarray(times, dtype=float)
        return StepResult(replies, work, np.full(self.num_shards, work.sum()))

    def send(self, messages: Any) -> None:
        """Step now (in this process a round has nothing to overlap with); `collect` returns the result."""
        self._pending.append(self.step(messages))  # `step` counts the trip

    def collect(self) -> StepResult:
        return self._pending.popleft()

    def capture(self) -> list[ShardState]:
        self.trips.count()
        return self.host.capture()

    def restore(self, states: Sequence[ShardState], peers: Sequence[bytes] | None = None) -> None:
        self.trips.count()
        self.host.restore(states, peers)

    def close(self) -> None:
        pass


class RayPool:
    """Shards spread over Ray actors (an actor may own several shards of one site). A shard with a site is placed
    only on a node labelled with it (a hard constraint: its data never moves); each actor loads its shards itself,
    from a file path on its node or from the object store, so the data never passes through the coordinator.
    Round messages go by value over the chosen `Transport` (direct channels, or plain actor calls as the fallback
    when a channel cannot be opened). The pool's own process (the coordinator's) may host one group of site-less
    shards itself (`engine.coordinator_shards`). `engine` holds the settings the driver read (`EngineSettings`).
    """

    def __init__(
        self,
        sources: Sequence[ShardSource],
        model: Model,
        algorithm: Algorithm,
        seed: int,
        chains: int,
        max_actors: int | None = None,
        transport: TransportKind = TransportKind.SOCKET,
        *,
        engine: EngineSettings,
        secure: bool = False,
        keyed: bool = False,
    ) -> None:
        import ray

        transport = TransportKind(transport)
        self.engine = engine  # the driver's settings: this process never reads its own environment for them
        self.num_shards = len(sources)
        self.sources = list(sources)  # holds in-memory shards' object-store references: a restarted worker reloads
        sites = [s.site for s in sources]
        self.sites = sites
        site_cpus = wait_for_sites(sites, engine.site_wait_s)
        free = _available_cpus()
        unsited = sum(s is None for s in sites)
        if unsited and max_actors is not None and max_actors > free:
            raise ValueError(
                f"max_actors={max_actors} but the Ray cluster has {free} free CPU(s): each worker actor "
                "needs one (lower max_actors, or free CPUs)"
            )
        work = shard_work(sources, model, chains)
        self.groups = plan_groups(sites, site_cpus, free, max_actors, work, engine.worker_processes)
        self._where = [np.asarray(g, dtype=np.intp) for g in self.groups]
        self._order = np.concatenate(self._where)  # the shards process by process
        self._sizes = np.asarray([len(g) for g in self.groups])
        self._starts = np.concatenate([[0], np.cumsum(self._sizes)[:-1]])
        self._ray = ray
        # With `coordinator_shards`, this process (the coordinator's) hosts the first group of site-less shards: it
        # computes them while the actors compute theirs, so a round wakes one process fewer (benchmarks/perf/
        # hot_path.py measures both), and shards small enough for one process need no message at all.
        unsited_groups = [k for k, g in enumerate(self.groups) if sites[g[0]] is None]
        self.home: ShardHost | None = None
        self._home_k: int | None = None
        if unsited_groups and engine.coordinator_shards and not secure:  # secure sums: no site in the coordinator
            self._home_k = unsited_groups[0]
            self.home = ShardHost(
                [sources[i] for i in self.groups[self._home_k]], model, algorithm, seed, chains, secure, keyed
            )
        self.remote_groups = [g for k, g in enumerate(self.groups) if k != self._home_k]
        # A worker process that dies is restarted by Ray on a node of its site (it reloads its shards); the run rolls
        # back to its last checkpoint (`revive`, then the coordinator restores every state).
        actor_cls = ray.remote(num_cpus=1, max_concurrency=1, max_restarts=-1, max_task_retries=0)(WorkerHost)
        self.actors = []
        for g in self.remote_groups:
            site = sites[g[0]]
            opts = {"label_selector": {SITE_LABEL: site}} if site is not None else {}
            self.actors.append(
                actor_cls.options(**opts).remote([sources[i] for i in g], model, algorithm, seed, chains, secure, keyed)
            )
        self.placement: list[Placement] = []
        self._transport: SocketTransport | ActorTransport = ActorTransport(
            self.actors, self.remote_groups, engine.link_deadline_s
        )
        self._want = transport
        self._pending: deque[tuple[bool, Any, Failure | None, float]] = deque()
        self.trips = TripLog()
        self._rtt = RttMeter(len(self.actors))

    @property
    def transport(self) -> str:
        return self._transport.name if self.actors else "in-process"

    def _open_transport(self) -> None:
        """The chosen transport once the actors are up (socket channels fall back to actor calls if unreachable)."""
        self._transport.close()
        self._pending.clear()
        self._transport = ActorTransport(self.actors, self.remote_groups, self.engine.link_deadline_s)
        self._transport.meter = self._rtt
        if self._want != TransportKind.SOCKET:
            return
        here = self._ray.get_runtime_context().get_node_id()
        local = [self.placement[g[0]].node_id == here for g in self.remote_groups]
        try:
            self._transport = SocketTransport(
                self.actors,
                self.remote_groups,
                self.engine.startup_timeout_s,
                local,
                spin_s=self.engine.shm_spin_s,
                deadline_s=self.engine.link_deadline_s,
            )
            self._transport.meter = self._rtt
        except (OSError, ConnectionError) as exc:  # e.g. a firewall between nodes: plain actor calls still work
            import warnings

            warnings.warn(
                f"raysampler: direct worker channels unavailable ({exc}); using plain actor calls", stacklevel=2
            )

    def _all(self, method: str, per_group: Sequence[tuple[Any, ...]], timeout: float | None = None) -> list[Any]:
        """`method(*per_group[k])` on the process hosting each group (the actors' calls run while the coordinator's
        own group computes); results in group order. One trip."""
        self.trips.count()
        remote = [args for k, args in enumerate(per_group) if k != self._home_k]
        refs = [getattr(a, method).remote(*args) for a, args in zip(self.actors, remote)]
        home = None
        if self.home is not None and self._home_k is not None:
            home = getattr(self.home, method)(*per_group[self._home_k])
        wait = timeout if timeout is not None else self.engine.link_deadline_s
        try:
            out = list(self._ray.get(refs, timeout=wait))
        except self._ray.exceptions.RayTaskError as exc:
            raise exc.as_instanceof_cause() from None
        except (self._ray.exceptions.RayActorError, self._ray.exceptions.ActorUnavailableError) as exc:
            # a worker process or its node is gone (or restarting): a lost worker, which the run recovers from
            dead = [g for g, r in zip(self.remote_groups, refs) if self._failed(r)]
            g = dead[0] if dead else self.remote_groups[0]
            raise WorkerFailed(lost(g, exc).at(site=self.sites[g[0]])) from None
        except self._ray.exceptions.GetTimeoutError:
            if timeout is not None:
                raise
            late = [g for g, r in zip(self.remote_groups, refs) if not self._ray.wait([r], timeout=0)[0]]
            g = late[0] if late else self.remote_groups[0]
            raise WorkerFailed(stalled(g, wait).at(site=self.sites[g[0]])) from None
        if self._home_k is not None:
            out.insert(self._home_k, home)
        return out

    def _failed(self, ref: Any) -> bool:
        """Whether a finished call raised (a ready reference whose get raises)."""
        if not self._ray.wait([ref], timeout=0)[0]:
            return False
        try:
            self._ray.get(ref, timeout=0)
        except Exception:
            return True
        return False

    def _split(self, items: Sequence[Any]) -> list[list[Any]]:
        return [[items[i] for i in g] for g in self.groups]

    def _by_shard(self, parts: Sequence[Sequence[Any]]) -> list[Any]:
        """The groups' answers (each a list over its shards, `_all`'s order) as one list in shard order."""
        out: list[Any] = [None] * self.num_shards
        for g, part in zip(self.groups, parts):
            for i, r in zip(g, part):
                out[i] = r
        return out

    def describe(self) -> list[ShardFacts]:
        """First contact: the actors must start (and load their shards) within the startup timeout."""
        try:
            parts = self._all("describe", [()] * len(self.groups), timeout=self.engine.startup_timeout_s)
        except self._ray.exceptions.GetTimeoutError:
            raise TimeoutError(
                f"worker actors did not start within {self.engine.startup_timeout_s:.0f} s: the Ray cluster may "
                "lack free CPUs (each worker actor needs one) or the shards may be slow to load"
            ) from None
        facts = sorted((f for part in parts for f in part), key=lambda f: f.shard)
        self.placement = [Placement.of(f) for f in facts]
        self._open_transport()
        self._setup_rtt()
        return facts

    def _setup_rtt(self) -> None:
        """Each worker process's RTT at set-up: one `ping` to all at once (one trip), each timed to its reply."""
        if not self.actors:
            return
        self.trips.count()
        refs = [a.ping.remote() for a in self.actors]
        index = {r: k for k, r in enumerate(refs)}
        t0, pending = time.perf_counter(), list(refs)
        while pending:
            ready, pending = self._ray.wait(pending, num_returns=1, timeout=self.engine.startup_timeout_s)
            if not ready:
                break
            for r in ready:
                self._rtt.setup_s[index[r]] = time.perf_counter() - t0

    def links(self) -> tuple[LinkStats, ...]:
        """Each worker actor's link: its site, node, channel and RTT (at set-up and over the recent rounds)."""
        channels = getattr(self._transport, "kinds", None) or [self._transport.name] * len(self.actors)
        firsts = [g[0] for g in self.remote_groups]
        where = [self.placement[i] if i < len(self.placement) else None for i in firsts]
        return self._rtt.links(
            self.remote_groups,
            [self.sites[i] for i in firsts],
            [p.node_id if p is not None else None for p in where],
            channels,
        )

    def bind(self, model: Model) -> None:
        self._all("bind", [(model,)] * len(self.groups))

    def bind_facts(self, model: Model, fns: Sequence[Callable[..., Any]]) -> list[list[Any]]:
        parts = self._all("bind_facts", [(model, list(fns))] * len(self.groups))
        return [self._by_shard([part[k] for part in parts]) for k in range(len(fns))]

    def gram(self) -> list[np.ndarray | None]:
        return self._by_shard(self._all("gram", [()] * len(self.groups)))

    def map(self, fn: Callable[..., Any], args: Sequence[tuple[Any, ...]], model: Model | None = None) -> list[Any]:
        return self._by_shard(self._all("map", [(fn, a, model) for a in self._split(args)]))

    def init_states(self, payloads: Sequence[Any], init: StateInit = NO_INIT) -> np.ndarray | None:
        parts = self._all("init_states", [(p, init) for p in self._split(payloads)])
        return np.asarray(self._by_shard(parts), dtype=float) if init.calibrate else None

    def set_slowdown(self, factors: dict[int, float]) -> None:
        self._all("set_slowdown", [(factors,)] * len(self.groups))

    def calibrate(self) -> np.ndarray:
        return np.asarray(self._by_shard(self._all("calibrate", [()] * len(self.groups))))

    def capture(self) -> list[ShardState]:
        return [s for part in self._all("capture", [()] * len(self.groups)) for s in part]

    def revive(self, timeout_s: float) -> None:
        """Wait until every worker actor answers again (Ray restarts a dead one on a node of its site) — at most
        `timeout_s` for all; a worker still down then raises WorkerFailed naming its first shard and site (the
        site has no live node, or the restart failed). The caller then describes, binds and restores them."""
        self.trips.count()
        self._transport.close()
        deadline = time.monotonic() + timeout_s
        for g, actor in zip(self.remote_groups, self.actors):
            while True:
                try:
                    self._ray.get(actor.ping.remote(), timeout=max(0.1, min(5.0, deadline - time.monotonic())))
                    break
                except (
                    self._ray.exceptions.RayActorError,
                    self._ray.exceptions.GetTimeoutError,
                    self._ray.exceptions.ActorUnavailableError,
                ) as exc:
                    if time.monotonic() >= deadline:
                        site = self.sites[g[0]]
                        where = f" on a node of site {site!r}" if site is not None else ""
                        kind = FailureKind.SITE_UNAVAILABLE if site is not None else FailureKind.WORKER_LOST
                        raise WorkerFailed(
                            Failure(
                                kind,
                                f"the worker owning shards {g} did not come back{where} "
                                f"within {timeout_s:g} s ({type(exc).__name__})",
                                shard=g[0],
                                site=site,
                            )
                        ) from None
                    time.sleep(0.2)

    def restore(self, states: Sequence[ShardState], peers: Sequence[bytes] | None = None) -> None:
        by_shard = {s.shard: s for s in states}
        self._all("restore", [([by_shard[i] for i in g], peers) for g in self.groups])

    def step(self, messages: Any) -> StepResult:
        """One round on every actor; a failing worker raises WorkerFailed with its shard, site and node. `messages`:
        one per shard (each process is sent its shards'), or one for all shards (every process is sent it; the
        replies come back as one block per process, joined into one over all shards)."""
        self.send(messages)
        return self.collect()

    def send(self, messages: Any) -> None:
        """Start a round: send the worker processes their messages, then step the shards this process hosts (while
        the workers step theirs). `collect` finishes it; a second round may be sent before (a pipelined round's
        other chain group), never a third."""
        per_group: list[Any] | Broadcast
        if isinstance(messages, list):
            per_group = self._split(messages)
            home_msg = per_group[self._home_k] if self._home_k is not None else None
            remote: list[Any] | Broadcast = [m for k, m in enumerate(per_group) if k != self._home_k]
        else:
            home_msg, remote = messages, Broadcast(messages)
        self.trips.count()
        self._transport.send(remote)
        home: tuple[Any, Any] | None = None
        failure: Failure | None = None
        t0 = time.perf_counter()
        if self.home is not None:
            try:
                home = self.home.step(home_msg)
            except WorkerFailed as exc:
                failure = exc.failure
        self._pending.append((isinstance(messages, list), home, failure, time.perf_counter() - t0))

    def collect(self) -> StepResult:
        """The oldest sent round's replies (see `send`)."""
        per_shard, home, failure, hosted = self._pending.popleft()
        try:
            parts, timing = self._transport.collect()
        except WorkerFailed as exc:
            failure = failure or exc.failure
        if failure is not None:
            if failure.shard is not None and failure.shard < len(self.placement):
                p = self.placement[failure.shard]
                failure = failure.at(site=p.site, node_id=p.node_id)
            raise WorkerFailed(failure) from None
        timing.hosted_s = hosted
        if self._home_k is not None:
            parts.insert(self._home_k, home)
        times = np.concatenate([np.asarray(tm, dtype=float) for _, tm in parts])
        work, busy = np.empty(self.num_shards), np.empty(self.num_shards)
        work[self._order] = times
        busy[self._order] = np.repeat(np.add.reduceat(times, self._starts), self._sizes)  # each process's total
        t0 = time.perf_counter()
        if per_shard:
            replies: Any = [None] * self.num_shards
            for g, (rep, _) in zip(self.groups, parts):
                for j, i in enumerate(g):
                    replies[i] = rep[j]
        else:
            replies = join_blocks([(where, rep) for where, (rep, _) in zip(self._where, parts)], self.num_shards)
        timing.receive_s += time.perf_counter() - t0
        return StepResult(replies, work, busy, timing)

    def close(self) -> None:
        self._transport.close()
        for a in self.actors:
            self._ray.kill(a)
        self.actors = []


def _available_cpus() -> int:
    return max(1, int(free_cpus()))


def free_cpus() -> float:
    """The cluster's CPUs no actor or task holds now."""
    import ray

    return float(ray.available_resources().get("CPU", 0))
