"""The coordinator: owns the chain state and runs the rounds. It knows nothing of an algorithm's mathematics:
it asks the algorithm for messages, moves them to the pool, hands the replies back, keeps the draws.

Rounds run in chunks (`run(max_rounds)`), each returning the draws it produced, so a caller can show progress,
stream draws, checkpoint and stop on a time budget without the coordinator holding the whole run. A coordinator
is built complete, either freshly tuned (`Coordinator.start`) or from a captured `RunState` (`Coordinator.resume`),
both in `construction`.

Its parts live beside it: the balancing of N_i in `balancer`, binding a run to its shards in `binding`, the
set-up's chain-count and pipeline choices in `setup_choices`, the round loop's small parts in `rounds`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..algorithms.base import Adaptation, Algorithm, RoundInfo
from ..diagnostics import settled, superchains_for, warm
from ..enums import StopReason
from ..errors import ArgumentError, Failure, FailureKind, WorkerFailed
from ..models.contract import Model
from ..privacy.ledger import LedgerBook, size_of
from ..streams import ChainNoise
from . import construction
from .balancer import StepBalancer
from .contracts import (
    ROUND_PARTS,
    Chunk,
    RoundTiming,
    RunConfig,
    RunState,
    RunStats,
    SetupInfo,
    StepResult,
    WarmupState,
    WorkerPool,
)
from .links import PIPELINE_PROBE_ROUNDS, Phase, chain_groups, decide_pipeline
from .rounds import _joined, _Kept, _nonfinite, _Rows, _Stop
from .setup_choices import _pipeline_refusal

if TYPE_CHECKING:  # the privacy extra (dp-accounting) loads only with the DP mode
    from ..privacy.accountant import DPAccount, PrivacyStats

#: A warm-up that ends by itself (RunConfig.warmup_auto) is first checked after this many rounds, then each time
#: WARM_GROWTH times as many: checks at fixed round counts, so where it ends does not depend on the machine.
WARM_FIRST_CHECK = 50
WARM_GROWTH = 1.5


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
        self._warm_accept: list[float] = []  # where a step size adapts: its acceptance per warm-up round
        if warmup is not None:
            self._warm_decided = warmup.burn_in is not None
            self.burn_in = warmup.burn_in if warmup.burn_in is not None else config.burn_in
            self._warm_next = warmup.next_check
            self._warm_draws = list(warmup.draws)
            self._warm_accept = [] if warmup.accept is None else [float(a) for a in warmup.accept]
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
        """Bind the model to the data, tune the algorithm, create the worker states (`construction.tuned`)."""
        return cls(**construction.tuned(pool, model, algorithm, config, slowdown)._asdict())

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
        """Bind the model to the data and continue exactly from `state` (`construction.resumed`)."""
        return cls(**construction.resumed(pool, model, algorithm, config, state, ledger)._asdict())

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
            self._warm_round(info.t, theta, self.algorithm.adaptation(self.state, stats))

    def _warm_round(self, t: int, theta: np.ndarray, adaptation: Adaptation | None) -> None:
        """A warm-up that ends by itself: keep round t's draw of θ (its global part) and, at a check
        (WARM_FIRST_CHECK rounds, then WARM_GROWTH times more each time), ask `diagnostics.warm` of the warm-up's
        draws so far (it reads their later half). Warm: the warm-up ends after the next round (round t + 1 is still
        warm-up: a pipelined run has sent its first half already), so the decision is a function of the rounds'
        draws alone, the same on every executor and in a pipelined run. Where a step size adapts (`adaptation`,
        the round's acceptance and its target), the warm-up also waits for it to settle (`diagnostics.settled`):
        warm chains with a step still on its way would keep a step that the chains' draws never tested. A round
        count at the cap ends it anyway."""
        self._warm_draws.append(theta[:, : self.model.dim])
        if adaptation is not None:
            self._warm_accept.append(adaptation.accept)
        done = t + 1
        if done >= self.config.burn_in:  # the cap: the warm-up ends here whatever the chains look like
            self._warm_decided, self._warm_draws, self._warm_accept = True, [], []
            return
        if done < self._warm_next:
            return
        tuned = adaptation is None or settled(np.asarray(self._warm_accept), adaptation.target)
        if tuned and warm(np.stack(self._warm_draws).transpose(1, 0, 2), superchains_for(self.config.chains)):
            self.burn_in = min(done + 1, self.config.burn_in)
            self._warm_decided = True
            self._warm_draws, self._warm_accept = [], []
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
        accept = np.asarray(self._warm_accept, dtype=float) if self._warm_accept else None
        return WarmupState(self.burn_in if self._warm_decided else None, self._warm_next, draws, accept)

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
