"""The JSON bodies the service answers with, as the SDK returns them: typed dicts, one per response schema of the
OpenAPI document and named after it (`RunInfo` is the body of GET /v1/runs/{id}).

The server defines these bodies with pydantic (`raysampler.service.schemas`); the SDK must not import server code,
so their shapes are restated here as `TypedDict`s. A typed dict is a plain dict at run time: `info["status"]` keeps
working for every caller, and mypy and editors know the keys. tests/wire/test_wire.py checks that each one has exactly
the fields of the schema it restates, so the two cannot drift apart.
"""

from __future__ import annotations

from typing import Any, Literal, TypedDict

__all__ = [
    "BayesR2Info",
    "ComparisonRowInfo",
    "DatasetInfo",
    "DiagnosticsInfo",
    "Evaluation",
    "FailureInfo",
    "Health",
    "LooInfo",
    "MatchedRowInfo",
    "ModelFamilyInfo",
    "NetworkInfo",
    "PipelineInfo",
    "Progress",
    "ReleaseInfo",
    "ReliabilityBinInfo",
    "RowRefInfo",
    "RunInfo",
    "RunLedger",
    "SiteLedgerInfo",
    "TripsInfo",
    "VersionInfo",
    "WarnedRowInfo",
    "WorkerStats",
]


# --- a run ---------------------------------------------------------------------------------------------------------


class Progress(TypedDict):
    """How far a run is: rounds and durable draws per chain against their totals, and `fraction` (0 to 1) of the
    way on `basis` "rounds" or, for num_rounds "auto", "convergence"."""

    rounds_done: int
    rounds_total: int
    draws_stored: int
    draws_total: int
    fraction: float
    basis: Literal["rounds", "convergence"]


class ReleaseInfo(TypedDict):
    """One kind of message a site sent (the release ledger): quantity, one message's shape, how many, their bytes,
    and whether they went masked (a secure sum's term), sealed (under the site's key) or plain."""

    quantity: str
    shape: list[int]
    messages: int
    bytes: int
    mode: Literal["masked", "sealed", "plain"]


class SiteLedgerInfo(TypedDict):
    """Everything one shard's site sent in the run, by kind, with its totals."""

    shard: int
    site: str | None
    messages: int
    bytes: int
    masked_bytes: int
    sealed_bytes: int
    plain_bytes: int
    releases: list[ReleaseInfo]


class RunLedger(TypedDict):
    """A run's release ledger (GET /v1/runs/{id}/ledger), of one site's shards where one was asked for."""

    run_id: str
    site: str | None
    shards: list[SiteLedgerInfo]


class WorkerStats(TypedDict):
    """One shard's worker: where it runs, its measured seconds per local step τ_i, its local step count N_i, its
    idle fraction and round-trip times; in the DP mode its site's ε spent and clip rate."""

    shard: int
    site: str | None
    rows: int | None
    node_id: str | None
    hostname: str | None
    pid: int | None
    tau_s: float | None
    local_steps: int | None
    idle_fraction: float | None
    channel: str | None
    setup_rtt_s: float | None
    rtt_s: float | None
    rtt_median_s: float | None
    ledger: SiteLedgerInfo | None
    epsilon_spent: float | None
    clip_rate: float | None


class FailureInfo(TypedDict):
    """What stopped a FAILED run: its kind, message and, where known, the round, shard, site, node and traceback."""

    kind: str
    message: str
    round: int | None
    shard: int | None
    site: str | None
    node_id: str | None
    traceback: str | None


class DiagnosticsInfo(TypedDict):
    """The last convergence check: min bulk ESS and max R-hat over the parameters, on how many draws and chains,
    by which rule (split or nested R-hat)."""

    min_ess_bulk: float | None
    max_rhat: float | None
    draws: int
    chains: int
    rule: Literal["split_rhat", "nested_rhat"]
    superchains: int
    max_nested_rhat: float | None


class TripsInfo(TypedDict):
    """Round trips between the coordinator and the workers, by phase."""

    setup: int
    warmup: int
    sampling: int
    capture: int
    total: int


class PipelineInfo(TypedDict):
    """Whether a run's rounds go as two chain groups in flight, and why (pending: "auto" has not decided yet)."""

    on: bool
    auto: bool
    pending: bool
    reason: str
    groups: list[list[int]]
    compute_s: float | None


class NetworkInfo(TypedDict):
    """What a run cost on the network, and whether its chains are in flight."""

    trips: TripsInfo
    pipeline: PipelineInfo | None


class RunInfo(TypedDict):
    """A run object (GET /v1/runs/{id}, and the answer to submit, cancel and resume): its status, spec, progress,
    timings, workers, diagnostics and, once it ended, why it stopped. `spec` and `plan` are the JSON of the run spec
    and of the set-up's tuning report."""

    id: str
    name: str | None
    tags: dict[str, str]
    status: Literal["PENDING", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED"]
    created_at: float
    started_at: float | None
    finished_at: float | None
    spec: dict[str, Any]
    progress: Progress
    timings: dict[str, float]
    workers: list[WorkerStats]
    param_names: list[str] | None
    response: str | None
    error: str | None
    warnings: list[str]
    plan: dict[str, Any] | None
    failure: FailureInfo | None
    diagnostics: DiagnosticsInfo | None
    restarts: int
    checkpoint_round: int | None
    stop_reason: (
        Literal["converged", "num_rounds", "time_budget", "cancelled", "max_rounds", "failed", "privacy_budget"] | None
    )
    replica: str | None
    chains: int
    network: NetworkInfo | None


# --- data sets, models, the service --------------------------------------------------------------------------------


class DatasetInfo(TypedDict):
    """An uploaded data set: the id runs name it by ({"dataset_id": ...}), its rows n and columns d, its size."""

    id: str
    name: str
    n: int
    d: int
    created_at: float
    bytes: int


class ModelFamilyInfo(TypedDict):
    """A model family a run spec may name, and the JSON schema of its parameters."""

    name: str
    description: str
    builtin: bool
    distribution: str | None
    parameters: dict[str, Any]


class Health(TypedDict):
    """GET /v1/health: the service is up, on which executor, and whether it reaches Ray."""

    status: Literal["ok"]
    executor: Literal["ray", "local"]
    ray_connected: bool


class VersionInfo(TypedDict):
    """GET /v1/version: the service's version and what a run spec may name."""

    version: str
    algorithms: list[str]
    model_families: list[str]
    builtin_datasets: list[str]


# --- checks of a fitted run ----------------------------------------------------------------------------------------


class ReliabilityBinInfo(TypedDict):
    """One bin of a reliability curve: confidence in [lo, hi), its rows, their mean confidence and accuracy."""

    lo: float
    hi: float
    count: int
    confidence: float | None
    accuracy: float | None


class Evaluation(TypedDict):
    """Held-out metrics (POST /v1/runs/{id}/evaluate): for classification accuracy, nll, brier, ece and the
    reliability curve; for regression rmse, nll, crps and the 50 % and 90 % coverage (the others are null)."""

    run_id: str
    kind: Literal["classification", "regression"]
    n: int
    draws_used: int
    nll: float
    accuracy: float | None
    brier: float | None
    ece: float | None
    reliability: list[ReliabilityBinInfo] | None
    rmse: float | None
    crps: float | None
    coverage_50: float | None
    coverage_90: float | None


class RowRefInfo(TypedDict):
    """A row by position: its shard, its position there, and its row of the original data when known."""

    shard: int
    row: int
    index: int | None


class WarnedRowInfo(TypedDict):
    """A row the LOO warning concerns (Pareto k above good_k) and its k."""

    row: RowRefInfo
    k: float | None


class MatchedRowInfo(TypedDict):
    """What moment matching did to one row with Pareto k ≥ 0.7."""

    row: RowRefInfo
    k_psis: float | None
    k_after: float | None
    elpd_psis: float | None
    elpd_after: float | None
    mcse_after: float | None
    maps: int
    used: bool


class LooInfo(TypedDict):
    """PSIS-LOO on a run's own rows (GET /v1/runs/{id}/loo): elpd, its SE, p_loo, Pareto-k counts by band, the
    rows with high k and, when asked for, what moment matching did to them."""

    run_id: str
    elpd: float | None
    se: float | None
    p_loo: float | None
    n_data_points: int
    n_samples: int
    good_k: float
    warning: bool
    k_flat: int
    k_ok: int
    k_high: int
    flat_span: float
    high_k_rows: list[RowRefInfo]
    moment_matched: list[MatchedRowInfo] | None
    warning_rows: list[WarnedRowInfo]


class BayesR2Info(TypedDict):
    """A run's Bayesian R² (GET /v1/runs/{id}/r2): its mean, sd and central 95 % interval over the draws."""

    run_id: str
    n_samples: int
    estimate: float | None
    est_error: float | None
    lower: float | None
    upper: float | None


class ComparisonRowInfo(TypedDict):
    """One run of a comparison (POST /v1/compare), as a row of `Client.compare`'s DataFrame."""

    run_id: str
    rank: int
    elpd: float | None
    se: float | None
    p_loo: float | None
    elpd_diff: float | None
    dse: float | None
    weight: float | None
    warning: bool
