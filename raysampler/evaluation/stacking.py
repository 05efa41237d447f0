"""Stacking weights of models compared on the same rows (Yao et al. 2018, "Using stacking to average Bayesian
predictive distributions", Bayesian Analysis 13(3), eq. 4), computed where the rows live.

The weights maximise Σ_i log Σ_k w_k exp(elpd_k,i) over the simplex. The objective and its gradient are sums over
rows, so each shard keeps its rows' pointwise elpd matrix where it computed it (a `ShardSession`) and, for each w the
optimiser asks about, returns its share of both; only those sums travel. The optimiser is the one arviz-stats'
`compare` runs (scipy's SLSQP from uniform weights, with the same bounds and constraint), so the weights are its.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from .psis import PointwiseLoo
from .shard_tasks import ShardRows, ShardSession

#: Where a shard keeps its rows' pointwise elpd (rows, models) between the optimiser's calls.
KEPT = "stacking_elpd"


class PointwiseTask(Protocol):
    """A comparison's per-shard work (`comparison.PairTask`): every model's pointwise LOO on the shard's rows, and the
    shard's record from them."""

    def pointwise(self, rows: tuple[ShardRows, ...]) -> list[PointwiseLoo]: ...

    def part(self, rows: tuple[ShardRows, ...], pw: list[PointwiseLoo]) -> Any: ...


@dataclass(frozen=True)
class StackingStart:
    """The comparison's per-shard LOO (a `PairTask`), keeping each row's elpd under every model beside the rows."""

    pair: PointwiseTask

    def run_held(self, rows: tuple[ShardRows, ...], kept: dict[str, Any]) -> Any:
        pw = self.pair.pointwise(rows)
        kept[KEPT] = np.column_stack([p.elpd for p in pw]) if pw else np.empty((0, 0))
        return self.pair.part(rows, pw)


@dataclass(frozen=True)
class StackingShare:
    """A shard's share of the stacking objective at weights w (models,): Σ_i log Σ_k w_k exp(elpd_k,i) and its
    gradient Σ_i exp(elpd_k,i) / Σ_j w_j exp(elpd_j,i) (each row's elpd shifted by its maximum, which cancels)."""

    weights: np.ndarray

    def run_held(self, rows: tuple[ShardRows, ...], kept: dict[str, Any]) -> StackingPart:
        E = kept[KEPT]
        if E.shape[0] == 0:
            return StackingPart(0.0, np.zeros(self.weights.shape[0]))
        top = np.max(E, axis=1)
        P = np.exp(E - top[:, None])
        den = P @ self.weights
        with np.errstate(divide="ignore"):
            return StackingPart(float(np.sum(top + np.log(den))), np.sum(P / den[:, None], axis=0))


@dataclass(frozen=True)
class StackingPart:
    """A shard's share of the objective and of its gradient; shares add up exactly."""

    value: float
    grad: np.ndarray

    def __add__(self, o: StackingPart) -> StackingPart:
        return StackingPart(self.value + o.value, self.grad + o.grad)


def stacking_weights(session: ShardSession, order: Sequence[int]) -> np.ndarray:
    """Stacking weights (models,), in model order, from the shards of `session` (started by `StackingStart`):
    scipy's `minimize` on −objective from uniform weights with bounds [0, 1] and Σ w = 1, the models taken in `order`
    (best elpd first, as arviz-stats takes them)."""
    from scipy.optimize import Bounds, LinearConstraint, minimize

    K = len(order)
    pos = np.asarray(order)

    def share(w_sorted: np.ndarray) -> tuple[float, np.ndarray]:
        w = np.empty(K)
        w[pos] = w_sorted
        total = StackingPart(0.0, np.zeros(K))
        for part in session.run(StackingShare(w)):
            total = total + part
        return -total.value, -total.grad[pos]

    res = minimize(
        fun=share,
        x0=np.full(K, 1.0 / K),
        jac=True,
        bounds=Bounds(lb=np.zeros(K), ub=np.ones(K)),
        constraints=LinearConstraint(np.ones(K), lb=1.0, ub=1.0),
    )
    out = np.empty(K)
    out[pos] = res.x
    return out
