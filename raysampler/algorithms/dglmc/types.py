"""DG-LMC's payloads, messages and replies, and the coordinator's state ([DG-LMC] Plassier et al., ICML 2021).

The workers' chain states are their local kernels' own (`kernels/`); what crosses between coordinator and workers is
here: the payload a worker starts from, the round's message (θ and N_i), the reply (z_i), and the coordinator's
fixed Gaussian conditional θ | z (eq. 5).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from ...models.contract import EtaHessian
from ..mcmc import DualAveraging


@dataclass(frozen=True)
class WorkerPayload:
    """Everything a worker needs to start its local kernel: fixed for the run (coordinates φ)."""

    z0: np.ndarray  # (K, d) initial z_i (K, d + l_i with local parameters)
    rho: float
    gamma: float  # LMC step size (kernel "lmc") or initial MALA step size (kernels "mala", the report chain)
    kernel: str  # the local kernel's name (`kernels.KERNELS`)
    target_accept: float
    quadratic: tuple | None = None  # (c, g, P): U_i(z) ≈ gᵀ(z − c) + ½(z − c)ᵀP(z − c), for "laplace_mh"
    overrelax: float = 0.0  # β of the over-relaxed local move ("laplace_mh", "newton_mh"; 0: none)
    #: MALA: adapt one step size per chain (with group effects: a chain far in the sd's tail, where the non-centred
    #: η's curvature grows like sd², would otherwise keep the common step and stop moving)
    per_chain_step: bool = False
    #: kernel "newton_mh": the coordinates of θ the interweaving move changes on this shard (`Model.centring`) and
    #: the Cholesky factor (in θ's units) of its random-walk proposal, ρ times their conditional covariance under
    #: the Laplace approximation (the step is scaled per chain during burn-in)
    centre: tuple[np.ndarray, np.ndarray] | None = None
    #: send z_i/ρ_i in fixed point (`privacy.fixed_point`), as a secure-sums run's sites do before masking, among
    #: `parties` shards (the range each term must stay in)
    fixed_point: bool = False
    parties: int = 1
    #: the DP mode (kernel "lmc"): clip every row's gradient to norm C (`privacy.clipping`); None: no clipping
    clip: float | None = None
    clip_rule: str = "gradient"  # how ("gradient" or "features": `privacy.dp.DP.clip_rule`)


class FixedSum(NamedTuple):
    """A worker that sends its term of Σ_i z_i/ρ_i in fixed point: 1/ρ_i (an array (1,) per shard, so that shards
    with different ρ_i still step as one batch) and the number of parties whose terms are summed."""

    inv_rho: np.ndarray
    parties: int


class ReportChain(NamedTuple):
    """With local parameters (group effects): a second chain on shard i's η_i whose target is their exact conditional
    p(η_i | θ, y_i) ∝ exp(−U_i(θ, η_i)) given the coordinator's θ — not the worker's copy z_i — so that the reported
    pairs (θ, η_i) follow the hierarchical posterior up to θ's own ρ-bias. The (z_i, η_i) chain alone relates η_i to
    z_i, which leans towards shard i's own fit by O(ρ H_i) and shifts every group effect of the shard with it."""

    log_h0: float  # the initial MALA log step size (log γ_i)
    target_accept: float
    eta: np.ndarray  # (K, l_i)
    log_h: float | np.ndarray  # current MALA log step size (one per chain with `per_chain_step`)
    da: DualAveraging
    given: np.ndarray | None = None  # (K, d): the θ (φ) the last round's η_i were drawn given
    #: kernel "newton_mh": ∇²_ηη U_i and ∇²_ηθ U_i at (given, eta), for the next round's conditional shift
    hess: EtaHessian | None = None
    cross: np.ndarray | None = None


class WorkerState(NamedTuple):
    """A DG-LMC worker: its local kernel's name (`kernels.KERNELS`), that kernel's state of its chains (a batch of one
    shard for a `BatchKernel`), and with local parameters the report chain of η_i | θ."""

    kernel: str
    chains: Any
    report: ReportChain | None = None
    fixed: FixedSum | None = None  # the reply carries z_i/ρ_i in fixed point (`Reply.summed`), not z_i


class Message(NamedTuple):
    """Round t's message to one shard: θ (K, d), its N_i, whether it is burn-in, and whether to re-centre the
    "laplace_mh" proposal at θ (`recentre.py`)."""

    phi: np.ndarray
    n_steps: int
    warmup: bool
    recentre: bool = False


class RoundMessage(NamedTuple):
    """Round t's message to every shard at once (kernels that step several shards as one batch): θ (K, d), each
    shard's N_i (b,), and whether it is burn-in. Every worker process gets the same bytes and reads its shards' N_i."""

    phi: np.ndarray
    n_steps: np.ndarray
    warmup: bool
    chains: tuple[int, int] | None = None  # a pipelined run's half-round: its chain group [a, b) (phi is theirs)
    recentre: np.ndarray | None = None  # kernel "laplace_mh": per shard, re-centre the proposal at θ (b,) bool

    def batch_keys(self, shards: np.ndarray) -> np.ndarray:
        """What shards stepped as one batch must share (`runtime.batches`), one value per shard of `shards`: their
        N_i and whether they re-centre their proposal (each sets the batch's arithmetic)."""
        if self.recentre is None:
            return self.n_steps[shards]
        return 2 * self.n_steps[shards] + self.recentre[shards]


class Reply(NamedTuple):
    """Worker i's reply; stepped as a batch, the batch's replies stacked along a first axis over its shards (z
    (B, K, d), accept (B, K)), and the coordinator gets every shard's that way (b, K, d).

    With fixed-point sums (`WorkerPayload.fixed_point`, and every secure-sums run) z is None: the worker sends
    instead its term z_i/ρ_i in fixed point (`summed`, uint64 (K, d); masked by its site in a secure-sums run) and a
    flag of its own (`status` (1,): 0, or NaN where z_i was non-finite or beyond the fixed point's range), which
    the coordinator's non-finite check reads as it reads z."""

    z: np.ndarray | None  # (K, d): z_i (the global part only, with local parameters)
    accept: np.ndarray | None
    local: np.ndarray | None = None  # (K, l_i): the local parameters on their reported scale (group effects r)
    given: np.ndarray | None = None  # (K, d): the θ (coordinates φ) that `local` was drawn given
    summed: np.ndarray | None = None  # (K, d) uint64: z_i/ρ_i in fixed point (masked in a secure-sums run)
    status: np.ndarray | None = None  # (1,): 0.0, or NaN where the site found its term non-finite or out of range
    #: the DP mode: per-example gradients clipped during the round, summed over its steps and chains (B,)
    clipped: np.ndarray | None = None


class LocalRound(NamedTuple):
    """What a local kernel needs of round t's message, for one shard or for a batch of shards that share it: θ (K, d)
    (a pipelined half-round's chain group only), N_i, burn-in or not, whether to re-centre the Laplace proposal, and
    a pipelined run's chain group [a, b) of this half-round (None: the whole round)."""

    phi: np.ndarray
    n_steps: int
    warmup: bool
    recentre: bool = False
    chains: tuple[int, int] | None = None


@dataclass(frozen=True)
class CoordinatorConsts:
    """The fixed Gaussian conditional θ | z (eq. 5): μ = (b0 + Σ z_i/ρ_i) Q⁻¹, θ = μ + ξ Cᵀ with C Cᵀ = Q⁻¹; with
    over-relaxation α ≠ 0, θ' = μ + α(θ − μ) + √(1 − α²) ξ Cᵀ, which leaves the same conditional invariant."""

    q_inv: np.ndarray
    chol_q_inv: np.ndarray
    b0: np.ndarray
    inv_rho: np.ndarray
    overrelax: float = 0.0
    stacked: bool = False  # the workers step their shards as one batch: one `RoundMessage` per round
    recentre: bool | str = False  # kernel "laplace_mh": re-centre its proposal (True, False or "auto")
    fixed_point: bool = False  # the replies carry Σ_i's terms in fixed point (`Reply.summed`): s is their sum
    adapts_to: float | None = None  # an adapting local kernel ("mala"): the acceptance its step size aims at


class CoordinatorState(NamedTuple):
    phi: np.ndarray  # (K, d)
    consts: CoordinatorConsts
    pending: np.ndarray | None = None  # a pipelined round's noise for the later chain group, drawn with the first's
    #: recentre="auto": each shard's local acceptance summed over the chains and rounds of the burn-in but its last
    #: round, and how many chain-rounds that is
    warm_accept: np.ndarray | None = None
    warm_count: int = 0
