"""`rs.sample`: validate the request, start a coordinator (in-process or on Ray), collect draws as they come."""
from __future__ import annotations

import time
import warnings
from typing import Any, Callable, Iterator

import numpy as np

from .algorithms import get_algorithm
from .errors import SamplingError
from .models.base import MODEL_METHODS
from .options import RunOptions, positive_int
from .result import Result
from .runtime.coordinator import Chunk, RunConfig
from .runtime import executors
from .runtime.pools import TRANSPORTS
from .shards import ShardSet, shard as make_shards



class Run:
    """A started run: iterate `chunks()` for draws as they are produced, then `result()`; `close()` frees workers."""

    def __init__(self, model: Any, shards: Any, algorithm: str = "dglmc", *, chains: int = 4,
                 num_rounds: int = 1000, burn_in: int | None = None, thin: int = 1, seed: int = 0,
                 executor: str = "ray", time_budget_s: float | None = None, balance: str | bool = "auto",
                 max_actors: int | None = None, transport: str = "socket", keep_draws: bool = True,
                 _slowdown: dict[int, float] | None = None, **params: Any) -> None:
        _check_model(model)
        shard_set = _as_shards(shards)
        self.options = RunOptions(chains=chains, num_rounds=num_rounds, burn_in=burn_in, thin=thin, seed=seed,
                                  time_budget_s=time_budget_s)
        if self.options.auto:
            raise ValueError("num_rounds='auto' is not available yet; give a number of rounds")
        chains, num_rounds, burn_in = self.options.chains, self.options.sampling_rounds, int(self.options.burn_in)
        thin, seed = self.options.thin, self.options.seed
        if executor not in executors.EXECUTORS:
            raise ValueError(f"executor must be one of {executors.EXECUTORS}, got {executor!r}")
        if not (balance == "auto" or isinstance(balance, bool)):
            raise ValueError(f"balance must be 'auto', True or False, got {balance!r}")
        if max_actors is not None:
            max_actors = positive_int(max_actors, "max_actors")
        if transport not in TRANSPORTS:
            raise ValueError(f"transport must be one of {TRANSPORTS}, got {transport!r}")
        alg = get_algorithm(algorithm, **params)
        do_balance = (executor == "ray") if balance == "auto" else bool(balance)
        self.config = RunConfig(chains, num_rounds, burn_in, thin, seed, do_balance)
        self.executor, self.algorithm_name = executor, algorithm
        self.time_budget_s = time_budget_s
        self._start = time.perf_counter()
        self._handle = executors.start(executor, list(shard_set), model, alg, self.config, max_actors, transport)
        try:
            self.setup = self._handle.call("setup", _slowdown)
        except BaseException:
            self._handle.close()
            raise
        self.rounds_done = 0
        self.error: dict | None = None
        self.stopped_by_time_budget = False
        self.keep_draws = bool(keep_draws)  # False: chunks() only yields draws (a caller that stores them itself)
        self._draws: list[np.ndarray] = []
        self._stats: dict[str, list[np.ndarray]] = {}

    @property
    def total_rounds(self) -> int:
        return self.config.burn_in + self.config.num_rounds

    def chunks(self, target_chunk_s: float = 0.5) -> Iterator[Chunk]:
        """Run to the end (or the time budget, or an error), yielding each chunk of draws as it arrives."""
        n = 20
        while self.rounds_done < self.total_rounds and self.error is None:
            left = None
            if self.time_budget_s is not None:
                left = self.time_budget_s - (time.perf_counter() - self._start)
                if left <= 0:
                    self.stopped_by_time_budget = True
                    break
            t0 = time.perf_counter()
            chunk: Chunk = self._handle.call("run", n, left)
            ran = chunk.rounds_done - self.rounds_done
            self.rounds_done = chunk.rounds_done
            if self.keep_draws:
                self._draws.append(chunk.theta)
                for k, v in chunk.stats.items():
                    self._stats.setdefault(k, []).append(v)
            self.error = chunk.error
            yield chunk
            if chunk.done:
                break
            if left is not None and ran < n:
                self.stopped_by_time_budget = True
                break
            per_round = (time.perf_counter() - t0) / max(ran, 1)
            n = int(np.clip(target_chunk_s / max(per_round, 1e-7), 10, 100_000))

    def result(self) -> Result:
        """The draws collected so far as a Result (chains, draws, d), with the run's statistics."""
        d = self.setup["dim"]
        theta = np.concatenate(self._draws) if self._draws else np.empty((0, self.config.chains, d))
        sample_stats = {k: np.concatenate(v).T for k, v in self._stats.items()}
        stats = self.stats()
        stats["setup_time_s"] = self.setup["setup_time_s"]
        stats["wall_time_s"] = time.perf_counter() - self._start
        info = {"algorithm": self.algorithm_name, "executor": self.executor, "config": self.config,
                "setup": self.setup, "error": self.error, "stopped_by_time_budget": self.stopped_by_time_budget,
                "rounds_done": self.rounds_done}
        return Result(np.ascontiguousarray(theta.transpose(1, 0, 2)), list(self.setup["param_names"]), stats,
                      sample_stats, info)

    def stats(self) -> dict[str, Any]:
        """The coordinator's statistics so far: per-round wall time, per-worker compute/idle, N_i, τ_i, ρ_i, γ_i."""
        return self._handle.call("stats")

    def close(self) -> None:
        self._handle.close()

    def __enter__(self) -> "Run":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def sample(model: Any, shards: Any, algorithm: str = "dglmc", *, chains: int = 4, num_rounds: int = 1000,
           burn_in: int | None = None, thin: int = 1, seed: int = 0, executor: str = "ray",
           time_budget_s: float | None = None, progress: bool | None = None, balance: str | bool = "auto",
           max_actors: int | None = None, transport: str = "socket",
           callback: Callable[[Chunk], None] | None = None, **params: Any) -> Result:
    """Sample the posterior of `model` given data split into `shards`.

    `burn_in` rounds come first and are discarded (default: max(100, num_rounds // 10)); `num_rounds` counts the
    rounds after burn-in; each chain keeps num_rounds // thin draws (the last round of every block of `thin`). `executor="local"` runs the same steps
    in-process and, for the same seed and fixed N_i, gives the same draws as `executor="ray"`.
    `balance` re-balances local step counts N_i from measured worker speeds ("auto": on Ray only).
    `time_budget_s` stops cleanly, returning what was drawn. On Ray, `max_actors` caps the worker actors (default:
    one per CPU) and `transport` picks how round messages travel: "socket" (direct TCP channels, the fast
    path) or "actor" (plain Ray actor calls). Algorithm parameters go in `**params`.
    A numerical failure raises SamplingError naming the worker and round, with `.result` holding the draws so far.
    """
    if callback is not None and not callable(callback):
        raise TypeError(f"callback must be callable (it receives each chunk of draws), got {callback!r}")
    run = Run(model, shards, algorithm, chains=chains, num_rounds=num_rounds, burn_in=burn_in, thin=thin, seed=seed,
              executor=executor, time_budget_s=time_budget_s, balance=balance, max_actors=max_actors,
              transport=transport, **params)
    show = progress if progress is not None else run.total_rounds >= 2000
    from tqdm.auto import tqdm

    with run, tqdm(total=run.total_rounds, disable=not show, unit="round", desc=f"{algorithm} ({executor})") as bar:
        for chunk in run.chunks():
            bar.update(chunk.rounds_done - bar.n)
            if callback is not None:
                callback(chunk)
        result = run.result()
    if run.stopped_by_time_budget:
        warnings.warn(f"time_budget_s={time_budget_s} reached after {run.rounds_done} of {run.total_rounds} rounds "
                      f"({result.num_draws} draws per chain kept)", stacklevel=2)
    if run.error is not None:
        raise SamplingError(run.error["message"], worker=run.error["worker"], round=run.error["round"], result=result)
    return result


def _check_model(model: Any) -> None:
    missing = [m for m in MODEL_METHODS if not callable(getattr(model, m, None))]
    if isinstance(model, type) or missing:
        raise TypeError(f"model must be a model instance (e.g. rs.models.LogisticRegression()) with methods "
                        f"{list(MODEL_METHODS)}; missing {missing or 'an instance'}")


def _as_shards(shards: Any) -> ShardSet:
    if isinstance(shards, ShardSet):
        return shards
    if isinstance(shards, (list, tuple)) and len(shards) > 0:
        return make_shards(list(shards))
    raise TypeError("shards must come from rs.shard(X, y, num_shards=...) or be a list of (X_i, y_i) pairs or "
                    f"file paths, got {type(shards).__name__}")
