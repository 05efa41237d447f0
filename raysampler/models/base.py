"""Deprecated: the model contract's first home. Its names live in `raysampler.models.contract` (`GaussianPrior` in
`raysampler.priors`); each one taken from here still works and warns (DeprecationWarning) naming its module."""

from __future__ import annotations

import importlib
import warnings
from typing import Any

#: name → the module that defines it
MOVED: dict[str, str] = {
    **dict.fromkeys(
        (
            "MODEL_METHODS",
            "TRANSFORMS",
            "DataSpec",
            "Model",
            "ParamBlock",
            "block_names",
            "natural_values",
        ),
        "raysampler.models.contract",
    ),
    **dict.fromkeys(("ForeignModel", "as_model"), "raysampler.models.foreign"),
    "GaussianPrior": "raysampler.priors",
}
__all__ = sorted(MOVED)


def __getattr__(name: str) -> Any:
    if name not in MOVED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        f"raysampler.models.base is deprecated: import {name} from {MOVED[name]}", DeprecationWarning, stacklevel=2
    )
    return getattr(importlib.import_module(MOVED[name]), name)
