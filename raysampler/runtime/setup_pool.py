"""The pool the set-up runs on (`SetupPool`): it wraps a run's `WorkerPool` while `Coordinator.start` (or `resume`)
binds the model and tunes the algorithm, holding a `bind` back to go with the next trip and answering the shards'
static facts again without one; `setup_quantity` names a set-up function's answers in the release ledger.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..models.contract import Model
from .contracts import NO_INIT, ShardFacts, ShardState, StateInit, StepResult, WorkerPool
from .links import LinkStats

if TYPE_CHECKING:
    from ..privacy.ledger import LedgerBook


class SetupPool:
    """A pool as `Coordinator.start` lends it to the set-up (`bind_model`, the algorithm's `prepare`), saving trips:

    - a `bind` is held back (`pending`) and goes with the next call that reaches the workers: a `map` (bound first in
      the same trip), or the `init_states` that ends the set-up (`Coordinator.start` sends it there);
    - what a `bind_facts` brought back (the shards' static facts under the data-bound model: the properness check's
      Gram matrices, group labels, local blocks, ...) is kept: a `map` of one of those functions with no arguments is
      answered from it, without a trip, while that model is the workers' own, and `facts` gives it later.

    Every other call goes to `pool` as it is. What the shards send back is recorded in `ledger` (the release
    ledger, `privacy.ledger`) where one is given: "setup:<function>" for a map's answers, "setup:facts" for
    `describe`, "setup:step_time" for the calibration."""

    def __init__(self, pool: WorkerPool, ledger: LedgerBook | None = None) -> None:
        self.pool = pool
        self.ledger = ledger
        self.num_shards = pool.num_shards
        self.groups = pool.groups
        self.trips = pool.trips
        self.pending: Model | None = None  # bound by the set-up, not yet sent to the workers
        self._facts: dict[Callable[..., Any], list[Any]] = {}
        self._facts_current = False  # whether the workers' model is the one `_facts` were found under

    @property
    def transport(self) -> str:
        return self.pool.transport

    def facts(self, fn: Callable[..., Any]) -> list[Any] | None:
        """Every shard's answer to `fn` as the last `bind_facts` brought it back (under that bind's model), or None."""
        found = self._facts.get(fn)
        return None if found is None else list(found)

    def describe(self) -> list[ShardFacts]:
        return self._record("setup:facts", self.pool.describe())

    def _record(self, quantity: str, answers: list[Any]) -> list[Any]:
        if self.ledger is not None:
            self.ledger.record_each(quantity, answers)
        return answers

    def bind(self, model: Model) -> None:
        self.pending, self._facts_current = model, False

    def bind_facts(self, model: Model, fns: Sequence[Callable[..., Any]]) -> list[list[Any]]:
        out = self.pool.bind_facts(model, fns)
        for fn, answers in zip(fns, out):
            self._record(setup_quantity(fn), answers)
        self.pending = None
        self._facts, self._facts_current = dict(zip(fns, out)), True
        return out

    def gram(self) -> list[np.ndarray | None]:
        self._flush()
        return self._record("setup:gram", self.pool.gram())

    def map(self, fn: Callable[..., Any], args: Sequence[tuple[Any, ...]], model: Model | None = None) -> list[Any]:
        if model is not None:
            self.bind(model)
        if self.pending is None and self._facts_current and fn in self._facts and all(a == () for a in args):
            return list(self._facts[fn])
        model, self.pending = self.pending, None
        return self._record(setup_quantity(fn), self.pool.map(fn, args, model))

    def _flush(self) -> None:
        if self.pending is not None:
            model, self.pending = self.pending, None
            self.pool.bind(model)

    def init_states(self, payloads: Sequence[Any], init: StateInit = NO_INIT) -> np.ndarray | None:
        if init.model is not None:
            self.bind(init.model)
        model, self.pending = self.pending, None
        tau = self.pool.init_states(payloads, dataclasses.replace(init, model=model))
        if tau is not None:
            self._record("setup:step_time", [float(t) for t in tau])
        return tau

    def set_slowdown(self, factors: dict[int, float]) -> None:
        self._flush()
        self.pool.set_slowdown(factors)

    def calibrate(self) -> np.ndarray:
        self._flush()
        tau = self.pool.calibrate()
        self._record("setup:step_time", [float(t) for t in tau])
        return tau

    def step(self, messages: Any) -> StepResult:
        self._flush()
        return self.pool.step(messages)

    def send(self, messages: Any) -> None:
        self._flush()
        self.pool.send(messages)

    def collect(self) -> StepResult:
        return self.pool.collect()

    def capture(self) -> list[ShardState]:
        self._flush()
        return self.pool.capture()

    def restore(self, states: Sequence[ShardState], peers: Sequence[bytes] | None = None) -> None:
        self._flush()
        self.pool.restore(states, peers)

    def links(self) -> tuple[LinkStats, ...]:
        return self.pool.links()

    def revive(self, timeout_s: float) -> None:
        self.pool.revive(timeout_s)

    def close(self) -> None:
        self.pool.close()


def setup_quantity(fn: Callable[..., Any]) -> str:
    """The ledger's name for a set-up function's answers: "setup:" and its name ("shard_hessian" → "setup:hessian")."""
    name = getattr(fn, "__name__", type(fn).__name__)
    return "setup:" + name.removeprefix("shard_")
