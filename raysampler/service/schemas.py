"""The service's request and response shapes (pydantic), in one place: the REST API, the SDK and the CLI share them."""
from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

STATUSES = ("PENDING", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED")
TERMINAL = frozenset({"SUCCEEDED", "FAILED", "CANCELLED"})
Status = Literal[STATUSES]  # type: ignore[valid-type]
ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"


class ModelSpec(BaseModel):
    """A model family of the engine (`rs.models.FAMILIES`) and its parameters, e.g. prior_scale."""

    model_config = ConfigDict(extra="allow")
    family: str = Field(description="engine model family, e.g. logistic_regression")
    prior_scale: float | None = Field(default=None, gt=0, description="sd of the Gaussian prior")

    def params(self) -> dict[str, Any]:
        out = dict(self.model_extra or {})
        if self.prior_scale is not None:
            out["prior_scale"] = self.prior_scale
        return out


class DataRef(BaseModel):
    """Either a built-in data set ("builtin:breast_cancer", options passed to rs.datasets.load) or an uploaded one."""

    model_config = ConfigDict(extra="forbid")
    dataset: str | None = Field(default=None, description='"builtin:<name>", see rs.datasets')
    dataset_id: str | None = Field(default=None, pattern=ID_PATTERN, description="id from POST /v1/datasets")
    options: dict[str, Any] = Field(default_factory=dict, description="keyword arguments for a built-in data set")

    @model_validator(mode="after")
    def _exactly_one(self) -> "DataRef":
        if (self.dataset is None) == (self.dataset_id is None):
            raise ValueError("give exactly one of data.dataset ('builtin:<name>') or data.dataset_id")
        if self.dataset is not None and not self.dataset.startswith("builtin:"):
            raise ValueError(f"data.dataset must look like 'builtin:<name>', got {self.dataset!r}")
        if self.dataset_id is not None and self.options:
            raise ValueError("data.options only applies to built-in data sets")
        return self


class AlgorithmSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(default="dglmc", description="engine algorithm name, e.g. dglmc, fald, qlsd, dsgld")
    params: dict[str, Any] = Field(default_factory=dict, description="the algorithm's keyword parameters")


class RunSpec(BaseModel):
    """Body of POST /v1/runs: what to sample and how (the same arguments as rs.sample)."""

    model_config = ConfigDict(extra="forbid")
    model: ModelSpec
    data: DataRef
    num_shards: int = Field(default=4, ge=1, le=4096)
    shard_strategy: Literal["contiguous", "random", "label_skew"] = "contiguous"
    algorithm: AlgorithmSpec = Field(default_factory=AlgorithmSpec)
    chains: int = Field(default=4, ge=1, le=4096)
    num_rounds: int = Field(default=1000, ge=1, le=10_000_000)
    burn_in: int | None = Field(default=None, ge=0, le=10_000_000, description="default max(100, num_rounds // 10)")
    thin: int = Field(default=1, ge=1)
    seed: int = Field(default=0, ge=0, lt=2**63)
    time_budget_s: float | None = Field(default=None, gt=0)
    run_id: str | None = Field(default=None, pattern=ID_PATTERN, description="client-chosen id (makes submit idempotent)")


class Progress(BaseModel):
    rounds_done: int = 0
    rounds_total: int = 0
    draws_stored: int = Field(0, description="durable draws per chain (each is one line per chain in /draws)")
    draws_total: int = Field(0, description="draws per chain the run will keep if it runs to the end")


class WorkerStats(BaseModel):
    shard: int
    site: str | None = Field(None, description="the site label of the node the shard's worker runs on")
    node_id: str | None = Field(None, description="Ray node id of the worker")
    hostname: str | None = None
    pid: int | None = Field(None, description="the worker process")
    tau_s: float | None = Field(None, description="measured seconds per local step τ_i")
    local_steps: int | None = Field(None, description="local step count N_i")
    idle_fraction: float | None = None


class RunInfo(BaseModel):
    """A run as the API shows it."""

    id: str
    status: Status
    created_at: float
    started_at: float | None = None
    finished_at: float | None = None
    spec: RunSpec
    progress: Progress
    timings: dict[str, float] = Field(default_factory=dict)
    workers: list[WorkerStats] = Field(default_factory=list)
    param_names: list[str] | None = None
    error: str | None = None
    warnings: list[str] = Field(default_factory=list)


class RunList(BaseModel):
    runs: list[RunInfo]
    next_cursor: str | None = None


class DatasetInfo(BaseModel):
    id: str
    name: str
    n: int
    d: int
    created_at: float
    bytes: int


class DatasetList(BaseModel):
    datasets: list[DatasetInfo]
