"""Models written as formulas: `from_formula("y ~ x1 + C(region) + (1 + x1 | hospital)", family="bernoulli")`.

The formula is read by `formulae` (bambi's formula library, which knows brms' group terms); nothing here parses it.
A `FormulaModel` maps it onto the built-in families and `GroupEffects`:

- the common terms (intercept, numbers, categories, interactions, `I(...)`, `offset(...)`) make the coefficient
  design; an `offset(...)` term becomes the family's offset; `p(successes, trials)` on the left the binomial's trials;
  `y | cens(censored)` on the left the survival families' censoring indicator (taken off before formulae reads it);
- each group term `(1 + x | g)` becomes `GroupEffects("g", intercept=True, slopes=("x",), correlated=True)` (its
  slopes must be columns of the common design, as in brms' usual `y ~ x + (1 + x | g)`). As in brms, the effects of
  one term written with `|` are correlated (an LKJ prior on their correlation) and those written with `||`, or in
  separate terms `(1 | g) + (0 + x | g)`, are not. formulae reads both bars alike, so `_bars` notes which terms
  had two before formulae parses the formula with one.

Where the rows are. The design matrix is built at each site from its own rows (`BoundFormula.shard_data`); the
driver and the service never see a row. What must agree across sites is the coding of categories: at set-up every
shard reports the distinct values of the columns the formula reads as categories (`category_values`: metadata, no
rows), the coordinator joins them (`join_categories`), and every site codes its rows against that union, in a fixed
order (numbers ascending, text sorted, or the order `levels=` gives; the first level is the reference). A level
named in `levels=` that no shard has is an error naming it.

formulae's stateful transforms (`center`, `scale`, `standardize`, splines `bs`/`cr`/`cc`/`tp`, `poly`) learn from
the rows they see (means, quantile knots); at a site that is the site's rows only, so the design would differ
between sites: they are refused, naming the term.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import warnings
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from ..errors import ArgumentError
from ..shards import label_code
from .coef_priors import coefficient_keys, compose
from .contract import DataSpec, Model, ParamBlock
from .groups import GroupEffects, group_label

__all__ = ["FORMULA_FAMILIES", "BoundFormula", "FormulaModel", "from_formula", "join_categories"]

_PATH = ("model", "formula")
#: brms' family names → the built-in family (registry name); the registry's own names are accepted too
FORMULA_FAMILIES: dict[str, str] = {
    "gaussian": "linear_regression",
    "bernoulli": "logistic_regression",
    "poisson": "poisson_regression",
    "binomial": "binomial_regression",
    "negbinomial": "negative_binomial_regression",
    "lognormal": "lognormal_regression",
    "student": "student_t_regression",
    "Gamma": "gamma_regression",
    "Beta": "beta_regression",
    "weibull": "weibull_regression",
    "exponential": "exponential_regression",
    "zero_inflated_poisson": "zero_inflated_poisson_regression",
    "zero_inflated_negbinomial": "zero_inflated_negative_binomial_regression",
    "cumulative": "cumulative_regression",
    "cumulative_probit": "cumulative_probit_regression",
}
#: the kinds of prior a formula model takes (`priors=`), one name per kind, as brms' prior classes: coefficients
#: ("b"), group-effect sds ("sd", one prior or one per grouping column), the correlations of a term's effects ("cor",
#: an LKJ, one or one per grouping column), the noise sd ("sigma": gaussian, lognormal, student), the negative
#: binomial's (and its zero-inflated one's) dispersion and the Beta family's precision ("phi"), the Student-t's
#: degrees of freedom ("nu"), the Gamma and Weibull families' shape ("shape"), the zero-inflation probability ("zi"),
#: an ordinal model's first threshold ("Intercept") and the gaps between its thresholds ("delta")
PRIOR_KINDS = ("b", "sd", "cor", "sigma", "phi", "nu", "shape", "zi", "Intercept", "delta")
_OFFSET = "(offset)"
_TRIALS = "(trials)"
_CENSORED = "(censored)"
#: the families whose response takes brms' censoring addition `y | cens(censored) ~ ...`
_CENSORING_FAMILIES = ("weibull_regression", "exponential_regression")
#: the ordinal families: the response is read as ordered categories (its levels joined over the shards at set-up, in
#: the order `levels=` gives or sorted), coded 1..K, and the design has no intercept (the thresholds hold it)
_ORDINAL_FAMILIES = ("cumulative_regression", "cumulative_probit_regression")


def _formulae() -> Any:
    try:
        import formulae
    except ImportError:  # a dependency: only a broken install lacks it
        raise ImportError("formula models need the package 'formulae' (pip install formulae)") from None
    return formulae


def _family(name: str) -> str:
    from . import FAMILIES

    fam = FORMULA_FAMILIES.get(name, name)
    if fam not in FORMULA_FAMILIES.values() or fam not in FAMILIES:
        choices = ", ".join([*FORMULA_FAMILIES, *FORMULA_FAMILIES.values()])
        raise ArgumentError(("model", "family"), f"a formula's family must be one of {choices}; got {name!r}")
    return fam


@dataclass(frozen=True)
class Terms:
    """What a formula says, read once by formulae: the response's variables (one, or successes and trials), the
    variables read as categories (inside `C(...)`), each group term's (grouping column, intercept, slope terms),
    and every variable the formula reads."""

    response: tuple[str, ...]
    categorical: tuple[str, ...]
    groups: tuple[tuple[str, bool, tuple[str, ...]], ...]
    variables: tuple[str, ...]
    #: the grouping columns whose effects are correlated: one term with `|` and two effects or more (brms' default)
    correlated: tuple[str, ...] = ()
    #: the column of the right-censoring indicator, from brms' addition `y | cens(censored) ~ ...` (None: none)
    censored: str | None = None


_CENS = re.compile(r"^\s*cens\(\s*([A-Za-z_.][A-Za-z0-9_.]*)\s*\)\s*$")


def _response_addition(formula: str) -> tuple[str, str | None]:
    """The formula without brms' response addition, and the column `cens(column)` names there (None without one):
    `time | cens(censored) ~ age` → ("time ~ age", "censored"). formulae does not read additions, so they are taken
    off before it parses the formula; any addition but `cens(...)` is an ArgumentError naming it."""
    lhs, sep, rhs = formula.partition("~")
    depth, bar = 0, -1
    for j, c in enumerate(lhs):
        depth += (c == "(") - (c == ")")
        if c == "|" and depth == 0:
            bar = j
            break
    if not sep or bar < 0:
        return formula, None
    addition = lhs[bar + 1 :]
    found = _CENS.match(addition)
    if found is None:
        raise ArgumentError(
            _PATH,
            f"formula {formula!r}: the response's addition {addition.strip()!r} is not available; the one addition "
            "is right censoring, 'y | cens(censored) ~ ...' with a column of 0 (event observed) and 1 (censored), for "
            "the weibull and exponential families",
        )
    return f"{lhs[:bar].rstrip()} ~{rhs}", found.group(1)


def _design_formula(formula: str) -> str:
    """The formula as formulae reads it: no response addition, every group term's `||` written `|`."""
    return _bars(_response_addition(formula)[0])[0]


def _bars(formula: str) -> tuple[str, list[tuple[str, bool, str]]]:
    """The formula with every group term's `||` written `|` (formulae reads only one bar), and each group term's
    (grouping expression, written with `||`, the term as written), in order: what formulae's parse does not keep."""
    terms: list[tuple[str, bool, str]] = []
    out: list[str] = []  # output characters
    opened: list[int] = []  # for each open parenthesis, where its text starts in `out`
    i = 0
    while i < len(formula):
        ch = formula[i]
        if ch == "(":
            opened.append(len(out) + 1)
        elif ch == ")" and opened:
            start = opened.pop()
            inner = "".join(out[start:])
            depth, bar = 0, -1
            for j, c in enumerate(inner):  # the term's own bar, outside any call in it
                depth += (c == "(") - (c == ")")
                if c == "|" and depth == 0:
                    bar = j
                    break
            if bar >= 0:
                double = inner[bar + 1 : bar + 2] == "|"
                terms.append((inner[bar + (2 if double else 1) :].strip(), double, f"({inner.strip()})"))
                if double:
                    out[start:] = list(inner[: bar + 1] + inner[bar + 2 :])
        out.append(ch)
        i += 1
    return "".join(out), terms


def read_formula(formula: str) -> Terms:
    """`Terms` of a formula (formulae's parse, once per formula: `Terms` is frozen); an ArgumentError at
    model.formula for what cannot be used."""
    if not isinstance(formula, str) or "~" not in formula:
        raise ArgumentError(_PATH, f"formula must be a string 'response ~ terms', got {formula!r}")
    return _read_formula(formula)


@functools.lru_cache(maxsize=256)
def _read_formula(formula: str) -> Terms:
    fm = _formulae()
    plain, censored = _response_addition(formula)
    one_bar, bars = _bars(plain)
    for expr, _, as_written in bars:  # checked as written, before formulae expands a nesting
        if not _FACTOR.match(expr):
            raise ArgumentError(_PATH, _unsupported_factor([(expr, False, as_written)], expr))
    try:
        desc = fm.model_description(one_bar)
    except Exception as exc:  # formulae's parse and resolve errors
        raise ArgumentError(_PATH, f"formula {formula!r} cannot be read: {exc}") from None
    if desc.response is None:
        raise ArgumentError(_PATH, f"formula {formula!r} has no response (the left of '~')")
    stateful = {k for k, v in fm.transforms.TRANSFORMS.items() if getattr(v, "__stateful_transform__", False)}
    categorical: list[str] = []

    def calls(term: Any) -> list[Any]:
        return [c for c in getattr(term, "components", ()) if type(c).__name__ == "Call"]

    common = [t for t in desc.terms if type(t).__name__ != "GroupSpecificTerm"]
    grouped = [t for t in desc.terms if type(t).__name__ == "GroupSpecificTerm"]
    for term in common + [g.expr for g in grouped]:
        for call in calls(term):
            name = str(call.call.callee)
            if name in stateful:
                raise ArgumentError(
                    _PATH,
                    f"formula term {call.name} learns from the rows it sees ({name}: means, scales or knots); at each "
                    "site it would see that site's rows only, so the sites' designs would differ. Compute the "
                    "column before sharding, or give the transformed values as a column",
                )
            if name == "C":
                categorical.extend(sorted(v for v in call.var_names if v))
    response_term = desc.response.term
    rcalls = calls(response_term)
    if rcalls and str(rcalls[0].call.callee) in ("p", "prop", "proportion"):
        args = [str(getattr(a, "name", "")) for a in rcalls[0].call.args]
        if len(args) != 2 or not all(args):
            raise ArgumentError(_PATH, f"{rcalls[0].name}: the response p(successes, trials) names two columns")
        response = tuple(args)
    elif not rcalls and len(response_term.var_names) == 1:
        response = (next(iter(response_term.var_names)),)
    else:
        raise ArgumentError(
            _PATH, f"the response {response_term} must be a column, or p(successes, trials) for the binomial family"
        )
    groups = []
    for g in grouped:
        parts = getattr(g.factor, "components", ())
        if calls(g.factor) or not parts or not all(type(c).__name__ == "Variable" for c in parts):
            raise ArgumentError(_PATH, _unsupported_factor(bars, str(sorted(g.factor.var_names))))
        intercept = type(g.expr).__name__ == "Intercept"
        name = ":".join(str(c.name) for c in parts)  # a column, or an interaction a:b (a nesting's inner factor)
        groups.append((name, intercept, () if intercept else (str(g.expr.name),)))
    merged: dict[str, tuple[bool, list[str]]] = {}
    for name, intercept, slopes in groups:
        has, slist = merged.setdefault(name, (False, []))
        merged[name] = (has or intercept, slist + [s for s in slopes if s not in slist])
    for name, (_, slope_list) in merged.items():
        for s in slope_list:
            if s.startswith("C(") or ":" in s:
                raise ArgumentError(_PATH, f"group term ({s} | {name}): varying slopes must be numeric columns")
    variables = sorted(v for v in desc.var_names if v)
    written = {name: [double for expr, double, _ in bars if name in _expand_factor(expr)] for name in merged}
    correlated = tuple(
        name
        for name, (has, slope_list) in merged.items()
        if written[name] == [False] and int(has) + len(slope_list) >= 2  # one term, one bar, two effects or more
    )
    return Terms(
        response,
        tuple(dict.fromkeys(categorical)),
        tuple((n, i, tuple(s)) for n, (i, s) in merged.items()),
        tuple(variables),
        correlated,
        censored,
    )


def value_label(value: Any) -> str:
    """A category level as named in coefficients: text as given, numbers without a needless decimal point."""
    return value if isinstance(value, str) else group_label(float(value))


def join_categories(parts: Sequence[Mapping[str, Sequence[Any]]]) -> dict[str, tuple[Any, ...]]:
    """The shards' category values (`category_values`) as one set per column: numbers ascending, then text sorted."""
    merged: dict[str, set[Any]] = {}
    for part in parts:
        for col, values in part.items():
            merged.setdefault(col, set()).update(values)
    return {
        col: tuple(sorted(v for v in vals if not isinstance(v, str)))
        + tuple(sorted(v for v in vals if isinstance(v, str)))
        for col, vals in merged.items()
    }


def _check_levels(levels: Any) -> tuple[tuple[str, tuple[str, ...]], ...] | None:
    if levels is None:
        return None
    if not isinstance(levels, Mapping):
        raise ArgumentError(("model", "levels"), f"levels must map a column to its levels in order, got {levels!r}")
    out = []
    for col, vals in levels.items():
        if isinstance(vals, str) or not isinstance(vals, Sequence) or not vals:
            raise ArgumentError(("model", "levels", str(col)), f"levels[{col!r}] must be a non-empty list of levels")
        labels = tuple(value_label(v) for v in vals)
        if len(set(labels)) != len(labels):
            raise ArgumentError(("model", "levels", str(col)), f"levels[{col!r}] repeats a level: {list(labels)}")
        out.append((str(col), labels))
    return tuple(out)


#: a grouping expression lme4 and brms read as a factor: a column, an interaction a:b, a nesting a/b (or a/b/c)
_NAME = r"[A-Za-z_.][A-Za-z0-9_.]*"
_FACTOR = re.compile(rf"^\s*{_NAME}(\s*[:/]\s*{_NAME})*\s*$")


def _expand_factor(expr: str) -> tuple[str, ...]:
    """The grouping factors a written grouping expression stands for, as lme4 and brms expand it: `a` → (a,),
    `a:b` → (a:b,), a nesting `a/b` → (a, a:b), `a/b/c` → (a, a:b, a:b:c); an interaction a:b is the factor whose
    levels are the pairs (a's level, b's level) that occur."""
    nested = [":".join(p.strip() for p in part.split(":")) for part in expr.split("/")]
    return tuple(":".join(nested[: k + 1]) for k in range(len(nested)))


def factor_columns(name: str) -> tuple[str, ...]:
    """The data columns of a grouping factor as `Terms.groups` names it: (county,) or, for an interaction
    county:housing, (county, housing)."""
    return tuple(name.split(":"))


def _unsupported_factor(bars: Sequence[tuple[str, bool, str]], fallback: str) -> str:
    """Why a group term whose grouping factor is not a column, an interaction or a nesting of columns is refused,
    naming the term as the formula writes it (the first such term; `fallback` names the factor otherwise)."""
    bad = next((w for e, _, w in bars if not _FACTOR.match(e)), None)
    term = bad if bad is not None else f"( | {fallback})"
    return (
        f"group term {term}: the grouping factor must be a column (1 | g), an interaction of columns (1 | a:b) or "
        "a nesting (1 | a/b), which expands to (1 | a) + (1 | a:b); compute any other grouping as a column first"
    )


def _prior_fields(family: str, priors: Mapping[str, Any], terms: Terms) -> tuple[dict[str, Any], Any, Any]:
    """The family's prior arguments, the group sd prior(s) and the correlation prior(s) from `priors` (keys
    `PRIOR_KINDS`)."""
    if not isinstance(priors, Mapping):
        raise ArgumentError(("model", "priors"), f"priors must map a kind of prior to a prior, got {priors!r}")
    per_coef = coefficient_keys(priors, family in _ORDINAL_FAMILIES)
    unknown = sorted(set(priors) - set(PRIOR_KINDS) - set(per_coef))
    if unknown:
        raise ArgumentError(
            ("model", "priors", unknown[0]),
            f"priors: unknown kind {unknown[0]!r}; the kinds are {', '.join(PRIOR_KINDS)} (coefficients, group sds, "
            "correlations, the noise sd, the dispersion or precision, the degrees of freedom, the shape, the "
            "zero-inflation, an ordinal model's thresholds), or one coefficient's: 'b_<coefficient>' ('Intercept' for "
            "the intercept)",
        )
    from . import FAMILIES

    own = {"b": "coef_prior"}
    if family in ("linear_regression", "lognormal_regression"):
        own["sigma"] = "sigma_prior"
    if family == "negative_binomial_regression":
        own["phi"] = "phi_prior"
    own.update({n: f for n, f, _ in getattr(FAMILIES.get(family), "_family_params", ())})
    out = {}
    for kind, value in priors.items():
        if kind in ("sd", "cor") or kind in per_coef:
            continue
        if kind not in own:
            raise ArgumentError(
                ("model", "priors", kind), f"priors[{kind!r}]: the {family} family has no such parameter"
            )
        out[own[kind]] = value
    sd = priors.get("sd")
    if isinstance(sd, Mapping):
        extra = sorted(set(sd) - {g for g, _, _ in terms.groups})
        if extra:
            raise ArgumentError(("model", "priors", "sd", extra[0]), f"priors['sd']: {extra[0]!r} is not a group term")
    cor = priors.get("cor")
    if cor is not None:
        named = set(cor) if isinstance(cor, Mapping) else set(terms.correlated) or {""}
        extra = sorted(named - set(terms.correlated))
        if extra:
            raise ArgumentError(
                ("model", "priors", "cor", *([extra[0]] if extra[0] else [])),
                f"priors['cor']: {'no group term' if not extra[0] else repr(extra[0])} has correlated effects (one "
                "term with '|' and two effects or more, e.g. (1 + x | g))",
            )
    return out, sd, cor


@dataclass(frozen=True)
class FormulaModel(Model):
    """A model given as a formula (module docstring): `formula` read by formulae, `family` a brms family name
    (`FORMULA_FAMILIES`: gaussian, bernoulli, poisson, binomial, negbinomial, lognormal, student, Gamma, Beta,
    weibull, exponential, zero_inflated_poisson, zero_inflated_negbinomial) or a built-in family's, `priors` one prior
    per kind (`PRIOR_KINDS`: {"b": Normal(0, 2.5), "sd": HalfNormal(1), "sigma": ..., "phi": ..., "nu": ...,
    "shape": ..., "zi": ...}) and per coefficient ("b_floor": ..., "Intercept": ...: `coef_priors`), `levels` the
    order of a categorical column's levels where the default (sorted) will not do (the first is the reference). The
    survival families' response may carry brms' right-censoring addition,
    `time | cens(censored) ~ ...` (`_response_addition`)."""

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
        from . import FAMILIES

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
        from . import get_model

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
            from .gaussian_sigma import GaussianSigmaRegression

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
