"""NumPyro models as raysampler models: `from_numpyro(model_fn)` (the optional `jax` extra).

A NumPyro model written for the pooled data, ``def model(X, y=None): ...``, becomes a `Model` whose parameter θ is
the concatenation of its *global* latent sites in NumPyro's unconstrained coordinates (`numpyro.infer.util`'s
`_unconstrain_reparam`, the transform `potential_energy` uses: σ > 0 is sampled as log σ):

* shard potential U_i(θ) = −Σ over the observed sites of their log density on the shard's rows (X_i, y_i);
* prior: a `Prior` with a flat Gaussian part and a residual `NumPyroPriorTerm`, −Σ over the latent sites of their
  log density minus the transforms' log-Jacobians. The engine counts a residual once (DG-LMC's workers carry 1/b of
  it each), so Σ_i U_i + prior is the pooled model's potential energy.

Gradients, Hessian-vector products (forward-over-reverse) and Hessians come from JAX, vectorised over the K chains
with `jax.vmap`, in float64, and jit-compiled lazily on first use in each process (a worker compiles its own; the
compiled functions live in a cache that is never pickled). jax and numpyro are imported only when a model is built
or first evaluated: importing this module does not import them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import pickle
import sys
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..priors import GaussianPrior, Prior
from .contract import DataSpec, Model, ParamBlock

__all__ = ["NumPyroModel", "NumPyroPriorTerm", "from_numpyro"]

EXTRA_HINT = 'pip install "raysampler[jax]"'
TARGET_KINDS = ("real", "binary", "count", "multiclass")
_DUMMY_ROWS = (2, 3)  # the model is traced at two row counts: a latent site whose shape follows them is per-row


def _require() -> tuple[Any, Any]:
    """(jax, numpyro), with float64 switched on (`jax_enable_x64`, process-wide), else ImportError naming the extra."""
    try:
        import jax
        import numpyro
    except ImportError as exc:
        raise ImportError(
            f"rs.models.from_numpyro needs JAX and NumPyro, which are not installed: {EXTRA_HINT} ({exc})"
        ) from exc
    jax.config.update("jax_enable_x64", True)
    return jax, numpyro


@dataclass(frozen=True)
class _Site:
    """One global latent site as laid out in θ: its shapes (constrained, unconstrained) and how it is reported
    ("identity": real support, "exp": positive support, "sigmoid": the unit interval, "other": reported on the
    unconstrained scale)."""

    name: str
    shape: tuple[int, ...]
    ushape: tuple[int, ...]
    kind: str

    @property
    def size(self) -> int:
        return math.prod(self.ushape)


def _transform_kind(transform: Any) -> str:
    """ "identity", "exp", "sigmoid" or "other" for a NumPyro bijection (looking through `IndependentTransform`)."""
    from numpyro.distributions import transforms as T

    while isinstance(transform, T.IndependentTransform):
        transform = transform.base_transform
    if isinstance(transform, T.IdentityTransform):
        return "identity"
    if isinstance(transform, T.ExpTransform):
        return "exp"
    if isinstance(transform, T.SigmoidTransform):
        return "sigmoid"
    return "other"


def _dummy_data(n: int, p: int) -> tuple[np.ndarray, np.ndarray]:
    return np.zeros((n, p)), np.zeros(n)


def _code_digest(code: types.CodeType, h: Any) -> None:
    """Feed a code object (and the code objects it holds) into a hash, without memory addresses."""
    h.update(code.co_code)
    h.update(repr(code.co_names).encode())
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            _code_digest(const, h)
        else:
            h.update(repr(const).encode())


def _describe_fn(fn: Callable) -> str:
    """A stable description of the model function for `repr` (run fingerprints): module.qualname#digest-of-code."""
    name = f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', type(fn).__name__)}"
    code = getattr(fn, "__code__", None)
    if code is None:
        return name
    h = hashlib.sha256()
    _code_digest(code, h)
    return f"{name}#{h.hexdigest()[:12]}"


def _trace_sites(model_fn: Callable, kwargs: Mapping[str, Any], n: int, p: int) -> dict[str, dict]:
    """The sample sites of one prior run of the model on n dummy rows of p features (zeros)."""
    _require()
    from numpyro import handlers

    X, y = _dummy_data(n, p)
    tr = handlers.trace(handlers.seed(model_fn, rng_seed=0)).get_trace(X, y, **kwargs)
    return {name: site for name, site in tr.items() if site["type"] == "sample"}


def _layout(model_fn: Callable, kwargs: Mapping[str, Any], p: int, global_sites: tuple[str, ...] | None) -> tuple:
    """The global latent sites of the model, in θ order, checked: none inside a plate over the data rows, none
    discrete, `global_sites` (when given) naming exactly the latent sites; at least one observed site."""
    from numpyro.distributions import biject_to

    first, second = (_trace_sites(model_fn, kwargs, n, p) for n in _DUMMY_ROWS)
    latent = [name for name, site in first.items() if not site["is_observed"]]
    if not any(site["is_observed"] for site in first.values()):
        raise ValueError(
            "from_numpyro: the model has no observed site (obs=y): its likelihood, the shards' potential, is empty"
        )
    for name in latent:
        if name not in second or np.shape(first[name]["value"]) != np.shape(second[name]["value"]):
            raise ValueError(
                f"from_numpyro: latent site {name!r} is inside a plate over the data rows (its shape follows the "
                "number of rows): only global latent sites can be sampled across shards; integrate it out or "
                "make it global"
            )
        if first[name]["fn"].support.is_discrete:
            raise ValueError(f"from_numpyro: latent site {name!r} is discrete: only continuous sites can be sampled")
    if global_sites is not None:
        missing = [s for s in global_sites if s not in first]
        observed = [s for s in global_sites if s in first and first[s]["is_observed"]]
        unlisted = [s for s in latent if s not in global_sites]
        if missing or observed or unlisted:
            raise ValueError(
                "from_numpyro: global_sites must list every latent site of the model: "
                + "; ".join(
                    part
                    for part in (
                        f"not sample sites of the model: {missing}" if missing else "",
                        f"observed sites (the likelihood): {observed}" if observed else "",
                        f"latent sites not listed: {unlisted}" if unlisted else "",
                    )
                    if part
                )
            )
        latent = list(global_sites)
    if not latent:
        raise ValueError("from_numpyro: the model has no latent site: there is nothing to sample")
    sites = []
    for name in latent:
        site = first[name]
        shape = tuple(int(s) for s in np.shape(site["value"]))
        transform = biject_to(site["fn"].support)
        ushape = tuple(int(s) for s in transform.inverse_shape(shape))
        if math.prod(ushape) == 0:
            raise ValueError(f"from_numpyro: latent site {name!r} has no coordinates (shape {shape})")
        sites.append(_Site(name, shape, ushape, _transform_kind(transform)))
    return tuple(sites)


def _labels(shape: tuple[int, ...]) -> tuple[str, ...]:
    """Coordinate labels of a flattened site in C order: "0", "1", … (1-D) or "0,1", … (n-D)."""
    return tuple(",".join(str(i) for i in idx) for idx in np.ndindex(*shape))


class _Compiled:
    """The jit-compiled, chain-vectorised functions of one bound model, built in the process that uses them."""

    def __init__(self, model: NumPyroModel) -> None:
        jax, _ = _require()
        import jax.numpy as jnp
        from numpyro import handlers
        from numpyro.infer.util import _unconstrain_reparam, compute_log_probs

        sites = model.sites
        assert sites is not None and model.n_features is not None
        latent = {s.name for s in sites}
        prior_names = latent | {f"_{s.name}_log_det" for s in sites}  # the log-Jacobian factors of the transforms
        offsets = np.cumsum([0] + [s.size for s in sites])
        fn, kwargs = model.model_fn, dict(model.model_kwargs)

        def unpack(theta: Any) -> dict:
            return {s.name: theta[offsets[j] : offsets[j + 1]].reshape(s.ushape) for j, s in enumerate(sites)}

        def log_probs(theta: Any, X: Any, y: Any) -> tuple[Any, Any]:
            """(log prior incl. log-Jacobians, log-likelihood of the observed sites) at unconstrained θ (d,)."""
            reparam = handlers.substitute(fn, substitute_fn=lambda site: _unconstrain_reparam(unpack(theta), site))
            lp, _ = compute_log_probs(reparam, (X, y), kwargs, {})
            prior = sum((v for k, v in lp.items() if k in prior_names), start=jnp.zeros(()))
            lik = sum((v for k, v in lp.items() if k not in prior_names), start=jnp.zeros(()))
            return prior, lik

        X0, y0 = (jnp.asarray(a) for a in _dummy_data(1, model.n_features))

        def shard_u(theta: Any, X: Any, y: Any) -> Any:
            return -log_probs(theta, X, y)[1]

        def prior_u(theta: Any) -> Any:
            return -log_probs(theta, X0, y0)[0]

        def hvp_of(f: Callable) -> Callable:
            return lambda theta, v, *data: jax.jvp(lambda t: jax.grad(f)(t, *data), (theta,), (v,))[1]

        def diag_hess(f: Callable) -> Callable:
            return lambda theta, *data: jnp.diag(jax.hessian(f)(theta, *data))

        def constrain(theta: Any) -> dict:
            from numpyro.infer.util import constrain_fn

            return constrain_fn(fn, (X0, y0), kwargs, unpack(theta))

        vm, jit = jax.vmap, jax.jit
        d3, d1 = (0, None, None), (0,)
        self.potential = jit(vm(shard_u, d3))
        self.grad = jit(vm(jax.grad(shard_u), d3))
        self.value_and_grad = jit(vm(jax.value_and_grad(shard_u), d3))
        self.hvp = jit(vm(hvp_of(shard_u), (0, 0, None, None)))
        self.hessian = jit(jax.hessian(shard_u))
        self.hessians = jit(vm(jax.hessian(shard_u), d3))
        self.hessian_diag = jit(vm(diag_hess(shard_u), d3))
        self.prior_potential = jit(vm(prior_u, d1))
        self.prior_grad = jit(vm(jax.grad(prior_u), d1))
        self.prior_hvp = jit(vm(hvp_of(prior_u), (0, 0)))
        self.prior_hessian_diag = jit(vm(diag_hess(prior_u), d1))
        self.constrain = jit(vm(constrain, d1))
        self.jnp = jnp


def _batch(x: Any) -> tuple[np.ndarray, bool]:
    """x as a float64 (K, d) batch, and whether it was one point (d,)."""
    x = np.asarray(x, dtype=np.float64)
    return (x[None, :], True) if x.ndim == 1 else (x, False)


def _out(values: Any, single: bool) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64)
    return arr[0] if single else arr


@dataclass(frozen=True, eq=False)
class NumPyroPriorTerm:
    """The prior of a `NumPyroModel` as the residual of its `Prior`: −log p(latent sites) − log|J| in θ, with the
    residual contract (`potential`, `grad`, `hvp`, `hessian_diag`; (K, d) or (d,) in). Its Hessian is not diagonal:
    `hessian_diag` is the exact diagonal. Pickles as its model (compiled again where it is used)."""

    model: NumPyroModel

    @property
    def dim(self) -> int:
        return self.model.dim

    def potential(self, x: np.ndarray) -> np.ndarray:
        x, single = _batch(x)
        return _out(self.model._fns().prior_potential(x), single)

    def grad(self, x: np.ndarray) -> np.ndarray:
        x, single = _batch(x)
        return _out(self.model._fns().prior_grad(x), single)

    def hvp(self, x: np.ndarray, v: np.ndarray) -> np.ndarray:
        x, single = _batch(x)
        v = np.broadcast_to(np.asarray(v, dtype=np.float64), x.shape)
        return _out(self.model._fns().prior_hvp(x, v), single)

    def hessian_diag(self, x: np.ndarray) -> np.ndarray:
        x, single = _batch(x)
        return _out(self.model._fns().prior_hessian_diag(x), single)


@dataclass(frozen=True, eq=False)
class NumPyroModel(Model):
    """A NumPyro model `model_fn(X, y, **model_kwargs)` seen through the model contract (build it with
    `from_numpyro`). θ: the global latent sites in order, unconstrained (a positive site as its log); names and
    reports follow the sites (`beta[0]`, `sigma` on its natural scale). Bound by `bind` (traces the model)."""

    model_fn: Callable[..., Any]
    global_sites: tuple[str, ...] | None = None
    model_kwargs: tuple[tuple[str, Any], ...] = ()
    y_kind: str = "real"
    n_features: int | None = None
    sites: tuple[_Site, ...] | None = None
    _cache: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    name = "numpyro"

    def __post_init__(self) -> None:
        object.__setattr__(self, "target_kind", self.y_kind)

    def __repr__(self) -> str:  # stable across processes (run fingerprints), unlike a function's default repr
        return (
            f"NumPyroModel(model_fn={_describe_fn(self.model_fn)}, global_sites={self.global_sites!r}, "
            f"model_kwargs={self.model_kwargs!r}, y_kind={self.y_kind!r}, n_features={self.n_features!r})"
        )

    # ------------------------------------------------------------------ pickling (Ray workers)

    def __getstate__(self) -> dict:
        """The fields without the compiled functions; the model function by value (cloudpickle), so a worker that
        cannot import the user's module (a script, a notebook, a test) still gets it."""
        import ray.cloudpickle as cloudpickle

        state = {k: v for k, v in self.__dict__.items() if k != "_cache"}
        module = sys.modules.get(getattr(self.model_fn, "__module__", "") or "")
        if module is not None and module.__name__ != "__main__" and not module.__name__.startswith("raysampler"):
            cloudpickle.register_pickle_by_value(module)
        state["model_fn"] = cloudpickle.dumps(self.model_fn)
        return state

    def __setstate__(self, state: dict) -> None:
        state = dict(state)
        state["model_fn"] = pickle.loads(state["model_fn"])
        self.__dict__.update(state)
        object.__setattr__(self, "_cache", {})

    def _fns(self) -> _Compiled:
        """The compiled functions of this process (built on first use)."""
        fns = self._cache.get("fns")
        if fns is None:
            fns = self._cache["fns"] = _Compiled(self)
        return fns

    def _data(self, X: np.ndarray, y: np.ndarray) -> tuple[Any, Any]:
        """X and y as jax arrays, converted once per shard array (the worker passes the same arrays every step)."""
        key = (id(X), id(y))
        hit = self._cache.get("data")
        if hit is not None and hit[0] == key and hit[1] is X and hit[2] is y:
            return hit[3], hit[4]
        jnp = self._fns().jnp
        jx, jy = jnp.asarray(np.asarray(X, dtype=np.float64)), jnp.asarray(np.asarray(y, dtype=np.float64))
        self._cache["data"] = (key, X, y, jx, jy)
        return jx, jy

    # ------------------------------------------------------------------ layout

    def bind(self, spec: DataSpec) -> NumPyroModel:
        """Trace the model on dummy rows of the data's width to lay out θ (and check the sites)."""
        sites = _layout(self.model_fn, dict(self.model_kwargs), spec.n_features, self.global_sites)
        return dataclasses.replace(self, n_features=spec.n_features, sites=sites)

    def _bound(self) -> tuple[_Site, ...]:
        if self.sites is None:
            raise ValueError("NumPyroModel is not bound: call model.bind(DataSpec(...)) first")
        return self.sites

    @property
    def dim(self) -> int:
        return sum(s.size for s in self._bound())

    def param_blocks(self) -> tuple[ParamBlock, ...]:
        """One block per site: `beta[0]`…, `sigma` (reported as exp of log σ), `p` on (0, 1) (reported as the logistic
        function of logit p); a site with another support (an interval other than (0, 1), a simplex, …) is reported
        as `<name>_unconstrained` (`constrain` maps it)."""
        blocks = []
        for s in self._bound():
            name = s.name if s.kind != "other" else f"{s.name}_unconstrained"
            transform = s.kind if s.kind in ("exp", "sigmoid") else "identity"
            if s.ushape == ():
                blocks.append(ParamBlock(name, 1, None, None, transform))
            else:
                blocks.append(ParamBlock(name, s.size, f"{name}_dim_0", _labels(s.ushape), transform))
        return tuple(blocks)

    def prior(self) -> Prior:
        """A flat Gaussian part and the NumPyro prior sites as the residual (counted once by the engine)."""
        d = self.dim
        term = NumPyroPriorTerm(self)  # has the residual contract of `PriorTerm` (the engine only calls its methods)
        return Prior(GaussianPrior(np.zeros(d), np.zeros(d)), term)  # type: ignore[arg-type]

    def constrain(self, theta: np.ndarray) -> dict[str, np.ndarray]:
        """θ (..., d) → each latent site on its constrained scale (NumPyro's transforms): {name: (..., *shape)}."""
        theta = np.asarray(theta, dtype=np.float64)
        flat = theta.reshape(-1, theta.shape[-1])
        out = self._fns().constrain(flat)
        return {s.name: np.asarray(out[s.name]).reshape(theta.shape[:-1] + s.shape) for s in self._bound()}

    # ------------------------------------------------------------------ per shard

    def validate(self, X: np.ndarray, y: np.ndarray, argname: str = "data") -> None:
        """Shapes and finiteness, then a finite log-likelihood at θ = 0 (catches labels outside the support)."""
        X, y = np.asarray(X), np.asarray(y)
        if X.ndim != 2 or y.ndim != 1 or X.shape[0] != y.shape[0]:
            raise ValueError(f"{argname}: need X (n, p) and y (n,) with the same rows, got {X.shape} and {y.shape}")
        if self.n_features is not None and X.shape[1] != self.n_features:
            raise ValueError(f"{argname}: X has {X.shape[1]} columns but the model is bound to {self.n_features}")
        if not (np.isfinite(X).all() and np.isfinite(y).all()):
            raise ValueError(f"{argname}: X or y contains NaN or infinite values")
        if self.sites is not None and X.shape[0] and not np.isfinite(self.potential(X, y, np.zeros((1, self.dim)))[0]):
            raise ValueError(f"{argname}: the NumPyro model's log-likelihood of these rows is not finite at θ = 0")

    def potential(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        x, single = _batch(x)
        return _out(self._fns().potential(x, *self._data(X, y)), single)

    def grad(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        x, single = _batch(x)
        return _out(self._fns().grad(x, *self._data(X, y)), single)

    def potential_and_grad(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        x, single = _batch(x)
        u, g = self._fns().value_and_grad(x, *self._data(X, y))
        return _out(u, single), _out(g, single)

    def hvp(self, X: np.ndarray, y: np.ndarray, x: np.ndarray, v: np.ndarray) -> np.ndarray:
        x, single = _batch(x)
        v = np.broadcast_to(np.asarray(v, dtype=np.float64), x.shape)
        return _out(self._fns().hvp(x, v, *self._data(X, y)), single)

    def hessian(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        H = np.asarray(self._fns().hessian(np.asarray(x, dtype=np.float64), *self._data(X, y)), dtype=np.float64)
        return 0.5 * (H + H.T)

    def hessians(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        """`hessian` at the K points x (K, d) in one vectorised (vmap) call."""
        x = np.asarray(x, dtype=np.float64)
        H = np.asarray(self._fns().hessians(x, *self._data(X, y)), dtype=np.float64)
        return 0.5 * (H + np.swapaxes(H, 1, 2))

    def hessian_diag(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        x, single = _batch(x)
        return np.clip(_out(self._fns().hessian_diag(x, *self._data(X, y)), single), 0.0, None)

    def smoothness(self, X: np.ndarray, y: np.ndarray, iters: int = 200, tol: float = 1e-7) -> float:
        """An *estimate* of M_i, not a bound: the largest |eigenvalue| of ∇²U_i found by power iteration (Hessian-
        vector products) at θ = 0 and at the shard's MAP under the prior (L-BFGS from 0). Where the posterior goes
        far from both (σ → 0 for a noise scale) the curvature met can be larger."""
        from scipy.optimize import minimize

        d = self.dim
        points = [np.zeros(d)]
        prior = self.prior()

        def objective(t: np.ndarray) -> tuple[float, np.ndarray]:
            u, g = self.potential_and_grad(X, y, t[None, :])
            return float(u[0] + prior.potential(t[None, :])[0]), g[0] + prior.grad(t[None, :])[0]

        try:
            fit = minimize(objective, np.zeros(d), jac=True, method="L-BFGS-B", options={"maxiter": 200})
            if np.all(np.isfinite(fit.x)):
                points.append(fit.x)
        except (ValueError, FloatingPointError):
            pass
        x = np.array(points)
        v = np.ones_like(x) + 0.1 * np.sin(np.arange(1, d + 1))  # fixed start: the same estimate on every executor
        lam = np.zeros(len(points))
        for _ in range(iters):
            w = self.hvp(X, y, x, v)
            new = np.linalg.norm(w, axis=1)
            if not np.all(np.isfinite(new)):
                return float("inf")
            v = np.where(new[:, None] > 0, w / np.where(new > 0, new, 1.0)[:, None], v)
            done = np.all(np.abs(new - lam) <= tol * new)
            lam = new
            if done:
                break
        return float(np.max(lam))


def from_numpyro(
    model_fn: Callable[..., Any],
    global_sites: Sequence[str] | None = None,
    *,
    model_kwargs: Mapping[str, Any] | None = None,
    target_kind: str = "real",
) -> NumPyroModel:
    """A raysampler model from a NumPyro model written for the pooled data, ``model_fn(X, y=None, **model_kwargs)``.

    Its latent sample sites are the parameters, all *global*: a latent site inside a plate over the data rows is
    refused (ValueError naming it). `global_sites` fixes their order in θ (and must then list every one); None takes
    them in the order the model samples them. The observed sites (`obs=y`, also `numpyro.factor`) are the
    likelihood: each shard's potential is their negative log density on its rows, so a factor meant as part of the
    prior must be written as a latent site's distribution instead. The prior of the latent sites must not depend on
    the values of X or y (it is evaluated once, without the data). `target_kind` is what y holds ("real",
    "binary", "count", "multiclass"). Needs the `jax` extra (`pip install "raysampler[jax]"`); switches JAX to
    float64 for the process.
    """
    _require()
    if not callable(model_fn):
        raise TypeError(f"from_numpyro: model_fn must be a NumPyro model function, got {model_fn!r}")
    if target_kind not in TARGET_KINDS:
        raise ValueError(f"from_numpyro: target_kind must be one of {TARGET_KINDS}, got {target_kind!r}")
    sites = None
    if global_sites is not None:
        if isinstance(global_sites, str) or not all(isinstance(s, str) for s in global_sites):
            raise TypeError(f"from_numpyro: global_sites must be a sequence of site names, got {global_sites!r}")
        sites = tuple(global_sites)
        if len(set(sites)) != len(sites):
            raise ValueError(f"from_numpyro: global_sites has repeated names: {list(sites)}")
    kwargs = tuple(sorted((model_kwargs or {}).items()))
    return NumPyroModel(model_fn, sites, kwargs, target_kind)
