"""raysampler: distributed Bayesian posterior sampling (DG-LMC and friends) on Ray or in-process.

The names below are imported on first use (PEP 562), so that `import raysampler.cli` (the command line) and
`import raysampler.wire` stay fast, and `import raysampler` works where only the SDK and the CLI are installed
(`pip install raysampler`): the engine, its models and scipy load only when a program uses them, and where the
engine is not installed the first use says which extra brings it (raysampler/extras).
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from . import datasets, models, priors
    from .errors import SamplingError
    from .evaluation import compare, evaluate
    from .models import GroupEffects, Model
    from .options import ExecutionOptions, RunOptions
    from .privacy.dp import DP
    from .result import Result
    from .run import Run
    from .sampling import resume, sample
    from .shards import Shard, ShardSet, shard

__version__ = "0.1.0"

__all__ = [
    "DP",
    "ExecutionOptions",
    "GroupEffects",
    "Model",
    "Result",
    "Run",
    "RunOptions",
    "SamplingError",
    "Shard",
    "ShardSet",
    "__version__",
    "compare",
    "datasets",
    "evaluate",
    "models",
    "priors",
    "resume",
    "sample",
    "shard",
]

#: public name → the module that defines it
_LAZY = {
    "SamplingError": ".errors",
    "compare": ".evaluation",
    "evaluate": ".evaluation",
    "GroupEffects": ".models",
    "Model": ".models",
    "ExecutionOptions": ".options",
    "RunOptions": ".options",
    "DP": ".privacy.dp",
    "Result": ".result",
    "Run": ".run",
    "resume": ".sampling",
    "sample": ".sampling",
    "Shard": ".shards",
    "ShardSet": ".shards",
    "shard": ".shards",
}
_SUBMODULES = frozenset({"datasets", "models", "priors"})


def __getattr__(name: str) -> Any:
    try:
        if name in _SUBMODULES or (
            not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}") is not None
        ):  # any subpackage or module, as attribute access found them when the package imported them eagerly
            return importlib.import_module(f".{name}", __name__)
        if name in _LAZY:
            value = getattr(importlib.import_module(_LAZY[name], __name__), name)
            globals()[name] = value  # later look-ups skip this function
            return value
    except ModuleNotFoundError as exc:  # `pip install raysampler` alone has no engine: say which extra brings it
        from .extras import explain

        raise explain(exc, f"{__name__}.{name}") from exc
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
