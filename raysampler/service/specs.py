"""Spec translation: a `RunSpec` becomes engine objects (model, shards) and run options, checked at submit the way the
run will check them, so a spec the engine would reject is a 422 naming the field rather than a FAILED run later.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

import numpy as np

from .. import datasets as rs_datasets
from ..algorithms import ALGORITHMS, get_algorithm
from ..models import get_model
from ..models.base import Model
from ..options import RunOptions
from ..runtime.coordinator import data_spec
from ..runtime.host import ShardHost, ShardSource
from ..shards import ShardSet, shard
from .errors import FieldError
from .schemas import BUILTIN_PREFIX, RunSpec
from .store import RecordStore

MAX_BUILTIN_ROWS = 5_000_000  # generated data sets are built in the service process: bound their size
MAX_BUILTIN_DIM = 10_000


class SpecError(FieldError):
    """A run spec the engine rejects; `loc` names the field (as in pydantic's errors)."""


@dataclass(frozen=True)
class Built:
    """What a spec names, ready for `rs.Run`: the model, the shards, rows n and the parameter dimension d."""

    model: Model
    shards: ShardSet
    n: int
    d: int


def run_options(spec: RunSpec) -> RunOptions:
    """The run's length and bookkeeping as the engine validates them (burn-in default, totals); a combination the
    engine refuses is a SpecError naming the field."""
    try:
        return _options(spec)
    except ValueError as exc:
        name = str(exc).split()[0]
        raise SpecError((name if name in RunSpec.model_fields else "num_rounds",), str(exc)) from None


def _options(spec: RunSpec) -> RunOptions:
    return RunOptions(chains=spec.chains, num_rounds=spec.num_rounds, burn_in=spec.burn_in, thin=spec.thin,
                      seed=spec.seed, time_budget_s=spec.time_budget_s, target_ess=spec.target_ess,
                      max_rhat=spec.max_rhat, max_rounds=spec.max_rounds)


def spec_hash(spec: RunSpec) -> str:
    """What makes two submits the same run (the client-chosen run_id aside)."""
    body = spec.model_dump(mode="json", exclude={"run_id"})
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def load_data(spec: RunSpec, tenant: str, store: RecordStore) -> tuple[np.ndarray, np.ndarray]:
    """(X, y) named by spec.data: a built-in data set or one the tenant uploaded."""
    if spec.data.dataset is not None:
        name = spec.data.dataset.removeprefix(BUILTIN_PREFIX)
        if name not in rs_datasets.available():
            raise SpecError(("data", "dataset"), f"unknown built-in data set {name!r}; valid: "
                            f"{', '.join(BUILTIN_PREFIX + n for n in rs_datasets.available())}")
        for key, cap in (("n", MAX_BUILTIN_ROWS), ("d", MAX_BUILTIN_DIM)):
            value = spec.data.options.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value > cap:
                raise SpecError(("data", "options", key), f"{key} must be at most {cap} for a built-in data set, "
                                f"got {value}")
        try:
            return rs_datasets.load(name, **spec.data.options)
        except (TypeError, ValueError, MemoryError) as exc:
            raise SpecError(("data", "options"), f"{type(exc).__name__}: {exc}" if isinstance(exc, MemoryError)
                            else str(exc)) from None
    assert spec.data.dataset_id is not None  # DataRef holds exactly one of the two
    rec = store.get_dataset(tenant, spec.data.dataset_id)
    if rec is None:
        raise SpecError(("data", "dataset_id"), f"no data set {spec.data.dataset_id!r} (upload it with POST "
                        "/v1/datasets)")
    with np.load(rec.path) as z:
        return z["X"], z["y"]


def build(spec: RunSpec, tenant: str, store: RecordStore) -> Built:
    """Engine objects for a spec, checked the way the run will check them; errors are SpecError naming the field."""
    try:
        model = get_model(spec.model.family, **spec.model.params())
    except ValueError as exc:
        msg = str(exc)
        if "unknown model family" in msg:
            loc: tuple[str, ...] = ("model", "family")
        else:
            named = [k for k in spec.model.params() if k in msg.split(";")[0]]
            loc = ("model", named[0]) if named else ("model",)
        raise SpecError(loc, msg) from None
    except TypeError as exc:
        raise SpecError(("model",), str(exc)) from None
    try:
        algorithm = get_algorithm(spec.algorithm.name, **spec.algorithm.params)
    except (ValueError, TypeError) as exc:
        where = ("algorithm", "name") if spec.algorithm.name not in ALGORITHMS else ("algorithm", "params")
        raise SpecError(where, str(exc)) from None
    X, y = load_data(spec, tenant, store)
    try:
        shards = shard(X, y, num_shards=spec.num_shards, strategy=spec.shard_strategy, seed=spec.seed)
    except ValueError as exc:
        field = "shard_strategy" if "label" in str(exc) or "strategy" in str(exc) else "num_shards"
        raise SpecError((field,), str(exc)) from None
    host = ShardHost([ShardSource(i, s, s.site, s.columns) for i, s in enumerate(shards)], model, algorithm,
                     spec.seed, spec.chains)
    try:
        facts = host.describe()
        bound = model.bind(data_spec(facts, model))
        host.bind(bound)
    except (ValueError, TypeError) as exc:
        raise SpecError(("data",), f"the data do not fit model family {spec.model.family!r}: {exc}") from None
    try:
        algorithm.check_shapes(len(shards), int(bound.dim), spec.chains)
    except ValueError as exc:
        raise SpecError(("algorithm", "params"), str(exc)) from None
    return Built(model, shards, int(X.shape[0]), int(bound.dim))
