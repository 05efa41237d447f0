"""How a site turns its rows into a family's X (`Design`): the formula's template coded against the run's joined
category levels, built at each site from its own rows (`Design.build`) or for new rows given by column name
(`Design.new_rows`, predictions); and the labels of interaction grouping factors (`interaction_labels`)."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from ...errors import ArgumentError
from ...shards import label_code
from ..coef_priors import coefficient_keys, compose
from ..contract import DataSpec, Model
from ..groups import GroupEffects
from .terms import (
    _CENSORED,
    _OFFSET,
    _ORDINAL_FAMILIES,
    _PATH,
    _TRIALS,
    Terms,
    _prior_fields,
    factor_columns,
    value_label,
)


class FormulaModel(Protocol):
    """What a `Design` reads of its `model.FormulaModel` (model.py imports this module, not back; see there for each
    member's meaning)."""

    @property
    def formula(self) -> str: ...

    @property
    def family(self) -> str: ...

    @property
    def priors(self) -> Mapping[str, Any]: ...

    @property
    def sigma(self) -> str | None: ...

    @property
    def sigma_formula(self) -> str: ...

    @property
    def target_kind(self) -> str: ...

    @property
    def terms(self) -> Terms: ...

    @property
    def group_effects(self) -> tuple[GroupEffects, ...] | None: ...

    def template(self, levels: Mapping[str, Sequence[str]] | None = None, sigma: bool = False) -> Any: ...


@dataclass(frozen=True)
class Design:
    """How a site turns its rows into the family's X: the formula, the data's columns, the categories' levels (in
    the design's order), and the layout of the X it builds: the common design's columns (`coef`), the grouping
    columns' raw values, then the offset or trials column."""

    formula: str
    columns: tuple[str, ...]
    levels: tuple[tuple[str, tuple[str, ...]], ...]
    coef: tuple[str, ...]
    offset: bool
    response: tuple[str, ...]
    groups: tuple[tuple[str, bool, tuple[str, ...]], ...]
    model: FormulaModel = field(repr=False, compare=False)
    #: the category columns that hold text: X holds their labels' `label_code`s (`raysampler.shards`)
    text: tuple[str, ...] = ()
    #: the right-censoring indicator's column (`cens(...)`), the family's last X column; None without one
    censored: str | None = None
    #: whether the design has its intercept column (not for an ordinal family, whose thresholds hold it)
    intercept: bool = True
    #: the text labels of the grouping factors' columns that hold text, (column, labels) pairs: an interaction
    #: factor a:b names its levels by its columns' labels (`interaction_labels`)
    group_text: tuple[tuple[str, tuple[str, ...]], ...] = ()
    #: with a `sigma` formula: its design's columns (`SIGMA_PREFIX` + label), after the common design's in X
    sigma: tuple[str, ...] = ()

    @classmethod
    def of(
        cls,
        model: FormulaModel,
        columns: tuple[str, ...],
        levels: Mapping[str, tuple[str, ...]],
        text: tuple[str, ...] = (),
        group_text: tuple[tuple[str, tuple[str, ...]], ...] = (),
    ) -> Design:
        terms = model.terms
        dm = model.template(levels)
        labels, offset = [], False
        ordinal = model.family in _ORDINAL_FAMILIES
        if ordinal and terms.response[0] not in levels:
            raise ArgumentError(_PATH, f"the response {terms.response[0]!r} of an ordinal model has no levels")
        for term in dm.common.terms.values():
            if getattr(term, "kind", None) == "offset":
                offset = True
                continue
            if ordinal and getattr(term, "kind", None) == "intercept":
                continue
            labels += ["(Intercept)" if lab == "Intercept" else lab for lab in term.labels]
        if offset and model.family not in (
            "poisson_regression",
            "negative_binomial_regression",
            "zero_inflated_poisson_regression",
            "zero_inflated_negative_binomial_regression",
            "hurdle_poisson_regression",
            "hurdle_negative_binomial_regression",
        ):
            raise ArgumentError(_PATH, f"offset(...): the {model.family} family takes no offset")
        for g, _, slopes in terms.groups:
            for s in slopes:
                if s not in labels:
                    raise ArgumentError(
                        _PATH,
                        f"group term ({s} | {g}): the slope {s!r} must also be a common term (write "
                        f"'... + {s} + (1 + {s} | {g})')",
                    )
        sigma: list[str] = []
        if model.sigma is not None:
            for term in model.template(levels, sigma=True).common.terms.values():
                sigma += [SIGMA_PREFIX + ("(Intercept)" if lab == "Intercept" else lab) for lab in term.labels]
        return cls(
            model.formula,
            columns,
            tuple(levels.items()),
            tuple(labels),
            offset,
            terms.response,
            terms.groups,
            model,
            text,
            terms.censored,
            not ordinal,
            group_text,
            tuple(sigma),
        )

    @property
    def x_columns(self) -> tuple[str, ...]:
        """The names of the family's X columns."""
        extra: tuple[str, ...] = (_OFFSET,) if self.offset else (_TRIALS,) if len(self.response) == 2 else ()
        extra += (_CENSORED,) if self.censored is not None else ()
        return self.coef + self.sigma + tuple(g for g, _, _ in self.groups) + extra

    def bind_family(self, model: FormulaModel, spec: DataSpec) -> Model:
        """The built-in family (with `GroupEffects` for the group terms) bound to the X `build` makes."""
        from .. import get_model

        fields = _prior_fields(model.family, model.priors, model.terms)[0]
        effects = model.group_effects
        if self.offset:
            fields["offset"] = _OFFSET
        if len(self.response) == 2:
            fields["trials"] = _TRIALS
        if self.censored is not None:
            fields["censored"] = _CENSORED
        if not self.intercept:  # an ordinal family: K from the response's levels
            fields["n_categories"] = len(dict(self.levels)[self.response[0]])
        extra: dict[str, Any] = {"group_effects": effects} if effects else {}
        make: Callable[..., Model] = functools.partial(get_model, model.family)
        if self.sigma:  # distributional: the "sigma" prior is its coefficients' (a coefficient prior)
            from ..gaussian_sigma import GaussianSigmaRegression

            extra |= {"sigma_columns": self.sigma, "sigma_coef_prior": fields.pop("sigma_prior", None)}
            make = GaussianSigmaRegression
        family = make(**fields, **extra)
        per_coef = coefficient_keys(model.priors, not self.intercept)
        if per_coef:  # coefficients' own priors: the "b" prior (or the family's default) with theirs in their places
            base = getattr(family, "coef_prior")  # noqa: B009  (every formula family has one; `Model` does not say so)
            fields["coef_prior"] = compose(base, model.priors, per_coef, self.coef)
            family = make(**fields, **extra)
        cols = self.x_columns
        text = spec.text_levels()  # a grouping column's text labels name its effects as given
        labels = tuple((g, text[g]) for g, _, _ in self.groups if g in text) or None
        return family.bind(
            DataSpec(len(cols), spec.n_classes, spec.n_rows, cols, levels=labels, spanning=spec.spanning)
        )

    @property
    def predictors(self) -> tuple[str, ...]:
        """The columns new rows must hold to be predicted: every column the formula reads except the response
        (binomial's trials stay: its expected value is trials · p)."""
        return tuple(v for v in self.model.terms.variables if v != self.response[0])

    def build(self, X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The family's (X, y) from a shard's table (X: every column of the data, `columns`, the response among them;
        the shard's own y is not read): formulae codes the rows against the template's levels."""
        X = np.asarray(X)
        cols = list(self.columns)
        levels = dict(self.levels)
        values: dict[str, np.ndarray] = {}
        for v in self.model.terms.variables:
            if v not in cols:
                continue
            raw = X[:, cols.index(v)]
            if v in levels:
                if v in self.text:  # label codes back to the labels
                    named = {label_code(u): u for u in levels[v]}
                    values[v] = np.array([named.get(u, value_label(u)) for u in raw.tolist()], dtype=object)
                else:
                    values[v] = np.array([value_label(u) for u in raw.tolist()], dtype=object)
            else:
                values[v] = np.asarray(raw, dtype=np.float64)
        parts, extra = self._common(values, X.shape[0])
        group_cols = [self._group_column(X, g)[:, None] for g, _, _ in self.groups]
        if len(self.response) == 2:
            succ, trials = (np.asarray(X[:, cols.index(c)], dtype=np.float64) for c in self.response)
            extra, target = trials[:, None], succ
        elif not self.intercept:  # ordered categories, coded 1..K in the levels' order
            order = {label: k + 1.0 for k, label in enumerate(levels[self.response[0]])}
            target = np.array([order.get(u, np.nan) for u in values[self.response[0]].tolist()])
        else:  # the response is a column (`FormulaModel.check_columns`): the shard's own y is not read
            target = np.asarray(X[:, cols.index(self.response[0])], dtype=np.float64)
        if self.censored is not None:
            extra = np.asarray(X[:, cols.index(self.censored)], dtype=np.float64)[:, None]
        out = np.hstack([*parts, *group_cols, *([] if extra is None else [extra])])
        if self.model.target_kind == "multiclass":
            target = target.astype(np.int64)
        return np.ascontiguousarray(out), np.ascontiguousarray(target)  # y's memory layout changes BLAS' sums

    def _group_column(self, X: np.ndarray, g: str) -> np.ndarray:
        """Grouping factor g's labels in a shard's X (n,): the column itself, or for an interaction a:b the
        `label_code` of each row's pair label "<a's label>_<b's label>" (brms' naming of an a:b level)."""
        cols = list(self.columns)
        parts = factor_columns(g)
        if len(parts) == 1:
            return np.asarray(X[:, cols.index(g)], dtype=np.float64)
        text = dict(self.group_text)
        raw = np.asarray(X[:, [cols.index(c) for c in parts]], dtype=np.float64)
        labels = interaction_labels(raw, [_text_names(c, text) for c in parts])
        uniq, inverse = np.unique(labels.astype(str), return_inverse=True)
        return np.array([label_code(u) for u in uniq.tolist()], dtype=np.float64)[inverse.reshape(-1)]

    def new_rows(self, columns: Mapping[str, Any], text_groups: Collection[str], argname: str) -> np.ndarray:
        """The family's X for new rows given by column name (predictions at rows the run never saw): the columns the
        formula reads but its response (`predictors`), in any order, others ignored. A category's values are
        matched to the run's levels by label (a level set-up never saw is an error naming it); a grouping column's
        labels are coded as the run's were (text by `label_code`, so a known group is found by its label and a new
        one is new, whatever its type). ArgumentError naming `argname` and the column for what cannot be read."""
        missing = [v for v in self.predictors if v not in columns]
        if missing:
            response = f" (the response {self.response[0]!r} is not needed)" if self.response[0] not in columns else ""
            raise ArgumentError(
                (argname, "columns"),
                f"{argname} has no column(s) {', '.join(map(repr, missing))}, which the formula {self.formula!r} "
                f"reads{response}; it has {[str(c) for c in columns]}",
            )
        arrays = {v: np.asarray(columns[v], dtype=object) for v in self.predictors}
        lengths = {v: a.shape for v, a in arrays.items()}
        bad = [v for v, shape in lengths.items() if len(shape) != 1]
        if bad:
            raise ArgumentError(
                (argname,), f"{argname}: column {bad[0]!r} must be one value per row, got {lengths[bad[0]]}"
            )
        if len({shape[0] for shape in lengths.values()}) > 1:
            raise ArgumentError((argname,), f"{argname}: the columns have different lengths: {lengths}")
        n = next(iter(lengths.values()))[0] if lengths else 0
        levels = dict(self.levels)
        groups = [g for g, _, _ in self.groups]
        values: dict[str, np.ndarray] = {}
        for g in groups:  # an interaction's labels from its columns' labels as given (text, or numbers as named)
            if len(factor_columns(g)) > 1:
                rows = zip(*(arrays[c].tolist() for c in factor_columns(g)))
                values[g] = np.array(
                    [label_code("_".join(u if isinstance(u, str) else value_label(u) for u in row)) for row in rows],
                    dtype=np.float64,
                ).reshape(n)
        parts_of = {c for g in groups for c in factor_columns(g)}  # an interaction's columns hold labels too
        for v, raw in arrays.items():
            if v in levels:
                values[v] = np.array([value_label(u) for u in raw.tolist()], dtype=object)
            elif v in groups or v in parts_of:
                values[v] = _group_codes(raw, v in text_groups, v, argname)
            else:
                values[v] = _numbers(raw, v, argname)
        try:
            parts, extra = self._common(values, n)
        except ValueError as exc:
            raise ArgumentError((argname,), f"{argname}: {exc}") from None
        group_cols = [values[g][:, None] for g in groups]
        if len(self.response) == 2:
            extra = values[self.response[1]][:, None]
        if self.censored is not None:  # predictions are of the event time: the indicator (if given) enters none
            extra = np.zeros((n, 1))
            if self.censored in columns:
                extra[:, 0] = _numbers(
                    np.asarray(columns[self.censored], dtype=object).reshape(n), self.censored, argname
                )
        out = np.hstack([*parts, *group_cols, *([] if extra is None else [extra])])
        return np.ascontiguousarray(out, dtype=np.float64)

    def _common(self, values: Mapping[str, np.ndarray], n: int) -> tuple[list[np.ndarray], np.ndarray | None]:
        """The common design's blocks of n rows (the categories' values as labels, numbers as float64) and the offset
        column, if the formula has one; ValueError naming a category's level that set-up did not see."""
        import pandas as pd

        levels = dict(self.levels)
        for v, labels in values.items():
            if v in levels:
                unknown = sorted(set(labels.tolist()) - set(levels[v]))
                if unknown:
                    raise ValueError(
                        f"column {v!r} has level(s) {unknown} that set-up did not see (the run's: {list(levels[v])})"
                    )
        data = pd.DataFrame(dict(values), index=pd.RangeIndex(n))  # coded against the template's levels
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            common = _template(self).common.evaluate_new_data(data)
        parts, extra = [], None
        for name, term in common.terms.items():
            if not self.intercept and getattr(term, "kind", None) == "intercept":
                continue
            block = np.asarray(common[name], dtype=np.float64).reshape(n, -1)
            if getattr(term, "kind", None) == "offset":
                extra = block[:, :1]
            else:
                parts.append(block)
        if self.sigma:  # the noise sd's design, after the mean's (`x_columns`)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                sig = _template(self, sigma=True).common.evaluate_new_data(data)
            parts += [np.asarray(sig[name], dtype=np.float64).reshape(n, -1) for name in sig.terms]
        return parts, extra


def _text_names(column: str, levels: Any) -> dict[float, str] | None:
    """A text column's `label_code` → label (None for a column of numbers); `levels`: (column, labels) pairs or a
    mapping."""
    labels = dict(levels or ()).get(column)
    return None if labels is None else {label_code(v): v for v in labels}


def interaction_labels(raw: np.ndarray, names: Sequence[Mapping[float, str] | None]) -> np.ndarray:
    """The level of an interaction grouping factor a:b at each row: its columns' labels joined by "_" (brms' names:
    county "Aitkin" and housing 1 → "Aitkin_1"). `raw` (n, k) holds the columns as X does (text as `label_code`s,
    `names[i]` turning column i's codes back into text; None for numbers, named by `value_label`). One label per
    distinct pair: O(n log n), whatever the number of groups."""
    if raw.shape[0] == 0:
        return np.empty(0, dtype=object)
    uniq, inverse = np.unique(np.asarray(raw, dtype=np.float64), axis=0, return_inverse=True)
    labels = [
        "_".join(
            nm[float(v)] if nm is not None and float(v) in nm else value_label(float(v)) for v, nm in zip(row, names)
        )
        for row in uniq.tolist()
    ]
    return np.array(labels, dtype=object)[inverse.reshape(-1)]


def _numbers(raw: np.ndarray, column: str, argname: str) -> np.ndarray:
    """A numeric column of new rows as float64; ArgumentError naming the column if a value is not a finite number."""
    try:
        out = np.asarray(raw.tolist(), dtype=np.float64)
    except (TypeError, ValueError):
        example = next((u for u in raw.tolist() if not isinstance(u, (int, float, np.number))), raw[0])
        raise ArgumentError(
            (argname,), f"{argname}: column {column!r} must hold numbers (the formula reads it as one), got {example!r}"
        ) from None
    if not np.isfinite(out).all():
        raise ArgumentError((argname,), f"{argname}: column {column!r} contains NaN or infinite values")
    return out


def _group_codes(raw: np.ndarray, text: bool, column: str, argname: str) -> np.ndarray:
    """A grouping column's labels in new rows as the run's X holds them: where the run's labels were text, each
    label's `label_code` (a number is read as its text, 7 as "7"); where they were numbers, the numbers (a text label
    that is not a number is a group the run cannot have seen: its `label_code`)."""
    out = np.empty(raw.shape[0], dtype=np.float64)
    seen: dict[Any, float] = {}
    for i, u in enumerate(raw.tolist()):
        code = seen.get(u)
        if code is None:
            if isinstance(u, str):
                try:
                    code = label_code(u) if text else float(u)
                except ValueError:
                    code = label_code(u)
                if not np.isfinite(code):  # "nan", "inf": text, not a number
                    code = label_code(u)
            elif isinstance(u, (int, float, np.number)) and not isinstance(u, bool) and np.isfinite(u):
                code = label_code(value_label(u)) if text else float(u)
            else:
                raise ArgumentError(
                    (argname,), f"{argname}: column {column!r} holds group labels (text or numbers), got {u!r}"
                )
            seen[u] = code
        out[i] = code
    return out


_TEMPLATES: dict[tuple[str, tuple[Any, ...]], Any] = {}
#: the noise sd formula's columns in X are named by this and their label (their coefficients `b_sigma[<label>]`)
SIGMA_PREFIX = "sigma_"


def _template(design: Design, sigma: bool = False) -> Any:
    """The design's formulae template (with `sigma`: its noise sd formula's), made once per process (formulae's
    objects are not sent between processes)."""
    key = (design.model.sigma_formula if sigma else design.formula, design.levels)
    dm = _TEMPLATES.get(key)
    if dm is None:
        dm = _TEMPLATES[key] = design.model.template(dict(design.levels), sigma=sigma)
    return dm
