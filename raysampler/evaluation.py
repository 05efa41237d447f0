"""Checks of a fit where the data are: predictions, calibration metrics, PSIS-LOO and model comparison.

Every check is a sum over rows, so each shard computes its share where its rows live (a Ray task placed on the
shard's site, or in this process) from the posterior draws it is sent, and returns a few sums as a named record
(`LooPart`, `ClassificationPart`, `RegressionPart`, `PairPart`); the caller adds them up exactly. Rows never leave
their shard: only those sums travel (and, for `loo(pointwise=True)`, one elpd and one Pareto k per row).

Draws: by default at most `DEFAULT_DRAWS` posterior draws, thinned evenly within each chain, so a shard's work and
memory are bounded by S (the log-likelihood is held BLOCK_ROWS rows × S at a time); `draws="all"` uses every stored
draw. The Pareto smoothing is arviz-stats' own (`arviz_stats.base.array_stats.psislw`), run per observation on the
shard; the relative efficiency r_eff is computed once from the thinned posterior, as `arviz_stats.loo` does. On Ray a
shard's rows may be cut into ranges, one task each, to use every CPU of its site (`run_at_shards`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

import numpy as np
from scipy.special import logsumexp

from .enums import Executor, parse
from .errors import ArgumentError, Failure, FailureKind, WorkerFailed
from .models.contract import Model, defines, natural_values
from .shards import Shard, ShardSet, as_shard_set, encode_rows

if TYPE_CHECKING:
    import xarray as xr

    from .models.contract import ParamBlock

#: Posterior draws a check uses by default (thinned evenly within each chain); `draws="all"` uses every one.
DEFAULT_DRAWS = 1000
#: Rows a shard evaluates at once: the log-likelihood block held in memory is BLOCK_ROWS × S.
BLOCK_ROWS = 4096
#: The Pareto k above which PSIS-LOO's estimate for an observation is unreliable (its row comes back by index).
K_THRESHOLD = 0.7
#: Central predictive intervals whose coverage `evaluate` counts for real-valued and count targets.
COVERAGE_PROBS = (0.5, 0.9)
PredictKind = Literal["mean", "draws", "interval"]
DrawsArg = int | Literal["all"]


# ----------------------------------------------------------------------------------------------- draws


class Fit(Protocol):
    """What a check reads of a run (a `Result`): its draws (chains, draws, d), parameter layout, the model bound to
    the data, the shards it was fitted on, and the executor it ran on."""

    draws: np.ndarray
    model: Model | None
    data: ShardSet | None
    executor: str | None

    @property
    def param_blocks(self) -> tuple[ParamBlock, ...]: ...

    @property
    def param_names(self) -> list[str]: ...


def thin_draws(draws: np.ndarray, count: DrawsArg = DEFAULT_DRAWS) -> np.ndarray:
    """(chains, draws, d) → the same chains with at most `count` draws in all, every k-th draw of each chain (k the
    same for all chains); "all" keeps them all. ArgumentError naming `draws` for anything else."""
    if isinstance(count, str) and count == "all":
        return draws
    if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or count < 1:
        raise ArgumentError(("draws",), f"draws must be 'all' or an integer >= 1, got {count!r}")
    chains, n = draws.shape[0], draws.shape[1]
    if n == 0:
        raise ArgumentError(("draws",), "the run has no draws yet")
    step = max(1, math.ceil(chains * n / int(count)))
    return draws[:, ::step]


def _flat(draws: np.ndarray) -> np.ndarray:
    """(chains, S, d) → (chains·S, d), chain-major (the order arviz flattens (chain, draw) in)."""
    return np.ascontiguousarray(draws.reshape(-1, draws.shape[-1]))


def uniforms(n: int, seed: int) -> np.ndarray:
    """The per-draw uniforms predictive draws invert at (`Model.predict_draw`), from `seed`."""
    return np.random.default_rng([seed, 0x9E3779B9]).uniform(1e-12, 1.0 - 1e-12, size=n)


def _model_of(result: Fit, *methods: str) -> Model:
    """The result's bound model, which must define `methods` (ArgumentError under ("result", ...) otherwise)."""
    if result.model is None:
        raise ArgumentError(
            ("result",),
            "this result does not carry its model (a result read back from stored draws): checks need the "
            "bound model; use a result of rs.sample, or the service's endpoints",
        )
    missing = [m for m in methods if not defines(result.model, m)]
    if missing:
        raise ArgumentError(
            ("result", "model"),
            f"model {type(result.model).__name__} does not define {', '.join(missing)}, which this check needs "
            "(see docs/models.md: the optional methods log_likelihood, predict_mean, predict_draw)",
        )
    return result.model


# ----------------------------------------------------------------------------------------------- predictions


def predict(
    result: Fit,
    X: Any,
    kind: PredictKind = "mean",
    *,
    draws: DrawsArg = DEFAULT_DRAWS,
    prob: float = 0.9,
    seed: int = 0,
) -> np.ndarray:
    """The posterior predictive at new rows X (n, p), as the run's model reads them: "mean" E[y | x] (n,), or the
    class probabilities (n, C) for a multiclass model; "draws" (S, n) predictive draws; "interval" (n, 2), the
    central `prob` interval of the predictive draws. Errors name the argument (X, kind, draws, prob)."""
    kind = _check_kind(kind)
    model = _model_of(result, "predict_mean" if kind == "mean" else "predict_draw")
    Xn = new_rows(model, X, "X")
    draws_ = _flat(thin_draws(result.draws, draws))
    theta = model.evaluation_x(Xn, np.zeros(Xn.shape[0]), draws_, tuple(result.param_names), seed)
    if kind == "mean":
        return mean_prediction(model, Xn, theta)
    if model.target_kind in ("multiclass", "vector") and kind == "interval":
        raise ArgumentError(
            ("kind",), f"kind='interval' needs a scalar ordered target; this model's is {model.target_kind}"
        )
    if not (isinstance(prob, (int, float)) and 0.0 < prob < 1.0):
        raise ArgumentError(("prob",), f"prob must be a number in (0, 1), got {prob!r}")
    ydraw = model.predict_draw(Xn, theta, uniforms(theta.shape[0], seed)).T  # (S, n)
    if kind == "draws":
        return ydraw
    lo, hi = np.quantile(ydraw, [(1.0 - prob) / 2.0, (1.0 + prob) / 2.0], axis=0)
    return np.column_stack([lo, hi])


def _check_kind(kind: Any) -> PredictKind:
    if kind not in ("mean", "draws", "interval"):
        raise ArgumentError(("kind",), f"kind must be 'mean', 'draws' or 'interval', got {kind!r}")
    return kind


def mean_prediction(model: Model, X: np.ndarray, theta: np.ndarray) -> np.ndarray:
    """E[y | x] averaged over the draws theta (S, d), in row blocks: (n,) or (n, C)."""
    parts = [model.predict_mean(X[a : a + BLOCK_ROWS], theta).mean(axis=1) for a in range(0, X.shape[0], BLOCK_ROWS)]
    return np.concatenate(parts) if parts else np.empty((0,))


def new_rows(model: Model, X: Any, argname: str) -> np.ndarray:
    """New rows as the bound model reads them; ArgumentError naming `argname` when their width does not match. A
    model holding a per-row input as an array over the training rows cannot take new rows (give it as a column)."""
    from .models.common import RowValues

    local = model.has_local_params()
    reader = getattr(model, "source", None) if local else model  # group effects read rows as loaded
    try:
        arr = np.asarray(encode_rows(X, getattr(reader, "columns", None), argname), dtype=np.float64)
    except (TypeError, ValueError):
        raise ArgumentError((argname,), f"{argname} must be a 2-D array of numbers (or group labels)") from None
    if arr.ndim != 2:
        raise ArgumentError((argname,), f"{argname} must be a 2-D array (rows, columns), got shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise ArgumentError((argname,), f"{argname} contains NaN or infinite values")
    extra = getattr(model, "_extra", None)
    if not local and extra and isinstance(getattr(model, extra, None), RowValues):
        raise ArgumentError(
            (argname,),
            f"the model's {extra} is an array over the training rows, so new rows have none: fit with "
            f"{extra}='<column name>' to predict",
        )
    want = getattr(reader, "n_features", None)
    if model.target_kind != "vector" and want is not None and arr.shape[1] != want:
        cols = getattr(reader, "columns", None)
        named = f" ({', '.join(cols)})" if cols else ""
        raise ArgumentError((argname,), f"{argname} has {arr.shape[1]} columns but the run's model reads {want}{named}")
    if not local:
        return arr
    try:
        return np.asarray(model.shard_data(arr, np.zeros(arr.shape[0]), None)[0], dtype=np.float64)
    except ValueError as exc:
        raise ArgumentError((argname,), f"{argname}: {exc}") from None


# ----------------------------------------------------------------------------------------------- per-shard records


@dataclass(frozen=True)
class Moments:
    """Count, sum and centred sum of squares of some per-row values: merged exactly (Chan et al.), so the pooled
    variance comes out without any row travelling."""

    n: int = 0
    total: float = 0.0
    m2: float = 0.0

    @classmethod
    def of(cls, values: np.ndarray) -> Moments:
        v = np.asarray(values, dtype=np.float64).ravel()
        if v.size == 0:
            return cls()
        return cls(int(v.size), float(v.sum()), float(np.sum((v - v.mean()) ** 2)))

    def __add__(self, other: Moments) -> Moments:
        if self.n == 0:
            return other
        if other.n == 0:
            return self
        n = self.n + other.n
        delta = other.total / other.n - self.total / self.n
        return Moments(n, self.total + other.total, self.m2 + other.m2 + delta * delta * self.n * other.n / n)

    @property
    def se(self) -> float:
        """√(n · var): the standard error of the sum, as arviz-stats' loo reports it."""
        return math.sqrt(max(self.m2, 0.0))


@dataclass(frozen=True)
class RowRef:
    """One row of one shard: its position in the shard (never its values), and its row of the original data when
    the shard records it (`Shard.index`)."""

    shard: int
    row: int
    index: int | None = None


@dataclass(frozen=True)
class LooPart:
    """One shard's PSIS-LOO sums: elpd moments, Σ p_loo, Pareto-k counts by band, the rows with k ≥ 0.7 and the
    largest k; pointwise elpd and k only when asked for."""

    shard: int
    elpd: Moments
    p_loo: float
    k_ok: int
    k_high: int
    k_above_good: int
    max_k: float
    high_k_rows: tuple[RowRef, ...]
    elpd_i: np.ndarray | None = None
    pareto_k: np.ndarray | None = None

    def __add__(self, o: LooPart) -> LooPart:
        """This shard's sums with those of its next range of rows."""

        def cat(a: np.ndarray | None, b: np.ndarray | None) -> np.ndarray | None:
            return None if a is None or b is None else np.concatenate([a, b])

        return LooPart(
            self.shard,
            self.elpd + o.elpd,
            self.p_loo + o.p_loo,
            self.k_ok + o.k_ok,
            self.k_high + o.k_high,
            self.k_above_good + o.k_above_good,
            float(np.nanmax([self.max_k, o.max_k])),
            self.high_k_rows + o.high_k_rows,
            cat(self.elpd_i, o.elpd_i),
            cat(self.pareto_k, o.pareto_k),
        )


@dataclass(frozen=True)
class ClassificationPart:
    """One shard's classification sums: rows, correct predictions, Σ NLL, Σ Brier and per-bin counts, confidence
    sums and correct counts for the ECE."""

    n: int
    correct: int
    nll: float
    brier: float
    bin_count: np.ndarray
    bin_conf: np.ndarray
    bin_correct: np.ndarray

    def __add__(self, o: ClassificationPart) -> ClassificationPart:
        return ClassificationPart(
            self.n + o.n,
            self.correct + o.correct,
            self.nll + o.nll,
            self.brier + o.brier,
            self.bin_count + o.bin_count,
            self.bin_conf + o.bin_conf,
            self.bin_correct + o.bin_correct,
        )


@dataclass(frozen=True)
class RegressionPart:
    """One shard's regression and count sums: rows, Σ squared error of the predictive mean, Σ NLL, Σ CRPS and the
    rows inside each central predictive interval (`COVERAGE_PROBS`)."""

    n: int
    sq_err: float
    nll: float
    crps: float
    covered: tuple[int, ...]

    def __add__(self, o: RegressionPart) -> RegressionPart:
        return RegressionPart(
            self.n + o.n,
            self.sq_err + o.sq_err,
            self.nll + o.nll,
            self.crps + o.crps,
            tuple(a + b for a, b in zip(self.covered, o.covered)),
        )


@dataclass(frozen=True)
class PairPart:
    """One shard's sums for comparing models on the same rows: each model's `LooPart` and, for every pair (a, b),
    the moments of elpd_a,i − elpd_b,i."""

    loo: tuple[LooPart, ...]
    diffs: dict[tuple[int, int], Moments]

    def __add__(self, o: PairPart) -> PairPart:
        return PairPart(
            tuple(a + b for a, b in zip(self.loo, o.loo)), {k: v + o.diffs[k] for k, v in self.diffs.items()}
        )


# ----------------------------------------------------------------------------------------------- per-shard tasks


@dataclass(frozen=True)
class ShardRows:
    """A shard's rows as one model reads them (after `Model.shard_data`), where the task runs."""

    shard: int
    X: np.ndarray
    y: np.ndarray
    index: np.ndarray | None
    start: int = 0  # the position in the shard of the first of these rows (a task may take a range of them)

    def part(self, k: int, parts: int) -> ShardRows:
        """Range k of `parts` near-equal contiguous ranges of these rows."""
        bounds = np.linspace(0, self.X.shape[0], parts + 1).astype(int)
        a, b = int(bounds[k]), int(bounds[k + 1])
        index = None if self.index is None else self.index[a:b]
        return ShardRows(self.shard, self.X[a:b], self.y[a:b], index, self.start + a)


class ShardTask(Protocol):
    """Work a shard does on its own rows: the models that read them, and the per-shard record it returns."""

    @property
    def models(self) -> tuple[Model, ...]: ...

    def run(self, rows: tuple[ShardRows, ...]) -> Any: ...


def _loo_rows(
    model: Model, rows: ShardRows, theta: np.ndarray, chains: int, r_eff: float, names: tuple[str, ...]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(elpd_i, pareto_k, p_loo_i) of every row, in blocks of rows: the Pareto-smoothed log weights and k of each
    observation are arviz-stats' own (`psislw`, as its `loo` computes them); elpd_i = log Σ_s w_s p(y_i | θ_s) and
    p_loo_i = lppd_i − elpd_i follow in one vectorised step (what its `loo` does per observation)."""
    from arviz_stats.base import array_stats

    out: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    S = theta.shape[0]
    for a in range(0, rows.X.shape[0], BLOCK_ROWS):
        Xb, yb = rows.X[a : a + BLOCK_ROWS], rows.y[a : a + BLOCK_ROWS]
        ll = model.log_likelihood(Xb, yb, model.evaluation_x(Xb, yb, theta, names, 0))
        lw, k = array_stats.psislw(ll.reshape(ll.shape[0], chains, -1), r_eff=r_eff, axis=(-2, -1))
        e = logsumexp(lw.reshape(ll.shape[0], S) + ll, axis=1)
        p = logsumexp(ll, axis=1) - math.log(S) - e
        out.append((np.atleast_1d(e), np.atleast_1d(k), np.atleast_1d(p)))
    if not out:
        return np.empty(0), np.empty(0), np.empty(0)
    e, k, p = (np.concatenate([o[j] for o in out]) for j in range(3))
    return e, k, p


def _loo_part(rows: ShardRows, e: np.ndarray, k: np.ndarray, p: np.ndarray, good_k: float, pointwise: bool) -> LooPart:
    high = np.flatnonzero(k >= K_THRESHOLD)
    index = rows.index
    refs = tuple(RowRef(rows.shard, rows.start + j, None if index is None else int(index[j])) for j in high.tolist())
    return LooPart(
        rows.shard,
        Moments.of(e),
        float(np.sum(p)),
        int(np.sum(k < K_THRESHOLD)),
        int(high.size),
        int(np.sum(k > good_k)),
        float(np.max(k)) if k.size else float("nan"),
        refs,
        e if pointwise else None,
        k if pointwise else None,
    )


@dataclass(frozen=True)
class LooTask:
    """PSIS-LOO of one model on a shard's rows with draws (chains, S, d) named `names` (the run's parameters)."""

    model: Model
    draws: np.ndarray
    r_eff: float
    good_k: float
    names: tuple[str, ...]
    pointwise: bool = False

    @property
    def models(self) -> tuple[Model, ...]:
        return (self.model,)

    def run(self, rows: tuple[ShardRows, ...]) -> LooPart:
        e, k, p = _loo_rows(self.model, rows[0], _flat(self.draws), self.draws.shape[0], self.r_eff, self.names)
        return _loo_part(rows[0], e, k, p, self.good_k, self.pointwise)


@dataclass(frozen=True)
class PairTask:
    """PSIS-LOO of several models on the same rows (each read by its own model), with their paired differences."""

    models: tuple[Model, ...]
    draws: tuple[np.ndarray, ...]
    r_eff: tuple[float, ...]
    good_k: tuple[float, ...]
    names: tuple[tuple[str, ...], ...]

    def run(self, rows: tuple[ShardRows, ...]) -> PairPart:
        y0 = rows[0].y
        for m, r in enumerate(rows[1:], start=1):
            if r.y.shape != y0.shape or not np.array_equal(r.y, y0):
                raise ArgumentError(
                    ("results", m),
                    f"shards[{r.shard}] of model {m} does not hold the same rows (y) as model 0's: compare needs "
                    "runs on the same rows",
                )
        pw = [
            _loo_rows(m, r, _flat(d), d.shape[0], re, n)
            for m, r, d, re, n in zip(self.models, rows, self.draws, self.r_eff, self.names)
        ]
        parts = tuple(_loo_part(r, *v, g, False) for r, v, g in zip(rows, pw, self.good_k))
        diffs = {(a, b): Moments.of(pw[a][0] - pw[b][0]) for a in range(len(pw)) for b in range(len(pw)) if a != b}
        return PairPart(parts, diffs)


@dataclass(frozen=True)
class MetricsTask:
    """Calibration (classifiers) or accuracy (real and count targets) sums of a model on a shard's rows."""

    model: Model
    draws: np.ndarray  # (S, d)
    u: np.ndarray  # (S,) uniforms of the predictive draws
    bins: int
    names: tuple[str, ...]  # the draws' parameter names
    seed: int = 0  # of a new group's effects (`Model.evaluation_x`)

    @property
    def models(self) -> tuple[Model, ...]:
        return (self.model,)

    def run(self, rows: tuple[ShardRows, ...]) -> ClassificationPart | RegressionPart:
        r = rows[0]
        blocks = [
            self._block(r.X[a : a + BLOCK_ROWS], r.y[a : a + BLOCK_ROWS]) for a in range(0, r.X.shape[0], BLOCK_ROWS)
        ]
        if not blocks:
            return self._block(r.X[:0], r.y[:0])
        total = blocks[0]
        for b in blocks[1:]:
            total = total + b  # type: ignore[operator]
        return total

    def _block(self, X: np.ndarray, y: np.ndarray) -> ClassificationPart | RegressionPart:
        S = self.draws.shape[0]
        x = self.model.evaluation_x(X, y, self.draws, self.names, self.seed) if X.shape[0] else self.draws
        ll = self.model.log_likelihood(X, y, x) if X.shape[0] else np.empty((0, S))
        nll = float(-(logsumexp(ll, axis=1) - math.log(S)).sum())
        if is_classifier(self.model):
            P = class_probabilities(self.model, X, x)
            pred = np.argmax(P, axis=1)
            conf = P[np.arange(P.shape[0]), pred]
            hit = (pred == np.asarray(y, dtype=np.intp)).astype(np.float64)
            which = np.minimum((conf * self.bins).astype(np.intp), self.bins - 1)
            return ClassificationPart(
                int(y.shape[0]),
                int(hit.sum()),
                nll,
                float(np.sum((conf - hit) ** 2)),
                np.bincount(which, minlength=self.bins).astype(np.int64),
                np.bincount(which, weights=conf, minlength=self.bins),
                np.bincount(which, weights=hit, minlength=self.bins),
            )
        mean = self.model.predict_mean(X, x).mean(axis=1) if X.shape[0] else np.empty(0)
        yd = np.sort(self.model.predict_draw(X, x, self.u), axis=1) if X.shape[0] else np.empty((0, S))
        yv = np.asarray(y, dtype=np.float64)
        # CRPS from S predictive draws: E|Y − y| − ½ E|Y − Y'|, the second term from the sorted draws
        w = (2.0 * np.arange(1, S + 1) - S - 1) / (S * S)
        crps = np.abs(yd - yv[:, None]).mean(axis=1) - yd @ w
        covered = []
        for prob in COVERAGE_PROBS:
            lo, hi = np.quantile(yd, [(1 - prob) / 2, (1 + prob) / 2], axis=1)
            covered.append(int(np.sum((yv >= lo) & (yv <= hi))))
        return RegressionPart(int(yv.shape[0]), float(np.sum((mean - yv) ** 2)), nll, float(crps.sum()), tuple(covered))


def is_classifier(model: Model) -> bool:
    return model.target_kind in ("binary", "multiclass")


def class_probabilities(model: Model, X: np.ndarray, theta: np.ndarray) -> np.ndarray:
    """Posterior predictive class probabilities (n, C) of a binary or multiclass model."""
    m = model.predict_mean(X, theta).mean(axis=1)
    return np.column_stack([1.0 - m, m]) if model.target_kind == "binary" else m


# ----------------------------------------------------------------------------------------------- running at the shards


def _read_rows(i: int, shards: tuple[Shard, ...], models: tuple[Model, ...]) -> tuple[ShardRows, ...]:
    """Load a shard (once per distinct shard) and give each model its rows; errors name `shards[i]`."""
    from .runtime.host import load_source

    out = []
    loaded: dict[int, Any] = {}
    for shard, model in zip(shards, models):
        if id(shard) not in loaded:
            loaded[id(shard)] = load_source(shard)
        table = loaded[id(shard)]
        cols = getattr(model, "columns", None)
        if cols is not None and table.columns is not None and tuple(table.columns) != tuple(cols):
            raise ArgumentError(
                ("shards", i),
                f"shards[{i}] has columns {list(table.columns)} but the run's model reads {list(cols)}",
            )
        try:
            X, y = model.shard_data(table.X, table.y, shard.index)
            model.validate(X, y, f"shards[{i}]")
        except ArgumentError:
            raise
        except ValueError as exc:
            raise ArgumentError(("shards", i), str(exc)) from None
        out.append(ShardRows(i, np.asarray(X, dtype=np.float64), np.asarray(y), shard.index))
    return tuple(out)


def _on_shard(task: ShardTask, i: int, shards: tuple[Shard, ...], k: int = 0, parts: int = 1) -> Any:
    """Runs where shard i lives: read its rows, do the task on range k of `parts` of them, return its record."""
    rows = _read_rows(i, shards, task.models)
    return task.run(tuple(r.part(k, parts) for r in rows) if parts > 1 else rows)


def _merge(records: Sequence[Any]) -> Any:
    """The records of a shard's ranges of rows, in order, as one (each record type adds up exactly)."""
    total = records[0]
    for r in records[1:]:
        total = total + r
    return total


def run_at_shards(
    task: ShardTask, jobs: Sequence[tuple[Shard, ...]], executor: Executor | str, parts: int | None = None
) -> list[Any]:
    """`task` on every job (one shard per model, all of one site) where its rows are: in this process, or as Ray
    tasks, a site's on a node of that site (label selector). A job's rows are split into `parts` contiguous ranges,
    each its own task, so that a site with more CPUs than shards uses them all (default on Ray: the site's CPUs, or
    the cluster's for shards without a site, over its jobs; 1 in-process). The records, one per job, in job order."""
    exe = parse(Executor, executor, "executor")
    if exe == Executor.LOCAL:
        k_of = max(1, parts or 1)
        return [_merge([_on_shard(task, i, job, k, k_of) for k in range(k_of)]) for i, job in enumerate(jobs)]
    import ray

    from .runtime.contracts import SITE_LABEL
    from .runtime.executors import ensure_ray
    from .runtime.sites import wait_for_sites
    from .settings import EngineSettings

    ensure_ray()
    sites = [job[0].site for job in jobs]
    for i, job in enumerate(jobs):
        if len({s.site for s in job}) > 1:
            raise ArgumentError(("shards", i), f"shards[{i}] of the models compared live on different sites")
    site_cpus = wait_for_sites(sites, EngineSettings.from_env().site_wait_s)
    if parts is None:
        cpus: dict[str | None, int] = {None: int(ray.cluster_resources().get("CPU", 1))}
        cpus.update(site_cpus)
        split = {s: max(1, cpus.get(s, 1) // sites.count(s)) for s in set(sites)}
    else:
        split = {s: max(1, parts) for s in set(sites)}
    remote = ray.remote(num_cpus=1, max_retries=0)(_on_shard)
    task_ref = ray.put(task)
    refs = [
        [
            remote.options(**({"label_selector": {SITE_LABEL: site}} if site is not None else {})).remote(
                task_ref, i, job, k, split[site]
            )
            for k in range(split[site])
        ]
        for i, (job, site) in enumerate(zip(jobs, sites))
    ]
    out = []
    for i, ref in enumerate(refs):
        try:
            out.append(_merge(ray.get(ref)))
        except ray.exceptions.RayTaskError as exc:
            cause = getattr(exc, "cause", None)
            if isinstance(cause, (ArgumentError, WorkerFailed)):
                raise cause from None
            raise WorkerFailed(
                Failure(FailureKind.WORKER_ERROR, f"{type(cause).__name__}: {cause}", shard=i, site=sites[i])
            ) from None
    return out


def _executor_of(result: Fit, executor: Executor | str | None) -> Executor:
    if executor is not None:
        return parse(Executor, executor, "executor")
    return Executor.RAY if result.executor == Executor.RAY.value else Executor.LOCAL


def _shards_of(result: Fit) -> ShardSet:
    if result.data is None:
        raise ArgumentError(
            ("result",),
            "this result does not carry its shards (a result read back from stored draws): LOO needs the rows "
            "the run was fitted on",
        )
    return result.data


# ----------------------------------------------------------------------------------------------- PSIS-LOO


def r_eff(draws: np.ndarray, blocks: Sequence[Any]) -> float:
    """Relative efficiency of the thinned draws (chains, S, d), as `arviz_stats.loo` computes it: the mean "mean"
    ESS over every reported coordinate over the number of draws (1 for one chain)."""
    from arviz_stats.base import array_stats

    if draws.shape[0] == 1:
        return 1.0
    ess = array_stats.ess(natural_values(blocks, draws), chain_axis=0, draw_axis=1, method="mean")
    return float(np.mean(ess) / (draws.shape[0] * draws.shape[1]))


def good_k(n_samples: int) -> float:
    """The Pareto k above which arviz-stats warns, for `n_samples` draws."""
    return min(1.0 - 1.0 / math.log10(n_samples), K_THRESHOLD) if n_samples > 1 else K_THRESHOLD


def _elpd_data_cls() -> type:
    from arviz_stats.utils import ELPDData

    @dataclass
    class SiteLoo(ELPDData):
        """arviz-stats' `ELPDData` (so `arviz_stats.compare` and plots accept it) with where the sums came from:
        Pareto-k counts by band and the rows with k ≥ 0.7, by shard and position only."""

        k_ok: int = 0
        k_high: int = 0
        high_k_rows: tuple[RowRef, ...] = field(default=())

    return SiteLoo


_SITE_LOO: list[type] = []


def site_loo_class() -> type:
    """The `SiteLoo` class (built on first use: arviz-stats is imported only then)."""
    if not _SITE_LOO:
        _SITE_LOO.append(_elpd_data_cls())
    return _SITE_LOO[0]


def combine_loo(parts: Sequence[LooPart], n_samples: int, pointwise: bool) -> Any:
    """The shards' `LooPart`s as one `SiteLoo` (arviz-stats' ELPDData)."""
    elpd = Moments()
    for p in parts:
        elpd = elpd + p.elpd
    k_above = sum(p.k_above_good for p in parts)
    elpd_i: xr.DataArray | None = None
    pareto_k: xr.DataArray | None = None
    if pointwise:
        import xarray as xr

        e = np.concatenate([p.elpd_i for p in parts if p.elpd_i is not None])
        k = np.concatenate([p.pareto_k for p in parts if p.pareto_k is not None])
        elpd_i = xr.DataArray(e, dims=["obs"], name="y")
        pareto_k = xr.DataArray(k, dims=["obs"], name="y")
    cls = site_loo_class()
    return cls(
        kind="loo",
        elpd=elpd.total,
        se=elpd.se,
        p=float(sum(p.p_loo for p in parts)),
        n_samples=n_samples,
        n_data_points=elpd.n,
        scale="log",
        warning=bool(k_above > 0),
        good_k=good_k(n_samples),
        elpd_i=elpd_i,
        pareto_k=pareto_k,
        k_ok=sum(p.k_ok for p in parts),
        k_high=sum(p.k_high for p in parts),
        high_k_rows=tuple(r for p in parts for r in p.high_k_rows),
    )


def loo(
    result: Fit,
    *,
    executor: Executor | str | None = None,
    draws: DrawsArg = DEFAULT_DRAWS,
    pointwise: bool = False,
    shards: ShardSet | None = None,
) -> Any:
    """PSIS-LOO of the run on the rows it was fitted on, computed where they are (see the module docstring): an
    arviz-stats `ELPDData` (`SiteLoo`) with elpd, its SE, p_loo, Pareto-k counts and the rows with k ≥ 0.7.
    `pointwise=True` brings back one elpd and one k per row too (what `arviz_stats.compare` needs)."""
    model = _model_of(result, "log_likelihood")
    data = shards if shards is not None else _shards_of(result)
    thinned = thin_draws(result.draws, draws)
    S = thinned.shape[0] * thinned.shape[1]
    task = LooTask(
        model, thinned, r_eff(thinned, result.param_blocks), good_k(S), tuple(result.param_names), bool(pointwise)
    )
    parts = run_at_shards(task, [(s,) for s in data], _executor_of(result, executor))
    return combine_loo(parts, S, bool(pointwise))


# ----------------------------------------------------------------------------------------------- evaluation


@dataclass(frozen=True)
class ReliabilityBin:
    """One bin of the reliability curve: confidence range [lo, hi), rows in it, their mean confidence and accuracy
    (None for an empty bin)."""

    lo: float
    hi: float
    count: int
    confidence: float | None
    accuracy: float | None


@dataclass(frozen=True)
class ClassificationMetrics:
    """Held-out metrics of a classifier: accuracy, mean NLL of the posterior predictive, Brier score on the predicted
    class, ECE over `bins` equal-width confidence bins, and the reliability curve."""

    n: int
    accuracy: float
    nll: float
    brier: float
    ece: float
    reliability: tuple[ReliabilityBin, ...]
    kind: Literal["classification"] = "classification"

    @classmethod
    def of(cls, part: ClassificationPart) -> ClassificationMetrics:
        n = max(part.n, 1)
        M = part.bin_count.shape[0]
        bins = []
        ece = 0.0
        for m in range(M):
            c = int(part.bin_count[m])
            conf = float(part.bin_conf[m] / c) if c else None
            acc = float(part.bin_correct[m] / c) if c else None
            if c:
                ece += c / n * abs(acc - conf)  # type: ignore[operator]
            bins.append(ReliabilityBin(m / M, (m + 1) / M, c, conf, acc))
        return cls(part.n, part.correct / n, part.nll / n, part.brier / n, ece, tuple(bins))


@dataclass(frozen=True)
class RegressionMetrics:
    """Held-out metrics of a real or count target: RMSE of the posterior predictive mean, mean NLL, mean CRPS and
    the coverage of the central 50% and 90% predictive intervals."""

    n: int
    rmse: float
    nll: float
    crps: float
    coverage_50: float
    coverage_90: float
    kind: Literal["regression"] = "regression"

    @classmethod
    def of(cls, part: RegressionPart) -> RegressionMetrics:
        n = max(part.n, 1)
        return cls(
            part.n, math.sqrt(part.sq_err / n), part.nll / n, part.crps / n, part.covered[0] / n, part.covered[1] / n
        )


def evaluate(
    result: Fit,
    shards: Any,
    *,
    executor: Executor | str | None = None,
    draws: DrawsArg = DEFAULT_DRAWS,
    bins: int = 10,
    seed: int = 0,
) -> ClassificationMetrics | RegressionMetrics:
    """Metrics of the run's posterior predictive on held-out `shards` (an rs.shard(...) set, or a list of (X, y)
    pairs or files, site files included), computed where the rows are; equal to the pooled computation."""
    model = _model_of(result, "log_likelihood", "predict_mean", "predict_draw")
    if model.target_kind == "vector":
        raise ArgumentError(("result",), "evaluate needs a scalar target; this model's observations are vectors")
    if isinstance(bins, bool) or not isinstance(bins, (int, np.integer)) or bins < 1:
        raise ArgumentError(("bins",), f"bins must be an integer >= 1, got {bins!r}")
    try:
        data = as_shard_set(shards)
    except TypeError as exc:
        raise ArgumentError(("shards",), str(exc)) from None
    theta = _flat(thin_draws(result.draws, draws))
    task = MetricsTask(model, theta, uniforms(theta.shape[0], seed), int(bins), tuple(result.param_names), seed)
    parts = run_at_shards(task, [(s,) for s in data], _executor_of(result, executor))
    total = parts[0]
    for p in parts[1:]:
        total = total + p
    return ClassificationMetrics.of(total) if is_classifier(model) else RegressionMetrics.of(total)


# ----------------------------------------------------------------------------------------------- comparison


@dataclass(frozen=True)
class ComparisonRow:
    """One model in a comparison, in arviz-stats' columns: rank (0 best), elpd, its SE, p_loo, elpd difference to
    the best and its SE from the paired per-row differences, pseudo-BMA weight, and whether any Pareto k was high."""

    name: str
    rank: int
    elpd: float
    se: float
    p: float
    elpd_diff: float
    dse: float
    weight: float
    warning: bool


@dataclass(frozen=True)
class Comparison:
    """`compare`'s result: rows best first, and each model's `SiteLoo`."""

    rows: tuple[ComparisonRow, ...]
    loo: Mapping[str, Any]

    def table(self) -> Any:
        """The rows as a pandas DataFrame indexed by name, columns as arviz-stats' `compare`."""
        import pandas as pd

        cols = ["rank", "elpd", "p", "elpd_diff", "weight", "se", "dse", "warning"]
        return pd.DataFrame(
            [[getattr(r, c) for c in cols] for r in self.rows], index=[r.name for r in self.rows], columns=cols
        )


def compare(
    results: Mapping[str, Fit],
    *,
    executor: Executor | str | None = None,
    draws: DrawsArg = DEFAULT_DRAWS,
    shards: Mapping[str, ShardSet] | None = None,
) -> Comparison:
    """Rank runs fitted on the same rows by PSIS-LOO elpd. Each shard computes every model's elpd on its rows and
    the sums of the paired differences, so the SE of a difference is exact without pointwise values travelling;
    weights are pseudo-BMA (exp(elpd) normalised)."""
    if not isinstance(results, Mapping) or len(results) < 2:
        raise ArgumentError(("results",), "compare needs a mapping of at least two named results")
    names = list(results)
    res = [results[n] for n in names]
    models = tuple(_model_of(r, "log_likelihood") for r in res)
    datas = [shards[n] if shards is not None and n in shards else _shards_of(r) for n, r in zip(names, res)]
    for n, d in zip(names[1:], datas[1:]):
        if len(d) != len(datas[0]):
            raise ArgumentError(
                ("results", n),
                f"run {n!r} has {len(d)} shards, {names[0]!r} has {len(datas[0])}: compare needs the same rows",
            )
    thinned = tuple(thin_draws(r.draws, draws) for r in res)
    S = [t.shape[0] * t.shape[1] for t in thinned]
    task = PairTask(
        models,
        thinned,
        tuple(r_eff(t, r.param_blocks) for t, r in zip(thinned, res)),
        tuple(good_k(s) for s in S),
        tuple(tuple(r.param_names) for r in res),
    )
    jobs = [tuple(d[i] for d in datas) for i in range(len(datas[0]))]
    parts: list[PairPart] = run_at_shards(task, jobs, _executor_of(res[0], executor))
    loos = {n: combine_loo([p.loo[m] for p in parts], S[m], False) for m, n in enumerate(names)}
    order = sorted(range(len(names)), key=lambda m: -loos[names[m]].elpd)
    best = order[0]
    elpds = np.array([loos[n].elpd for n in names])
    w = np.exp(elpds - elpds.max())
    w /= w.sum()
    rows = []
    for rank, m in enumerate(order):
        diff = Moments()
        if m != best:
            for p in parts:
                diff = diff + p.diffs[(best, m)]
        lo = loos[names[m]]
        rows.append(
            ComparisonRow(
                names[m],
                rank,
                lo.elpd,
                lo.se,
                lo.p,
                diff.total if m != best else 0.0,
                diff.se if m != best else 0.0,
                float(w[m]),
                bool(lo.warning),
            )
        )
    return Comparison(tuple(rows), loos)
