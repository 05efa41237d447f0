"""What a DG-LMC local kernel is: a pure `init`/`step` pair moving worker i's z_i under Π_ρ(z_i | θ) ∝
exp(−U_i(z_i) − ‖z_i − θ‖²/(2ρ_i)) ([DG-LMC] Plassier et al., ICML 2021, eq. 4's target), with what tuning needs to
know of it.

Two shapes, one decision each:
* `BatchKernel` (lmc, laplace_mh): its state's arrays carry a leading shard axis, and `step` moves B shards at
  once; one shard is a batch of one. A worker process holding several shards steps them as one batch
  (`runtime.batches`), every shard getting bit for bit what it gets alone.
* `ShardKernel` (mala, newton_mh): its state is one shard's. MALA adapts its step size to the shard's own acceptance
  history and Newton–MH moves a shard's local parameters (group effects), whose number differs between shards, so
  neither could share a batch.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

import numpy as np

from ....models.contract import Model, ShardStack
from ....streams import ChainNoise, StackedNoise
from ..types import LocalRound, ReportChain, WorkerPayload


class LocalKernel(ABC):
    """A local kernel: its name in options and REST, and what tuning must know of it."""

    #: the user-facing name (`DGLMC.local_kernel`, the REST option), the key of `KERNELS`
    name: ClassVar[str]
    #: a Metropolis–Hastings kernel: Π_ρ(z_i | θ) exactly invariant, so over-relaxation may be used and the replies
    #: carry acceptance rates; LMC (eq. 4) is not, and its default N_i is sec. 3.2.2's N_avg
    exact: ClassVar[bool] = True
    #: its state carries a leading shard axis (`BatchKernel`; else `ShardKernel`)
    shard_axis: ClassVar[bool] = False
    #: steps several shards as one batch (`BatchKernel`)
    batches: ClassVar[bool] = False
    #: available with shard-local parameters (group effects) / without them
    with_local_params: ClassVar[bool] = True
    without_local_params: ClassVar[bool] = True
    #: proposes from the worker's Laplace quadratic of U_i (tuning must compute each shard's)
    needs_quadratics: ClassVar[bool] = False
    #: its local move is over-relaxed with the coordinator's α (near-exact Gibbs draws of z_i | θ), and "auto" picks
    #: α from the workers' Laplace models
    overrelaxes: ClassVar[bool] = False
    #: its proposal may be re-centred at each round's θ (`recentre.py`)
    recentres: ClassVar[bool] = False
    #: moves the report chain η_i | θ itself (with local parameters); otherwise `report.report_steps` does
    moves_report: ClassVar[bool] = False
    #: interweaves centred random-walk steps (tuning computes each shard's proposal: `tuning.centring_proposals`)
    interweaves: ClassVar[bool] = False
    #: an exact kernel's default N_i with local parameters (without them: 1)
    steps_with_local_params: ClassVar[int] = 1
    #: its step size adapts during warm-up (to `DGLMC.target_accept`, by dual averaging): the warm-up waits for it
    #: to settle (`Algorithm.adaptation`)
    adapts: ClassVar[bool] = False


class BatchKernel(LocalKernel):
    """A kernel over a leading shard axis: `init` gives a batch of one, `step` moves a batch."""

    shard_axis = True
    batches = True

    @abstractmethod
    def init(self, payload: WorkerPayload, model: Model, X: np.ndarray, y: np.ndarray) -> Any:
        """One shard's state, as a batch of one."""

    @abstractmethod
    def step(
        self, state: Any, rnd: LocalRound, model: Model, data: ShardStack, noise: StackedNoise | OneShard
    ) -> tuple[Any, np.ndarray, np.ndarray | None]:
        """N_i steps of every shard of the batch: (new state, z (B, K, w) of the round's chains, their mean
        acceptance (B, K) or None)."""


class ShardKernel(LocalKernel):
    """A kernel on one shard's chains."""

    @abstractmethod
    def init(self, payload: WorkerPayload, model: Model, X: np.ndarray, y: np.ndarray) -> Any:
        """The shard's state."""

    @abstractmethod
    def step(
        self,
        state: Any,
        report: ReportChain | None,
        rnd: LocalRound,
        model: Model,
        X: np.ndarray,
        y: np.ndarray,
        noise: ChainNoise,
    ) -> tuple[Any, ReportChain | None]:
        """N_i steps: (new state, the report chain: moved with the state by a kernel that `moves_report`, else as
        given)."""


class OneShard:
    """One shard's `ChainNoise` as a batch of one's streams: the same numbers with a shard axis of length 1."""

    def __init__(self, noise: ChainNoise) -> None:
        self.noise = noise

    def normal(self, n: int) -> np.ndarray:
        return self.noise.normal(n)[:, None]

    def uniform(self, n: int) -> np.ndarray:
        return self.noise.uniform(n)[:, None]


def start(model: Model, X: np.ndarray, y: np.ndarray, z0: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The chains' initial (z, U_i(z), ∇U_i(z)); a non-finite U_i at the start is the user's init's fault."""
    z = np.array(z0, dtype=float)
    pot, grad = model.potential_and_grad(X, y, z)
    if not np.all(np.isfinite(pot)):
        raise FloatingPointError("the initial point gives a non-finite potential U_i: choose another init")
    return z, pot, grad


def column(value: float) -> np.ndarray:
    """A per-shard constant as a batch of one's (1, 1, 1) array, broadcasting against (B, K, d)."""
    return np.full((1, 1, 1), value, dtype=float)


def round_noise(
    noise: StackedNoise | OneShard, rnd: LocalRound, pending: Any, uniforms: bool
) -> tuple[np.ndarray, np.ndarray | None, Any]:
    """The round's normals (N, B, K', w) and log-uniforms (N, B, K') (with `uniforms`) for this half-round's chains,
    and what to keep for the other half: a whole round or its first half draws every chain's numbers (so that a
    chain's numbers do not depend on the pipelining) and keeps the later group's, shard axis first (B, N, K', ...);
    the second half takes those."""
    group = rnd.chains
    if group is not None and group[0] != 0:  # the second half: the numbers the first drew for these chains
        assert pending is not None
        xi, logu = pending
        return np.moveaxis(xi, 0, 1), (np.moveaxis(logu, 0, 1) if logu is not None else None), None
    xi = noise.normal(rnd.n_steps)  # (N, B, K, w)
    logu = np.log(noise.uniform(rnd.n_steps)) if uniforms else None  # (N, B, K)
    if group is None:
        return xi, logu, None
    cut = group[1]
    kept = (np.moveaxis(xi[:, :, cut:], 1, 0), np.moveaxis(logu[:, :, cut:], 1, 0) if logu is not None else None)
    return xi[:, :, :cut], (logu[:, :, :cut] if logu is not None else None), kept


def put(whole: np.ndarray, chains: tuple[int, int] | None, part: np.ndarray) -> np.ndarray:
    """`part` as the new value of a batch array's chains (axis 1): itself for all chains, else a copy of `whole` with
    that group's chains replaced."""
    if chains is None:
        return part
    out = whole.copy()
    out[:, chains[0] : chains[1]] = part
    return out


def chain_slice(chains: tuple[int, int] | None) -> slice:
    """The batch arrays' chains (axis 1) that a (half-)round steps."""
    return slice(None) if chains is None else slice(chains[0], chains[1])
