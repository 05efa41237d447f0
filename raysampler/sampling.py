"""`rs.sample`: validate the request, start a coordinator (in-process or on Ray), collect draws as they come.

A `Run` drives its coordinator through a `CoordinatorHandle` in chunks of rounds. With `num_rounds="auto"` it
checks the draws' minimum bulk ESS and maximum R-hat as it goes and stops once both targets hold. The checks fall
at fixed draw counts (100 kept draws per chain, then 1.5 times more each time), so where a seeded run stops does not
depend on how fast the machine is; each check reads a bounded number of draws per chain (`diagnostics.check_draws`), so
its cost is bounded.
"""

from __future__ import annotations

import dataclasses
import os
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any, Literal

import numpy as np

from .algorithms import Algorithm, get_algorithm
from .algorithms.base import check_model_support
from .checkpoints import Manifest, RunDirectory, as_run_directory
from .diagnostics import FINAL_DRAWS, Diagnostics, RunWarning, WarningKind, check_draws, diagnose, superchains_for
from .enums import Balance, Executor, StopReason, TransportKind
from .errors import ArgumentError, Failure, FailureKind, RunCancelled, SamplingError, WorkerFailed, failure_of
from .events import EventKind, RunEvent
from .models.contract import as_model
from .options import DEFAULT_MAX_RHAT, DEFAULT_TARGET_ESS, ExecutionOptions, RunOptions
from .privacy.dp import with_privacy
from .result import Result, RunOutcome, Timings
from .runtime import executors
from .runtime.contracts import Chunk, RunConfig, RunState, RunStats, SetupInfo
from .runtime.host import ShardSource
from .shards import ShardSet, as_shard_set, split_site_groups

#: Kept draws per chain at the first convergence check (num_rounds="auto"); each later one is CHECK_GROWTH times on.
FIRST_CHECK_DRAWS = 100
CHECK_GROWTH = 1.5
#: Failures a run recovers from by rolling back to its last checkpoint: a process that died, not a worker's own
#: error or a diverging chain (those would happen again exactly).
RECOVERABLE = (FailureKind.WORKER_LOST, FailureKind.COORDINATOR_LOST)


class Run:
    """A started run: iterate `chunks()` for draws as they are produced, then `result()`; `close()` frees workers.

    A run is a model, its shards, an `Algorithm` carrying its own parameters (`get_algorithm(name, **params)`),
    `RunOptions` (how long it samples and what it keeps) and `ExecutionOptions` (where and how it executes); each
    record checks its values once, when it is made. `rs.sample` builds these from its keywords.

    `resume_from` continues a captured `RunState` (same model, data, algorithm and options) instead of tuning anew:
    the draws that follow are exactly those the original run would have made.

    On Ray the run captures its state at the end of every chunk (in memory; `chunks(capture=True)` hands it to the
    caller too). If a worker process, its node or the coordinator is lost, the run waits for the workers to come
    back where their shards live (Ray restarts them; at most RAYSAMPLER_SITE_WAIT_S), rolls every state back to
    that capture and goes on: the draws are exactly those of an uninterrupted run. `execution.on_event` hears of
    each loss and resume (`RunEvent`); `restarts` counts them (at most RAYSAMPLER_MAX_RESTARTS). These RAYSAMPLER_*
    settings are read once, here (`EngineSettings`; `execution.engine` gives them instead), and travel to every
    process in `RunConfig`.

    With `execution.checkpoint_dir` every chunk's draws and the state at its end are written there durably (draws first,
    then the checkpoint; `raysampler.checkpoints.RunDirectory`) before the chunk is handed on, so a run stopped in
    any way — its own process killed included — continues from there (`resume_from`, or `rs.resume`).
    """

    def __init__(
        self,
        model: Any,
        shards: Any,
        algorithm: Algorithm,
        options: RunOptions,
        execution: ExecutionOptions,
        *,
        resume_from: RunState | None = None,
    ) -> None:
        as_model(model)  # a TypeError now, before any process starts, if it cannot be a model
        for value, kind, name in (
            (algorithm, Algorithm, "algorithm"),
            (options, RunOptions, "options"),
            (execution, ExecutionOptions, "execution"),
        ):
            if not isinstance(value, kind):
                raise TypeError(f"{name} must be a {kind.__name__}, got {type(value).__name__}")
        if resume_from is not None and not isinstance(resume_from, RunState):
            raise TypeError(
                f"resume_from must be a RunState (from Run.capture() or a checkpoint), got {type(resume_from).__name__}"
            )
        check_model_support(algorithm, as_model(model))  # group effects: before any process starts
        if options.secure_sums:  # before any process starts: the algorithm and the extra
            algorithm.for_secure_sums()
            from .extras import require

            require("privacy", "secure_sums=True")
        shard_set = as_shard_set(shards, tables=getattr(model, "reads_tables", False))
        self.options, self.execution, self.algorithm = options, execution, algorithm
        opts, exe = options, execution
        # The engine settings are read here, once, and travel in the config: no actor reads its environment.
        from .settings import EngineSettings

        self.engine = EngineSettings.from_env() if exe.engine is None else exe.engine.engine()
        if exe.executor == Executor.RAY:
            shard_set = _split_at_sites(model, shard_set, self.engine)
        self.shards = shard_set
        self.config = RunConfig(
            opts.chain_count,
            opts.sampling_rounds,
            int(opts.burn_in or 0),
            opts.thin,
            opts.seed,
            exe.balance_policy,
            engine=self.engine,
            pipeline=opts.pipeline is True,
            pipeline_auto=opts.pipeline == "auto",
            secure_sums=opts.secure_sums,
            keyed_noise=keyed_streams(opts, algorithm),
            warmup_auto=opts.warmup_auto,
            chains_auto=opts.chains_auto,
        )
        if resume_from is not None and opts.chains_auto and resume_from.setup.chains is not None:
            self.config = dataclasses.replace(self.config, chains=resume_from.setup.chains.chains)  # as it chose
        self._start = time.perf_counter()
        sources = [ShardSource(i, s, s.site, s.columns, s.index) for i, s in enumerate(shard_set)]
        self._launch = (exe.executor, sources, model, algorithm, self.config, exe.max_actors, exe.transport)
        try:
            self._handle = executors.start(*self._launch, cancel=exe.cancel)
        except WorkerFailed as exc:
            raise SamplingError(failure_of(exc) or _unknown(exc), None) from None
        try:
            if exe.cancel is not None and exe.cancel.is_set():  # between the start and the set-up
                raise RunCancelled("the run was cancelled while setting up")
            if resume_from is None:
                slowdown = dict(exe._slowdown) if exe._slowdown is not None else None
                self.setup: SetupInfo = self._handle.setup(slowdown)
            else:
                self.setup = self._handle.resume(resume_from)
        except WorkerFailed as exc:
            self._handle.close()
            raise SamplingError(failure_of(exc) or _unknown(exc), None) from None
        except BaseException:
            self._handle.close()
            raise
        if self.setup.chains is not None and self.setup.chains.chains != self.config.chains:  # chains="auto" chose
            self.config = dataclasses.replace(self.config, chains=self.setup.chains.chains)
            self._launch = (*self._launch[:4], self.config, *self._launch[5:])
        #: the warm-up's length as it stands (with a warm-up that ends by itself: its cap until it has ended)
        self.burn_in = self.config.burn_in
        if resume_from is not None and resume_from.warmup is not None and resume_from.warmup.burn_in is not None:
            self.burn_in = resume_from.warmup.burn_in
        self.rounds_done = resume_from.rounds_done if resume_from is not None else 0
        self.draws_before = resume_from.draws_kept if resume_from is not None else 0
        self.draws_kept = self.draws_before  # draws per chain kept so far, including those before a resume
        self.directory = (
            None
            if exe.checkpoint_dir is None
            else RunDirectory(exe.checkpoint_dir, exe.checkpoint_epoch, exe.checkpoint_fence)
        )
        self.restarts = 0
        self.checkpoint_write_s = 0.0  # time spent writing draws and checkpoints durably (checkpoint_dir)
        self.events: list[RunEvent] = []
        self.recoverable = exe.executor == Executor.RAY
        try:
            self.checkpoint: RunState | None = resume_from or (self._handle.capture() if self.recoverable else None)
        except BaseException:
            self._handle.close()
            raise
        self.failure: Failure | None = None
        self.stop_reason: StopReason | None = None
        self.diagnostics: Diagnostics | None = None
        self.keep_draws = exe.keep_draws or opts.auto  # False: chunks() only yields draws (the caller stores them)
        self._draws: list[np.ndarray] = []
        self._stats: dict[str, list[np.ndarray]] = {}
        self._next_check = FIRST_CHECK_DRAWS  # kept draws per chain at the next convergence check
        self._superchains = superchains_for(self.config.chains)  # > 1: the many-chains rule (nested R-hat)
        while self._next_check < self.draws_kept:  # a resumed run checks where the uninterrupted one would
            self._next_check = int(np.ceil(self._next_check * CHECK_GROWTH))
        if opts.auto and self.draws_before and self.directory is not None:  # convergence is judged on every draw
            self._draws.append(self.directory.read(0, self.draws_before))
            for k, v in self.directory.read_stats(self.draws_before).items():
                self._stats[k] = [v]

    @property
    def executor(self) -> Executor:
        return self.execution.executor

    @property
    def algorithm_name(self) -> str:
        return self.algorithm.name

    @property
    def time_budget_s(self) -> float | None:
        return self.options.time_budget_s

    @property
    def total_rounds(self) -> int:
        return self.burn_in + self.config.num_rounds

    @property
    def stopped_by_time_budget(self) -> bool:
        return self.stop_reason == StopReason.TIME_BUDGET

    def chunks(self, target_chunk_s: float = 0.5, capture: bool = False) -> Iterator[Chunk]:
        """Run to the end (or convergence, the time budget or a failure), yielding each chunk of draws as it
        arrives; with `capture` every chunk carries the run's state at its end (for checkpoints). Across a far link
        a chunk lasts at least CHUNK_RTTS round trips, so that its capture (one more) stays a small part of them."""
        from .runtime.links import CHUNK_RTTS, FAR_RTT_S

        rtt = self.setup.chains.rtt_s if self.setup.chains is not None else None
        if rtt is not None and rtt >= FAR_RTT_S:
            target_chunk_s = max(target_chunk_s, CHUNK_RTTS * rtt)
        n = 20
        while self.rounds_done < self.total_rounds and self.failure is None and self.stop_reason is None:
            left = None
            if self.time_budget_s is not None:
                left = self.time_budget_s - (time.perf_counter() - self._start)
                if left <= 0:
                    self.stop_reason = StopReason.TIME_BUDGET
                    break
            t0 = time.perf_counter()
            if self.options.auto:  # end the chunk at the next check: checks at fixed draw counts
                n = max(1, min(n, self._check_round() - self.rounds_done))
            try:
                chunk = self._handle.run(n, left, capture or self.recoverable or self.directory is not None)
            except WorkerFailed as exc:  # the coordinator itself was lost
                chunk = Chunk(
                    np.empty((0, self.config.chains, self.setup.dim)),
                    {},
                    self.rounds_done,
                    True,
                    failure_of(exc) or _unknown(exc),
                )
            if chunk.failure is not None and self._recover(chunk.failure):
                continue  # rolled back to the last checkpoint; its draws are all kept
            if chunk.failure is None and self.directory is not None:  # draws, then the checkpoint: the commit
                t_write = time.perf_counter()
                if len(chunk.theta):
                    self.directory.append(self.draws_kept, chunk.theta, chunk.stats)
                assert chunk.state is not None
                self.directory.save_checkpoint(chunk.state)
                self.checkpoint_write_s += time.perf_counter() - t_write
            if chunk.state is not None:
                self.checkpoint = chunk.state
            if chunk.burn_in is not None:
                self.burn_in = chunk.burn_in
            self.draws_kept += len(chunk.theta)
            ran = chunk.rounds_done - self.rounds_done
            self.rounds_done = chunk.rounds_done
            if self.keep_draws:
                self._draws.append(chunk.theta)
                for k, v in chunk.stats.items():
                    self._stats.setdefault(k, []).append(v)
            self.failure = chunk.failure
            yield chunk
            if chunk.failure is not None:
                self.stop_reason = StopReason.FAILURE
                break
            if chunk.done:
                self.stop_reason = chunk.stop or (StopReason.MAX_ROUNDS if self.options.auto else StopReason.COMPLETED)
                break
            if left is not None and ran < n:
                self.stop_reason = StopReason.TIME_BUDGET
                break
            if self.options.auto and self.draws_kept >= self._next_check and self._converged():
                self.stop_reason = StopReason.CONVERGED
                break
            per_round = (time.perf_counter() - t0) / max(ran, 1)
            n = int(np.clip(target_chunk_s / max(per_round, 1e-7), 10, 100_000))

    def _recover(self, failure: Failure) -> bool:
        """Roll back to the last checkpoint after a lost process (see the class doc); False if the failure is not
        one to recover from, there is no checkpoint, or the restart budget is spent. A recovery that itself fails
        (the site did not come back in time) becomes the run's failure."""
        if failure.kind not in RECOVERABLE or self.checkpoint is None or self.restarts >= self.engine.max_restarts:
            return False
        state = self.checkpoint
        self.restarts += 1
        self._event(
            RunEvent(EventKind.WORKER_LOST, failure.round if failure.round is not None else self.rounds_done, failure)
        )
        try:
            if failure.kind == FailureKind.COORDINATOR_LOST:
                self._handle.close()
                self._handle = executors.start(*self._launch)
                self.setup = self._handle.resume(state)
            else:
                self.setup = self._handle.recover(state)
        except WorkerFailed as exc:
            self.failure = (failure_of(exc) or _unknown(exc)).at(round=state.rounds_done)
            self.stop_reason = StopReason.FAILURE
            return True
        self.rounds_done, self.draws_kept = state.rounds_done, state.draws_kept
        self._event(RunEvent(EventKind.RESUMED, state.rounds_done))
        return True

    def _event(self, event: RunEvent) -> None:
        self.events.append(event)
        if self.execution.on_event is not None:
            self.execution.on_event(event)

    def _check_round(self) -> int:
        """The round after which the next convergence check's draw count is reached."""
        return self.burn_in + self._next_check * self.config.thin

    def _converged(self) -> bool:
        """Check min bulk ESS and max R-hat (on at most `check_draws` draws per chain) and schedule the next check;
        the R-hat is nested R-hat over superchains from `diagnostics.MANY_CHAINS` chains on, else split R-hat."""
        while self._next_check <= self.draws_kept:
            self._next_check = int(np.ceil(self._next_check * CHECK_GROWTH))
        draws = self._draws_array().transpose(1, 0, 2)
        self.diagnostics = diagnose(draws, check_draws(self.config.chains, self.options.target_ess), self._superchains)
        if self.diagnostics is None or not self.diagnostics.converged(self.options.target_ess, self.options.max_rhat):
            return False
        # the thinned check passed: confirm on the draws the final verdict reads, so a run stopped as converged is
        # never then reported as not converged (thinning can move R-hat across the threshold either way)
        if draws.shape[1] > check_draws(self.config.chains, self.options.target_ess):
            self.diagnostics = diagnose(draws, FINAL_DRAWS, self._superchains)
        return self.diagnostics is not None and self.diagnostics.converged(
            self.options.target_ess, self.options.max_rhat
        )

    def _draws_array(self) -> np.ndarray:
        d = self.setup.dim
        return np.concatenate(self._draws) if self._draws else np.empty((0, self.config.chains, d))

    def capture(self) -> RunState:
        """The run's whole state now (between chunks): resume it with `Run(..., resume_from=state)`."""
        return self._handle.capture()

    def result(self) -> Result:
        """The draws collected so far as a Result (chains, draws, d), with the run's typed records: `setup`,
        `run_stats` and `outcome` (timings, stop reason, warnings, diagnostics)."""
        theta = self._draws_array()
        sample_stats = {k: np.concatenate(v).T for k, v in self._stats.items()}
        run_stats = self.stats()
        timings = Timings(
            setup_s=self.setup.setup_time_s,
            sampling_s=float(run_stats.sampling_time_s),
            wall_s=time.perf_counter() - self._start,
            checkpoint_write_s=self.checkpoint_write_s if self.directory is not None else None,
        )
        draws = np.ascontiguousarray(theta.transpose(1, 0, 2))
        diag = diagnose(draws, FINAL_DRAWS, self._superchains) if draws.shape[1] >= 4 else None
        if diag is not None:
            self.diagnostics = diag
        outcome = RunOutcome(
            options=self.options,
            config=self.config,
            timings=timings,
            rounds_done=self.rounds_done,
            stop_reason=self.stop_reason,
            failure=self.failure,
            warnings=tuple(self.warnings()),
            diagnostics=diag,
            restarts=self.restarts,
            events=tuple(self.events),
            checkpoint_round=self.checkpoint.rounds_done if self.checkpoint is not None else None,
        )
        return Result(
            draws,
            list(self.setup.param_names),
            sample_stats,
            algorithm=self.algorithm_name,
            executor=self.executor.value,
            layout=tuple(self.setup.param_blocks),
            setup=self.setup,
            run_stats=run_stats,
            outcome=outcome,
            model=self.setup.model,
            data=self.shards,
            seed=self.config.seed,
        )

    def warnings(self) -> list[RunWarning]:
        """What the user should hear about this run (each with its `WarningKind`): an early stop, balancing from
        timings, poor convergence."""
        out: list[RunWarning] = []
        if self.stop_reason == StopReason.TIME_BUDGET:
            out.append(
                RunWarning(
                    WarningKind.TIME_BUDGET,
                    f"time_budget_s={self.time_budget_s} reached after {self.rounds_done} of {self.total_rounds} "
                    f"rounds ({self.draws_kept} draws per chain kept)",
                )
            )
        if self.stop_reason == StopReason.MAX_ROUNDS:
            out.append(
                RunWarning(
                    WarningKind.MAX_ROUNDS,
                    f"num_rounds='auto' stopped at max_rounds={self.config.num_rounds} before reaching "
                    f"target_ess={self.options.target_ess:g} and R-hat < {self.options.max_rhat:g}",
                )
            )
        if self.stop_reason == StopReason.PRIVACY_BUDGET and self.draws_kept == 0:
            out.append(
                RunWarning(
                    WarningKind.PRIVACY_BUDGET,
                    f"the privacy budget allowed {self.rounds_done} rounds, no more than the burn-in "
                    f"({self.burn_in}): no draws were kept; lower burn_in, raise epsilon, or lower clip or gamma",
                )
            )
        stats = self.stats()
        if stats.balanced:
            out.append(
                RunWarning(
                    WarningKind.BALANCE,
                    f"worker speeds differed by more than {self.config.balance_ratio}x, so local step counts N_i "
                    f"were balanced from measured timings (schedule {list(stats.N_schedule)}); pass "
                    "n_local=result.run_stats.N_schedule to replay these draws exactly",
                )
            )
        if self.diagnostics is not None and self.stop_reason != StopReason.FAILURE:
            out += self.diagnostics.warnings()
        return out

    def stats(self) -> RunStats:
        """The coordinator's statistics so far: per-round wall time, per-worker compute/idle, N_i, τ_i, ρ_i, γ_i."""
        return self._handle.stats()

    def close(self) -> None:
        self._handle.close()

    def __enter__(self) -> Run:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def keyed_streams(options: RunOptions, algorithm: Algorithm) -> bool:
    """Whether the run's worker streams are keyed by their sites' secrets (`RunOptions.keyed_noise`): as asked, or
    by default where it protects something, secure sums or an algorithm whose releases are accounted (the DP mode);
    refused off where either is on."""
    private = algorithm.private_noise
    if options.keyed_noise is False and private:
        raise ArgumentError(
            ("keyed_noise",),
            "keyed_noise=False in the DP mode: whoever knows the seed could subtract the Langevin noise from the "
            "released draws, and the privacy guarantee would not hold",
        )
    if options.keyed_noise is not None:
        return options.keyed_noise
    return options.secure_sums or private


def sample(
    model: Any,
    shards: Any,
    algorithm: str = "dglmc",
    *,
    chains: int | str = "auto",
    num_rounds: int | str = 1000,
    burn_in: int | str | None = None,
    thin: int = 1,
    seed: int = 0,
    executor: Executor | str = Executor.RAY,
    time_budget_s: float | None = None,
    progress: bool | None = None,
    balance: Balance | str | bool = Balance.AUTO,
    max_actors: int | None = None,
    transport: TransportKind | str = TransportKind.SOCKET,
    target_ess: float = DEFAULT_TARGET_ESS,
    max_rhat: float = DEFAULT_MAX_RHAT,
    max_rounds: int | None = None,
    pipeline: bool | Literal["auto"] = "auto",
    secure_sums: bool = False,
    checkpoint_dir: str | os.PathLike | None = None,
    callback: Callable[[Chunk], None] | None = None,
    privacy: Any = None,
    keyed_noise: bool | None = None,
    _slowdown: dict[int, float] | None = None,
    **params: Any,
) -> Result:
    """Sample the posterior of `model` given data split into `shards`.

    `chains`: a number, or "auto" (default): 4, or more where a round is bound by the link to far sites rather than
    by their compute (chosen at set-up from the measured RTT; `result.setup.chains` says how many and why).
    `burn_in` rounds come first and are discarded (default: max(100, num_rounds // 10), or with num_rounds="auto"
    "auto": the warm-up ends once the chains are warm, checked at fixed round counts, at most 1000 rounds);
    `num_rounds` counts the rounds after burn-in, or is "auto": stop once min bulk ESS ≥ `target_ess` and max R-hat
    < `max_rhat` (or at `max_rounds`, default 100,000). Each chain keeps the last round of every block of `thin`.
    For the same seed the draws are identical on `executor="local"` and `"ray"`, run after run; `balance="auto"`
    re-balances local step counts N_i from measured worker speeds only on Ray and only when the speeds differ by
    more than 1.5x (then it warns and records the schedule in `result.run_stats.N_schedule`, which `n_local=`
    replays). `time_budget_s` stops cleanly, returning what was drawn. On Ray, `max_actors` caps the worker actors
    (default: one per CPU) and `transport` picks how round messages travel: "socket" (direct TCP channels, the fast
    path) or "actor" (plain Ray actor calls); a lost worker, node or coordinator is recovered from the last
    checkpoint. `pipeline=True` runs each round as two halves, one per group of chains, so that the sites step one
    group while the other's messages travel (DG-LMC's batched kernels; the same draws as an unpipelined run from 6
    chains on: see `RunOptions`); "auto" (the default) turns it on where a far link's RTT is of the order of a
    round's compute (`result.setup.pipeline` says whether and why). `secure_sums=True` has each site send its term of
    the coordinator's sum masked, so the coordinator learns only the sum over sites (DG-LMC; the "privacy" extra;
    docs/privacy.md says what it hides and what not). `checkpoint_dir` stores every chunk of draws with its
    checkpoint, so `rs.resume(checkpoint_dir)` continues the run in another process. `privacy=rs.DP(epsilon,
    delta, clip)` runs DG-LMC's differential-privacy mode: clipped Langevin steps, a private set-up, and a budget
    per site that stops the run (stop reason "privacy_budget") before any release would exceed it
    (`result.run_stats.privacy`; docs/privacy.md). Algorithm parameters go in `**params`.
    A failure raises SamplingError naming the worker, site and round, with `.result` holding the draws so far.

    The keywords are sugar for `Run(model, shards, get_algorithm(algorithm, **params), RunOptions(...),
    ExecutionOptions(...))`.
    """
    if callback is not None and not callable(callback):
        raise TypeError(f"callback must be callable (it receives each chunk of draws), got {callback!r}")
    as_model(model)  # model and shards are checked first, as `Run` checks them
    shard_set = as_shard_set(shards)
    if checkpoint_dir is not None and as_run_directory(checkpoint_dir).has_checkpoint():
        raise ValueError(
            f"checkpoint_dir {str(checkpoint_dir)!r} holds a run already: continue it with "
            "rs.resume(checkpoint_dir), or give an empty directory"
        )
    options = RunOptions(
        chains=chains,  # type: ignore[arg-type]  # checked by RunOptions (a clear error names it)
        num_rounds=num_rounds,  # type: ignore[arg-type]
        burn_in=burn_in,  # type: ignore[arg-type]
        thin=thin,
        seed=seed,
        time_budget_s=time_budget_s,
        target_ess=target_ess,
        max_rhat=max_rhat,
        max_rounds=max_rounds,
        pipeline=pipeline,
        secure_sums=secure_sums,
        keyed_noise=keyed_noise,
    )
    execution = ExecutionOptions(
        executor=executor,  # type: ignore[arg-type]  # parsed by ExecutionOptions (a clear error names it)
        transport=transport,  # type: ignore[arg-type]
        balance=balance,  # type: ignore[arg-type]
        max_actors=max_actors,
        checkpoint_dir=checkpoint_dir,
        _slowdown=_slowdown,
    )
    alg = get_algorithm(algorithm, **with_privacy(algorithm, privacy, params))
    run = Run(model, shard_set, alg, options, execution)
    if run.directory is not None:
        run.directory.save_manifest(Manifest.of(model, alg, options, execution, _nameable(shard_set)))
    return _drive(run, progress, callback)


def resume(
    checkpoint_dir: str | os.PathLike,
    *,
    shards: Any = None,
    executor: Executor | str | None = None,
    progress: bool | None = None,
    callback: Callable[[Chunk], None] | None = None,
) -> Result:
    """Continue a run started with `rs.sample(..., checkpoint_dir=...)` from its last checkpoint, in this process or
    any other: the result holds every draw (those stored before and the new ones), exactly those of an
    uninterrupted run. Shards that were files are found again by path; in-memory shards must be passed as
    `shards` (the same data). `executor` may differ from the original run's (the draws do not depend on it).
    A checkpoint that cannot be read or belongs to another run raises CheckpointError / ValueError; nothing
    restarts from round 0."""
    directory = as_run_directory(checkpoint_dir)
    manifest = directory.load_manifest()
    state = directory.load_checkpoint()
    if shards is None:
        if any(s is None for s in manifest.shards):
            raise ValueError("this run's shards were in memory: pass them again, rs.resume(checkpoint_dir, shards=...)")
        shards = list(manifest.shards)
    state = directory.rollback() or state  # drops the draw files past the checkpoint
    execution = manifest.execution(directory.location, executor)
    run = Run(manifest.model, shards, manifest.algorithm, manifest.options, execution, resume_from=state)
    return _drive(run, progress, callback)


def _drive(run: Run, progress: bool | None, callback: Callable[[Chunk], None] | None) -> Result:
    """Run to the end with a progress bar; the result (all draws stored for a checkpointed run), its warnings, or
    SamplingError."""
    show = progress if progress is not None else run.total_rounds >= 2000
    from tqdm.auto import tqdm

    desc = f"{run.algorithm_name} ({run.executor})"
    with run, tqdm(total=run.total_rounds, initial=run.rounds_done, disable=not show, unit="round", desc=desc) as bar:
        for chunk in run.chunks():
            bar.update(chunk.rounds_done - bar.n)
            if show and run.setup.privacy is not None:  # the DP mode: the most any site has spent, live
                spent = run.stats().privacy
                if spent is not None:
                    bar.set_postfix_str(f"ε {float(np.max(spent.epsilon_spent)):.3f} of {spent.epsilon:g}")
            if callback is not None:
                callback(chunk)
        result = run.result()
        notes = run.warnings()  # as in result.outcome.warnings, with their kinds (the RunWarning category)
    if run.draws_before and run.directory is not None:  # a resumed run: its result holds every stored draw
        result = _with_stored_draws(result, run.directory, run.draws_kept)
    if run.failure is not None:
        raise SamplingError(run.failure, result)
    for note in notes:
        warnings.warn(note, stacklevel=3)
    return result


def _with_stored_draws(result: Result, directory: RunDirectory, n: int) -> Result:
    draws = directory.read(0, n)
    stats = {k: v.T for k, v in directory.read_stats(n).items()}
    return dataclasses.replace(result, draws=np.ascontiguousarray(draws.transpose(1, 0, 2)), sample_stats=stats)


def _nameable(shard_set: ShardSet) -> tuple[Any, ...]:
    """The shards as a manifest keeps them: file shards as themselves, in-memory shards as None (data stay out)."""
    return tuple(s if s.path is not None else None for s in shard_set)


def _split_at_sites(model: Any, shard_set: ShardSet, engine: Any) -> ShardSet:
    """Site files of a model with one grouping factor, split at their sites into parts of whole groups, as many as
    the site's cores allow (`runtime.sites.site_parts`, `shards.split_site_groups`): each part is a shard of its
    own, in a worker process of its own on the site's node. Other shards and models: as they are."""
    factors: tuple[Any, ...] = tuple(getattr(model, "group_effects", None) or ())
    if len(factors) != 1 or ":" in factors[0].group:  # an interaction a:b is no column of the site's file
        return shard_set
    if not any(s.site is not None and s.path is not None and s.parts != 1 for s in shard_set):
        return shard_set
    from .runtime.executors import ensure_ray
    from .runtime.sites import site_parts

    ensure_ray(object_store_bytes=engine.object_store_bytes)
    by = factors[0].group
    try:
        parts = site_parts(list(shard_set), by, engine.site_wait_s)
    except WorkerFailed as exc:
        raise SamplingError(failure_of(exc) or _unknown(exc), None) from None
    return split_site_groups(shard_set, by, parts)


def _unknown(exc: BaseException) -> Failure:
    return Failure(FailureKind.WORKER_ERROR, f"{type(exc).__name__}: {exc}")
