"""Posterior predictive checks at the sites (bayesplot's `ppc_dens_overlay`, `ppc_hist` and `ppc_stat`): replicated
data sets y_rep are drawn where the rows live, from the run's draws and the model's `predict_draw`, and summarised
there; only per-curve sums (`CurveSums`) and bin counts (`BinCounts`) travel, never a row.

Two passes for a plot: the first brings each curve's (the observed y, then each replicated data set) count, sum,
centred sum of squares, min, max and zeros, from which the bins are agreed (equal-width bins over the pooled range,
or the density's grid); the second brings each curve's counts in those bins (for a density, its linear-binning
weights at the grid points, which a Gaussian kernel then smooths here). A statistic ("stat") needs the first
pass only when it is one the sums determine exactly (mean, sd, var, min, max, prop_zero). The median and the
quantiles ("q25") come from counts too: each curve's two order statistics around the quantile are located in
QUANTILE_BINS equal bins over its range, then in that bin's own bins, up to QUANTILE_PASSES times (each pass
brings (curves, 2, bins + 1) counts: the rows below the range, then per bin); a whole-number target is exact
once a bin is at most 1 wide, a continuous one is the last bin's midpoint, within range / QUANTILE_BINS**passes
(range·2e-10) of the sample quantile (type 7, R's and numpy's default).

The replicated data sets are `draws` draws spread evenly over all the chains' draws (`spread_draws`): exactly that
many (10 for a plot by default), not "at most".

A replicated value is the model's inverse distribution function at a uniform that is a hash of (seed, the row, the
draw) — the row named by its index in the original data when the shard records it (`Shard.index`), else by its
shard and position — so a row's replicated values do not depend on how the rows are split into shards or ranges:
the same seed gives the same replicated statistics on one shard or many, in-process or on Ray.

Per group (bayesplot's `ppc_stat_grouped`, `pp_check(group=...)`): the same curves summed per label of a column of
the data as loaded (`GroupedSums`), any column (a grouping factor of the group effects or another), text labels as
given and numbers as numbers; only the statistics the sums determine (`GROUPED_STATS`), a grouped quantile would
need the bins refined per group.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..enums import Executor
from ..errors import ArgumentError
from ..models.contract import Model
from ..predictive import (
    PPC_KINDS,
    PPC_STATS,
    PpcDensity,
    PpcHistogram,
    PpcKind,
    PpcResult,
    PpcStat,
    PpcStatGrouped,
    stat_quantile,
)
from ..shards import ShardSet, label_code
from .conditional import RawColumns
from .fits import BLOCK_ROWS, DEFAULT_DRAWS, DrawsArg, Fit, executor_of, flat_draws, model_of, shards_of
from .shard_tasks import ShardRows, merge, run_at_shards

#: Replicated data sets a density or histogram overlay draws by default (bayesplot's and brms' `ndraws`).
PPC_CURVES = 10
#: Bins of a histogram by default, and grid points of a density.
HIST_BINS = 30
DENS_GRID = 512
#: A quantile statistic's bins per pass and its passes at most (module docstring).
QUANTILE_BINS = 256
QUANTILE_PASSES = 4
#: Target kinds whose values are whole numbers: their histogram bins are centred on integers.
DISCRETE_KINDS = ("binary", "count", "multiclass")

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_NO_INDEX = np.uint64(1 << 62)  # rows of a shard that does not record its original rows: (shard, position)


def _mix(z: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser, elementwise on uint64 (wrapping arithmetic): a bijective hash of 64-bit keys."""
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    return z ^ (z >> np.uint64(31))


def row_uniforms(seed: int, row_ids: np.ndarray, n_draws: int) -> np.ndarray:
    """(n, S) uniforms in (0, 1), one per row and draw, each a hash of (seed, the row's id, the draw's position):
    what a row gets does not depend on which rows it is drawn with. numpy's generators give one stream per seed,
    not a value per key, so the keys are hashed here (SplitMix64, 53 bits per uniform)."""
    with np.errstate(over="ignore"):
        key = _mix(np.asarray([seed], dtype=np.uint64) + _GOLDEN)
        rows = _mix(key ^ (np.asarray(row_ids, dtype=np.uint64) * _GOLDEN))
        draws = np.arange(1, n_draws + 1, dtype=np.uint64) * _GOLDEN
        z = _mix(rows[:, None] + draws[None, :])
    return ((z >> np.uint64(11)).astype(np.float64) + 0.5) * 2.0**-53


def row_ids(rows: ShardRows) -> np.ndarray:
    """The ids the uniforms of these rows are keyed by: their rows of the original data, else (shard, position)."""
    if rows.index is not None:
        return np.asarray(rows.index, dtype=np.uint64)
    pos = np.arange(rows.start, rows.start + rows.X.shape[0], dtype=np.uint64)
    return _NO_INDEX | (np.uint64(rows.shard) << np.uint64(40)) | pos


@dataclass(frozen=True)
class CurveSums:
    """Per curve (the observed y first, then each replicated data set): rows, Σ y, the centred Σ (y − ȳ)², min, max
    and the count of zeros; two shards' sums merge exactly (the centred sums by Chan et al.'s rule)."""

    n: int
    total: np.ndarray
    m2: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    zeros: np.ndarray

    @classmethod
    def of(cls, curves: np.ndarray) -> CurveSums:
        """The sums of curves (n rows, K curves)."""
        n, k = curves.shape
        if n == 0:
            return cls(0, np.zeros(k), np.zeros(k), np.full(k, np.inf), np.full(k, -np.inf), np.zeros(k, np.int64))
        total = curves.sum(axis=0)
        m2 = np.sum((curves - total / n) ** 2, axis=0)
        zeros = np.count_nonzero(curves == 0.0, axis=0).astype(np.int64)
        return cls(n, total, m2, curves.min(axis=0), curves.max(axis=0), zeros)

    def __add__(self, o: CurveSums) -> CurveSums:
        if self.n == 0:
            return o
        if o.n == 0:
            return self
        n = self.n + o.n
        delta = o.total / o.n - self.total / self.n
        m2 = self.m2 + o.m2 + delta * delta * (self.n * o.n / n)
        lo, hi = np.minimum(self.lo, o.lo), np.maximum(self.hi, o.hi)
        return CurveSums(n, self.total + o.total, m2, lo, hi, self.zeros + o.zeros)

    def stat(self, name: str) -> np.ndarray:
        """Statistic `name` of every curve (K,): mean, sd and var (n − 1 in the denominator, as R's), min, max, or
        prop_zero (the share of rows equal to 0)."""
        n = self.n
        if name == "mean":
            return self.total / n
        if name in ("sd", "var"):
            var = self.m2 / (n - 1) if n > 1 else np.full_like(self.m2, np.nan)
            return np.sqrt(var) if name == "sd" else var
        if name == "min":
            return self.lo
        if name == "max":
            return self.hi
        if name == "prop_zero":
            return self.zeros / n
        raise ValueError(f"unknown statistic {name!r}")


@dataclass(frozen=True)
class BinCounts:
    """Per curve, the rows in each bin of the agreed edges, (K, B) integers, or their linear-binning weights at the
    agreed grid points, (K, G) floats: added up over the shards."""

    counts: np.ndarray

    def __add__(self, o: BinCounts) -> BinCounts:
        return BinCounts(self.counts + o.counts)


def bin_counts(curves: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """(K, B) counts of each curve's values (columns of curves (n, K)) in the bins of `edges` (B + 1, increasing):
    bin b holds edges[b] ≤ v < edges[b + 1], the last bin its right edge too (as `numpy.histogram`)."""
    n, k = curves.shape
    b = edges.shape[0] - 1
    idx = np.clip(np.searchsorted(edges, curves, side="right") - 1, 0, b - 1)
    flat = (idx + b * np.arange(k)[None, :]).ravel()
    return np.bincount(flat, minlength=k * b).reshape(k, b).astype(np.int64)


def linear_binning(curves: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """(K, G) weights of each curve's values (columns of curves (n, K)) at the equally spaced `grid` (G,), covering
    them: a value between two grid points is split between them in proportion to its nearness (linear binning, as R's
    `density` bins before it smooths), so a binned density's error is of the order of the spacing squared."""
    n, k = curves.shape
    g = grid.shape[0]
    t = (curves - grid[0]) / (grid[1] - grid[0])
    i = np.clip(np.floor(t).astype(np.intp), 0, g - 2)
    frac = np.clip(t - i, 0.0, 1.0)
    at = i + g * np.arange(k)[None, :]
    w = np.bincount(at.ravel(), weights=(1.0 - frac).ravel(), minlength=k * g)
    w += np.bincount((at + 1).ravel(), weights=frac.ravel(), minlength=k * g)
    return w.reshape(k, g)


@dataclass(frozen=True)
class RangeCounts:
    """Per curve and target (K, T), the rows below the target's range, then in each of its bins, (K, T, B + 1)
    integers: added up over the shards."""

    counts: np.ndarray

    def __add__(self, o: RangeCounts) -> RangeCounts:
        return RangeCounts(self.counts + o.counts)


def range_counts(curves: np.ndarray, start: np.ndarray, width: np.ndarray, bins: int) -> np.ndarray:
    """(K, T, bins + 1) counts of each curve's values (columns of curves (n, K)) against T ranges per curve (`start`
    and bin `width`, (K, T)): slot 0 the values below start, slot 1 + b those in [start + b·width, start + (b+1)·width);
    values at or past the range's end are not counted."""
    n, k = curves.shape
    t = k * start.shape[1]
    pos = (curves[:, :, None] - start[None]) / width[None]  # (n, K, T)
    slot = np.where(pos < 0, 0, np.floor(pos) + 1)
    keep = slot <= bins
    flat = (slot + (bins + 1) * np.arange(t).reshape(k, -1)[None]).astype(np.int64)
    return np.bincount(flat[keep], minlength=t * (bins + 1)).reshape(k, -1, bins + 1).astype(np.int64)


def spread_draws(draws: np.ndarray, count: DrawsArg) -> np.ndarray:
    """(chains, draws, d) → (S, d): `count` draws (all of them if fewer, or "all") spread evenly over the chains'
    draws in chain-major order, the first and the last among them."""
    flat = flat_draws(draws)
    if isinstance(count, str) and count == "all":
        return flat
    if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or count < 1:
        raise ArgumentError(("draws",), f"draws must be 'all' or an integer >= 1, got {count!r}")
    total = flat.shape[0]
    if total == 0:
        raise ArgumentError(("draws",), "the run has no draws yet")
    if count >= total:
        return flat
    at = np.round(np.linspace(0, total - 1, int(count))).astype(np.intp)
    return np.ascontiguousarray(flat[at])


@dataclass(frozen=True)
class ReplicateTask:
    """Replicated data sets of one model at a shard's rows: y_rep (rows × S) from the draws (S, d) named `names`,
    in blocks of rows. With `edges` None: the curves' `CurveSums`; else their `BinCounts`: counts in the bins of
    `edges`, or (`grid`) linear-binning weights at the grid points `edges`."""

    model: Model
    draws: np.ndarray
    names: tuple[str, ...]
    seed: int
    edges: np.ndarray | None = None
    grid: bool = False
    #: a quantile's pass: each curve's ranges (start, bin width), (K, T) each, and the bins per range
    ranges: tuple[np.ndarray, np.ndarray] | None = None
    bins: int = QUANTILE_BINS

    def summarise(self, curves: np.ndarray) -> CurveSums | BinCounts | RangeCounts:
        """The record of some rows' curves (n, K)."""
        if self.ranges is not None:
            return RangeCounts(range_counts(curves, self.ranges[0], self.ranges[1], self.bins))
        if self.edges is None:
            return CurveSums.of(curves)
        if self.grid:
            return BinCounts(linear_binning(curves, self.edges))
        return BinCounts(bin_counts(curves, self.edges))

    @property
    def models(self) -> tuple[Model, ...]:
        return (self.model,)

    def curves(self, rows: ShardRows, a: int, b: int) -> np.ndarray:
        """(b − a, 1 + S): the observed y of rows a..b, then one replicated value per draw."""
        X, y = rows.X[a:b], rows.y[a:b]
        S = self.draws.shape[0]
        x = self.model.evaluation_x(X, y, self.draws, self.names, self.seed)
        ids = row_ids(rows)[a:b]
        yrep = np.asarray(self.model.predict_draw(X, x, row_uniforms(self.seed, ids, S)), dtype=np.float64)
        if yrep.shape != (X.shape[0], S):
            raise ArgumentError(
                ("result", "model"),
                f"model {type(self.model).__name__}'s predict_draw gave shape {yrep.shape} for u of shape "
                f"{(X.shape[0], S)}: replicated data need one uniform per row and draw (see docs/models.md)",
            )
        return np.column_stack([np.asarray(y, dtype=np.float64), yrep])

    def run(self, rows: tuple[ShardRows, ...]) -> CurveSums | BinCounts | RangeCounts:
        r = rows[0]
        n, K = r.X.shape[0], 1 + self.draws.shape[0]
        parts = [self.summarise(self.curves(r, a, min(n, a + BLOCK_ROWS))) for a in range(0, n, BLOCK_ROWS)]
        return merge(parts) if parts else self.summarise(np.empty((0, K)))


# ---------------------------------------------------------------------------------------------- the check


def hist_edges(lo: float, hi: float, bins: int, discrete: bool) -> np.ndarray:
    """`bins` equal-width bins over [lo, hi]; for whole numbers, bins of a whole width centred on integers (one per
    value while they fit in `bins`)."""
    if discrete:
        width = max(1, math.ceil((hi - lo + 1) / bins))
        count = math.ceil((hi - lo + 1) / width)
        return lo - 0.5 + width * np.arange(count + 1, dtype=np.float64)
    if hi <= lo:
        lo, hi = lo - 0.5, hi + 0.5
    return np.linspace(lo, hi, bins + 1)


def scott_bandwidth(sums: CurveSums) -> np.ndarray:
    """Scott's rule per curve, 1.06 σ n^(−1/5) (σ with n in the denominator, as arviz-stats' `bw_scott`)."""
    sd = np.sqrt(np.maximum(sums.m2, 0.0) / max(sums.n, 1))
    return 1.06 * sd * max(sums.n, 1) ** -0.2


def density_grid(sums: CurveSums, bandwidth: np.ndarray) -> np.ndarray:
    """DENS_GRID equally spaced points covering every curve's range and three of its bandwidths either side."""
    lo = float(np.min(sums.lo - 3.0 * bandwidth))
    hi = float(np.max(sums.hi + 3.0 * bandwidth))
    if hi <= lo:
        lo, hi = lo - 0.5, hi + 0.5
    return np.linspace(lo, hi, DENS_GRID)


def binned_density(weights: np.ndarray, grid: np.ndarray, bandwidth: np.ndarray) -> np.ndarray:
    """Kernel densities (K, G) from linear-binning weights (K, G): each curve's relative weights smoothed with a
    Gaussian of its bandwidth (`scipy.ndimage.gaussian_filter1d`, zero beyond the grid), as R's binned KDE does."""
    from scipy.ndimage import gaussian_filter1d

    step = float(grid[1] - grid[0])
    out = np.empty(weights.shape, dtype=np.float64)
    for k, (w, h) in enumerate(zip(weights, bandwidth)):
        f = w / (max(w.sum(), 1.0) * step)
        out[k] = gaussian_filter1d(f, h / step, mode="constant") if h > 0 else f
    return out


def sample_quantiles(
    task: ReplicateTask, jobs: list[tuple[Any, ...]], exe: Executor, sums: CurveSums, q: float, discrete: bool
) -> np.ndarray:
    """The `q` quantile (type 7) of every curve (K,), from counts in bins the shards refine (module docstring)."""
    n, K = sums.n, sums.lo.shape[0]
    h = (n - 1) * q
    j0 = int(math.floor(h))
    ranks = np.array([j0, min(j0 + 1, n - 1)], dtype=np.float64)[None, :].repeat(K, axis=0)  # (K, 2), 0-based
    lo = np.repeat(sums.lo[:, None], 2, axis=1).astype(np.float64)
    hi = np.repeat(sums.hi[:, None], 2, axis=1).astype(np.float64)
    B = QUANTILE_BINS
    if discrete:
        start, span = lo - 0.5, hi - lo + 1.0
    else:  # the range's end just past the largest value: every value is inside
        span = (hi - lo) * (1.0 + 1e-9) + np.maximum(np.abs(hi), 1.0) * 1e-12
        start = lo.copy()
    width = span / B
    for step in range(QUANTILE_PASSES):
        part = dataclasses.replace(task, ranges=(start, width), bins=B)
        counts = merge(run_at_shards(part, jobs, exe)).counts  # (K, 2, B + 1)
        cum = counts[..., :1] + np.cumsum(counts[..., 1:], axis=-1)  # rows below each bin's end
        past = cum > ranks[..., None]
        b = np.where(past.any(axis=-1), np.argmax(past, axis=-1), B - 1)
        start = start + b * width
        if discrete and np.all(width <= 1.0):
            break
        if step == QUANTILE_PASSES - 1:
            break
        width = width / B
    values = np.ceil(start) if discrete else start + width / 2
    values = np.clip(values, lo, hi)
    return values[:, 0] + (h - j0) * (values[:, 1] - values[:, 0])


def _check(kind: Any, stat: Any, bins: Any, seed: Any) -> None:
    if kind not in PPC_KINDS:
        raise ArgumentError(("kind",), f"kind must be one of {list(PPC_KINDS)}, got {kind!r}")
    if kind == "stat" and stat not in PPC_STATS and stat_quantile(stat) is None:
        raise ArgumentError(
            ("stat",),
            f"stat must be one of {list(PPC_STATS)} or a quantile 'q<percent>' such as 'q2.5', got {stat!r}",
        )
    if bins is not None and (isinstance(bins, bool) or not isinstance(bins, (int, np.integer)) or bins < 1):
        raise ArgumentError(("bins",), f"bins must be an integer >= 1, got {bins!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2**63:
        raise ArgumentError(("seed",), f"seed must be an integer >= 0, got {seed!r}")


def pp_check(
    result: Fit,
    kind: PpcKind = "dens",
    stat: str = "mean",
    *,
    draws: DrawsArg | None = None,
    bins: int | None = None,
    seed: int = 0,
    executor: Executor | str | None = None,
    shards: ShardSet | None = None,
    group: str | None = None,
) -> PpcResult:
    """A posterior predictive check on the rows the run was fitted on, computed where they are (see the module
    docstring): "dens" (`PpcDensity`), "hist" (`PpcHistogram`, `bins` bins, default 30) or "stat" (`PpcStat` of
    `stat`: one of PPC_STATS, or a quantile "q<percent>"). `draws`: how many replicated data sets, spread evenly over
    the chains' draws (default 10 for a plot, 1,000 for a statistic; "all": every draw). Each result has `.plot()`
    (matplotlib), its x axis named after the response (a formula's left-hand side, else "y"). `group` (kind "stat"
    only): the statistic per label of that column of the data (`PpcStatGrouped`, `pp_check_grouped`)."""
    if group is not None:
        if kind != "stat":
            raise ArgumentError(("group",), f"group= gives a statistic per group: it needs kind='stat', got {kind!r}")
        return pp_check_grouped(result, group, stat, draws=draws, seed=seed, executor=executor)
    _check(kind, stat, bins, seed)
    model = model_of(result, "predict_draw")
    if model.target_kind == "vector":
        raise ArgumentError(("result",), "pp_check needs a scalar target; this model's observations are vectors")
    data = shards if shards is not None else shards_of(result)
    count = draws if draws is not None else (DEFAULT_DRAWS if kind == "stat" else PPC_CURVES)
    theta = spread_draws(result.draws, count)
    task = ReplicateTask(model, theta, tuple(result.param_names), int(seed))
    response = response_name(model)
    jobs = [(s,) for s in data]
    exe = executor_of(result, executor)
    sums: CurveSums = merge(run_at_shards(task, jobs, exe))
    if sums.n == 0:
        raise ArgumentError(("result",), "the run's shards hold no rows")
    discrete = model.target_kind in DISCRETE_KINDS
    if kind == "stat":
        q = stat_quantile(stat)
        values = sums.stat(stat) if q is None else sample_quantiles(task, jobs, exe, sums, q, discrete)
        return PpcStat(stat, float(values[0]), values[1:], sums.n, response=response)
    if kind == "hist":
        edges = hist_edges(float(sums.lo.min()), float(sums.hi.max()), int(bins or HIST_BINS), discrete)
    else:
        bandwidth = scott_bandwidth(sums)
        edges = density_grid(sums, bandwidth)
    binned = dataclasses.replace(task, edges=edges, grid=kind == "dens")
    counts: BinCounts = merge(run_at_shards(binned, jobs, exe))
    if kind == "hist":
        return PpcHistogram(edges, counts.counts[0], counts.counts[1:], sums.n, response=response)
    dens = binned_density(counts.counts, edges, bandwidth)
    return PpcDensity(edges, dens[0], dens[1:], bandwidth, sums.n, response=response)


def response_name(model: Any) -> str:
    """The response's name: a formula's left-hand side, else "y"."""
    source = getattr(model, "source", None)
    name = getattr(source, "response", None) if source is not None else None
    return name if isinstance(name, str) and name else "y"


# ---------------------------------------------------------------------------------------- per group


#: The statistics a grouped check offers: those the per-group sums determine exactly.
GROUPED_STATS: tuple[str, ...] = ("mean", "sd", "var", "min", "max", "prop_zero")


@dataclass(frozen=True)
class GroupedSums:
    """Per label of the grouping column (its raw value: a number or a text label's `label_code`), the `CurveSums`
    of the observed y and each replicated data set over that group's rows."""

    sums: dict[float, CurveSums]

    def __add__(self, o: GroupedSums) -> GroupedSums:
        out = dict(self.sums)
        for key, value in o.sums.items():
            out[key] = out[key] + value if key in out else value
        return GroupedSums(out)


@dataclass(frozen=True)
class GroupedTask:
    """`ReplicateTask`'s curves at a shard's rows, summed per value of the table's column at `position`."""

    replicate: ReplicateTask
    position: int

    @property
    def models(self) -> tuple[Any, ...]:
        return (self.replicate.model, RawColumns())

    def run(self, rows: tuple[ShardRows, ...]) -> GroupedSums:
        fitted, raw = rows
        labels = raw.X[:, self.position]
        out: dict[float, CurveSums] = {}
        for a in range(0, fitted.X.shape[0], BLOCK_ROWS):
            b = min(fitted.X.shape[0], a + BLOCK_ROWS)
            curves = self.replicate.curves(fitted, a, b)
            block = labels[a:b]
            for key in np.unique(block):
                part = CurveSums.of(curves[block == key])
                k = float(key)
                out[k] = out[k] + part if k in out else part
        return GroupedSums(out)


def data_columns(model: Model) -> tuple[str, ...] | None:
    """The columns of the data as loaded (a formula's every column, or the names a model reads), or None."""
    design = getattr(model, "design", None)
    if design is not None:
        return tuple(design.columns)
    source = getattr(model, "source", None)
    for reader in (source, model):
        cols = getattr(reader, "columns", None)
        if cols:
            return tuple(cols)
    return None


def _text_labels(model: Model, column: str) -> dict[float, str]:
    """label_code → label for the text labels the run knows of `column` (a category's levels, a grouping column's
    labels)."""
    known: list[str] = []
    design = getattr(model, "design", None)
    if design is not None and column in getattr(design, "text", ()):
        known += list(dict(design.levels).get(column, ()))
    known += list(dict(getattr(model, "levels", None) or ()).get(column, ()))
    return {label_code(v): v for v in known}


def _label(value: float, text: dict[float, str]) -> Any:
    if value in text:
        return text[value]
    return int(value) if float(value).is_integer() else float(value)


def pp_check_grouped(
    result: Fit,
    group: str,
    stat: str = "mean",
    *,
    draws: DrawsArg | None = None,
    seed: int = 0,
    executor: Any = None,
) -> PpcStatGrouped:
    """The statistic `stat` of the observed y and of each replicated data set, per label of the data's column
    `group`, computed where the rows are (module docstring). Errors name the argument (group, stat)."""
    model = model_of(result, "predict_draw")
    if model.target_kind == "vector":
        raise ArgumentError(("result",), "pp_check needs a scalar target; this model's observations are vectors")
    if stat not in GROUPED_STATS:
        raise ArgumentError(
            ("stat",),
            f"a grouped check's stat must be one of {list(GROUPED_STATS)} (sums per group; no grouped quantiles), "
            f"got {stat!r}",
        )
    cols = data_columns(model)
    if cols is None or not isinstance(group, str) or group not in cols:
        raise ArgumentError(
            ("group",),
            f"group must name a column of the run's data{f' {list(cols)}' if cols else ''}, got {group!r}",
        )
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2**63:
        raise ArgumentError(("seed",), f"seed must be an integer >= 0, got {seed!r}")
    theta = spread_draws(result.draws, draws if draws is not None else DEFAULT_DRAWS)
    task = GroupedTask(ReplicateTask(model, theta, tuple(result.param_names), int(seed)), cols.index(group))
    jobs = [(s, s) for s in shards_of(result)]  # the shard read once, seen by the model and as loaded
    parts = run_at_shards(task, jobs, executor_of(result, executor))
    total = parts[0]
    for p in parts[1:]:
        total = total + p
    if not total.sums:
        raise ArgumentError(("result",), "the run's shards hold no rows")
    text = _text_labels(model, group)
    keys = sorted(total.sums, key=lambda k: (k not in text, text.get(k, ""), k))
    values = np.stack([total.sums[k].stat(stat) for k in keys])  # (G, 1 + S)
    return PpcStatGrouped(
        stat,
        group,
        tuple(_label(k, text) for k in keys),
        values[:, 0],
        values[:, 1:],
        np.array([total.sums[k].n for k in keys]),
        response=response_name(model),
    )
