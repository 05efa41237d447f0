"""Bayesian R² (Gelman, Goodrich, Gabry & Vehtari, The American Statistician 2019; brms' `bayes_R2`), computed where
the rows are.

For each draw s, with ŷ_n^s = E[y_n | x_n, θ^s] (the model's `predict_mean`) and the residual e_n^s = y_n − ŷ_n^s,

    R²_s = var_n(ŷ^s) / (var_n(ŷ^s) + var_n(e^s)),

the variances taken over the run's rows (n − 1 in the denominator, as R's `var`). That is brms' default (the
residual-based R², eq. 3 of the paper). Each shard returns, per draw, the count, sum and centred sum of squares of
ŷ and e over its rows (`DrawMoments`), merged exactly (Chan et al.): no row and no per-row value leaves its shard.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..enums import Executor
from ..models.contract import Model
from .fits import BLOCK_ROWS, DEFAULT_DRAWS, DrawsArg, Fit, executor_of, flat_draws, model_of, shards_of, thin_draws
from .shard_tasks import ShardRows, run_at_shards


@dataclass(frozen=True)
class DrawMoments:
    """Per draw: the count, sum and centred sum of squares of some per-row values, over a set of rows ((S,) each but
    the count); two records merge exactly (Chan et al.), as `records.Moments` does for one value."""

    n: int
    total: np.ndarray
    m2: np.ndarray

    @classmethod
    def of(cls, values: np.ndarray) -> DrawMoments:
        """The moments of `values` (n, S) over its rows, one per draw."""
        n = values.shape[0]
        if n == 0:
            zero = np.zeros(values.shape[1])
            return cls(0, zero, zero.copy())
        return cls(n, values.sum(axis=0), np.sum((values - values.mean(axis=0)) ** 2, axis=0))

    def __add__(self, other: DrawMoments) -> DrawMoments:
        if self.n == 0:
            return other
        if other.n == 0:
            return self
        n = self.n + other.n
        delta = other.total / other.n - self.total / self.n
        return DrawMoments(n, self.total + other.total, self.m2 + other.m2 + delta * delta * self.n * other.n / n)

    @property
    def var(self) -> np.ndarray:
        """The variance over the rows, per draw (n − 1 in the denominator)."""
        return self.m2 / (self.n - 1)


@dataclass(frozen=True)
class R2Part:
    """A range of rows' moments of the fitted values ŷ and of the residuals y − ŷ, per draw."""

    fit: DrawMoments
    res: DrawMoments

    def __add__(self, other: R2Part) -> R2Part:
        return R2Part(self.fit + other.fit, self.res + other.res)


@dataclass(frozen=True)
class R2Task:
    """The R² sums of one model on a shard's rows, under draws (S, d) named `names` (the run's parameters)."""

    model: Model
    draws: np.ndarray
    names: tuple[str, ...]

    @property
    def models(self) -> tuple[Model, ...]:
        return (self.model,)

    def run(self, rows: tuple[ShardRows, ...]) -> R2Part:
        r = rows[0]
        part: R2Part | None = None
        for a in range(0, r.X.shape[0], BLOCK_ROWS):
            Xb, yb = r.X[a : a + BLOCK_ROWS], np.asarray(r.y[a : a + BLOCK_ROWS], dtype=np.float64)
            if yb.ndim != 1:
                raise ValueError(
                    f"bayes_r2 needs one response value per row; shards[{r.shard}] has y of shape {yb.shape}"
                )
            theta = self.model.evaluation_x(Xb, yb, self.draws, self.names, 0)
            mu = np.asarray(self.model.predict_mean(Xb, theta), dtype=np.float64)  # (n, S)
            block = R2Part(DrawMoments.of(mu), DrawMoments.of(yb[:, None] - mu))
            part = block if part is None else part + block
        if part is None:
            empty = DrawMoments.of(np.empty((0, self.draws.shape[0])))
            return R2Part(empty, empty)
        return part


def bayes_r2_draws(
    result: Fit, *, draws: DrawsArg = DEFAULT_DRAWS, executor: Executor | str | None = None
) -> np.ndarray:
    """R²_s for each of the thinned draws (S,): the residual-based Bayesian R², computed at the shards."""
    model = model_of(result, "predict_mean")
    if model.target_kind in ("multiclass", "vector"):
        raise ValueError(
            f"bayes_r2 needs a model with one real-valued expected response per row; this model's target is "
            f"{model.target_kind!r}"
        )
    theta = flat_draws(thin_draws(result.draws, draws))
    task = R2Task(model, theta, tuple(result.param_names))
    parts = run_at_shards(task, [(s,) for s in shards_of(result)], executor_of(result, executor))
    total = parts[0]
    for p in parts[1:]:
        total = total + p
    if total.fit.n < 2:
        raise ValueError(f"bayes_r2 needs at least 2 rows, the run has {total.fit.n}")
    fit, res = total.fit.var, total.res.var
    return fit / (fit + res)


def bayes_r2(
    result: Fit,
    *,
    summary: bool = True,
    probs: tuple[float, float] = (0.025, 0.975),
    draws: DrawsArg = DEFAULT_DRAWS,
    executor: Executor | str | None = None,
) -> Any:
    """brms' `bayes_R2`: a one-row table "R2" with Estimate, Est.Error and the `probs` quantiles (`summary`), or the
    R² of every thinned draw (S,)."""
    from ..effects import check_probs, summarise

    checked = check_probs(probs)
    values = bayes_r2_draws(result, draws=draws, executor=executor)
    return summarise(values[:, None], ["R2"], checked) if summary else values
