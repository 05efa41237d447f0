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

import logging
import secrets
import threading
import time

from ..checkpoints import CheckpointError
from ..enums import Executor
from ..options import RunOptions
from ..wire import (
    RunStatus,
    StatusEvent,
    WarningEvent,
)
from .datasets import dataset_storage
from .drawfiles import DrawFiles
from .driving import ACTIVE, Drive, Driver
from .errors import NotFound, QuotaExceeded, StateConflict
from .metrics import LiveRun, Metrics
from .queue import FairQueue
from .records import RunRecord
from .schemas import (
    RunSpec,
)
from .settings import Settings
from .specs import SpecError, build, quota_options, spec_hash
from .store import ActiveLimit, Conflict, LeaseLost, RecordStore
from .summaries import SummaryCache, import_statistics

log = logging.getLogger("raysampler.service")

RETRY_AFTER_S = 30  # what a 429 for too many active runs suggests


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
        self._drives: dict[tuple[str, str], Drive | None] = {}  # runs driven here (None: acquiring the lease)
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._stopping = threading.Event()
        # posterior summaries by (run, stored draws, ci_prob); their CPU time counted in the metrics
        self.summaries = SummaryCache(on_computed=None if metrics is None else metrics.summary_cpu.inc)
        self._driver = Driver(
            store, files, settings, metrics, self.grants, self.replica, self._stopping, self.summaries
        )
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
        opts = quota_options(spec, self.settings, built.d)
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
            + (' (at least: chains "auto" may choose more, within the quotas)' if opts.chains_auto else "")
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
        self._driver.finish(rec, RunStatus.CANCELLED, only_from=(RunStatus.PENDING,))  # no-op once RUNNING
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
        return self._driver.live.snapshot()

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
            if rec is None or rec.status not in ACTIVE or (rec.status == RunStatus.PENDING and rec.cancel_requested):
                return
            t0 = time.monotonic()
            lease = self.store.acquire_lease(tenant, run_id, self.replica, self.settings.lease_s)
            if lease is None:
                return  # another replica drives it
            with self._lock:
                cancel = self._cancel.setdefault(key, threading.Event())
                drive = self._drives[key] = Drive(rec, lease, cancel, t0 + self.settings.lease_s * 0.9)
            try:
                self._driver.drive(drive)
            except LeaseLost:
                log.warning("run %s/%s: stopped driving it, its lease is lost to another replica", tenant, run_id)
            except Exception as exc:  # never lose the thread; the run is marked FAILED with the reason
                log.exception("run %s/%s crashed", tenant, run_id)
                try:
                    now = self.store.get_run(tenant, run_id)
                    if now is not None and not now.status.is_terminal:
                        self._driver.finish(drive, RunStatus.FAILED, error=f"internal error: {exc!r}")
                except LeaseLost:
                    pass
            finally:
                if not drive.lost.is_set():
                    self.store.release_lease(lease)
        finally:
            with self._lock:
                self._drives.pop(key, None)
