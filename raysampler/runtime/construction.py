"""How a `Coordinator` is built complete: freshly tuned (`tuned`: bind the model to the shards, choose the chains,
tune the algorithm, create the worker states) or from a captured `RunState` (`resumed`: bind, check it is this
run's, restore the workers, the streams and the balancer). Each returns the coordinator's parts (`Built`), which
`Coordinator.start` and `Coordinator.resume` pass to its constructor."""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from ..algorithms.base import Algorithm, check_model_support
from ..enums import Balance
from ..models.contract import Model, ParamBlock, join_local_blocks
from ..models.foreign import as_model
from ..privacy.ledger import LedgerBook
from ..streams import ChainNoise
from .balancer import StepBalancer
from .binding import bind_model, fingerprint, public_keys, secured
from .contracts import Placement, RunConfig, RunState, SetupInfo, StateInit, WarmupState, WorkerPool
from .setup_choices import _chains_for, _pipeline_for
from .setup_pool import SetupPool

if TYPE_CHECKING:  # the privacy extra (dp-accounting) loads only with the DP mode
    from ..privacy.accountant import DPAccount


class Built(NamedTuple):
    """A coordinator's parts, as its constructor takes them (by name)."""

    pool: WorkerPool
    model: Model
    algorithm: Algorithm
    config: RunConfig
    setup: SetupInfo
    state: Any
    noise: ChainNoise
    balancer: StepBalancer
    fingerprint: str
    rounds_done: int = 0
    draws_kept: int = 0
    worker_model: Any = None
    precond: Any = None
    warmup: WarmupState | None = None
    ledger: LedgerBook | None = None
    account: DPAccount | None = None


def tuned(
    pool: WorkerPool,
    model: Model,
    algorithm: Algorithm,
    config: RunConfig,
    slowdown: dict[int, float] | None = None,
) -> Built:
    """Bind the model to the data, tune the algorithm, create the worker states. The set-up's calls go through a
    `SetupPool`, so the model `prepare` hands the workers goes with the call that creates their states (with their
    slowdown and calibration, where asked), and the static facts the bind brought back cost no trip again."""
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
    init = StateInit(
        slowdown=slowdown or None,
        calibrate=balancer.measuring,
        chains=config.chains if config.chains_auto else None,
        peers=public_keys(facts, config),
    )
    tau = staged.init_states(plan.worker_payloads, init)
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
    return Built(
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


def resumed(
    pool: WorkerPool,
    model: Model,
    algorithm: Algorithm,
    config: RunConfig,
    state: RunState,
    ledger: LedgerBook | None = None,
) -> Built:
    """Bind the model to the data and continue exactly from `state` (no tuning: the plan is in the state). The
    release ledger goes on from `ledger` (a recovery in the same coordinator: what the sites sent before the loss,
    rolled-back rounds included), else from the state's."""
    if state.version != RunState.VERSION:
        raise ValueError(
            f"run state version {state.version} cannot be resumed by this raysampler "
            f"(it reads version {RunState.VERSION})"
        )
    t0 = time.perf_counter()
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
    return Built(
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


def _group_sizes(pool: WorkerPool) -> np.ndarray:
    sizes = np.empty(pool.num_shards)
    for g in pool.groups:
        sizes[g] = len(g)
    return sizes


def _param_blocks(model: Model) -> tuple[ParamBlock, ...]:
    return tuple(model.param_blocks())
