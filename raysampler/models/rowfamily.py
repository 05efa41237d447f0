"""`RowFamilyGLM`: the common base of the regression families written by their per-row terms alone (Student-t,
Gamma, Beta, Weibull, exponential, zero-inflated Poisson): θ = (β, ψ), η_j = x_jᵀβ (+ an offset), and the family's
own parameters ψ (log σ, log ν, log shape, log φ, each sampled on the log scale and reported as its exponential; a
probability such as the zero-inflation zi on the logit scale, reported as itself).

A family gives `row_terms` (each row's loss ℓ_j and its first and second derivatives in η_j and ψ, `RowTerms`),
and the per-row checks `eta_log_likelihood`, `eta_mean`, `eta_draw`. Everything the sampler calls on a shard is
computed from those here, once for every family: U_i = Σ_j ℓ_j, ∇U_i = (X_cᵀ ∂ℓ/∂η, Σ_j ∂ℓ/∂ψ), the Hessian-vector
product, the dense Hessians at K points (the β block by `weighted_grams`), the clipped diagonal. The same
`row_terms` carries group effects (`HierarchicalGLM`), so each family has them too."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from ..priors import check_coef_prior, check_positive_prior, check_probability_prior
from .common import _GLM, RowTerms, _check_positive, _check_Xy, _gram_lambda_max, _rows_of, weighted_grams
from .contract import ParamBlock, runs_own

__all__ = ["RowFamilyGLM", "check_response"]


def check_response(y: np.ndarray, ok: np.ndarray, argname: str, family: str, support: str, column: str) -> None:
    """ValueError naming the shard (`argname`), the response's column, the family, the response's support and the
    first row outside it."""
    bad = np.flatnonzero(~ok)
    if bad.size:
        j = int(bad[0])
        raise ValueError(
            f"{argname}: the {family} family's response (column {column!r}) must be {support} in every row; row {j} "
            f"has {float(y[j])!r} ({bad.size} row(s) outside)"
        )


@dataclass(frozen=True)
class RowFamilyGLM(_GLM):
    """A GLM whose family parameters ψ (each on the log scale) and likelihood are given by `row_terms` (module
    docstring). `_family_params` names them, brms' classes: ((name, prior field, default prior), ...); their priors
    are the fields named there. `smoothness` is a curvature scale, not a bound: `smoothness_safety` times the largest
    of λ_max(X_cᵀ diag(w) X_c), w = `_curvature_weights`, and the row count (one unit of information per row on each
    family parameter, about what they carry at the fit)."""

    smoothness_safety: float = field(default=2.0, kw_only=True)

    _takes_groups = True
    #: the family's own parameters, in θ's order after β: (brms' name, prior field, the default prior)
    _family_params: ClassVar[tuple[tuple[str, str, Any], ...]] = ()
    #: the parameters that are probabilities (sampled as logits, reported as themselves, a `BetaPrior`); the others
    #: are positive (sampled as logs)
    _probabilities: ClassVar[frozenset[str]] = frozenset()
    #: the parameters on the whole real line (sampled and reported as they are, a coefficient prior)
    _reals: ClassVar[frozenset[str]] = frozenset()

    def __post_init__(self) -> None:
        object.__setattr__(self, "smoothness_safety", _check_positive("smoothness_safety", self.smoothness_safety))
        for name, prior_field, default in self._family_params:
            value = default if getattr(self, prior_field) is None else getattr(self, prior_field)
            if name in self._reals:
                object.__setattr__(self, prior_field, check_coef_prior(value, prior_field))
                continue
            check = check_probability_prior if name in self._probabilities else check_positive_prior
            object.__setattr__(self, prior_field, check(value, prior_field))
        super().__post_init__()

    #: the response's support: brms' family name and the support in words (None: every real number)
    _support: ClassVar[tuple[str, str] | None] = None

    def response_ok(self, y: np.ndarray) -> np.ndarray:
        """Which rows' responses lie in the family's support (bool (n,)); every finite number by default."""
        return np.isfinite(y)

    def check_response(self, y: np.ndarray, argname: str = "data", column: str = "y") -> None:
        """A response outside the family's support (`_support`) is a ValueError naming the shard, the column and the
        first row outside (a formula model passes its response's column name)."""
        if self._support is not None:
            y = np.asarray(y, dtype=np.float64)
            check_response(y, self.response_ok(y), argname, self._support[0], self._support[1], column)

    def validate(self, X: np.ndarray, y: np.ndarray, argname: str = "data") -> None:
        X, y = _check_Xy(X, y, argname, self.n_features)
        self.check_response(y, argname)

    def _default_coef_prior(self) -> Any:
        from ..priors import Normal

        return Normal(0.0, 10.0)

    # ------------------------------------------------------------------ layout

    @property
    def n_family(self) -> int:
        """How many family parameters follow β in θ."""
        return len(self._family_params)

    @property
    def dim(self) -> int:
        return self.n_coef + self.n_family

    def param_blocks(self) -> tuple[ParamBlock, ...]:
        own = tuple(
            ParamBlock(n, 1, None, None, "sigmoid" if n in self._probabilities else "exp")
            for n, _, _ in self._family_params
        )
        return super().param_blocks() + own

    def _prior_parts(self) -> list:
        p = self.n_coef
        own = [(np.array([p + k]), getattr(self, f)) for k, (_, f, _) in enumerate(self._family_params)]
        return super()._prior_parts() + own

    # ------------------------------------------------------------------ U_i and its derivatives from the row terms

    def _terms(self, X: np.ndarray, y: np.ndarray, x: np.ndarray, order: int) -> RowTerms:
        x = np.asarray(x, dtype=np.float64)
        eta = self._eta(X, x[:, : self.n_coef])
        return self.row_terms(X, np.asarray(y, dtype=np.float64), eta, self._psi(x), order)

    def potential(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        return self._terms(X, y, x, 0).loss.sum(axis=0)

    def grad(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        return self.potential_and_grad(X, y, x)[1]

    def potential_and_grad(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        t = self._terms(X, y, x, 1)
        assert t.d1 is not None and t.g_psi is not None
        g = np.empty_like(np.asarray(x, dtype=np.float64))
        g[:, : self.n_coef] = self._pull(X, t.d1)
        g[:, self.n_coef :] = t.g_psi
        return t.loss.sum(axis=0), g

    def hvp(self, X: np.ndarray, y: np.ndarray, x: np.ndarray, v: np.ndarray) -> np.ndarray:
        t = self._terms(X, y, x, 2)
        assert t.d2 is not None and t.h_eta_psi is not None and t.h_psi is not None
        p = self.n_coef
        v = np.asarray(v, dtype=np.float64)
        Xv = self._eta_dir(X, v[:, :p])  # (n, K)
        vpsi = v[:, p:]  # (K, m)
        out = np.empty_like(v)
        out[:, :p] = self._pull(X, t.d2 * Xv + np.einsum("nkm,km->nk", t.h_eta_psi, vpsi))
        out[:, p:] = np.einsum("nkm,nk->km", t.h_eta_psi, Xv) + np.einsum("kml,kl->km", t.h_psi, vpsi)
        return out

    def hessian(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        return self._closed_hessians(X, y, np.asarray(x, dtype=np.float64)[None, :])[0]

    def hessians(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        """`hessian` at the K points at once: the β block by `weighted_grams` (a negative weight, a Student-t's
        outlier, takes the general product), the (β, ψ) columns as one product over the rows, ψ's block summed."""
        if not runs_own(self, RowFamilyGLM, "hessian"):
            return super().hessians(X, y, x)
        return self._closed_hessians(X, y, x)

    def _closed_hessians(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        t = self._terms(X, y, x, 2)
        assert t.d2 is not None and t.h_eta_psi is not None and t.h_psi is not None
        Xc = self._coef_X(X)
        p, K = self.n_coef, t.d2.shape[1]
        H = np.empty((K, self.dim, self.dim))
        H[:, :p, :p] = weighted_grams(Xc, t.d2)
        cross = np.einsum("nkm,np->kpm", t.h_eta_psi, Xc)  # (K, p, m)
        H[:, :p, p:] = cross
        H[:, p:, :p] = np.swapaxes(cross, 1, 2)
        H[:, p:, p:] = 0.5 * (t.h_psi + np.swapaxes(t.h_psi, 1, 2))
        return H

    def hessian_diag(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        """The Hessian's diagonal, clipped at 0 (a PSD diagonal preconditioner)."""
        x, single = _rows_of(x)
        t = self._terms(X, y, x, 2)
        assert t.d2 is not None and t.h_psi is not None
        Xc = self._coef_X(X)
        diag = np.empty_like(x)
        diag[:, : self.n_coef] = t.d2.T @ (Xc * Xc)
        diag[:, self.n_coef :] = np.diagonal(t.h_psi, axis1=1, axis2=2)
        diag = np.clip(diag, 0.0, None)
        return diag[0] if single else diag

    def _curvature_weights(self, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Each row's ∂²ℓ/∂η² near the fit (n,), for `smoothness`: a family's own scale."""
        return np.ones(np.shape(y)[0])

    def smoothness(self, X: np.ndarray, y: np.ndarray) -> float:
        """A curvature scale, *not* a bound (class docstring): far from the fit the Hessian can be larger."""
        w = np.clip(self._curvature_weights(X, np.asarray(y, dtype=np.float64)), 0.0, None)
        Xc = self._coef_X(np.asarray(X, dtype=np.float64))
        lam = _gram_lambda_max(Xc * np.sqrt(w)[:, None])
        return self.smoothness_safety * max(lam, float(max(Xc.shape[0], 1)))

    # ------------------------------------------------------------------ checks of the fit

    def log_likelihood(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        eta = self._eta(X, x[:, : self.n_coef])
        return self.eta_log_likelihood(X, np.asarray(y, dtype=np.float64), eta, self._psi(x))

    def predict_mean(self, X: np.ndarray, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        return self.eta_mean(X, self._eta(X, x[:, : self.n_coef]), self._psi(x))

    def predict_draw(self, X: np.ndarray, x: np.ndarray, u: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        return self.eta_draw(X, self._eta(X, x[:, : self.n_coef]), self._psi(x), u)
