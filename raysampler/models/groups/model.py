"""`HierarchicalGLM`, a bound GLM family with group effects local to the shard holding each group's rows, and
`bind_hierarchical`, which builds it from a family and the data spec (the package docstring has the layout and the
computation)."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...errors import ArgumentError
from ...priors import (
    GaussianPrior,
    Normal,
    Prior,
    build_prior,
)
from ..contract import (
    DataSpec,
    LocalCurvature,
    Model,
    ParamBlock,
    correlation_pairs,
)
from . import curvature, evaluation, interweaving
from .index import IndexCache, Point, ShardIndex, factor_index
from .scales import apply_scale, scale_at
from .spec import META, PATH, GroupEffects, group_label, refuse_text_columns


def bind_hierarchical(model: Any, spec: DataSpec) -> HierarchicalGLM:
    """Bind a `_GLM` with `group_effects` to the data: locate the group and slope columns, leave the group columns
    out of the coefficients, and bind the family to the remaining columns. A grouping column may hold text labels
    (`DataSpec.levels`); no other column may."""
    factors = model.group_effects
    if spec.columns is None:
        raise ArgumentError(
            PATH,
            "group_effects name columns of X, but the data have no column names (give rs.shard(..., columns=...) "
            "or a CSV/parquet header)",
        )
    cols = list(spec.columns)
    extra = getattr(model, model._extra, None) if model._extra else None
    for ge in factors:
        for c, what in [(ge.group, "group")] + [(s, "slopes") for s in ge.slopes]:
            if c not in cols:
                msg = f"group_effects: {c!r} is not a column of X; the columns are {cols}"
                raise ArgumentError((*PATH, what), msg)
            if isinstance(extra, str) and c == extra:
                raise ArgumentError((*PATH, what), f"group_effects: {c!r} is the model's {model._extra} column")
        for s in ge.slopes:
            if s in {g.group for g in factors}:
                raise ArgumentError((*PATH, "slopes"), f"group_effects: slope {s!r} is a grouping column")
    refuse_text_columns(spec, {ge.group for ge in factors})
    numeric = dataclasses.replace(spec, levels=None)
    placeholder = dataclasses.replace(model, group_effects=None, coef_prior=Normal(0.0, 1.0), prior_scale=None)
    loaded = placeholder.bind(numeric)
    gpos = tuple(cols.index(ge.group) for ge in factors)
    coef = tuple(int(j) for j in loaded._family_cols() if j not in gpos)  # coefficients' (and a sigma design's)
    if not coef:
        raise ArgumentError(PATH, "group_effects: X needs at least one feature column besides the group columns")
    labels = tuple(cols[j] for j in coef)
    if isinstance(extra, str):
        fspec = DataSpec(len(coef) + 1, columns=(*labels, extra), n_rows=spec.n_rows)
    else:
        fspec = DataSpec(len(coef), columns=labels, n_rows=spec.n_rows)
    family = dataclasses.replace(model, group_effects=None).bind(fspec)
    slopes = tuple(tuple(cols.index(s) for s in ge.slopes) for ge in factors)
    text = spec.text_levels()
    levels = tuple((ge.group, text[ge.group]) for ge in factors if ge.group in text)
    wide = dict(spec.spanning or ())
    spanning = tuple(wide.get(ge.group) for ge in factors) if wide else ()
    return HierarchicalGLM(family, factors, coef, loaded._xcol, gpos, slopes, levels, spanning, source=loaded)


@dataclass(frozen=True)
class HierarchicalGLM(Model):
    """A bound GLM family with group effects (what `_GLM.bind` returns when `group_effects` is given); see the module
    docstring. `family` is the family bound to the coefficient columns (its θ is (β, ψ)); `coef_cols`, `extra_col`
    and `group_cols`/`slope_cols` locate those columns in the shards' X as loaded; `levels` holds the text labels of
    grouping columns that have them ((column, labels) pairs: X holds their `shards.label_code`s)."""

    family: Any  # a bound _GLM without group effects
    factors: tuple[GroupEffects, ...]
    coef_cols: tuple[int, ...]
    extra_col: int | None
    group_cols: tuple[int, ...]
    slope_cols: tuple[tuple[int, ...], ...]
    levels: tuple[tuple[str, tuple[str, ...]], ...] = ()
    #: per factor, None for a factor whose groups each lie in one shard (effects local), or for a spanning factor
    #: (levels at several shards) its levels over all shards, as named: its non-centred effects η_f ~ N(0, I) are
    #: then global, in θ after every factor's scales, their N(0, I) prior in the global prior (counted once)
    spanning: tuple[tuple[str, ...] | None, ...] = ()
    source: Any = field(default=None, repr=False, compare=False)  # the model bound to X as loaded (for shard_data)
    _cache: IndexCache = field(default_factory=IndexCache, init=False, repr=False, compare=False)
    #: the indices of the evaluation layout (`evaluation_x`), apart: they differ only with a spanning factor
    _eval_cache: IndexCache = field(default_factory=IndexCache, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", str(self.family.name))
        object.__setattr__(self, "target_kind", str(self.family.target_kind))

    # ------------------------------------------------------------------ layout

    def bind(self, spec: DataSpec) -> Model:
        return self

    # the layout's sizes are read on every potential of every local step: computed once
    @functools.cached_property
    def n_family(self) -> int:
        """Coordinates of (β, ψ): the first of θ."""
        return int(self.family.dim)

    @functools.cached_property
    def scale_starts(self) -> tuple[int, ...]:
        """Where each factor's scale coordinates (log sds, then correlations) start in θ."""
        starts, at = [], self.n_family
        for ge in self.factors:
            starts.append(at)
            at += ge.n_scale
        return tuple(starts)

    @functools.cached_property
    def global_levels(self) -> tuple[tuple[str, ...] | None, ...]:
        """Per factor: None (local effects) or its levels over all shards (a spanning factor's, global)."""
        return self.spanning or tuple(None for _ in self.factors)

    @functools.cached_property
    def global_starts(self) -> tuple[int | None, ...]:
        """Where each spanning factor's η (G·q, g-major) starts in θ (after all scales); None for a local factor."""
        at = self.n_family + sum(ge.n_scale for ge in self.factors)
        out: list[int | None] = []
        for ge, levels in zip(self.factors, self.global_levels):
            out.append(None if levels is None else at)
            at += 0 if levels is None else len(levels) * len(ge.effects)
        return tuple(out)

    @functools.cached_property
    def has_spanning(self) -> bool:
        return any(levels is not None for levels in self.global_levels)

    @functools.cached_property
    def dim(self) -> int:
        own = sum(len(lv) * len(ge.effects) for ge, lv in zip(self.factors, self.global_levels) if lv is not None)
        return self.n_family + sum(ge.n_scale for ge in self.factors) + own

    def with_spanning(self, spanning: Mapping[str, Sequence[str]]) -> HierarchicalGLM:
        """This model with the factors named in `spanning` (grouping column → its levels over all shards, as named)
        made global (`spanning`), the others local."""
        levels = tuple(None if ge.group not in spanning else tuple(spanning[ge.group]) for ge in self.factors)
        return dataclasses.replace(self, spanning=levels if any(v is not None for v in levels) else ())

    @functools.cached_property
    def _labels(self) -> dict[int, dict[float, str]]:
        """Per factor with text labels: label code → label."""
        from ...shards import label_code

        text = dict(self.levels)
        return {f: {label_code(v): v for v in text[ge.group]} for f, ge in enumerate(self.factors) if ge.group in text}

    def label(self, f: int, value: float) -> str:
        """Factor f's group label as named in parameters: the text itself, or the number (`group_label`)."""
        named = self._labels.get(f)
        if named is not None and float(value) in named:
            return named[float(value)]
        return group_label(value)

    def has_local_params(self) -> bool:
        return any(levels is None for levels in self.global_levels)

    def param_blocks(self) -> tuple[ParamBlock, ...]:
        blocks = list(self.family.param_blocks())
        for g in self.factors:
            # one effect (brms' (1 | g)): a scalar sd, no trailing dimension of size 1, its flat name kept
            dim = f"{g.group}_effect" if len(g.effects) > 1 else None
            blocks.append(ParamBlock(f"sd_{g.group}", len(g.effects), dim, g.effects, "exp"))
            if g.correlated:
                pairs = tuple(f"{g.effects[a]},{g.effects[b]}" for a, b in correlation_pairs(len(g.effects)))
                blocks.append(ParamBlock(f"cor_{g.group}", g.n_cor, f"{g.group}_cor", pairs, "cholesky_corr"))
        for f, (g, levels) in enumerate(zip(self.factors, self.global_levels)):
            if levels is not None:  # a spanning factor's effects: sampled as z, reported as r = diag(sd) L z
                numeric = not self._labels.get(f)
                blocks.append(
                    ParamBlock(
                        f"r_{g.group}", len(levels) * len(g.effects), g.group, levels, "group_scale",
                        f"{g.group}_effect", g.effects, numeric,
                    )
                )  # fmt: skip
        return tuple(blocks)

    def prior(self) -> GaussianPrior | Prior:
        return self._prior

    @functools.cached_property
    def _prior(self) -> GaussianPrior | Prior:
        """The family's prior on (β, ψ), `sd_prior` on each log sd, LKJ on each factor's partial correlations
        (read by every shard potential of every local step: built once)."""
        parts: list[Any] = list(self.family._prior_parts())
        for g, start in zip(self.factors, self.scale_starts):
            q = len(g.effects)
            parts.append((np.arange(start, start + q), g.sd_prior))
            if g.correlated:
                columns = [a for a, _ in correlation_pairs(q)]
                parts.append((np.arange(start + q, start + q + g.n_cor), g.cor_prior.partial_correlations(q, columns)))
        for g, levels, at in zip(self.factors, self.global_levels, self.global_starts):
            if levels is not None and at is not None:  # a spanning factor's η ~ N(0, I): once, not per shard
                parts.append((np.arange(at, at + len(levels) * len(g.effects)), Normal(0.0, 1.0)))
        return build_prior(self.dim, parts)

    # ------------------------------------------------------------------ per shard: data

    def shard_data(self, X: np.ndarray, y: np.ndarray, rows: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """[family design | effect columns | meta] (module docstring) from a shard's X as loaded."""
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
            zs += ([np.ones(n)] if ge.intercept else []) + [X[:, c] for c in scols]
            meta.append(np.column_stack([code.reshape(-1).astype(np.float64), labels, np.full(n, float(uniq.size))]))
        extra = [] if self.extra_col is None else [X[:, [self.extra_col]]]
        out = np.hstack([X[:, list(self.coef_cols)], *extra, np.column_stack(zs), *meta])
        return np.ascontiguousarray(out), y

    @functools.cached_property
    def _widths(self) -> tuple[int, int]:
        """(the family design's width, where the meta columns start)."""
        nf = int(self.family.n_features)
        return nf, nf + sum(len(ge.effects) for ge in self.factors)

    def _counts(self, X: np.ndarray) -> tuple[int, ...]:
        """Groups per factor in a shard (from its metadata columns); a spanning factor's are its levels over all
        shards."""
        glob = self.global_levels
        if X.shape[0] == 0:
            return tuple(0 if lv is None else len(lv) for lv in glob)
        w = self._widths[1]
        return tuple(int(X[0, w + META * f + 2]) if lv is None else len(lv) for f, lv in enumerate(glob))

    def _local_counts(self, X: np.ndarray) -> tuple[int, ...]:
        """Local groups per factor in a shard: 0 for a spanning factor (its effects are in θ)."""
        return tuple(0 if lv is not None else G for lv, G in zip(self.global_levels, self._counts(X)))

    def _global_code(self, X: np.ndarray, f: int) -> np.ndarray:
        """Spanning factor f's level index (over all shards) of each row; ValueError naming a level the set-up did
        not see (its effect is not a parameter)."""
        w = self._widths[1]
        levels = self.global_levels[f]
        assert levels is not None
        where = {v: i for i, v in enumerate(levels)}
        values, inverse = np.unique(X[:, w + META * f + 1], return_inverse=True)
        codes = []
        for v in values.tolist():
            name = self.label(f, v)
            if name not in where:
                raise ValueError(
                    f"group {self.factors[f].group}={name} was not seen at set-up: the factor spans shards, so its "
                    "effects are global parameters, one per level the shards reported"
                )
            codes.append(where[name])
        return np.asarray(codes, dtype=np.intp)[inverse.reshape(-1)]

    def _index(self, X: np.ndarray) -> ShardIndex:
        """The shard's `ShardIndex`, built on first use for this X (cached while X lives)."""
        return self._cached_index(X, self._cache, evaluation=False)

    def _eval_index(self, X: np.ndarray) -> ShardIndex:
        """The index of `evaluation_x`'s layout x = (θ, r_local, η_spanning): the potential's, except that each
        spanning factor reads the η of X's own groups (its `META` code, new levels included) from after the local
        effects instead of θ's η by level over all shards."""
        if not self.has_spanning:
            return self._index(X)
        return self._cached_index(X, self._eval_cache, evaluation=True)

    def _cached_index(self, X: np.ndarray, cache: IndexCache, evaluation: bool) -> ShardIndex:
        hit = cache.find(X)
        if hit is not None:
            return hit
        nf, w = self._widths
        Xf = np.ascontiguousarray(X[:, :nf])
        fam = self.family
        Xc = np.ascontiguousarray(fam._coef_X(Xf))
        factors, start, col = [], 0, nf
        span_at = self.dim + self.local_dim(X, np.empty(0))
        for f, (ge, G) in enumerate(zip(self.factors, self._counts(X))):
            q = len(ge.effects)
            at = self.global_starts[f]
            if at is None:
                code = X[:, w + META * f].astype(np.intp)
                factors.append(factor_index(code, X[:, col : col + q], G, start, Xc, self.dim + start))
                start += G * q
            elif evaluation:
                code = X[:, w + META * f].astype(np.intp)
                G_x = self._dense_count(X, f)
                factors.append(factor_index(code, X[:, col : col + q], G_x, -1, Xc, span_at, local=False))
                span_at += G_x * q
            else:
                code = self._global_code(X, f)
                factors.append(factor_index(code, X[:, col : col + q], G, -1, Xc, at, local=False))
            col += q
        offset = Xf[:, fam._xcol].copy() if fam._xcol is not None and fam._extra == "offset" else None
        index = ShardIndex(Xf, Xc, offset, tuple(factors))
        cache.keep(X, index)
        return index

    def _dense_count(self, X: np.ndarray, f: int) -> int:
        """Factor f's groups among the rows X (its `META` count: X's own, whatever the factor's placement)."""
        return int(X[0, self._widths[1] + META * f + 2]) if X.shape[0] else 0

    def local_dim(self, X: np.ndarray, y: np.ndarray) -> int:
        """l_i = Σ_f G_f q_f over the local factors: the number of local parameters (η) of this shard."""
        return sum(G * len(g.effects) for g, G in zip(self.factors, self._local_counts(X)))

    def _first_labels(self, X: np.ndarray, f: int, G: int) -> list[str]:
        """Factor f's label of each dense group index 0..G−1 of this shard."""
        w = self._widths[1]
        code, lab = X[:, w + META * f].astype(np.intp), X[:, w + META * f + 1]
        first = np.zeros(G, dtype=np.intp)
        first[code[::-1]] = np.arange(code.size)[::-1]
        return [self.label(f, lab[first[g]]) for g in range(G)]

    def local_blocks(self, X: np.ndarray, y: np.ndarray) -> tuple[ParamBlock, ...]:
        """One block per grouping factor, reported as r = M η: `r_<group>` with dims (<group>, <group>_effect),
        labelled by the shard's group labels as given and the effects (brms names `r_<group>[<label>,<effect>]`)."""
        blocks = []
        for f, (ge, G) in enumerate(zip(self.factors, self._local_counts(X))):
            if G == 0:
                continue
            labels = tuple(self._first_labels(X, f, G))
            q = len(ge.effects)
            numeric = not self._labels.get(f)  # no text labels: the column holds numbers
            blocks.append(
                ParamBlock(
                    f"r_{ge.group}", G * q, ge.group, labels, "identity", f"{ge.group}_effect", ge.effects, numeric
                )
            )
        return tuple(blocks)

    def group_labels(self, X: np.ndarray, y: np.ndarray) -> tuple[list[str], ...]:
        """This shard's distinct labels per grouping factor, as named (metadata: the set-up decides from them which
        factors span shards, and checks that the others do not)."""
        w = self._widths[1]
        out = []
        for f in range(len(self.factors)):
            values = np.unique(X[:, w + META * f + 1]).tolist() if X.shape[0] else []
            out.append([self.label(f, v) for v in values])
        return tuple(out)

    def local_natural(self, theta: np.ndarray, eta: np.ndarray, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Local draws η (..., l_i) → r = M η on the natural scale, M from the global draws θ (..., d)."""
        th = np.asarray(theta, dtype=np.float64)
        e = np.asarray(eta, dtype=np.float64)
        lead = e.shape[:-1]
        th2, e2 = th.reshape(-1, th.shape[-1]), e.reshape(-1, e.shape[-1])
        out = np.empty_like(e2)
        at = 0
        for f, (ge, G) in enumerate(zip(self.factors, self._local_counts(X))):
            if G == 0:
                continue
            q = len(ge.effects)
            M = scale_at(ge, th2[:, self.scale_starts[f] : self.scale_starts[f] + ge.n_scale], 0).M
            block = e2[:, at : at + G * q].reshape(-1, G, q)
            out[:, at : at + G * q] = apply_scale(M, block).reshape(-1, G * q)
            at += G * q
        return out.reshape(lead + (out.shape[-1],))

    def validate(self, X: np.ndarray, y: np.ndarray, argname: str = "data") -> None:
        self.family.validate(self._index(X).Xf, y, argname)

    def gram(self, X: np.ndarray, y: np.ndarray) -> np.ndarray | None:
        return self.family.gram(self._index(X).Xf, y)

    def check_proper(self, gram: np.ndarray | None, n_rows: int | None = None) -> None:
        self.family.check_proper(gram, n_rows)

    # ------------------------------------------------------------------ one pass over the rows

    def _point(self, X: np.ndarray, y: np.ndarray, x: np.ndarray, order: int) -> Point:
        """The rows' linear predictors at K points x (K, d + l_i) (β's part, plus each factor's gathered r = M η) and
        the family's per-row terms there up to derivative `order`."""
        index = self._index(X)
        x = np.asarray(x, dtype=np.float64)
        K, d, p = x.shape[0], self.dim, self.family.n_coef
        if x.shape[1] != d + index.local:
            raise ValueError(f"x has {x.shape[1]} columns, but this shard has d + l = {d} + {index.local}")
        lin = index.linear(x[:, :p])
        scales, etas, rs = [], [], []
        for ge, fi, s0 in zip(self.factors, index.factors, self.scale_starts):
            sc = scale_at(ge, x[:, s0 : s0 + ge.n_scale], order)
            e = x[:, fi.col : fi.col + fi.width].reshape(K, fi.G, fi.q)
            r = apply_scale(sc.M, e)
            lin += fi.gather(r)
            scales.append(sc)
            etas.append(e)
            rs.append(r)
        terms = self.family.row_terms(index.Xf, y, lin, x[:, p : self.n_family], order)
        return Point(index, x, terms, tuple(scales), tuple(etas), tuple(rs))

    def _value(self, pt: Point) -> np.ndarray:
        """U at the pass's points: Σ_j ℓ_j + ½‖η‖² (K,)."""
        loss = pt.terms.loss
        eta = pt.x[:, self.dim :]
        return np.ones(loss.shape[0]) @ loss + 0.5 * np.einsum("kl,kl->k", eta, eta)

    def _grad(self, pt: Point) -> tuple[np.ndarray, list[np.ndarray], list[np.ndarray]]:
        """∇U (K, d + l) from a pass (order ≥ 1), with each factor's g_r = Σ_{j in g} ∂ℓ_j/∂η_j z_j (K, G, q) and
        C = Σ_g g_r η_gᵀ (K, q, q) (what the Hessian's second-order terms reuse)."""
        p, nf = self.family.n_coef, self.n_family
        x, a = pt.x, pt.terms.d1
        out = np.empty_like(x)
        out[:, :p] = a.T @ pt.index.Xc
        out[:, p:nf] = pt.terms.g_psi
        grs, Cs = [], []
        for ge, fi, sc, e, s0 in zip(self.factors, pt.index.factors, pt.scales, pt.etas, self.scale_starts):
            gr = fi.scatter(a)
            ge_r = apply_scale(sc.M, gr, transpose=True)  # a spanning factor's ½‖η‖² is in the prior
            out[:, fi.col : fi.col + fi.width] = (ge_r + e if fi.local else ge_r).reshape(x.shape[0], -1)
            C = np.einsum("kga,kgb->kab", gr, e)
            out[:, s0 : s0 + ge.n_scale] = np.einsum("kabp,kab->kp", sc.dM, C)
            grs.append(gr)
            Cs.append(C)
        return out, grs, Cs

    def potential(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        return self._value(self._point(X, y, x, 0))

    def grad(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        return self.potential_and_grad(X, y, x)[1]

    def potential_and_grad(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        pt = self._point(X, y, x, 1)
        return self._value(pt), self._grad(pt)[0]

    def hvp(self, X: np.ndarray, y: np.ndarray, x: np.ndarray, v: np.ndarray) -> np.ndarray:
        """∇²U v in one pass (the family's first and second per-row derivatives together): the direction moves each
        row's linear predictor by δ_j = x_jᵀv_β + Σ_f z_fjᵀ δr_f, δr = M v_η + (Σ_p ∂M/∂s_p v_s,p) η; the family's
        curvature turns it into s_j = ∂²ℓ_j/∂η_j² δ_j + ∂²ℓ_j/∂η_j∂ψ v_ψ, which flows back to β by Xᵀ, to the groups
        by segment sums, and to the scales through ∂M/∂s (with M's own second derivatives on g_r)."""
        pt = self._point(X, y, x, 2)
        _, grs, Cs = self._grad(pt)
        p, nf = self.family.n_coef, self.n_family
        v = np.asarray(v, dtype=np.float64)
        K = v.shape[0]
        t = pt.terms
        vpsi = v[:, p:nf]
        dlin = pt.index.Xc @ v[:, :p].T
        moves = []
        for ge, fi, sc, e, s0 in zip(self.factors, pt.index.factors, pt.scales, pt.etas, self.scale_starts):
            vs = v[:, s0 : s0 + ge.n_scale]
            ve = v[:, fi.col : fi.col + fi.width].reshape(K, fi.G, fi.q)
            D = np.einsum("kabp,kp->kab", sc.dM, vs)
            dr = apply_scale(sc.M, ve) + apply_scale(D, e)
            dlin += fi.gather(dr)
            moves.append((vs, ve, D))
        sj = t.d2 * dlin
        if vpsi.shape[1]:
            sj += np.einsum("nkm,km->nk", t.h_eta_psi, vpsi)
        out = np.empty_like(v)
        out[:, :p] = sj.T @ pt.index.Xc
        if vpsi.shape[1]:
            out[:, p:nf] = np.einsum("nkm,nk->km", t.h_eta_psi, dlin) + np.einsum("kmj,kj->km", t.h_psi, vpsi)
        for ge, fi, sc, e, gr, C, (vs, ve, D), s0 in zip(
            self.factors, pt.index.factors, pt.scales, pt.etas, grs, Cs, moves, self.scale_starts
        ):
            dgr = fi.scatter(sj)
            oe = apply_scale(sc.M, dgr, transpose=True) + apply_scale(D, gr, transpose=True)
            out[:, fi.col : fi.col + fi.width] = (oe + ve if fi.local else oe).reshape(K, -1)
            dC = np.einsum("kga,kgb->kab", dgr, e) + np.einsum("kga,kgb->kab", gr, ve)
            E = np.einsum("kabpq,kq->kabp", sc.d2M, vs)
            out[:, s0 : s0 + ge.n_scale] = np.einsum("kabp,kab->kp", sc.dM, dC) + np.einsum("kabp,kab->kp", E, C)
        return out

    def hessian(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        """∇²U at one point x (d + l,), dense: d + l Hessian-vector products at once (one pass at d + l points)."""
        x = np.asarray(x, dtype=np.float64)
        n = x.shape[0]
        H = self.hvp(X, y, np.broadcast_to(x, (n, n)).copy(), np.eye(n))
        return 0.5 * (H + H.T)

    def hessians(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        """∇²U at K points x (K, d + l), dense. With a spanning factor (whose curvature blocks come from here) all
        K (d + l) Hessian-vector products in one pass over the rows; otherwise the contract's point by point."""
        x = np.asarray(x, dtype=np.float64)
        if not self.has_spanning or x.shape[0] == 0:
            return super().hessians(X, y, x)
        K, n = x.shape
        H = self.hvp(X, y, np.repeat(x, n, axis=0), np.tile(np.eye(n), (K, 1))).reshape(K, n, n)
        return 0.5 * (H + np.swapaxes(H, 1, 2))

    # ------------------------------------------------------------------ the local blocks

    def block_potential(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        """Per group (one grouping factor) the terms of U that involve its η_g, Σ_{j in g} ℓ_j + ½‖η_g‖², (K, G);
        with several factors (or a spanning one) one block, U (K, 1)."""
        if self.has_spanning:
            return Model.block_potential(self, X, y, x)
        pt = self._point(X, y, x, 0)
        return self._blocks(pt)

    def _blocks(self, pt: Point) -> np.ndarray:
        if len(pt.index.factors) != 1:
            return self._value(pt)[:, None]
        fi, e = pt.index.factors[0], pt.etas[0]
        return fi.per_group(pt.terms.loss) + 0.5 * np.einsum("kgq,kgq->kg", e, e)

    def local_curvature(self, X: np.ndarray, y: np.ndarray, x: np.ndarray, parts: str = "all") -> LocalCurvature:
        """U, ∇U, ∇²_ηη U block by block and, as far as `parts` asks, ∇²_ηθ U and ∇²_θθ U at K points, in one pass
        (`curvature.local_curvature`)."""
        return curvature.local_curvature(self, X, y, x, parts)

    # ------------------------------------------------------------------ interweaving (the centred parameterisation)

    @functools.cached_property
    def _locations(self) -> tuple[tuple[int, int, int], ...]:
        """(factor, effect, coefficient) triples of the coefficients that equal a group effect's column
        (`interweaving.coefficient_locations`)."""
        return interweaving.coefficient_locations(self)

    def centring(self, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        """The coordinates of θ the interweaving move may change on this shard (`interweaving.centring`)."""
        return interweaving.centring(self, X, y)

    def centred_move(
        self, X: np.ndarray, y: np.ndarray, x: np.ndarray, dtheta: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """θ' = θ + dθ with every row's linear predictor unchanged, and U's change (`interweaving.centred_move`)."""
        return interweaving.centred_move(self, X, y, x, dtheta)

    # ------------------------------------------------------------------ checks of the fit (x = (θ, r), reported r)

    def evaluation_x(
        self, X: np.ndarray, y: np.ndarray, draws: np.ndarray, names: Sequence[str], seed: int
    ) -> np.ndarray:
        """(θ, r) (S, d + l) for the groups of these rows from a run's draws (`evaluation.evaluation_x`)."""
        return evaluation.evaluation_x(self, X, y, draws, names, seed)

    def unseen_groups(
        self, X: np.ndarray, names: Sequence[str], text: Mapping[float, str] | None = None
    ) -> list[tuple[str, str]]:
        """(grouping column, label) of the groups of X whose effects the draws do not hold
        (`evaluation.unseen_groups`)."""
        return evaluation.unseen_groups(self, X, names, text)

    def _linear(self, X: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(the rows' linear predictors (n, S), ψ (S, m)) at x = (θ, r) (`evaluation_x`)."""
        index = self._eval_index(X)
        p = self.family.n_coef
        x = np.asarray(x, dtype=np.float64)
        lin = index.linear(x[:, :p])
        for ge, fi, s0 in zip(self.factors, index.factors, self.scale_starts):
            r = x[:, fi.col : fi.col + fi.width].reshape(x.shape[0], fi.G, fi.q)
            if not fi.local:  # a spanning factor: θ holds η, r = M η
                r = apply_scale(scale_at(ge, x[:, s0 : s0 + ge.n_scale], 0).M, r)
            lin += fi.gather(r)
        return lin, x[:, p : self.n_family]

    def log_likelihood(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        """log p(y_j | β, ψ, r) per row and draw, x = (θ, r) (`evaluation_x`)."""
        lin, psi = self._linear(X, x)
        return self.family.eta_log_likelihood(self._eval_index(X).Xf, y, lin, psi)

    def linear_predictor(self, X: np.ndarray, x: np.ndarray) -> np.ndarray:
        """x_jᵀβ (+ offset) + the groups' parts z_jᵀ r per row and draw, x = (θ, r) (`evaluation_x`): (n, K)."""
        return self._linear(X, x)[0]

    def predict_mean(self, X: np.ndarray, x: np.ndarray) -> np.ndarray:
        lin, psi = self._linear(X, x)
        return self.family.eta_mean(self._eval_index(X).Xf, lin, psi)

    def predict_draw(self, X: np.ndarray, x: np.ndarray, u: np.ndarray) -> np.ndarray:
        lin, psi = self._linear(X, x)
        return self.family.eta_draw(self._eval_index(X).Xf, lin, psi, u)

    def smoothness(self, X: np.ndarray, y: np.ndarray) -> float:
        """Not a global bound (the non-centred potential's curvature grows like sd²): the family's bound on its own
        design plus, per factor, its effect columns' Gram bound at sd = 1, plus 1 for ½‖η‖². Tuning uses the
        curvature at the Laplace-marginal mode instead."""
        index = self._index(X)
        extra = sum(float(np.linalg.norm(fi.Z, 2)) ** 2 for fi in index.factors)
        return float(self.family.smoothness(index.Xf, y)) + extra + 1.0
