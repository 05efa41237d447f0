"""The cluster as the service sees it: nodes and their workers, the queue, quotas, health and version."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class NodeWorker(BaseModel):
    """A worker of one of the caller's running runs, placed on a node."""

    run_id: str
    shard: int
    tau_s: float | None = Field(None, description="measured seconds per local step τ_i")


class ClusterNode(BaseModel):
    """A Ray node: its site label, CPUs, and the workers placed on it."""

    node_id: str
    hostname: str | None = None
    alive: bool
    site: str | None = Field(None, description="the node's raysampler.io/site label (none: not a site's node)")
    cpus: float = Field(0.0, description="the node's CPU resource")
    workers: list[NodeWorker] = Field(default_factory=list, description="the caller's running workers on the node")
    other_workers: int = Field(0, description="workers of other tenants' runs on the node (a count only)")


class QueuedRun(BaseModel):
    """One of the caller's runs waiting to sample, and where it stands in the service's queue."""

    run_id: str
    name: str | None = None
    position: int = Field(description="1 starts next; counts every tenant's waiting runs (served round-robin)")


class QuotaUse(BaseModel):
    """The caller's use of the service's limits (a limit of null is no limit)."""

    active_runs: int = Field(description="PENDING + RUNNING runs")
    max_active_runs: int | None = None
    stored_bytes: int = Field(description="draws, checkpoints and uploaded data sets")
    max_stored_bytes: int | None = None
    max_chains_x_dim: int | None = None
    max_draw_bytes: int | None = None


class ClusterView(BaseModel):
    """What an operator looks at: the nodes and the caller's workers on them, the queue, the caller's quota use,
    and where Ray's own dashboard is (when the operator gave its address)."""

    executor: Literal["ray", "local"]
    ray_connected: bool
    nodes: list[ClusterNode]
    running_runs: int = Field(description="runs sampling now, every tenant's")
    max_concurrent_runs: int
    queued_total: int = Field(description="runs waiting, every tenant's")
    queue: list[QueuedRun] = Field(description="the caller's waiting runs, in queue order")
    quota: QuotaUse
    ray_dashboard_url: str | None = Field(None, description="RAYSAMPLER_RAY_DASHBOARD_URL, for a link")


class Health(BaseModel):
    status: Literal["ok"]
    executor: Literal["ray", "local"]
    ray_connected: bool


class VersionInfo(BaseModel):
    version: str
    algorithms: list[str]
    model_families: list[str]
    builtin_datasets: list[str]
