"""Driving one run on the engine under its lease (`Driver`): start it (from its checkpoint where it has one), store
every chunk of draws with its checkpoint and progress, record its statistics and diagnostics, and conclude it with
its final status and why it stopped. The run manager (`manager.RunManager`) queues runs and holds their leases; this
is what its executor threads do with each one."""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from ..checkpoints import CheckpointError
from ..diagnostics import FINAL_DRAWS, WarningKind, diagnose, superchains_for
from ..enums import Executor, StopReason
from ..errors import Failure, FailureKind, RunCancelled, SamplingError, failure_of
from ..events import EventKind, RunEvent
from ..grants import DataGrants
from ..options import ExecutionOptions
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
from .drawfiles import DrawFiles
from .errors import AccessDenied, NotFound
from .metrics import LiveRun, Metrics
from .records import Lease, RunFields, RunRecord
from .reports import jsonable, network_info, worker_stats
from .results import MIN_SUMMARY_DRAWS, progress_fraction, summary_of
from .schemas import DiagnosticsInfo, FailureInfo
from .settings import Settings
from .specs import build, quota_options
from .store import LeaseLost, RecordStore
from .summaries import DEFAULT_CI_PROB, SummaryCache

log = logging.getLogger("raysampler.service")

LIVE_STATS_S = 2.0  # how often a running run's per-worker statistics are refreshed in its record
ACTIVE = (RunStatus.PENDING, RunStatus.RUNNING)
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
class Drive:
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


class LiveRuns:
    """The running runs' numbers for /metrics (rounds/s, restarts, per-worker statistics, lost workers) by
    (tenant, run id), behind their own lock; a run's entry is dropped at its end."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: dict[tuple[str, str], LiveRun] = {}

    def add(self, key: tuple[str, str], live: LiveRun) -> None:
        with self._lock:
            self._runs[key] = live

    def drop(self, key: tuple[str, str]) -> None:
        with self._lock:
            self._runs.pop(key, None)

    def update(self, rec: RunRecord, **fields: Any) -> None:
        with self._lock:
            live = self._runs.get((rec.tenant, rec.id))
            if live is not None:
                for name, value in fields.items():
                    setattr(live, name, value)

    def count_lost(self, rec: RunRecord, shard: int) -> None:
        """One more lost worker of the run's shard `shard`."""
        with self._lock:
            live = self._runs.get((rec.tenant, rec.id))
            if live is not None:
                live.worker_lost[shard] = live.worker_lost.get(shard, 0) + 1

    def snapshot(self) -> list[LiveRun]:
        """Copies of the running runs' numbers."""
        with self._lock:
            return [
                dataclasses.replace(r, workers=list(r.workers), worker_lost=dict(r.worker_lost))
                for r in self._runs.values()
            ]


@dataclass
class Driver:
    """What the manager's executor threads do with a run whose lease they hold (`drive`), and how any run reaches
    its final status (`finish`): the store, files and settings it writes with, and `stopping`, set when the
    service shuts down (a run stopped by it stays RUNNING, for a resume)."""

    store: RecordStore
    files: DrawFiles
    settings: Settings
    metrics: Metrics | None
    grants: DataGrants
    replica: str
    stopping: threading.Event
    summaries: SummaryCache
    live: LiveRuns = field(default_factory=LiveRuns)

    def _get(self, tenant: str, run_id: str) -> RunRecord:
        rec = self.store.get_run(tenant, run_id)
        if rec is None:
            raise NotFound(f"no run {run_id!r}")
        return rec

    def drive(self, d: Drive) -> None:
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
        key, live = (tenant, run_id), LiveRun(tenant, run_id, restarts=self._get(tenant, run_id).restarts)
        self.live.add(key, live)
        try:
            with run:
                timings = self._record_setup(d, run)
                sampled = _Sampled(0, True) if d.cancel.is_set() else self._sample(d, run, timings)
                self._record_final_stats(d, run, timings, t0)
                warnings = self._warnings(d, run, sampled)
        finally:
            self.live.drop(key)
        for w in warnings:
            self.store.add_event(rec.key, WarningEvent(w), lease=d.lease)
        self._conclude(d, run, sampled, warnings)
        self._summarise_final(tenant, run_id)

    def _mark_running(self, d: Drive) -> bool:
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

    def _start_engine(self, d: Drive) -> tuple[Run, float] | None:
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
            self.finish(
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
            options = quota_options(spec, self.settings, built.d)
            run = Run(built.model, built.shards, built.algorithm, options, execution, resume_from=state)
        except RunCancelled:
            if not self.stopping.is_set() and not d.lost.is_set():  # a shutdown leaves it RUNNING for a resume
                self.finish(d, RunStatus.CANCELLED)
            return None
        except LeaseLost:
            raise
        except Exception as exc:
            failure = failure_of(exc) or (exc.failure if isinstance(exc, SamplingError) else None)
            if isinstance(exc, AccessDenied):  # a grant revoked since submit
                failure = Failure(FailureKind.ACCESS, str(exc))
            self.finish(d, RunStatus.FAILED, error=f"{type(exc).__name__}: {exc}", failure=failure)
            return None
        if state is not None:
            restarts = self._get(rec.tenant, rec.id).restarts + 1
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

    def _engine_event(self, d: Drive, event: RunEvent) -> None:
        """A lost worker and the run's own recovery from its checkpoint, as events and the restart count."""
        rec = d.rec
        if event.kind == EventKind.WORKER_LOST and event.failure is not None:
            self.store.add_event(
                rec.key, WorkerLostEvent(event.round, jsonable(event.failure.as_dict())), lease=d.lease
            )
            shard = event.failure.shard
            if shard is not None:
                self.live.count_lost(rec, shard)
        elif event.kind == EventKind.RESUMED:
            restarts = self._get(rec.tenant, rec.id).restarts + 1
            self.store.update_run(rec.tenant, rec.id, lease=d.lease, restarts=restarts, checkpoint_round=event.round)
            self.store.add_event(rec.key, ResumedEvent(event.round, restarts), lease=d.lease)
            self.live.update(rec, restarts=restarts)

    def _record_setup(self, d: Drive, run: Run) -> dict[str, float]:
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
        self.live.update(rec, workers=workers)
        self.store.add_event(rec.key, SetupEvent(len(names), timings["setup_s"]), lease=d.lease)
        return timings

    def _sample(self, d: Drive, run: Run, timings: dict[str, float]) -> _Sampled:
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
                self.live.update(rec, rounds_per_s=(chunk.rounds_done - rounds_before) / (now - t_chunk))
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
                self.live.update(rec, workers=fields["workers"])
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

    def _record_final_stats(self, d: Drive, run: Run, timings: dict[str, float], t0: float) -> None:
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

    def _warnings(self, d: Drive, run: Run, sampled: _Sampled) -> list[str]:
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

    def _conclude(self, d: Drive, run: Run, sampled: _Sampled, warnings: list[str]) -> None:
        """The final status: FAILED on an engine failure, CANCELLED on request, else SUCCEEDED; a run stopped by the
        service shutting down stays RUNNING, and the next start (or another replica) resumes it from its
        checkpoint; a run whose lease was lost is left to the replica that holds it now."""
        if sampled.cancelled and (self.stopping.is_set() or d.lost.is_set()):  # stays RUNNING: resumed elsewhere
            return
        if sampled.cancelled:
            self.finish(d, RunStatus.CANCELLED, warnings=warnings)
        elif run.failure is not None:
            self.finish(
                d,
                RunStatus.FAILED,
                warnings=warnings,
                failure=run.failure,
                error=f"{run.failure.describe()}; {sampled.stored} draws per chain before it are kept",
            )
        else:
            reason = None if run.stop_reason is None else _STOP_REASONS[run.stop_reason]
            self.finish(d, RunStatus.SUCCEEDED, warnings=warnings, stop_reason=reason)

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

    def finish(
        self,
        run: RunRecord | Drive,
        status: RunStatus,
        error: str | None = None,
        warnings: list[str] | None = None,
        only_from: tuple[RunStatus, ...] = ACTIVE,
        failure: Failure | None = None,
        stop_reason: RunStopReason | None = None,
    ) -> bool:
        """Move a run to its final status if it is still in `only_from` (atomically) with why it stopped (FAILED:
        failed, CANCELLED: cancelled, SUCCEEDED: the engine's reason); log the status event. A `Drive` writes
        under its lease (LeaseLost if it is gone); a record (a cancel of a PENDING run) writes as any replica."""
        rec, lease = (run.rec, run.lease) if isinstance(run, Drive) else (run, None)
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
