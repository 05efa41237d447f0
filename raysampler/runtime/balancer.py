"""Speed balancing: each shard's local step count N_i set from its measured seconds per step, so that the worker
processes' rounds take about as long as each other ([DG-LMC], sec. 3.2.2).

`StepBalancer` holds N_i and its schedule for one run; the coordinator feeds it every round's work per shard and
asks it for N_i of the rounds to come. Its state travels in a `RunState` as a `BalancerState` (`capture`/`restore`),
so a resumed run goes on with the same N_i, estimates and schedule.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..enums import Balance
from .contracts import BalancerState

#: Consecutive window estimates of uneven speeds before balance="auto" switches balancing on.
AUTO_ESTIMATES = 3
#: balance="auto" counts a window as uneven only if the slowest process's work per round exceeds the fastest's by
#: this many seconds: balancing can save at most that gap, and a smaller one was scheduling noise (2 cores shared
#: by 4 workers on tiny shards), not a slow machine — not worth giving up a fixed, reproducible schedule
#: (docs/performance.md, "Measurements behind choices in the code").
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
