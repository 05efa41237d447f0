"""Model library: per-shard potentials U_i with gradients, Hessian-vector products and curvature for K chains.

`get_model("logistic_regression", prior_scale=2.0)` builds a model by family name (see `FAMILIES`);
bind it to the data with `model.bind(DataSpec(...))` before use. Priors are specs from `raysampler.priors`
(`coef_prior=Normal(0, [100, 10, 10])`, `noise_prior=HalfCauchy(2.5)`, …). A model of your own subclasses `Model`
(the contract, `raysampler.models.contract`; see docs/models.md, "Write your own model").
"""

from __future__ import annotations

import dataclasses

from ..errors import ArgumentError
from ..priors import GaussianPrior
from . import base, contract  # `raysampler.models.base` is the contract's old home, kept for imports
from .binomial import BinomialRegression
from .common import RowValues
from .contract import DataSpec, ForeignModel, Model, ParamBlock, as_model
from .gaussian import Gaussian, gaussian_posterior
from .linear import LinearRegression, linear_posterior
from .logistic import LogisticRegression
from .mlp import MLPClassifier
from .negbin import NegativeBinomialRegression
from .poisson import PoissonRegression
from .softmax import SoftmaxRegression

FAMILIES: dict[str, type[Model]] = {
    "gaussian": Gaussian,
    "linear_regression": LinearRegression,
    "logistic_regression": LogisticRegression,
    "poisson_regression": PoissonRegression,
    "binomial_regression": BinomialRegression,
    "negative_binomial_regression": NegativeBinomialRegression,
    "softmax_regression": SoftmaxRegression,
    "mlp_classifier": MLPClassifier,
}


def get_model(family: str, **kwargs) -> Model:
    """Instantiate the model registered under `family` with keyword arguments (an unbound model)."""
    try:
        cls = FAMILIES[family]
    except (KeyError, TypeError):
        raise ArgumentError(
            ("model", "family"), f"unknown model family {family!r}; valid families: {', '.join(FAMILIES)}"
        ) from None
    valid = [f.name for f in dataclasses.fields(cls) if f.init]
    unknown = sorted(set(kwargs) - set(valid))
    if unknown:
        raise ArgumentError(
            ("model", unknown[0]),
            f"model family {family!r} has no parameter(s) {', '.join(unknown)}; valid parameters: {', '.join(valid)}",
        )
    return cls(**kwargs)


__all__ = [
    "FAMILIES",
    "BinomialRegression",
    "DataSpec",
    "ForeignModel",
    "Gaussian",
    "GaussianPrior",
    "LinearRegression",
    "LogisticRegression",
    "MLPClassifier",
    "Model",
    "NegativeBinomialRegression",
    "ParamBlock",
    "PoissonRegression",
    "RowValues",
    "SoftmaxRegression",
    "as_model",
    "base",
    "contract",
    "gaussian_posterior",
    "get_model",
    "linear_posterior",
]
