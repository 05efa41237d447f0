"""Convergence diagnostics of draws (arviz-stats): minimum bulk ESS and maximum rank-normalised split R-hat, the
thresholds Stan and ArviZ users read them against, and the warnings a finished run gives when they are missed.

From `MANY_CHAINS` chains on, the chains are grouped into superchains whose chains share one start
(`superchains_for`, `tuning.laplace.initial_points`) and the R-hat a run is judged by is nested R-hat
(`nested_rhat`; Margossian, Hoffman, Sountsov, Riou-Durand, Vehtari, Gelman, "Nested R-hat: assessing the
convergence of Markov chain Monte Carlo when running many short chains", Bayesian Analysis 2024): split R-hat
< 1.01 needs long chains (about 100 effective draws per chain), nested R-hat < 1.01 needs about 50 effective draws
per superchain, which many short chains reach. `warm` is the matching rule for the end of the warm-up."""

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
#: From this many chains on, convergence is judged by nested R-hat over superchains (`superchains_for`).
MANY_CHAINS = 16
#: The fewest superchains, and the fewest chains in each, of the nested design (`superchains_for`).
MIN_SUPERCHAINS = 4
MIN_SUPERCHAIN_SIZE = 4
#: The warm-up rule's R-hat threshold (`warm`), for split R-hat (few chains) and nested R-hat (many).
WARM_RHAT = 1.1
#: The tuning rule's tolerance (`settled`): each quarter of the warm-up's later half keeps its mean acceptance
#: within this of the adaptation's target.
SETTLED_ACCEPT = 0.1


class WarningKind(str, Enum):
    """What a run's warning is about, so that callers filter warnings by kind rather than by their words."""

    TIME_BUDGET = "time_budget"  # stopped early by time_budget_s
    MAX_ROUNDS = "max_rounds"  # num_rounds="auto" stopped at max_rounds before converging
    PRIVACY_BUDGET = "privacy_budget"  # the DP mode's budget ended the run before its burn-in did: no draws
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
    """min bulk ESS and max rank-normalised split R-hat over the parameters, from `draws` per chain and `chains`;
    with `superchains` > 1 (the nested design, `superchains_for`) also the max rank-normalised nested R-hat,
    which is then the R-hat the convergence rule reads (`rule`, `rule_rhat`)."""

    min_ess_bulk: float
    max_rhat: float
    draws: int
    chains: int
    superchains: int = 1
    max_nested_rhat: float | None = None

    @property
    def nested(self) -> bool:
        """Whether the rule is nested R-hat (superchains > 1) rather than split R-hat."""
        return self.superchains > 1 and self.max_nested_rhat is not None

    @property
    def rule(self) -> str:
        """The R-hat the convergence rule reads: "nested_rhat" or "split_rhat"."""
        return "nested_rhat" if self.nested else "split_rhat"

    @property
    def rule_rhat(self) -> float:
        """The value of that R-hat: max nested R-hat with superchains, else max split R-hat."""
        return self.max_nested_rhat if self.max_nested_rhat is not None and self.nested else self.max_rhat

    def converged(self, target_ess: float, max_rhat: float) -> bool:
        """Both targets met: min bulk ESS ≥ target_ess and the rule's R-hat (`rule_rhat`) < max_rhat.

        With superchains the threshold is the same number, read as the paper's nR̂ < 1 + δ with δ = max_rhat − 1
        (0.01 by default): at stationarity nR̂² − 1 ≈ K / ESS for K superchains (the variance of a superchain's
        mean over the posterior variance), so with K = 4 it sits near 1.005 once ESS ≈ 400 and the two targets
        are met at about the same length, while a superchain that has not forgotten its start keeps it above."""
        return self.min_ess_bulk >= target_ess and self.rule_rhat < max_rhat

    def fraction(self, target_ess: float, max_rhat: float) -> float:
        """How far from the stop these diagnostics are (`convergence_fraction`), on the rule's R-hat."""
        return convergence_fraction(self.min_ess_bulk, self.rule_rhat, target_ess, max_rhat)

    def warnings(self) -> list[RunWarning]:
        """What a user should hear about these draws (ArviZ/Stan thresholds; nested R-hat with superchains), or
        nothing."""
        out = []
        rhat = self.rule_rhat
        if not math.isfinite(rhat) or rhat >= RHAT_WARN:
            if self.nested:
                message = (
                    f"max nested R-hat is {rhat:.3f} (≥ {RHAT_WARN}) over {self.superchains} superchains of "
                    f"{self.chains // self.superchains} chains: the superchains have not converged to the same "
                    "distribution; run longer (or num_rounds='auto')"
                )
            else:
                message = (
                    f"max R-hat is {rhat:.3f} (≥ {RHAT_WARN}): the chains have not converged to the same "
                    "distribution; run longer (or num_rounds='auto')"
                )
            out.append(RunWarning(WarningKind.RHAT, message))
        # 100 effective draws per chain (Vehtari et al. 2021, for 4 chains: 400) or, in the nested design, per
        # superchain: the superchains are the independent units there, and short chains are the point of it
        units, unit = (self.superchains, "superchain") if self.nested else (self.chains, "chain")
        if not math.isfinite(self.min_ess_bulk) or self.min_ess_bulk < ESS_PER_CHAIN_WARN * units:
            out.append(
                RunWarning(
                    WarningKind.ESS,
                    f"min bulk ESS is {self.min_ess_bulk:.0f} (< {ESS_PER_CHAIN_WARN} per {unit} × {units} "
                    f"{unit}s): posterior summaries are unreliable; run longer (or num_rounds='auto')",
                )
            )
        return out

    def as_dict(self) -> dict[str, float | int | str | None]:
        """JSON-ready values (non-finite as None): `max_rhat` is always split R-hat; `rule` says which R-hat the
        convergence rule reads ("nested_rhat" with `superchains` > 1, its value `max_nested_rhat`)."""
        return {
            "min_ess_bulk": _finite_or_none(self.min_ess_bulk),
            "max_rhat": _finite_or_none(self.max_rhat),
            "draws": self.draws,
            "chains": self.chains,
            "rule": self.rule,
            "superchains": self.superchains,
            "max_nested_rhat": None if self.max_nested_rhat is None else _finite_or_none(self.max_nested_rhat),
        }


#: Draws per chain a convergence check during a run reads at least (evenly thinned beyond, so its cost stays
#: bounded; the rank normalisation dominates it) (docs/performance.md, "Measurements behind choices in the code").
CHECK_DRAWS = 250
#: Draws per chain the diagnostics of a finished run read.
FINAL_DRAWS = 4000


def check_draws(chains: int, target_ess: float) -> int:
    """Draws per chain a convergence check reads: CHECK_DRAWS, or enough that thinned draws can still show
    `target_ess` with a margin (three times as many draws in all as the target)."""
    return max(CHECK_DRAWS, math.ceil(3 * target_ess / chains))


def diagnose(draws: np.ndarray, max_draws: int | None = None, superchains: int = 1) -> Diagnostics | None:
    """Diagnostics of draws (chains, n, d), or None with fewer than 4 draws per chain. With `max_draws`, longer
    chains are thinned evenly to that many draws first: R-hat is unchanged in expectation and the ESS estimate can
    only be lower (thinning never adds information), so a run judged converged on them is converged. With
    `superchains` > 1 (chains c // (chains // superchains) in one superchain) the max rank-normalised nested R-hat
    (`nested_rank`) is computed too, and it is what `Diagnostics.converged` reads.

    The three statistics share one rank normalisation: the normal scores of the draws and of their distances from
    the median are computed once (`_normal_scores`, the costly part: 5 passes before, 2 now) and read by the
    ESS (`ess_mean`, arviz-stats' "mean" ESS, which on the scores is its "bulk" ESS of the draws), by split R-hat
    (the larger of the classic R̂ on the split scores, arviz-stats' "rank" R-hat: tests/test_diagnostics_nested.py)
    and by nested R-hat. With an odd draw count the middle draw is left out of all three, as arviz-stats' split
    leaves it out.
    A parameter with a non-finite draw has NaN ESS and R-hat (arviz-stats would rank an infinity as the largest
    draw), so such draws are never judged converged."""
    chains, n = draws.shape[0], draws.shape[1]
    if n < 4:
        return None
    if max_draws is not None and n > max_draws:
        draws = draws[:, np.linspace(0, n - 1, max_draws).round().astype(int)]
    x = np.asarray(draws, dtype=float)
    if x.shape[1] % 2:
        x = np.delete(x, x.shape[1] // 2, axis=1)
    with np.errstate(all="ignore"):
        bulk, tail = _rank_scores(x)
        ess = ess_mean(bulk)
        rhat = np.maximum(_classic_rhat(_halves(bulk)), _classic_rhat(_halves(tail)))
        nested = np.maximum(nested_rhat(bulk, superchains), nested_rhat(tail, superchains)) if superchains > 1 else None
    min_ess = float(np.min(np.where(np.isfinite(ess), ess, -np.inf))) if ess.size else float("nan")
    max_rhat = _worst(rhat)
    return Diagnostics(min_ess, max_rhat, n, chains, superchains, None if nested is None else _worst(nested))


def ess_mean(x: np.ndarray) -> np.ndarray:
    """The ESS of the mean per parameter (d,) of draws (chains, n, d), from split chains: arviz-stats'
    `ess(method="mean")` (Vehtari et al. 2021, eq. 10 with Geyer's initial monotone sequence), the same numbers to
    rounding (tests/test_diagnostics_nested.py), for every parameter at once. arviz-stats steps the lags of one
    parameter at a time in Python, which made it most of a convergence check's cost (docs/performance.md,
    "Measurements behind choices in the code"). NaN for a parameter with a non-finite draw; chains · n for a
    constant one, as there."""
    import scipy.fft

    y = _halves(np.asarray(x, dtype=float))
    m, h, d = y.shape
    out = np.full(d, np.nan)
    finite = np.all(np.isfinite(y), axis=(0, 1))
    with np.errstate(invalid="ignore"):
        const = finite & (np.ptp(y, axis=(0, 1)) < np.finfo(float).resolution)
    out[const] = m * h
    live = finite & ~const
    if h < 2 or not live.any():
        return out
    z = np.ascontiguousarray(y[:, :, live].transpose(0, 2, 1))  # (m, d', h): each chain's draws contiguous
    chain_means = z.mean(axis=2, keepdims=True)
    z -= chain_means
    size = scipy.fft.next_fast_len(2 * h, real=True)
    f = scipy.fft.rfft(z, n=size, axis=2)
    mean_acov = (scipy.fft.irfft(f.real**2 + f.imag**2, n=size, axis=2)[:, :, :h] / h).mean(axis=0).T  # (h, d')
    mean_var = mean_acov[0] * h / (h - 1.0)
    var_plus = mean_var * (h - 1.0) / h
    if m > 1:
        var_plus = var_plus + np.var(chain_means[:, :, 0], axis=0, ddof=1)
    rho = 1.0 - (mean_var - mean_acov) / var_plus  # the autocorrelations ρ̂_t, (h, d')
    # Geyer's initial positive sequence: pairs P_k = ρ̂_2k + ρ̂_2k+1 (P_0 = 1 + ρ̂_1) are taken while the last is
    # positive, for k < (h − 2) / 2; the monotone sequence caps each at the ones before (a running minimum); the
    # last even term is added alone where it is positive or its pair is not negative
    k_len = max(0, -(-(h - 2) // 2) - 1)
    ks = np.arange(1, k_len + 1)
    pairs = np.concatenate([(1.0 + rho[1])[None], rho[2 * ks] + rho[2 * ks + 1]], axis=0)  # (k_len + 1, d')
    stop = pairs[:k_len] <= 0
    taken = np.where(stop.any(axis=0), stop.argmax(axis=0), k_len) if k_len else np.zeros(rho.shape[1], dtype=int)
    kept = np.arange(k_len + 1)[:, None] < taken[None, :]
    total = np.where(kept, np.minimum.accumulate(pairs, axis=0), 0.0).sum(axis=0)
    cols = np.arange(rho.shape[1])
    even, pair = rho[2 * taken, cols], pairs[taken, cols]
    last = np.where(taken == 0, 1.0, np.where((pair >= 0) | (even > 0), even, 0.0))
    tau = np.maximum(-1.0 + 2.0 * total + last, 1.0 / np.log10(m * h))
    out[live] = m * h / tau
    return out


def _halves(x: np.ndarray) -> np.ndarray:
    """Draws (chains, n, d) as 2·chains chains of n // 2 draws (the middle draw left out when n is odd)."""
    half = x.shape[1] // 2
    return np.concatenate([x[:, :half], x[:, x.shape[1] - half :]], axis=0)


def superchains_for(chains: int) -> int:
    """How many superchains `chains` chains form: 1 below MANY_CHAINS (the plain split R-hat rule), else the
    smallest K ≥ MIN_SUPERCHAINS that divides `chains` into superchains of M = chains // K ≥ MIN_SUPERCHAIN_SIZE
    chains (4 whenever 4 divides `chains`; 1, the plain rule, where none does: e.g. 17, 18 or 19 chains).
    Chain c belongs to superchain c // M (`superchain_ids`).

    Why 4: at stationarity nR̂² − 1 ≈ K / ESS (each superchain's mean has variance σ² K / ESS), so nR̂ < 1.01
    asks for ESS ≳ K / 0.02 = 200 times the noise of a K − 1 degrees-of-freedom variance estimate; with K = 4 the
    target ESS (400) and nR̂ < 1.01 are reached at about the same run length, with 8 or 16 superchains nR̂ would
    hold the run two to four times longer. Four superchains are also the four independent starts of the plain
    rule's default (4 chains); the paper asks for equal superchains and at least a few chains in each (the
    within-superchain variance is estimated from them), hence M ≥ 4 and exact division."""
    if chains < MANY_CHAINS:
        return 1
    for k in range(MIN_SUPERCHAINS, chains // MIN_SUPERCHAIN_SIZE + 1):
        if chains % k == 0:
            return k
    return 1


def superchain_ids(chains: int, superchains: int) -> np.ndarray:
    """Each chain's superchain (chains,): c // M with M = chains // superchains (contiguous, equal sizes)."""
    if superchains < 1 or chains % superchains:
        raise ValueError(f"{chains} chains do not form {superchains} equal superchains")
    return np.arange(chains) // (chains // superchains)


def nested_rhat(draws: np.ndarray, superchains: int) -> np.ndarray:
    """Nested R-hat per parameter (d,) of draws (chains, n, d) in `superchains` equal contiguous superchains
    (Margossian et al. 2024, sec. 2): with K superchains of M chains of N draws θ_nmk, chain means θ̄_·mk,
    superchain means θ̄_··k and their mean θ̄_···,

        B_ν = 1/(K − 1) Σ_k (θ̄_··k − θ̄_···)²                          between superchains,
        W_ν = 1/K Σ_k (B̃_k + W̃_k),                                      within superchains,
        B̃_k = 1/(M − 1) Σ_m (θ̄_·mk − θ̄_··k)²  (0 when M = 1)            between the chains of superchain k,
        W̃_k = 1/M Σ_m 1/(N − 1) Σ_n (θ_nmk − θ̄_·mk)²  (0 when N = 1)     within its chains,
        nR̂ = √(1 + B_ν / W_ν).

    With M = 1 this is √(1 + B/W) in the classic (not split) R-hat's B and W: classic R̂² = nR̂² − 1/N, the
    nested form dropping the (N − 1)/N factor so that nR̂ ≥ 1. B_ν = W_ν = 0 gives NaN, W_ν = 0 < B_ν infinity.
    The draws are used as given (no split, no rank normalisation: `nested_rank` does that)."""
    x = np.asarray(draws, dtype=float)
    if x.ndim != 3:
        raise ValueError(f"draws must have shape (chains, n, d), got {x.shape}")
    chains, n, d = x.shape
    if superchains < 2 or chains % superchains:
        raise ValueError(f"nested R-hat needs at least 2 equal superchains; {chains} chains in {superchains}")
    k, m = superchains, chains // superchains
    x = x.reshape(k, m, n, d)
    chain_mean = x.mean(axis=2)  # (K, M, d)
    super_mean = chain_mean.mean(axis=1)  # (K, d)
    between_super = super_mean.var(axis=0, ddof=1)
    between_chains = chain_mean.var(axis=1, ddof=1) if m > 1 else np.zeros((k, d))
    within_chains = x.var(axis=2, ddof=1).mean(axis=1) if n > 1 else np.zeros((k, d))
    within_super = (between_chains + within_chains).mean(axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.sqrt(1.0 + between_super / within_super)


def nested_rank(draws: np.ndarray, superchains: int) -> np.ndarray:
    """Rank-normalised nested R-hat per parameter: the larger of `nested_rhat` on the normal scores of the draws'
    ranks (bulk) and on those of their distances from the median (tail, "folded"), ranks pooled over all chains
    and draws, as arviz-stats' rank R-hat does for split R-hat (Vehtari et al. 2021). The rule reads this rather
    than the raw nR̂: its bulk term is the same for any increasing transform of a parameter and both are finite
    for heavy tails (Vehtari et al.'s reasons), and the folded term sees a superchain whose spread differs (e.g.
    chains not yet moved apart from their shared start) even where the means agree.
    The chains are not split: within-superchain differences between chains play that part. A parameter with a
    non-finite draw gets NaN."""
    x = np.asarray(draws, dtype=float)
    bulk, tail = (nested_rhat(z, superchains) for z in _rank_scores(x))
    return np.maximum(bulk, tail)


def warm(draws: np.ndarray, superchains: int) -> bool:
    """The warm-up rule: whether chains whose warm-up draws so far are `draws` (chains, n, d) have forgotten
    their starts, so that their draws from now on can be kept. It reads the later half of the warm-up draws (the
    earlier half holds the transient from the start, which no test of the whole would let go of: the classic
    "discard the first half" of Gelman and Rubin) and asks its max rank-normalised R-hat to be below WARM_RHAT
    (1.1): nested R-hat (`nested_rank`) with `superchains` > 1, which the paper proposes for deciding the
    warm-up's length with many chains (a superchain whose chains share a start shows it in its mean until it has
    been forgotten), else rank-normalised split R-hat (`split_rank_rhat`, arviz-stats' numbers). Fewer than 8
    draws: False.

    Why 1.1 and not the sampling rule's 1.01: on a short window of autocorrelated draws even stationary chains
    read R² − 1 ≈ K / ESS(window) (nested) or ≈ (τ − 1) / (n / 4) (split, τ the autocorrelation time), so 1.01
    would make the warm-up as long as the sampling itself. 1.1 (Gelman and Rubin's classic "approximately
    converged" level) still holds the spread of the superchains' (chains') means in the window below about 0.46
    posterior sd (R² − 1 < 0.21, the variance of those means over the posterior's); what is left of the start
    then decays further as draws are kept, adds about that remnant × τ / n_kept sd to the kept means, and the
    sampling rule, nR̂ (split R-hat) < 1.01 on every kept draw, still has to hold before a run stops. A start
    20 sd away that is forgotten slowly (AR(1), ρ = 0.95) keeps the later half's R-hat far above 1.1 at 50 and
    75 draws (tests/test_diagnostics_nested.py)."""
    x = np.asarray(draws, dtype=float)
    n = x.shape[1]
    if n < 8:
        return False
    window = x[:, n - n // 2 :]
    rhat = nested_rank(window, superchains) if superchains > 1 else split_rank_rhat(window)
    return _worst(rhat) < WARM_RHAT


def settled(accepts: np.ndarray, target: float) -> bool:
    """The tuning rule: whether a step size adapted during warm-up (dual averaging towards the acceptance
    `target`, Hoffman & Gelman 2014, Alg. 5) has settled, given the warm-up's mean acceptance per round so far
    `accepts` (rounds,). It reads the later half, as `warm` does, in two halves, and asks each one's mean
    acceptance to be within SETTLED_ACCEPT (0.1) of the target.

    Why this reading: dual averaging moves log h by −√m/γ·H̄_m, H̄_m the running mean of target − acceptance, so
    while the step is still travelling (from a start too large or too small, or after the chains moved to where
    the curvature differs) the acceptance sits on one side of the target and the step keeps moving; once the
    acceptance averages to the target over a stretch of rounds, H̄ stops growing and the step stays where it is.
    Asking it of both halves of the window, not only of their whole, refuses a window that crosses the target on
    its way (high, then low). After the warm-up the step is frozen at the averaged value, which a settled run
    has held for the window. Fewer than 8 rounds: False."""
    a = np.asarray(accepts, dtype=float)
    n = a.shape[0]
    if n < 8:
        return False
    window = a[n - n // 2 :]
    half = window.shape[0] // 2
    parts = (window[:half], window[half:])
    return all(bool(np.isfinite(p).all()) and abs(float(np.mean(p)) - target) <= SETTLED_ACCEPT for p in parts)


def split_rank_rhat(draws: np.ndarray) -> np.ndarray:
    """Rank-normalised split R-hat per parameter (d,) of draws (chains, n, d) (Vehtari et al. 2021): each chain
    split in halves (the middle draw dropped when n is odd), the larger of the classic R̂ on the normal scores of
    the ranks (bulk) and on those of the distances from the median (tail). The same numbers as arviz-stats'
    `rhat(method="rank")` (tests/test_diagnostics_nested.py checks them equal): the warm-up rule runs in the
    coordinator's process, which imports nothing else of arviz-stats, and its import (xarray, pandas) costs that
    process more than a second, more than a small model's whole warm-up (docs/performance.md, "The warm-up check's
    cost"). Results are read where arviz-stats is loaded anyway (`diagnose`)."""
    split = _halves(np.asarray(draws, dtype=float))
    bulk, tail = _rank_scores(split)
    return np.maximum(_classic_rhat(bulk), _classic_rhat(tail))


def _rank_scores(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rank normalisation every rank-based statistic here reads (Vehtari et al. 2021): the normal scores of the
    draws (chains, n, d) (bulk) and of their distances from each parameter's median (tail, "folded")."""
    folded = np.abs(x - np.median(x.reshape(-1, x.shape[-1]), axis=0))
    return _normal_scores(x), _normal_scores(folded)


def _classic_rhat(x: np.ndarray) -> np.ndarray:
    """R̂ = √((B/W + n − 1) / n) per parameter of (chains, n, d) (Gelman et al., BDA3 eq. 11.4 with B/n the
    variance of the chain means and W the mean within-chain variance)."""
    n = x.shape[1]
    between = n * x.mean(axis=1).var(axis=0, ddof=1)
    within = x.var(axis=1, ddof=1).mean(axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.sqrt((between / within + n - 1) / n)


def _normal_scores(x: np.ndarray) -> np.ndarray:
    """Φ⁻¹((r − 3/8) / (S + 1/4)) of each draw's rank r among the S = chains · n draws of its parameter (Blom's
    offsets, average ranks for ties); NaN for a parameter with a non-finite draw."""
    import scipy.special

    chains, n, d = x.shape
    flat = x.reshape(-1, d)
    ranks = _average_ranks(flat)
    # ndtri as the faster core of norm.ppf (docs/performance.md, "Measurements behind choices in the code")
    z = scipy.special.ndtri((ranks - 0.375) / (flat.shape[0] + 0.25))  # Φ⁻¹ (norm.ppf's core)
    z[:, ~np.all(np.isfinite(flat), axis=0)] = np.nan
    return z.reshape(chains, n, d)


def _average_ranks(flat: np.ndarray) -> np.ndarray:
    """1-based ranks of each column of (S, d), ties given their average rank: scipy.stats.rankdata(method="average",
    axis=0)'s numbers, without importing scipy.stats (half a second of a coordinator process's warm-up), and faster
    (docs/performance.md, "Measurements behind choices in the code"). Every column at once: a tie run's rank is the
    mean of its first and last sorted positions, whatever order the sort left the ties in (so the faster, unstable
    sort)."""
    cols = np.ascontiguousarray(flat.T)  # (d, S): each column's values contiguous for the sort
    size = cols.shape[1]
    order = np.argsort(cols, axis=1)
    ordered = np.take_along_axis(cols, order, axis=1)
    pos = np.arange(size)
    differs = ordered[:, 1:] != ordered[:, :-1]
    edge = np.ones((cols.shape[0], 1), dtype=bool)
    first = np.maximum.accumulate(np.where(np.hstack([edge, differs]), pos, 0), axis=1)
    last = np.minimum.accumulate(np.where(np.hstack([differs, edge]), pos, size - 1)[:, ::-1], axis=1)[:, ::-1]
    ranks = np.empty(cols.shape, dtype=float)
    np.put_along_axis(ranks, order, (first + last) / 2.0 + 1.0, axis=1)
    return ranks.T


def _worst(rhat: np.ndarray) -> float:
    """The largest R-hat, a non-finite one counting as infinity (NaN without parameters)."""
    return float(np.max(np.where(np.isfinite(rhat), rhat, np.inf))) if rhat.size else float("nan")


def _finite_or_none(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None
