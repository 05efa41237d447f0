"""What the record store holds, as typed values: runs, their events, uploaded data sets, and run leases.

A `RunRecord` is a snapshot read from the store (immutable); changes go through `RecordStore.update_run` /
`transition` with the fields named in `RunFields`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

from ..models.contract import DataSpec, ParamBlock
from ..wire import RunStatus, RunStopReason
from .schemas import DiagnosticsInfo, FailureInfo, NetworkInfo, RunSpec, WorkerStats

__all__ = ["DatasetRecord", "EventRecord", "Lease", "RunFields", "RunRecord", "RunStatus"]


@dataclass(frozen=True)
class RunRecord:
    """One run as stored: identity, spec, status and progress, and what the run reported."""

    key: int  # the store's sequence number: orders runs, keys events, is the list cursor
    tenant: str
    id: str
    status: RunStatus
    created_at: float
    started_at: float | None
    finished_at: float | None
    spec: RunSpec
    spec_hash: str
    idempotency_key: str | None
    rounds_done: int
    rounds_total: int
    draws_stored: int  # durable draws per chain (readers read below this)
    draws_total: int
    chains: int
    dim: int | None  # known after the run's setup
    param_names: tuple[str, ...] | None
    timings: dict[str, float]
    workers: tuple[WorkerStats, ...]
    error: str | None
    warnings: tuple[str, ...]
    cancel_requested: bool
    plan: dict[str, Any] | None = None
    failure: FailureInfo | None = None
    diagnostics: DiagnosticsInfo | None = None
    network: NetworkInfo | None = None
    restarts: int = 0
    checkpoint_round: int | None = None
    param_blocks: tuple[ParamBlock, ...] | None = None
    stop_reason: RunStopReason | None = None  # set when the run finishes
    data_spec: DataSpec | None = None  # what the run's model was bound to (known after setup)
    lease_owner: str | None = None  # the replica driving the run (its lease), None when nobody does
    lease_expires: float | None = None  # Unix time (the database's clock) the lease ends unless renewed
    lease_epoch: int = 0  # grows with every acquisition of the lease: the fencing token of the driver's writes


class RunFields(TypedDict, total=False):
    """The run fields a writer may change (keyword arguments of `RecordStore.update_run` and `transition`)."""

    status: RunStatus
    started_at: float
    finished_at: float | None
    rounds_done: int
    draws_stored: int
    dim: int
    chains: int
    param_names: Sequence[str]
    timings: dict[str, float]
    workers: Sequence[WorkerStats]
    error: str | None
    warnings: Sequence[str]
    cancel_requested: bool
    plan: dict[str, Any] | None
    failure: FailureInfo | None
    diagnostics: DiagnosticsInfo | None
    restarts: int
    checkpoint_round: int | None
    param_blocks: Sequence[ParamBlock] | None
    stop_reason: RunStopReason | None
    data_spec: DataSpec | None
    network: NetworkInfo | None


@dataclass(frozen=True)
class EventRecord:
    """One entry of a run's event log: sequence number (1, 2, ...), kind, JSON data, Unix time."""

    seq: int
    kind: str
    data: dict[str, Any]
    ts: float


@dataclass(frozen=True)
class DatasetRecord:
    """An uploaded data set: its id and name, shape (n rows, d features), stored size and file (a path, or a URI on
    the service's object storage)."""

    key: int
    tenant: str
    id: str
    name: str
    n: int
    d: int
    nbytes: int
    path: str
    created_at: float


@dataclass(frozen=True)
class Lease:
    """The right of replica `owner` to drive run (tenant, run_id) (store key `run_key`), at fencing epoch `epoch`."""

    run_key: int
    tenant: str
    run_id: str
    owner: str
    epoch: int
