"""Helpers shared by the built-in models: argument and data checks, λ_max(XᵀX), and `_GLM`, the common base of
the regression models (coefficients β with a `coef_prior`, named by X's columns, optionally a per-row input)."""

from __future__ import annotations

import functools
import hashlib
import math
import numbers
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

import numpy as np
from scipy import linalg

from ..errors import ArgumentError
from ..priors import CoefPrior, GaussianPrior, Normal, Prior, build_prior, check_coef_prior
from .contract import DataSpec, Model, ParamBlock
from .groups import bind_hierarchical, normalise_group_effects, refuse_text_columns

_C = TypeVar("_C", bound=type)


def renamed_arguments(**old_to_new: str) -> Callable[[_C], _C]:
    """Class decorator for a model's arguments given new names (priors are named by brms' classes: `sigma_prior`,
    `phi_prior`, docs/models.md): the old keyword still works, and reading the old attribute too, each with a
    DeprecationWarning naming the new one; both names at once is an ArgumentError. The mapping is `cls._renamed`."""

    def wrap(cls: _C) -> _C:
        init = vars(cls)["__init__"]  # the dataclass's own

        @functools.wraps(init)
        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            for old, new in old_to_new.items():
                if old in kwargs:
                    if new in kwargs:
                        raise ArgumentError((old,), f"{old} is the old name of {new}: give {new} only")
                    warnings.warn(
                        f"{cls.__name__}({old}=...) is deprecated: it is now {new}=", DeprecationWarning, stacklevel=2
                    )
                    kwargs[new] = kwargs.pop(old)
            init(self, *args, **kwargs)

        def old_name(old: str, new: str) -> property:
            def read(self: Any) -> Any:
                warnings.warn(f"{cls.__name__}.{old} is deprecated: it is now .{new}", DeprecationWarning, stacklevel=2)
                return getattr(self, new)

            return property(read, doc=f"Deprecated name of `{new}`.")

        cls.__init__ = __init__  # type: ignore[misc]
        for old, new in old_to_new.items():
            setattr(cls, old, old_name(old, new))
        cls._renamed = dict(old_to_new)  # type: ignore[attr-defined]
        return cls

    return wrap


def _check_positive(name: str, value: Any, *, integer: bool = False):
    """Return `value` as float (or int) if it is a finite number > 0 (an integer ≥ 1 if `integer`), else raise."""
    if integer:
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
            raise ArgumentError(("model", name), f"{name} must be an integer >= 1, got {value!r}")
        return int(value)
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or value <= 0:
        raise ArgumentError(("model", name), f"{name} must be a finite number > 0, got {value!r}")
    return float(value)


def _check_optional_count(name: str, value: Any, minimum: int):
    """None, or an integer ≥ `minimum` (used for the bound fields n_features / n_classes)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ArgumentError(
            ("model", name), f"{name} must be an integer >= {minimum} (or None before binding), got {value!r}"
        )
    return int(value)


def _unbound(model: Model, what: str) -> ValueError:
    return ValueError(
        f"{type(model).__name__} is not bound to data ({what} is unknown): "
        f"call model.bind(DataSpec(...)) before asking for its dimension"
    )


def _as_numeric(a, what: str, argname: str) -> np.ndarray:
    try:
        arr = np.asarray(a)
    except Exception as exc:  # ragged lists and the like
        raise ValueError(f"{argname}: {what} cannot be converted to an array ({exc})") from None
    if arr.dtype.kind not in "biuf":
        raise ValueError(f"{argname}: {what} must hold real numbers, got dtype {arr.dtype}")
    return arr


def _check_Xy(
    X: np.ndarray, y: np.ndarray, argname: str, n_features: int | None, y_ndim: int = 1
) -> tuple[np.ndarray, np.ndarray]:
    """Common data checks: shapes, row counts, feature count of a bound model, finiteness. Returns arrays."""
    X = _as_numeric(X, "X", argname)
    y = _as_numeric(y, "y", argname)
    if X.ndim != 2:
        raise ValueError(f"{argname}: X must be a 2-D array (n, p), got shape {X.shape}")
    if y.ndim != y_ndim:
        want = "a 1-D array (n,)" if y_ndim == 1 else "a 2-D array (n, p)"
        raise ValueError(f"{argname}: y must be {want}, got shape {y.shape}")
    if X.shape[0] != y.shape[0]:
        raise ValueError(f"{argname}: X has {X.shape[0]} rows but y has {y.shape[0]}")
    if n_features is not None and X.shape[1] != n_features:
        raise ValueError(f"{argname}: X has {X.shape[1]} columns but the model is bound to n_features={n_features}")
    if not np.isfinite(X).all():
        raise ValueError(f"{argname}: X contains NaN or infinite values")
    if not np.isfinite(y).all():
        raise ValueError(f"{argname}: y contains NaN or infinite values")
    return X, y


def _check_labels(y: np.ndarray, n_classes: int | None, argname: str) -> None:
    """Class labels must be integers in {0, …, n_classes−1} (only ≥ 0 if the model is unbound)."""
    if y.size == 0:
        return
    if y.dtype.kind == "f" and not np.array_equal(y, np.floor(y)):
        raise ValueError(f"{argname}: class labels y must be integers")
    if y.min() < 0:
        raise ValueError(f"{argname}: class labels y must be >= 0, got {y.min()}")
    if n_classes is not None and y.max() >= n_classes:
        raise ValueError(f"{argname}: class label {int(y.max())} out of range for n_classes={n_classes}")


def _gram_lambda_max(X: np.ndarray) -> float:
    """λ_max(XᵀX), from the smaller of the two Gram matrices XᵀX (p×p) and XXᵀ (n×n)."""
    X = np.asarray(X, dtype=np.float64)
    n, p = X.shape
    if n == 0 or p == 0:
        return 0.0
    G = X.T @ X if p <= n else X @ X.T
    m = G.shape[0]
    lam = linalg.eigvalsh(G, subset_by_index=[m - 1, m - 1], check_finite=False)[0]
    return max(float(lam), 0.0)


def weighted_grams(Xc: np.ndarray, W: np.ndarray) -> np.ndarray:
    """X_cᵀ diag(w_k) X_c for each column w_k of W (n, K): (K, p, p), exactly symmetric; a GLM's Hessians at K points.

    With weights ≥ 0 (every GLM here) each is B_kᵀB_k, B_k = √w_k ∘ X_c, which BLAS forms as a symmetric rank-n
    update: half the flops of the general product, and faster than (X_c ∘ w_k)ᵀ X_c chain by chain (and than one
    batched or einsum product) for K ≤ 64, n ≤ 20,000, p ≤ 60 on one BLAS thread (docs/performance.md,
    "Measurements behind choices in the code").
    A negative or NaN weight takes the general product, symmetrised."""
    Xc = np.asarray(Xc, dtype=np.float64)
    W = np.asarray(W, dtype=np.float64)
    K, p = W.shape[1], Xc.shape[1]
    H = np.empty((K, p, p))
    if np.all(W >= 0.0):
        S = np.sqrt(W)
        for k in range(K):
            B = Xc * S[:, k, None]
            np.matmul(B.T, B, out=H[k])
        return H
    for k in range(K):
        G = (Xc * W[:, k, None]).T @ Xc
        H[k] = 0.5 * (G + G.T)
    return H


def _rows_of(x: np.ndarray) -> tuple[np.ndarray, bool]:
    """View a single point (d,) as one chain (1, d); report whether it was single."""
    x = np.asarray(x, dtype=np.float64)
    return (x[None, :], True) if x.ndim == 1 else (x, False)


@dataclass(frozen=True, eq=False)
class RowValues:
    """A per-row input held by a model (an offset, trial counts) given as an array over the original data's rows;
    compared and hashed by content so that models stay hashable. `Model.shard_data` selects a shard's rows."""

    values: np.ndarray

    def __post_init__(self) -> None:
        arr = np.array(self.values, dtype=np.float64).reshape(-1)
        arr.setflags(write=False)
        object.__setattr__(self, "values", arr)

    def __len__(self) -> int:
        return int(self.values.shape[0])

    def __eq__(self, other) -> bool:
        return isinstance(other, RowValues) and np.array_equal(self.values, other.values)

    def __hash__(self) -> int:
        return hash((len(self), hashlib.sha1(self.values.tobytes()).hexdigest()))

    def __repr__(self) -> str:
        return f"RowValues(n={len(self)})"


def _labels(columns: tuple[str, ...] | None, positions: np.ndarray) -> tuple[str, ...] | None:
    return None if columns is None else tuple(columns[j] for j in positions)


def _check_columns(value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, (str, bytes)) or not all(isinstance(c, str) for c in value):
        raise ArgumentError(
            ("model", "columns"), f"columns must be a sequence of column names (strings), got {value!r}"
        )
    return tuple(value)


def _resolve_coef_prior(model, default: CoefPrior, allow_flat: bool, default_mean: float | tuple = 0.0) -> None:
    """Normalise a model's (prior_scale, coef_prior): coef_prior is always set afterwards (from prior_scale as
    Normal(default_mean, prior_scale), else `default`); prior_scale mirrors a Normal's finite scalar scale (else None),
    so that `dataclasses.replace` passes both back consistently. Errors name the argument."""
    ps, cp = model.prior_scale, model.coef_prior
    if ps is not None:
        ps = _check_positive("prior_scale", ps)
    if cp is not None:
        cp = check_coef_prior(cp)
        if ps is not None and not (isinstance(cp, Normal) and cp.scale == ps):
            raise ArgumentError(
                ("model", "coef_prior"),
                f"give prior_scale or coef_prior, not both (prior_scale={ps!r}, coef_prior={cp!r})",
            )
    elif ps is not None:
        cp = Normal(default_mean, ps)
    else:
        cp = default
    if not allow_flat and isinstance(cp, Normal) and np.any(np.isinf(cp.scale)):
        raise ArgumentError(
            ("model", "coef_prior", "scale"),
            f"coef_prior: {type(model).__name__} cannot have a flat prior (scale=inf): its likelihood "
            "does not make the posterior proper; give a finite scale",
        )
    scalar = isinstance(cp, Normal) and not isinstance(cp.scale, tuple) and math.isfinite(cp.scale)
    object.__setattr__(model, "coef_prior", cp)
    object.__setattr__(model, "prior_scale", cp.scale if scalar else None)


@dataclass(frozen=True)
class RowTerms:
    """A family's potential as a function of each row's linear predictor η_j (offset included) and the family's own
    parameters ψ (log σ, log φ; none for most), at K points: the per-row losses ℓ_j (n, K) with U = Σ_j ℓ_j, and
    (order ≥ 1) d1 = ∂ℓ_j/∂η_j (n, K), g_psi = Σ_j ∂ℓ_j/∂ψ (K, m); (order 2) d2 = ∂²ℓ_j/∂η_j² (n, K),
    h_eta_psi = ∂²ℓ_j/∂η_j∂ψ (n, K, m) and h_psi = Σ_j ∂²ℓ_j/∂ψ² (K, m, m). What group effects are computed from
    (`HierarchicalGLM`): the rows' group parts enter η_j by gathers, their derivatives leave by segment sums."""

    loss: np.ndarray
    d1: np.ndarray | None = None
    g_psi: np.ndarray | None = None
    d2: np.ndarray | None = None
    h_eta_psi: np.ndarray | None = None
    h_psi: np.ndarray | None = None


@dataclass(frozen=True)
class _GLM(Model):
    """Common base of the regression models: coefficients β ∈ R^p, one per feature column of X, with prior
    `coef_prior` (`prior_scale` is shorthand for coef_prior=Normal(0, prior_scale)).

    A family may take one per-row input besides X (`_extra`: "offset" or "trials"), given as the *name of a column of
    X* — taken out of the features at bind time, so β has one entry per other column — or as an *array over the
    original rows* (a `RowValues`), which `shard_data` appends to each shard's X as its last column. Either way the
    bound model reads it from column `_xcol` of X, and `n_features` counts X's columns as the methods receive them.
    """

    # shorthand for coef_prior=Normal(0, prior_scale): not in the repr, which shows the one prior (coef_prior)
    prior_scale: float | None = field(default=None, repr=False)
    # None means "the family's default"; __post_init__ always resolves it to a prior spec
    coef_prior: CoefPrior = field(default=None, kw_only=True)  # type: ignore[assignment]
    n_features: int | None = field(default=None, kw_only=True)
    columns: tuple[str, ...] | None = field(default=None, kw_only=True)
    group_effects: Any = field(
        default=None,
        kw_only=True,
        metadata={"description": "varying effects by group: rs.GroupEffects(group=..., ...) or a tuple of them"},
    )
    # derived in __post_init__ (not arguments): the per-row input's column of X, and the coefficients' columns
    _xcol: int | None = field(default=None, init=False, repr=False, compare=False)
    _coef_cols: np.ndarray | None = field(default=None, init=False, repr=False, compare=False)

    #: the per-row input this family takes ("offset", "trials") or None
    _extra: ClassVar[str | None] = None
    #: whether a flat coefficient prior can give a proper posterior in this family
    _allow_flat: ClassVar[bool] = True
    #: whether the family takes group effects: it defines `row_terms` and the per-row checks `eta_log_likelihood`,
    #: `eta_mean` and `eta_draw` (functions of each row's linear predictor)
    _takes_groups: ClassVar[bool] = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "n_features", _check_optional_count("n_features", self.n_features, 1))
        object.__setattr__(self, "columns", _check_columns(self.columns))
        _resolve_coef_prior(self, self._default_coef_prior(), self._allow_flat)
        object.__setattr__(self, "group_effects", normalise_group_effects(self.group_effects))
        self._resolve_extra()

    # ------------------------------------------------------------------ construction

    def _default_coef_prior(self) -> CoefPrior:
        """The coefficient prior when neither coef_prior nor prior_scale is given."""
        return Normal(0.0, 1.0)

    def _resolve_extra(self) -> None:
        """Check the per-row input (a column name, a RowValues, or for trials a constant) and locate its column."""
        xcol = None
        name = self._extra
        if name is not None:
            value = getattr(self, name)
            if isinstance(value, str):
                if not value:
                    raise ArgumentError(("model", name), f"{name} must be a column name, an array or None, got ''")
                if self.n_features is not None:
                    if self.columns is None:
                        raise ArgumentError(
                            ("model", name),
                            f"{name}={value!r} names a column of X, but the data have no column names "
                            "(give the shards columns=..., or a CSV/parquet header)",
                        )
                    if value not in self.columns:
                        raise ArgumentError(
                            ("model", name),
                            f"{name}={value!r} is not a column of X; the columns are {list(self.columns)}",
                        )
                    xcol = self.columns.index(value)
            elif value is not None and not self._constant_extra(value):
                if not isinstance(value, RowValues):
                    arr = _as_numeric(value, name, name)
                    if arr.ndim != 1 or arr.size == 0:
                        raise ArgumentError(
                            ("model", name),
                            f"{name} must be a column name or a 1-D array over the data's rows, got shape {arr.shape}",
                        )
                    value = RowValues(arr)
                if not np.isfinite(value.values).all():
                    raise ArgumentError(("model", name), f"{name} contains NaN or infinite values")
                self._check_extra_values(value.values, name)
                object.__setattr__(self, name, value)
                if self.n_features is not None:
                    xcol = self.n_features - 1
        ncol = self.n_features
        if ncol is not None:
            if xcol is not None and ncol < 2:
                raise ArgumentError(
                    ("model", str(name)), f"{name}: X needs at least one feature column besides the {name}"
                )
            want = ncol - 1 if isinstance(getattr(self, name or "", None), RowValues) else ncol
            if self.columns is not None and len(self.columns) != want:
                raise ValueError(f"columns has {len(self.columns)} names but X has {want} columns")
        coef_cols = None if ncol is None else np.array([j for j in range(ncol) if j != xcol], dtype=np.intp)
        object.__setattr__(self, "_xcol", xcol)
        object.__setattr__(self, "_coef_cols", coef_cols)
        if ncol is not None:
            self._check_coef_prior_size()

    def _constant_extra(self, value: Any) -> bool:
        """Whether `value` is an accepted constant for the per-row input (trials: one count for every row)."""
        return False

    def _check_extra_values(self, values: np.ndarray, name: str) -> None:
        """Family-specific checks of the per-row input's values (e.g. trials are non-negative integers)."""

    def _coef_count(self) -> int:
        """How many coordinates `coef_prior` covers (the first ones of θ): β's length here."""
        return self.n_coef

    def _check_coef_prior_size(self) -> None:
        size, want = self.coef_prior.size, self._coef_count()
        if size is not None and size != want:
            names = self.param_blocks()[0].names() if want <= 50 else []
            which = f" ({', '.join(names)})" if names else ""
            raise ArgumentError(
                ("model", "coef_prior"),
                f"coef_prior has {size} values per argument but the model has {want} coefficients{which}",
            )

    def bind(self, spec: DataSpec) -> Model:
        """The model bound to the data; with `group_effects`, a `HierarchicalGLM` (global θ, local group effects).
        A column of text labels (`DataSpec.levels`) can only group effects: as a feature it is an error."""
        if self.group_effects is not None:
            if not self._takes_groups:
                raise ArgumentError(
                    ("model", "group_effects"),
                    f"group_effects are not available for {type(self).__name__} (the regression families that give "
                    "their per-row terms take them: linear, logistic, Poisson, binomial, negative binomial, lognormal, "
                    "Student-t, Gamma, Beta, Weibull, exponential and the zero-inflated ones)",
                )
            return bind_hierarchical(self, spec)
        refuse_text_columns(spec, ())
        return super().bind(spec)

    # ------------------------------------------------------------------ per row (group effects)

    def _psi(self, x: np.ndarray) -> np.ndarray:
        """The family's own parameters (log σ, log φ) of K points x (K, dim): (K, m), m = dim − n_coef."""
        return x[:, self.n_coef :]

    def row_terms(self, X: np.ndarray, y: np.ndarray, eta: np.ndarray, psi: np.ndarray, order: int) -> RowTerms:
        """U's per-row pieces at linear predictors eta (n, K) (offset included) and family parameters psi (K, m), up
        to derivative `order` (0, 1 or 2): see `RowTerms`. X supplies the per-row input (trials, noise sd)."""
        raise NotImplementedError(f"{type(self).__name__} has no per-row terms (it takes no group effects)")

    def eta_log_likelihood(self, X: np.ndarray, y: np.ndarray, eta: np.ndarray, psi: np.ndarray) -> np.ndarray:
        """`log_likelihood` from the rows' linear predictors eta (n, K) and family parameters psi (K, m)."""
        raise NotImplementedError(f"{type(self).__name__} has no per-row checks (it takes no group effects)")

    def eta_mean(self, X: np.ndarray, eta: np.ndarray, psi: np.ndarray) -> np.ndarray:
        """`predict_mean` from the rows' linear predictors."""
        raise NotImplementedError(f"{type(self).__name__} has no per-row checks (it takes no group effects)")

    def eta_draw(self, X: np.ndarray, eta: np.ndarray, psi: np.ndarray, u: np.ndarray) -> np.ndarray:
        """`predict_draw` from the rows' linear predictors."""
        raise NotImplementedError(f"{type(self).__name__} has no per-row checks (it takes no group effects)")

    def has_local_params(self) -> bool:
        return self.group_effects is not None

    def _bind_fields(self, spec: DataSpec) -> dict:
        extra = getattr(self, self._extra, None) if self._extra else None
        if isinstance(extra, RowValues):
            if spec.n_rows is not None and spec.n_rows != len(extra):
                raise ArgumentError(
                    ("model", str(self._extra)),
                    f"{self._extra} has {len(extra)} values but the data have {spec.n_rows} rows",
                )
            return {"n_features": spec.n_features + 1, "columns": spec.columns}
        return {"n_features": spec.n_features, "columns": spec.columns}

    # ------------------------------------------------------------------ layout

    @property
    def n_coef(self) -> int:
        """Number of regression coefficients (X's columns less the per-row input's)."""
        if self.n_features is None:
            raise _unbound(self, "n_features")
        return self.n_features - (0 if self._xcol is None else 1)

    @property
    def dim(self) -> int:
        return self.n_coef

    def _coef_labels(self) -> tuple[str, ...] | None:
        return _labels(self.columns, self._coef_cols) if self._coef_cols is not None else None

    def _family_cols(self) -> np.ndarray:
        """X's columns the family reads besides its per-row input: the coefficients' (what group effects keep of X
        for the family, `bind_hierarchical`)."""
        assert self._coef_cols is not None, "bind the model first"
        return self._coef_cols

    def param_blocks(self) -> tuple[ParamBlock, ...]:
        return (ParamBlock("beta", self.n_coef, "coef", self._coef_labels(), "identity"),)

    def _prior_parts(self) -> list:
        """(coordinates, spec) pairs of θ; families with extra parameters add theirs."""
        return [(np.arange(self._coef_count()), self.coef_prior)]

    def prior(self) -> GaussianPrior | Prior:
        return build_prior(self.dim, self._prior_parts())

    def validate(self, X: np.ndarray, y: np.ndarray, argname: str = "data") -> None:
        _check_Xy(X, y, argname, self.n_features)

    # ------------------------------------------------------------------ per-row input

    def shard_data(self, X: np.ndarray, y: np.ndarray, rows: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """Append this shard's rows of an array-valued per-row input to X (see the class docstring); a shard of
        unknown rows (`rows` None) is accepted only if it holds the whole data set."""
        extra = getattr(self, self._extra, None) if self._extra else None
        if not isinstance(extra, RowValues):
            return X, y
        X = np.asarray(X, dtype=np.float64)
        if rows is None:
            if X.shape[0] != len(extra):
                raise ValueError(
                    f"{self._extra} is an array over the original rows, but this shard does not record "
                    "which rows it holds (Shard.index): split the data with rs.shard(X, y, ...), or put "
                    f"the {self._extra} in a column of X and pass {self._extra}='<column name>'"
                )
            rows = np.arange(X.shape[0])
        rows = np.asarray(rows, dtype=np.intp)
        if rows.shape != (X.shape[0],) or (rows.size and (rows.min() < 0 or rows.max() >= len(extra))):
            raise ValueError(
                f"{self._extra}: the shard's row indices do not match its {X.shape[0]} rows or the "
                f"{len(extra)} values given"
            )
        return np.column_stack([X, extra.values[rows]]), y

    def _extra_values(self, X: np.ndarray) -> np.ndarray | None:
        """The per-row input of this shard's rows, (n,), or None."""
        return None if self._xcol is None else X[:, self._xcol]

    def _eta(self, X: np.ndarray, beta: np.ndarray) -> np.ndarray:
        """Linear predictors X_c βᵀ (n, K) over the coefficient columns, plus the offset column if any."""
        j = self._xcol
        if j is None:
            return X @ beta.T
        eta = X @ np.insert(beta, j, 0.0, axis=1).T
        if self._extra == "offset":
            eta += X[:, j][:, None]
        return eta

    def linear_predictor(self, X: np.ndarray, x: np.ndarray) -> np.ndarray:
        """X_c βᵀ (+ the offset) (n, K) at x (K, d): β is x's first n_coef coordinates."""
        return self._eta(X, np.asarray(x, dtype=np.float64)[:, : self.n_coef])

    def _eta_dir(self, X: np.ndarray, v: np.ndarray) -> np.ndarray:
        """X_c vᵀ (n, K): the change of the linear predictors along directions v (K, n_coef), no offset."""
        j = self._xcol
        return X @ v.T if j is None else X @ np.insert(v, j, 0.0, axis=1).T

    def _pull(self, X: np.ndarray, R: np.ndarray) -> np.ndarray:
        """X_cᵀ R per chain for R (n, K): (K, n_coef)."""
        G = R.T @ X
        return G if self._xcol is None else np.delete(G, self._xcol, axis=1)

    def _coef_X(self, X: np.ndarray) -> np.ndarray:
        """X's coefficient columns (a copy when a per-row input column must be left out)."""
        return X if self._xcol is None else X[:, self._coef_cols]

    # ------------------------------------------------------------------ properness

    def _flat(self) -> np.ndarray:
        """Indices (into β) of the coefficients with a flat prior."""
        cp = self.coef_prior
        return np.flatnonzero(cp.flat(self.n_coef)) if isinstance(cp, Normal) else np.zeros(0, dtype=np.intp)

    def gram(self, X: np.ndarray, y: np.ndarray) -> np.ndarray | None:
        """X_Fᵀ X_F over the columns F of the flat-prior coefficients (None if there are none)."""
        F = self._flat()
        if F.size == 0:
            return None
        assert self._coef_cols is not None  # bound (the flat coefficients were counted)
        XF = np.asarray(X, dtype=np.float64)[:, self._coef_cols[F]]
        return XF.T @ XF

    def check_proper(self, gram: np.ndarray | None, n_rows: int | None = None) -> None:
        """A flat prior on coefficients F needs the pooled X_F to have full column rank (checked on the sum of the
        shards' `gram`). Necessary, not sufficient, outside linear regression: e.g. separable classes (logistic) or
        all-zero counts (Poisson) leave the posterior improper too, and are not detected."""
        F = self._flat()
        if F.size == 0:
            return
        names = [n for n in np.asarray(self.param_blocks()[0].names())[F]]
        if gram is None:
            raise ArgumentError(
                ("model", "coef_prior"),
                f"coef_prior: the flat prior on {', '.join(names)} needs the pooled data's Gram matrix to "
                "check that the posterior is proper",
            )
        G = np.asarray(gram, dtype=np.float64)
        eig = np.linalg.eigvalsh(0.5 * (G + G.T))
        tol = max(eig[-1], 0.0) * G.shape[0] * 1e-12
        rank = int(np.sum(eig > tol))
        if rank < F.size:
            raise ArgumentError(
                ("model", "coef_prior"),
                f"coef_prior: flat prior (scale=inf) on {', '.join(names)}, but the pooled design "
                f"matrix's columns for them are linearly dependent (rank {rank} < {F.size}): the "
                "posterior is improper. Give those coefficients a proper prior (a finite scale) or drop "
                "the redundant column(s)",
            )


@dataclass(frozen=True)
class _EtaGLM(_GLM):
    """A GLM whose likelihood has no parameter besides β (logistic, binomial, Poisson): the log-likelihood and the
    predictions are its `eta_*` at the linear predictors, with no family parameters."""

    def log_likelihood(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        return self.eta_log_likelihood(X, y, self._eta(X, x), x[:, :0])

    def predict_mean(self, X: np.ndarray, x: np.ndarray) -> np.ndarray:
        return self.eta_mean(X, self._eta(X, x), x[:, :0])

    def predict_draw(self, X: np.ndarray, x: np.ndarray, u: np.ndarray) -> np.ndarray:
        return self.eta_draw(X, self._eta(X, x), x[:, :0], u)


def _classifier_bind_fields(model: Model, spec: DataSpec) -> dict:
    """Fields a multiclass model takes from the data: the feature count and the number of labels."""
    if spec.n_classes is None:
        raise ValueError(f"{type(model).__name__} needs DataSpec.n_classes (the number of labels)")
    return {"n_features": spec.n_features, "n_classes": spec.n_classes}
