"""DG-LMC's local kernels, one module each, chosen once by their user-facing name (`KERNELS`)."""

from __future__ import annotations

from .base import BatchKernel, LocalKernel, OneShard, ShardKernel
from .laplace_mh import LaplaceMH, LaplaceMHState, LocalGaussian
from .lmc import LMC, LMCState
from .mala import MALA, MALAState
from .newton_mh import CENTRE_STEPS, NewtonMH, NewtonState, newton_blocks

#: the local kernels by the name `DGLMC.local_kernel` (and the REST option) gives them
KERNELS: dict[str, LocalKernel] = {k.name: k for k in (LaplaceMH(), NewtonMH(), MALA(), LMC())}
#: their names, in the order the docs list them
LOCAL_KERNELS = tuple(KERNELS)

__all__ = [
    "CENTRE_STEPS",
    "KERNELS",
    "LMC",
    "LOCAL_KERNELS",
    "MALA",
    "BatchKernel",
    "LMCState",
    "LaplaceMH",
    "LaplaceMHState",
    "LocalGaussian",
    "LocalKernel",
    "MALAState",
    "NewtonMH",
    "NewtonState",
    "OneShard",
    "ShardKernel",
    "newton_blocks",
]
