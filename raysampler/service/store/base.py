"""The store's interface (`RecordStore`) and the errors its writes raise (`Conflict`, `ActiveLimit`, `LeaseLost`)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from typing import Unpack

from ...wire import EventPayload, RunStatus
from ..records import DatasetRecord, EventRecord, Lease, RunFields, RunRecord
from ..schemas import RunSpec


class Conflict(Exception):
    """A record with this key already exists; `.existing` is it."""

    def __init__(self, existing: RunRecord) -> None:
        super().__init__(existing.id)
        self.existing = existing


class ActiveLimit(Exception):
    """The tenant already has `active` PENDING or RUNNING runs, the most `create_run` was allowed to reach."""

    def __init__(self, active: int) -> None:
        super().__init__(active)
        self.active = active


class LeaseLost(Exception):
    """A driver's write refused: another replica holds the run's lease now (or the run is gone)."""

    def __init__(self, lease: Lease) -> None:
        super().__init__(f"run {lease.tenant}/{lease.run_id}: lease epoch {lease.epoch} of {lease.owner} is lost")
        self.lease = lease


class RecordStore(ABC):
    """What the service needs from its database."""

    @abstractmethod
    def close(self) -> None: ...

    @abstractmethod
    def create_run(
        self,
        tenant: str,
        run_id: str,
        spec: RunSpec,
        spec_hash: str,
        idempotency_key: str | None,
        rounds_total: int,
        draws_total: int,
        max_active: int | None = None,
    ) -> RunRecord:
        """Insert a PENDING run; raise Conflict(existing) if (tenant, id) or (tenant, idempotency key) exists, and
        ActiveLimit if the tenant already has `max_active` PENDING or RUNNING runs (checked atomically)."""

    @abstractmethod
    def get_run(self, tenant: str, run_id: str) -> RunRecord | None: ...

    @abstractmethod
    def get_run_by_idempotency_key(self, tenant: str, key: str) -> RunRecord | None: ...

    @abstractmethod
    def list_runs(
        self,
        tenant: str,
        status: RunStatus | None,
        after: int | None,
        limit: int,
        name: str | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> list[RunRecord]:
        """Newest first; `after` is the `key` of the last run of the previous page; only runs with this `name` and
        all these `tags` (key → value) when given."""

    @abstractmethod
    def runs_with_status(self, statuses: Iterable[RunStatus]) -> list[RunRecord]:
        """All tenants' runs in these states, oldest first (for start-up recovery and the queue)."""

    @abstractmethod
    def update_run(self, tenant: str, run_id: str, lease: Lease | None = None, **fields: Unpack[RunFields]) -> None:
        """Change run fields; with `lease`, only while it holds (else LeaseLost)."""

    @abstractmethod
    def transition(
        self,
        tenant: str,
        run_id: str,
        from_statuses: Iterable[RunStatus],
        event: EventPayload | None = None,
        lease: Lease | None = None,
        **fields: Unpack[RunFields],
    ) -> bool:
        """Atomically: if the run's status is in `from_statuses`, update `fields` and append `event`; return whether
        it did (compare-and-set, so concurrent cancels and pick-ups cannot both win). With `lease`, only while it
        holds (else LeaseLost)."""

    @abstractmethod
    def delete_run(self, tenant: str, run_id: str) -> None: ...

    @abstractmethod
    def add_event(self, run_key: int, event: EventPayload, lease: Lease | None = None) -> int:
        """Append an event to a run's log and return its sequence number (1, 2, ...); with `lease`, only while it
        holds (else LeaseLost)."""

    @abstractmethod
    def events_after(self, run_key: int, after: int, limit: int = 1000) -> list[EventRecord]: ...

    @abstractmethod
    def add_dataset(
        self, tenant: str, dataset_id: str, name: str, n: int, d: int, nbytes: int, path: str
    ) -> DatasetRecord: ...

    @abstractmethod
    def get_dataset(self, tenant: str, dataset_id: str) -> DatasetRecord | None: ...

    @abstractmethod
    def list_datasets(self, tenant: str) -> list[DatasetRecord]: ...

    @abstractmethod
    def delete_dataset(self, tenant: str, dataset_id: str) -> None: ...

    @abstractmethod
    def count_runs_by_status(self) -> dict[RunStatus, int]: ...

    @abstractmethod
    def count_active(self, tenant: str) -> int:
        """The tenant's PENDING and RUNNING runs."""

    @abstractmethod
    def acquire_lease(self, tenant: str, run_id: str, owner: str, ttl_s: float) -> Lease | None:
        """Take the lease of a PENDING or RUNNING run for `owner` for `ttl_s` seconds (on the database's clock) if
        nobody holds it, its holder let it expire, or its holder is `owner` itself (an earlier process of the same
        replica); the epoch grows by one. None if another replica holds it or the run is not drivable."""

    @abstractmethod
    def renew_lease(self, lease: Lease, ttl_s: float) -> bool:
        """Extend a lease to `ttl_s` seconds from now; False if it is lost (another epoch holds the run)."""

    @abstractmethod
    def release_lease(self, lease: Lease) -> None:
        """Give a lease up (another replica may take the run at once); no-op if it is lost already."""

    @abstractmethod
    def runs_to_drive(self, owner: str) -> list[RunRecord]:
        """PENDING and RUNNING runs that `owner` may take: nobody's lease, an expired one, or its own; oldest first."""

    @abstractmethod
    def cancel_requested(self, keys: Sequence[int]) -> set[int]:
        """Which of these runs (by key) have a cancel request."""
