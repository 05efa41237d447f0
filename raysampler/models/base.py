"""Where the model contract used to live, kept so that `raysampler.models.base` imports keep working: the contract
is in `raysampler.models.contract`, `GaussianPrior` in `raysampler.priors`."""

from __future__ import annotations

from ..priors import GaussianPrior
from .contract import (
    MODEL_METHODS,
    TRANSFORMS,
    DataSpec,
    ForeignModel,
    Model,
    ParamBlock,
    as_model,
    block_names,
    natural_values,
)

__all__ = [
    "MODEL_METHODS",
    "TRANSFORMS",
    "DataSpec",
    "ForeignModel",
    "GaussianPrior",
    "Model",
    "ParamBlock",
    "as_model",
    "block_names",
    "natural_values",
]
