"""The model contract: what the sampler calls on a model, and what each call must compute.

A model is a posterior split into per-shard potentials, π(θ) ∝ exp(−Σ_i U_i(θ)) · prior(θ), with
U_i(θ) = −log p(y_i | X_i, θ) over the rows (X_i, y_i) of shard i. The prior is *not* part of U_i: each algorithm
decides where it lives (the coordinator, or split across workers), so a model gives it separately (`prior()`).

Every per-shard method takes one shard's data X (n_i, p) and y (n_i,) and a (K, d) batch of parameter vectors (one
row per chain) and returns per-chain values, (K,) or (K, d): K chains cost one matrix-matrix product instead of K
matrix-vector products.

`Model` is the contract. What a model must define is `MODEL_METHODS`, the one list (`Model`'s abstract members);
every other method has a default that is right for a model with no per-row inputs, no improper priors and one
unnamed parameter vector. The engine calls every method directly. An object that does not subclass `Model` but has
the members of `MODEL_METHODS` is accepted too: `foreign.as_model` wraps it in `ForeignModel`, which uses its own
optional methods where it has them and `Model`'s defaults where not.
"""

from __future__ import annotations

__all__ = [
    "CURVATURE_PARTS",
    "LOCAL_PARAMS_STEP_WORK",
    "LOCAL_PARAMS_WORK",
    "MODEL_METHODS",
    "TRANSFORMS",
    "DataSpec",
    "EtaHessian",
    "LocalCurvature",
    "Model",
    "ParamBlock",
    "ShardStack",
    "block_names",
    "cholesky_factor",
    "correlation_pairs",
    "correlation_size",
    "correlations",
    "join_local_blocks",
    "natural_coordinate",
    "natural_values",
    "per_shard",
    "runs_own",
]

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import numpy as np

from ..priors import GaussianPrior, Prior
from .curvature_blocks import CURVATURE_PARTS, EtaHessian, LocalCurvature
from .params import (
    TRANSFORMS,
    ParamBlock,
    block_names,
    cholesky_factor,
    correlation_pairs,
    correlation_size,
    correlations,
    join_local_blocks,
    natural_coordinate,
    natural_values,
)

#: The minimal model contract, the one list of it: what a `Model` subclass must define (its abstract members) and
#: what an object that does not subclass `Model` must have to be used as one (`as_model`); every other method of
#: `Model` has a default. `dim` is a property (or attribute), the others methods.
MODEL_METHODS = ("dim", "prior", "potential", "grad", "hvp", "smoothness")


@dataclass(frozen=True)
class DataSpec:
    """What a model must know about the whole data set before it can fix its dimension."""

    n_features: int
    n_classes: int | None = None  # for classifiers: number of labels over all shards (max label + 1)
    n_rows: int | None = None
    columns: tuple[str, ...] | None = None  # names of X's columns (all shards agree), when the data have them
    #: for a model that reads columns as categories (a formula's `C(region)`): each such column's distinct values over
    #: all shards, as (column, values) pairs (numbers ascending, then text sorted), reported by the shards at set-up
    categories: tuple[tuple[str, tuple[Any, ...]], ...] | None = None
    #: the text columns' labels over all shards, as (column, sorted labels) pairs: X holds their `label_code`s
    #: (`raysampler.shards`); only a grouping column may hold text
    levels: tuple[tuple[str, tuple[str, ...]], ...] | None = None
    #: the grouping factors whose levels occur at several shards, each with its levels over all shards as named,
    #: (column, labels) pairs, decided at set-up from the labels the shards report: their effects are global
    spanning: tuple[tuple[str, tuple[str, ...]], ...] | None = None

    def __post_init__(self) -> None:
        if isinstance(self.levels, dict):
            object.__setattr__(self, "levels", tuple((str(k), tuple(v)) for k, v in self.levels.items()) or None)

    def text_levels(self) -> dict[str, tuple[str, ...]]:
        """The text columns' labels by column name ({} when no column holds text)."""
        return dict(self.levels or ())

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready fields (the service stores a run's with it, to bind its model again)."""
        return dataclasses.asdict(self) | {
            "columns": None if self.columns is None else list(self.columns),
            "categories": None if self.categories is None else {k: list(v) for k, v in self.categories},
            "levels": None if self.levels is None else {k: list(v) for k, v in self.levels},
            "spanning": None if self.spanning is None else {k: list(v) for k, v in self.spanning},
        }

    @classmethod
    def from_dict(cls, d: Any) -> DataSpec:
        """The DataSpec `as_dict` wrote."""
        cols, cats, levels = d.get("columns"), d.get("categories"), d.get("levels")
        return cls(
            int(d["n_features"]),
            d.get("n_classes"),
            d.get("n_rows"),
            None if cols is None else tuple(cols),
            None if not cats else tuple((str(k), tuple(v)) for k, v in cats.items()),
            None if not levels else tuple((str(k), tuple(str(v) for v in vs)) for k, vs in levels.items()),
            None if not d.get("spanning") else tuple((str(k), tuple(map(str, v))) for k, v in d["spanning"].items()),
        )


#: A group-effects model's local step per element of X and chain, against a dense GLM's: its Newton–MH sweep passes
#: over the rows five times, with segment sums and per-group blocks, and costs many times a dense GLM's per
#: element-chain (benchmarks/perf/groups.py, hot_path.py; docs/performance.md, "Measurements behind choices in the
#: code": the weight's order of magnitude stands).
LOCAL_PARAMS_WORK = 50.0
#: The same sweep's fixed work per local step of one shard, in element-chains, whatever the shard's size: its NumPy
#: calls, which a radon-sized shard (a few hundred rows) pays as much as a large one, and which one process pays once
#: per shard it owns, one after another (benchmarks/perf/default_run.py, radon_sized; docs/performance.md,
#: "Measurements behind choices in the code").
LOCAL_PARAMS_STEP_WORK = 3_000_000.0


@dataclass(frozen=True)
class Model(ABC):
    """A Bayesian model split into per-shard potentials U_i(θ) = −log p(y_i | X_i, θ), plus a prior.

    Subclasses are frozen dataclasses (hashable, picklable: they travel to Ray workers); `bind(spec)` returns a copy
    whose dimension is fixed by the data. Arrays: X (n_i, p) float64, y (n_i,), x (K, d). Returns: (K,) or (K, d).
    Required: `dim`, `prior`, `potential`, `grad`, `hvp`, `smoothness`. Everything else has a default.
    """

    #: A short name for messages.
    name: ClassVar[str] = "model"
    #: What y must hold: "real" | "binary" | "count" | "multiclass" (the engine counts the labels over all shards
    #: into `DataSpec.n_classes`) | "vector" (y is (n, p): `DataSpec.n_features` is y's width).
    target_kind: ClassVar[str] = "real"

    # ------------------------------------------------------------------ layout (driver and coordinator)

    def bind(self, spec: DataSpec) -> Model:
        """A copy of the model fitted to the whole data set's shape; the engine binds once, before anything else,
        and every other method is called on the bound copy. Default: `dataclasses.replace` with `_bind_fields`."""
        return dataclasses.replace(self, **self._bind_fields(spec))

    def _bind_fields(self, spec: DataSpec) -> dict:
        """The fields `bind` sets: `n_features` when the model has such a field, else none (d fixed already)."""
        names = {f.name for f in dataclasses.fields(self) if f.init}
        return {"n_features": spec.n_features} if "n_features" in names else {}

    @property
    @abstractmethod
    def dim(self) -> int:
        """Required. d, the number of coordinates of θ (of a bound model): sizes every state, draw and noise
        stream."""

    def param_blocks(self) -> tuple[ParamBlock, ...]:
        """θ's layout as named parameters, in order (sizes sum to `dim`): the variables of `Result.posterior`,
        ArviZ, REST summaries and draw streams (on the natural scale). Default: one block `theta` (dim `param`)."""
        return (ParamBlock("theta", self.dim, "param", None, "identity"),)

    def param_names(self) -> list[str]:
        """One readable name per coordinate of θ (`Result.param_names`). Default: from `param_blocks`, e.g.
        `beta[age]`, `sigma`."""
        return block_names(self.param_blocks())

    @abstractmethod
    def prior(self) -> GaussianPrior | Prior:
        """Required. The prior in θ's coordinates with the prior contract of `raysampler.priors` (`gaussian`,
        `residual`, `potential`, `grad`, `hvp`, `hessian_diag`): a `GaussianPrior` when it is all Gaussian, else a
        `Prior`. Algorithms hold the Gaussian factor in exact steps and place the residual where that stays
        exact."""

    def work_per_element(self) -> float:
        """The compute of one local step per element of a shard's X and per chain, relative to a dense GLM's (1): what
        sizes the worker processes a node runs (`runtime.process_groups.processes_for`). Default: 1, or
        `LOCAL_PARAMS_WORK` for a model with local parameters, whose local kernel sweeps the rows group by group (a
        Newton–MH step)."""
        return LOCAL_PARAMS_WORK if self.has_local_params() else 1.0

    def work_per_step(self) -> float:
        """The compute of one shard's local step that does not grow with its size, in the element-chains of
        `work_per_element`: what a process pays per shard it owns each round (`runtime.process_groups.shard_work`).
        Default: 0, or `LOCAL_PARAMS_STEP_WORK` for a model with local parameters, whose group sweep makes dozens of
        NumPy calls per step whatever the rows."""
        return LOCAL_PARAMS_STEP_WORK if self.has_local_params() else 0.0

    # ------------------------------------------------------------------ local parameters (hierarchical models)

    def has_local_params(self) -> bool:
        """Whether shards carry local parameters besides θ (e.g. group effects). Then every per-shard method takes
        x of shape (K, d + l_i), θ first and the shard's l_i = `local_dim(X, y)` local parameters after, and the
        potential includes their prior: π(θ, η_1..η_b) ∝ prior(θ) Π_i exp(−U_i(θ, η_i)). Default: False."""
        return False

    def local_dim(self, X: np.ndarray, y: np.ndarray) -> int:
        """l_i, the number of local parameters of the shard (X, y) (as `shard_data` returned it). Default: 0."""
        return 0

    def local_blocks(self, X: np.ndarray, y: np.ndarray) -> tuple[ParamBlock, ...]:
        """The shard's local parameters as named blocks, in the order of its l_i coordinates (on the reported
        scale). Blocks of the same name from several shards are joined along their first dim, in shard order
        (e.g. `r_hospital`, dims (hospital, hospital_effect)). Default: one block `local` (dim `local`)."""
        lsize = int(self.local_dim(X, y))
        return (ParamBlock("local", lsize, "local"),) if lsize else ()

    def local_natural(self, theta: np.ndarray, eta: np.ndarray, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Local draws η (..., l_i) on their reported scale, given the global draws θ (..., d). Default: η itself."""
        return eta

    def local_curvature(self, X: np.ndarray, y: np.ndarray, x: np.ndarray, parts: str = "all") -> LocalCurvature:
        """U_i, ∇U_i and the second derivatives around the local parameters at K points x (K, d + l_i), as far as
        `parts` (`CURVATURE_PARTS`; see `LocalCurvature`). The set-up's conditional modes and Laplace-marginal terms
        and DG-LMC's local kernels use it. Default: from the dense `hessians` at the K points, η as one block; a model
        whose η splits into independent blocks (group effects) gives them block by block."""
        x = np.asarray(x, dtype=np.float64)
        d = int(self.dim)
        U, g = self.potential_and_grad(X, y, x)
        H = self.hessians(X, y, x)
        return LocalCurvature(
            U,
            g,
            EtaHessian(H[:, None, d:, d:]),
            H[:, d:, :d] if parts in ("cross", "all") else None,
            H[:, :d, :d] if parts in ("theta", "all") else None,
            U[:, None],
        )

    def block_potential(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        """The potential per block of η (`LocalCurvature.blocks`) at K points: (K, B). Default: one block, U_i."""
        return np.asarray(self.potential(X, y, x))[:, None]

    def centring(self, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Which coordinates of θ (bool (d,)) `centred_move` may move on this shard: those the local parameters can
        follow with the likelihood unchanged (group effects: the group scales, and a coefficient whose column is
        also an effect's). Default: none."""
        return np.zeros(int(self.dim), dtype=bool)

    def centred_move(
        self, X: np.ndarray, y: np.ndarray, x: np.ndarray, dtheta: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Move θ by dtheta (K, d) (zero outside `centring`) and the local parameters with it so that every row's
        likelihood stays as it is: (the new points x' (K, d + l_i), U_i(x') − U_i(x) − log|det ∂η'/∂η|), computed
        without the data. A Metropolis–Hastings step on this move samples θ in the centred parameterisation while
        the other steps use the non-centred one (interweaving, Yu & Meng 2011). Default: not defined."""
        raise NotImplementedError(_undefined(self, "centred_move", "interweaving moves"))

    # ------------------------------------------------------------------ per shard: data (worker, once)

    def shard_data(self, X: np.ndarray, y: np.ndarray, rows: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """The (X, y) every other method of this bound model expects for a shard holding `rows` of the original data
        (`Shard.index`; None when unknown). The runtime calls it once per shard after loading, before `validate`.
        Default: (X, y) unchanged; models holding per-row arrays (an offset, trial counts) append them to X."""
        return X, y

    def validate(self, X: np.ndarray, y: np.ndarray, argname: str = "data") -> None:
        """Raise ValueError naming `argname` (e.g. `shards[2]`) if (X, y) cannot be a shard of this model's data;
        called once per shard after `shard_data`. Default: accepts anything."""

    def gram(self, X: np.ndarray, y: np.ndarray) -> np.ndarray | None:
        """This shard's contribution to the pooled matrix `check_proper` needs (summed over shards), or None when
        the prior alone makes the posterior proper. Default: None."""
        return None

    def check_proper(self, gram: np.ndarray | None, n_rows: int | None = None) -> None:
        """Raise ValueError (naming the prior argument) if the pooled data leave the posterior improper, given the
        sum of the shards' `gram` and the total row count; the coordinator calls it once after binding. Default:
        nothing to check."""

    # ------------------------------------------------------------------ per shard: the potential (worker, every step)

    @abstractmethod
    def potential(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        """Required. U_i(x) = −log p(y | X, x) of this shard's rows for each of the K rows of x, up to a constant
        that must not depend on x: shape (K,). Metropolis–Hastings corrections and the MAP search use it."""

    @abstractmethod
    def grad(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        """Required. ∇U_i(x) for each chain: shape (K, d). Every Langevin step uses it."""

    def potential_and_grad(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(U_i(x), ∇U_i(x)) together, what MALA-type steps need. Default: `potential` and `grad`; override to share
        one pass over the data."""
        return self.potential(X, y, x), self.grad(X, y, x)

    # ------------------------------------------------------------------ several shards of one shape at once (worker)

    def potential_stacked(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        """`potential` of B shards with the same shapes at once: X (B, n, p), y (B, n, ...), x (B, K, d) → (B, K). A
        worker process holding several shards steps them as one batch with it. Default: one `potential` call per
        shard; a model overrides it only with arithmetic that gives every shard bit for bit what `potential` gives
        (same-seed draws must not depend on which shards share a process)."""
        return per_shard(self.potential, X, y, x)

    def grad_stacked(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        """`grad` of B shards with the same shapes at once: (B, K, d); as `potential_stacked`."""
        return per_shard(self.grad, X, y, x)

    @abstractmethod
    def hvp(self, X: np.ndarray, y: np.ndarray, x: np.ndarray, v: np.ndarray) -> np.ndarray:
        """Required. Hessian-vector products ∇²U_i(x_k) v_k for each chain k: shape (K, d). Tuning uses it (Newton
        steps to the MAP, the Laplace preconditioner, curvature along directions)."""

    def hessian(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        """Dense Hessian ∇²U_i(x) at one point x (d,): shape (d, d), for the Laplace preconditioner and Newton
        steps. Default: d Hessian-vector products, symmetrised."""
        d = x.shape[-1]
        eye = np.eye(d)
        H = self.hvp(X, y, np.broadcast_to(x, (d, d)).copy(), eye)
        return 0.5 * (H + H.T)

    def hessians(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        """Dense Hessians ∇²U_i(x_k) at each of K points x (K, d): shape (K, d, d), each what `hessian` gives at x_k
        (to rounding). Samplers that need one per chain (D-ADMMS's Newton steps and noise) call it. Default: `hessian`
        point by point; a model with a closed form overrides it with one batched computation."""
        x = np.asarray(x, dtype=np.float64)
        if x.shape[0] == 0:
            return np.zeros((0, x.shape[-1], x.shape[-1]))
        return np.stack([self.hessian(X, y, xk) for xk in x])

    def hessian_diag(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        """A positive semi-definite diagonal curvature estimate at x (d,): shape (d,), for the diagonal
        preconditioner. Default: the clipped diagonal of `hessian`."""
        return np.clip(np.diag(self.hessian(X, y, x)), 0.0, None)

    @abstractmethod
    def smoothness(self, X: np.ndarray, y: np.ndarray) -> float:
        """Required. M_i: an upper bound of ‖∇²U_i‖ over the whole space (the papers' worst-case step sizes and
        tolerances use it; an overestimate only makes them cautious)."""

    # ------------------------------------------------------------------ per shard: checks of the fit
    # Optional: predictions, calibration metrics and PSIS-LOO (`raysampler.evaluation`) need them. Each reads a row's
    # inputs from X only, so a model with per-group (local) parameters can read the row's group from X and its
    # effects from its own block of x: `evaluation_x` builds that x from a run's draws.

    def evaluation_x(
        self, X: np.ndarray, y: np.ndarray, draws: np.ndarray, names: Sequence[str], seed: int
    ) -> np.ndarray:
        """The x (S, ·) that this model's checks (`log_likelihood`, `predict_mean`, `predict_draw`) take at rows X
        (some or all of a shard's rows, as `shard_data` gives them), from a run's draws (S, len(names)) on the
        reported scale with their parameter names. Default: the draws themselves (no local parameters). A model
        with local parameters picks the effects of the groups in X by name, and draws a group the run never saw from
        its population given each draw, seeded by `seed` and the group alone (so that a row's value does not depend
        on how rows are split)."""
        return draws

    def log_likelihood(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        """log p(y_j | X_j, x_k) of every row j for each of the K rows of x, normalising constants included: shape
        (n, K). PSIS-LOO, the NLL metric and the `log_likelihood` group of exports use it. Default: not defined."""
        raise NotImplementedError(_undefined(self, "log_likelihood", "LOO, NLL and the log_likelihood export"))

    def predict_mean(self, X: np.ndarray, x: np.ndarray) -> np.ndarray:
        """E[y_j | X_j, x_k] for every row and each of the K rows of x: (n, K); a multiclass model gives the class
        probabilities, (n, K, C). `Result.predict` averages it over the draws. Default: not defined."""
        raise NotImplementedError(_undefined(self, "predict_mean", "predictions and evaluation"))

    def linear_predictor(self, X: np.ndarray, x: np.ndarray) -> np.ndarray:
        """The linear predictor η_j of every row for each of the K rows of x, offset included, before the inverse
        link (brms' `posterior_linpred`): (n, K). A GLM's; other models have none. Default: not defined."""
        raise NotImplementedError(_undefined(self, "linear_predictor", "predictions of the linear predictor"))

    def predict_draw(self, X: np.ndarray, x: np.ndarray, u: np.ndarray) -> np.ndarray:
        """A draw of y_j from p(y | X_j, x_k) for every row and each k, by inverting y's distribution function at a
        uniform in (0, 1): (n, K). u of shape (K,) is one uniform per draw, shared by the rows (predictive draws and
        intervals: a row's draws do not depend on how the rows are split into shards); u of shape (n, K) is one per
        row and draw (replicated data sets, `evaluation.pp_check`, which keys each by its row). Default: not
        defined."""
        raise NotImplementedError(_undefined(self, "predict_draw", "predictive draws, intervals, CRPS and coverage"))


class ShardStack(NamedTuple):
    """B shards' data stepped as one batch: runs of consecutive shards with the same row count, each run stacked
    (X (b_j, n_j, p), y (b_j, n_j, ...)); one run when every shard has the same shapes. Shards whose row counts
    differ by one (`shard` of n rows into b parts, n mod b ≠ 0) thus still share a batch: the kernel's own arithmetic
    runs once for all B, the model's `*_stacked` methods once per run (`apply`)."""

    runs: tuple[tuple[np.ndarray, np.ndarray], ...]

    @classmethod
    def of(cls, X: np.ndarray, y: np.ndarray) -> ShardStack:
        """One run: X (B, n, p), y (B, n, ...)."""
        return cls(((X, y),))

    def rows(self) -> np.ndarray:
        """Each shard's row count (B,)."""
        return np.concatenate([np.full(X.shape[0], X.shape[1]) for X, _ in self.runs])

    def apply(self, method: Any, x: np.ndarray) -> np.ndarray:
        """`method(X, y, x)` (a model's `*_stacked` method, x (B, ...)) over every run, joined along the shard axis."""
        if len(self.runs) == 1:
            X, y = self.runs[0]
            return method(X, y, x)
        out, a = [], 0
        for X, y in self.runs:
            out.append(method(X, y, x[a : a + X.shape[0]]))
            a += X.shape[0]
        return np.concatenate(out)

    def shard(self, k: int) -> ShardStack:
        """The k-th shard alone, as a one-shard stack (views)."""
        for X, y in self.runs:
            if k < X.shape[0]:
                return ShardStack.of(X[k : k + 1], y[k : k + 1])
            k -= X.shape[0]
        raise IndexError(k)


def per_shard(method: Any, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
    """`method(X_j, y_j, x_j)` of each of B stacked shards, stacked: what a `*_stacked` method is without arithmetic
    of its own."""
    return np.stack([method(X[j], y[j], x[j]) for j in range(x.shape[0])])


def runs_own(model: Any, owner: type, *methods: str) -> bool:
    """Whether `model`'s `methods` are `owner`'s own (not a subclass's override), so that `owner`'s stacked
    arithmetic computes what they compute."""
    return all(getattr(type(model), m) is getattr(owner, m) for m in methods)


def _undefined(model: Model, method: str, used_by: str) -> str:
    """The message of a model that lacks an optional method of the contract."""
    return (
        f"model {model.name!r} ({type(model).__name__}) does not define {method}(), which {used_by} need; "
        "add it to the model (see docs/models.md)"
    )
