"""Rényi-DP accounting of the DP mode's unadjusted Langevin steps, per site, over every release of a run
(docs/privacy.md, "Differential privacy").

One local step of site i, z' = z − γ ĝ(z) + √(2γ) ξ, ξ ~ N(0, I), with ĝ(z) = Σ_r clip(∇ℓ_r(z), C) + (terms that do
not read the rows: the prior share, the coupling (z − θ)/ρ), is a Gaussian mechanism on the site's rows given the
past: adding or removing one row changes the clipped sum by at most C (one term, of norm ≤ C, appears or goes), so
the mean z − γĝ moves by at most Δ = γC (L2), and the noise has sd σ = √(2γ) per coordinate. Its RDP at order α is
(Mironov 2017, Prop. 7)

    ε_α(one step) = α Δ² / (2σ²) = α γ² C² / (4γ) = α γ C² / 4,                                         (P1)

and RDP composes additively, also adaptively (each step's input z, θ being functions of earlier releases and public
noise), over the steps of all K chains of the site:

    ε_α(run) = α C² Σ_{chains, steps} γ / 4 = α C² S / 4,   S = K Σ_t N_i(t) γ_i.                       (P2)

(P2) is converted to (ε, δ)-DP by dp-accounting's conversion over the order grid `RDP_ORDERS` (`epsilon`), not by
hand; `step_sum_within` inverts it: the largest S whose ε(δ) stays within a budget.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ..extras import privacy as _requires_privacy  # noqa: F401 (the import checks that the privacy extra is installed)

#: The Rényi orders α the conversion minimises over: a fine grid on (1, 64], where the optimum of (P2) lies for ε of
#: order 0.1–10, and coarser orders up to 1024 for tiny step sums.
RDP_ORDERS: tuple[float, ...] = tuple(
    float(a) for a in np.unique(np.round(np.concatenate([np.linspace(1.05, 64.0, 600), np.geomspace(64, 1024, 40)]), 6))
)


def langevin_rdp(clip: float, step_sum: float, orders: Sequence[float] = RDP_ORDERS) -> np.ndarray:
    """(P2): the RDP ε_α = α C² S / 4 at each order α, for clip C and step sum S = Σγ over every step and chain."""
    return np.asarray(orders, dtype=float) * (clip * clip * step_sum / 4.0)


def epsilon(clip: float, step_sum: float, delta: float, orders: Sequence[float] = RDP_ORDERS) -> float:
    """ε(δ) of (P2) by dp-accounting's RDP → (ε, δ) conversion (`compute_epsilon`, the tighter of its bounds)."""
    from dp_accounting.rdp import rdp_privacy_accountant

    if step_sum <= 0.0:
        return 0.0
    eps, _ = rdp_privacy_accountant.compute_epsilon(orders, langevin_rdp(clip, step_sum, orders), delta)
    return float(eps)


def step_sum_within(budget: float, delta: float, clip: float, orders: Sequence[float] = RDP_ORDERS) -> float:
    """The largest step sum S (to 1e-12 relative) with ε(δ) ≤ `budget`: ε grows with S, so bisection on S; the
    lower end is returned, so that ε(S) ≤ budget holds exactly."""
    lo, hi = 0.0, 1.0 / (clip * clip)
    while epsilon(clip, hi, delta, orders) <= budget:
        lo, hi = hi, 2.0 * hi
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if epsilon(clip, mid, delta, orders) <= budget:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-12 * hi:
            break
    return lo


@dataclass(frozen=True)
class DPPlan:
    """What the DP mode's set-up fixed for the run's accounting: the budget (ε, δ) per site, the clip C, each site's
    LMC step γ_i (b,), the chains K (each chain's steps are releases of their own), and `limit`, the largest step
    sum S within the budget (`step_sum_within`)."""

    epsilon: float
    delta: float
    clip: float
    gamma: np.ndarray
    chains: int
    limit: float

    @classmethod
    def of(cls, epsilon: float, delta: float, clip: float, gamma: np.ndarray, chains: int) -> DPPlan:
        limit = step_sum_within(epsilon, delta, clip)
        return cls(epsilon, delta, clip, np.asarray(gamma, dtype=float), int(chains), limit)

    def step_sums(self, steps: np.ndarray) -> np.ndarray:
        """S_i = K γ_i (local steps per chain so far) (b,): (P2)'s step sum of each site."""
        return self.chains * self.gamma * np.asarray(steps, dtype=float)

    def allows(self, steps: np.ndarray) -> bool:
        """Whether every site's accounting after `steps` local steps per chain (b,) stays within the budget."""
        return bool(np.all(self.step_sums(steps) <= self.limit))

    def spent(self, steps: np.ndarray) -> np.ndarray:
        """ε(δ) per site after `steps` local steps per chain (b,)."""
        return np.array([epsilon(self.clip, s, self.delta) for s in self.step_sums(steps)])

    def rounds_within(self, n_steps: np.ndarray) -> int:
        """How many rounds of `n_steps` local steps (b,) the budget allows: a run's length from its budget."""
        per_round = self.step_sums(n_steps)
        return int(np.floor(np.min(self.limit / per_round) * (1 + 1e-12)))


class DPAccount(NamedTuple):
    """The run's accounting so far (captured in checkpoints): local steps per chain released by each site (b,), and
    for the clip rate the per-example gradients clipped and evaluated (b,), summed over steps and chains."""

    steps: np.ndarray
    clipped: np.ndarray
    evaluated: np.ndarray

    @classmethod
    def empty(cls, b: int) -> DPAccount:
        return cls(np.zeros(b, dtype=np.int64), np.zeros(b), np.zeros(b))

    def after(self, n_steps: np.ndarray, clipped: np.ndarray | None, evaluated: np.ndarray | None) -> DPAccount:
        """The account after a round of `n_steps` (b,) with its clip counts (b,) (None: the kernel reported none)."""
        return DPAccount(
            self.steps + np.asarray(n_steps, dtype=np.int64),
            self.clipped + (0.0 if clipped is None else clipped),
            self.evaluated + (0.0 if evaluated is None else evaluated),
        )

    def clip_rate(self) -> np.ndarray:
        """Fraction of per-example gradients clipped per site (b,) (NaN before any step)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.evaluated > 0, self.clipped / np.maximum(self.evaluated, 1.0), np.nan)


@dataclass(frozen=True)
class PrivacyStats:
    """The DP mode in `RunStats.privacy`: the budget, what each site has spent, its clip rate and its step sum."""

    epsilon: float
    delta: float
    clip: float
    epsilon_spent: np.ndarray
    clip_rate: np.ndarray
    step_sum: np.ndarray
    local_steps: np.ndarray

    @classmethod
    def of(cls, plan: DPPlan, account: DPAccount) -> PrivacyStats:
        return cls(
            plan.epsilon,
            plan.delta,
            plan.clip,
            plan.spent(account.steps),
            account.clip_rate(),
            plan.step_sums(account.steps),
            account.steps.copy(),
        )
