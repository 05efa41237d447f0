"""DG-LMC ([DG-LMC] Plassier et al., ICML 2021): the algorithm (`algorithm.py`), its tuning (`tuning.py`), its local
kernels (`kernels/`, one module each), the coordinator's Gaussian step (`coordinator.py`), the "laplace_mh" proposal's
re-centring (`recentre.py`), the report chain of group effects (`report.py`) and the messages between them
(`types.py`). The names below are the ones `raysampler.algorithms.dglmc` has always offered."""

from __future__ import annotations

from typing import Any

from .algorithm import DGLMC, check_overrelax, is_schedule, normalise_schedule
from .coordinator import shard_sum
from .kernels import CENTRE_STEPS, KERNELS, LOCAL_KERNELS, LocalGaussian
from .kernels.mala import LOCAL_MALA_STEPS
from .recentre import RECENTRE_BELOW, RECENTRE_TRUST
from .types import (
    CoordinatorConsts,
    CoordinatorState,
    Message,
    Reply,
    ReportChain,
    RoundMessage,
    WorkerPayload,
    WorkerState,
)

#: kernels whose shards a worker process steps as one batch (`kernels.BatchKernel`)
STACKED_KERNELS = tuple(name for name, kernel in KERNELS.items() if kernel.batches)

#: names this module had before it became a package, and what replaced them
_MOVED = {
    "ChainState": "each local kernel's own state: raysampler.algorithms.dglmc.kernels (LMCState, LaplaceMHState, "
    "MALAState, NewtonState), held in WorkerState.chains",
    "StackedWorkers": "raysampler.algorithms.stacking.stack of WorkerState batches (a batch of one per shard)",
}


def __getattr__(name: str) -> Any:
    if name in _MOVED:
        raise AttributeError(f"raysampler.algorithms.dglmc.{name} is gone; use {_MOVED[name]}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "CENTRE_STEPS",
    "DGLMC",
    "KERNELS",
    "LOCAL_KERNELS",
    "LOCAL_MALA_STEPS",
    "RECENTRE_BELOW",
    "RECENTRE_TRUST",
    "STACKED_KERNELS",
    "CoordinatorConsts",
    "CoordinatorState",
    "LocalGaussian",
    "Message",
    "Reply",
    "ReportChain",
    "RoundMessage",
    "WorkerPayload",
    "WorkerState",
    "check_overrelax",
    "is_schedule",
    "normalise_schedule",
    "shard_sum",
]
