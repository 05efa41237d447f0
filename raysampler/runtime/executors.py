"""Start a coordinator in-process ("local") or as a Ray actor on the driver's node that creates its own worker
actors ("ray"); either way the driver holds a `CoordinatorHandle`."""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from ..algorithms.base import Algorithm
from ..enums import Executor, TransportKind
from ..errors import Failure, FailureKind, RunCancelled, WorkerFailed
from ..models.contract import Model
from .contracts import Chunk, CoordinatorHandle, RunConfig, RunState, RunStats, SetupInfo
from .coordinator import Coordinator
from .host import ShardSource
from .pools import LocalPool, RayPool, free_cpus
from .warm_hosts import WARM_HOSTS, session_key
from .worker_process import tune_worker_process

log = logging.getLogger("raysampler.runtime")

CANCEL_POLL_S = 0.1  # how often a set-up call on Ray looks at its cancel event while it waits
CPU_RELEASE_WAIT_S = 0.5  # the longest a kept coordinator waits for its last run's worker CPUs (`_await_release`)


class CoordinatorHost:
    """The coordinator with its pool; in Ray mode this object lives inside the coordinator actor.

    `start` creates the pool (a method, not the constructor, so errors keep their type through Ray); `setup` or
    `resume` then builds the coordinator complete.
    """

    def __init__(self) -> None:
        self.coordinator: Coordinator | None = None
        self.pool: LocalPool | RayPool | None = None
        #: after a close that killed worker actors: the free CPUs to wait for before the next run plans its processes
        #: (Ray frees a killed actor's CPU tens of ms after the kill), and until when (`_await_release`)
        self._release: tuple[float, float] | None = None

    def start(
        self,
        executor: Executor,
        sources: Sequence[ShardSource],
        model: Model,
        algorithm: Algorithm,
        config: RunConfig,
        max_actors: int | None = None,
        transport: TransportKind = TransportKind.SOCKET,
    ) -> None:
        if executor == Executor.RAY:  # this object is the coordinator actor: its process steps shards too
            tune_worker_process()
            self._await_release()
            self.pool = RayPool(
                sources,
                model,
                algorithm,
                config.seed,
                config.chains,
                max_actors=max_actors,
                transport=transport,
                engine=config.engine,
                secure=config.secure_sums,
                keyed=config.keyed_noise,
            )
        else:
            self.pool = LocalPool(
                sources, model, algorithm, config.seed, config.chains, config.secure_sums, config.keyed_noise
            )
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
        self.pool.revive(self.config.engine.site_wait_s)
        sent = self.coordinator.ledger if self.coordinator is not None else None  # rounds rolled back were sent too
        self.coordinator = Coordinator.resume(self.pool, self.model, self.algorithm, self.config, state, sent)
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
        """Close the pool (its worker actors killed) and drop the run, so that in Ray mode this process may host the
        driver's next run (`warm_hosts`: only once this returns without an error)."""
        pool, self.pool, self.coordinator = self.pool, None, None
        for name in ("model", "algorithm", "config"):
            self.__dict__.pop(name, None)
        if isinstance(pool, RayPool) and pool.actors:  # each worker actor holds one CPU
            self._release = (free_cpus() + len(pool.actors), time.monotonic() + CPU_RELEASE_WAIT_S)
        if pool is not None:
            pool.close()
        # no gc.collect(): it found nothing to free here and took longer than a small run's set-up

    def _await_release(self) -> None:
        """Wait (boundedly) for the last run's worker actors' CPUs, so that a run hosted right after it plans as
        many processes as a run on a fresh actor would. Other runs may take those CPUs meanwhile: the wait ends
        at its deadline then."""
        if self._release is None:
            return
        want, deadline = self._release
        self._release = None
        while free_cpus() < want and time.monotonic() < deadline:
            time.sleep(0.005)


class LocalHandle:
    """Calls the in-process coordinator directly, with BLAS held to one thread while it works.

    Multi-threaded BLAS is far slower on the sampler's small matrix products (docs/performance.md, "The two same-node
    defaults").
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
    """Calls the coordinator actor; the driver talks to nothing else. Errors arrive with their own type.

    With a `cancel` event, the set-up calls (start, setup, resume) wait for their answer in short slices and, once
    it is set, kill the coordinator actor (its worker actors share its fate) and raise `RunCancelled`: a cancel
    never waits for tuning or the workers' start to finish."""

    def __init__(
        self, actor: Any, cancel: threading.Event | None = None, keep: int = 0, key: tuple[str, str] | None = None
    ) -> None:
        import ray

        self.actor, self._ray, self.cancel = actor, ray, cancel
        self._killed = False
        self._keep, self._key = keep, key  # closed cleanly, the actor is kept for the next run (`warm_hosts`)
        self._kept = False  # handed on: the actor is no longer this handle's to close or kill

    def _get(self, ref: Any, interruptible: bool = False) -> Any:
        if interruptible and self.cancel is not None:
            while not self._ray.wait([ref], timeout=CANCEL_POLL_S)[0]:
                if self.cancel.is_set():
                    self.kill()
                    raise RunCancelled("the run was cancelled while setting up")
        try:
            return self._ray.get(ref)
        except self._ray.exceptions.RayTaskError as exc:
            raise exc.as_instanceof_cause() from None  # the coordinator's own exception type and message
        except self._ray.exceptions.RayActorError as exc:  # its process (or node) died: the run's state is elsewhere
            raise WorkerFailed(
                Failure(FailureKind.COORDINATOR_LOST, f"the coordinator process was lost ({type(exc).__name__})")
            ) from None

    def start(self, *args: Any) -> None:
        self._get(self.actor.start.remote(*args), interruptible=True)

    def setup(self, slowdown: dict[int, float] | None = None) -> SetupInfo:
        return self._get(self.actor.setup.remote(slowdown), interruptible=True)

    def resume(self, state: RunState) -> SetupInfo:
        return self._get(self.actor.resume.remote(state), interruptible=True)

    def run(self, max_rounds: int, time_left_s: float | None = None, capture: bool = False) -> Chunk:
        return self._get(self.actor.run.remote(max_rounds, time_left_s, capture))

    def capture(self) -> RunState:
        return self._get(self.actor.capture.remote())

    def recover(self, state: RunState) -> SetupInfo:
        return self._get(self.actor.recover.remote(state))

    def stats(self) -> RunStats:
        return self._get(self.actor.stats.remote())

    def close(self) -> None:
        if self._killed or self._kept:  # cancelled mid-call: a graceful close would queue behind that call
            return
        clean = False
        try:
            self._ray.get(self.actor.close.remote())
            clean = True
        except Exception:
            pass  # closing must not mask the error that ended the run
        finally:
            if clean and self._key is not None and WARM_HOSTS.give_back(self._key, self.actor, self._keep):
                self._kept = True
            else:
                self.kill()

    def kill(self) -> None:
        """Stop the coordinator actor now; the worker actors it started die with it (Ray's owner fate-sharing)."""
        if self._kept:  # another run's coordinator now
            return
        self._killed = True
        self._ray.kill(self.actor)


def cluster_address(address: str | None = None) -> str | None:
    """The Ray cluster to join, or None for a private local Ray.

    Joining is always an explicit choice: `address` (Settings.ray_address, `--ray-address`), else $RAY_ADDRESS
    (Ray's own variable, which Ray users expect honoured). "local" or nothing means a private local Ray. Without
    this rule `ray.init()` would join whatever cluster Ray last recorded in its temp dir (`ray start`,
    `ray.cluster_utils.Cluster`), and the service died at start-up whenever another Ray ran on the machine.
    """
    chosen = address or os.environ.get("RAY_ADDRESS") or None
    return None if chosen is None or chosen == "local" else chosen


class _TokenNoticeFilter(logging.Filter):
    """Drops Ray's notice that a new local cluster turned token authentication on (the cluster stays as Ray made
    it)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Token authentication is enabled for this Ray cluster")


def _quiet_token_notice() -> None:
    """Install `_TokenNoticeFilter` once on the logger of Ray's authentication set-up."""
    logger = logging.getLogger("ray._private.authentication.authentication_token_setup")
    if not any(isinstance(f, _TokenNoticeFilter) for f in logger.filters):
        logger.addFilter(_TokenNoticeFilter())


def ensure_ray(
    address: str | None = None,
    num_cpus: int | None = None,
    temp_dir: str | os.PathLike | None = None,
    object_store_bytes: int | None = None,
) -> None:
    """Connect to the cluster `cluster_address(address)` names, or start a private local Ray in-process (never
    another process's Ray; no dashboard; `num_cpus` CPUs, default all; object store `object_store_bytes`, default
    $RAYSAMPLER_OBJECT_STORE_BYTES, else 1 GiB: `EngineSettings.object_store_bytes`). A Ray this process already
    started or joined is used as it is.

    `temp_dir` (the service's `embedded_ray_dir`) gives the private Ray a temp dir of its own, so that what a crashed
    earlier process of the same service left there is found and cleared (`clear_stale_sessions`) before the start.
    Without it the private Ray uses Ray's default temp dir ($RAY_TMPDIR/ray, else /tmp/ray), shared but harmless:
    a "local" start reads nothing there.
    """
    import ray

    if ray.is_initialized():
        return
    join = cluster_address(address)
    if join is not None:
        ray.init(address=join, configure_logging=False, log_to_driver=False)
        return
    if object_store_bytes is None:
        from ..settings import EngineSettings

        object_store_bytes = EngineSettings.from_env().object_store_bytes
    where: dict[str, Any] = {}
    if temp_dir is not None:
        private = Path(temp_dir).resolve()
        private.mkdir(mode=0o700, parents=True, exist_ok=True)
        if hasattr(os, "getuid") and private.stat().st_uid != os.getuid():  # a predictable name in a shared /tmp
            raise RuntimeError(f"the private Ray's temp dir {private} belongs to another user; remove it")
        clear_stale_sessions(private)
        where["_temp_dir"] = str(private)
    # Ray turns token authentication on for a new local cluster when RAY_AUTH_MODE is unset, and says so on stderr
    # at every start. This private Ray is the service's own: keep Ray's choice, without the notice. (Setting the
    # variable here instead would be too late: `import ray` has already read its configuration.)
    _quiet_token_notice()
    ray.init(
        address="local",  # start one even when another Ray runs here, whatever its temp dir records
        include_dashboard=False,
        configure_logging=False,
        log_to_driver=False,
        num_cpus=num_cpus,
        object_store_memory=object_store_bytes,
        **where,
    )
    if where:
        os.chmod(where["_temp_dir"], 0o700)  # Ray opens its temp dir to all users (made for a shared /tmp/ray)
    log.info("started a private local Ray%s", f" in {where['_temp_dir']}" if where else "")


# Ray's longest Unix socket is <temp dir>/session_<date>_<time>_<µs>_<pid>/sockets/plasma_store and AF_UNIX paths
# stop at 107 bytes: 107 - len("/session_2026-01-01_00-00-00_000000_") - 7 pid digits - len("/sockets/plasma_store").
MAX_RAY_TEMP_DIR = 43


def embedded_ray_dir(data_dir: str | os.PathLike) -> Path:
    """The temp dir of the service's private Ray: <data dir>/ray, or where that path is too long for Ray's Unix
    sockets, rs-<hash of the data dir> in $RAY_TMPDIR (else the system temp dir, else /tmp). One per data dir, so a
    restart finds the sessions its crashed predecessor left, and nobody else's."""
    data = Path(data_dir).resolve()
    digest = "rs-" + hashlib.sha256(os.fsencode(data)).hexdigest()[:12]
    bases = [os.environ.get("RAY_TMPDIR") or tempfile.gettempdir(), "/tmp"]
    candidates = [data / "ray", *(Path(b).resolve() / digest for b in bases)]
    return next((c for c in candidates if len(os.fsencode(c)) <= MAX_RAY_TEMP_DIR), candidates[-1])


_SESSION = re.compile(r"session_(\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d_\d{6})_(\d+)")


def _started_at(pid: int) -> float | None:
    """When process `pid` started (epoch seconds), or None if it is gone or a zombie. Linux only (/proc)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        boot = next(
            float(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines() if line.startswith("btime")
        )
    except (OSError, IndexError, StopIteration, ValueError):
        return None
    if fields[0] in ("Z", "X"):
        return None
    return boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22, starttime, in clock ticks since boot


def _session_is_stale(name: str) -> bool:
    """A session folder (session_<date>_<time>_<µs>_<pid>) is stale when the process that started it is gone, is
    this process (a restarted container reuses pids), or its pid belongs to a process that started well after the
    session did. Unknown names are never stale: in doubt a session counts as live, which costs only a late cleanup."""
    m = _SESSION.fullmatch(name)
    if m is None:
        return False
    created = datetime.strptime(m[1], "%Y-%m-%d_%H-%M-%S_%f").timestamp()  # Ray names it in local time
    pid = int(m[2])
    if pid == os.getpid():
        return True
    if not Path("/proc").is_dir():  # no /proc (macOS): only whether the pid is taken
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            pass
        return False
    started = _started_at(pid)
    return started is None or started > created + 2 * 3600.0  # slack for a clock change since the session began


def session_processes(session_dirs: Sequence[Path]) -> list[int]:
    """Processes (other than this one) whose command line names, or whose open files lie in, one of
    `session_dirs`: a Ray session's gcs_server, raylet, agents and workers (their logs are open there)."""
    roots = [os.fsencode(d) for d in session_dirs]
    if not roots or not Path("/proc").is_dir():
        return []

    def inside(path: bytes) -> bool:
        return any(path == r or path.startswith(r + b"/") for r in roots)

    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = Path(entry.path, "cmdline").read_bytes()
            hit = any(r + b"/" in cmdline for r in roots)
            if not hit:
                fds = os.path.join(entry.path, "fd")
                hit = any(inside(os.fsencode(os.readlink(os.path.join(fds, fd)))) for fd in os.listdir(fds))
        except OSError:  # gone meanwhile, or not ours to look at
            continue
        if hit:
            found.append(int(entry.name))
    return found


def clear_stale_sessions(temp_dir: Path) -> list[int]:
    """Clear what a crashed earlier process left in the private Ray temp dir `temp_dir` (never a shared one):
    SIGKILL the processes still tied to its stale sessions, then delete those sessions' folders but the newest
    (kept for its logs). Returns the pids killed.

    After SIGKILL of the process that started Ray in-process (Ray 2.60, Linux) gcs_server, raylet, the monitors and
    the dashboard die with it (the kernel's parent-death signal), the workers (coordinator, shard hosts; their own
    process groups) soon after, but the dashboard and runtime-env agents, orphaned, live on a while; the session
    folder (logs, socket files) stays. Ray writes no ray_current_cluster file for an in-process start, and a "local"
    start reads none, so none of this stops the restart; clearing it frees the orphans' memory and keeps a crash
    loop from piling them up (docs/performance.md, "Measurements behind choices in the code").
    """
    stale = sorted(p for p in temp_dir.glob("session_*") if not p.is_symlink() and _session_is_stale(p.name))
    killed = []
    for pid in session_processes(stale):
        try:
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        except OSError:
            pass
    deadline = time.monotonic() + 5.0
    while killed and time.monotonic() < deadline and any(_started_at(p) is not None for p in killed):
        time.sleep(0.05)
    for old in stale[:-1]:
        shutil.rmtree(old, ignore_errors=True)
    if killed:
        log.warning("killed %d leftover Ray processes of a crashed run in %s: %s", len(killed), temp_dir, killed)
    return killed


def _ship_by_value(model: Model) -> None:
    """Let workers unpickle a user's model class whose module they cannot import (a script's sibling file, a test)."""
    import ray.cloudpickle

    name = type(model).__module__
    module = sys.modules.get(name)
    if module is not None and name != "__main__" and not name.startswith("raysampler"):
        ray.cloudpickle.register_pickle_by_value(module)


def start(
    executor: Executor,
    sources: Sequence[ShardSource],
    model: Model,
    algorithm: Algorithm,
    config: RunConfig,
    max_actors: int | None = None,
    transport: TransportKind = TransportKind.SOCKET,
    cancel: threading.Event | None = None,
) -> CoordinatorHandle:
    """A handle on a new coordinator for this run (its pool started; call setup() or resume() next). On Ray, a
    `cancel` set meanwhile stops the start (and later the set-up) and raises `RunCancelled` (see RayHandle)."""
    if executor == Executor.LOCAL:
        host = CoordinatorHost()
        host.start(Executor.LOCAL, list(sources), model, algorithm, config)
        return LocalHandle(host)
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    ensure_ray(object_store_bytes=config.engine.object_store_bytes)
    _ship_by_value(model)
    # In-memory shards go to the object store once; a worker reads a path shard itself, on its node.
    placed = [
        s
        if getattr(s.data, "path", None) is not None
        else ShardSource(
            s.shard,
            ray.put(s.data.read() if hasattr(s.data, "read") else s.data),
            s.site,
            s.columns,
            s.index,
            s.elements,
        )
        for s in sources
    ]
    if cancel is not None and cancel.is_set():
        raise RunCancelled("the run was cancelled while setting up")
    keep = config.engine.warm_hosts
    key = session_key() if keep > 0 else None
    actor = WARM_HOSTS.take(key) if key is not None else None
    if actor is None:
        here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
        actor = ray.remote(num_cpus=0, scheduling_strategy=here)(CoordinatorHost).remote()
    handle = RayHandle(actor, cancel, keep, key)
    try:
        handle.start(Executor.RAY, placed, model, algorithm, config, max_actors, transport)
    except BaseException:
        handle.kill()  # a pool half built may have worker actors only this actor's death ends (fate-sharing)
        raise
    return handle
