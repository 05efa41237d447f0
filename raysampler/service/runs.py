"""Run execution for the service: turn a RunSpec into engine objects (validated at submit), queue runs, sample them
on background threads with `rs.Run`, write every chunk of draws durably, log events, honour cancel requests, and
recover after a restart (RUNNING runs become FAILED with their draws kept; PENDING runs are queued again).
"""
from __future__ import annotations

import hashlib
import json
import logging
import queue
import secrets
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .. import datasets as rs_datasets
from ..algorithms import ALGORITHMS, get_algorithm
from ..models import get_model
from ..runtime.coordinator import data_spec
from ..runtime.host import ShardHost, ShardSource
from ..options import RunOptions
from ..result import Result
from ..runtime.contracts import RunStats
from ..sampling import Run
from ..shards import shard
from .drawfiles import DrawFiles
from .schemas import TERMINAL, RunSpec
from .settings import Settings
from .store import Conflict, RecordStore

log = logging.getLogger("raysampler.service")


MAX_BUILTIN_ROWS = 5_000_000  # generated data sets are built in the service process: bound their size
MAX_BUILTIN_DIM = 10_000


class SpecError(ValueError):
    """A run spec the engine rejects; `loc` names the field (as in pydantic's errors)."""

    def __init__(self, loc: tuple[str, ...], message: str) -> None:
        super().__init__(message)
        self.loc = loc


class NotFound(LookupError):
    pass


class StateConflict(RuntimeError):
    """The request does not fit the run's state (e.g. DELETE of a RUNNING run)."""


@dataclass
class Built:
    model: Any
    shards: Any
    n: int
    d: int


def load_data(spec: RunSpec, tenant: str, store: RecordStore) -> tuple[np.ndarray, np.ndarray]:
    """(X, y) named by spec.data: a built-in data set or one the tenant uploaded."""
    if spec.data.dataset is not None:
        name = spec.data.dataset.removeprefix("builtin:")
        if name not in rs_datasets.available():
            raise SpecError(("data", "dataset"), f"unknown built-in data set {name!r}; valid: "
                            f"{', '.join('builtin:' + n for n in rs_datasets.available())}")
        for key, cap in (("n", MAX_BUILTIN_ROWS), ("d", MAX_BUILTIN_DIM)):
            value = spec.data.options.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value > cap:
                raise SpecError(("data", "options", key), f"{key} must be at most {cap} for a built-in data set, "
                                f"got {value}")
        try:
            return rs_datasets.load(name, **spec.data.options)
        except (TypeError, ValueError, MemoryError) as exc:
            raise SpecError(("data", "options"), f"{type(exc).__name__}: {exc}" if isinstance(exc, MemoryError)
                            else str(exc)) from None
    rec = store.get_dataset(tenant, spec.data.dataset_id)
    if rec is None:
        raise SpecError(("data", "dataset_id"), f"no data set {spec.data.dataset_id!r} (upload it with POST "
                        "/v1/datasets)")
    with np.load(rec["path"]) as z:
        return z["X"], z["y"]


def build(spec: RunSpec, tenant: str, store: RecordStore) -> Built:
    """Engine objects for a spec, checked the way the run will check them; errors are SpecError naming the field."""
    try:
        model = get_model(spec.model.family, **spec.model.params())
    except ValueError as exc:
        msg = str(exc)
        if "unknown model family" in msg:
            loc: tuple[str, ...] = ("model", "family")
        else:
            named = [k for k in spec.model.params() if k in msg.split(";")[0]]
            loc = ("model", named[0]) if named else ("model",)
        raise SpecError(loc, msg) from None
    except TypeError as exc:
        raise SpecError(("model",), str(exc)) from None
    try:
        algorithm = get_algorithm(spec.algorithm.name, **spec.algorithm.params)
    except (ValueError, TypeError) as exc:
        field = ("algorithm", "name") if spec.algorithm.name not in ALGORITHMS else ("algorithm", "params")
        raise SpecError(field, str(exc)) from None
    X, y = load_data(spec, tenant, store)
    try:
        shards = shard(X, y, num_shards=spec.num_shards, strategy=spec.shard_strategy, seed=spec.seed)
    except ValueError as exc:
        field = "shard_strategy" if "label" in str(exc) or "strategy" in str(exc) else "num_shards"
        raise SpecError((field,), str(exc)) from None
    host = ShardHost([ShardSource(i, s, s.site, s.columns) for i, s in enumerate(shards)], model, None, spec.seed,
                     spec.chains)
    try:
        facts = host.describe()
        bound = model.bind(data_spec(facts, model))
        host.bind(bound)
    except (ValueError, TypeError) as exc:
        raise SpecError(("data",), f"the data do not fit model family {spec.model.family!r}: {exc}") from None
    try:
        algorithm.check_shapes(len(shards), int(bound.dim), spec.chains)
    except ValueError as exc:
        raise SpecError(("algorithm", "params"), str(exc)) from None
    return Built(model, shards, int(X.shape[0]), int(bound.dim))


def spec_hash(spec: RunSpec) -> str:
    body = spec.model_dump(mode="json", exclude={"run_id"})
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def totals(spec: RunSpec) -> tuple[int, int]:
    """(rounds in all, draws kept per chain) — as rs.Run computes them."""
    opts = RunOptions(chains=spec.chains, num_rounds=spec.num_rounds, burn_in=spec.burn_in, thin=spec.thin)
    return opts.total_rounds, opts.max_draws


class RunManager:
    """Queues and executes runs; the only writer of run progress, draws and events."""

    def __init__(self, store: RecordStore, files: DrawFiles, settings: Settings, metrics: Any = None) -> None:
        self.store, self.files, self.settings, self.metrics = store, files, settings, metrics
        self._queue: queue.Queue[tuple[str, str] | None] = queue.Queue()
        self._cancel: dict[tuple[str, str], threading.Event] = {}
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._stopping = threading.Event()

    # --- lifecycle --------------------------------------------------------------------------------------------

    def start(self) -> None:
        """Recover from a previous process, connect to Ray (executor "ray"), then start the executor threads."""
        if self.settings.executor == "ray":
            from ..runtime.executors import ensure_ray

            ensure_ray(self.settings.ray_address, num_cpus=self.settings.ray_num_cpus)
        for rec in self.store.runs_with_status(["RUNNING"]):
            msg = (f"the service stopped while this run was RUNNING; {rec['draws_stored']} draws per chain were "
                   f"stored and are kept")
            self._finish(rec["tenant"], rec["id"], "FAILED", error=msg)
        for rec in self.store.runs_with_status(["PENDING"]):
            self._enqueue(rec["tenant"], rec["id"])
        for k in range(self.settings.max_concurrent_runs):
            t = threading.Thread(target=self._loop, name=f"raysampler-run-{k}", daemon=True)
            t.start()
            self._threads.append(t)

    def stop(self, timeout: float = 30.0) -> None:
        """Stop sampling (runs in progress end FAILED, draws kept) and join the executor threads."""
        self._stopping.set()
        with self._lock:
            for ev in self._cancel.values():
                ev.set()
        for _ in self._threads:
            self._queue.put(None)
        for t in self._threads:
            t.join(timeout)

    # --- requests ---------------------------------------------------------------------------------------------

    def submit(self, tenant: str, spec: RunSpec, idempotency_key: str | None) -> tuple[dict, bool]:
        """Validate and queue a run; returns (record, created). A repeat of the same key/run_id returns the run."""
        h = spec_hash(spec)
        replay = self._replay(tenant, spec, idempotency_key, h)
        if replay is not None:
            return replay, False
        build(spec, tenant, self.store)  # 422 now rather than a FAILED run later
        run_id = spec.run_id or "run-" + secrets.token_hex(8)
        rounds_total, draws_total = totals(spec)
        try:
            rec = self.store.create_run(tenant, run_id, spec.model_dump(mode="json"), h, idempotency_key,
                                        rounds_total, draws_total, spec.chains)
        except Conflict as exc:  # a concurrent identical submit won the race
            return self._check_same(exc.existing, h, idempotency_key), False
        self.store.add_event(rec["key"], "status", {"status": "PENDING"})
        if self.metrics is not None:
            self.metrics.submitted.inc()
        self._enqueue(tenant, run_id)
        return rec, True

    def _replay(self, tenant: str, spec: RunSpec, key: str | None, h: str) -> dict | None:
        existing = None
        if spec.run_id is not None:
            existing = self.store.get_run(tenant, spec.run_id)
        if existing is None and key is not None:
            existing = self.store.get_run_by_idempotency_key(tenant, key)
        if existing is not None and spec.run_id is not None and existing["id"] != spec.run_id:
            raise StateConflict(f"Idempotency-Key {key!r} was already used for run {existing['id']}, not "
                                f"{spec.run_id!r}")
        return None if existing is None else self._check_same(existing, h, key)

    @staticmethod
    def _check_same(existing: dict, h: str, key: str | None) -> dict:
        if existing["spec_hash"] != h:
            what = f"Idempotency-Key {key!r}" if key and existing.get("idempotency_key") == key else \
                f"run_id {existing['id']!r}"
            raise StateConflict(f"{what} was already used for a different run spec (run {existing['id']})")
        return existing

    def cancel(self, tenant: str, run_id: str) -> dict:
        rec = self.store.get_run(tenant, run_id)
        if rec is None:
            raise NotFound(run_id)
        if rec["status"] in TERMINAL:
            raise StateConflict(f"run {run_id} is already {rec['status']}")
        self.store.update_run(tenant, run_id, cancel_requested=1)
        with self._lock:
            ev = self._cancel.get((tenant, run_id))
        if ev is not None:
            ev.set()  # before the transition below: a run the executor has just started sees it
        self._finish(tenant, run_id, "CANCELLED", only_from=("PENDING",))  # no-op once RUNNING
        return self.store.get_run(tenant, run_id)

    def delete(self, tenant: str, run_id: str) -> None:
        rec = self.store.get_run(tenant, run_id)
        if rec is None:
            raise NotFound(run_id)
        if rec["status"] not in TERMINAL:
            raise StateConflict(f"run {run_id} is {rec['status']}; cancel it before deleting it")
        self.store.delete_run(tenant, run_id)
        self.files.delete(tenant, run_id)

    # --- execution --------------------------------------------------------------------------------------------

    def _enqueue(self, tenant: str, run_id: str) -> None:
        with self._lock:
            self._cancel[(tenant, run_id)] = threading.Event()
        self._queue.put((tenant, run_id))

    def _loop(self) -> None:
        while True:
            item = self._queue.get()
            if item is None or self._stopping.is_set():
                return
            tenant, run_id = item
            try:
                self._execute(tenant, run_id)
            except Exception as exc:  # never lose the thread; the run is marked FAILED with the reason
                log.exception("run %s/%s crashed", tenant, run_id)
                rec = self.store.get_run(tenant, run_id)
                if rec is not None and rec["status"] not in TERMINAL:
                    self._finish(tenant, run_id, "FAILED", error=f"internal error: {exc!r}")
            finally:
                with self._lock:
                    self._cancel.pop((tenant, run_id), None)

    def _execute(self, tenant: str, run_id: str) -> None:
        rec = self.store.get_run(tenant, run_id)
        if rec is None or rec["status"] != "PENDING" or rec["cancel_requested"]:
            return
        key = rec["key"]
        with self._lock:
            cancel = self._cancel.setdefault((tenant, run_id), threading.Event())
        spec = RunSpec.model_validate(rec["spec"])
        if not self.store.transition(tenant, run_id, ("PENDING",), event=("status", {"status": "RUNNING"}),
                                     status="RUNNING", started_at=time.time()):
            return  # cancelled (or deleted) in between
        try:
            built = build(spec, tenant, self.store)
            run = Run(built.model, built.shards, spec.algorithm.name, chains=spec.chains, num_rounds=spec.num_rounds,
                      burn_in=spec.burn_in, thin=spec.thin, seed=spec.seed, executor=self.settings.executor,
                      time_budget_s=spec.time_budget_s, keep_draws=False, **spec.algorithm.params)
        except Exception as exc:
            self._finish(tenant, run_id, "FAILED", error=f"{type(exc).__name__}: {exc}")
            return
        with run:
            names = list(run.setup.param_names)
            timings = {"setup_s": float(run.setup.setup_time_s)}
            self.store.update_run(tenant, run_id, dim=len(names), param_names=names, timings=timings)
            self.store.add_event(key, "setup", {"dim": len(names), "setup_time_s": timings["setup_s"]})
            stored, t_stats = 0, time.monotonic()
            cancelled = cancel.is_set()
            if not cancelled:
                for chunk in run.chunks(target_chunk_s=self.settings.chunk_s):
                    n = len(chunk.theta)
                    if n:
                        self.files.append(tenant, run_id, stored, chunk.theta, chunk.stats)
                        stored += n
                        if self.metrics is not None:
                            self.metrics.draws.inc(n * spec.chains)
                    fields: dict[str, Any] = {"rounds_done": chunk.rounds_done, "draws_stored": stored}
                    if time.monotonic() - t_stats > 2.0:  # per-worker τ_i, N_i, idle fraction while it runs
                        live = run.stats()
                        fields["workers"] = _workers(live)
                        fields["timings"] = timings | {"sampling_s": float(live.sampling_time_s)}
                        t_stats = time.monotonic()
                    self.store.update_run(tenant, run_id, **fields)
                    self.store.add_event(key, "progress", {"rounds_done": chunk.rounds_done,
                                                           "rounds_total": run.total_rounds, "draws_stored": stored})
                    if cancel.is_set():
                        cancelled = True
                        break
            stats = run.stats()
            timings.update(sampling_s=float(stats.sampling_time_s),
                           wall_s=float(time.perf_counter() - run._start))
            self.store.update_run(tenant, run_id, workers=_workers(stats), timings=timings)
            warnings = run.warnings()
        for w in warnings:
            self.store.add_event(key, "warning", {"message": w})
        if cancelled and self._stopping.is_set():
            self._finish(tenant, run_id, "FAILED", warnings=warnings,
                         error=f"the service shut down during the run; {stored} draws per chain were stored and are kept")
        elif cancelled:
            self._finish(tenant, run_id, "CANCELLED", warnings=warnings)
        elif run.failure is not None:
            self._finish(tenant, run_id, "FAILED", warnings=warnings,
                         error=f"{run.failure.describe()}; {stored} draws per chain before it are kept")
        else:
            self._finish(tenant, run_id, "SUCCEEDED", warnings=warnings)

    def _finish(self, tenant: str, run_id: str, status: str, error: str | None = None,
                warnings: list[str] | None = None, only_from: tuple[str, ...] = ("PENDING", "RUNNING")) -> bool:
        """Move a run to its final status if it is still in `only_from` (atomically); log the status event."""
        fields: dict[str, Any] = {"status": status, "finished_at": time.time(), "error": error}
        if warnings:
            fields["warnings"] = warnings
        data = {"status": status} | ({"error": error} if error else {})
        if not self.store.transition(tenant, run_id, only_from, event=("status", data), **fields):
            return False
        if self.metrics is not None:
            self.metrics.finished.labels(status=status).inc()
        return True


def _workers(stats: RunStats) -> list[dict]:
    """Per-shard placement, τ_i, N_i and idle fraction from the coordinator's statistics (NaN → None)."""

    def val(arr: Any, i: int, cast: type) -> Any:
        a = np.asarray(arr, dtype=float).ravel()
        return cast(a[i]) if i < len(a) and np.isfinite(a[i]) else None

    out = []
    for i in range(len(stats.N)):
        p = stats.placement[i] if i < len(stats.placement) else None
        out.append({"shard": i, "site": p.site if p else None, "node_id": p.node_id if p else None,
                    "hostname": p.hostname if p else None, "pid": p.pid if p else None,
                    "tau_s": val(stats.tau, i, float), "local_steps": val(stats.N, i, int),
                    "idle_fraction": val(stats.idle_fraction, i, float)})
    return out


def stored_result(rec: dict, files: DrawFiles) -> Result:
    """The run's durable draws so far as an engine Result (summary, ArviZ export)."""
    n = rec["draws_stored"]
    theta = files.read(rec["tenant"], rec["id"], 0, n) if n else np.empty((0, rec["chains"], rec["dim"] or 0))
    stats = {k: v.T for k, v in files.read_stats(rec["tenant"], rec["id"], n).items()} if n else {}
    info = {"algorithm": rec["spec"]["algorithm"]["name"], "executor": "service", "run_id": rec["id"]}
    return Result(np.ascontiguousarray(theta.transpose(1, 0, 2)), list(rec["param_names"] or []), {}, stats, info)


def new_dataset_id() -> str:
    return "ds-" + secrets.token_hex(8)


def dataset_path(settings: Settings, tenant: str, dataset_id: str) -> Path:
    return settings.datasets_dir / tenant / f"{dataset_id}.npz"
