"""A run bound to its shards: the model's dimension fixed from the shards' facts (`bind_model`, with `data_spec`
and the formula's categories), the run's identity (`fingerprint`), the algorithm as the run runs it (`secured`), a
secure-sums run's public keys (`public_keys`), and the same checks without workers (`validate_run`).

They are what `Coordinator.start` and `Coordinator.resume` do before any round, kept apart from the round loop so
that a caller checking a run spec (the service, at submit) need not load the coordinator.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..algorithms.base import Algorithm, check_model_support
from ..errors import ArgumentError
from ..models.contract import DataSpec, Model
from ..models.foreign import as_model
from ..models.groups import check_groups_disjoint, spanning_factors
from ..shards import ShardSet, join_levels
from .contracts import RunConfig, ShardFacts, WorkerPool
from .host import ShardSource


def data_spec(facts: Sequence[ShardFacts], model: Model) -> DataSpec:
    """DataSpec from the shards' facts; mismatched feature counts or column names are an error naming the shard."""
    first = facts[0]
    for f in facts:
        if len(f.x_shape) != 2:
            raise ValueError(f"shards[{f.shard}]: X must be 2-D (rows, features), got shape {f.x_shape}")
        if f.x_shape[1] != first.x_shape[1]:
            raise ValueError(
                f"shards[{f.shard}]: has {f.x_shape[1]} features but shards[{first.shard}] has "
                f"{first.x_shape[1]}: every shard must have the same columns"
            )
        if f.columns is not None and first.columns is not None and f.columns != first.columns:
            raise ValueError(
                f"shards[{f.shard}]: columns {list(f.columns)} differ from shards[{first.shard}]'s "
                f"{list(first.columns)}: every shard must have the same columns"
            )
        if not f.finite:
            raise ValueError(f"shards[{f.shard}]: data contains NaN or inf")
    y_max = [f.y_max for f in facts if f.y_max is not None]
    kind = model.target_kind
    n_classes = int(max(y_max)) + 1 if y_max and kind == "multiclass" else None
    p = first.x_shape[1]
    ywidth = {f.y_shape[1] for f in facts if len(f.y_shape) == 2}
    if kind == "vector" and ywidth:
        p = ywidth.pop()
    columns = next((f.columns for f in facts if f.columns is not None), None)
    levels = join_levels([f.levels for f in facts])
    return DataSpec(
        n_features=int(p),
        n_classes=n_classes,
        n_rows=sum(f.n_rows for f in facts),
        columns=columns,
        levels=tuple(levels.items()) if levels else None,
    )


def fingerprint(algorithm: Algorithm, model: Model, config: RunConfig, facts: Sequence[ShardFacts]) -> str:
    """What a run state belongs to: algorithm and its parameters, model, chains, seed, burn-in, thinning, shards."""
    shards = [(f.shard, f.n_rows, f.x_shape, f.y_shape, f.columns) for f in facts]
    key = repr(
        (
            type(algorithm).__name__,
            repr(algorithm),
            repr(model),
            config.chains,
            config.seed,
            config.burn_in,
            config.thin,
            shards,
        )
        + (("pipeline",) if config.pipeline else ())  # halves give other last bits; unpipelined keys stay as they were
        + (("secure_sums",) if config.secure_sums else ())
    )
    return hashlib.sha256(key.encode()).hexdigest()[:32]


def secured(algorithm: Algorithm, config: RunConfig) -> Algorithm:
    """The algorithm as the run runs it: with `secure_sums`, its secure-sums form (`Algorithm.for_secure_sums`, an
    ArgumentError naming `secure_sums` and the algorithm where it has none)."""
    return algorithm.for_secure_sums() if config.secure_sums else algorithm


def public_keys(facts: Sequence[ShardFacts], config: RunConfig) -> list[bytes] | None:
    """A secure-sums run's relay: every shard's signed public key from its `describe`, in shard order (None
    otherwise). Sites that pin each other's identities check every key they are relayed (`privacy.identity`); others
    trust the coordinator to pass them on unchanged (the semi-honest model: docs/privacy.md)."""
    if not config.secure_sums:
        return None
    keys = [f.public_key for f in facts]
    missing = [f.shard for f, k in zip(facts, keys) if k is None]
    if missing:
        raise RuntimeError(f"secure sums: shards {missing} gave no public key (their workers are not in secure mode)")
    return [k for k in keys if k is not None]


def shard_category_values(
    model: Any, X: np.ndarray, y: np.ndarray, columns: Any, levels: Any = None
) -> dict[str, list[Any]]:
    """A shard's distinct values of the columns its (formula) model reads as categories, and the levels it holds of
    each interaction grouping factor (`levels`: the text columns' labels, to name them)."""
    return dict(model.category_values(X, y, columns, levels))


def bind_model(pool: WorkerPool, model: Model) -> tuple[list[ShardFacts], Model, DataSpec]:
    """Fix the model's dimension from the shards' facts, hand the bound model to every worker, and check on the pooled
    data that the posterior is proper (flat priors). A model object that does not subclass `Model` is bound as a
    `ForeignModel` (`as_model`), so from here on every part of the model contract can be called directly.

    The bind brings back, in its own trip, what the checks read (each shard's Gram matrix; with group effects, its
    group labels) and, with group effects, the shards' other static facts a set-up asks for (local blocks, centring:
    a `SetupPool` answers them again without a trip)."""
    from ..tuning.shards import shard_centring, shard_gram, shard_group_labels, shard_local_blocks

    model = as_model(model)
    facts = pool.describe()
    spec = data_spec(facts, model)
    if hasattr(model, "category_values"):  # a formula's categories: each shard's values (no rows), joined
        from ..models.formula import join_categories

        parts = pool.map(shard_category_values, [(spec.columns, spec.levels)] * len(facts))
        spec = dataclasses.replace(spec, categories=tuple(join_categories(parts).items()) or None)
    bound = model.bind(spec)
    local = bound.has_local_params()
    fns = [shard_gram, shard_group_labels, shard_local_blocks, shard_centring] if local else [shard_gram]
    found = pool.bind_facts(bound, fns)
    if local:  # a local factor's groups each lie in one shard; a factor whose levels span shards becomes global
        factors = tuple(getattr(bound, "factors", ()))
        wide = spanning_factors(factors, found[1])
        if wide:  # bound again with those factors' effects in θ (the shards' labels decided it: metadata only)
            spec = dataclasses.replace(spec, spanning=tuple(wide.items()))
            bound = model.bind(spec)
            local = bound.has_local_params()
            fns = [shard_gram, shard_group_labels, shard_local_blocks, shard_centring] if local else [shard_gram]
            found = pool.bind_facts(bound, fns)
        if local:
            for f, ge in enumerate(factors):
                if ge.group not in wide:
                    check_groups_disjoint([lab[f] for lab in found[1]], ge.group)
    grams = [g for g in found[0] if g is not None]
    bound.check_proper(np.sum(grams, axis=0) if grams else None, n_rows=sum(f.n_rows for f in facts))
    return facts, bound, spec


def validate_run(model: Model, shards: ShardSet, algorithm: Algorithm, chains: int, seed: int = 0) -> tuple[Model, int]:
    """Bind `model` to in-memory `shards` and check `algorithm`'s shapes as `Coordinator.start` will, in this process
    and without workers: the bound model and its dimension. A shape error is an ArgumentError under ("algorithm",)."""
    from .pools import LocalPool  # pools import the hosts and transports, which a coordinator process may not need

    pool = LocalPool(
        [ShardSource(i, s, s.site, s.columns, s.index) for i, s in enumerate(shards)], model, algorithm, seed, chains
    )
    check_model_support(algorithm, as_model(model))
    _, bound, _ = bind_model(pool, model)
    privacy = getattr(algorithm, "privacy", None)
    if privacy is not None:  # the DP mode clips per-row gradients: the model must have them
        from ..privacy.clipping import check_clippable

        check_clippable(bound, privacy.clip_rule)
    d = int(bound.dim)
    try:
        algorithm.check_shapes(len(shards), d, chains)
    except ArgumentError:
        raise
    except ValueError as exc:
        raise ArgumentError(("algorithm",), str(exc)) from None
    return bound, d
