"""What a formula says: the families it names, the kinds of prior it takes, and its terms as formulae reads them
(`read_formula` → `Terms`): the response (and brms' `cens(...)` addition), the categories, the group terms with
their bars and nestings. Nothing here sees a row."""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ...errors import ArgumentError
from ..coef_priors import coefficient_keys
from ..groups import group_label

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
    "hurdle_poisson": "hurdle_poisson_regression",
    "hurdle_negbinomial": "hurdle_negative_binomial_regression",
}
#: the kinds of prior a formula model takes (`priors=`), one name per kind, as brms' prior classes: coefficients
#: ("b"), group-effect sds ("sd", one prior or one per grouping column), the correlations of a term's effects ("cor",
#: an LKJ, one or one per grouping column), the noise sd ("sigma": gaussian, lognormal, student), the negative
#: binomial's (and its zero-inflated one's) dispersion and the Beta family's precision ("phi"), the Student-t's
#: degrees of freedom ("nu"), the Gamma and Weibull families' shape ("shape"), the zero-inflation probability ("zi"),
#: the hurdle families' probability of a zero ("hu"),
#: an ordinal model's first threshold ("Intercept") and the gaps between its thresholds ("delta")
PRIOR_KINDS = ("b", "sd", "cor", "sigma", "phi", "nu", "shape", "zi", "hu", "Intercept", "delta")
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
    from .. import FAMILIES

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
    from .. import FAMILIES

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
