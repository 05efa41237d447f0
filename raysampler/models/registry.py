"""The model-family registry: built-in families and those that installed packages register through the entry-point
group `raysampler.models` (name → a `Model` subclass that is a dataclass with declared, typed parameters).

Built-ins are registered in raysampler's own pyproject.toml the same way, and are also listed here (`BUILTIN`) so that
they are there even when the installed package metadata is stale. A third-party entry point that cannot be loaded or
is not a valid family is reported (a `RuntimeWarning` naming it, and `load_errors`) and skipped; it never stops the
import. The service lists the families (GET /v1/models) but never accepts code: a family is whatever is installed.
"""

from __future__ import annotations

import dataclasses
import typing
import warnings
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from .beta import BetaRegression
from .binomial import BinomialRegression
from .contract import Model
from .cumulative import CumulativeProbitRegression, CumulativeRegression
from .gamma import GammaRegression
from .gaussian import Gaussian
from .hurdle import HurdleNegativeBinomialRegression, HurdlePoissonRegression
from .linear import LinearRegression
from .logistic import LogisticRegression
from .lognormal import LogNormalRegression
from .mlp import MLPClassifier
from .negbin import NegativeBinomialRegression
from .poisson import PoissonRegression
from .softmax import SoftmaxRegression
from .student import StudentTRegression
from .weibull import ExponentialRegression, WeibullRegression
from .zinb import ZeroInflatedNegativeBinomialRegression
from .zip import ZeroInflatedPoissonRegression

__all__ = [
    "BOUND_FIELDS",
    "BUILTIN",
    "ENTRY_POINT_GROUP",
    "Family",
    "FamilyParam",
    "family_params",
    "load_families",
]

ENTRY_POINT_GROUP = "raysampler.models"
#: The families raysampler ships, also registered as entry points in its pyproject.toml.
BUILTIN: dict[str, type[Model]] = {
    "gaussian": Gaussian,
    "linear_regression": LinearRegression,
    "logistic_regression": LogisticRegression,
    "poisson_regression": PoissonRegression,
    "binomial_regression": BinomialRegression,
    "negative_binomial_regression": NegativeBinomialRegression,
    "softmax_regression": SoftmaxRegression,
    "mlp_classifier": MLPClassifier,
    "lognormal_regression": LogNormalRegression,
    "student_t_regression": StudentTRegression,
    "gamma_regression": GammaRegression,
    "beta_regression": BetaRegression,
    "weibull_regression": WeibullRegression,
    "exponential_regression": ExponentialRegression,
    "zero_inflated_poisson_regression": ZeroInflatedPoissonRegression,
    "zero_inflated_negative_binomial_regression": ZeroInflatedNegativeBinomialRegression,
    "cumulative_regression": CumulativeRegression,
    "cumulative_probit_regression": CumulativeProbitRegression,
    "hurdle_poisson_regression": HurdlePoissonRegression,
    "hurdle_negative_binomial_regression": HurdleNegativeBinomialRegression,
}
#: Fields that `bind` fills from the data: arguments of the constructor, but not parameters a user chooses.
BOUND_FIELDS = frozenset({"n_features", "n_classes", "columns"})


@dataclass(frozen=True)
class FamilyParam:
    """One declared parameter of a family: its name, type (resolved annotation), default and description."""

    name: str
    type: Any
    default: Any = dataclasses.MISSING
    description: str | None = None

    @property
    def required(self) -> bool:
        return self.default is dataclasses.MISSING


@dataclass(frozen=True)
class Family:
    """A registered model family: its name, class and where it comes from (None: built-in, else the distribution)."""

    name: str
    cls: type[Model]
    distribution: str | None = None

    @property
    def builtin(self) -> bool:
        return self.distribution is None

    @property
    def description(self) -> str:
        """The first line of the class docstring."""
        doc = (self.cls.__doc__ or "").strip()
        return doc.splitlines()[0].strip() if doc else ""

    def params(self) -> tuple[FamilyParam, ...]:
        return family_params(self.cls)


def family_params(cls: type) -> tuple[FamilyParam, ...]:
    """The declared parameters of a family class: its dataclass init fields (less `BOUND_FIELDS`) with resolved
    types, defaults and the `description` of the field's metadata. Raises TypeError if `cls` cannot be a family."""
    if not (isinstance(cls, type) and issubclass(cls, Model)):
        raise TypeError(f"{cls!r} is not a subclass of raysampler.models.Model")
    if "__dataclass_fields__" not in cls.__dict__:  # decorated itself, not only inheriting Model's fields
        raise TypeError(f"{cls.__name__} is not a dataclass: a family declares its parameters as dataclass fields")
    try:
        hints = typing.get_type_hints(cls)
    except Exception as exc:  # an annotation that does not resolve
        raise TypeError(f"{cls.__name__}: its parameters' type annotations do not resolve ({exc})") from None
    out = []
    for f in dataclasses.fields(cls):
        if not f.init or f.name in BOUND_FIELDS or f.name.startswith("_"):
            continue
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = dataclasses.MISSING
        desc = f.metadata.get("description") if f.metadata else None
        out.append(FamilyParam(f.name, hints[f.name], default, str(desc) if desc is not None else None))
    return tuple(out)


def _check_family(name: str, obj: Any) -> type[Model]:
    family_params(obj)  # raises TypeError naming what is wrong
    return typing.cast(type[Model], obj)


def load_families(
    eps: typing.Iterable[EntryPoint] | None = None,
) -> tuple[dict[str, Family], dict[str, str]]:
    """(families by name, errors by entry-point name): the built-ins, then every entry point of the group
    `raysampler.models` (`eps` to pass them explicitly). raysampler's own entry points confirm the built-ins; a
    third-party one that fails to load, is not a valid family, or takes a built-in's name is skipped with a
    RuntimeWarning naming it."""
    families = {name: Family(name, cls) for name, cls in BUILTIN.items()}
    errors: dict[str, str] = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP) if eps is None else eps:
        dist = ep.dist.name if ep.dist is not None else None
        if ep.name in BUILTIN and (dist == "raysampler" or ep.value.startswith("raysampler.")):
            continue  # the built-in's own registration
        try:
            if ep.name in families:
                raise ValueError(f"the family name {ep.name!r} is already registered ({families[ep.name].cls!r})")
            cls = _check_family(ep.name, ep.load())
        except Exception as exc:  # a broken plug-in must not stop the import
            errors[ep.name] = f"{type(exc).__name__}: {exc}"
            warnings.warn(
                f"model family entry point {ep.name!r} ({ep.value}"
                f"{', from ' + dist if dist else ''}) is skipped: {errors[ep.name]}",
                RuntimeWarning,
                stacklevel=2,
            )
            continue
        families[ep.name] = Family(ep.name, cls, dist or "unknown")
    return families, errors
