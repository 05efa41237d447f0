"""raysampler: distributed Bayesian posterior sampling (DG-LMC and friends) on Ray or in-process."""

from __future__ import annotations

from . import datasets, models, priors
from .errors import SamplingError
from .models import Model
from .options import ExecutionOptions, RunOptions
from .result import Result
from .sampling import Run, resume, sample
from .shards import Shard, ShardSet, shard

__version__ = "0.1.0"

__all__ = [
    "ExecutionOptions",
    "Model",
    "Result",
    "Run",
    "RunOptions",
    "SamplingError",
    "Shard",
    "ShardSet",
    "__version__",
    "datasets",
    "models",
    "priors",
    "resume",
    "sample",
    "shard",
]
