"""Bayesian binomial regression with logit link: y_j successes out of m_j trials, y_j ~ Binomial(m_j, σ(x_jᵀβ))."""

from __future__ import annotations

import numbers
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.special import expit, gammaln

from ..errors import ArgumentError
from .common import RowTerms, RowValues, _check_Xy, _EtaGLM, _gram_lambda_max, _rows_of, _unbound, weighted_grams
from .contract import DataSpec, runs_own
from .logistic import _sigmoid_inplace, _softplus_sum, logistic_rows, softplus

__all__ = ["BinomialRegression"]


def _check_trial_counts(m: np.ndarray, what: str) -> None:
    if m.size and (m.min() < 0 or not np.array_equal(m, np.floor(m))):
        raise ValueError(f"{what} must hold non-negative integers (numbers of trials)")


@dataclass(frozen=True)
class BinomialRegression(_EtaGLM):
    """U_i(β) = Σ_j [m_j log(1 + exp(η_j)) − y_j η_j], η_j = x_jᵀβ (the log binomial coefficients are dropped).

    `trials` (m_j, required) is the name of a column of X (then not a feature), an array over the original data's
    rows (see `_GLM` and `shard_data`), or one integer for every row. Gradient X_cᵀ(m σ(η) − y); Hessian
    X_cᵀ diag(m σ(η)(1 − σ(η))) X_c ≼ X_cᵀ diag(m) X_c / 4, hence the global bound `smoothness`.
    """

    name = "binomial_regression"
    target_kind = "count"
    _extra = "trials"
    _takes_groups = True

    trials: str | RowValues | int | None = field(default=None, kw_only=True)

    def _constant_extra(self, value: Any) -> bool:
        if isinstance(value, numbers.Integral) and not isinstance(value, bool):
            if value < 1:
                raise ArgumentError(
                    ("model", "trials"), f"trials must be >= 1 when one count is given for every row, got {value!r}"
                )
            object.__setattr__(self, "trials", int(value))
            return True
        return False

    def _check_extra_values(self, values: np.ndarray, name: str) -> None:
        _check_trial_counts(values, name)

    def _bind_fields(self, spec: DataSpec) -> dict[str, Any]:
        if self.trials is None:
            raise ArgumentError(
                ("model", "trials"),
                "trials: BinomialRegression needs the number of trials of each row (a column name, an "
                "array over the rows, or one integer for every row)",
            )
        return super()._bind_fields(spec)

    def _m(self, X: np.ndarray) -> np.ndarray:
        """Trials of this shard's rows, (n,)."""
        if self.n_features is None or self.trials is None:
            raise _unbound(self, "trials" if self.trials is None else "n_features")
        if self._xcol is not None:
            return X[:, self._xcol]
        assert isinstance(self.trials, (int, float))  # a constant count (a column or array sets _xcol)
        return np.full(X.shape[0], float(self.trials))

    def validate(self, X: np.ndarray, y: np.ndarray, argname: str = "data") -> None:
        X, y = _check_Xy(X, y, argname, self.n_features)
        m = self._m(X)
        if self._xcol is not None:
            _check_trial_counts(m, f"{argname}: trials")
        if y.size:
            if y.dtype.kind == "f" and not np.array_equal(y, np.floor(y)):
                raise ValueError(f"{argname}: successes y must be integers")
            if y.min() < 0 or np.any(y > m):
                raise ValueError(f"{argname}: successes y must lie between 0 and the number of trials")

    def potential(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        eta = self._eta(X, x)
        return _softplus_sum(eta, self._m(X)) - y @ eta

    def grad(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        r = self._eta(X, x)
        _sigmoid_inplace(r)
        r *= self._m(X)[:, None]
        r -= y[:, None]
        return self._pull(X, r)

    def potential_and_grad(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        eta = self._eta(X, x)
        m = self._m(X)
        U = _softplus_sum(eta, m) - y @ eta
        _sigmoid_inplace(eta)
        eta *= m[:, None]
        eta -= y[:, None]
        return U, self._pull(X, eta)

    def _weights(self, X: np.ndarray, x: np.ndarray):
        """m σ(η)(1 − σ(η)): (n, K)."""
        s = expit(self._eta(X, x))
        return self._m(X)[:, None] * s * (1.0 - s)

    def hvp(self, X: np.ndarray, y: np.ndarray, x: np.ndarray, v: np.ndarray) -> np.ndarray:
        Xv = self._eta_dir(X, v)
        Xv *= self._weights(X, x)
        return self._pull(X, Xv)

    def hessian(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        Xc = self._coef_X(X)
        w = self._weights(X, np.asarray(x, dtype=np.float64)[None, :])[:, 0]
        H = (Xc * w[:, None]).T @ Xc
        return 0.5 * (H + H.T)

    def hessians(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        """X_cᵀ diag(m σ(1 − σ)) X_c at the K points at once (`weighted_grams`)."""
        if not runs_own(self, BinomialRegression, "hessian"):
            return super().hessians(X, y, x)
        return weighted_grams(self._coef_X(X), self._weights(X, np.asarray(x, dtype=np.float64)))

    def hessian_diag(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        x, single = _rows_of(x)
        Xc = self._coef_X(X)
        diag = self._weights(X, x).T @ (Xc * Xc)
        return diag[0] if single else diag

    def smoothness(self, X: np.ndarray, y: np.ndarray) -> float:
        """M_i = λ_max(X_cᵀ diag(m) X_c)/4, a global bound since σ(1 − σ) ≤ 1/4."""
        X = np.asarray(X, dtype=np.float64)
        return 0.25 * _gram_lambda_max(self._coef_X(X) * np.sqrt(self._m(X))[:, None])

    # ------------------------------------------------------------------ per row (group effects)

    def row_terms(self, X: np.ndarray, y: np.ndarray, eta: np.ndarray, psi: np.ndarray, order: int) -> RowTerms:
        """ℓ_j = m log(1 + e^η) − yη; ∂ℓ/∂η = mσ(η) − y; ∂²ℓ/∂η² = mσ(1 − σ) (`logistic_rows`)."""
        return logistic_rows(eta, y, self._m(X), psi, order)

    def eta_log_likelihood(self, X: np.ndarray, y: np.ndarray, eta: np.ndarray, psi: np.ndarray) -> np.ndarray:
        m = self._m(X)
        y = np.asarray(y, dtype=np.float64)
        log_choose = gammaln(m + 1.0) - gammaln(y + 1.0) - gammaln(m - y + 1.0)
        return log_choose[:, None] + y[:, None] * eta - m[:, None] * softplus(eta)

    def eta_mean(self, X: np.ndarray, eta: np.ndarray, psi: np.ndarray) -> np.ndarray:
        return self._m(X)[:, None] * expit(eta)

    def eta_draw(self, X: np.ndarray, eta: np.ndarray, psi: np.ndarray, u: np.ndarray) -> np.ndarray:
        # here, not at import: scipy.stats is slow to import, and every worker process would pay for it
        # (docs/performance.md, "Measurements behind choices in the code")
        from scipy import stats

        return stats.binom.ppf(np.atleast_2d(u), self._m(X)[:, None], expit(eta))
