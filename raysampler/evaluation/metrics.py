"""Held-out metrics of a run's posterior predictive, summed where the rows live: accuracy, NLL, Brier score, ECE and
the reliability curve of a classifier; RMSE, NLL, CRPS and interval coverage of a real or count target."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from scipy.special import logsumexp

from ..enums import Executor
from ..errors import ArgumentError
from ..models.contract import Model
from ..shards import as_shard_set
from .fits import BLOCK_ROWS, DEFAULT_DRAWS, DrawsArg, Fit, executor_of, flat_draws, model_of, thin_draws, uniforms
from .shard_tasks import ShardRows, run_at_shards

#: Central predictive intervals whose coverage `evaluate` counts for real-valued and count targets.
COVERAGE_PROBS = (0.5, 0.9)


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
    model = model_of(result, "log_likelihood", "predict_mean", "predict_draw")
    if model.target_kind == "vector":
        raise ArgumentError(("result",), "evaluate needs a scalar target; this model's observations are vectors")
    if isinstance(bins, bool) or not isinstance(bins, (int, np.integer)) or bins < 1:
        raise ArgumentError(("bins",), f"bins must be an integer >= 1, got {bins!r}")
    try:
        data = as_shard_set(shards)
    except TypeError as exc:
        raise ArgumentError(("shards",), str(exc)) from None
    theta = flat_draws(thin_draws(result.draws, draws))
    task = MetricsTask(model, theta, uniforms(theta.shape[0], seed), int(bins), tuple(result.param_names), seed)
    parts = run_at_shards(task, [(s,) for s in data], executor_of(result, executor))
    total = parts[0]
    for p in parts[1:]:
        total = total + p
    return ClassificationMetrics.of(total) if is_classifier(model) else RegressionMetrics.of(total)
