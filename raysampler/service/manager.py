"""The run manager: queue runs, sample them on background threads with `rs.Run`, store every chunk of draws with its
checkpoint, log events, honour cancel requests, and carry runs through failures: a lost worker, node or
coordinator is recovered inside the run; after a restart of the service, runs that were RUNNING resume from their
checkpoints and PENDING ones are queued again; a FAILED or CANCELLED run resumes on request.

Replicas. Several service processes may share one database and one storage. Each drives a run only while it holds
the run's lease (`RecordStore.acquire_lease`), renewed every third of RAYSAMPLER_LEASE_S by a keeper thread that
also looks for runs nobody drives (PENDING ones, and RUNNING ones whose driver let its lease expire: it died) and
takes them, resuming a RUNNING one from its last checkpoint. Every write of the driver carries its lease: database
writes are conditional on its epoch, draw files and checkpoints carry the epoch in their names and pass a fence, so a
replica that lost its lease can no longer change what anyone reads (`raysampler.checkpoints`).
"""

from __future__ import annotations

import dataclasses
import logging
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from ..checkpoints import CheckpointError
from ..diagnostics import FINAL_DRAWS, WarningKind, diagnose, superchains_for
from ..enums import Executor, StopReason
from ..errors import Failure, FailureKind, RunCancelled, SamplingError, failure_of
from ..events import EventKind, RunEvent
from ..options import ExecutionOptions, RunOptions
from ..sampling import Run
from ..wire import (
    ProgressEvent,
    ResumedEvent,
    RunStatus,
    RunStopReason,
    SetupEvent,
    StatusEvent,
    WarningEvent,
    WorkerLostEvent,
)
from .datasets import dataset_storage
from .drawfiles import DrawFiles
from .errors import AccessDenied, NotFound, QuotaExceeded, StateConflict
from .metrics import LiveRun, Metrics
from .queue import FairQueue
from .records import Lease, RunFields, RunRecord
from .reports import jsonable, network_info, worker_stats
from .results import MIN_SUMMARY_DRAWS, progress_fraction, summary_of
from .schemas import (
    DiagnosticsInfo,
    FailureInfo,
    RunSpec,
)
from .settings import Settings
from .specs import SpecError, build, run_options, spec_hash
from .store import ActiveLimit, Conflict, LeaseLost, RecordStore
from .summaries import DEFAULT_CI_PROB, SummaryCache, import_statistics

log = logging.getLogger("raysampler.service")

LIVE_STATS_S = 2.0  # how often a running run's per-worker statistics are refreshed in its record
RETRY_AFTER_S = 30  # what a 429 for too many active runs suggests
_ACTIVE = (RunStatus.PENDING, RunStatus.RUNNING)
_CONVERGENCE = (WarningKind.RHAT, WarningKind.ESS)  # engine warnings replaced by the stored draws' diagnostics
#: the engine's stop reasons as the service reports them
_STOP_REASONS = {
    StopReason.COMPLETED: RunStopReason.NUM_ROUNDS,
    StopReason.CONVERGED: RunStopReason.CONVERGED,
    StopReason.MAX_ROUNDS: RunStopReason.MAX_ROUNDS,
    StopReason.TIME_BUDGET: RunStopReason.TIME_BUDGET,
    StopReason.PRIVACY_BUDGET: RunStopReason.PRIVACY_BUDGET,
    StopReason.FAILURE: RunStopReason.FAILED,
    StopReason.STOPPED: RunStopReason.CANCELLED,
}
_STATUS_STOP_REASONS = {RunStatus.FAILED: RunStopReason.FAILED, RunStatus.CANCELLED: RunStopReason.CANCELLED}


@dataclass(frozen=True)
class _Sampled:
    """How the sampling loop ended: draws per chain stored, and whether a cancel (or shutdown) stopped it."""

    stored: int
    cancelled: bool


@dataclass
class _Drive:
    """A run this replica drives: its record as picked up, its lease, its cancel signal, and until when (this
    process's monotonic clock) the lease surely holds without another renewal."""

    rec: RunRecord
    lease: Lease
    cancel: threading.Event
    valid_until: float
    lost: threading.Event = field(default_factory=threading.Event)

    def fence(self) -> None:
        """Raise LeaseLost unless the lease surely still holds (called before every write of draws or checkpoints:
        a replica that stopped renewing writes nothing once another one may have taken the run)."""
        if self.lost.is_set() or time.monotonic() > self.valid_until:
            self.lost.set()
            raise LeaseLost(self.lease)


class RunManager:
    """Queues and executes runs; the only writer of run progress, draws and events."""

    def __init__(
        self, store: RecordStore, files: DrawFiles, settings: Settings, metrics: Metrics | None = None
    ) -> None:
        self.store, self.files, self.settings, self.metrics = store, files, settings, metrics
        self.grants = settings.grants()  # malformed grants refuse to start, naming the entry
        self.replica = settings.replica  # this process's name in run leases
        self._queue = FairQueue()
        self._cancel: dict[tuple[str, str], threading.Event] = {}
        self._drives: dict[tuple[str, str], _Drive | None] = {}  # runs driven here (None: acquiring the lease)
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._stopping = threading.Event()
        # posterior summaries by (run, stored draws, ci_prob); their CPU time counted in the metrics
        self.summaries = SummaryCache(on_computed=None if metrics is None else metrics.summary_cpu.inc)
        self._live: dict[tuple[str, str], LiveRun] = {}  # running runs' numbers for /metrics (dropped at their end)
        if metrics is not None:
            metrics.watch_live_runs(self.live_runs)

    # --- lifecycle --------------------------------------------------------------------------------------------

    def start(self) -> None:
        """Recover from a previous process, connect to Ray (executor "ray"), then start the executor threads.

        Without an explicit Ray address the service starts a private local Ray whose temp dir belongs to its data
        dir, so another Ray on the machine is never joined by accident and a crash's leftovers are cleared."""
        if self.settings.executor == Executor.RAY:
            from ..runtime.executors import embedded_ray_dir, ensure_ray

            ensure_ray(
                self.settings.ray_address,
                num_cpus=self.settings.ray_num_cpus,
                temp_dir=embedded_ray_dir(self.settings.data_dir),
                object_store_bytes=self.settings.object_store_bytes,
            )
        threading.Thread(target=import_statistics, name="raysampler-import-statistics", daemon=True).start()
        self._scan()  # runs of an earlier process of this replica, runs nobody drives, runs left PENDING
        for k in range(self.settings.max_concurrent_runs):
            t = threading.Thread(target=self._loop, name=f"raysampler-run-{k}", daemon=True)
            t.start()
            self._threads.append(t)
        self._keeper = threading.Thread(target=self._keep, name="raysampler-lease-keeper", daemon=True)
        self._keeper.start()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop sampling and join the executor threads. Runs in progress stay RUNNING with their draws and
        checkpoints, and their leases are given up: another replica (or this one's next start) resumes them."""
        self._stopping.set()
        with self._lock:
            for ev in self._cancel.values():
                ev.set()
        for _ in self._threads:
            self._queue.stop_one()
        for t in self._threads:
            t.join(timeout)
        keeper = getattr(self, "_keeper", None)
        if keeper is not None:
            keeper.join(timeout)

    def queue_order(self) -> list[tuple[str, str]]:
        """The runs waiting to sample, (tenant, run id) in the order they will start."""
        return self._queue.order()

    def stored_bytes(self, tenant: str) -> int:
        """What the tenant stores: draws, checkpoints and uploaded data sets."""
        return self.files.tenant_bytes(tenant) + dataset_storage(self.settings).child(tenant).size_bytes()

    # --- leases -----------------------------------------------------------------------------------------------

    def _keep(self) -> None:
        """The keeper: every third of the lease time, renew the leases of the runs driven here, pass on cancel
        requests made through other replicas, and take up runs nobody drives."""
        period = self.settings.lease_s / 3
        while not self._stopping.wait(period):
            try:
                self._renew()
                self._scan()
            except Exception:  # the database is unreachable for now: leases lapse, their fences stop the writes
                log.exception("lease keeping failed; retrying in %.1f s", period)

    def _renew(self) -> None:
        with self._lock:
            drives = [d for d in self._drives.values() if d is not None]
        for d in drives:
            t0 = time.monotonic()
            if self.store.renew_lease(d.lease, self.settings.lease_s):
                d.valid_until = t0 + self.settings.lease_s * 0.9
            else:
                log.warning("run %s/%s: its lease was taken over by another replica", d.rec.tenant, d.rec.id)
                d.lost.set()
                d.cancel.set()
        asked = self.store.cancel_requested([d.rec.key for d in drives])
        for d in drives:
            if d.rec.key in asked:
                d.cancel.set()

    def _scan(self) -> None:
        """Queue the runs this replica may drive: PENDING ones, RUNNING ones whose lease expired (their replica
        died) and those an earlier process of this replica held (it was restarted)."""
        if self._stopping.is_set():
            return
        for rec in self.store.runs_to_drive(self.replica):
            with self._lock:
                if (rec.tenant, rec.id) in self._drives:
                    continue
            if rec.status == RunStatus.PENDING and rec.cancel_requested:
                continue  # its cancel makes it CANCELLED
            self._enqueue(rec.tenant, rec.id)

    # --- requests ---------------------------------------------------------------------------------------------

    def submit(self, tenant: str, spec: RunSpec, idempotency_key: str | None) -> tuple[RunRecord, bool]:
        """Validate and queue a run; returns (record, created). A repeat of the same key/run_id returns the run."""
        h = spec_hash(spec)
        replay = self._replay(tenant, spec, idempotency_key, h)
        if replay is not None:
            return replay, False
        built = build(
            spec, tenant, self.store, self.settings.executor, self.grants
        )  # 422 now rather than a FAILED run later
        self._check_quotas(tenant, spec, built.d)
        run_id = spec.run_id or "run-" + secrets.token_hex(8)
        opts = run_options(spec)
        notes = self._check_draws(spec, opts, built.d)
        try:
            rec = self.store.create_run(
                tenant,
                run_id,
                spec,
                h,
                idempotency_key,
                opts.total_rounds,
                opts.max_draws,
                max_active=self.settings.quota_max_active_runs,
            )
        except Conflict as exc:  # a concurrent identical submit won the race
            return self._check_same(exc.existing, h, idempotency_key), False
        except ActiveLimit as exc:
            raise QuotaExceeded(
                f"tenant {tenant!r} has {exc.active} active (PENDING or RUNNING) runs, the most "
                f"RAYSAMPLER_QUOTA_MAX_ACTIVE_RUNS allows; retry when one has ended",
                retry_after_s=RETRY_AFTER_S,
            ) from None
        if notes:
            self.store.update_run(tenant, run_id, warnings=notes)
            rec = self.get(tenant, run_id)
        self.store.add_event(rec.key, StatusEvent(RunStatus.PENDING))
        for note in notes:
            self.store.add_event(rec.key, WarningEvent(note))
        if self.metrics is not None:
            self.metrics.submitted.inc()
        self._enqueue(tenant, run_id)
        return rec, True

    def _check_quotas(self, tenant: str, spec: RunSpec, dim: int) -> None:
        """The per-run size limit and the tenant's stored-bytes limit (429 naming the limit)."""
        limit = self.settings.quota_max_chains_x_dim
        if limit is not None and spec.chain_count * dim > limit:
            raise QuotaExceeded(
                f"chains × dimension = {spec.chain_count} × {dim} = {spec.chain_count * dim} is over "
                f"RAYSAMPLER_QUOTA_MAX_CHAINS_X_DIM = {limit}; use fewer chains"
            )
        self.check_stored_bytes(tenant)

    def _check_draws(self, spec: RunSpec, opts: RunOptions, dim: int) -> list[str]:
        """Refuse a run that can store no draw (422 on thin) or whose planned draws are over
        RAYSAMPLER_QUOTA_MAX_DRAW_BYTES (429); returns a warning when they are over RAYSAMPLER_WARN_DRAW_BYTES."""
        if opts.max_draws < 1:
            rounds = "max_rounds" if opts.auto else "num_rounds"
            raise SpecError(
                ("thin",),
                f"thin = {opts.thin} is more than the {opts.sampling_rounds} rounds after burn-in ({rounds} = "
                f"{opts.sampling_rounds}): the run would store no draw; lower thin or raise {rounds}",
            )
        planned = spec.chain_count * opts.max_draws * dim * 8
        what = (
            f"the run plans {spec.chain_count} chains × {opts.max_draws} draws × {dim} parameters × 8 bytes = "
            f"{planned} bytes of draws"
        )
        limit = self.settings.quota_max_draw_bytes
        if limit is not None and planned > limit:
            raise QuotaExceeded(f"{what}, over RAYSAMPLER_QUOTA_MAX_DRAW_BYTES = {limit}; thin more or sample less")
        if planned > self.settings.warn_draw_bytes:
            warn = self.settings.warn_draw_bytes
            return [f"{what} ({planned / 1e9:.1f} GB), over RAYSAMPLER_WARN_DRAW_BYTES = {warn}"]
        return []

    def check_stored_bytes(self, tenant: str, adding: int = 0) -> None:
        """429 if the tenant's stored bytes (draws, checkpoints, uploads), plus `adding`, are over their limit."""
        limit = self.settings.quota_max_stored_bytes
        if limit is None:
            return
        used = self.stored_bytes(tenant)
        if used + adding > limit:
            raise QuotaExceeded(
                f"tenant {tenant!r} stores {used} bytes{f' (+{adding} uploading)' if adding else ''}"
                f", over RAYSAMPLER_QUOTA_MAX_STORED_BYTES = {limit}; delete runs or data sets "
                "first"
            )

    def _replay(self, tenant: str, spec: RunSpec, key: str | None, h: str) -> RunRecord | None:
        existing = None
        if spec.run_id is not None:
            existing = self.store.get_run(tenant, spec.run_id)
        if existing is None and key is not None:
            existing = self.store.get_run_by_idempotency_key(tenant, key)
        if existing is not None and spec.run_id is not None and existing.id != spec.run_id:
            raise StateConflict(f"Idempotency-Key {key!r} was already used for run {existing.id}, not {spec.run_id!r}")
        return None if existing is None else self._check_same(existing, h, key)

    @staticmethod
    def _check_same(existing: RunRecord, h: str, key: str | None) -> RunRecord:
        if existing.spec_hash != h:
            what = f"Idempotency-Key {key!r}" if key and existing.idempotency_key == key else f"run_id {existing.id!r}"
            raise StateConflict(f"{what} was already used for a different run spec (run {existing.id})")
        return existing

    def get(self, tenant: str, run_id: str) -> RunRecord:
        """The tenant's run, else NotFound."""
        rec = self.store.get_run(tenant, run_id)
        if rec is None:
            raise NotFound(f"no run {run_id!r}")
        return rec

    def cancel(self, tenant: str, run_id: str) -> RunRecord:
        """Ask a PENDING or RUNNING run to stop; a PENDING one is CANCELLED at once, a RUNNING one after its chunk
        or, while it sets up, where its set-up is (within RayHandle's CANCEL_POLL_S on Ray)."""
        rec = self.get(tenant, run_id)
        if rec.status.is_terminal:
            raise StateConflict(f"run {run_id} is already {rec.status.value}")
        self.store.update_run(tenant, run_id, cancel_requested=True)
        with self._lock:
            ev = self._cancel.get((tenant, run_id))
        if ev is not None:
            ev.set()  # before the transition below: a run the executor has just started sees it
        self._finish(rec, RunStatus.CANCELLED, only_from=(RunStatus.PENDING,))  # no-op once RUNNING
        return self.get(tenant, run_id)

    def resume(self, tenant: str, run_id: str) -> RunRecord:
        """Continue a FAILED or CANCELLED run from its checkpoint (its stored draws are kept and continued exactly);
        StateConflict if it has no checkpoint or is not stopped."""
        rec = self.get(tenant, run_id)
        if rec.status not in (RunStatus.FAILED, RunStatus.CANCELLED):
            raise StateConflict(f"run {run_id} is {rec.status.value}; only a FAILED or CANCELLED run resumes")
        directory = self.files.directory(tenant, run_id)
        if not directory.has_checkpoint():
            raise StateConflict(
                f"run {run_id} has no checkpoint to resume from (it stopped before its first chunk "
                "of draws); submit it again"
            )
        try:
            directory.load_checkpoint()
        except CheckpointError as exc:
            raise StateConflict(f"run {run_id} cannot resume: {exc}") from None
        if not self.store.transition(
            tenant,
            run_id,
            (RunStatus.FAILED, RunStatus.CANCELLED),
            event=StatusEvent(RunStatus.PENDING),
            status=RunStatus.PENDING,
            finished_at=None,
            error=None,
            failure=None,
            cancel_requested=False,
            stop_reason=None,
        ):
            raise StateConflict(f"run {run_id} changed state meanwhile; try again")
        self.summaries.invalidate(tenant, run_id, self.files.directory(tenant, run_id))
        self._enqueue(tenant, run_id)
        return self.get(tenant, run_id)

    def delete(self, tenant: str, run_id: str) -> None:
        """Purge a finished run: record, events and draw files."""
        rec = self.get(tenant, run_id)
        if not rec.status.is_terminal:
            raise StateConflict(f"run {run_id} is {rec.status.value}; cancel it before deleting it")
        self.store.delete_run(tenant, run_id)
        self.summaries.invalidate(tenant, run_id)
        self.files.delete(tenant, run_id)

    def live_runs(self) -> list[LiveRun]:
        """The running runs' rounds/s, restarts and per-worker numbers (copies), as /metrics shows them."""
        with self._lock:
            return [
                dataclasses.replace(r, workers=list(r.workers), worker_lost=dict(r.worker_lost))
                for r in self._live.values()
            ]

    def _update_live(self, rec: RunRecord, **fields: Any) -> None:
        with self._lock:
            live = self._live.get((rec.tenant, rec.id))
            if live is not None:
                for name, value in fields.items():
                    setattr(live, name, value)

    # --- execution --------------------------------------------------------------------------------------------

    def _enqueue(self, tenant: str, run_id: str) -> None:
        with self._lock:
            self._cancel.setdefault((tenant, run_id), threading.Event())
        self._queue.put(tenant, run_id)

    def _loop(self) -> None:
        while True:
            item = self._queue.get()
            if item is None or self._stopping.is_set():
                return
            tenant, run_id = item
            try:
                self._execute(tenant, run_id)
            finally:
                with self._lock:
                    if (tenant, run_id) not in self._drives:  # else another thread drives it: its cancel stays
                        self._cancel.pop((tenant, run_id), None)

    def _execute(self, tenant: str, run_id: str) -> None:
        """Take the run's lease (unless another replica drives it), then drive it; give the lease up at the end."""
        key = (tenant, run_id)
        with self._lock:
            if key in self._drives:
                return  # driven here already
            self._drives[key] = None
        try:
            rec = self.store.get_run(tenant, run_id)
            if rec is None or rec.status not in _ACTIVE or (rec.status == RunStatus.PENDING and rec.cancel_requested):
                return
            t0 = time.monotonic()
            lease = self.store.acquire_lease(tenant, run_id, self.replica, self.settings.lease_s)
            if lease is None:
                return  # another replica drives it
            with self._lock:
                cancel = self._cancel.setdefault(key, threading.Event())
                drive = self._drives[key] = _Drive(rec, lease, cancel, t0 + self.settings.lease_s * 0.9)
            try:
                self._drive(drive)
            except LeaseLost:
                log.warning("run %s/%s: stopped driving it, its lease is lost to another replica", tenant, run_id)
            except Exception as exc:  # never lose the thread; the run is marked FAILED with the reason
                log.exception("run %s/%s crashed", tenant, run_id)
                try:
                    now = self.store.get_run(tenant, run_id)
                    if now is not None and not now.status.is_terminal:
                        self._finish(drive, RunStatus.FAILED, error=f"internal error: {exc!r}")
                except LeaseLost:
                    pass
            finally:
                if not drive.lost.is_set():
                    self.store.release_lease(lease)
        finally:
            with self._lock:
                self._drives.pop(key, None)

    def _drive(self, d: _Drive) -> None:
        """Start the run on the engine (PENDING: from the start; RUNNING: taken over from its last checkpoint),
        sample to the end (or a cancel), and record how it ended; every write carries the lease."""
        rec = self.store.get_run(d.rec.tenant, d.rec.id)
        if rec is None:
            return
        d.rec = rec
        if rec.cancel_requested:
            d.cancel.set()
        if rec.status == RunStatus.PENDING and not self._mark_running(d):
            return  # cancelled (or deleted) in between
        if rec.status == RunStatus.RUNNING:
            log.info("run %s/%s: taken over by %s (lease epoch %d)", rec.tenant, rec.id, self.replica, d.lease.epoch)
        started = self._start_engine(d)
        if started is None:
            return
        run, t0 = started
        tenant, run_id = rec.tenant, rec.id
        key, live = (tenant, run_id), LiveRun(tenant, run_id, restarts=self.get(tenant, run_id).restarts)
        with self._lock:
            self._live[key] = live
        try:
            with run:
                timings = self._record_setup(d, run)
                sampled = _Sampled(0, True) if d.cancel.is_set() else self._sample(d, run, timings)
                self._record_final_stats(d, run, timings, t0)
                warnings = self._warnings(d, run, sampled)
        finally:
            with self._lock:
                self._live.pop(key, None)
        for w in warnings:
            self.store.add_event(rec.key, WarningEvent(w), lease=d.lease)
        self._conclude(d, run, sampled, warnings)
        self._summarise_final(tenant, run_id)

    def _summarise_final(self, tenant: str, run_id: str) -> None:
        """Compute an ended run's summary table (the default ci_prob) now, stored next to its draws, so the first
        request for it reads the table instead of computing it; a request meanwhile waits for this computation."""
        self.summaries.forget_running(tenant, run_id)
        rec = self.store.get_run(tenant, run_id)
        if rec is None or not rec.status.is_terminal or rec.draws_stored < MIN_SUMMARY_DRAWS:
            return
        try:
            summary_of(rec, self.files, DEFAULT_CI_PROB, self.summaries)
        except Exception:  # a request computes it again; the run's outcome stands
            log.exception("summary of run %s/%s failed", tenant, run_id)

    def _mark_running(self, d: _Drive) -> bool:
        """PENDING → RUNNING, atomically (False if a cancel or delete came first)."""
        return self.store.transition(
            d.rec.tenant,
            d.rec.id,
            (RunStatus.PENDING,),
            event=StatusEvent(RunStatus.RUNNING),
            lease=d.lease,
            status=RunStatus.RUNNING,
            started_at=time.time(),
        )

    def _start_engine(self, d: _Drive) -> tuple[Run, float] | None:
        """The started engine run and its start time, or None after marking the run FAILED with the reason (or
        CANCELLED: a cancel during the set-up stops it where it is — data loaded, processes starting, tuning).

        A run with a checkpoint (the service restarted during it, its replica died, a lost worker could not be
        recovered in place, or a resume was asked for) continues from it: draw files past it are dropped and written
        again, exactly. A checkpoint that cannot be used fails the run with the reason — it never restarts from
        round 0 over stored draws."""
        rec, cancel = d.rec, d.cancel
        spec, directory = rec.spec, self.files.writer(rec.tenant, rec.id, d.lease.epoch, d.fence)
        try:
            state = directory.rollback()
            if state is None and rec.draws_stored:
                raise CheckpointError(f"{rec.draws_stored} draws per chain are stored but their checkpoint is missing")
        except CheckpointError as exc:
            self._finish(
                d,
                RunStatus.FAILED,
                failure=Failure(FailureKind.CHECKPOINT, str(exc)),
                error=f"cannot resume: {exc}; the {rec.draws_stored} stored draws per chain are kept",
            )
            return None
        try:
            built = build(spec, rec.tenant, self.store, self.settings.executor, self.grants)
            if cancel.is_set():
                raise RunCancelled("the run was cancelled while setting up")
            t0 = time.perf_counter()
            execution = ExecutionOptions(
                executor=Executor(self.settings.executor),
                engine=self.settings,
                keep_draws=False,
                checkpoint_dir=directory.location,
                checkpoint_epoch=d.lease.epoch,
                checkpoint_fence=d.fence,
                on_event=lambda ev: self._engine_event(d, ev),
                cancel=cancel,
            )
            run = Run(built.model, built.shards, built.algorithm, run_options(spec), execution, resume_from=state)
        except RunCancelled:
            if not self._stopping.is_set() and not d.lost.is_set():  # a shutdown leaves it RUNNING for a resume
                self._finish(d, RunStatus.CANCELLED)
            return None
        except LeaseLost:
            raise
        except Exception as exc:
            failure = failure_of(exc) or (exc.failure if isinstance(exc, SamplingError) else None)
            if isinstance(exc, AccessDenied):  # a grant revoked since submit
                failure = Failure(FailureKind.ACCESS, str(exc))
            self._finish(d, RunStatus.FAILED, error=f"{type(exc).__name__}: {exc}", failure=failure)
            return None
        if state is not None:
            restarts = self.get(rec.tenant, rec.id).restarts + 1
            self.store.update_run(
                rec.tenant,
                rec.id,
                lease=d.lease,
                restarts=restarts,
                draws_stored=state.draws_kept,
                rounds_done=state.rounds_done,
                checkpoint_round=state.rounds_done,
            )
            self.store.add_event(rec.key, ResumedEvent(state.rounds_done, restarts), lease=d.lease)
        return run, t0

    def _engine_event(self, d: _Drive, event: RunEvent) -> None:
        """A lost worker and the run's own recovery from its checkpoint, as events and the restart count."""
        rec = d.rec
        if event.kind == EventKind.WORKER_LOST and event.failure is not None:
            self.store.add_event(
                rec.key, WorkerLostEvent(event.round, jsonable(event.failure.as_dict())), lease=d.lease
            )
            shard = event.failure.shard
            if shard is not None:
                with self._lock:
                    live = self._live.get((rec.tenant, rec.id))
                    if live is not None:
                        live.worker_lost[shard] = live.worker_lost.get(shard, 0) + 1
        elif event.kind == EventKind.RESUMED:
            restarts = self.get(rec.tenant, rec.id).restarts + 1
            self.store.update_run(rec.tenant, rec.id, lease=d.lease, restarts=restarts, checkpoint_round=event.round)
            self.store.add_event(rec.key, ResumedEvent(event.round, restarts), lease=d.lease)
            self._update_live(rec, restarts=restarts)

    def _record_setup(self, d: _Drive, run: Run) -> dict[str, float]:
        """Store the dimension, parameter names and set-up time; returns the run's timings so far."""
        rec = d.rec
        names = list(run.setup.param_names)
        timings = {"setup_s": float(run.setup.setup_time_s)}
        stats = run.stats()
        workers = worker_stats(stats, run.setup.shard_rows)
        plan = jsonable(run.setup.plan.as_dict())
        if run.setup.chains is not None:
            plan["chains"] = jsonable(dataclasses.asdict(run.setup.chains))
        if run.setup.pipeline is not None:
            plan["pipeline"] = jsonable(dataclasses.asdict(run.setup.pipeline))
        self.store.update_run(
            rec.tenant,
            rec.id,
            lease=d.lease,
            dim=len(names),
            chains=run.config.chains,  # chains="auto": as the set-up chose, before any draw is stored
            param_names=names,
            timings=timings,
            plan=plan,
            workers=workers,
            network=network_info(stats),
            param_blocks=tuple(run.setup.param_blocks),
            data_spec=run.setup.data_spec,
        )
        self._update_live(rec, workers=workers)
        self.store.add_event(rec.key, SetupEvent(len(names), timings["setup_s"]), lease=d.lease)
        return timings

    def _sample(self, d: _Drive, run: Run, timings: dict[str, float]) -> _Sampled:
        """Each chunk arrives already stored with its checkpoint (the run writes them); then raise the record's
        stored count and log progress; stop on a cancel."""
        rec, cancel = d.rec, d.cancel
        t_stats = time.monotonic()
        checked = None  # the engine's last convergence check (num_rounds "auto") already recorded
        info = rec.diagnostics
        t_chunk, rounds_before = time.monotonic(), run.rounds_done
        for chunk in run.chunks(target_chunk_s=self.settings.chunk_s):
            now = time.monotonic()
            if now > t_chunk:
                self._update_live(rec, rounds_per_s=(chunk.rounds_done - rounds_before) / (now - t_chunk))
            t_chunk, rounds_before = now, chunk.rounds_done
            n = len(chunk.theta)
            if n and self.metrics is not None:
                self.metrics.draws.inc(n * rec.chains)
            fields: RunFields = {
                "rounds_done": chunk.rounds_done,
                "draws_stored": run.draws_kept,
                "checkpoint_round": chunk.rounds_done,
            }
            if time.monotonic() - t_stats > LIVE_STATS_S:  # per-worker τ_i, N_i, idle fraction while it runs
                live = run.stats()
                fields["workers"] = worker_stats(live, run.setup.shard_rows)
                fields["network"] = network_info(live)
                self._update_live(rec, workers=fields["workers"])
                fields["timings"] = timings | {"sampling_s": float(live.sampling_time_s)}
                t_stats = time.monotonic()
            diag = run.diagnostics
            if diag is not None and diag is not checked:  # the run checked convergence in this chunk
                checked = diag
                info = fields["diagnostics"] = DiagnosticsInfo.model_validate(diag.as_dict())
            self.store.update_run(rec.tenant, rec.id, lease=d.lease, **fields)
            fraction, basis = progress_fraction(
                rec.spec, RunStatus.RUNNING, chunk.rounds_done, run.total_rounds, info if run.options.auto else None
            )
            self.store.add_event(
                rec.key,
                ProgressEvent(
                    chunk.rounds_done,
                    run.total_rounds,
                    run.draws_kept,
                    fraction,
                    basis,
                    None if info is None or not run.options.auto else info.min_ess_bulk,
                    None if info is None or not run.options.auto else info.rule_rhat,
                ),
                lease=d.lease,
            )
            if cancel.is_set():
                return _Sampled(run.draws_kept, True)
        return _Sampled(run.draws_kept, False)

    def _record_final_stats(self, d: _Drive, run: Run, timings: dict[str, float], t0: float) -> None:
        """The per-worker statistics and the sampling and wall times at the end."""
        stats = run.stats()
        timings.update(sampling_s=float(stats.sampling_time_s), wall_s=float(time.perf_counter() - t0))
        self.store.update_run(
            d.rec.tenant,
            d.rec.id,
            lease=d.lease,
            workers=worker_stats(stats, run.setup.shard_rows),
            network=network_info(stats),
            timings=timings,
        )

    def _warnings(self, d: _Drive, run: Run, sampled: _Sampled) -> list[str]:
        """The engine's warnings (time budget, max_rounds, balancing) and, for a run that sampled to its end, the
        convergence diagnostics of its stored draws against the ArviZ/Stan thresholds (also stored)."""
        rec = d.rec
        notes = [str(w) for w in run.warnings() if w.kind not in _CONVERGENCE]
        if sampled.stored >= 4:
            draws = self.files.read(rec.tenant, rec.id, 0, sampled.stored).transpose(1, 0, 2)
            diag = diagnose(draws, FINAL_DRAWS, superchains_for(draws.shape[0]))
            if diag is not None:
                info = DiagnosticsInfo.model_validate(diag.as_dict())
                self.store.update_run(rec.tenant, rec.id, lease=d.lease, diagnostics=info)
                if not sampled.cancelled and run.failure is None:
                    notes += [str(w) for w in diag.warnings()]
        return notes

    def _conclude(self, d: _Drive, run: Run, sampled: _Sampled, warnings: list[str]) -> None:
        """The final status: FAILED on an engine failure, CANCELLED on request, else SUCCEEDED; a run stopped by the
        service shutting down stays RUNNING, and the next start (or another replica) resumes it from its
        checkpoint; a run whose lease was lost is left to the replica that holds it now."""
        if sampled.cancelled and (self._stopping.is_set() or d.lost.is_set()):  # stays RUNNING: resumed elsewhere
            return
        if sampled.cancelled:
            self._finish(d, RunStatus.CANCELLED, warnings=warnings)
        elif run.failure is not None:
            self._finish(
                d,
                RunStatus.FAILED,
                warnings=warnings,
                failure=run.failure,
                error=f"{run.failure.describe()}; {sampled.stored} draws per chain before it are kept",
            )
        else:
            reason = None if run.stop_reason is None else _STOP_REASONS[run.stop_reason]
            self._finish(d, RunStatus.SUCCEEDED, warnings=warnings, stop_reason=reason)

    def _finish(
        self,
        run: RunRecord | _Drive,
        status: RunStatus,
        error: str | None = None,
        warnings: list[str] | None = None,
        only_from: tuple[RunStatus, ...] = _ACTIVE,
        failure: Failure | None = None,
        stop_reason: RunStopReason | None = None,
    ) -> bool:
        """Move a run to its final status if it is still in `only_from` (atomically) with why it stopped (FAILED:
        failed, CANCELLED: cancelled, SUCCEEDED: the engine's reason); log the status event. A `_Drive` writes
        under its lease (LeaseLost if it is gone); a record (a cancel of a PENDING run) writes as any replica."""
        rec, lease = (run.rec, run.lease) if isinstance(run, _Drive) else (run, None)
        reason = stop_reason or _STATUS_STOP_REASONS.get(status, RunStopReason.NUM_ROUNDS)
        fields: RunFields = {"status": status, "finished_at": time.time(), "error": error, "stop_reason": reason}
        if failure is not None:
            fields["failure"] = FailureInfo(**failure.as_dict())
        if warnings:  # after the submit's own warnings (planned size)
            fields["warnings"] = [*rec.warnings, *(w for w in warnings if w not in rec.warnings)]
        event = StatusEvent(status, error, reason)
        done = self.store.transition(rec.tenant, rec.id, only_from, event=event, lease=lease, **fields)
        if done and self.metrics is not None:
            self.metrics.finished.labels(status=status.value).inc()
        return done
