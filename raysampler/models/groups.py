"""Group-level effects (hierarchical GLMs) whose per-group parameters are local to the shard holding the group's rows.

A GLM with group effects has linear predictor η_j = x_jᵀβ + Σ_f z_{f,j}ᵀ r_{f, g_f(j)}: for each grouping factor f
(`GroupEffects`), row j's group g_f(j) (a label column of the data: numbers or text) and its effect columns z_{f,j}
(1 for the intercept, then the slope columns). r_{f,g} ~ N(0, diag(sd_f²)), sd_f with prior `sd_prior` on each entry.

Layout. The global parameters θ (the coordinator's) are (β, the family's own positive parameters, τ_f = log sd_f per
factor); the local parameters of a shard are the non-centred η_{f,g} ~ N(0, I), r_{f,g} = sd_f ⊙ η_{f,g}, one per
group of the shard's rows, g-major within a factor, factors in order. A shard's potential takes x = (θ, η) of shape
(K, d + l_i), global first, and is U_i(θ, η) = −log p(y_i | X_i, β, r(τ, η)) + ½‖η‖². Marginally over each shard's η
this is the shard's marginal likelihood, so sampling (θ, η_1..η_b) targets the hierarchical posterior whenever no
group spans two shards (`check_groups_disjoint`; `rs.shard(..., by=group)` splits data that way).

Computation. `shard_data` turns a shard's X into [X_c, Z, extra | meta]: the coefficient columns, the group design Z
(n, l_i) (column (f, g, k) holds row j's effect column k if g_f(j) = g, else 0), the family's per-row input, then three
columns per factor (dense group code, original label, group count). The family's own methods, on the design
[X_c, Z, extra] with coefficients (β, r, family parameters), give U and its derivatives in (β, r); the chain rule
through r = exp(τ) ⊙ η gives them in (β, τ, η).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import ArgumentError
from ..priors import GaussianPrior, HalfNormal, Normal, PositivePrior, Prior, build_prior, check_positive_prior
from .contract import DataSpec, Model, ParamBlock

__all__ = ["GroupEffects", "HierarchicalGLM", "check_groups_disjoint", "group_label", "normalise_group_effects"]

_PATH = ("model", "group_effects")
#: columns of shard metadata per grouping factor: dense code, original label, number of groups in the shard
_META = 3


@dataclass(frozen=True)
class GroupEffects:
    """Varying effects by `group` (brms `(1 + slopes | group)`): r_g ~ N(0, diag(sd²)) for each group label g of the
    data's column `group`, on the intercept (when `intercept`) and on each column of `slopes`; each sd has prior
    `sd_prior` (default HalfNormal(1)). The group column holds labels, not a feature: it gets no coefficient."""

    group: str
    intercept: bool = True
    slopes: tuple[str, ...] = ()
    sd_prior: PositivePrior = field(default_factory=lambda: HalfNormal(1.0))

    def __post_init__(self) -> None:
        if not isinstance(self.group, str) or not self.group:
            raise ArgumentError((*_PATH, "group"), f"group must be a column name, got {self.group!r}")
        if not isinstance(self.intercept, bool):
            raise ArgumentError((*_PATH, "intercept"), f"intercept must be True or False, got {self.intercept!r}")
        slopes = (self.slopes,) if isinstance(self.slopes, str) else self.slopes
        if not all(isinstance(s, str) and s for s in slopes):
            raise ArgumentError((*_PATH, "slopes"), f"slopes must be column names, got {self.slopes!r}")
        slopes = tuple(slopes)
        if len(set(slopes)) != len(slopes) or self.group in slopes:
            raise ArgumentError((*_PATH, "slopes"), f"slopes must be distinct columns other than the group: {slopes}")
        object.__setattr__(self, "slopes", slopes)
        if not self.intercept and not slopes:
            raise ArgumentError(_PATH, f"group effects by {self.group!r} need an intercept or at least one slope")
        try:
            check_positive_prior(self.sd_prior, "sd_prior")
        except ArgumentError as exc:
            raise ArgumentError((*_PATH, "sd_prior"), exc.message) from None

    @property
    def effects(self) -> tuple[str, ...]:
        """The effects' labels: "(Intercept)" first when present, then the slopes."""
        return (("(Intercept)",) if self.intercept else ()) + self.slopes


def normalise_group_effects(value: Any) -> tuple[GroupEffects, ...] | None:
    """None, one `GroupEffects` or a sequence of them → None or a non-empty tuple with distinct groups."""
    if value is None:
        return None
    items = (value,) if isinstance(value, GroupEffects) else value
    if isinstance(items, (str, bytes)) or not isinstance(items, Sequence) or not items:
        raise ArgumentError(_PATH, f"group_effects must be rs.GroupEffects(...) or a tuple of them, got {value!r}")
    if not all(isinstance(g, GroupEffects) for g in items):
        raise ArgumentError(_PATH, f"group_effects must be rs.GroupEffects(...) or a tuple of them, got {value!r}")
    groups = [g.group for g in items]
    if len(set(groups)) != len(groups):
        raise ArgumentError(_PATH, f"group_effects: each grouping column may appear once, got {groups}")
    return tuple(items)


def group_label(value: float) -> str:
    """A numeric group label as named in parameters: integral values without a decimal point (12.0 → "12")."""
    v = float(value)
    return str(int(v)) if v.is_integer() and abs(v) < 2**53 else repr(v)


def check_groups_disjoint(labels: Sequence[Sequence[str]], group: str) -> None:
    """Raise ArgumentError if a label of grouping column `group` occurs in two shards (`labels[i]`: shard i's labels,
    as named, or numbers): a group's effects are local to one shard, so its rows must be in one shard."""
    owner: dict[str, int] = {}
    for i, labs in enumerate(labels):
        for v in dict.fromkeys(v if isinstance(v, str) else group_label(v) for v in np.asarray(labs).tolist()):
            j = owner.setdefault(v, i)
            if j != i:
                raise ArgumentError(
                    _PATH,
                    f"group {group}={v} has rows in shards {j} and {i}: each group's effects are local "
                    f"to the shard holding its rows, so a group must lie in one shard. Reshard with "
                    f"rs.shard(X, y, ..., by={group!r}) (keeps each group in one shard, balanced by rows)",
                )


def bind_hierarchical(model: Any, spec: DataSpec) -> HierarchicalGLM:
    """Bind a `_GLM` with `group_effects` to the data: locate the group and slope columns, leave the group columns
    out of the coefficients, and bind the family to the remaining columns. A grouping column may hold text labels
    (`DataSpec.levels`); no other column may."""
    from .common import refuse_text_columns

    factors = model.group_effects
    if spec.columns is None:
        raise ArgumentError(
            _PATH,
            "group_effects name columns of X, but the data have no column names (give rs.shard(..., columns=...) "
            "or a CSV/parquet header)",
        )
    cols = list(spec.columns)
    extra = getattr(model, model._extra, None) if model._extra else None
    for ge in factors:
        for c, what in [(ge.group, "group")] + [(s, "slopes") for s in ge.slopes]:
            if c not in cols:
                msg = f"group_effects: {c!r} is not a column of X; the columns are {cols}"
                raise ArgumentError((*_PATH, what), msg)
            if isinstance(extra, str) and c == extra:
                raise ArgumentError((*_PATH, what), f"group_effects: {c!r} is the model's {model._extra} column")
        for s in ge.slopes:
            if s in {g.group for g in factors}:
                raise ArgumentError((*_PATH, "slopes"), f"group_effects: slope {s!r} is a grouping column")
    refuse_text_columns(spec, {ge.group for ge in factors})
    placeholder = dataclasses.replace(model, group_effects=None, coef_prior=Normal(0.0, 1.0), prior_scale=None)
    loaded = placeholder.bind(dataclasses.replace(spec, levels=None))
    gpos = tuple(cols.index(ge.group) for ge in factors)
    coef = tuple(int(j) for j in loaded._coef_cols if j not in gpos)
    if not coef:
        raise ArgumentError(_PATH, "group_effects: X needs at least one feature column besides the group columns")
    labels = tuple(cols[j] for j in coef)
    if isinstance(extra, str):
        fspec = DataSpec(len(coef) + 1, columns=(*labels, extra), n_rows=spec.n_rows)
    else:
        fspec = DataSpec(len(coef), columns=labels, n_rows=spec.n_rows)
    family = dataclasses.replace(model, group_effects=None).bind(fspec)
    slopes = tuple(tuple(cols.index(s) for s in ge.slopes) for ge in factors)
    text = spec.text_levels()
    levels = tuple((ge.group, text[ge.group]) for ge in factors if ge.group in text)
    return HierarchicalGLM(family, factors, coef, loaded._xcol, gpos, slopes, levels, source=loaded)


def _tau_index(factors: tuple[GroupEffects, ...], counts: Sequence[int], tau0: int) -> np.ndarray:
    """For each local coordinate (factor f, group g, effect k), the global index of its τ_{f,k}: (l,)."""
    parts, start = [], tau0
    for ge, G in zip(factors, counts):
        q = len(ge.effects)
        parts.append(np.tile(np.arange(start, start + q), G))
        start += q
    return np.concatenate(parts).astype(np.intp) if parts else np.zeros(0, dtype=np.intp)


@dataclass(frozen=True)
class HierarchicalGLM(Model):
    """A bound GLM family with group effects (what `_GLM.bind` returns when `group_effects` is given); see the module
    docstring. `family` is the family bound to the coefficient columns (its θ is (β, family parameters)); `coef_cols`,
    `extra_col` and `group_cols`/`slope_cols` locate those columns in the shards' X as loaded; `levels` holds the
    text labels of grouping columns that have them ((column, labels) pairs: X holds their `shards.label_code`s)."""

    family: Any  # a bound _GLM without group effects
    factors: tuple[GroupEffects, ...]
    coef_cols: tuple[int, ...]
    extra_col: int | None
    group_cols: tuple[int, ...]
    slope_cols: tuple[tuple[int, ...], ...]
    levels: tuple[tuple[str, tuple[str, ...]], ...] = ()
    source: Any = field(default=None, repr=False, compare=False)  # the model bound to X as loaded (for shard_data)
    _inner: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", str(self.family.name))
        object.__setattr__(self, "target_kind", str(self.family.target_kind))

    # ------------------------------------------------------------------ layout

    def bind(self, spec: DataSpec) -> Model:
        return self

    # the layout's sizes and index arrays are read on every potential of every local step: computed once
    @functools.cached_property
    def n_family(self) -> int:
        """Coordinates of (β, family parameters): the first of θ."""
        return int(self.family.dim)

    @functools.cached_property
    def n_tau(self) -> int:
        return sum(len(g.effects) for g in self.factors)

    @functools.cached_property
    def dim(self) -> int:
        return self.n_family + self.n_tau

    @functools.cached_property
    def _labels(self) -> dict[int, dict[float, str]]:
        """Per factor with text labels: label code → label."""
        from ..shards import label_code

        text = dict(self.levels)
        return {f: {label_code(v): v for v in text[ge.group]} for f, ge in enumerate(self.factors) if ge.group in text}

    def label(self, f: int, value: float) -> str:
        """Factor f's group label as named in parameters: the text itself, or the number (`group_label`)."""
        named = self._labels.get(f)
        if named is not None and float(value) in named:
            return named[float(value)]
        return group_label(value)

    def _tau_of(self, X: np.ndarray) -> np.ndarray:
        """`_tau_index` for this shard's group counts (cached per counts)."""
        counts = self._counts(X)
        key = ("tau", counts)
        idx = self._inner.get(key)
        if idx is None:
            idx = self._inner[key] = _tau_index(self.factors, counts, self.n_family)
        return idx

    def has_local_params(self) -> bool:
        return True

    def param_blocks(self) -> tuple[ParamBlock, ...]:
        sds = tuple(
            ParamBlock(f"sd_{g.group}", len(g.effects), f"{g.group}_effect", g.effects, "exp") for g in self.factors
        )
        return tuple(self.family.param_blocks()) + sds

    def prior(self) -> GaussianPrior | Prior:
        if "prior" not in self._inner:  # read by every shard potential of every local step: built once
            self._inner["prior"] = self._build_prior()
        return self._inner["prior"]

    def _build_prior(self) -> GaussianPrior | Prior:
        parts, start = list(self.family._prior_parts()), self.n_family
        for g in self.factors:
            q = len(g.effects)
            parts.append((np.arange(start, start + q), g.sd_prior))
            start += q
        return build_prior(self.dim, parts)

    # ------------------------------------------------------------------ per shard: data

    def shard_data(self, X: np.ndarray, y: np.ndarray, rows: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """[X_c, Z, extra | meta] (module docstring) from a shard's X as loaded."""
        if self.source is not None:
            X, y = self.source.shard_data(X, y, rows)
        X = np.asarray(X, dtype=np.float64)
        n = X.shape[0]
        zs, meta = [], []
        for ge, gcol, scols in zip(self.factors, self.group_cols, self.slope_cols):
            labels = X[:, gcol]
            if not np.isfinite(labels).all():
                raise ValueError(f"group column {ge.group!r} contains NaN or infinite labels")
            uniq, code = np.unique(labels, return_inverse=True)
            G, q = uniq.size, len(ge.effects)
            vals = np.column_stack(([np.ones(n)] if ge.intercept else []) + [X[:, c] for c in scols])
            Z = np.zeros((n, G * q))
            for k in range(q):
                Z[np.arange(n), code * q + k] = vals[:, k]
            zs.append(Z)
            meta.append(np.column_stack([code.astype(np.float64), labels, np.full(n, float(G))]))
        extra = [] if self.extra_col is None else [X[:, [self.extra_col]]]
        out = np.hstack([X[:, list(self.coef_cols)], *zs, *extra, *meta])
        return np.ascontiguousarray(out), y

    def _counts(self, X: np.ndarray) -> tuple[int, ...]:
        """Groups per factor in a shard (from its metadata columns)."""
        if X.shape[0] == 0:
            return tuple(0 for _ in self.factors)
        w = X.shape[1] - _META * len(self.factors)
        return tuple(int(X[0, w + _META * f + 2]) for f in range(len(self.factors)))

    def local_dim(self, X: np.ndarray, y: np.ndarray) -> int:
        """l_i = Σ_f G_f q_f: the number of local parameters (η) of this shard."""
        return sum(G * len(g.effects) for g, G in zip(self.factors, self._counts(X)))

    def _first_labels(self, X: np.ndarray, f: int, G: int) -> list[str]:
        """Factor f's label of each dense group index 0..G−1 of this shard."""
        w = X.shape[1] - _META * len(self.factors)
        code, lab = X[:, w + _META * f].astype(np.intp), X[:, w + _META * f + 1]
        first = np.zeros(G, dtype=np.intp)
        first[code[::-1]] = np.arange(code.size)[::-1]
        return [self.label(f, lab[first[g]]) for g in range(G)]

    def local_blocks(self, X: np.ndarray, y: np.ndarray) -> tuple[ParamBlock, ...]:
        """One block per grouping factor, reported as r = sd ⊙ η: `r_<group>` with dims (<group>, <group>_effect),
        labelled by the shard's group labels as given and the effects (brms names `r_<group>[<label>,<effect>]`)."""
        blocks = []
        for f, (ge, G) in enumerate(zip(self.factors, self._counts(X))):
            if G == 0:
                continue
            labels = tuple(self._first_labels(X, f, G))
            q = len(ge.effects)
            blocks.append(
                ParamBlock(f"r_{ge.group}", G * q, ge.group, labels, "identity", f"{ge.group}_effect", ge.effects)
            )
        return tuple(blocks)

    def group_labels(self, X: np.ndarray, y: np.ndarray) -> tuple[list[str], ...]:
        """This shard's distinct labels per grouping factor, as named (for `check_groups_disjoint`)."""
        return tuple(self._first_labels(X, f, G) for f, G in enumerate(self._counts(X)))

    def local_natural(self, theta: np.ndarray, eta: np.ndarray, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Local draws η (..., l_i) → r = sd ⊙ η on the natural scale, sd = exp(τ) from the global draws θ (..., d)."""
        idx = self._tau_of(X)
        return np.exp(theta[..., idx]) * eta

    def validate(self, X: np.ndarray, y: np.ndarray, argname: str = "data") -> None:
        self._inner_model(X).validate(self._design(X), y, argname)

    def gram(self, X: np.ndarray, y: np.ndarray) -> np.ndarray | None:
        F = self.family._flat()
        if F.size == 0:
            return None
        XF = X[:, F]
        return XF.T @ XF

    def check_proper(self, gram: np.ndarray | None, n_rows: int | None = None) -> None:
        self.family.check_proper(gram, n_rows)

    # ------------------------------------------------------------------ the family on the extended design

    def _design(self, X: np.ndarray) -> np.ndarray:
        """[X_c, Z, extra]: a column slice (no copy; BLAS reads it with its row stride)."""
        return X[:, : X.shape[1] - _META * len(self.factors)]

    def _inner_model(self, X: np.ndarray) -> Any:
        """The family on the design [X_c, Z, extra] with coefficients (β, r) (cached by width)."""
        width = X.shape[1] - _META * len(self.factors)
        inner = self._inner.get(width)
        if inner is None:
            fam = self.family
            p = fam.n_coef
            e = 0 if fam._xcol is None else 1
            extra = getattr(fam, fam._extra, None) if fam._extra else None
            labels = list(fam._coef_labels() or [f"x{j}" for j in range(p)])
            labels += [f"__r{j}" for j in range(width - p - e)]
            if isinstance(extra, str):
                labels.append(extra)
            inner = dataclasses.replace(fam, n_features=width, columns=tuple(labels))
            self._inner[width] = inner
        return inner

    def _split(self, X: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(inner coefficients (β, r, family params) (K, p + l), η (K, l), sd per local coordinate (K, l), τ index)."""
        p, nf, d = self.family.n_coef, self.n_family, self.dim
        idx = self._tau_of(X)
        eta = x[:, d:]
        if eta.shape[1] != idx.size:
            raise ValueError(f"x has {x.shape[1]} columns, but this shard has d + l = {d} + {idx.size}")
        sd = np.exp(x[:, idx])
        inner_x = np.concatenate([x[:, :p], sd * eta, x[:, p:nf]], axis=1)
        return inner_x, eta, sd, idx

    def _outer_grad(self, gi: np.ndarray, x: np.ndarray, eta: np.ndarray, sd: np.ndarray, idx: np.ndarray):
        """Chain rule: ∇_(β,θ_f) = the family's; ∇_η = sd ⊙ ∇_r + η; ∇_τ_j = Σ_{l→j} ∇_r_l r_l."""
        p, nf, d = self.family.n_coef, self.n_family, self.dim
        K, lsize = eta.shape
        g_r = gi[:, p : p + lsize]
        out = np.zeros((K, d + lsize))
        out[:, :p] = gi[:, :p]
        out[:, p:nf] = gi[:, p + lsize :]
        np.add.at(out.T, idx, (g_r * sd * eta).T)
        out[:, d:] = g_r * sd + eta
        return out

    def potential(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        inner_x, eta, _, _ = self._split(X, x)
        return self._inner_model(X).potential(self._design(X), y, inner_x) + 0.5 * np.einsum("kl,kl->k", eta, eta)

    def grad(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        return self.potential_and_grad(X, y, x)[1]

    def potential_and_grad(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        inner_x, eta, sd, idx = self._split(X, x)
        U, gi = self._inner_model(X).potential_and_grad(self._design(X), y, inner_x)
        return U + 0.5 * np.einsum("kl,kl->k", eta, eta), self._outer_grad(gi, x, eta, sd, idx)

    def hessian(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        """∇²U at one point x (d + l,): Jᵀ H_f J + Σ_l ∂_r_l U_f ∇²r_l + (0, I_ηη), from the family's own dense
        Hessian H_f in (β, r, θ_f) (one pass over the rows, where d + l Hessian-vector products take several)."""
        p, nf, d = self.family.n_coef, self.n_family, self.dim
        xk = np.asarray(x, dtype=np.float64)[None, :]
        inner_x, eta, sd, idx = self._split(X, xk)
        inner, D = self._inner_model(X), self._design(X)
        lsize = eta.shape[1]
        r, s = (sd * eta)[0], sd[0]
        m = inner_x.shape[1]
        J = np.zeros((m, d + lsize))
        J[np.arange(p), np.arange(p)] = 1.0
        J[p + lsize + np.arange(nf - p), p + np.arange(nf - p)] = 1.0
        rows = p + np.arange(lsize)
        J[rows, d + np.arange(lsize)] = s
        J[rows, idx] = r
        Hf = inner.hessian(D, y, inner_x[0])
        H = J.T @ Hf @ J
        g_r = inner.grad(D, y, inner_x)[0, p : p + lsize]
        np.add.at(H, (idx, idx), g_r * r)
        H[idx, d + np.arange(lsize)] += g_r * s
        H[d + np.arange(lsize), idx] += g_r * s
        H[d:, d:] += np.eye(lsize)
        return 0.5 * (H + H.T)

    def hvp(self, X: np.ndarray, y: np.ndarray, x: np.ndarray, v: np.ndarray) -> np.ndarray:
        """∇²U v = Jᵀ H_f (J v) + Σ_l ∂_r_l U_f ∇²r_l v + (0, 0, v_η), with J = ∂(β, r, θ_f)/∂(β, θ_f, τ, η):
        J v = (v_β, sd ⊙ v_η + r ⊙ v_τ[l], v_f); ∂²r_l/∂τ² = r_l, ∂²r_l/∂τ∂η_l = sd_l."""
        p, nf, d = self.family.n_coef, self.n_family, self.dim
        inner_x, eta, sd, idx = self._split(X, x)
        lsize = eta.shape[1]
        r = sd * eta
        vt, ve = v[:, idx], v[:, d:]
        dr = sd * ve + r * vt
        vi = np.concatenate([v[:, :p], dr, v[:, p:nf]], axis=1)
        inner, D = self._inner_model(X), self._design(X)
        hi = inner.hvp(D, y, inner_x, vi)
        g_r = inner.grad(D, y, inner_x)[:, p : p + lsize]
        h_r = hi[:, p : p + lsize]
        out = np.zeros_like(v, dtype=np.float64)
        out[:, :p] = hi[:, :p]
        out[:, p:nf] = hi[:, p + lsize :]
        np.add.at(out.T, idx, (h_r * r + g_r * (r * vt + sd * ve)).T)
        out[:, d:] = sd * h_r + g_r * sd * vt + ve
        return out

    # ------------------------------------------------------------------ checks of the fit (x = (θ, r), reported r)

    def evaluation_x(
        self, X: np.ndarray, y: np.ndarray, draws: np.ndarray, names: Sequence[str], seed: int
    ) -> np.ndarray:
        """(θ, r) (S, d + l) for the groups of these rows: each group's r from the draws by its brms name
        `r_<group>[label,effect]`; a group the run never saw gets r = sd ⊙ z, z ~ N(0, I) per draw from a stream
        seeded by (seed, factor, label): a new group drawn from the population. Codes absent from X get 0."""
        if not names:
            raise ValueError("evaluation_x needs the draws' parameter names (the group effects are picked by name)")
        d = self.dim
        S = draws.shape[0]
        col = {n: j for j, n in enumerate(names)}
        w = X.shape[1] - _META * len(self.factors)
        counts = self._counts(X)
        out = np.zeros((S, d + self.local_dim(X, y)))
        out[:, :d] = draws[:, :d]
        start, tau = d, self.n_family
        for f, (ge, G) in enumerate(zip(self.factors, counts)):
            q = len(ge.effects)
            code, lab = X[:, w + _META * f].astype(np.intp), X[:, w + _META * f + 1]
            present, first = np.unique(code, return_index=True)
            for g, row in zip(present.tolist(), first.tolist()):
                label = self.label(f, float(lab[row]))
                cols = [col.get(f"r_{ge.group}[{label},{e}]", -1) for e in ge.effects]
                at = start + g * q
                if min(cols) >= 0:
                    out[:, at : at + q] = draws[:, cols]
                    continue
                key = int(np.float64(lab[row]).view(np.uint64))
                z = np.random.default_rng([seed, f, key]).standard_normal((S, q))
                out[:, at : at + q] = np.exp(draws[:, tau : tau + q]) * z
            start += G * q
            tau += q
        return out

    def _inner_at(self, X: np.ndarray, x: np.ndarray) -> np.ndarray:
        """The family's coefficients (β, r, family parameters) from x = (θ, r)."""
        p, nf, d = self.family.n_coef, self.n_family, self.dim
        return np.concatenate([x[:, :p], x[:, d:], x[:, p:nf]], axis=1)

    def log_likelihood(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        """log p(y_j | β, r) per row and draw, x = (θ, r) (`evaluation_x`): the family's on [X_c, Z, extra]."""
        return self._inner_model(X).log_likelihood(self._design(X), y, self._inner_at(X, x))

    def predict_mean(self, X: np.ndarray, x: np.ndarray) -> np.ndarray:
        return self._inner_model(X).predict_mean(self._design(X), self._inner_at(X, x))

    def predict_draw(self, X: np.ndarray, x: np.ndarray, u: np.ndarray) -> np.ndarray:
        return self._inner_model(X).predict_draw(self._design(X), self._inner_at(X, x), u)

    def smoothness(self, X: np.ndarray, y: np.ndarray) -> float:
        """Not a global bound (the non-centred potential's curvature grows like sd²): the family's bound on the
        design [X_c, Z] at sd = 1, plus 1 for ½‖η‖². Tuning uses the MAP's curvature instead."""
        return float(self._inner_model(X).smoothness(self._design(X), y)) + 1.0
