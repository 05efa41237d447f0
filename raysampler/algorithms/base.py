"""The contract between an algorithm and the runtime.

An algorithm is a set of pure functions over small immutable states (BlackJAX's shape): `prepare` tunes the run and
gives the coordinator's initial state and one payload per worker (`Plan`); `worker_init`/`worker_step` run where a
shard lives; `messages` (or `round_message`) and `coordinator_step` run on the coordinator. The runtime only moves
states and messages between them and calls these functions, so the same algorithm runs in-process and on Ray and
draws the same numbers for the same seed.

An algorithm may step several shards of a worker process as one batch: its `round_message` then sends one message for
all shards, its worker states are batches (every array with a leading shard axis, one shard's state a batch of one:
`stacking.py` stacks and splits them, for any algorithm), and `step_stacked` steps a batch.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

import numpy as np

from ..errors import ArgumentError
from ..models.contract import Model, ShardStack
from ..streams import ChainNoise, StackedNoise
from ..tuning.laplace import Laplace
from ..tuning.report import TuningReport
from ..tuning.shards import ShardPool

if TYPE_CHECKING:  # the privacy extra (dp-accounting) loads only with the DP mode
    from ..privacy.accountant import DPPlan


@dataclass(frozen=True)
class RoundInfo:
    """Where the run is: the global round index t (burn-in included), whether it is still burn-in, how many burn-in
    rounds there are, and in a pipelined run which group of chains this half-round steps."""

    t: int
    warmup: bool
    burn_in: int = 0
    #: a pipelined run's chain group [a, b) that this half of round t steps (`Algorithm.splits_chains`); None: all
    chains: tuple[int, int] | None = None


@dataclass(frozen=True)
class Plan:
    """What `prepare` decided: the coordinator's initial state, one init payload per worker, its tuned settings
    (`report`).

    `local_steps` is the per-worker local step count N_i; `balance` says whether the runtime may
    re-balance N_i from measured step times (it keeps their mean at `n_avg`); `schedule`, if given, is a recorded
    N_i schedule of (round, N) pairs (from a previous run's `stats["N_schedule"]`) to follow exactly.
    `model`, if given, is the model `prepare` handed the workers (e.g. the model seen in whitened coordinates φ;
    kept to hand it again when a run resumes), and `precond` maps the coordinator's draws back to θ.
    """

    coordinator_state: Any
    worker_payloads: list[Any]
    local_steps: np.ndarray
    n_avg: float
    balance: bool
    report: TuningReport
    schedule: tuple[tuple[int, tuple[int, ...]], ...] | None = None
    model: Any = None
    precond: Any = None
    #: the DP mode: what the accountant needs (`privacy.accountant.DPPlan`); the runtime stops the run before a
    #: round whose release would exceed the budget
    privacy: DPPlan | None = None

    @classmethod
    def one_step(
        cls, state: Any, payloads: list[Any], report: TuningReport, lap: Laplace, wmodel: Model, n_avg: float = 1.0
    ) -> Plan:
        """The plan of an algorithm whose workers take one local step a round, never re-balanced, in the coordinates
        the shared Laplace step chose: where it whitened (`lap.whitened`) the workers get the whitened model `wmodel`
        and the draws map back by its preconditioner. `n_avg`: local steps per communication on average (FALD's
        1/p_comm), 1 otherwise."""
        whitened = bool(lap.whitened)
        return cls(
            state,
            payloads,
            np.ones(len(payloads), dtype=int),
            n_avg,
            False,
            report,
            model=wmodel if whitened else None,
            precond=lap.precond if whitened else None,
        )


#: batching hooks `Algorithm` had, and what replaced each
_REPLACED = {
    "stack_key": "shards share a batch when raysampler.algorithms.stacking.stack_key of their worker states agree",
    "batch_keys": "give the round message a batch_keys(shards) method",
    "stack_states": "worker states are batches of one, joined by raysampler.algorithms.stacking.stack",
    "unstack_states": "raysampler.algorithms.stacking.unstack splits a batch state",
    "split_stacked": "raysampler.algorithms.stacking.unstack splits a batch state",
}


class Adaptation(NamedTuple):
    """One warm-up round of a step-size adaptation: the round's acceptance (probability, mean over chains, and
    shards or agents) and the acceptance the adaptation aims at (dual averaging's target)."""

    accept: float
    target: float


class Algorithm(ABC):
    """A distributed sampler: pure init/step functions for workers and coordinator."""

    name: str = "algorithm"
    #: whether the algorithm samples shard-local parameters (a model with `has_local_params()`, e.g. group effects)
    supports_local_params: bool = False

    @abstractmethod
    def prepare(self, model: Model, pool: ShardPool, *, chains: int, seed: int, noise: ChainNoise) -> Plan:
        """Tune the run (may query the workers through `pool.map`) and build the initial states."""

    @abstractmethod
    def worker_init(self, payload: Any, model: Model, X: np.ndarray, y: np.ndarray) -> Any:
        """The worker's initial state from its payload."""

    @abstractmethod
    def worker_step(
        self, state: Any, message: Any, model: Model, X: np.ndarray, y: np.ndarray, noise: ChainNoise
    ) -> tuple[Any, Any]:
        """Local work on one shard: (new state, reply to the coordinator)."""

    @abstractmethod
    def messages(self, state: Any, local_steps: np.ndarray, info: RoundInfo) -> list[Any]:
        """The messages that start round `info.t`, one per worker (N_i = local_steps[i] local steps)."""

    @abstractmethod
    def coordinator_step(
        self, state: Any, replies: list[Any], noise: ChainNoise, info: RoundInfo
    ) -> tuple[Any, np.ndarray]:
        """Global step closing round `info.t`: (new state, the round's draws θ, shape (K, d))."""

    # --- several shards stepped as one batch (optional; `runtime/batches.py`) ------------------------------------

    def round_message(self, state: Any, local_steps: np.ndarray, info: RoundInfo) -> Any:
        """What starts round `info.t`: by default `messages`' list, one per shard, each worker process getting its
        shards' ones and stepping them one by one. An algorithm that can step several shards as one batch returns
        instead one message for all shards (not a list): every process gets it, steps its shards in batches
        (`stacking.stack`, `step_stacked`; shards whose worker states have equal `stacking.stack_key`s, and equal
        values of the message's `batch_keys(shards)` where it has that method) and replies with one block, and
        `coordinator_step` gets all shards' replies as one block (a named tuple of arrays whose first axis runs over
        the shards)."""
        return self.messages(state, local_steps, info)

    def splits_chains(self, state: Any) -> bool:
        """Whether a round may run as two halves, one per group of chains (a pipelined run: the workers step one
        group while the coordinator updates the other), `RoundInfo.chains` telling `round_message` and
        `coordinator_step` which. The groups' chains must be independent (no adaptation shared across chains) and
        draw the same random numbers as in a whole round: the first group's half draws the round's numbers for every
        chain and keeps the other group's for its half. Default: False."""
        return False

    def step_stacked(
        self,
        stacked: Any,
        message: Any,
        shards: np.ndarray,
        model: Model,
        data: ShardStack,
        noise: StackedNoise,
    ) -> tuple[Any, Any]:
        """`worker_step` of the batch's shards (ids `shards`) at once, their worker states stacked (`stacking.stack`),
        their data stacked (`ShardStack`: one (B, n, p) stack per run of equal row counts; the model's `*_stacked`
        methods go through `data.apply`), `noise` their streams taken together: (new batch state, their replies as
        one block). Every shard must get bit for bit what `worker_step` gives it alone: same-seed draws may not
        depend on which shards share a process."""
        raise NotImplementedError(f"{self.name} does not step shards as one batch")

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Refuse the per-algorithm batching hooks that generic stacking replaced, naming what does their work."""
        super().__init_subclass__(**kwargs)
        for name, now in _REPLACED.items():
            if name in vars(cls):
                raise TypeError(f"{cls.__name__}.{name}: Algorithm no longer has {name}(); {now}")

    #: secure_sums=True: None where the algorithm sends its sums masked (`for_secure_sums`); else why it cannot, or
    #: that it does not yet (the refusal's reason, completing "secure_sums is refused for algorithm X: ...")
    secure_sums_refusal: str | None = "it does not send its sums masked yet (only 'dglmc', 'fald', 'qlsd' and 'ula' do)"

    def for_secure_sums(self) -> Algorithm:
        """The algorithm as a secure-sums run runs it (its sums sent in fixed point, for the sites to mask); an
        ArgumentError naming `secure_sums` and the algorithm where it cannot (`secure_sums_refusal`)."""
        raise ArgumentError(
            ("secure_sums",), f"secure_sums=True is refused for algorithm {self.name!r}: {self.secure_sums_refusal}"
        )

    #: the release ledger's names of the reply's fields (`privacy.ledger`; a field not named here goes by its own name)
    #: and the fields a secure-sums run sends masked
    release_names: ClassVar[Mapping[str, str]] = MappingProxyType({})
    masked_fields: ClassVar[tuple[str, ...]] = ()

    @property
    def private_noise(self) -> bool:
        """Whether the algorithm's releases are accounted as differentially private (the DP mode), so that its
        workers' noise must be unknown to whoever knows the seed (`RunOptions.keyed_noise`). Default: False."""
        return False

    #: parameters that may be given per shard (a scalar or one value per shard)
    per_shard_params: tuple[str, ...] = ("rho", "gamma", "n_local")

    def local_draws(self, replies: list[Any]) -> tuple[np.ndarray, np.ndarray] | None:
        """With shard-local parameters: (the θ they were drawn given (K, d), in the algorithm's coordinates; the
        round's local parameters to report after it (K, Σ l_i)); None without local parameters."""
        return None

    def check_shapes(self, num_shards: int, dim: int, chains: int) -> None:
        """Raise ValueError naming the parameter if a per-shard parameter or `init` does not fit the run's
        number of shards, dimension and chains (checked before any work starts)."""
        for name in self.per_shard_params:
            value = getattr(self, name, None)
            if value is None or isinstance(value, str):
                continue
            if isinstance(value, tuple) and value and isinstance(value[0], tuple):  # a recorded (round, N) schedule
                if any(len(n) != num_shards for _, n in value):
                    raise ValueError(f"{name} schedule entries must have one value per shard ({num_shards})")
                continue
            arr = np.asarray(value)
            if arr.ndim == 1 and arr.shape[0] != num_shards:
                raise ValueError(
                    f"{name} must be a scalar or have one value per shard ({num_shards}), got {arr.shape[0]} values"
                )
        init = getattr(self, "init", None)
        if init is None:
            return
        if isinstance(init, str):
            if init not in ("map", "zeros"):
                raise ValueError(f"init must be 'map', 'zeros' or an array, got {init!r}")
            return
        try:
            arr = np.asarray(init, dtype=float)
        except (TypeError, ValueError):
            raise ValueError(f"init must be 'map', 'zeros' or an array, got {init!r}") from None
        if arr.shape not in ((dim,), (chains, dim)) or not np.all(np.isfinite(arr)):
            raise ValueError(
                f"init must have shape ({dim},) or ({chains}, {dim}) with finite values, got shape {arr.shape}"
            )

    def reply_stats(self, replies: list[Any]) -> dict[str, np.ndarray]:
        """Per-chain statistics of one round to keep with the draws (e.g. local acceptance rates)."""
        return {}

    def clipped_counts(self, replies: Any) -> np.ndarray | None:
        """The DP mode: per shard (b,), the per-example gradients its round clipped (over steps and chains); None
        where the algorithm clips nothing."""
        return None

    def adaptation(self, state: Any, stats: dict[str, np.ndarray]) -> Adaptation | None:
        """What a step size adapted during warm-up reads after round t: the round's mean acceptance and its target
        (`Adaptation`), from the coordinator's state after the round's `coordinator_step` or from the round's
        `reply_stats` (an algorithm whose rounds may run as two halves reads `stats` only: the state has moved on to
        the next half by then). None where nothing adapts: the warm-up's end then rests on the chains alone."""
        return None


def minibatch_grads(
    model: Model, X: np.ndarray, y: np.ndarray, idx: np.ndarray, *points: np.ndarray
) -> list[np.ndarray]:
    """Unbiased minibatch estimates (n_i/B) Σ_{r∈idx[:, k]} ∇ℓ_r(x_k) of ∇U_i at each of `points` (each (K, d)):
    chain k uses its own rows idx[:, k] (idx: (B, K)), shared by all the points of that chain. No prior term."""
    n, B = np.asarray(y).shape[0], idx.shape[0]
    # the K chains as K stacked shards of B rows each (`Model.grad_stacked`, which gives each the bits of `grad`)
    g = model.grad_stacked(X[idx.T], y[idx.T], np.stack(points, axis=1)) * (n / B)
    return [g[:, j] for j in range(len(points))]


def check_model_support(algorithm: Algorithm, model: Model) -> None:
    """Raise ArgumentError at ("model", "group_effects") if `model` has shard-local parameters (group effects) that
    `algorithm` cannot sample."""
    if model.has_local_params() and not algorithm.supports_local_params:
        raise ArgumentError(
            ("model", "group_effects"),
            f"group_effects: algorithm {algorithm.name!r} cannot sample group effects (parameters local to the shard "
            "holding the group's rows); use algorithm 'dglmc' (the default) or 'mala'",
        )
