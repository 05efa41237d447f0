"""`Run`: a started run, driven through its coordinator (in-process or on Ray) in chunks of rounds.

With `num_rounds="auto"` it checks the draws' minimum bulk ESS and maximum R-hat as it goes and stops once both
targets hold. The checks fall at fixed draw counts (100 kept draws per chain, then 1.5 times more each time), so
where a seeded run stops does not depend on how fast the machine is; each check reads a bounded number of draws per
chain (`diagnostics.check_draws`), so its cost is bounded.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from typing import Any

import numpy as np

from .algorithms import Algorithm
from .algorithms.base import check_model_support
from .checkpoints import RunDirectory
from .diagnostics import FINAL_DRAWS, Diagnostics, RunWarning, WarningKind, check_draws, diagnose, superchains_for
from .enums import Executor, StopReason
from .errors import ArgumentError, Failure, FailureKind, RunCancelled, SamplingError, WorkerFailed, failure_of
from .events import EventKind, RunEvent
from .models.foreign import as_model
from .options import ExecutionOptions, RunOptions
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
            converges=opts.auto and not algorithm.private_noise,
            budgeted=opts.time_budget_s is not None and not algorithm.private_noise,
            chains_cap=opts.max_chains,
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
        # the last diagnose and the draws it read, (draws per chain, read per chain): the check that stops a run
        # read the very draws its result reports, so the result does not compute them again
        self._last_diagnosis: tuple[tuple[int, int], Diagnostics | None] | None = None
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
        self._last_diagnosis = None
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
        self.diagnostics = self._diagnose(draws, check_draws(self.config.chains, self.options.target_ess))
        if self.diagnostics is None or not self.diagnostics.converged(self.options.target_ess, self.options.max_rhat):
            return False
        # the thinned check passed: confirm on the draws the final verdict reads, so a run stopped as converged is
        # never then reported as not converged (thinning can move R-hat across the threshold either way)
        if draws.shape[1] > check_draws(self.config.chains, self.options.target_ess):
            self.diagnostics = self._diagnose(draws, FINAL_DRAWS)
        return self.diagnostics is not None and self.diagnostics.converged(
            self.options.target_ess, self.options.max_rhat
        )

    def _diagnose(self, draws: np.ndarray, max_draws: int) -> Diagnostics | None:
        """`diagnose` of the run's draws so far (chains, n, d), at most `max_draws` a chain; the last one is kept
        with the draws it read, since the draws only grow between checks (a recovery, which rolls them back,
        forgets it)."""
        key = (draws.shape[1], min(draws.shape[1], max_draws))
        if self._last_diagnosis is None or self._last_diagnosis[0] != key:
            self._last_diagnosis = (key, diagnose(draws, max_draws, self._superchains))
        return self._last_diagnosis[1]

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
        diag = self._diagnose(draws, FINAL_DRAWS) if draws.shape[1] >= 4 else None
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
