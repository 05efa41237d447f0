"""What every check reads of a run: the `Fit` protocol, its draws thinned to a bounded number, its bound model, its
shards and the executor the checks run on."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Literal, Protocol

import numpy as np

from ..enums import Executor, parse
from ..errors import ArgumentError
from ..models.contract import Model
from ..models.foreign import defines
from ..shards import ShardSet

if TYPE_CHECKING:
    from ..models.contract import ParamBlock

#: Posterior draws a check uses by default (thinned evenly within each chain); `draws="all"` uses every one.
DEFAULT_DRAWS = 1000
#: Rows a shard evaluates at once: the log-likelihood block held in memory is BLOCK_ROWS × S (8 MB at S = 1,000, so
#: that the PSIS's passes over a block stay in cache, which cut a shard's LOO CPU time against 4,096 rows:
#: docs/performance.md, "PSIS-LOO at the shards").
BLOCK_ROWS = 1024
DrawsArg = int | Literal["all"]


class Fit(Protocol):
    """What a check reads of a run (a `Result`): its draws (chains, draws, d), parameter layout, the model bound to
    the data, the shards it was fitted on, and the executor it ran on."""

    draws: np.ndarray
    model: Model | None
    data: ShardSet | None
    executor: str | None

    @property
    def param_blocks(self) -> tuple[ParamBlock, ...]: ...

    @property
    def param_names(self) -> list[str]: ...


def thin_draws(draws: np.ndarray, count: DrawsArg = DEFAULT_DRAWS) -> np.ndarray:
    """(chains, draws, d) → the same chains with at most `count` draws in all, every k-th draw of each chain (k the
    same for all chains); "all" keeps them all. ArgumentError naming `draws` for anything else."""
    if isinstance(count, str) and count == "all":
        return draws
    if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or count < 1:
        raise ArgumentError(("draws",), f"draws must be 'all' or an integer >= 1, got {count!r}")
    chains, n = draws.shape[0], draws.shape[1]
    if n == 0:
        raise ArgumentError(("draws",), "the run has no draws yet")
    step = max(1, math.ceil(chains * n / int(count)))
    return draws[:, ::step]


def flat_draws(draws: np.ndarray) -> np.ndarray:
    """(chains, S, d) → (chains·S, d), chain-major (the order arviz flattens (chain, draw) in)."""
    return np.ascontiguousarray(draws.reshape(-1, draws.shape[-1]))


def uniforms(n: int, seed: int) -> np.ndarray:
    """The per-draw uniforms predictive draws invert at (`Model.predict_draw`), from `seed`."""
    return np.random.default_rng([seed, 0x9E3779B9]).uniform(1e-12, 1.0 - 1e-12, size=n)


def model_of(result: Fit, *methods: str) -> Model:
    """The result's bound model, which must define `methods` (ArgumentError under ("result", ...) otherwise)."""
    if result.model is None:
        raise ArgumentError(
            ("result",),
            "this result does not carry its model (a result read back from stored draws): checks need the "
            "bound model; use a result of rs.sample, or the service's endpoints",
        )
    missing = [m for m in methods if not defines(result.model, m)]
    if missing:
        raise ArgumentError(
            ("result", "model"),
            f"model {type(result.model).__name__} does not define {', '.join(missing)}, which this check needs "
            "(see docs/models.md: the optional methods log_likelihood, predict_mean, predict_draw)",
        )
    return result.model


def shards_of(result: Fit) -> ShardSet:
    """The shards the run was fitted on (ArgumentError under ("result",) for a result without them)."""
    if result.data is None:
        raise ArgumentError(
            ("result",),
            "this result does not carry its shards (a result read back from stored draws): LOO needs the rows "
            "the run was fitted on",
        )
    return result.data


def executor_of(result: Fit, executor: Executor | str | None) -> Executor:
    """The executor a check runs on: the one asked for, else the run's own (Ray for a run on Ray)."""
    if executor is not None:
        return parse(Executor, executor, "executor")
    return Executor.RAY if result.executor == Executor.RAY.value else Executor.LOCAL
