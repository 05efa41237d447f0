"""Convergence diagnostics of draws (arviz-stats): minimum bulk ESS and maximum rank-normalised split R-hat, the
thresholds Stan and ArviZ users read them against, and the warnings a finished run gives when they are missed."""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from typing import Any

import numpy as np

#: R-hat at or above this means "not converged" (Vehtari et al. 2021; ArviZ and Stan use it).
RHAT_WARN = 1.01
#: Minimum bulk ESS per chain below which estimates are not reliable (the same references).
ESS_PER_CHAIN_WARN = 100


class WarningKind(str, Enum):
    """What a run's warning is about, so that callers filter warnings by kind rather than by their words."""

    TIME_BUDGET = "time_budget"  # stopped early by time_budget_s
    MAX_ROUNDS = "max_rounds"  # num_rounds="auto" stopped at max_rounds before converging
    BALANCE = "balance"  # local step counts N_i were balanced from measured timings
    RHAT = "rhat"  # max R-hat at or above RHAT_WARN
    ESS = "ess"  # min bulk ESS below ESS_PER_CHAIN_WARN per chain


class RunWarning(UserWarning):
    """A warning about a run (`warnings.warn` category); `.kind` says what it is about, `str()` is its message."""

    def __init__(self, kind: WarningKind, message: str) -> None:
        super().__init__(kind, message)  # args rebuild it (pickling, pytest-xdist's transfer of warnings)
        self.kind = WarningKind(kind)
        self.message = message

    def __str__(self) -> str:
        return self.message

    def __reduce__(self) -> tuple[Any, ...]:
        return (RunWarning, (self.kind, self.message))


def convergence_fraction(min_ess_bulk: float, max_rhat: float, target_ess: float, rhat_target: float) -> float:
    """How far a num_rounds="auto" run is from its stop (0 to 1): the worse of min bulk ESS / target_ess and an
    R-hat term, 1 once max R-hat is below `rhat_target`, else (rhat_target − 1) / (R-hat − 1). Non-finite: 0."""
    if not (math.isfinite(min_ess_bulk) and math.isfinite(max_rhat)):
        return 0.0
    ess = min(1.0, max(0.0, min_ess_bulk / target_ess))
    rhat = 1.0 if max_rhat < rhat_target else min(1.0, max(0.0, (rhat_target - 1.0) / (max_rhat - 1.0)))
    return min(ess, rhat)


@dataclass(frozen=True)
class Diagnostics:
    """min bulk ESS and max rank-normalised R-hat over the parameters, from `draws` per chain and `chains`."""

    min_ess_bulk: float
    max_rhat: float
    draws: int
    chains: int

    def converged(self, target_ess: float, max_rhat: float) -> bool:
        """Both targets met: min bulk ESS ≥ target_ess and max R-hat < max_rhat."""
        return self.min_ess_bulk >= target_ess and self.max_rhat < max_rhat

    def warnings(self) -> list[RunWarning]:
        """What a user should hear about these draws (ArviZ/Stan thresholds), or nothing."""
        out = []
        if not math.isfinite(self.max_rhat) or self.max_rhat >= RHAT_WARN:
            out.append(
                RunWarning(
                    WarningKind.RHAT,
                    f"max R-hat is {self.max_rhat:.3f} (≥ {RHAT_WARN}): the chains have not converged to the same "
                    "distribution; run longer (or num_rounds='auto')",
                )
            )
        if not math.isfinite(self.min_ess_bulk) or self.min_ess_bulk < ESS_PER_CHAIN_WARN * self.chains:
            out.append(
                RunWarning(
                    WarningKind.ESS,
                    f"min bulk ESS is {self.min_ess_bulk:.0f} (< {ESS_PER_CHAIN_WARN} per chain × {self.chains} "
                    "chains): posterior summaries are unreliable; run longer (or num_rounds='auto')",
                )
            )
        return out

    def as_dict(self) -> dict[str, float | int | None]:
        """JSON-ready values (non-finite as None)."""
        return {
            "min_ess_bulk": _finite_or_none(self.min_ess_bulk),
            "max_rhat": _finite_or_none(self.max_rhat),
            "draws": self.draws,
            "chains": self.chains,
        }


#: Draws per chain a convergence check during a run reads at least (evenly thinned beyond, so its cost stays
#: bounded: about 0.1 s for 16 chains of 31 parameters, measured; the rank normalisation dominates).
CHECK_DRAWS = 250
#: Draws per chain the diagnostics of a finished run read.
FINAL_DRAWS = 4000


def check_draws(chains: int, target_ess: float) -> int:
    """Draws per chain a convergence check reads: CHECK_DRAWS, or enough that thinned draws can still show
    `target_ess` with a margin (three times as many draws in all as the target)."""
    return max(CHECK_DRAWS, math.ceil(3 * target_ess / chains))


def diagnose(draws: np.ndarray, max_draws: int | None = None) -> Diagnostics | None:
    """Diagnostics of draws (chains, n, d), or None with fewer than 4 draws per chain. With `max_draws`, longer
    chains are thinned evenly to that many draws first: R-hat is unchanged in expectation and the ESS estimate can
    only be lower (thinning never adds information), so a run judged converged on them is converged."""
    import arviz_stats as azs

    chains, n = draws.shape[0], draws.shape[1]
    if n < 4:
        return None
    if max_draws is not None and n > max_draws:
        draws = draws[:, np.linspace(0, n - 1, max_draws).round().astype(int)]
    with np.errstate(all="ignore"):
        ess = np.asarray(azs.ess(draws, method="bulk"), dtype=float)
        rhat = np.asarray(azs.rhat(draws, method="rank"), dtype=float)
    min_ess = float(np.min(np.where(np.isfinite(ess), ess, -np.inf))) if ess.size else float("nan")
    max_rhat = float(np.max(np.where(np.isfinite(rhat), rhat, np.inf))) if rhat.size else float("nan")
    return Diagnostics(min_ess, max_rhat, n, chains)


def _finite_or_none(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


MANY_CHAINS = 16


def superchains_for(chains: int) -> int:
    """Placeholder until nested R-hat lands."""
    return 1 if chains < MANY_CHAINS else chains // 4


def warm(draws: np.ndarray, superchains: int) -> bool:
    """Placeholder: split R-hat of the window below 1.05."""
    import arviz_stats as azs

    with np.errstate(all="ignore"):
        rhat = np.asarray(azs.rhat(draws, method="rank"), dtype=float)
    return bool(np.all(np.isfinite(rhat)) and rhat.max() < 1.05)
