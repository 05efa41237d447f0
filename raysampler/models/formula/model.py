"""The formula model (`FormulaModel`, `from_formula`) and its binding to the data (`BoundFormula`): the family a
formula names, with `GroupEffects` for its group terms, on the X each site's `Design` builds."""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from ...errors import ArgumentError
from ..contract import DataSpec, Model, ParamBlock
from ..groups import GroupEffects
from .design import Design, _text_names, interaction_labels
from .terms import (
    _CENSORING_FAMILIES,
    _ORDINAL_FAMILIES,
    _PATH,
    Terms,
    _check_levels,
    _design_formula,
    _family,
    _formulae,
    _prior_fields,
    factor_columns,
    read_formula,
    value_label,
)

__all__ = ["BoundFormula", "FormulaModel", "from_formula"]


@dataclass(frozen=True)
class FormulaModel(Model):
    """A model given as a formula (module docstring): `formula` read by formulae, `family` a brms family name
    (`FORMULA_FAMILIES`: gaussian, bernoulli, poisson, binomial, negbinomial, lognormal, student, Gamma, Beta,
    weibull, exponential, zero_inflated_poisson, zero_inflated_negbinomial, hurdle_poisson, hurdle_negbinomial,
    cumulative, cumulative_probit) or a built-in family's, `priors` one prior per kind (`PRIOR_KINDS`: {"b":
    Normal(0, 2.5), "sd": HalfNormal(1), "sigma": ..., "phi": ..., "nu": ..., "shape": ..., "zi": ..., "hu": ...})
    and per coefficient ("b_floor": ..., "Intercept": ...: `coef_priors`), `levels` the order of a categorical
    column's levels where the default (sorted) will not do (the first is the reference). The survival families'
    response may carry brms' right-censoring addition, `time | cens(censored) ~ ...` (`_response_addition`)."""

    formula: str
    family: str = "gaussian"
    priors: Mapping[str, Any] = field(default_factory=dict)
    levels: Any = None
    #: brms' distributional regression `bf(y ~ x, sigma ~ z)`: the right side of the noise sd's own formula,
    #: log σ_j = z_jᵀγ (gaussian family only; `gaussian_sigma.GaussianSigmaRegression`)
    sigma: str | None = None
    #: where a grouping column's effects live (`GroupEffects.placement`: "auto", "local" or "global"), by the
    #: grouping column as the formula names it (`county`, `county:housing` for `(1 | county:housing)`); "auto"
    #: where not given
    placement: Mapping[str, str] | None = None

    reads_tables: ClassVar[bool] = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "family", _family(self.family))
        object.__setattr__(self, "levels", _check_levels(self.levels))
        terms = read_formula(self.formula)
        object.__setattr__(self, "priors", dict(self.priors or {}))
        if self.sigma is not None:  # first: a "sigma" prior means its coefficients' with a sigma formula
            self._check_sigma()
        _prior_fields(self.family, self.priors, terms)
        if len(terms.response) == 2 and self.family != "binomial_regression":
            raise ArgumentError(("model", "family"), "p(successes, trials) is the binomial family's response")
        if self.family == "binomial_regression" and len(terms.response) != 2:
            raise ArgumentError(_PATH, "the binomial family's response is p(successes, trials)")
        if terms.censored is not None and self.family not in _CENSORING_FAMILIES:
            raise ArgumentError(
                ("model", "family"),
                f"cens({terms.censored}): right censoring is the weibull and exponential families' (not {self.family})",
            )
        self._check_placement(terms)
        self.template()  # unknown functions and the like fail here, naming the formula
        from .. import FAMILIES

        object.__setattr__(self, "target_kind", str(FAMILIES[self.family].target_kind))

    @property
    def terms(self) -> Terms:
        """What the formula says; with a `sigma` formula, its variables and categories too (every column read)."""
        terms = read_formula(self.formula)
        if self.sigma is None:
            return terms
        sig = read_formula(self.sigma_formula)
        return dataclasses.replace(
            terms,
            categorical=tuple(dict.fromkeys(terms.categorical + sig.categorical)),
            variables=tuple(sorted(set(terms.variables) | set(sig.variables))),
        )

    @property
    def sigma_formula(self) -> str:
        """The noise sd's formula as formulae reads it: the response, then `sigma`'s right side."""
        rhs = str(self.sigma).strip()
        rhs = rhs.partition("~")[2] if "~" in rhs else rhs
        return f"{read_formula(self.formula).response[0]} ~ {rhs.strip() or '1'}"

    def _check_sigma(self) -> None:
        """`sigma`: a string, for the gaussian family, whose formula has common terms only (no group terms, no
        offset); an ArgumentError at model.sigma otherwise."""
        where = ("model", "sigma")
        if not isinstance(self.sigma, str):
            raise ArgumentError(where, f"sigma must be a formula's right side such as '~ x2', got {self.sigma!r}")
        if self.family != "linear_regression":
            raise ArgumentError(
                where, f"sigma=...: a formula for the noise sd is the gaussian family's, not {self.family}'s"
            )
        try:
            sig = read_formula(self.sigma_formula)
            dm = self.template(None, sigma=True)
        except ArgumentError as exc:
            raise ArgumentError(where, f"sigma {self.sigma!r}: {exc}") from None
        if sig.groups:
            raise ArgumentError(where, f"sigma {self.sigma!r}: group terms in the noise sd's formula are not available")
        if any(getattr(t, "kind", None) == "offset" for t in dm.common.terms.values()):
            raise ArgumentError(where, f"sigma {self.sigma!r}: the noise sd's formula takes no offset")

    def _check_placement(self, terms: Terms) -> None:
        """`placement`: a mapping from the formula's grouping columns to "auto", "local" or "global"."""
        if self.placement is None:
            return
        if not isinstance(self.placement, Mapping):
            raise ArgumentError(
                ("model", "placement"),
                f"placement must map grouping columns to 'auto', 'local' or 'global', got {self.placement!r}",
            )
        groups = [g for g, _, _ in terms.groups]
        for key, value in self.placement.items():
            if key not in groups:
                shown = ", ".join(map(repr, groups)) or "none"
                raise ArgumentError(
                    ("model", "placement", str(key)),
                    f"placement: {key!r} is not a grouping column of the formula (its grouping columns: {shown})",
                )
            if value not in ("auto", "local", "global"):
                raise ArgumentError(
                    ("model", "placement", str(key)),
                    f"placement[{key!r}] must be one of auto, local, global, got {value!r}",
                )
        object.__setattr__(self, "placement", dict(self.placement))

    @property
    def group_effects(self) -> tuple[GroupEffects, ...] | None:
        """The formula's group terms as `GroupEffects` (sd priors from `priors`), None where it has none: as a
        family's `group_effects`, e.g. for splitting a site's file into parts of whole groups."""
        terms = self.terms
        _, sd, cor = _prior_fields(self.family, self.priors, terms)
        effects = []
        for g, intercept, slopes in terms.groups:
            prior = sd.get(g) if isinstance(sd, Mapping) else sd
            kw: dict[str, Any] = {} if prior is None else {"sd_prior": prior}
            if g in terms.correlated:
                kw["correlated"] = True
                lkj = cor.get(g) if isinstance(cor, Mapping) else cor
                if lkj is not None:
                    kw["cor_prior"] = lkj
            if self.placement and g in self.placement:
                kw["placement"] = self.placement[g]
            effects.append(GroupEffects(g, intercept, slopes, **kw))
        return tuple(effects) or None

    @property
    def dim(self) -> int:
        raise ValueError("FormulaModel is not bound: its dimension follows from the data's columns and levels")

    def prior(self) -> Any:
        raise ValueError("FormulaModel is not bound: bind it to the data first")

    def potential(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        raise ValueError("FormulaModel is not bound: bind it to the data first")

    def grad(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        raise ValueError("FormulaModel is not bound: bind it to the data first")

    def hvp(self, X: np.ndarray, y: np.ndarray, x: np.ndarray, v: np.ndarray) -> np.ndarray:
        raise ValueError("FormulaModel is not bound: bind it to the data first")

    def smoothness(self, X: np.ndarray, y: np.ndarray) -> float:
        raise ValueError("FormulaModel is not bound: bind it to the data first")

    # ------------------------------------------------------------------ set-up: the categories' levels

    def category_columns(self, columns: Sequence[str] | None) -> tuple[str, ...]:
        """The columns the formula reads as categories: inside `C(...)`, or in `levels`; an ordinal family's
        response too (its K levels fix the model's size)."""
        named = tuple(c for c, _ in self.levels or ())
        ordinal = self.terms.response[:1] if self.family in _ORDINAL_FAMILIES else ()
        return tuple(dict.fromkeys(self.terms.categorical + named + ordinal))

    def category_values(
        self,
        X: np.ndarray,
        y: np.ndarray,
        columns: Sequence[str] | None,
        levels: Mapping[str, Sequence[str]] | None = None,
    ) -> dict[str, list[Any]]:
        """This shard's distinct values of each category column, and the levels it holds of each interaction
        grouping factor a:b (its pairs' labels, `interaction_labels`; `levels`: the text columns' labels, which
        turn X's label codes back into text): metadata the coordinator joins, no rows."""
        cols = list(columns or ())
        out = {}
        for c in self.category_columns(cols):
            if c in cols:
                out[c] = np.unique(np.asarray(X)[:, cols.index(c)]).tolist()
        for g in self.interactions:
            parts = factor_columns(g)
            if all(c in cols for c in parts):
                raw = np.asarray(X)[:, [cols.index(c) for c in parts]]
                labels = interaction_labels(raw, [_text_names(c, levels) for c in parts])
                out[g] = sorted(set(labels.tolist()))
        return out

    @property
    def interactions(self) -> tuple[str, ...]:
        """The grouping factors that are interactions of columns (a:b, from `(1 | a:b)` or a nesting `(1 | a/b)`)."""
        return tuple(g for g, _, _ in self.terms.groups if len(factor_columns(g)) > 1)

    def _ordered_levels(self, joined: Mapping[str, Sequence[Any]]) -> dict[str, tuple[str, ...]]:
        """Each category column's levels in the design's order: `levels` where given (each checked against what the
        shards hold), else the joined values' order."""
        out = {c: tuple(value_label(v) for v in vals) for c, vals in joined.items()}
        for col, labels in self.levels or ():
            have = out.get(col)
            if have is None:
                raise ArgumentError(("model", "levels", col), f"levels: no shard has a column {col!r}")
            missing = [v for v in labels if v not in have]
            if missing:
                raise ArgumentError(
                    ("model", "levels", col),
                    f"levels[{col!r}]: no shard has the level(s) {', '.join(map(repr, missing))} "
                    f"(the shards have {list(have)})",
                )
            unlisted = [v for v in have if v not in labels]
            if unlisted:
                raise ArgumentError(
                    ("model", "levels", col),
                    f"levels[{col!r}] leaves out {', '.join(map(repr, unlisted))}, which the shards have",
                )
            out[col] = labels
        return out

    def template(self, levels: Mapping[str, Sequence[str]] | None = None, sigma: bool = False) -> Any:
        """formulae's design of a few made-up rows holding every level (never real rows): it fixes the columns,
        their names and the categories' coding, and codes each site's rows (`evaluate_new_data`)."""
        fm = _formulae()
        import pandas as pd

        terms = self.terms
        levels = {k: v for k, v in (levels or {}).items() if k != terms.response[0]}  # the response is not designed
        for c in terms.categorical:
            levels.setdefault(c, ("a", "b"))
        m = max([2, *(len(v) for v in levels.values())])
        frame: dict[str, Any] = {}
        for v in terms.variables:
            if v in levels:
                cats = list(levels[v])
                frame[v] = pd.Categorical([cats[i % len(cats)] for i in range(m)], categories=cats, ordered=True)
            elif v in {c for g, _, _ in terms.groups for c in factor_columns(g)}:
                frame[v] = [f"g{i}" for i in range(m)]
            else:
                frame[v] = np.ones(m)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                formula = self.sigma_formula if sigma else _design_formula(self.formula)
                return fm.design_matrices(formula, pd.DataFrame(frame), na_action="error")
        except Exception as exc:
            raise ArgumentError(_PATH, f"formula {self.formula!r}: {type(exc).__name__}: {exc}") from None

    @property
    def response(self) -> str:
        """The response's column: the left of '~' (the successes of `p(successes, trials)`)."""
        return self.terms.response[0]

    def check_columns(self, columns: Sequence[str] | None) -> tuple[str, ...]:
        """The data's columns, each column the formula reads among them, the response first: else an ArgumentError
        at model.formula naming what is missing (every shard has the data's columns, so before any sampling a run
        whose response or predictor is not a column is refused, rather than failing later or reading another y)."""
        if columns is None:
            raise ArgumentError(_PATH, "a formula names columns, but the data have no column names")
        columns = tuple(columns)
        terms = self.terms
        if terms.response[0] not in columns:
            raise ArgumentError(
                _PATH,
                f"formula: the response {terms.response[0]!r} is not a column of the data; the columns are "
                f"{list(columns)} (a formula reads its response from the data's columns, by name)",
            )
        absent = [v for v in terms.variables if v not in columns]
        if terms.censored is not None and terms.censored not in columns:
            absent.append(terms.censored)
        if absent:
            names = ", ".join(map(repr, absent))
            raise ArgumentError(_PATH, f"formula: {names} is not a column of the data; the columns are {list(columns)}")
        return columns

    # ------------------------------------------------------------------ bind

    def bind(self, spec: DataSpec) -> Model:
        """The model bound to the data's columns and the shards' joined category values (`DataSpec.categories`)."""
        columns = self.check_columns(spec.columns)
        terms = self.terms
        joined = dict(spec.categories or ())
        text = spec.text_levels()
        # an interaction factor's levels: the pairs the shards reported (`category_values`), kept out of the design
        inter = {g: tuple(map(str, joined.pop(g, None) or self._pairs(g, joined, text))) for g in self.interactions}
        groups = {c for g, _, _ in terms.groups for c in factor_columns(g)}
        for v in terms.variables:  # a text column the formula reads is a category (as brms reads a character column)
            if v in text and v not in groups:
                joined[v] = text[v]  # every site's labels, joined at set-up (`DataSpec.levels`)
        levels = self._ordered_levels(joined)
        named = tuple((c, text[c]) for c in sorted(groups) if c in text)
        design = Design.of(self, columns, levels, tuple(c for c in text if c in levels), named)
        spec = dataclasses.replace(spec, levels=tuple({**text, **inter}.items()) or None)
        return BoundFormula(self, design, design.bind_family(self, spec))

    def _pairs(self, g: str, joined: Mapping[str, Sequence[Any]], text: Mapping[str, Sequence[str]]) -> tuple[str, ...]:
        """An interaction factor's levels where the shards did not report them (a spec built by hand): every
        combination of its columns' levels, each column's from its text labels or its reported values; an
        ArgumentError where a column's levels are unknown."""
        import itertools

        per = []
        for c in factor_columns(g):
            have = text.get(c, joined.get(c))
            if have is None:
                raise ArgumentError(
                    _PATH, f"group term (1 | {g}): the levels of {c!r} are unknown (the shards report them at set-up)"
                )
            per.append([value_label(v) for v in have])
        return tuple(sorted("_".join(p) for p in itertools.product(*per)))


def _forward(name: str) -> Callable[..., Any]:
    def method(self: BoundFormula, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.model, name)(*args, **kwargs)

    method.__name__ = name
    method.__doc__ = f"The family's `{name}` (on the X the design built)."
    return method


@dataclass(frozen=True)
class BoundFormula(Model):
    """A formula model bound to the data: the built-in family (`model`, with group effects where the formula has
    group terms) on the X each site's `design` builds from its own rows. Every method of the model contract is the
    family's, except `shard_data`, which builds the design first; other attributes are the family's too."""

    source: FormulaModel
    design: Design
    model: Model

    reads_tables: ClassVar[bool] = True

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("source", "design", "model"):
            raise AttributeError(name)
        return getattr(self.model, name)

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", str(getattr(self.model, "name", self.source.family)))
        object.__setattr__(self, "target_kind", str(self.model.target_kind))

    @property
    def dim(self) -> int:
        return int(self.model.dim)

    @property
    def columns(self) -> tuple[str, ...]:
        """The data's columns, as every shard's table holds them (the family's own X columns are the design's,
        `design.x_columns`): what a check of a shard's table against the run's model compares."""
        return self.design.columns

    def prior(self) -> Any:
        return self.model.prior()

    def potential(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        return self.model.potential(X, y, x)

    def grad(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        return self.model.grad(X, y, x)

    def hvp(self, X: np.ndarray, y: np.ndarray, x: np.ndarray, v: np.ndarray) -> np.ndarray:
        return self.model.hvp(X, y, x, v)

    def smoothness(self, X: np.ndarray, y: np.ndarray) -> float:
        return float(self.model.smoothness(X, y))

    def bind(self, spec: DataSpec) -> Model:
        return self

    def shard_data(self, X: np.ndarray, y: np.ndarray, rows: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """The family's (X, y) for a shard: the formula's design of its rows (`Design.build`), then the family's own
        `shard_data`."""
        Xd, yd = self.design.build(X, y)
        return self.model.shard_data(Xd, yd, rows)

    def validate(self, X: np.ndarray, y: np.ndarray, argname: str = "data") -> None:
        """The family's checks of the design's (X, y); a response outside the family's support (a Gamma's y ≤ 0) is
        refused naming the shard and the response's column."""
        family = getattr(self.model, "family", self.model)  # a HierarchicalGLM holds the family
        check = getattr(family, "check_response", None)
        if check is not None:
            check(np.asarray(y, dtype=np.float64), argname, self.design.response[0])
        self.model.validate(X, y, argname)

    def new_rows(self, columns: Mapping[str, Any], argname: str = "X") -> np.ndarray:
        """New rows given by column name as the family's checks read them (`shard_data`'s X): the design built by
        name (`Design.new_rows`; no response needed), then the family's own `shard_data`."""
        text = {g for g, _ in getattr(self.model, "levels", None) or ()} if self.design.groups else set()
        Xd = self.design.new_rows(columns, text, argname)
        return np.asarray(self.model.shard_data(Xd, np.zeros(Xd.shape[0]), None)[0], dtype=np.float64)

    def param_blocks(self) -> tuple[ParamBlock, ...]:
        return tuple(self.model.param_blocks())

    def __repr__(self) -> str:
        return f"BoundFormula({self.source!r}, columns={list(self.design.x_columns)})"


_OWN = {
    "bind",
    "shard_data",
    "param_blocks",
    "dim",
    "prior",
    "potential",
    "grad",
    "hvp",
    "smoothness",
    "new_rows",
    "validate",
}
for _name, _value in list(vars(Model).items()):
    if callable(_value) and not _name.startswith("_") and _name not in _OWN:
        setattr(BoundFormula, _name, _forward(_name))


def from_formula(
    formula: str,
    family: str = "gaussian",
    priors: Mapping[str, Any] | None = None,
    *,
    levels: Any = None,
    sigma: str | None = None,
    placement: Mapping[str, str] | None = None,
) -> FormulaModel:
    """A model written as a formula (brms' and bambi's syntax, read by formulae): e.g.
    `from_formula("y ~ x1 + C(region) + (1 + x1 | hospital)", family="bernoulli", priors={"b": Normal(0, 2.5)})`.
    `placement={"housing": "global"}` forces where a grouping column's effects live (default: global where its
    levels occur at several shards). See `FormulaModel`; its shards name no target or feature columns
    (`rs.shard(["site0.parquet", ...])`)."""
    return FormulaModel(formula, family, dict(priors or {}), levels, sigma, placement)
