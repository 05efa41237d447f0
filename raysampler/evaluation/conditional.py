"""Conditional effects of a formula model (brms' `conditional_effects`): the expected response along one predictor,
the others held at their means (numbers) or their first level (categories), without group effects.

The grid needs the predictors' ranges and means over the run's rows: each shard sends, per numeric predictor, its
row count, sum, minimum and maximum (`ColumnStats`), merged exactly, so no row leaves its shard. The predictions
are `predict(kind="epred", re_formula="NA")` at the grid rows; each grid point is summarised as brms does by
default (robust = TRUE): the median of its draws (`estimate__`), their MAD (`se__`, scaled as R's `mad`) and the
central `prob` interval (`lower__`, `upper__`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..enums import Executor
from ..errors import ArgumentError
from .fits import DEFAULT_DRAWS, DrawsArg, Fit, executor_of, model_of, shards_of
from .shard_tasks import ShardRows, run_at_shards

#: R's `mad` constant: the MAD of a normal sample estimates its sd
MAD_SCALE = 1.4826


@dataclass(frozen=True)
class ColumnStats:
    """Per numeric predictor (in `names`' order): the rows counted, their sum, minimum and maximum."""

    names: tuple[str, ...]
    n: int
    total: np.ndarray
    low: np.ndarray
    high: np.ndarray

    def __add__(self, other: ColumnStats) -> ColumnStats:
        if self.n == 0:
            return other
        if other.n == 0:
            return self
        return ColumnStats(
            self.names,
            self.n + other.n,
            self.total + other.total,
            np.minimum(self.low, other.low),
            np.maximum(self.high, other.high),
        )

    @property
    def mean(self) -> np.ndarray:
        return self.total / self.n


@dataclass(frozen=True)
class RawColumns:
    """Reads a shard's table as loaded (every column of the data, as a formula's design reads it), unchanged."""

    columns: None = None

    def shard_data(self, X: np.ndarray, y: np.ndarray, rows: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        return X, y

    def validate(self, X: np.ndarray, y: np.ndarray, argname: str = "data") -> None:
        return None


@dataclass(frozen=True)
class ColumnStatsTask:
    """The `ColumnStats` of the numeric predictors `names`, at positions `positions` of the table's columns."""

    names: tuple[str, ...]
    positions: tuple[int, ...]

    @property
    def models(self) -> tuple[Any, ...]:
        return (RawColumns(),)

    def run(self, rows: tuple[ShardRows, ...]) -> ColumnStats:
        X = rows[0].X
        if X.shape[0] == 0:
            empty = np.zeros(len(self.names))
            return ColumnStats(self.names, 0, empty, empty + np.inf, empty - np.inf)
        cols = X[:, list(self.positions)].astype(np.float64)
        return ColumnStats(self.names, X.shape[0], cols.sum(axis=0), cols.min(axis=0), cols.max(axis=0))


@dataclass(frozen=True)
class ConditionalEffects:
    """The expected response along `effect` (brms' `conditional_effects` for one effect): `table` has the grid
    (the effect's column and every other predictor's held value) with estimate__, se__, lower__, upper__; `plot()`
    draws it (a line and its band for a number, points and bars for a category)."""

    effect: str
    response: str
    table: Any
    categorical: bool
    prob: float

    def plot(self, ax: Any = None) -> Any:
        """The effect against the expected response with its `prob` band (matplotlib; returns the axes)."""
        import matplotlib.pyplot as plt

        if ax is None:
            _, ax = plt.subplots(figsize=(5, 3.5))
        x = self.table[self.effect].to_numpy()
        est, lo, hi = (self.table[c].to_numpy(dtype=float) for c in ("estimate__", "lower__", "upper__"))
        if self.categorical:
            pos = np.arange(len(x))
            ax.errorbar(pos, est, yerr=[est - lo, hi - est], fmt="o", capsize=4)
            ax.set_xticks(pos, [str(v) for v in x])
        else:
            ax.plot(x, est)
            ax.fill_between(x, lo, hi, alpha=0.3, linewidth=0)
        ax.set_xlabel(self.effect)
        ax.set_ylabel(self.response)
        ax.set_title(f"{self.response} by {self.effect} ({100 * self.prob:g}% interval)")
        return ax

    def __repr__(self) -> str:
        return f"ConditionalEffects({self.effect!r}: {len(self.table)} points, response {self.response!r})"


def conditional_effects(
    result: Fit,
    effect: str,
    *,
    conditions: Mapping[str, Any] | None = None,
    points: int = 100,
    prob: float = 0.95,
    draws: DrawsArg = DEFAULT_DRAWS,
    executor: Executor | str | None = None,
) -> ConditionalEffects:
    """The expected response (epred, population level) along the predictor `effect` of a formula model: over
    `points` values from its minimum to its maximum over the run's rows (a number), or at each of its levels (a
    category); every other predictor at its mean over the rows (a number) or its first level (a category), unless
    `conditions` gives its value. Errors name the argument (effect, conditions, points, prob)."""
    import pandas as pd

    from .predictions import predict

    model = model_of(result, "predict_mean")
    design = getattr(model, "design", None)
    if design is None:
        raise ArgumentError(("result",), "conditional_effects needs a formula model (rs.models.from_formula)")
    predictors = tuple(design.predictors)
    if not isinstance(effect, str) or effect not in predictors:
        raise ArgumentError(
            ("effect",), f"effect must be one of the formula's predictors {list(predictors)}, got {effect!r}"
        )
    if isinstance(points, bool) or not isinstance(points, int) or points < 2:
        raise ArgumentError(("points",), f"points must be an integer >= 2, got {points!r}")
    if not (isinstance(prob, (int, float)) and 0.0 < prob < 1.0):
        raise ArgumentError(("prob",), f"prob must be a number in (0, 1), got {prob!r}")
    given = dict(conditions or {})
    unknown = [c for c in given if c not in predictors or c == effect]
    if unknown:
        raise ArgumentError(
            ("conditions",),
            f"conditions: {unknown[0]!r} is not one of the other predictors {[p for p in predictors if p != effect]}",
        )
    levels = dict(design.levels)
    groups = {g for g, _, _ in design.groups}
    numeric = [v for v in predictors if v not in levels and v not in groups and (v == effect or v not in given)]
    stats: ColumnStats | None = None
    if numeric:
        cols = list(design.columns)
        task = ColumnStatsTask(tuple(numeric), tuple(cols.index(v) for v in numeric))
        parts = run_at_shards(task, [(s,) for s in shards_of(result)], executor_of(result, executor))
        stats = parts[0]
        for p in parts[1:]:
            stats = stats + p
    categorical = effect in levels
    if effect in groups:
        raise ArgumentError(("effect",), f"effect {effect!r} is a grouping column: its effects are in ranef()")
    if categorical:
        grid: list[Any] = list(levels[effect])
    else:
        assert stats is not None
        j = numeric.index(effect)
        grid = list(np.linspace(stats.low[j], stats.high[j], points))
    frame: dict[str, Any] = {effect: grid}
    n = len(grid)
    for v in predictors:
        if v == effect:
            continue
        if v in given:
            value = given[v]
        elif v in levels:
            value = levels[v][0]
        elif v in groups:
            value = _some_label(model, v)
        else:
            assert stats is not None
            value = float(stats.mean[numeric.index(v)])
        frame[v] = [value] * n
    table = pd.DataFrame(frame)
    ep = np.asarray(predict(result, table, "epred", draws=draws, re_formula="NA"), dtype=np.float64)  # (S, n)
    med = np.median(ep, axis=0)
    table["estimate__"] = med
    table["se__"] = MAD_SCALE * np.median(np.abs(ep - med), axis=0)
    table["lower__"], table["upper__"] = np.quantile(ep, [(1.0 - prob) / 2.0, (1.0 + prob) / 2.0], axis=0)
    response = str(design.response[0])
    return ConditionalEffects(effect, response, table, categorical, float(prob))


def _some_label(model: Any, group: str) -> Any:
    """A label of grouping column `group` for rows predicted without group effects (any label does)."""
    text = dict(getattr(model, "levels", None) or ())
    labels = text.get(group)
    return labels[0] if labels else 0.0
