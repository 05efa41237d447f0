"""What crosses the runtime's seams, as named types: driver ↔ coordinator (`CoordinatorHandle`), coordinator ↔ its
workers (`WorkerPool`, `Transport`), and the values they exchange (`ShardFacts`, `StepResult`, `SetupInfo`, `Chunk`,
`RunStats`) — plus `RunState`, the whole state of a run as one versioned, picklable value (checkpoint and resume).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from ..enums import Balance, StopReason
from ..errors import Failure
from ..models.contract import DataSpec, Model, ParamBlock
from ..privacy.ledger import Ledger, ledger_dict
from ..streams import NoiseState
from ..tuning.report import TuningReport
from .links import ChainsChoice, LinkStats, PipelineChoice, TripLog, Trips

if TYPE_CHECKING:  # pydantic-settings loads only when a run starts: `import raysampler` (and the CLI) stays light
    from ..privacy.accountant import DPAccount, DPPlan, PrivacyStats
    from ..settings import EngineSettings

#: Ray node label naming the site whose data a node holds: `ray start --labels raysampler.io/site=<name>`.
SITE_LABEL = "raysampler.io/site"


def _engine_from_env() -> EngineSettings:
    """`EngineSettings` from the environment now (the driver's, where a `RunConfig` is made)."""
    from ..settings import EngineSettings

    return EngineSettings.from_env()


@dataclass(frozen=True)
class RunConfig:
    """The rounds the coordinator runs and keeps (from `RunOptions`), and its step-count balancing policy."""

    chains: int
    num_rounds: int
    burn_in: int
    thin: int
    seed: int
    balance: Balance  # AUTO: only when measured speeds differ by more than `balance_ratio`
    rebalance_every: int = 20
    balance_ratio: float = 1.5
    #: run each round as two halves, one per chain group, overlapped on Ray (`Coordinator._rounds_in_halves`)
    pipeline: bool = False
    #: pipeline="auto": the set-up decides from the measured links and the round's predicted compute (`choose_pipeline`)
    pipeline_auto: bool = False
    #: `burn_in` is a cap: the warm-up ends at the first check that finds the chains warm (`Coordinator`)
    warmup_auto: bool = False
    #: `chains` is the default: the coordinator may choose more from the measured links (`choose_chains`)
    chains_auto: bool = False
    #: the driver stops the run on convergence (num_rounds="auto"): chains="auto" may choose the many-chain rule's
    #: count (`choose_chains`); False in the DP mode, whose privacy budget the chains share
    converges: bool = False
    #: the run ends at its time budget (`time_budget_s`): chains="auto" takes the many-chain count too, since the
    #: budget, not the rounds, bounds the run and more chains draw more in a round; False in the DP mode
    budgeted: bool = False
    #: with chains_auto, the most chains the set-up may choose (None: `links.CHAINS_AUTO_MAX`)
    chains_cap: int | None = None
    #: the sites' terms reach the coordinator only as masked secure sums (`privacy.secure_sum`; DG-LMC)
    secure_sums: bool = False
    #: the workers' random streams are keyed by their site's secret and their captured states sealed (`ShardHost`)
    keyed_noise: bool = False
    # The engine settings the driver read from the environment once (site wait, coordinator shards, spin, start-up
    # timeout); the coordinator and its workers use these, never the environment of their own processes.
    engine: EngineSettings = field(default_factory=_engine_from_env)

    @property
    def total_rounds(self) -> int:
        return self.burn_in + self.num_rounds


@dataclass(frozen=True)
class StateInit:
    """What `init_states` does in its trip besides creating each shard's state from its payload, in this order: bind
    `model` first; agree a secure-sums run's pairwise keys from every shard's public key (`peers`, in shard order,
    from `describe`); start fresh random streams for `chains` chains (None: the pool's own count; chains="auto" may
    have chosen another at set-up); then `set_slowdown(slowdown)` and time the model (`calibrate`)."""

    model: Model | None = None
    slowdown: dict[int, float] | None = None
    calibrate: bool = False
    chains: int | None = None
    peers: Sequence[bytes] | None = None


#: `init_states` with nothing else to do in its trip
NO_INIT = StateInit()


@dataclass(frozen=True)
class ShardFacts:
    """What a worker reports about its shard at setup (never the data): shape, finiteness, labels, column names,
    the labels of its text columns (group labels, which name the group effects anyway), and where it lives (site,
    node, host, process)."""

    shard: int
    n_rows: int
    x_shape: tuple[int, ...]
    y_shape: tuple[int, ...]
    finite: bool
    y_max: float | None
    columns: tuple[str, ...] | None = None
    levels: dict[str, tuple[str, ...]] | None = None
    site: str | None = None
    path: str | None = None
    node_id: str | None = None
    hostname: str | None = None
    pid: int | None = None
    #: a secure-sums run: the shard's X25519 public key for this key agreement (`privacy.site`), else None
    public_key: bytes | None = None


@dataclass(frozen=True)
class Placement:
    """Where shard `shard`'s worker runs."""

    shard: int
    site: str | None
    node_id: str | None
    hostname: str | None
    pid: int | None

    @classmethod
    def of(cls, facts: ShardFacts) -> Placement:
        return cls(facts.shard, facts.site, facts.node_id, facts.hostname, facts.pid)


@dataclass(frozen=True)
class Broadcast:
    """One message that every worker process gets (an algorithm's round message for all shards), encoded once."""

    value: Any


@dataclass
class RoundTiming:
    """Where one round's time went in the coordinator's process around the workers' step, in seconds: encoding the
    messages, sending them, stepping the shards this process hosts itself, waiting for the last reply to arrive, and
    reading (decoding and joining) the replies."""

    encode_s: float = 0.0
    send_s: float = 0.0
    hosted_s: float = 0.0
    wait_s: float = 0.0
    receive_s: float = 0.0


@dataclass(frozen=True)
class StepResult:
    """One round's replies (a list, one per shard, or one block over all shards), seconds of work per shard, busy
    seconds of the process running each shard, and where the coordinator's time went (`RoundTiming`)."""

    replies: Any
    work_s: np.ndarray
    busy_s: np.ndarray
    timing: RoundTiming = field(default_factory=RoundTiming)


@dataclass(frozen=True)
class ShardState:
    """A worker's state for one shard: the algorithm's worker state and the position of the shard's random streams."""

    shard: int
    algorithm: Any
    noise: NoiseState | None  # None where it is sealed with the algorithm's state (keyed streams: `ShardHost`)


@dataclass(frozen=True)
class WarmupState:
    """Where a warm-up that ends by itself stands: its length once decided (`burn_in`; None while it goes on), the
    round count of its next check, and the warm-up's draws of θ so far, which the next check reads."""

    burn_in: int | None
    next_check: int
    draws: np.ndarray  # (rounds, K, d) on θ's scale
    #: where a step size adapts during warm-up (`Algorithm.adaptation`): its acceptance per round so far (rounds,)
    accept: np.ndarray | None = None


@dataclass(frozen=True)
class SetupInfo:
    """What setup found and decided: dimension, parameter names, shard sizes, where each shard runs, the
    algorithm's tuning report (`plan`: tuned settings, e.g. step sizes, and their predicted bias), N_avg, balancing."""

    dim: int
    param_names: list[str]
    num_shards: int
    shard_rows: list[int]
    groups: list[list[int]]
    placement: tuple[Placement, ...]
    setup_time_s: float
    plan: TuningReport
    n_avg: float
    balance: bool
    transport: str
    param_blocks: tuple[ParamBlock, ...] = ()
    #: with shard-local parameters: the order taking the shards' concatenated local draws to `param_blocks`' order
    local_order: tuple[int, ...] = ()
    model: Model | None = None  # the model bound to the data: predictions and LOO evaluate it
    data_spec: DataSpec | None = None  # what the model was bound to (the service binds a run's model again from it)
    #: how many chains run and why (chains="auto" chooses from the measured links; else as asked)
    chains: ChainsChoice | None = None
    #: the DP mode's accounting plan (budget, clip, γ_i, chains), None without it
    privacy: DPPlan | None = None
    #: whether rounds run as two chain groups in flight and why (pipeline="auto" chooses from the links); None: a run
    #: set up before the choice was recorded (its config says)
    pipeline: PipelineChoice | None = None

    def as_dict(self) -> dict[str, Any]:
        """A plain dict (JSON-like: placement as dicts; without the model)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in ("model", "data_spec")}
        out["placement"] = [dataclasses.asdict(p) for p in self.placement]
        out["chains"] = dataclasses.asdict(self.chains) if self.chains is not None else None
        out["privacy"] = dataclasses.asdict(self.privacy) if self.privacy is not None else None
        out["pipeline"] = dataclasses.asdict(self.pipeline) if self.pipeline is not None else None
        return out


@dataclass(frozen=True)
class BalancerState:
    """The step-count balancer: current N_i, τ_i estimates, rounds observed, whether it has switched on, and the
    schedule so far as (round, N) pairs."""

    n: np.ndarray
    tau: np.ndarray
    count: int
    active: bool
    schedule: tuple[tuple[int, tuple[int, ...]], ...]


@dataclass
class Chunk:
    """Draws kept by one `run` call: theta (n, K, d), per-chain stats (n, K), where the run stands, the failure that
    stopped it (if any) and, when asked for, the run's state at the chunk's end (`state`)."""

    theta: np.ndarray
    stats: dict[str, np.ndarray]
    rounds_done: int
    done: bool
    failure: Failure | None = None
    state: RunState | None = None
    #: the warm-up's length as it stands (a warm-up that ends by itself: its cap until it has ended)
    burn_in: int | None = None
    #: why the coordinator itself ended the run before its last round (the DP mode's budget), else None
    stop: StopReason | None = None


#: The parts of a round `RunStats.round_parts` holds, in its columns' order (seconds per round): the coordinator's
#: own compute (the algorithm's messages and global step, checks, bookkeeping), encoding the messages, sending them,
#: stepping the shards the coordinator's process hosts, waiting for the last reply, receiving (decoding, joining)
#: the replies; the slowest worker process's compute; the overhead, round time minus the slowest process's compute.
ROUND_PARTS = ("coordinator", "encode", "send", "hosted", "wait", "receive", "slowest_worker", "overhead")


@dataclass(frozen=True)
class RoundBreakdown:
    """The median round and its parts (`ROUND_PARTS`) in seconds, with how many worker processes and sites the
    shards ran on: what `RunStats.breakdown` reports."""

    rounds: int
    processes: int
    sites: int
    round_s: float
    coordinator_s: float
    encode_s: float
    send_s: float
    hosted_s: float
    wait_s: float
    receive_s: float
    slowest_worker_s: float
    overhead_s: float


@dataclass(frozen=True)
class RunStats:
    """Runtime statistics so far: per-round wall time and its parts (`round_parts`, columns `ROUND_PARTS`),
    per-worker compute/idle seconds, N_i (and its schedule), τ_i, and the tuned ρ_i, γ_i, M_i where the algorithm
    has them."""

    rounds: int
    round_time: np.ndarray
    sampling_time_s: float
    worker_compute_s: np.ndarray
    worker_idle_s: np.ndarray
    idle_fraction: np.ndarray
    N: np.ndarray
    N_history: np.ndarray
    N_schedule: tuple[tuple[int, tuple[int, ...]], ...]
    balanced: bool
    tau: np.ndarray
    placement: tuple[Placement, ...]
    rho: Any = None
    gamma: Any = None
    M: Any = None
    #: (rounds, len(ROUND_PARTS)) seconds: each round's parts (this coordinator's rounds; a resumed run's start here)
    round_parts: np.ndarray = field(default_factory=lambda: np.empty((0, len(ROUND_PARTS))))
    #: round trips to the shards' processes by phase (this coordinator's pool: a resumed run counts from there)
    trips: Trips = field(default_factory=Trips)
    #: each worker process's link (site, channel, RTT at set-up and over the recent rounds); () when none is remote
    links: tuple[LinkStats, ...] = ()
    #: warm-up rounds: as fixed, or where a warm-up that ends by itself ended (None while it goes on)
    burn_in: int | None = None
    #: the release ledger: every message each shard's site sent, by kind (`privacy.ledger`)
    ledger: Ledger | None = None
    #: the DP mode: ε(δ) spent per site, the budget, clip rate per site (`privacy.accountant.PrivacyStats`)
    privacy: PrivacyStats | None = None
    #: whether rounds run as two chain groups in flight and why (pipeline="auto": as decided after its probe rounds)
    pipeline: PipelineChoice | None = None

    def breakdown(self) -> RoundBreakdown:
        """The median round's parts (medians of each part over the rounds, so they need not add up exactly), with
        the number of worker processes (distinct process ids of the shards' hosts) and sites."""
        parts = self.round_parts
        med = np.median(parts, axis=0) if len(parts) else np.full(len(ROUND_PARTS), np.nan)
        rounds = np.asarray(self.round_time)[-len(parts) :] if len(parts) else np.asarray(self.round_time)
        return RoundBreakdown(
            len(parts),
            len({(p.node_id, p.pid) for p in self.placement}),
            len({p.site for p in self.placement if p.site is not None}),
            float(np.median(rounds)) if len(rounds) else float("nan"),
            *(float(v) for v in med),
        )

    def as_dict(self) -> dict[str, Any]:
        """A plain dict (placement as dicts): what the `Result.stats` view shows."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["placement"] = [dataclasses.asdict(p) for p in self.placement]
        out["trips"] = {**dataclasses.asdict(self.trips), "total": self.trips.total}
        out["links"] = [dataclasses.asdict(link) for link in self.links]
        out["ledger"] = None if self.ledger is None else ledger_dict(self.ledger)
        out["privacy"] = dataclasses.asdict(self.privacy) if self.privacy is not None else None
        out["pipeline"] = dataclasses.asdict(self.pipeline) if self.pipeline is not None else None
        return out


@dataclass(frozen=True)
class RunState:
    """Everything needed to continue a run exactly: the coordinator's algorithm state and random streams, every
    shard's state and streams, the balancer, the round counter and the draws kept so far. State only, never data.

    `fingerprint` identifies the run it belongs to (algorithm, its parameters, model, chains, seed, shards), so a
    state is never restored into a different run; `version` changes when the layout does.
    """

    #: 2: random streams stored as generator states (no buffered draws); 3: typed tuning report; 4: DG-LMC worker
    #: states as their local kernels' states (`algorithms.dglmc.kernels`)
    VERSION = 4

    version: int
    fingerprint: str
    rounds_done: int
    draws_kept: int
    coordinator: Any
    noise: NoiseState
    shards: tuple[ShardState, ...]
    balancer: BalancerState
    setup: SetupInfo
    worker_model: Any = None  # the model the workers run, if not the data-bound model (e.g. whitened)
    precond: Any = None  # maps the algorithm's draws back to θ
    extra: dict[str, Any] = field(default_factory=dict)
    warmup: WarmupState | None = None  # a warm-up that ends by itself (RunConfig.warmup_auto)
    #: the release ledger at the capture (`privacy.ledger.Ledger`); a state from before it had none (None): its
    #: resumed run counts from the resume on, so the layout's version is unchanged
    ledger: Ledger | None = None
    privacy: DPAccount | None = None  # the DP mode's accounting so far


class WorkerPool(Protocol):
    """The workers that own the shards, in-process or on Ray actors: the coordinator's only way to reach data."""

    num_shards: int
    groups: list[list[int]]
    trips: TripLog  # the coordinator sets its phase; every call below that reaches the shards counts one trip

    @property
    def transport(self) -> str:
        """How the coordinator reaches the workers each round (\"in-process\", \"socket\", \"shm\", \"actor\")."""

    def describe(self) -> list[ShardFacts]:
        """Each shard's facts, reported by the worker that loaded it."""

    def bind(self, model: Model) -> None:
        """Give every worker the data-bound model (each checks its shards against it)."""

    def bind_facts(self, model: Model, fns: Sequence[Callable[..., Any]]) -> list[list[Any]]:
        """`bind(model)` and, in the same trip, each of `fns` on every shard under it: [[fn(model, X_i, y_i) for
        each shard i] for each fn] (static facts of the shards under the model: `Model.gram`, group labels, ...)."""

    def gram(self) -> list[np.ndarray | None]:
        """Each shard's `Model.gram` under the bound model (summed by `bind_model` for the properness check)."""

    def map(self, fn: Callable[..., Any], args: Sequence[tuple[Any, ...]], model: Model | None = None) -> list[Any]:
        """[fn(model, X_i, y_i, *args[i]) for each shard i], computed where shard i lives; with `model`, bound first
        (`bind`) in the same trip."""

    def init_states(self, payloads: Sequence[Any], init: StateInit = NO_INIT) -> np.ndarray | None:
        """Create each shard's algorithm state from its payload, with what `init` asks in the same trip
        (`StateInit`); returns the seconds per shard of `init.calibrate`, else None."""

    def set_slowdown(self, factors: dict[int, float]) -> None:
        """Test hook: shard i's local work takes factors[i] times as long."""

    def calibrate(self) -> np.ndarray:
        """Seconds per local step on each shard, measured before sampling (touches no chain state)."""

    def step(self, messages: Any) -> StepResult:
        """One round on every shard: `messages` one per shard (a list) or one for all shards (`round_message`);
        raises `WorkerFailed` naming the shard if a worker fails."""

    def send(self, messages: Any) -> None:
        """`step` in two halves: start a round (the workers start on it) ..."""

    def collect(self) -> StepResult:
        """... and finish the oldest one started. Two rounds may be outstanding (a pipelined round's two chain
        groups: the workers step one while the coordinator updates the other), never more."""

    def capture(self) -> list[ShardState]:
        """Every shard's state."""

    def restore(self, states: Sequence[ShardState], peers: Sequence[bytes] | None = None) -> None:
        """Put captured shard states back (a secure-sums run: with the new key agreement's public keys, `peers`)."""

    def links(self) -> tuple[LinkStats, ...]:
        """Each worker process's link to the coordinator (`LinkStats`); () when every shard is in this process."""

    def revive(self, timeout_s: float) -> None:
        """After a lost worker: wait (up to `timeout_s`) until every worker answers again, restarted where its
        shards live; raises WorkerFailed naming the shard and site otherwise."""

    def close(self) -> None:
        """Stop the workers."""


class Transport(Protocol):
    """How one round's messages reach the worker processes and the replies come back."""

    name: str

    def step(
        self, per_group: Sequence[Any] | Broadcast, meanwhile: Callable[[], None] | None = None
    ) -> tuple[list[tuple[Any, Any]], RoundTiming]:
        """Send each process its shards' messages (or every process the same `Broadcast`), call `meanwhile` (the
        caller's own shards, if any), wait for all: ((replies, seconds per shard) per process, where the time went).
        Raises `WorkerFailed` for the first failure (after draining)."""

    def send(self, per_group: Sequence[Any] | Broadcast) -> None:
        """`step`'s first half: send (at most two sends outstanding) ..."""

    def collect(self) -> tuple[list[tuple[Any, Any]], RoundTiming]:
        """... and its second: the replies to the oldest outstanding send."""

    def close(self) -> None:
        """Release connections."""


class CoordinatorHandle(Protocol):
    """The driver's view of a coordinator, in-process or a Ray actor."""

    def setup(self, slowdown: dict[int, float] | None = None) -> SetupInfo:
        """Bind the model to the data, tune the algorithm, create every state."""

    def resume(self, state: RunState) -> SetupInfo:
        """Bind the model to the data and continue from `state` (no tuning)."""

    def run(self, max_rounds: int, time_left_s: float | None = None, capture: bool = False) -> Chunk:
        """Run up to `max_rounds` rounds; with `capture` the chunk carries the state at its end."""

    def capture(self) -> RunState:
        """The whole run state now."""

    def recover(self, state: RunState) -> SetupInfo:
        """After a lost worker: revive the workers and roll every state back to `state`."""

    def stats(self) -> RunStats:
        """Runtime statistics so far."""

    def close(self) -> None:
        """Stop the coordinator and its workers."""
