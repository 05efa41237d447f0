"""The coordinator: owns the chain state and runs the rounds. It knows nothing of an algorithm's mathematics:
it asks the algorithm for messages, moves them to the pool, hands the replies back, keeps the draws.

Rounds run in chunks (`run(max_rounds)`), each returning the draws it produced, so a caller can show progress,
stream draws, checkpoint and stop on a time budget without the coordinator holding the whole run. A coordinator
is built complete, either freshly tuned (`Coordinator.start`) or from a captured `RunState` (`Coordinator.resume`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..algorithms.base import Algorithm, RoundInfo, check_model_support
from ..diagnostics import superchains_for, warm
from ..enums import Balance, StopReason
from ..errors import ArgumentError, Failure, FailureKind, WorkerFailed
from ..models.contract import DataSpec, Model, ParamBlock, as_model, join_local_blocks
from ..models.groups import check_groups_disjoint, spanning_factors
from ..privacy.ledger import LedgerBook, size_of
from ..shards import ShardSet, join_levels
from ..streams import ChainNoise
from .batches import nonfinite_shard
from .contracts import (
    ROUND_PARTS,
    BalancerState,
    Chunk,
    Placement,
    RoundTiming,
    RunConfig,
    RunState,
    RunStats,
    SetupInfo,
    ShardFacts,
    StepResult,
    WarmupState,
    WorkerPool,
)
from .host import ShardSource
from .links import (
    PIPELINE_PROBE_ROUNDS,
    ChainsChoice,
    Phase,
    PipelineChoice,
    chain_groups,
    choose_chains,
    choose_pipeline,
    decide_pipeline,
    far_rtt,
)

if TYPE_CHECKING:  # the privacy extra (dp-accounting) loads only with the DP mode
    from ..privacy.accountant import DPAccount, PrivacyStats

#: Consecutive window estimates of uneven speeds before balance="auto" switches balancing on.
AUTO_ESTIMATES = 3
#: A warm-up that ends by itself (RunConfig.warmup_auto) is first checked after this many rounds, then each time
#: WARM_GROWTH times as many: checks at fixed round counts, so where it ends does not depend on the machine.
WARM_FIRST_CHECK = 50
WARM_GROWTH = 1.5
#: balance="auto" counts a window as uneven only if the slowest process's work per round exceeds the fastest's by
#: this many seconds: balancing can save at most that gap, and below ~1 ms it is scheduling noise (2 cores shared
#: by 4 workers on tiny shards), not a slow machine — not worth giving up a fixed, reproducible schedule.
MIN_GAP_S = 1e-3


class StepBalancer:
    """N_i = max(1, round(q_i · N_avg · b)), q_i = τ_i⁻¹ / Σ_k τ_k⁻¹ ([DG-LMC], sec. 3.2.2).

    τ_i is shard i's seconds per local step: timed before sampling (`calibrate`), then re-estimated from the median
    of the rounds observed since the last estimate, after 5 rounds and every `every` rounds. Policies:
      ALWAYS — always balance; NEVER — never (fixed N_i); AUTO — switch balancing on only once the measured
      speeds differ by more than `ratio` (max τ / min τ) at AUTO_ESTIMATES window estimates in a row (each the
      median of `every` rounds; the calibration and the early 5-round estimate do not count) and the slowest
      process's work per round exceeds the fastest's by MIN_GAP_S, so equal workers on a noisy machine keep a
      fixed, reproducible schedule; REPLAY — follow a recorded `schedule` of (round, N)
      pairs exactly.
    Every change of N is recorded in `schedule` as (round from which it applies, N).
    """

    def __init__(
        self,
        n_init: np.ndarray,
        n_avg: float,
        policy: Balance | bool | str,
        every: int,
        group_size: np.ndarray,
        ratio: float = 1.5,
        schedule: Sequence[tuple[int, Sequence[int]]] | None = None,
    ) -> None:
        self.n = np.asarray(n_init, dtype=int).copy()
        self.n_avg, self.policy, self.every, self.ratio = n_avg, Balance.of(policy, "policy"), every, ratio
        self.group_size = np.asarray(group_size, dtype=float)
        self.tau = np.full(len(self.n), np.nan)
        self.count = 0
        self.active = self.policy == Balance.ALWAYS
        self._over = 0
        self._window: list[np.ndarray] = []
        self._replay = [(int(r), np.asarray(n, dtype=int)) for r, n in schedule] if schedule is not None else None
        if self._replay:
            self.n = self._replay[0][1].copy()
        self.schedule: list[tuple[int, tuple[int, ...]]] = [(0, tuple(int(v) for v in self.n))]

    @property
    def measuring(self) -> bool:
        """Whether step times feed back into N_i (never when N_i is fixed or replayed)."""
        return self.policy in (Balance.ALWAYS, Balance.AUTO)

    def calibrate(self, tau: np.ndarray) -> None:
        """Start from step times measured before sampling, and set N_i from them at once if balancing is on."""
        self.tau = np.asarray(tau, dtype=float).copy()
        self._estimate(0)

    def steps_for(self, t: int) -> np.ndarray:
        """N_i for round t as decided so far: a replayed schedule's entry in force at round t, else the current N_i
        (a pipelined run asks before round t - 1 is observed)."""
        if self._replay is not None:
            return next((n for r, n in reversed(self._replay) if r <= t), self.n)
        return self.n

    def observe(self, t: int, times: np.ndarray, steps: np.ndarray, lag: int = 1) -> None:
        """Round t took `times` seconds of work per shard for `steps` local steps; N_i from round t + `lag` may
        change (a pipelined run has sent round t + 1's first half before round t ends: lag 2)."""
        if self._replay is not None:
            for r, n in self._replay:
                if r == t + 1:
                    self.n = n.copy()
                    self.schedule.append((r, tuple(int(v) for v in n)))
            return
        if not self.measuring:
            return
        self._window.append(times / np.maximum(steps, 1))
        self.count += 1
        if self.count == 5 or self.count % self.every == 0:
            self.tau = np.median(np.stack(self._window), axis=0)
            self._window = []
            self._estimate(t + lag, full_window=self.count % self.every == 0)

    def _estimate(self, next_round: int, full_window: bool = False) -> None:
        if not (np.all(np.isfinite(self.tau)) and np.all(self.tau > 0)):
            return
        if self.policy == Balance.AUTO and not self.active:
            if not full_window:
                return
            work = self.n * self.tau * self.group_size  # seconds of work per round, per process
            uneven = self.tau.max() / self.tau.min() > self.ratio and work.max() - work.min() > MIN_GAP_S
            self._over = self._over + 1 if uneven else 0
            self.active = self._over >= AUTO_ESTIMATES
        if not self.active:
            return
        # Shards sharing a worker process run one after another: weighting by 1/(group size) equalises the
        # processes' wall times, Σ_{i∈g} N_i τ_i, which is what the paper's rule aims at.
        speed = 1.0 / (self.tau * self.group_size)
        q = speed / np.sum(speed)
        n = np.maximum(1, np.round(q * self.n_avg * len(self.n))).astype(int)
        if not np.array_equal(n, self.n):
            self.n = n
            entry = (next_round, tuple(int(v) for v in n))
            if self.schedule[-1][0] == next_round:
                self.schedule[-1] = entry
            else:
                self.schedule.append(entry)

    def capture(self) -> BalancerState:
        return BalancerState(self.n.copy(), self.tau.copy(), self.count, self.active, tuple(self.schedule))

    def restore(self, state: BalancerState) -> None:
        self.n, self.tau = np.asarray(state.n, dtype=int).copy(), np.asarray(state.tau, dtype=float).copy()
        self.count, self.active, self.schedule = state.count, state.active, list(state.schedule)
        self._window, self._over = [], 0


def data_spec(facts: Sequence[ShardFacts], model: Model) -> DataSpec:
    """DataSpec from the shards' facts; mismatched feature counts or column names are an error naming the shard."""
    first = facts[0]
    for f in facts:
        if len(f.x_shape) != 2:
            raise ValueError(f"shards[{f.shard}]: X must be 2-D (rows, features), got shape {f.x_shape}")
        if f.x_shape[1] != first.x_shape[1]:
            raise ValueError(
                f"shards[{f.shard}]: has {f.x_shape[1]} features but shards[{first.shard}] has "
                f"{first.x_shape[1]}: every shard must have the same columns"
            )
        if f.columns is not None and first.columns is not None and f.columns != first.columns:
            raise ValueError(
                f"shards[{f.shard}]: columns {list(f.columns)} differ from shards[{first.shard}]'s "
                f"{list(first.columns)}: every shard must have the same columns"
            )
        if not f.finite:
            raise ValueError(f"shards[{f.shard}]: data contains NaN or inf")
    y_max = [f.y_max for f in facts if f.y_max is not None]
    kind = model.target_kind
    n_classes = int(max(y_max)) + 1 if y_max and kind == "multiclass" else None
    p = first.x_shape[1]
    ywidth = {f.y_shape[1] for f in facts if len(f.y_shape) == 2}
    if kind == "vector" and ywidth:
        p = ywidth.pop()
    columns = next((f.columns for f in facts if f.columns is not None), None)
    levels = join_levels([f.levels for f in facts])
    return DataSpec(
        n_features=int(p),
        n_classes=n_classes,
        n_rows=sum(f.n_rows for f in facts),
        columns=columns,
        levels=tuple(levels.items()) if levels else None,
    )


def fingerprint(algorithm: Algorithm, model: Model, config: RunConfig, facts: Sequence[ShardFacts]) -> str:
    """What a run state belongs to: algorithm and its parameters, model, chains, seed, burn-in, thinning, shards."""
    shards = [(f.shard, f.n_rows, f.x_shape, f.y_shape, f.columns) for f in facts]
    key = repr(
        (
            type(algorithm).__name__,
            repr(algorithm),
            repr(model),
            config.chains,
            config.seed,
            config.burn_in,
            config.thin,
            shards,
        )
        + (("pipeline",) if config.pipeline else ())  # halves give other last bits; unpipelined keys stay as they were
        + (("secure_sums",) if config.secure_sums else ())
    )
    return hashlib.sha256(key.encode()).hexdigest()[:32]


def secured(algorithm: Algorithm, config: RunConfig) -> Algorithm:
    """The algorithm as the run runs it: with `secure_sums`, its secure-sums form (`Algorithm.for_secure_sums`, an
    ArgumentError naming `secure_sums` and the algorithm where it has none)."""
    return algorithm.for_secure_sums() if config.secure_sums else algorithm


def public_keys(facts: Sequence[ShardFacts], config: RunConfig) -> list[bytes] | None:
    """A secure-sums run's relay: every shard's public key from its `describe`, in shard order (None otherwise).
    The coordinator is trusted to pass them on unchanged (the semi-honest model: docs/privacy.md)."""
    if not config.secure_sums:
        return None
    keys = [f.public_key for f in facts]
    missing = [f.shard for f, k in zip(facts, keys) if k is None]
    if missing:
        raise RuntimeError(f"secure sums: shards {missing} gave no public key (their workers are not in secure mode)")
    return [k for k in keys if k is not None]


def shard_category_values(
    model: Any, X: np.ndarray, y: np.ndarray, columns: Any, levels: Any = None
) -> dict[str, list[Any]]:
    """A shard's distinct values of the columns its (formula) model reads as categories, and the levels it holds of
    each interaction grouping factor (`levels`: the text columns' labels, to name them)."""
    return dict(model.category_values(X, y, columns, levels))


def bind_model(pool: WorkerPool, model: Model) -> tuple[list[ShardFacts], Model, DataSpec]:
    """Fix the model's dimension from the shards' facts, hand the bound model to every worker, and check on the pooled
    data that the posterior is proper (flat priors). A model object that does not subclass `Model` is bound as a
    `ForeignModel` (`as_model`), so from here on every part of the model contract can be called directly.

    The bind brings back, in its own trip, what the checks read (each shard's Gram matrix; with group effects, its
    group labels) and, with group effects, the shards' other static facts a set-up asks for (local blocks, centring:
    a `SetupPool` answers them again without a trip)."""
    from ..tuning.shards import shard_centring, shard_gram, shard_group_labels, shard_local_blocks

    model = as_model(model)
    facts = pool.describe()
    spec = data_spec(facts, model)
    if hasattr(model, "category_values"):  # a formula's categories: each shard's values (no rows), joined
        from ..models.formula import join_categories

        parts = pool.map(shard_category_values, [(spec.columns, spec.levels)] * len(facts))
        spec = dataclasses.replace(spec, categories=tuple(join_categories(parts).items()) or None)
    bound = model.bind(spec)
    local = bound.has_local_params()
    fns = [shard_gram, shard_group_labels, shard_local_blocks, shard_centring] if local else [shard_gram]
    found = pool.bind_facts(bound, fns)
    if local:  # a local factor's groups each lie in one shard; a factor whose levels span shards becomes global
        factors = tuple(getattr(bound, "factors", ()))
        wide = spanning_factors(factors, found[1])
        if wide:  # bound again with those factors' effects in θ (the shards' labels decided it: metadata only)
            spec = dataclasses.replace(spec, spanning=tuple(wide.items()))
            bound = model.bind(spec)
            local = bound.has_local_params()
            fns = [shard_gram, shard_group_labels, shard_local_blocks, shard_centring] if local else [shard_gram]
            found = pool.bind_facts(bound, fns)
        if local:
            for f, ge in enumerate(factors):
                if ge.group not in wide:
                    check_groups_disjoint([lab[f] for lab in found[1]], ge.group)
    grams = [g for g in found[0] if g is not None]
    bound.check_proper(np.sum(grams, axis=0) if grams else None, n_rows=sum(f.n_rows for f in facts))
    return facts, bound, spec


def validate_run(model: Model, shards: ShardSet, algorithm: Algorithm, chains: int, seed: int = 0) -> tuple[Model, int]:
    """Bind `model` to in-memory `shards` and check `algorithm`'s shapes as `Coordinator.start` will, in this process
    and without workers: the bound model and its dimension. A shape error is an ArgumentError under ("algorithm",)."""
    from .pools import LocalPool  # pools import the hosts and transports, which a coordinator process may not need

    pool = LocalPool(
        [ShardSource(i, s, s.site, s.columns, s.index) for i, s in enumerate(shards)], model, algorithm, seed, chains
    )
    check_model_support(algorithm, as_model(model))
    _, bound, _ = bind_model(pool, model)
    privacy = getattr(algorithm, "privacy", None)
    if privacy is not None:  # the DP mode clips per-row gradients: the model must have them
        from ..privacy.clipping import check_clippable

        check_clippable(bound, privacy.clip_rule)
    d = int(bound.dim)
    try:
        algorithm.check_shapes(len(shards), d, chains)
    except ArgumentError:
        raise
    except ValueError as exc:
        raise ArgumentError(("algorithm",), str(exc)) from None
    return bound, d


class Coordinator:
    """Runs the rounds of one sampling run over a worker pool (in-process or Ray actors)."""

    def __init__(
        self,
        pool: WorkerPool,
        model: Model,
        algorithm: Algorithm,
        config: RunConfig,
        setup: SetupInfo,
        state: Any,
        noise: ChainNoise,
        balancer: StepBalancer,
        fingerprint: str,
        rounds_done: int = 0,
        draws_kept: int = 0,
        worker_model: Any = None,
        precond: Any = None,
        warmup: WarmupState | None = None,
        ledger: LedgerBook | None = None,
        account: DPAccount | None = None,
    ) -> None:
        self.pool, self.model, self.algorithm, self.config = pool, model, algorithm, config
        #: the release ledger: every message each shard's site sent, by kind (`privacy.ledger`)
        self.ledger = ledger if ledger is not None else LedgerBook(pool.num_shards)
        #: the DP mode: the accountant's plan and the accounting so far (`privacy.accountant`), else None
        self.dp = setup.privacy
        self.account: DPAccount | None = account
        if self.dp is not None and self.account is None:
            from ..privacy.accountant import DPAccount

            self.account = DPAccount.empty(pool.num_shards)
        self._rows = np.asarray(setup.shard_rows, dtype=float)
        self.stop: StopReason | None = None
        #: the warm-up's length: fixed (config.burn_in), or with config.warmup_auto its cap until a check ends it
        self.burn_in = config.burn_in
        self._warm_decided = not config.warmup_auto
        self._warm_open = False  # the warm-up was still going when the current chunk began
        self._warm_next = min(WARM_FIRST_CHECK, config.burn_in)
        self._warm_draws: list[np.ndarray] = []
        if warmup is not None:
            self._warm_decided = warmup.burn_in is not None
            self.burn_in = warmup.burn_in if warmup.burn_in is not None else config.burn_in
            self._warm_next = warmup.next_check
            self._warm_draws = list(warmup.draws)
        self.worker_model = worker_model  # what the workers run (e.g. the model in whitened coordinates), if not model
        self.precond = precond  # maps the algorithm's draws back to θ, if it samples in other coordinates
        self.setup, self.state, self.noise, self.balancer = setup, state, noise, balancer
        self.fingerprint = fingerprint
        self.t, self.draws_kept = rounds_done, draws_kept
        b = pool.num_shards
        self.round_time: list[float] = []
        #: per round: the coordinator's own compute, encode, send, hosted, wait, receive, slowest process's compute
        self.parts = _Rows(len(ROUND_PARTS) - 1)
        self.compute = np.zeros(b)
        self.idle = np.zeros(b)
        self.n_history: list[np.ndarray] = [balancer.n.copy()]
        self._local_order = np.asarray(setup.local_order, dtype=np.intp)  # indexes the local draws every round
        self._kept = _Kept()
        #: a pipelined run's two chain groups [a, b) (each round runs as two halves), else None
        self.halves: list[tuple[int, int]] | None = None
        #: whether rounds go as two chain groups and why; pipeline="auto" is pending until its probe rounds' compute
        #: decides (a resumed run probes again: from PIPELINE_AUTO_MIN_CHAINS chains the choice changes no draw)
        self.pipeline = setup.pipeline
        self._probe: list[float] = []  # pipeline="auto": the busiest process's compute in each probe round (s)
        if setup.pipeline is not None and setup.pipeline.on:  # as asked, or as pipeline="auto" decided
            self.halves = [(a, b) for a, b in setup.pipeline.groups]
        elif setup.pipeline is None and config.pipeline:
            refusal = _pipeline_refusal(algorithm, config, state, self.dp is not None)
            if refusal is not None:
                raise ArgumentError(("pipeline",), f"pipeline=True: {refusal}")
            self.halves = chain_groups(config.chains)

    # --- construction ---------------------------------------------------------------------------

    @classmethod
    def start(
        cls,
        pool: WorkerPool,
        model: Model,
        algorithm: Algorithm,
        config: RunConfig,
        slowdown: dict[int, float] | None = None,
    ) -> Coordinator:
        """Bind the model to the data, tune the algorithm, create the worker states. The set-up's calls go through
        a `SetupPool`, so the model `prepare` hands the workers goes with the call that creates their states (with
        their slowdown and calibration, where asked), and the static facts the bind brought back cost no trip again."""
        from .pools import SetupPool  # pools import the hosts and transports: loaded when a run starts, not before

        t0 = time.perf_counter()
        algorithm = secured(algorithm, config)
        check_model_support(algorithm, as_model(model))
        book = LedgerBook(pool.num_shards)
        staged = SetupPool(pool, book)
        facts, bound, spec = bind_model(staged, model)
        d = bound.dim
        choice = _chains_for(pool, bound, config, facts)
        config = dataclasses.replace(config, chains=choice.chains)
        algorithm.check_shapes(pool.num_shards, d, config.chains)
        noise = ChainNoise(config.seed, config.chains, role=0, dim=d)
        plan = algorithm.prepare(bound, staged, chains=config.chains, seed=config.seed, noise=noise)
        worker_model = plan.model if plan.model is not None else bound  # prepare handed it to the workers
        policy = config.balance if plan.balance else Balance.NEVER
        if plan.schedule is not None:
            policy = Balance.REPLAY
        balancer = StepBalancer(
            plan.local_steps,
            plan.n_avg,
            policy,
            config.rebalance_every,
            _group_sizes(pool),
            config.balance_ratio,
            plan.schedule,
        )
        tau = staged.init_states(
            plan.worker_payloads,
            slowdown=slowdown or None,
            calibrate=balancer.measuring,
            chains=config.chains if config.chains_auto else None,
            peers=public_keys(facts, config),
        )
        if balancer.measuring:
            assert tau is not None
            balancer.calibrate(tau)
        names, blocks = bound.param_names(), _param_blocks(bound)
        local_order: tuple[int, ...] = ()
        if bound.has_local_params():  # the draws report the shards' local parameters after θ, joined by name
            from ..tuning.shards import shard_local_blocks

            found = staged.facts(shard_local_blocks)  # the bound model's, as the worker model's (its layout)
            local, local_order = join_local_blocks(
                found if found is not None else pool.map(shard_local_blocks, [()] * pool.num_shards)
            )
            blocks = blocks + local
            names = list(names) + [n for b in local for n in b.names()]
        pipeline = _pipeline_for(algorithm, config, plan.coordinator_state, choice, plan.privacy)
        setup = SetupInfo(
            dim=len(names) if bound.has_local_params() else d,
            param_names=names,
            num_shards=pool.num_shards,
            shard_rows=[f.n_rows for f in facts],
            groups=pool.groups,
            placement=tuple(Placement.of(f) for f in facts),
            setup_time_s=time.perf_counter() - t0,
            plan=plan.report,
            n_avg=plan.n_avg,
            balance=balancer.measuring,
            transport=pool.transport,
            param_blocks=blocks,
            local_order=local_order,
            model=bound,
            data_spec=spec,
            chains=choice,
            privacy=plan.privacy,
            pipeline=pipeline,
        )
        return cls(
            pool,
            bound,
            algorithm,
            config,
            setup,
            plan.coordinator_state,
            noise,
            balancer,
            fingerprint(algorithm, model, config, facts),
            worker_model=worker_model,
            precond=plan.precond,
            ledger=book,
        )

    @classmethod
    def resume(
        cls,
        pool: WorkerPool,
        model: Model,
        algorithm: Algorithm,
        config: RunConfig,
        state: RunState,
        ledger: LedgerBook | None = None,
    ) -> Coordinator:
        """Bind the model to the data and continue exactly from `state` (no tuning: the plan is in the state). The
        release ledger goes on from `ledger` (a recovery in the same coordinator: what the sites sent before the loss,
        rolled-back rounds included), else from the state's."""
        if state.version != RunState.VERSION:
            raise ValueError(
                f"run state version {state.version} cannot be resumed by this raysampler "
                f"(it reads version {RunState.VERSION})"
            )
        t0 = time.perf_counter()
        from .pools import SetupPool

        algorithm = secured(algorithm, config)
        book = ledger if ledger is not None else LedgerBook(pool.num_shards, start=state.ledger)
        facts, bound, spec = bind_model(SetupPool(pool, book), model)
        fp = fingerprint(algorithm, model, config, facts)
        if fp != state.fingerprint:
            raise ValueError(
                "the run state belongs to another run (algorithm, model, chains, seed, burn-in, "
                "thinning or shards differ); it cannot be resumed here"
            )
        if state.worker_model is not None:
            pool.bind(state.worker_model)
        pool.restore(state.shards, public_keys(facts, config))  # a secure-sums run resumes with new pairwise keys
        noise = ChainNoise(config.seed, config.chains, role=0, dim=bound.dim)
        noise.restore(state.noise)
        policy = config.balance if state.setup.balance else Balance.NEVER
        balancer = StepBalancer(
            state.balancer.n,
            state.setup.n_avg,
            policy,
            config.rebalance_every,
            _group_sizes(pool),
            config.balance_ratio,
        )
        balancer.restore(state.balancer)
        setup = dataclasses.replace(
            state.setup,
            groups=pool.groups,
            placement=tuple(Placement.of(f) for f in facts),
            transport=pool.transport,
            setup_time_s=time.perf_counter() - t0,
            model=bound,
            data_spec=spec,
        )
        return cls(
            pool,
            bound,
            algorithm,
            config,
            setup,
            state.coordinator,
            noise,
            balancer,
            fp,
            state.rounds_done,
            state.draws_kept,
            state.worker_model,
            state.precond,
            state.warmup,
            book,
            state.privacy,
        )

    # --- rounds ---------------------------------------------------------------------------------

    @property
    def total_rounds(self) -> int:
        return self.burn_in + self.config.num_rounds

    def _located(self, failure: Failure) -> Failure:
        where = self.setup.placement[failure.shard] if failure.shard is not None else None
        return failure.at(round=self.t, site=where.site if where else None, node_id=where.node_id if where else None)

    def run(self, max_rounds: int, time_left_s: float | None = None, capture: bool = False) -> Chunk:
        """Run up to `max_rounds` rounds (or until the time budget); return the draws kept meanwhile.

        A failing worker or a non-finite reply or draw stops the run: the chunk carries the failure (kind, shard,
        site, node, round) and the draws kept before it. With `capture`, the chunk also carries the run's state at
        its end (only when no failure stopped it). A pipelined run (`RunConfig.pipeline`) runs each round as two
        halves, one per chain group, the workers stepping one group while this process updates the other.
        """
        cfg = self.config
        deadline = None if time_left_s is None else time.perf_counter() + time_left_s
        kept = _Kept()
        end = min(self.total_rounds, self.t + max_rounds)
        self._warm_open = not self._warm_decided
        try:
            if self.halves is not None:
                self._rounds_in_halves(end, deadline, kept)
            else:
                self._whole_rounds(end, deadline, kept)  # returns early where pipeline="auto" turns the halves on
                if self.halves is not None and (deadline is None or time.perf_counter() < deadline):
                    self._rounds_in_halves(end, deadline, kept)
            failure = None
        except _Stop as stop:
            failure = self._located(stop.failure)
        self.draws_kept += len(kept.theta)
        theta_arr = np.stack(kept.theta) if kept.theta else np.empty((0, cfg.chains, self.setup.dim))
        stats = {k: np.stack(v) for k, v in kept.stats.items()}
        state = None
        if capture and failure is None:
            try:
                state = self.capture()
            except WorkerFailed as exc:  # a process lost at the capture: the chunk fails, the run rolls back
                failure = self._located(exc.failure)
        done = self.t >= self.total_rounds or failure is not None or self.stop is not None
        return Chunk(theta_arr, stats, self.t, done, failure, state, self.burn_in, self.stop)

    def _end(self, end: int) -> int:
        """The round this chunk stops before: `end`, the run's end, and, when the warm-up ended by itself during
        the chunk, its last round, so that the caller learns burn_in before any kept draw and the convergence
        checks that follow fall at the same kept-draw counts whatever the chunks."""
        limit = min(end, self.total_rounds)
        if self._warm_open and self._warm_decided:
            limit = min(limit, max(self.burn_in, self.t))
        return limit

    def _info(self, t: int, half: int | None = None) -> RoundInfo:
        return RoundInfo(
            t, t < self.burn_in, self.burn_in, None if half is None or self.halves is None else self.halves[half]
        )

    def _replies(self, step: StepResult, info: RoundInfo) -> np.ndarray:
        """Check a round's (or half-round's) replies and take the coordinator's step on them: the draws it gives
        (in the algorithm's coordinates). Raises _Stop on a non-finite reply."""
        self.ledger.record_replies(
            step.replies, self.algorithm.release_names, self.algorithm.masked_fields, self.config.secure_sums
        )
        self.ledger.record_all("step_time", (), 8)  # each host's step times, one per shard
        bad = _nonfinite(step.replies)
        if bad is not None:
            raise _Stop(Failure(FailureKind.NON_FINITE, "produced a non-finite state (NaN or inf)", shard=bad))
        self.state, theta = self.algorithm.coordinator_step(self.state, step.replies, self.noise, info)
        return theta

    def _draws(self, theta: np.ndarray, replies: Any) -> np.ndarray:
        """A round's draws on θ's scale (with the shards' local parameters after it); _Stop if any is non-finite."""
        local = self.algorithm.local_draws(replies) if replies is not None else None
        if local is not None:  # shard-local parameters (group effects) follow the θ they were drawn given
            given = local[0] if self.precond is None else self.precond.to_theta(local[0])
            theta = np.concatenate([given, local[1][:, self._local_order]], axis=1)
        elif self.precond is not None:
            theta = self.precond.to_theta(theta)
        if not np.all(np.isfinite(theta)):
            raise _Stop(
                Failure(FailureKind.COORDINATOR_NON_FINITE, "the coordinator's draw became non-finite (NaN or inf)")
            )
        return theta

    def _close_round(
        self,
        info: RoundInfo,
        theta: np.ndarray,
        stats: dict[str, np.ndarray],
        steps: np.ndarray,
        work: np.ndarray,
        lag: int,
    ) -> None:
        """The bookkeeping of a finished round: compute, N_i balancing (its decisions apply `lag` rounds on), draws."""
        cfg = self.config
        self.compute += work
        before = self.balancer.n
        self.balancer.observe(info.t, work, steps, lag)
        if self.balancer.n is not before and not np.array_equal(self.balancer.n, before):
            self.n_history.append(self.balancer.n.copy())
        if not info.warmup and (info.t - self.burn_in + 1) % cfg.thin == 0:  # num_rounds // thin draws
            self._kept.theta.append(theta)
            for k, v in stats.items():
                self._kept.stats.setdefault(k, []).append(v)
        elif info.warmup and not self._warm_decided:
            self._warm_round(info.t, theta)

    def _warm_round(self, t: int, theta: np.ndarray) -> None:
        """A warm-up that ends by itself: keep round t's draw of θ (its global part) and, at a check
        (WARM_FIRST_CHECK rounds, then WARM_GROWTH times more each time), ask `diagnostics.warm` of the warm-up's
        draws so far (it reads their later half). Warm: the warm-up ends after the next round (round t + 1 is still
        warm-up: a pipelined run has sent its first half already), so the decision is a function of the rounds'
        draws alone, the same on every executor and in a pipelined run. A round count at the cap ends it anyway."""
        self._warm_draws.append(theta[:, : self.model.dim])
        done = t + 1
        if done >= self.config.burn_in:  # the cap: the warm-up ends here whatever the chains look like
            self._warm_decided, self._warm_draws = True, []
            return
        if done < self._warm_next:
            return
        if warm(np.stack(self._warm_draws).transpose(1, 0, 2), superchains_for(self.config.chains)):
            self.burn_in = min(done + 1, self.config.burn_in)
            self._warm_decided = True
            self._warm_draws = []
            return
        self._warm_next = min(int(np.ceil(done * WARM_GROWTH)), self.config.burn_in)

    def _timed(self, wall: float, coordinator: float, busy: np.ndarray, timings: Sequence[RoundTiming]) -> None:
        self.round_time.append(wall)
        self.idle += np.maximum(wall - busy, 0.0)
        parts = [sum(getattr(tm, f) for tm in timings) for f in ("encode_s", "send_s", "hosted_s", "wait_s")]
        receive = sum(tm.receive_s for tm in timings)
        self.parts.append((coordinator, *parts, receive, float(busy.max())))

    def _whole_rounds(self, end: int, deadline: float | None, kept: _Kept) -> None:
        alg, pool = self.algorithm, self.pool
        self._kept = kept
        while self.t < self._end(end) and self.stop is None:  # a warm-up that ends by itself moves the end nearer
            info = self._info(self.t)
            steps = self.balancer.n
            if self.dp is not None and self.account is not None and not self.dp.allows(self.account.steps + steps):
                self.stop = StopReason.PRIVACY_BUDGET  # round t's release would exceed a site's budget: not sent
                break
            t0 = time.perf_counter()
            message = alg.round_message(self.state, steps, info)
            t1 = time.perf_counter()
            pool.trips.phase = Phase.WARMUP if info.warmup else Phase.SAMPLING
            try:
                step = pool.step(message)
            except WorkerFailed as exc:  # a worker raised or died: stop, keep the draws, say where
                raise _Stop(exc.failure) from None
            t2 = time.perf_counter()
            theta = self._draws(self._replies(step, info), step.replies)
            if self.account is not None:
                clipped = alg.clipped_counts(step.replies)
                self.account = self.account.after(steps, clipped, self._rows * steps * self.config.chains)
            self._close_round(info, theta, alg.reply_stats(step.replies), steps, step.work_s, lag=1)
            t3 = time.perf_counter()
            self._timed(t3 - t0, (t1 - t0) + (t3 - t2), step.busy_s, [step.timing])
            self.t += 1
            if self.pipeline is not None and self.pipeline.pending and self._probed(float(np.max(step.busy_s))):
                return  # pipeline="auto" decided on: the rest of the chunk runs as halves
            if deadline is not None and time.perf_counter() >= deadline:
                break

    def _probed(self, compute_s: float) -> bool:
        """pipeline="auto": note a whole round's compute; after PIPELINE_PROBE_ROUNDS of them decide from their
        median against the slowest far link's set-up RTT (`decide_pipeline`). True when the halves are now on."""
        assert self.pipeline is not None
        self._probe.append(compute_s)
        rtt = self.setup.chains.rtt_s if self.setup.chains is not None else None
        if len(self._probe) < PIPELINE_PROBE_ROUNDS or rtt is None:
            return False
        self.pipeline = decide_pipeline(self.pipeline, rtt, float(np.median(self._probe)))
        if self.pipeline.on:
            self.halves = [(a, b) for a, b in self.pipeline.groups]
        return self.pipeline.on

    def _rounds_in_halves(self, end: int, deadline: float | None, kept: _Kept) -> None:
        """Pipelined rounds: half A of round t (the first chain group) and half B (the second) go to the workers one
        after the other; while the workers step B(t) this process takes A(t)'s coordinator step and sends A(t + 1),
        so the workers always have the next half to step. Each group's sequence of messages and steps is the one it
        would have alone. N_i for round t + 1 is fixed when A(t + 1) is sent, before round t is observed: balancing
        decisions apply two rounds on. No half is in flight when this returns (or fails)."""
        alg, pool = self.algorithm, self.pool
        self._kept = kept
        outstanding = 0
        coordinator = 0.0

        def start(t: int, half: int, steps: np.ndarray) -> None:
            nonlocal outstanding, coordinator
            t0 = time.perf_counter()
            info = self._info(t, half)
            message = alg.round_message(self.state, steps, info)
            coordinator += time.perf_counter() - t0
            pool.trips.phase = Phase.WARMUP if info.warmup else Phase.SAMPLING
            pool.send(message)
            outstanding += 1

        def finish(t: int, half: int) -> tuple[StepResult, np.ndarray]:
            nonlocal outstanding, coordinator
            outstanding -= 1
            step = pool.collect()
            t0 = time.perf_counter()
            theta = self._replies(step, self._info(t, half))
            coordinator += time.perf_counter() - t0
            return step, theta

        t = self.t
        if t >= end:
            return
        steps = {t: self.balancer.steps_for(t)}
        mark = time.perf_counter()
        try:
            start(t, 0, steps[t])
            while True:
                start(t, 1, steps[t])
                step_a, _ = finish(t, 0)
                more = t + 1 < self._end(end) and (deadline is None or time.perf_counter() < deadline)
                if more:
                    steps[t + 1] = self.balancer.steps_for(t + 1)
                    start(t + 1, 0, steps[t + 1])
                step_b, theta = finish(t, 1)
                t0 = time.perf_counter()
                stats = _joined(alg.reply_stats(step_a.replies), alg.reply_stats(step_b.replies))
                info = self._info(t)
                self._close_round(
                    info, self._draws(theta, None), stats, steps.pop(t), step_a.work_s + step_b.work_s, lag=2
                )
                now = time.perf_counter()
                coordinator += now - t0
                self._timed(now - mark, coordinator, step_a.busy_s + step_b.busy_s, [step_a.timing, step_b.timing])
                mark, coordinator = now, 0.0
                self.t = t = t + 1
                if not more:
                    return
        except WorkerFailed as exc:
            raise _Stop(exc.failure) from None
        finally:
            for _ in range(outstanding):  # a half still in flight after a failure: read its replies, keep nothing
                try:
                    pool.collect()
                except WorkerFailed:
                    pass

    def capture(self) -> RunState:
        """The whole run state now (between rounds)."""
        with self.pool.trips.during(Phase.CAPTURE):
            shards = tuple(self.pool.capture())
        mode = "sealed" if self.config.keyed_noise else "plain"
        for s in shards:
            self.ledger.record(s.shard, "checkpoint:worker_state", (), size_of(s), mode)
        return RunState(
            RunState.VERSION,
            self.fingerprint,
            self.t,
            self.draws_kept,
            self.state,
            self.noise.capture(),
            shards,
            self.balancer.capture(),
            self.setup,
            self.worker_model,
            self.precond,
            warmup=self._warmup_state(),
            ledger=self.ledger.snapshot(self._sites()),
            privacy=self.account,
        )

    def _sites(self) -> list[str | None]:
        return [p.site for p in self.setup.placement]

    def _warmup_state(self) -> WarmupState | None:
        if not self.config.warmup_auto:
            return None
        draws = np.stack(self._warm_draws) if self._warm_draws else np.empty((0, self.config.chains, self.model.dim))
        return WarmupState(self.burn_in if self._warm_decided else None, self._warm_next, draws)

    def stats(self) -> RunStats:
        """Per-round wall time and per-worker compute/idle time, N_i and its schedule, τ_i, and the tuned ρ_i, γ_i."""
        wall = float(np.sum(self.round_time)) if self.round_time else 0.0
        plan = self.setup.plan
        return RunStats(
            rounds=self.t,
            round_time=np.asarray(self.round_time),
            sampling_time_s=wall,
            worker_compute_s=self.compute.copy(),
            worker_idle_s=self.idle.copy(),
            idle_fraction=self.idle / wall if wall > 0 else np.zeros_like(self.idle),
            N=self.balancer.n.copy(),
            N_history=np.stack(self.n_history),
            N_schedule=tuple(self.balancer.schedule),
            balanced=bool(self.balancer.active and len(self.balancer.schedule) > 1),
            tau=self.balancer.tau.copy(),
            placement=tuple(self.setup.placement),
            rho=plan.rho,
            gamma=plan.gamma,
            M=plan.M,
            round_parts=self._round_parts(),
            trips=self.pool.trips.snapshot(),
            links=self.pool.links(),
            burn_in=self.burn_in if self._warm_decided else None,
            ledger=self.ledger.snapshot(self._sites()),
            privacy=self._privacy_stats(),
            pipeline=self.pipeline,
        )

    def _privacy_stats(self) -> PrivacyStats | None:
        """The DP mode's `PrivacyStats` now (ε(δ) spent per site, clip rates), else None."""
        if self.dp is None or self.account is None:
            return None
        from ..privacy.accountant import PrivacyStats

        return PrivacyStats.of(self.dp, self.account)

    def _round_parts(self) -> np.ndarray:
        """(rounds, len(ROUND_PARTS)): the recorded parts and the overhead, round time minus the slowest process's."""
        parts = self.parts.array()
        overhead = np.asarray(self.round_time, dtype=float) - parts[:, -1]  # a row per round, as round_time
        return np.column_stack([parts, overhead])

    def close(self) -> None:
        self.pool.close()


def _chains_for(pool: WorkerPool, model: Model, config: RunConfig, facts: Sequence[ShardFacts]) -> ChainsChoice:
    """The run's chain count: as configured, or with `chains_auto` `choose_chains`' pick from the pool's links
    (measured when it described its shards) and each process's work."""
    if not config.chains_auto:
        return ChainsChoice(config.chains, False, "as asked", far_rtt(pool.links()))
    per_element = float(as_model(model).work_per_element())
    by_shard = {f.shard: f for f in facts}
    elements = [sum(float(np.prod(by_shard[i].x_shape)) * per_element for i in g) for g in pool.groups]
    rows = [sum(int(by_shard[i].n_rows) for i in g) for g in pool.groups]
    return choose_chains(config.chains, pool.links(), elements, rows)


def _pipeline_refusal(algorithm: Algorithm, config: RunConfig, state: Any, dp: bool) -> str | None:
    """Why this run cannot run its rounds as two chain groups, or None when it can."""
    if dp:
        return "not available with privacy= (the DP mode)"
    if config.chains < 2 or not algorithm.splits_chains(state):
        return (
            f"needs two chains or more and an algorithm whose chains step independently as one batch "
            f"({algorithm.name!r} with these settings does not: use 'dglmc' with local_kernel 'laplace_mh' or 'lmc', "
            "and no group effects)"
        )
    return None


def _pipeline_for(
    algorithm: Algorithm, config: RunConfig, state: Any, chains: ChainsChoice, privacy: Any
) -> PipelineChoice:
    """Whether the run's rounds go as two chain groups in flight: as asked (True raises here where the run cannot
    split its chains), or with `pipeline_auto` `choose_pipeline`'s set-up choice from the measured links (pending
    until the first rounds' compute is measured)."""
    refusal = _pipeline_refusal(algorithm, config, state, privacy is not None)
    if config.pipeline and not config.pipeline_auto and refusal is not None:
        raise ArgumentError(("pipeline",), f"pipeline=True: {refusal}")
    return choose_pipeline(None if config.pipeline_auto else config.pipeline, config.chains, chains.rtt_s, refusal)


def _group_sizes(pool: WorkerPool) -> np.ndarray:
    sizes = np.empty(pool.num_shards)
    for g in pool.groups:
        sizes[g] = len(g)
    return sizes


def _param_blocks(model: Model) -> tuple[ParamBlock, ...]:
    return tuple(model.param_blocks())


class _Stop(Exception):
    """A failure that ends the chunk (its round filled in by `Coordinator.run`)."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.message)
        self.failure = failure


class _Rows:
    """A growing (n, width) float array, one row appended per round (rows in a preallocated block, not tuples)."""

    def __init__(self, width: int) -> None:
        self.data = np.empty((256, width))
        self.n = 0

    def append(self, row: Sequence[float]) -> None:
        if self.n == len(self.data):
            self.data = np.concatenate([self.data, np.empty_like(self.data)])
        self.data[self.n] = row
        self.n += 1

    def array(self) -> np.ndarray:
        return self.data[: self.n].copy()


class _Kept:
    """The draws and per-chain statistics a chunk keeps."""

    def __init__(self) -> None:
        self.theta: list[np.ndarray] = []
        self.stats: dict[str, list[np.ndarray]] = {}


def _joined(first: dict[str, np.ndarray], second: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A round's per-chain statistics from its two halves' (chain groups in order)."""
    return {k: np.concatenate([first[k], second[k]]) for k in first}


def _nonfinite(replies: Any) -> int | None:
    """The first shard whose reply holds a non-finite number (replies one per shard, or one block), else None."""
    if not isinstance(replies, list):
        return nonfinite_shard(replies)
    return next((i for i, r in enumerate(replies) if not _finite(r)), None)


def _finite(obj: Any) -> bool:
    """True if every array inside a reply (nested tuples/lists) is finite. A loop, not a generator: it runs on every
    field of every shard's reply each round."""
    if obj is None:
        return True
    if isinstance(obj, np.ndarray):
        return obj.dtype.kind not in "fc" or bool(np.isfinite(obj).all())
    if isinstance(obj, (tuple, list)):
        for o in obj:  # noqa: SIM110  (a loop: no generator per field, per reply, per round)
            if not _finite(o):
                return False
        return True
    if isinstance(obj, float):
        return bool(np.isfinite(obj))
    return True
