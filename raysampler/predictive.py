"""What a posterior predictive check gives back (`result.pp_check`, `raysampler.evaluation.ppc`, the SDK's
`RunHandle.pp_check`): a density overlay, histograms or a test statistic of the observed y against replicated data
sets, each with its matplotlib plot (bayesplot's `ppc_dens_overlay`, `ppc_hist`, `ppc_stat`). numpy only, so the SDK
gives the same objects without the engine."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, get_args

import numpy as np

if TYPE_CHECKING:
    from matplotlib.axes import Axes

PpcKind = Literal["dens", "hist", "stat"]
PPC_KINDS: tuple[str, ...] = get_args(PpcKind)
#: The test statistics `kind="stat"` offers: the first six are determined by sums over the rows, so the sites' parts
#: add up; the median and the quantiles ("q25": the 25 % quantile) come from counts in bins the sites refine
#: (`raysampler.evaluation.ppc`). Python takes any "q<percent>" (0 < percent < 100, e.g. "q2.5"); REST these.
PpcStatName = Literal["mean", "sd", "var", "min", "max", "prop_zero", "median", "q5", "q10", "q25", "q75", "q90", "q95"]
PPC_STATS: tuple[str, ...] = get_args(PpcStatName)


def stat_quantile(name: object) -> float | None:
    """The probability of a quantile statistic ("median" 0.5, "q25" 0.25, "q2.5" 0.025), else None."""
    if name == "median":
        return 0.5
    if not isinstance(name, str) or not name.startswith("q"):
        return None
    try:
        pct = float(name[1:])
    except ValueError:
        return None
    return pct / 100 if 0 < pct < 100 and name[1:].replace(".", "", 1).isdigit() else None


def _short(kind: str, n: int, sets: int, response: str, extra: str) -> str:
    return f"{kind}(response={response!r}, n={n}, replicated={sets}{extra})"


def _plt() -> Any:
    try:
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover - matplotlib is in the plot extra
        raise ImportError('plotting a check needs matplotlib: pip install "raysampler[plot]"') from None
    return plt


def _axes(ax: Axes | None) -> Axes:
    if ax is not None:
        return ax
    return _plt().subplots(figsize=(6.4, 4.0))[1]


#: Colours of the plots: the observed data dark, the replicated data light (as bayesplot draws them).
Y_COLOUR, YREP_COLOUR = "#011f4b", "#6497b1"


@dataclass(frozen=True)
class PpcDensity:
    """A density overlay (`ppc_dens_overlay`): the observed y's density and each replicated data set's on one grid
    (`grid` (G,), `observed` (G,), `replicated` (S, G)); each a Gaussian kernel density of the linearly binned
    values, with bandwidth by Scott's rule from the curve's own sd (`bandwidth`: the observed's, then each
    replicated's)."""

    grid: np.ndarray
    observed: np.ndarray
    replicated: np.ndarray
    bandwidth: np.ndarray
    n: int
    kind: Literal["dens"] = "dens"
    response: str = "y"

    def __repr__(self) -> str:
        grid = f", grid=[{self.grid[0]:.4g}, {self.grid[-1]:.4g}] ({self.grid.size} points)"
        return _short("PpcDensity", self.n, self.replicated.shape[0], self.response, grid)

    def plot(self, ax: Axes | None = None) -> Axes:
        """The replicated densities as thin light lines, the observed as a thick dark one; returns the Axes."""
        ax = _axes(ax)
        for k, d in enumerate(self.replicated):
            ax.plot(self.grid, d, color=YREP_COLOUR, lw=0.8, alpha=0.7, label="y_rep" if k == 0 else None)
        ax.plot(self.grid, self.observed, color=Y_COLOUR, lw=2.0, label="y")
        ax.set_xlabel(self.response)
        ax.set_ylabel("density")
        ax.set_title(f"Posterior predictive density: {self.replicated.shape[0]} replicated data sets, {self.n} rows")
        ax.legend()
        return ax


@dataclass(frozen=True)
class PpcHistogram:
    """Histograms (`ppc_hist`) of the observed y and of each replicated data set on the same bins: `edges` (B + 1,),
    `observed` (B,) and `replicated` (S, B) counts."""

    edges: np.ndarray
    observed: np.ndarray
    replicated: np.ndarray
    n: int
    kind: Literal["hist"] = "hist"
    response: str = "y"

    def __repr__(self) -> str:
        bins = f", bins={self.observed.size} over [{self.edges[0]:.4g}, {self.edges[-1]:.4g}]"
        return _short("PpcHistogram", self.n, self.replicated.shape[0], self.response, bins)

    def plot(self, ax: Axes | None = None) -> Axes:
        """The observed counts as bars, each replicated data set's as a light step line over them."""
        ax = _axes(ax)
        ax.stairs(self.observed, self.edges, fill=True, color=Y_COLOUR, alpha=0.85, label="y")
        for k, c in enumerate(self.replicated):
            ax.stairs(c, self.edges, color=YREP_COLOUR, lw=1.0, alpha=0.8, label="y_rep" if k == 0 else None)
        ax.set_xlabel(self.response)
        ax.set_ylabel("rows")
        ax.set_title(f"Posterior predictive histograms: {self.replicated.shape[0]} replicated data sets")
        ax.legend()
        return ax


@dataclass(frozen=True)
class PpcStat:
    """A test statistic (`ppc_stat`): T of the observed y and of each replicated data set (`replicated` (S,)), and
    the posterior predictive p-value P(T(y_rep) ≥ T(y))."""

    stat: str
    observed: float
    replicated: np.ndarray
    n: int
    kind: Literal["stat"] = "stat"
    response: str = "y"

    def __repr__(self) -> str:
        t = f", stat={self.stat!r}, observed={self.observed:.4g}, p_value={self.p_value:.3f}"
        return _short("PpcStat", self.n, self.replicated.shape[0], self.response, t)

    @property
    def p_value(self) -> float:
        return float(np.mean(self.replicated >= self.observed))

    def plot(self, ax: Axes | None = None, bins: int = 30) -> Axes:
        """T(y_rep) as a histogram, T(y) as a vertical line."""
        ax = _axes(ax)
        ax.hist(self.replicated, bins=bins, color=YREP_COLOUR, edgecolor="white", label=f"T(y_rep), T = {self.stat}")
        ax.axvline(self.observed, color=Y_COLOUR, lw=2.5, label="T(y)")
        ax.set_xlabel(f"{self.stat}({self.response})")
        ax.set_ylabel("replicated data sets")
        ax.set_title(f"Posterior predictive {self.stat}: p = {self.p_value:.3f}")
        ax.legend()
        return ax


@dataclass(frozen=True)
class PpcStatGrouped:
    """A test statistic per group (`ppc_stat_grouped`): for each label of the grouping column `group`, T of the
    observed y in that group (`observed` (G,)) and of each replicated data set there (`replicated` (G, S)), the
    group's rows (`n` (G,)) and its posterior predictive p-value P(T(y_rep) ≥ T(y))."""

    stat: str
    group: str
    labels: tuple[Any, ...]
    observed: np.ndarray
    replicated: np.ndarray
    n: np.ndarray
    kind: Literal["stat_grouped"] = "stat_grouped"
    response: str = "y"

    def __repr__(self) -> str:
        t = f", stat={self.stat!r}, group={self.group!r}, groups={len(self.labels)}"
        return _short("PpcStatGrouped", int(np.sum(self.n)), self.replicated.shape[1], self.response, t)

    @property
    def p_values(self) -> np.ndarray:
        """P(T(y_rep) ≥ T(y)) per group (G,)."""
        return np.mean(self.replicated >= self.observed[:, None], axis=1)

    def table(self) -> Any:
        """One row per group: its rows, T(y), the mean and central 95 % interval of T(y_rep), and the p-value."""
        import pandas as pd

        lo, hi = np.quantile(self.replicated, [0.025, 0.975], axis=1)
        return pd.DataFrame(
            {
                "n": self.n,
                "observed": self.observed,
                "replicated_mean": self.replicated.mean(axis=1),
                "replicated_q2.5": lo,
                "replicated_q97.5": hi,
                "p_value": self.p_values,
            },
            index=pd.Index(list(self.labels), name=self.group),
        )

    def plot(self, ax: Axes | None = None, bins: int = 20, max_groups: int = 12) -> Any:
        """One small histogram of T(y_rep) per group with T(y) as a line (the first `max_groups` groups); `ax`, if
        given, is a sequence of axes, one per group shown. Returns the axes."""
        plt = _plt()
        shown = min(len(self.labels), max_groups)
        if ax is None:
            cols = min(4, shown)
            rows = -(-shown // cols)
            _, grid = plt.subplots(rows, cols, figsize=(3 * cols, 2.4 * rows), squeeze=False)
            axes = list(grid.ravel())
            for extra in axes[shown:]:
                extra.set_visible(False)
        else:
            axes = list(ax)
        for g in range(shown):
            a = axes[g]
            a.hist(self.replicated[g], bins=bins, color=YREP_COLOUR, edgecolor="white")
            a.axvline(self.observed[g], color=Y_COLOUR, lw=2)
            a.set_title(f"{self.group} = {self.labels[g]} (p = {self.p_values[g]:.2f})", fontsize=9)
            a.set_xlabel(f"{self.stat}({self.response})", fontsize=8)
        return axes[:shown]


PpcResult = PpcDensity | PpcHistogram | PpcStat | PpcStatGrouped
