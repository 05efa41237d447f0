"""The run's set-up choices read from its links and its algorithm: how many chains (`_chains_for`) and whether its
rounds go as two chain groups in flight (`_pipeline_for`, with `_pipeline_refusal` saying why a run cannot).

The decisions themselves (`choose_chains`, `choose_pipeline`) are in `links`; these adapt a pool, a config and an
algorithm to them for `Coordinator.start` (and the coordinator's own check of pipeline=True on resume).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..algorithms.base import Algorithm
from ..errors import ArgumentError
from ..models.contract import Model
from ..models.foreign import as_model
from .contracts import RunConfig, ShardFacts, WorkerPool
from .links import ChainsChoice, PipelineChoice, choose_chains, choose_pipeline, far_rtt


def _chains_for(pool: WorkerPool, model: Model, config: RunConfig, facts: Sequence[ShardFacts]) -> ChainsChoice:
    """The run's chain count: as configured, or with `chains_auto` `choose_chains`' pick from whether the run stops
    on convergence or at a time budget, the pool's links (measured when it described its shards) and each process's
    work (per element and chain, and fixed)."""
    if not config.chains_auto:
        return ChainsChoice(config.chains, False, "as asked", far_rtt(pool.links()))
    m = as_model(model)
    per_element, per_step = float(m.work_per_element()), float(m.work_per_step())
    by_shard = {f.shard: f for f in facts}
    elements = [sum(float(np.prod(by_shard[i].x_shape)) * per_element for i in g) for g in pool.groups]
    rows = [sum(int(by_shard[i].n_rows) for i in g) for g in pool.groups]
    fixed = [per_step * len(g) for g in pool.groups]
    return choose_chains(
        config.chains, pool.links(), elements, rows, config.converges, config.chains_cap, config.budgeted, fixed
    )


def _pipeline_refusal(algorithm: Algorithm, config: RunConfig, state: Any, dp: bool) -> str | None:
    """Why this run cannot run its rounds as two chain groups, or None when it can."""
    if dp:
        return "not available with privacy= (the DP mode)"
    if config.chains < 2 or not algorithm.splits_chains(state):
        return (
            f"needs two chains or more and an algorithm whose chains step independently as one batch "
            f"({algorithm.name!r} with these settings does not: use 'dglmc' with local_kernel 'laplace_mh' or 'lmc', "
            "and no group effects)"
        )
    return None


def _pipeline_for(
    algorithm: Algorithm, config: RunConfig, state: Any, chains: ChainsChoice, privacy: Any
) -> PipelineChoice:
    """Whether the run's rounds go as two chain groups in flight: as asked (True raises here where the run cannot
    split its chains), or with `pipeline_auto` `choose_pipeline`'s set-up choice from the measured links (pending
    until the first rounds' compute is measured)."""
    refusal = _pipeline_refusal(algorithm, config, state, privacy is not None)
    if config.pipeline and not config.pipeline_auto and refusal is not None:
        raise ArgumentError(("pipeline",), f"pipeline=True: {refusal}")
    return choose_pipeline(None if config.pipeline_auto else config.pipeline, config.chains, chains.rtt_s, refusal)
