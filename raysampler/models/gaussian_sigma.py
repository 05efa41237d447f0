"""Distributional Gaussian regression (brms' `bf(y ~ x, sigma ~ z)`): the noise sd has a linear predictor of its
own, log σ_j = z_jᵀγ, so the spread of y may change with the rows (heteroscedastic regression).

θ = (β, γ). Per row the whole −log density ℓ_j = ½ log 2π + s_j + ½ r_j² e^{−2 s_j}, r_j = y_j − η_j, s_j = z_jᵀγ;
its derivatives ∂ℓ/∂η = −r e^{−2s}, ∂ℓ/∂s = 1 − r² e^{−2s}, ∂²ℓ/∂η² = e^{−2s}, ∂²ℓ/∂η∂s = 2 r e^{−2s} and
∂²ℓ/∂s² = 2 r² e^{−2s} enter γ's through z_j (`RowFamilyGLM` sums them over the rows, group effects included). The
columns of z are columns of X named by `sigma_columns` (a formula builds them from its `sigma=` part); they are not
features of the mean. With z = 1 alone this is the Gaussian family with σ unknown, sampled as log σ = γ with a
Normal prior on it rather than one on σ."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import special

from ..errors import ArgumentError
from ..priors import CoefPrior, Normal, check_coef_prior
from .common import RowTerms
from .contract import ParamBlock
from .rowfamily import RowFamilyGLM

__all__ = ["GaussianSigmaRegression"]

_HALF_LOG_2PI = 0.5 * np.log(2.0 * np.pi)


@dataclass(frozen=True)
class GaussianSigmaRegression(RowFamilyGLM):
    """y_j ~ N(x_jᵀβ, σ_j²), log σ_j = z_jᵀγ (module docstring). `sigma_columns` names z's columns among X's;
    `sigma_coef_prior` is γ's prior (default N(0, 2.5²) on each: on the log scale a factor e^{2.5} ≈ 12 in σ per unit
    of z, wide for standardised predictors); `coef_prior` β's (default N(0, 10²), as the Gaussian family's with σ
    unknown). Predictions: the mean η_j, draws η_j + σ_j Φ⁻¹(u)."""

    name = "gaussian_sigma_regression"
    target_kind = "real"

    sigma_columns: tuple[str, ...] = field(default=(), kw_only=True)
    sigma_coef_prior: CoefPrior | None = field(default=None, kw_only=True)
    _sigma_cols: np.ndarray | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        cols = self.sigma_columns
        if isinstance(cols, str) or not isinstance(cols, tuple | list) or not cols:
            raise ArgumentError(
                ("model", "sigma_columns"), f"sigma_columns must name one column of X or more, got {cols!r}"
            )
        object.__setattr__(self, "sigma_columns", tuple(str(c) for c in cols))
        prior = Normal(0.0, 2.5) if self.sigma_coef_prior is None else self.sigma_coef_prior
        object.__setattr__(self, "sigma_coef_prior", check_coef_prior(prior, "sigma_coef_prior"))
        super().__post_init__()

    def _resolve_extra(self) -> None:
        super()._resolve_extra()
        if self.n_features is None:
            return
        if self.columns is None:
            raise ArgumentError(("model", "sigma_columns"), "sigma_columns names columns, but the data have none")
        missing = [c for c in self.sigma_columns if c not in self.columns]
        if missing:
            raise ArgumentError(
                ("model", "sigma_columns"),
                f"sigma_columns: {missing[0]!r} is not a column of X; the columns are {list(self.columns)}",
            )
        sig = np.array([self.columns.index(c) for c in self.sigma_columns], dtype=np.intp)
        coef = np.array([j for j in range(self.n_features) if j not in set(sig.tolist())], dtype=np.intp)
        object.__setattr__(self, "_sigma_cols", sig)
        object.__setattr__(self, "_coef_cols", coef)
        size = self.sigma_coef_prior.size if self.sigma_coef_prior is not None else None
        if size is not None and size != sig.size:
            raise ArgumentError(
                ("model", "sigma_coef_prior"),
                f"sigma_coef_prior has {size} values per argument but sigma has {sig.size} coefficients",
            )

    def _default_coef_prior(self) -> Any:
        return Normal(0.0, 10.0)

    # ------------------------------------------------------------------ layout: X = [mean's columns, z's], any order

    @property
    def n_coef(self) -> int:
        if self.n_features is None:
            return super().n_coef
        return self.n_features - len(self.sigma_columns)

    @property
    def n_family(self) -> int:
        return len(self.sigma_columns)

    def param_blocks(self) -> tuple[ParamBlock, ...]:
        labels = tuple(c.removeprefix("sigma_") for c in self.sigma_columns)  # a formula's "sigma_x" is "x"
        return (*super().param_blocks(), ParamBlock("b_sigma", self.n_family, "sigma_coef", labels))

    def _prior_parts(self) -> list:
        p = self.n_coef
        return [(np.arange(p), self.coef_prior), (np.arange(p, p + self.n_family), self.sigma_coef_prior)]

    def _family_cols(self) -> np.ndarray:
        """The mean's columns and z's, in X's order."""
        assert self._coef_cols is not None and self._sigma_cols is not None, "bind the model first"
        return np.sort(np.concatenate([self._coef_cols, self._sigma_cols]))

    def _mean_X(self, X: np.ndarray) -> np.ndarray:
        assert self._coef_cols is not None, "bind the model first"
        return X[:, self._coef_cols]

    def _z(self, X: np.ndarray) -> np.ndarray:
        assert self._sigma_cols is not None, "bind the model first"
        return np.asarray(X, dtype=np.float64)[:, self._sigma_cols]

    def _eta(self, X: np.ndarray, beta: np.ndarray) -> np.ndarray:
        return self._mean_X(X) @ beta.T

    def _eta_dir(self, X: np.ndarray, v: np.ndarray) -> np.ndarray:
        return self._mean_X(X) @ v.T

    def _pull(self, X: np.ndarray, R: np.ndarray) -> np.ndarray:
        return R.T @ self._mean_X(X)

    def _coef_X(self, X: np.ndarray) -> np.ndarray:
        return self._mean_X(X)

    # ------------------------------------------------------------------ the rows' terms

    def row_terms(self, X: np.ndarray, y: np.ndarray, eta: np.ndarray, psi: np.ndarray, order: int) -> RowTerms:
        """ℓ_j and its derivatives (module docstring), γ's through z_j: g_γ = Σ_j ∂ℓ_j/∂s_j z_j, the (η, γ) cross
        terms ∂²ℓ_j/∂η∂s z_j per row and γγ's Σ_j ∂²ℓ_j/∂s² z_j z_jᵀ."""
        Z = self._z(X)
        s = Z @ np.asarray(psi, dtype=np.float64).T  # (n, K)
        r = y[:, None] - eta
        with np.errstate(over="ignore"):
            e = np.exp(-2.0 * s)
        r2e = r * r * e
        loss = _HALF_LOG_2PI + s + 0.5 * r2e
        if order == 0:
            return RowTerms(loss)
        d1 = -r * e
        g_psi = (1.0 - r2e).T @ Z  # (K, m)
        if order == 1:
            return RowTerms(loss, d1, g_psi)
        h_eta_psi = (2.0 * r * e)[:, :, None] * Z[:, None, :]  # (n, K, m)
        h_psi = np.einsum("nk,na,nb->kab", 2.0 * r2e, Z, Z)
        return RowTerms(loss, d1, g_psi, e, h_eta_psi, h_psi)

    def _curvature_weights(self, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        """e^{−2ŝ_j}, each row's ∂²ℓ/∂η² at a rough fit: ŝ from the least-squares residuals r_j by regressing
        log r_j² on z_j (E log χ²₁ = −1.27: log r² ≈ 2·s − 1.27), so the rows of small σ weigh in as they do."""
        X = np.asarray(X, dtype=np.float64)
        Xc, Z = self._mean_X(X), self._z(X)
        n, p = Xc.shape
        if n <= p + Z.shape[1]:
            var = float(np.var(y)) if n > 1 else 0.0
            return np.full(n, 1.0 / var if var > 0 else 1.0)
        res = y - Xc @ np.linalg.lstsq(Xc, y, rcond=None)[0]
        log_r2 = np.log(np.maximum(res * res, 1e-300)) + 1.27
        s = 0.5 * (Z @ np.linalg.lstsq(Z, log_r2, rcond=None)[0])
        return np.exp(-2.0 * np.clip(s, -30.0, 30.0))

    # ------------------------------------------------------------------ checks of the fit

    def eta_log_likelihood(self, X: np.ndarray, y: np.ndarray, eta: np.ndarray, psi: np.ndarray) -> np.ndarray:
        return -self.row_terms(X, np.asarray(y, dtype=np.float64), eta, psi, 0).loss

    def eta_mean(self, X: np.ndarray, eta: np.ndarray, psi: np.ndarray) -> np.ndarray:
        return eta

    def eta_draw(self, X: np.ndarray, eta: np.ndarray, psi: np.ndarray, u: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore"):
            sd = np.exp(self._z(X) @ np.asarray(psi, dtype=np.float64).T)
        return eta + sd * special.ndtri(np.atleast_2d(u))
