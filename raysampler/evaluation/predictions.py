"""Predictions of a run at new rows: the posterior predictive mean, predictive draws and central intervals, from the
run's thinned draws and its bound model."""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from ..errors import ArgumentError
from ..models.contract import Model
from ..shards import encode_rows
from .fits import BLOCK_ROWS, DEFAULT_DRAWS, DrawsArg, Fit, flat_draws, model_of, thin_draws, uniforms

PredictKind = Literal["mean", "draws", "interval"]


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
    model = model_of(result, "predict_mean" if kind == "mean" else "predict_draw")
    Xn = new_rows(model, X, "X")
    draws_ = flat_draws(thin_draws(result.draws, draws))
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
    from ..models.common import RowValues

    local = model.has_local_params()
    # a model with group effects reads rows as loaded (group and slope columns included) through `shard_data`
    reader = getattr(model, "source", None) if local else model
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
