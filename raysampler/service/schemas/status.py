"""A run as the service reports it: its status and progress, its workers (timings, trips, the release ledger, the
DP budget), failure and diagnostics, and what is read off its draws (summaries, effects, posterior predictive
checks, traces)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from ...predictive import PpcStatName
from ...wire import RunStatus, RunStopReason
from .runs import RunSpec


class Progress(BaseModel):
    rounds_done: int = 0
    rounds_total: int = 0
    draws_stored: int = Field(0, description="durable draws per chain (each is one line per chain in /draws)")
    draws_total: int = Field(0, description="draws per chain the run will keep if it runs to the end")
    fraction: float = Field(
        0.0,
        ge=0,
        le=1,
        description='how far the run is, 0 to 1: rounds_done / rounds_total, or for num_rounds "auto" the worse of '
        "min bulk ESS / target_ess and an R-hat term (1 once max R-hat < max_rhat) at the last convergence check",
    )
    basis: Literal["rounds", "convergence"] = Field(
        "rounds", description='what `fraction` measures: "rounds", or "convergence" for num_rounds "auto"'
    )


class TripsInfo(BaseModel):
    """Round trips from the coordinator to the shards' processes, by phase: each costs at least one RTT."""

    setup: int = Field(0, description="tuning and start-up calls")
    warmup: int = Field(0, description="burn-in rounds")
    sampling: int = Field(0, description="kept rounds (a pipelined round counts its two halves)")
    capture: int = Field(0, description="captures of the run's state for its checkpoints")
    total: int = 0


class PipelineInfo(BaseModel):
    """Whether the rounds run as two chain groups in flight (`pipeline`) and why; with "auto", pending until the
    first rounds' compute has been measured against the slowest far link's RTT."""

    on: bool
    auto: bool
    pending: bool = False
    reason: str
    groups: list[list[int]] = Field(default_factory=list, description="the chain groups [a, b) when on")
    compute_s: float | None = Field(None, description="the measured compute of a round that decided it (s)")


class NetworkInfo(BaseModel):
    """What the run's messages cost on the network so far: round trips by phase (per-worker RTTs are in `workers`),
    and whether chains are in flight."""

    trips: TripsInfo = Field(default_factory=lambda: TripsInfo(setup=0, warmup=0, sampling=0, capture=0, total=0))
    pipeline: PipelineInfo | None = None


class ReleaseInfo(BaseModel):
    """One kind of message a site sent (the release ledger): what quantity, the shape of one message, how many,
    their bytes, and how they went (masked: a secure sum's term; sealed: encrypted under the site's key; plain)."""

    quantity: str = Field(description='e.g. "z/rho", "local_accept", "step_time", "setup:newton_trial"')
    shape: list[int]
    messages: int
    bytes: int
    mode: Literal["masked", "sealed", "plain"]


class SiteLedgerInfo(BaseModel):
    """Everything one shard's site sent in the run, by kind, with its totals."""

    shard: int
    site: str | None = None
    messages: int = 0
    bytes: int = 0
    masked_bytes: int = 0
    sealed_bytes: int = 0
    plain_bytes: int = 0
    releases: list[ReleaseInfo] = Field(default_factory=list)


class RunLedger(BaseModel):
    """GET /v1/runs/{id}/ledger: the release ledger of the run's shards (of one site with ?site=)."""

    run_id: str
    site: str | None = Field(None, description="the site asked for (null: every shard)")
    shards: list[SiteLedgerInfo]


class WorkerStats(BaseModel):
    shard: int
    site: str | None = Field(None, description="the site label of the node the shard's worker runs on")
    rows: int | None = Field(None, description="the rows of its shard (known after the run's set-up)")
    node_id: str | None = Field(None, description="Ray node id of the worker")
    hostname: str | None = None
    pid: int | None = Field(None, description="the worker process")
    tau_s: float | None = Field(None, description="measured seconds per local step τ_i")
    local_steps: int | None = Field(None, description="local step count N_i")
    idle_fraction: float | None = None
    channel: str | None = Field(
        None, description='how its process gets each round: "tcp", "shm" (shared memory), "actor"; None in-process'
    )
    setup_rtt_s: float | None = Field(None, description="its process's round-trip time at set-up (a Ray call)")
    rtt_s: float | None = Field(
        None, description="its process's round-trip time on its round channel: the least over the recent rounds"
    )
    rtt_median_s: float | None = Field(None, description="the same, the median over the recent rounds")
    ledger: SiteLedgerInfo | None = Field(
        None, description="the release ledger: every message its site sent so far, by kind (GET /v1/runs/{id}/ledger)"
    )
    epsilon_spent: float | None = Field(
        None, description="the DP mode (spec.privacy): ε(δ) its site has spent so far, over every release"
    )
    clip_rate: float | None = Field(
        None, description="the DP mode: the fraction of its per-example gradients clipped at privacy.clip"
    )


class FailureInfo(BaseModel):
    """Why a run stopped, and where: the engine's failure record."""

    kind: str = Field(
        description="worker_error, worker_lost, non_finite, coordinator_non_finite, coordinator_lost, "
        "site_unavailable, checkpoint or access"
    )
    message: str
    round: int | None = None
    shard: int | None = None
    site: str | None = None
    node_id: str | None = None
    traceback: str | None = None


class DiagnosticsInfo(BaseModel):
    """Convergence diagnostics of the stored draws (arviz-stats)."""

    min_ess_bulk: float | None = Field(None, description="smallest bulk ESS over the parameters")
    max_rhat: float | None = Field(None, description="largest rank-normalised split R-hat over the parameters")
    draws: int = Field(0, description="draws per chain they were computed on")
    chains: int = 0
    rule: Literal["split_rhat", "nested_rhat"] = Field(
        "split_rhat",
        description="the R-hat the convergence rule reads: split R-hat, or with 16 chains or more nested R-hat over "
        "superchains (then max_nested_rhat)",
    )
    superchains: int = Field(1, description="superchains of the nested R-hat (1: the plain rule)")
    max_nested_rhat: float | None = Field(None, description="largest rank-normalised nested R-hat (many chains)")

    @property
    def rule_rhat(self) -> float | None:
        """The R-hat the rule reads."""
        return self.max_nested_rhat if self.rule == "nested_rhat" else self.max_rhat


class RunInfo(BaseModel):
    """A run as the API shows it."""

    id: str
    name: str | None = Field(None, description="the spec's name")
    tags: dict[str, str] = Field(default_factory=dict, description="the spec's tags")
    status: RunStatus
    created_at: float
    started_at: float | None = None
    finished_at: float | None = None
    spec: RunSpec
    progress: Progress
    timings: dict[str, float] = Field(default_factory=dict)
    workers: list[WorkerStats] = Field(default_factory=list)
    param_names: list[str] | None = None
    response: str | None = Field(
        None,
        description="the column fitted as the response: a formula's left-hand side (whatever data.y_column says), "
        "the site files' y_column, 'y' for a built-in data set; null for an uploaded one (its upload's target)",
    )
    error: str | None = None
    warnings: list[str] = Field(
        default_factory=list,
        description="the submit's (planned draw bytes over RAYSAMPLER_WARN_DRAW_BYTES), then the run's own",
    )
    plan: dict[str, Any] | None = Field(None, description="tuned settings and their predicted bias (from setup)")
    failure: FailureInfo | None = None
    diagnostics: DiagnosticsInfo | None = None
    restarts: int = Field(0, description="times the run resumed from its checkpoint after a failure or restart")
    checkpoint_round: int | None = Field(None, description="round of the last checkpoint (stored with its draws)")
    stop_reason: RunStopReason | None = Field(
        None,
        description="why a finished run stopped: converged, num_rounds, time_budget, cancelled, max_rounds, failed or "
        "privacy_budget (the DP mode's budget)",
    )
    replica: str | None = Field(
        None,
        description="the service replica driving the run (it holds the run's lease); None while no replica does",
    )
    chains: int = Field(0, description='the chains it runs (with chains "auto", as the set-up chose; see plan)')
    network: NetworkInfo | None = Field(None, description="round trips by phase (set once the run starts)")


class RunList(BaseModel):
    runs: list[RunInfo]
    next_cursor: str | None = None


class RunSummary(BaseModel):
    """Posterior summary of the draws stored so far: one row per coordinate, `columns` in order."""

    run_id: str
    status: RunStatus
    draws_per_chain: int
    chains: int
    ci_prob: float
    columns: list[str]
    rows: list[dict[str, str | float | None]] = Field(
        description='{"param": name} plus one value per column (null where not finite)'
    )


class EffectsTable(BaseModel):
    """brms-style summaries of a run's stored draws (`raysampler.effects`): kind "fixef" (the coefficients), "ranef"
    (each group's effects), "coef" (each group's coefficients, fixed plus its effect) or "prior" (the prior on every
    parameter); one row per coefficient, effect or prior: `index` names it (group label, effect or coefficient)."""

    run_id: str
    kind: Literal["fixef", "ranef", "coef", "prior"]
    columns: list[str]
    rows: list[dict[str, str | float | list[str] | None]] = Field(
        description='{"group": grouping column (ranef, coef), "index": [label, ...]} plus one value per column'
    )


class PpcDensityInfo(BaseModel):
    """A density overlay (`kind` "dens"): on `grid`, the observed y's density and each replicated data set's
    (`replicated`, one row per draw), each a Gaussian kernel density of counts binned at the shards, with its
    bandwidth (`bandwidth`: the observed's, then each replicated's)."""

    run_id: str
    kind: Literal["dens"]
    n: int = Field(description="rows of the run's data")
    response: str = Field("y", description="the response's name (a formula's left-hand side, else y): the plot's axis")
    grid: list[float]
    bandwidth: list[float]
    observed: list[float]
    replicated: list[list[float]]


class PpcHistogramInfo(BaseModel):
    """Histograms (`kind` "hist") of the observed y and of each replicated data set on the same bins (`edges`):
    counts, summed over the shards."""

    run_id: str
    kind: Literal["hist"]
    n: int = Field(description="rows of the run's data")
    response: str = Field("y", description="the response's name (a formula's left-hand side, else y): the plot's axis")
    edges: list[float]
    observed: list[int]
    replicated: list[list[int]]


class PpcStatInfo(BaseModel):
    """A test statistic (`kind` "stat"): its value on the observed y, on each replicated data set, and the posterior
    predictive p-value P(T(y_rep) ≥ T(y)); null where it is not finite (sd of one row)."""

    run_id: str
    kind: Literal["stat"]
    n: int = Field(description="rows of the run's data")
    response: str = Field("y", description="the response's name (a formula's left-hand side, else y): the plot's axis")
    stat: PpcStatName
    observed: float | None
    replicated: list[float | None]
    p_value: float


class PpcStatGroupedInfo(BaseModel):
    """A test statistic per group (`kind` "stat_grouped", asked for with `group=`): per label of the data's column
    `group` (text as given, numbers as numbers), its rows, T(y) and T(y_rep) of each replicated data set, and the
    posterior predictive p-value; null where a value is not finite."""

    run_id: str
    kind: Literal["stat_grouped"]
    response: str = Field("y", description="the response's name (a formula's left-hand side, else y): the plot's axis")
    stat: PpcStatName
    group: str
    labels: list[str | int | float]
    n: list[int] = Field(description="rows per group")
    observed: list[float | None]
    replicated: list[list[float | None]] = Field(description="per group, T of each replicated data set")
    p_values: list[float]


#: GET /v1/runs/{id}/ppc: one of the four, told apart by `kind`.
PpcInfo = Annotated[PpcDensityInfo | PpcHistogramInfo | PpcStatInfo | PpcStatGroupedInfo, Field(discriminator="kind")]


class Trace(BaseModel):
    """One parameter's stored draws, evenly thinned to at most `max_points` per chain (for plots): draw indices
    `index`, and `values[c]` chain c's values at them on the parameter's natural scale (null where not finite)."""

    run_id: str
    param: int = Field(description="the coordinate's position in param_names")
    name: str
    draws_stored: int
    step: int = Field(description="every step-th draw of the window is included")
    index: list[int]
    values: list[list[float | None]]


class ParamDiagnostics(BaseModel):
    """The plots ArviZ users read for one parameter, as bounded arrays (arviz-stats): per-chain rank histograms,
    per-chain autocorrelation, and bulk and tail ESS against the number of draws. Computed on at most `max_draws` per
    chain of the stored draws, evenly thinned (every `step`-th draw; autocorrelation lags count those draws)."""

    run_id: str
    param: int = Field(description="the coordinate's position in param_names")
    name: str
    draws_stored: int
    chains: int
    step: int = Field(description="every step-th stored draw was used")
    draws_used: int = Field(description="draws per chain the diagnostics were computed on")
    rank_bins: int
    rank_counts: list[list[int]] = Field(
        description="per chain, how many of its draws fall in each of rank_bins equal bins of the ranks over all chains"
    )
    autocorr: list[list[float | None]] = Field(description="per chain, autocorrelation at lags 0, 1, …, max_lag")
    ess_draws: list[int] = Field(description="draws per chain (stored, before thinning) at each ESS point")
    ess_bulk: list[float | None]
    ess_tail: list[float | None]
    r_hat: float | None = Field(None, description="rank-normalised split R-hat on the draws used")
