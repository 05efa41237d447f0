"""Predictions of a run at new rows, from the run's thinned draws and its bound model: summaries (the posterior
predictive mean, a central interval) and draws of the three quantities brms predicts, the expected value of the
response (`epred`), the linear predictor (`linpred`) and the response itself (`predict`, posterior-predictive draws).

Group effects: `re_formula=None` uses every group term (a known group's effects from the draws; a new level's drawn
from the group distribution, per draw, when `allow_new_levels`, else refused naming it), `re_formula="NA"` (or
"~0", brms' two spellings) none: population-level predictions. New rows are read by column name
(`raysampler.evaluation.newdata`)."""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from ..errors import ArgumentError
from ..models.contract import Model
from .fits import BLOCK_ROWS, DEFAULT_DRAWS, DrawsArg, Fit, flat_draws, model_of, thin_draws, uniforms
from .newdata import new_rows, read_new_rows

__all__ = ["PREDICT_KINDS", "RE_FORMULA_NONE", "PredictKind", "mean_prediction", "new_rows", "predict"]

PredictKind = Literal["mean", "draws", "interval", "epred", "linpred", "predict"]
#: the kinds of prediction: summaries per row (mean, interval) and draws per draw and row (the others)
PREDICT_KINDS: tuple[str, ...] = ("mean", "draws", "interval", "epred", "linpred", "predict")
#: `re_formula` values that leave every group term out (brms' `re_formula = NA` and `re_formula = ~0`)
RE_FORMULA_NONE: tuple[str, ...] = ("NA", "~0")
#: the model method each kind needs
_NEEDS = {
    "mean": "predict_mean",
    "epred": "predict_mean",
    "linpred": "linear_predictor",
    "draws": "predict_draw",
    "predict": "predict_draw",
    "interval": "predict_draw",
}


def predict(
    result: Fit,
    X: Any,
    kind: PredictKind = "mean",
    *,
    draws: DrawsArg = DEFAULT_DRAWS,
    prob: float = 0.9,
    seed: int = 0,
    re_formula: str | None = None,
    allow_new_levels: bool = True,
) -> np.ndarray:
    """The posterior predictive at new rows X: a DataFrame or a mapping of column name → values (read by name; a
    formula model needs the columns its formula reads, not the response), or an array in the data's column order.

    kind: "mean" E[y | x] averaged over the draws (n,), or the class probabilities (n, C) for a multiclass model;
    "interval" (n, 2), the central `prob` interval of the predictive draws; per draw (S, n): "epred" E[y | x]
    ((S, n, C) for a multiclass model), "linpred" the linear predictor (offset included, before the inverse link),
    "predict" (or its older name "draws") posterior-predictive draws of y.

    re_formula: None, every group term; "NA" (or "~0"), none (population-level). allow_new_levels: a group label the
    run never saw gets effects drawn from its group's distribution (seeded by `seed` and the label), as brms'
    allow_new_levels = TRUE; False refuses it, naming the level. Errors name the argument (X, kind, draws, prob,
    re_formula, allow_new_levels)."""
    kind = _check_kind(kind)
    population = _check_re_formula(re_formula)
    if not isinstance(allow_new_levels, bool):
        raise ArgumentError(("allow_new_levels",), f"allow_new_levels must be True or False, got {allow_new_levels!r}")
    model = model_of(result, _NEEDS[kind])
    rows = read_new_rows(model, X, "X")
    Xn = rows.X
    names = tuple(result.param_names)
    unseen = getattr(model, "unseen_groups", None)  # group models: local factors' and spanning factors' levels
    if unseen is not None and not population and not allow_new_levels:
        new = unseen(Xn, names, rows.text)
        if new:
            shown = ", ".join(f"{g}={label!r}" for g, label in new[:5]) + (" ..." if len(new) > 5 else "")
            raise ArgumentError(
                ("X",),
                f"X has group level(s) the run never saw: {shown}; pass allow_new_levels=True to draw their effects "
                "from the group distribution, or re_formula='NA' to predict without group effects",
            )
    draws_ = flat_draws(thin_draws(result.draws, draws))
    theta = model.evaluation_x(Xn, np.zeros(Xn.shape[0]), draws_, names, seed)
    if population:
        theta = theta.copy()
        theta[:, model.dim :] = 0.0  # every group's effects r = 0: the population-level predictor
    if kind == "mean":
        return mean_prediction(model, Xn, theta)
    if kind == "epred":
        return _per_draw(model.predict_mean, Xn, theta)
    if kind == "linpred":
        return _per_draw(model.linear_predictor, Xn, theta)
    if model.target_kind in ("multiclass", "vector") and kind == "interval":
        raise ArgumentError(
            ("kind",), f"kind='interval' needs a scalar ordered target; this model's is {model.target_kind}"
        )
    if not (isinstance(prob, (int, float)) and 0.0 < prob < 1.0):
        raise ArgumentError(("prob",), f"prob must be a number in (0, 1), got {prob!r}")
    ydraw = model.predict_draw(Xn, theta, uniforms(theta.shape[0], seed)).T  # (S, n)
    if kind in ("draws", "predict"):
        return ydraw
    lo, hi = np.quantile(ydraw, [(1.0 - prob) / 2.0, (1.0 + prob) / 2.0], axis=0)
    return np.column_stack([lo, hi])


def _check_kind(kind: Any) -> PredictKind:
    if kind not in PREDICT_KINDS:
        raise ArgumentError(("kind",), f"kind must be one of {', '.join(map(repr, PREDICT_KINDS))}, got {kind!r}")
    return kind


def _check_re_formula(re_formula: Any) -> bool:
    """Whether `re_formula` leaves the group terms out (True) or keeps them all (None: False)."""
    if re_formula is None:
        return False
    if isinstance(re_formula, str) and re_formula.replace(" ", "") in RE_FORMULA_NONE:
        return True
    raise ArgumentError(
        ("re_formula",),
        f"re_formula must be None (every group term) or 'NA' / '~0' (none: population-level), got {re_formula!r}",
    )


def _per_draw(method: Any, X: np.ndarray, theta: np.ndarray) -> np.ndarray:
    """A per-row, per-draw quantity (n, S) or (n, S, C) of the model at draws theta as (S, n) or (S, n, C), in row
    blocks."""
    parts = [
        np.moveaxis(np.asarray(method(X[a : a + BLOCK_ROWS], theta)), 0, 1) for a in range(0, X.shape[0], BLOCK_ROWS)
    ]
    return np.concatenate(parts, axis=1) if parts else np.empty((theta.shape[0], 0))


def mean_prediction(model: Model, X: np.ndarray, theta: np.ndarray) -> np.ndarray:
    """E[y | x] averaged over the draws theta (S, d), in row blocks: (n,) or (n, C)."""
    parts = [model.predict_mean(X[a : a + BLOCK_ROWS], theta).mean(axis=1) for a in range(0, X.shape[0], BLOCK_ROWS)]
    return np.concatenate(parts) if parts else np.empty((0,))
