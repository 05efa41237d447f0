"""Model library: per-shard potentials U_i with gradients, Hessian-vector products and curvature for K chains.

`get_model("logistic_regression", prior_scale=2.0)` builds a model by family name (see `FAMILIES`: the built-ins and
the families installed packages register under the entry-point group `raysampler.models`);
bind it to the data with `model.bind(DataSpec(...))` before use. Priors are specs from `raysampler.priors`
(`coef_prior=Normal(0, [100, 10, 10])`, `sigma_prior=HalfCauchy(2.5)`, …). A model of your own subclasses `Model`
(the contract, `raysampler.models.contract`; see docs/models.md, "Write your own model").
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from ..errors import ArgumentError
from ..extras import engine as _requires_engine  # noqa: F401 (the import checks that the engine extra is installed)
from ..priors import GaussianPrior
from . import base, contract  # base: the contract's deprecated first home (its names warn, naming contract)
from .beta import BetaRegression
from .binomial import BinomialRegression
from .common import RowValues
from .contract import DataSpec, Model, ParamBlock
from .cumulative import CumulativeProbitRegression, CumulativeRegression
from .foreign import ForeignModel, as_model
from .formula import FormulaModel, from_formula
from .gamma import GammaRegression
from .gaussian import Gaussian, gaussian_posterior
from .groups import GroupEffects, HierarchicalGLM
from .hurdle import HurdleNegativeBinomialRegression, HurdlePoissonRegression
from .linear import LinearRegression, linear_posterior
from .logistic import LogisticRegression
from .lognormal import LogNormalRegression
from .mlp import MLPClassifier
from .negbin import NegativeBinomialRegression
from .poisson import PoissonRegression
from .registry import ENTRY_POINT_GROUP, Family, FamilyParam, family_params, load_families
from .softmax import SoftmaxRegression
from .student import StudentTRegression
from .weibull import ExponentialRegression, WeibullRegression
from .zinb import ZeroInflatedNegativeBinomialRegression
from .zip import ZeroInflatedPoissonRegression

# The registry is loaded on first use (module __getattr__), not at import: a plug-in's module may itself import
# raysampler, which must have finished importing by then.
#   FAMILIES: name → Model subclass, the loaded registry `get_model` reads (built-ins and the entry points of the
#     group `raysampler.models`, see `registry`);
#   FAMILY_INFO: name → `Family` (class, description, built-in or from which distribution);
#   REGISTRY_ERRORS: entry points that could not be registered, name → why (each also a RuntimeWarning).
_REGISTRY: dict[str, Any] = {}


def _registry() -> dict[str, Any]:
    if not _REGISTRY:
        info, errors = load_families()
        _REGISTRY.update(
            FAMILY_INFO=info, REGISTRY_ERRORS=errors, FAMILIES={name: fam.cls for name, fam in info.items()}
        )
    return _REGISTRY


def __getattr__(name: str) -> Any:
    if name in ("FAMILIES", "FAMILY_INFO", "REGISTRY_ERRORS"):
        return _registry()[name]
    if name in ("NumPyroModel", "from_numpyro"):  # numpyro_bridge imports jax only when a model is built
        from . import numpyro_bridge

        return getattr(numpyro_bridge, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if TYPE_CHECKING:
    FAMILIES: dict[str, type[Model]]
    FAMILY_INFO: dict[str, Family]
    REGISTRY_ERRORS: dict[str, str]


def get_model(family: str, **kwargs) -> Model:
    """Instantiate the model registered under `family` with keyword arguments (an unbound model)."""
    families: dict[str, type[Model]] = _registry()["FAMILIES"]
    try:
        cls = families[family]
    except (KeyError, TypeError):
        raise ArgumentError(
            ("model", "family"), f"unknown model family {family!r}; valid families: {', '.join(families)}"
        ) from None
    valid = [f.name for f in dataclasses.fields(cls) if f.init]
    unknown = sorted(set(kwargs) - set(valid) - set(getattr(cls, "_renamed", {})))  # old names warn, and work
    if unknown:
        raise ArgumentError(
            ("model", unknown[0]),
            f"model family {family!r} has no parameter(s) {', '.join(unknown)}; valid parameters: {', '.join(valid)}",
        )
    return cls(**kwargs)


__all__ = [
    "ENTRY_POINT_GROUP",
    "FAMILIES",
    "FAMILY_INFO",
    "REGISTRY_ERRORS",
    "BetaRegression",
    "BinomialRegression",
    "CumulativeProbitRegression",
    "CumulativeRegression",
    "DataSpec",
    "ExponentialRegression",
    "Family",
    "FamilyParam",
    "ForeignModel",
    "FormulaModel",
    "GammaRegression",
    "Gaussian",
    "GaussianPrior",
    "GroupEffects",
    "HierarchicalGLM",
    "HurdleNegativeBinomialRegression",
    "HurdlePoissonRegression",
    "LinearRegression",
    "LogNormalRegression",
    "LogisticRegression",
    "MLPClassifier",
    "Model",
    "NegativeBinomialRegression",
    "NumPyroModel",
    "ParamBlock",
    "PoissonRegression",
    "RowValues",
    "SoftmaxRegression",
    "StudentTRegression",
    "WeibullRegression",
    "ZeroInflatedNegativeBinomialRegression",
    "ZeroInflatedPoissonRegression",
    "as_model",
    "base",
    "contract",
    "family_params",
    "from_formula",
    "from_numpyro",
    "gaussian_posterior",
    "get_model",
    "linear_posterior",
    "load_families",
]
