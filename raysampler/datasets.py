"""Benchmark data sets, ready for the models: float64 design matrices with the intercept column first.

Everything is built locally (scikit-learn's bundled data or seeded generators), so no network is
needed. `load(name, seed=..., **kwargs)` returns `(X, y)`; `columns(name, **kwargs)` names X's columns:

=====================  ==============  ==========================================================
name                   X               y
=====================  ==============  ==========================================================
``breast_cancer``      (569, 31)       float64 in {0, 1} (sklearn's coding: 1 = benign)
``digits``             (1797, 65)      int64 class labels 0..9
``diabetes``           (442, 11)       float64, centred and scaled to unit sd
``gaussian_toy``       (n, 0)          float64 (n, d) observations y_j ~ N(theta_true, Sigma_1)
``covtype_like``       (581012, 54)    float64 in {0, 1} from a logistic model
``logistic_synthetic`` (n, d)          float64 in {0, 1} from a logistic model
=====================  ==============  ==========================================================

Conventions: "standardised" means z-scored over the whole data set with the population sd
(ddof=0); a column of ones (the intercept) comes first wherever a regression model needs one. The
real data sets ignore `seed`; the synthetic ones are fully determined by it, and their true
parameters are available from `true_params(name, seed=..., **kwargs)`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = [
    "GAUSSIAN_TOY_NOISE_COV",
    "available",
    "columns",
    "gaussian_toy_noise_cov",
    "gaussian_toy_prior_cov",
    "load",
    "true_params",
]

#: Full size of the real Forest CoverType data set that `covtype_like` mimics.
COVTYPE_N_ROWS = 581_012
#: Columns of `covtype_like`: intercept, 10 continuous, 3 wilderness dummies, 40 soil dummies.
COVTYPE_N_COLS = 54
_COV_CONT, _COV_WILD, _COV_SOIL = 10, 4, 41  # continuous features; wilderness / soil category counts

# Sub-streams of one seed: the true parameters do not depend on n, the data do.
_PARAMS_STREAM, _DATA_STREAM = 0, 1


# ----------------------------------------------------------------------------------------- helpers
def _rng(seed: int, stream: int) -> np.random.Generator:
    """Independent generator for (seed, stream) so parameters and data draws never shift each other."""
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(stream,)))


def _standardise_(A: np.ndarray) -> np.ndarray:
    """Z-score the columns of A in place (population sd; constant columns are only centred)."""
    A -= A.mean(axis=0)
    sd = A.std(axis=0)
    sd[sd == 0.0] = 1.0
    A /= sd
    return A


def _with_intercept(F: np.ndarray) -> np.ndarray:
    """[1 | F] as a new float64 array (one allocation)."""
    X = np.empty((F.shape[0], F.shape[1] + 1))
    X[:, 0] = 1.0
    X[:, 1:] = F
    return X


def _sigmoid(z: np.ndarray) -> np.ndarray:
    """Overflow-free logistic function."""
    return 0.5 * (1.0 + np.tanh(0.5 * z))


def _pos_int(value: Any, argname: str) -> int:
    """Check a size argument is a positive int; raise ValueError naming it otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{argname} must be a positive integer, got {value!r}")
    return int(value)


def _check_seed(seed: Any) -> int:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    return int(seed)


def _no_kwargs(name: str, kwargs: dict[str, Any]) -> None:
    if kwargs:
        raise TypeError(f"data set {name!r} takes no keyword arguments, got {sorted(kwargs)}")


def _take_kwargs(name: str, kwargs: dict[str, Any], defaults: dict[str, int]) -> dict[str, int]:
    """Merge kwargs into defaults, rejecting unknown keys (TypeError naming them)."""
    unknown = sorted(set(kwargs) - set(defaults))
    if unknown:
        raise TypeError(f"data set {name!r} got unexpected keyword arguments {unknown}; it accepts {sorted(defaults)}")
    return {k: _pos_int(kwargs.get(k, v), k) for k, v in defaults.items()}


# ------------------------------------------------------------------------------------ real data
def _breast_cancer(seed: int, **kwargs: Any) -> tuple[np.ndarray, np.ndarray]:
    """Wisconsin breast cancer, binary logistic regression: [1 | z-scored 30 features], y in {0, 1}."""
    from sklearn.datasets import load_breast_cancer

    _no_kwargs("breast_cancer", kwargs)
    data = load_breast_cancer()
    X = _with_intercept(np.asarray(data.data, dtype=np.float64))
    _standardise_(X[:, 1:])
    return X, np.asarray(data.target, dtype=np.float64)


def _digits(seed: int, **kwargs: Any) -> tuple[np.ndarray, np.ndarray]:
    """8x8 digits, 10-class softmax: [1 | pixels / 16] (pixels in [0, 1], not z-scored), y int64 0..9."""
    from sklearn.datasets import load_digits

    _no_kwargs("digits", kwargs)
    data = load_digits()
    X = _with_intercept(np.asarray(data.data, dtype=np.float64))
    X[:, 1:] /= 16.0
    return X, np.asarray(data.target, dtype=np.int64)


def _diabetes(seed: int, **kwargs: Any) -> tuple[np.ndarray, np.ndarray]:
    """Diabetes, linear regression: [1 | z-scored 10 raw features], y = (target - mean) / sd (ddof=0)."""
    from sklearn.datasets import load_diabetes

    _no_kwargs("diabetes", kwargs)
    data = load_diabetes(scaled=False)
    X = _with_intercept(np.asarray(data.data, dtype=np.float64))
    _standardise_(X[:, 1:])
    y = np.asarray(data.target, dtype=np.float64)
    y = (y - y.mean()) / y.std()
    return X, y


# ------------------------------------------------------------------------------- synthetic data
def gaussian_toy_noise_cov(d: int = 2) -> np.ndarray:
    """Observation covariance Sigma_1 of the Gaussian toy: sd_i sd_j rho^|i-j|, sd_i^2 from 1 to 2.

    Non-isotropic on purpose (so the posterior is not a scaled identity); for d = 2 it is
    [[1, 0.5], [0.5, 2]].
    """
    d = _pos_int(d, "d")
    var = np.linspace(1.0, 2.0, d) if d > 1 else np.ones(1)
    sd = np.sqrt(var)
    rho = 0.5 / np.sqrt(2.0)
    lag = np.abs(np.subtract.outer(np.arange(d), np.arange(d)))
    cov = np.outer(sd, sd) * rho**lag
    np.fill_diagonal(cov, var)  # exact variances (sqrt(2)**2 is not 2 in floating point)
    return cov


def gaussian_toy_prior_cov(d: int = 2) -> np.ndarray:
    """Prior covariance Sigma_0 = I_d from which the toy's theta_true is drawn."""
    return np.eye(_pos_int(d, "d"))


#: Sigma_1 for the default d = 2 toy (read-only).
GAUSSIAN_TOY_NOISE_COV: np.ndarray = gaussian_toy_noise_cov(2)
GAUSSIAN_TOY_NOISE_COV.setflags(write=False)


def _gaussian_toy_theta(seed: int, d: int) -> np.ndarray:
    L0 = np.linalg.cholesky(gaussian_toy_prior_cov(d))
    return L0 @ _rng(seed, _PARAMS_STREAM).standard_normal(d)


def _gaussian_toy(seed: int, **kwargs: Any) -> tuple[np.ndarray, np.ndarray]:
    """Conjugate Gaussian toy (DG-LMC): y_j ~ N(theta_true, Sigma_1), theta_true ~ N(0, Sigma_0).

    There are no covariates: X is an empty (n, 0) float64 array and the (n, d) observations are y.
    """
    p = _take_kwargs("gaussian_toy", kwargs, {"n": 20_000, "d": 2})
    n, d = p["n"], p["d"]
    theta = _gaussian_toy_theta(seed, d)
    L1 = np.linalg.cholesky(gaussian_toy_noise_cov(d))
    y = _rng(seed, _DATA_STREAM).standard_normal((n, d)) @ L1.T
    y += theta
    return np.empty((n, 0), dtype=np.float64), y


def _covtype_theta(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(theta_true, continuous-feature Cholesky factor, wilderness probs, soil probs) for covtype_like."""
    rng = _rng(seed, _PARAMS_STREAM)
    p_wild = rng.dirichlet(np.full(_COV_WILD, 2.0))
    p_soil = rng.dirichlet(np.full(_COV_SOIL, 0.7))
    theta = np.empty(COVTYPE_N_COLS)
    theta[1 : 1 + _COV_CONT] = 0.4 * rng.standard_normal(_COV_CONT)
    theta[1 + _COV_CONT :] = 0.5 * rng.standard_normal(COVTYPE_N_COLS - 1 - _COV_CONT)
    # Intercept cancels the expected dummy contribution, so E[logit] = 0 and classes are ~balanced.
    w0 = 1 + _COV_CONT
    s0 = w0 + _COV_WILD - 1
    theta[0] = -(p_wild[1:] @ theta[w0:s0] + p_soil[1:] @ theta[s0:])
    lag = np.abs(np.subtract.outer(np.arange(_COV_CONT), np.arange(_COV_CONT)))
    chol = np.linalg.cholesky(0.6**lag)
    return theta, chol, p_wild, p_soil


def _covtype_like(seed: int, **kwargs: Any) -> tuple[np.ndarray, np.ndarray]:
    """Synthetic logistic data shaped like Forest CoverType (n = 581,012, d = 54).

    Columns: intercept; 10 correlated (AR(1), rho = 0.6) Gaussian features, z-scored; 3 wilderness
    dummies (4 areas, area 0 is the baseline); 40 soil dummies (41 types, type 0 is the baseline).
    Dropping a baseline level keeps the dummies from being collinear with the intercept. Labels are
    Bernoulli(sigmoid(X theta_true)) with moderate coefficients (sd 0.4-0.5), about half ones.
    X is built in one float64 allocation (~250 MB at full size).
    """
    n = _take_kwargs("covtype_like", kwargs, {"n": COVTYPE_N_ROWS})["n"]
    theta, chol, p_wild, p_soil = _covtype_theta(seed)
    rng = _rng(seed, _DATA_STREAM)
    X = np.zeros((n, COVTYPE_N_COLS))
    X[:, 0] = 1.0
    cont = X[:, 1 : 1 + _COV_CONT]
    cont[...] = rng.standard_normal((n, _COV_CONT)) @ chol.T
    _standardise_(cont)
    rows = np.arange(n)
    w0 = 1 + _COV_CONT
    s0 = w0 + _COV_WILD - 1
    for offset, probs in ((w0, p_wild), (s0, p_soil)):
        level = rng.choice(len(probs), size=n, p=probs)
        hit = level > 0
        X[rows[hit], offset + level[hit] - 1] = 1.0
    y = (rng.random(n) < _sigmoid(X @ theta)).astype(np.float64)
    return X, y


def _logistic_theta(seed: int, d: int) -> np.ndarray:
    rng = _rng(seed, _PARAMS_STREAM)
    theta = rng.standard_normal(d)
    theta[0] *= 0.25
    if d > 1:
        theta[1:] *= 2.0 / np.linalg.norm(theta[1:])  # logit sd = 2 whatever d is
    return theta


def _logistic_synthetic(seed: int, **kwargs: Any) -> tuple[np.ndarray, np.ndarray]:
    """Small generic logistic data: X = [1 | N(0, I_{d-1}) features] (d columns in all), y in {0, 1}.

    theta_true has a small intercept and a slope vector of norm 2 (so the logit has sd 2).
    """
    p = _take_kwargs("logistic_synthetic", kwargs, {"n": 1000, "d": 5})
    n, d = p["n"], p["d"]
    theta = _logistic_theta(seed, d)
    rng = _rng(seed, _DATA_STREAM)
    X = np.empty((n, d))
    X[:, 0] = 1.0
    X[:, 1:] = rng.standard_normal((n, d - 1))
    y = (rng.random(n) < _sigmoid(X @ theta)).astype(np.float64)
    return X, y


#: hospitals: the fixed effects (intercept, age, severity) and the sd of the hospitals' intercepts that generate it
HOSPITALS_BETA = (-0.5, 0.8, -0.4)
HOSPITALS_SD = 0.7
_HOSPITALS_DEFAULTS = {"n_groups": 40, "min_rows": 10, "max_rows": 90}
#: hospitals' size distributions: n_g uniform on {min_rows..max_rows}, or log-uniform (floor of exp(U(log min_rows,
#: log(max_rows + 1)))): many small hospitals and a few large ones, as real registries have
HOSPITALS_SIZES = ("uniform", "log-uniform")


def _hospitals_options(kwargs: dict[str, Any]) -> tuple[dict[str, int], str, int]:
    """hospitals' options: the size options (`_HOSPITALS_DEFAULTS`), `sizes` (one of HOSPITALS_SIZES) and
    `large_group` (rows of the last hospital instead of its drawn size; 0: none)."""
    rest = dict(kwargs)
    sizes = rest.pop("sizes", "uniform")
    if sizes not in HOSPITALS_SIZES:
        raise ValueError(f"hospitals: sizes must be one of {', '.join(HOSPITALS_SIZES)}, got {sizes!r}")
    large = rest.pop("large_group", 0)
    if isinstance(large, bool) or not isinstance(large, (int, np.integer)) or large < 0:
        raise ValueError(f"large_group must be a non-negative integer, got {large!r}")
    try:
        p = _take_kwargs("hospitals", rest, _HOSPITALS_DEFAULTS)
    except TypeError as exc:
        raise TypeError(f"{exc} and sizes, large_group") from None
    if p["min_rows"] > p["max_rows"]:
        raise ValueError(f"hospitals: min_rows={p['min_rows']} exceeds max_rows={p['max_rows']}")
    return p, str(sizes), int(large)


def _hospitals(seed: int, **kwargs: Any) -> tuple[np.ndarray, np.ndarray]:
    """Synthetic multilevel logistic data (a readmission-style outcome): hospital g has n_g patients, uniform on
    {min_rows..max_rows} (`sizes="uniform"`, the default) or log-uniform between them (`sizes="log-uniform"`), the
    last hospital `large_group` patients where that is given (one very large group), with standardised age and
    severity; logit = x·β + r_g, r_g ~ N(0, 0.7²) (`HOSPITALS_BETA`). Columns (Intercept), age, severity, hospital
    (labels 1..n_groups, not a feature): for group effects by hospital."""
    p, size_law, large = _hospitals_options(kwargs)
    prm, rng = _rng(seed, _PARAMS_STREAM), _rng(seed, _DATA_STREAM)
    G = p["n_groups"]
    r = HOSPITALS_SD * prm.standard_normal(G)
    if size_law == "uniform":
        sizes = rng.integers(p["min_rows"], p["max_rows"] + 1, G)
    else:
        lo, hi = np.log(p["min_rows"]), np.log(p["max_rows"] + 1)
        sizes = np.clip(np.floor(np.exp(rng.uniform(lo, hi, G))), p["min_rows"], p["max_rows"]).astype(np.int64)
    if large:
        sizes[-1] = large
    g = np.repeat(np.arange(G), sizes)
    n = g.size
    X = np.column_stack([np.ones(n), rng.standard_normal(n), rng.standard_normal(n), g + 1.0])
    y = (rng.random(n) < _sigmoid(X[:, :3] @ np.asarray(HOSPITALS_BETA) + r[g])).astype(np.float64)
    return X, y


def _hospitals_columns(**kwargs: Any) -> tuple[str, ...]:
    _hospitals_options(kwargs)
    return (INTERCEPT, "age", "severity", "hospital")


#: Scales of scaled_logistic's covariates (the columns after the intercept) and their correlation.
SCALED_LOGISTIC_SCALES = (1.0, 3.0, 10.0, 30.0, 100.0)
SCALED_LOGISTIC_CORRELATION = 0.9


def _scaled_logistic_theta(seed: int) -> np.ndarray:
    rng = _rng(seed, _PARAMS_STREAM)
    slopes = rng.standard_normal(len(SCALED_LOGISTIC_SCALES))
    scales = np.asarray(SCALED_LOGISTIC_SCALES)
    slopes *= 1.5 / np.linalg.norm(slopes) / scales  # each covariate's effect O(1)
    intercept = 0.3 - 5.0 * float(slopes @ scales)  # the covariates' means are 5 scales: centre logits
    return np.concatenate([[intercept], slopes])


def _scaled_logistic(seed: int, **kwargs: Any) -> tuple[np.ndarray, np.ndarray]:
    """Badly scaled, correlated logistic data, as raw real-world covariates often are: X = [1 | covariates] with
    covariates on scales 1, 3, 10, 30, 100 (sd), pairwise correlation 0.9^|i−j| (adjacent 0.9), not standardised;
    y in {0, 1} from a logistic model whose covariate effects are each O(1). Posterior scales then differ by
    ~100× across coordinates and are strongly correlated: a test of samplers' defaults on data nobody tuned for."""
    n = _take_kwargs("scaled_logistic", kwargs, {"n": 1000})["n"]
    k = len(SCALED_LOGISTIC_SCALES)
    corr = SCALED_LOGISTIC_CORRELATION ** np.abs(np.subtract.outer(np.arange(k), np.arange(k)))
    rng = _rng(seed, _DATA_STREAM)
    Z = rng.standard_normal((n, k)) @ np.linalg.cholesky(corr).T
    X = _with_intercept(Z * np.asarray(SCALED_LOGISTIC_SCALES) + 5.0 * np.asarray(SCALED_LOGISTIC_SCALES))
    y = (rng.random(n) < _sigmoid(X @ _scaled_logistic_theta(seed))).astype(np.float64)
    return X, y


_LOADERS: dict[str, Callable[..., tuple[np.ndarray, np.ndarray]]] = {
    "breast_cancer": _breast_cancer,
    "digits": _digits,
    "diabetes": _diabetes,
    "gaussian_toy": _gaussian_toy,
    "covtype_like": _covtype_like,
    "logistic_synthetic": _logistic_synthetic,
    "scaled_logistic": _scaled_logistic,
    "hospitals": _hospitals,
}


def _gaussian_toy_truth(seed: int, **kwargs: Any) -> np.ndarray:
    return _gaussian_toy_theta(seed, _take_kwargs("gaussian_toy", kwargs, {"n": 20_000, "d": 2})["d"])


def _covtype_truth(seed: int, **kwargs: Any) -> np.ndarray:
    _take_kwargs("covtype_like", kwargs, {"n": COVTYPE_N_ROWS})
    return _covtype_theta(seed)[0]


def _logistic_truth(seed: int, **kwargs: Any) -> np.ndarray:
    return _logistic_theta(seed, _take_kwargs("logistic_synthetic", kwargs, {"n": 1000, "d": 5})["d"])


def _scaled_truth(seed: int, **kwargs: Any) -> np.ndarray:
    _take_kwargs("scaled_logistic", kwargs, {"n": 1000})
    return _scaled_logistic_theta(seed)


_TRUTHS: dict[str, Callable[..., np.ndarray]] = {
    "gaussian_toy": _gaussian_toy_truth,
    "covtype_like": _covtype_truth,
    "logistic_synthetic": _logistic_truth,
    "scaled_logistic": _scaled_truth,
}

INTERCEPT = "(Intercept)"


def _sklearn_columns(loader: str) -> Callable[..., tuple[str, ...]]:
    def names(**kwargs: Any) -> tuple[str, ...]:
        import sklearn.datasets

        _no_kwargs(loader.removeprefix("load_"), kwargs)
        extra = {"scaled": False} if loader == "load_diabetes" else {}
        return (INTERCEPT, *(str(c) for c in getattr(sklearn.datasets, loader)(**extra).feature_names))

    return names


def _covtype_columns(**kwargs: Any) -> tuple[str, ...]:
    _take_kwargs("covtype_like", kwargs, {"n": COVTYPE_N_ROWS})
    return (
        INTERCEPT,
        *(f"x{j}" for j in range(1, _COV_CONT + 1)),
        *(f"wilderness_{k}" for k in range(1, _COV_WILD)),
        *(f"soil_{k}" for k in range(1, _COV_SOIL)),
    )


def _numbered_columns(name: str, defaults: dict[str, int]) -> Callable[..., tuple[str, ...]]:
    def names(**kwargs: Any) -> tuple[str, ...]:
        p = _take_kwargs(name, kwargs, defaults)
        d = p["d"] if "d" in p else 1 + len(SCALED_LOGISTIC_SCALES)
        return (INTERCEPT, *(f"x{j}" for j in range(1, d)))

    return names


def _toy_columns(**kwargs: Any) -> tuple[str, ...]:
    _take_kwargs("gaussian_toy", kwargs, {"n": 20_000, "d": 2})
    return ()


_COLUMNS: dict[str, Callable[..., tuple[str, ...]]] = {
    "breast_cancer": _sklearn_columns("load_breast_cancer"),
    "digits": _sklearn_columns("load_digits"),
    "diabetes": _sklearn_columns("load_diabetes"),
    "gaussian_toy": _toy_columns,
    "covtype_like": _covtype_columns,
    "logistic_synthetic": _numbered_columns("logistic_synthetic", {"n": 1000, "d": 5}),
    "scaled_logistic": _numbered_columns("scaled_logistic", {"n": 1000}),
    "hospitals": _hospitals_columns,
}


# ---------------------------------------------------------------------------------------- public
def available() -> list[str]:
    """Names accepted by `load`."""
    return list(_LOADERS)


def _lookup(name: str, table: dict[str, Any], what: str) -> Any:
    if not isinstance(name, str) or name not in table:
        raise ValueError(f"unknown {what} name={name!r}; valid names: {', '.join(table)}")
    return table[name]


def load(name: str, *, seed: int = 0, **kwargs: Any) -> tuple[np.ndarray, np.ndarray]:
    """Return (X, y) for the named data set (see the module docstring for shapes and scaling).

    `seed` fixes the synthetic data sets (ignored by the real ones); kwargs are per data set:
    gaussian_toy(n=20000, d=2), covtype_like(n=581012), logistic_synthetic(n=1000, d=5),
    hospitals(n_groups=40, min_rows=10, max_rows=90, sizes="uniform" or "log-uniform", large_group=0).
    Unknown names raise ValueError; unexpected kwargs raise TypeError.
    """
    loader = _lookup(name, _LOADERS, "data set")
    return loader(_check_seed(seed), **kwargs)


def columns(name: str, **kwargs: Any) -> tuple[str, ...]:
    """Names of the columns of X that `load(name, **kwargs)` returns, in order: "(Intercept)" first, then
    scikit-learn's feature names for the real data sets (e.g. "mean radius") or x1, x2, … for the synthetic ones
    (covtype_like: x1…x10, wilderness_1…3, soil_1…40); () for gaussian_toy, which has no covariates. Give them to
    `rs.shard(X, y, columns=...)` so that parameters are named after them (`beta[mean radius]`)."""
    return _lookup(name, _COLUMNS, "data set")(**kwargs)


def true_params(name: str, *, seed: int = 0, **kwargs: Any) -> np.ndarray:
    """theta_true that generated a synthetic data set loaded with the same name, seed and kwargs.

    Lets benchmarks compare posteriors with the truth; real data sets have none (ValueError).
    """
    truth = _lookup(name, _TRUTHS, "synthetic data set")
    return truth(_check_seed(seed), **kwargs)
