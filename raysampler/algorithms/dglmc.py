"""DG-LMC: Distributed Gibbs with Langevin Monte Carlo ([DG-LMC], Algorithm 1), with turn-key tuning.

Augmented target Π_ρ(θ, z_1..z_b) ∝ exp(−Σ_i [U_i(z_i) + ‖z_i − θ‖²/(2ρ_i)]) (eq. 2, A_i = I), sampled
by Gibbs: each worker moves z_i with N_i local steps targeting Π_ρ(z_i | θ) (eq. 4); the coordinator
draws θ | z exactly from N(μ, Q⁻¹) (eq. 5) with Q factored once.

Everything runs in whitened coordinates φ with θ = θ* + Lφ (Laplace preconditioner; identity for the
paper's plain rules), so the coupling ‖z_i − φ‖²/(2ρ_i) is measured in posterior units.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
from scipy.special import log_ndtr

from ..errors import ArgumentError
from ..models.base import Model
from ..models.contract import EtaHessian, LocalCurvature, ShardStack
from ..reparam import with_prior_share
from ..streams import ChainNoise, StackedNoise
from ..tuning import budget
from ..tuning.curvature import smoothness_bounds
from ..tuning.laplace import (
    PRECONDITIONERS,
    initial_points,
    laplace_step,
    laplace_step_local,
    resolve_preconditioner,
    starts_at_map,
)
from ..tuning.overrelax import overrelax_for_laplace_model
from ..tuning.report import BiasPrediction, TuningReport
from ..tuning.shards import shard_centring
from .base import Algorithm, Plan, RoundInfo, ShardPool
from .checks import check_choice, check_init, check_per_shard, check_unit, per_shard
from .mcmc import (
    DualAveraging,
    block_cholesky,
    dual_averaging,
    mala_log_ratio,
    mh_accept,
    newton_log_density,
    newton_proposal,
)

LOCAL_KERNELS = ("laplace_mh", "newton_mh", "mala", "lmc")
#: kernels whose shards a worker process steps as one batch (`DGLMC.step_stacked`): no adaptation couples a shard's
#: chains to its own acceptance history, and no shard-local parameters make the shards' widths differ
STACKED_KERNELS = ("laplace_mh", "lmc")
LOCAL_MALA_STEPS = 10  # default N_i of the MALA local kernel with group effects (shard-local η_i)
#: kernel "laplace_mh": the re-centring step's cap, in proposal sds (‖A⁻¹∇r(m)‖_A). The step is a Newton step on
#: the remainder's linearisation at m, which stops holding a few sds away: softmax on digits (d = 650, diagonal
#: Laplace model) asked for 3–8 sds and its two chains accepted 0.28 and 0.00 of their moves; capped at 2, 0.96
#: (1: 0.93; 4: 0.19–0.28); breast_cancer's steps stay under the cap (0.97 either way)
RECENTRE_TRUST = 2.0

#: kernel "laplace_mh", recentre="auto": shards whose plain proposal is accepted less often than this during burn-in
#: re-centre it after. A rejection weakens the over-relaxation (β_eff = aβ + 1 − a at acceptance a), while the
#: re-centring costs a gradient a round: on breast_cancer (0.82) it gave 2.3–2.7× the ESS/s, on covtype_like's
#: 25,000-row shards (0.986, nothing to gain) it would have cost 2.5× the round
RECENTRE_BELOW = 0.9

#: kernel "newton_mh": interweaving (centred) random-walk steps per sweep (each O(l_i), no pass over the rows)
CENTRE_STEPS = 3


@dataclass(frozen=True)
class WorkerPayload:
    """Everything a worker needs to run its local kernel: fixed for the run (coordinates φ)."""

    z0: np.ndarray  # (K, d) initial z_i
    rho: float
    gamma: float  # LMC step size (kernel "lmc") or initial MALA step size (kernel "mala")
    kernel: str
    target_accept: float
    quadratic: tuple | None = None  # (c, g, P): U_i(z) ≈ gᵀ(z − c) + ½(z − c)ᵀP(z − c), for "laplace_mh"
    overrelax: float = 0.0  # β of the over-relaxed Laplace proposal (kernel "laplace_mh"; 0: independence proposal)
    #: MALA: adapt one step size per chain (with group effects: a chain far in the sd's tail, where the non-centred
    #: η's curvature grows like sd², would otherwise keep the common step and stop moving)
    per_chain_step: bool = False
    #: kernel "newton_mh": the coordinates of θ the interweaving move changes on this shard (`Model.centring`) and
    #: the Cholesky factor (in θ's units) of its random-walk proposal, ρ times their conditional covariance under
    #: the Laplace approximation (the step is scaled per chain during burn-in)
    centre: tuple[np.ndarray, np.ndarray] | None = None


class ChainState(NamedTuple):
    """Worker i's chains: latent z_i (K, d), cached U_i(z_i) and ∇U_i(z_i), MALA step-size adaptation, the mean
    acceptance of the last round, and (kernel "laplace_mh") the cached remainder r(z_i) = U_i(z_i) − its Laplace
    quadratic, so a round evaluates the quadratic once per proposal only (None: not yet computed)."""

    z: np.ndarray
    pot: np.ndarray
    grad: np.ndarray
    log_h: float | np.ndarray  # current MALA log step size (one per chain with `per_chain_step`)
    da: DualAveraging
    accept: np.ndarray  # (K,)
    remainder: np.ndarray | None = None  # (K,)
    report: ReportChain | None = None  # with local parameters: the chain of η_i given θ whose draws are reported
    curv: LocalCurvature | None = None  # kernel "newton_mh": the model's curvature at z (what the next step reuses)
    eta_accept: np.ndarray | None = None  # kernel "newton_mh": the mean acceptance of the η blocks' moves (K,)


class ReportChain(NamedTuple):
    """With local parameters (group effects): a second chain on shard i's η_i whose target is their exact conditional
    p(η_i | θ, y_i) ∝ exp(−U_i(θ, η_i)) given the coordinator's θ — not the worker's copy z_i — so that the reported
    pairs (θ, η_i) follow the hierarchical posterior up to θ's own ρ-bias. The (z_i, η_i) chain alone relates η_i to
    z_i, which leans towards shard i's own fit by O(ρ H_i) and shifts every group effect of the shard with it."""

    eta: np.ndarray  # (K, l_i)
    log_h: float | np.ndarray  # current MALA log step size (one per chain with `per_chain_step`)
    da: DualAveraging
    given: np.ndarray | None = None  # (K, d): the θ (φ) the last round's η_i were drawn given
    #: kernel "newton_mh": ∇²_ηη U_i and ∇²_ηθ U_i at (given, eta), for the next round's conditional shift
    hess: EtaHessian | None = None
    cross: np.ndarray | None = None


class LocalGaussian(NamedTuple):
    """Worker i's Laplace approximation of Π_ρ(z_i | θ): with U_i(z) ≈ gᵀ(z − c) + ½(z − c)ᵀP(z − c) (its own shard's
    gradient and Hessian at the MAP c), z | θ ≈ N(A⁻¹(θ/ρ − g + Pc), A⁻¹), A = P + I/ρ; C Cᵀ = A⁻¹."""

    c: np.ndarray
    g: np.ndarray
    P: np.ndarray
    a_inv: np.ndarray
    chol: np.ndarray
    shift: np.ndarray  # Pc − g: the θ-free part of the proposal mean


class WorkerState(NamedTuple):
    """A DG-LMC worker: its fixed payload, its factored local proposal (kernel "laplace_mh") and its chains."""

    payload: WorkerPayload
    local: LocalGaussian | None
    chains: ChainState


class Message(NamedTuple):
    phi: np.ndarray  # θ of the current round (K, d)
    n_steps: int
    warmup: bool
    recentre: bool = False  # kernel "laplace_mh": re-centre this round's proposal at θ (`_laplace_mh_steps`)


class RoundMessage(NamedTuple):
    """Round t's message to every shard at once (kernels that step several shards as one batch): θ (K, d), each
    shard's N_i (b,), and whether it is burn-in. Every worker process gets the same bytes and reads its shards' N_i."""

    phi: np.ndarray
    n_steps: np.ndarray
    warmup: bool
    chains: tuple[int, int] | None = None  # a pipelined run's half-round: its chain group [a, b) (phi is theirs)
    recentre: np.ndarray | None = None  # kernel "laplace_mh": per shard, re-centre the proposal at θ (b,) bool


class Reply(NamedTuple):
    """Worker i's reply; stepped as a batch, the batch's replies stacked along a first axis over its shards (z
    (B, K, d), accept (B, K)), and the coordinator gets every shard's that way (b, K, d)."""

    z: np.ndarray  # (K, d): z_i (the global part only, with local parameters)
    accept: np.ndarray | None
    local: np.ndarray | None = None  # (K, l_i): the local parameters on their reported scale (group effects r)
    given: np.ndarray | None = None  # (K, d): the θ (coordinates φ) that `local` was drawn given


class StackedWorkers(NamedTuple):
    """Several shards' workers as one batch (kernels "laplace_mh" and "lmc" without local parameters): their per-shard
    constants as (B, 1, 1) arrays, their factored proposals and chains stacked along a first axis (B, ...). `states`
    keeps what stepping never changes (payloads, the step-size state), for `unstack_states`."""

    states: tuple[WorkerState, ...]
    rho: np.ndarray
    inv_rho: np.ndarray
    gamma: np.ndarray
    scale: np.ndarray  # √(2γ)
    beta: np.ndarray  # over-relaxation β
    beta_c: np.ndarray  # √(1 − β²)
    local: LocalGaussian | None  # stacked: c (B, d), g (B, d), P, a_inv, chol (B, d, d), shift (B, d)
    z: np.ndarray  # (B, K, d)
    pot: np.ndarray  # (B, K)
    grad: np.ndarray  # (B, K, d)
    accept: np.ndarray  # (B, K)
    remainder: np.ndarray | None  # (B, K), kernel "laplace_mh"
    #: a pipelined round's random numbers for the later chain group, drawn with the first group's (normals, log u)
    pending: tuple[np.ndarray, np.ndarray | None] | None = None


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


class CoordinatorState(NamedTuple):
    phi: np.ndarray  # (K, d)
    consts: CoordinatorConsts
    pending: np.ndarray | None = None  # a pipelined round's noise for the later chain group, drawn with the first's
    #: recentre="auto": each shard's local acceptance summed over the chains and rounds of the burn-in but its last
    #: round, and how many chain-rounds that is
    warm_accept: np.ndarray | None = None
    warm_count: int = 0


@dataclass(frozen=True)
class DGLMC(Algorithm):
    """DG-LMC with Laplace preconditioning, exact (MALA) local steps and ρ set from a stated bias budget.

    Parameters (all optional; the defaults are turn-key):
      preconditioner: "auto" (dense Laplace for d ≤ 300, diagonal above), "laplace", "diag", or None for the
        paper's plain rules (ρ_i = 1/M_i, γ_i = 0.25ρ_i/(ρ_iM_i + 1), N_avg from sec. 3.2.2, LMC steps, bound M_i).
      local_kernel: "laplace_mh" (MH on Π_ρ(z_i | θ) proposing from the worker's Laplace approximation of it,
        re-centred at each round's θ by one gradient: exact, no γ-bias; the default), "mala" (MALA within Gibbs,
        step size adapted during burn-in) or "lmc" (eq. 4; the default under the paper's rules).
      bias_budget: δ: ρ is the largest value for which π_ρ, under the workers' Laplace (quadratic) models of U_i,
        keeps every coordinate's mean within δ posterior sd and its sd within a factor 1 + δ of the posterior's
        (`tuning.budget.dglmc_rho`).
      rho, gamma: override ρ_i, γ_i (scalar or one per shard, in the sampler's coordinates).
      n_local: fix N_i (scalar or one per shard); fixing it turns speed balancing off.
      gamma_fraction: γ_i = gamma_fraction·ρ_i/(ρ_iM_i + 1) for LMC (paper: 0.1–0.5).
      curvature: "map" (M_i = λ_max of the whitened local Hessian at the MAP) or "bound" (the model's M_i).
      init: "map" (chains start at the MAP plus a Laplace draw), "zeros", or an array (d,) or (K, d).
      target_accept: MALA acceptance target during burn-in.
      overrelax: α ∈ (−1, 1) for over-relaxed Gibbs updates (Adler 1981; Neal 1998): θ' = μ + α(θ − μ) + √(1 − α²)ξ
        for θ | z, and the same move as the Laplace proposal for z_i | θ (kernel "laplace_mh"). Each update still
        leaves its conditional of Π_ρ invariant, so the chain's law is unchanged; only its autocorrelation falls.
        "auto" (default): the α minimising the predicted integrated autocorrelation time of θ and θ² under the
        workers' Laplace models (`tuning.overrelax`) with kernel "laplace_mh", 0 otherwise. 0 is the
        paper's plain Gibbs sampler. Needs an exact local kernel ("laplace_mh" or "mala").
      recentre: kernel "laplace_mh" only: re-centre each round's proposal at θ by the gradient of U_i's remainder
        beyond its Laplace model (one gradient per round and shard; `_laplace_mh_steps`). "auto" (default): the
        shards whose plain proposal was accepted less than `RECENTRE_BELOW` of the time during burn-in, from the
        end of burn-in on; True: always; False: never.
    """

    preconditioner: str | None = "auto"
    local_kernel: str | None = None
    bias_budget: float = 0.05
    rho: Any = None
    gamma: Any = None
    n_local: Any = None
    gamma_fraction: float = 0.25
    curvature: str | None = None
    init: Any = "map"
    target_accept: float = 0.574
    overrelax: Any = "auto"
    recentre: Any = "auto"
    name: str = field(default="dglmc", init=False)
    supports_local_params = True  # group effects: worker state (z_i, η_i), coupling on z_i only (`_prepare_local`)

    def __post_init__(self) -> None:
        check_choice("preconditioner", self.preconditioner, PRECONDITIONERS)
        if self.local_kernel is not None:
            check_choice("local_kernel", self.local_kernel, LOCAL_KERNELS)
        check_unit("bias_budget", self.bias_budget)
        check_unit("gamma_fraction", self.gamma_fraction, closed=True)
        check_unit("target_accept", self.target_accept)
        if self.curvature is not None:
            check_choice("curvature", self.curvature, ("map", "bound"))
        check_per_shard("rho", self.rho)
        check_per_shard("gamma", self.gamma)
        if is_schedule(self.n_local):
            object.__setattr__(self, "n_local", normalise_schedule(self.n_local))
        else:
            check_per_shard("n_local", self.n_local, integer=True)
        check_init(self.init)
        if not (isinstance(self.overrelax, str) and self.overrelax == "auto"):
            check_overrelax(self.overrelax)
        if not (self.recentre is True or self.recentre is False or self.recentre == "auto"):
            raise ArgumentError(
                ("algorithm", "recentre"), f"recentre must be true, false or 'auto', got {self.recentre!r}"
            )
        self._check_recentre(self.local_kernel or ("lmc" if self.preconditioner is None else None))

    def _check_recentre(self, kernel: str | None) -> None:
        """recentre=True asks for the 'laplace_mh' kernel's re-centred proposal: refuse it with another kernel (None:
        not known yet, checked again when tuning resolves it)."""
        if self.recentre is True and kernel not in (None, "laplace_mh"):
            raise ArgumentError(
                ("algorithm", "recentre"),
                f"recentre re-centres the 'laplace_mh' local kernel's proposal; this run's kernel is {kernel!r}",
            )

    # --- tuning ---------------------------------------------------------------------------------

    def prepare(self, model: Model, pool: ShardPool, *, chains: int, seed: int, noise: ChainNoise) -> Plan:
        if model.has_local_params():
            return self._prepare_local(model, pool, chains=chains, seed=seed, noise=noise)
        b, d = pool.num_shards, model.dim
        kind = resolve_preconditioner(self.preconditioner, d)
        paper_rules = kind is None
        kernel = self.local_kernel or ("lmc" if paper_rules else "laplace_mh")
        if kernel == "newton_mh":
            raise ArgumentError(
                ("algorithm", "local_kernel"),
                "local_kernel='newton_mh' moves a model's local parameters (group effects) block by block; this "
                "model has none: use 'laplace_mh' (the default), 'mala' or 'lmc'",
            )
        curvature = self.curvature or ("bound" if paper_rules else "map")
        if curvature == "bound" and not paper_rules:
            raise ValueError("curvature='bound' is the paper's rule and needs preconditioner=None")
        need_map = not paper_rules or curvature == "map" or kernel == "laplace_mh" or starts_at_map(self.init)
        need_quads = not paper_rules or curvature == "map" or kernel == "laplace_mh"
        lap = laplace_step(model, pool, seed=seed, preconditioner=kind, need_map=need_map, quadratics=need_quads)
        if curvature == "bound":
            M = smoothness_bounds(model, pool)
        else:
            assert lap.curvature is not None
            M = lap.curvature
        M = np.maximum(M, 1e-12)

        bias: BiasPrediction | None = None
        if self.rho is not None:
            rho = per_shard(self.rho, b, "rho")
        elif paper_rules:
            rho = 1.0 / M  # sec. 3.2.1
        else:
            start = ((1.0 + self.bias_budget) ** 2 - 1.0) / M.max()  # bounds the sd inflation in every direction
            r, bias = budget.dglmc_rho(lap, self.bias_budget, start)
            rho = np.full(b, r)
        if self.gamma is not None:
            gamma = per_shard(self.gamma, b, "gamma")
        else:
            gamma = self.gamma_fraction * rho / (rho * M + 1.0)  # sec. 3.2.1; MALA: initial step
        n_steps, balance, schedule = self._local_steps(b, rho, gamma, M, kernel, exact_default=1)

        phi0 = initial_points(self.init, lap, chains, d, noise)
        prior = model.prior()
        prior_P, prior_b = lap.precond.prior_in_phi(
            np.asarray(prior.gaussian.mean, dtype=float), prior.gaussian.precision
        )
        if self.overrelax == "auto":
            alpha = 0.0
            if kernel == "laplace_mh" and lap.quads is not None:
                alpha = overrelax_for_laplace_model([P for _, P in lap.quads], prior_P, rho)
        else:
            alpha = float(self.overrelax)
            if alpha != 0.0 and kernel == "lmc":
                raise ValueError(
                    "overrelax needs an exact local kernel (local_kernel='laplace_mh' or 'mala'): with 'lmc' the "
                    "chain's law would change"
                )
        self._check_recentre(kernel)
        consts = _coordinator_consts(
            prior_P, prior_b, rho, alpha, stacked=kernel in STACKED_KERNELS,
            recentre=self.recentre if kernel == "laplace_mh" else False,
        )  # fmt: skip
        quads = lap.quads
        payloads = [
            WorkerPayload(
                phi0,
                float(rho[i]),
                float(gamma[i]),
                kernel,
                self.target_accept,
                (lap.centre, *quads[i]) if kernel == "laplace_mh" and quads is not None else None,
                alpha if kernel == "laplace_mh" else 0.0,
            )
            for i in range(b)
        ]
        # the worker potential: U_i in the sampler's coordinates, plus a 1/b share of any non-Gaussian prior term
        worker_model = with_prior_share(lap.model(model), 1.0 / b)
        if worker_model is not model:
            pool.bind(worker_model)
        report = TuningReport(
            lap.precond.kind,
            bias_budget=None if paper_rules else self.bias_budget,
            bias=bias,
            theta_map=lap.theta_map,
            rho=rho,
            gamma=gamma,
            M=M,
            local_kernel=kernel,
            curvature=curvature,
            overrelax=alpha,
        )
        return _plan(phi0, consts, payloads, n_steps, balance, report, schedule, worker_model, lap)

    def _prepare_local(self, model: Model, pool: ShardPool, *, chains: int, seed: int, noise: ChainNoise) -> Plan:
        """Tuning with shard-local parameters η_i (group effects). Worker i's state is (z_i, η_i) (K, d + l_i) and
        its kernel targets exp(−U_i(z_i, η_i) − ‖z_i − θ‖²/(2ρ_i)) (the coupling on z_i only); θ | z is the usual
        Gaussian step. Marginally over the η_i this is DG-LMC on the shards' marginal likelihoods, so with no group
        spanning shards π_ρ → the hierarchical posterior as ρ → 0. The preconditioner whitens θ only (identity on
        η); ρ comes from the bias budget under each shard's Laplace-marginal quadratic in θ at the mode of θ's
        Laplace-marginal posterior (`tuning.laplace.laplace_step_local`)."""
        b, d = pool.num_shards, model.dim
        kind = resolve_preconditioner(self.preconditioner, d)
        if kind is None:
            raise ArgumentError(
                ("algorithm", "preconditioner"),
                "preconditioner=None (the paper's plain rules) is not available with group effects: use 'auto'",
            )
        kernel = self.local_kernel or "newton_mh"
        if kernel == "laplace_mh":
            raise ArgumentError(
                ("algorithm", "local_kernel"),
                "local_kernel='laplace_mh' is not available with group effects (the local parameters have no fixed "
                "Gaussian proposal): use 'mala' (the default) or 'lmc'",
            )
        if self.curvature == "bound":
            raise ArgumentError(("algorithm", "curvature"), "curvature='bound' is not available with group effects")
        self._check_recentre(kernel)
        ll = laplace_step_local(model, pool, seed=seed, preconditioner=kind)
        lap = ll.lap
        assert lap.curvature is not None and lap.prior_P is not None and lap.prior_b is not None
        M = np.maximum(lap.curvature, 1e-12)
        bias: BiasPrediction | None = None
        if self.rho is not None:
            rho = per_shard(self.rho, b, "rho")
        else:
            start = ((1.0 + self.bias_budget) ** 2 - 1.0) / M.max()
            r, _ = budget.dglmc_rho(lap, self.bias_budget, start)
            rho = np.full(b, r)
            bias = budget.dglmc_bias(lap, float(rho[0]))  # under the Laplace-marginal model, at the ρ used
        gamma = (
            per_shard(self.gamma, b, "gamma") if self.gamma is not None else self.gamma_fraction * rho / (rho * M + 1.0)
        )
        # MALA: several steps per round, so that η_i (which only the local steps move) keeps up with θ; on the
        # hierarchical linear test model 10 steps gave 2x the min bulk ESS/s of 1 step (and 40 steps 1x).
        # Newton–MH: one sweep (nearly an exact draw of each block)
        n_steps, balance, schedule = self._local_steps(
            b, rho, gamma, M, kernel, exact_default=1 if kernel == "newton_mh" else LOCAL_MALA_STEPS
        )
        phi0 = initial_points(self.init, lap, chains, d, noise)
        prior = model.prior()
        prior_P, prior_b = lap.precond.prior_in_phi(
            np.asarray(prior.gaussian.mean, dtype=float), prior.gaussian.precision
        )
        if self.overrelax != "auto":
            alpha = float(self.overrelax)
        elif kernel == "newton_mh" and lap.quads is not None:  # the local moves are near-exact Gibbs steps
            alpha = overrelax_for_laplace_model([P for _, P in lap.quads], prior_P, rho)
        else:
            alpha = 0.0
        if alpha != 0.0 and kernel == "lmc":
            raise ValueError("overrelax needs an exact local kernel (local_kernel='mala' with group effects)")
        consts = _coordinator_consts(prior_P, prior_b, rho, alpha)
        centres: list[tuple[np.ndarray, np.ndarray] | None] = [None] * b
        if kernel == "newton_mh":
            centres = _centring_proposals(pool.map(shard_centring, [()] * b), lap.precond, rho)
        payloads = [
            WorkerPayload(
                np.concatenate([phi0, np.repeat(ll.eta_map[i][None, :], chains, axis=0)], axis=1),
                float(rho[i]),
                float(gamma[i]),
                kernel,
                self.target_accept,
                overrelax=alpha if kernel == "newton_mh" else 0.0,
                per_chain_step=True,
                centre=centres[i],
            )
            for i in range(b)
        ]
        worker_model = with_prior_share(lap.model(model), 1.0 / b)
        pool.bind(worker_model)
        report = TuningReport(
            lap.precond.kind,
            bias_budget=self.bias_budget,
            bias=bias,
            theta_map=lap.theta_map,
            rho=rho,
            gamma=gamma,
            M=M,
            local_kernel=kernel,
            curvature="map",
            overrelax=alpha,
        )
        return _plan(phi0, consts, payloads, n_steps, balance, report, schedule, worker_model, lap)

    def _local_steps(
        self, b: int, rho: np.ndarray, gamma: np.ndarray, M: np.ndarray, kernel: str, exact_default: int
    ) -> tuple[np.ndarray, bool, Any]:
        """(N_i per shard, whether the balancer may change them, the n_local schedule or None): `n_local` as given
        (per shard, or a schedule), else sec. 3.2.2's N_avg for LMC and `exact_default` for an exact kernel."""
        if isinstance(self.n_local, tuple) and self.n_local and isinstance(self.n_local[0], tuple):
            schedule = self.n_local
            if any(len(n) != b for _, n in schedule):
                raise ValueError(f"n_local schedule entries must have one step count per shard ({b})")
            return np.asarray(schedule[0][1], dtype=int), False, schedule
        if self.n_local is not None:
            return per_shard(self.n_local, b, "n_local").astype(int), False, None
        n_avg = math.ceil(np.mean(rho / (gamma * (rho * M + 1.0)))) if kernel == "lmc" else exact_default
        return np.full(b, n_avg, dtype=int), True, None

    # --- worker ---------------------------------------------------------------------------------

    def worker_init(self, payload: WorkerPayload, model: Model, X: np.ndarray, y: np.ndarray) -> WorkerState:
        z = np.array(payload.z0, dtype=float)
        pot, grad = model.potential_and_grad(X, y, z)
        log_h: float | np.ndarray = math.log(payload.gamma)
        if payload.per_chain_step:
            log_h = np.full(z.shape[0], log_h)
        if not np.all(np.isfinite(pot)):
            raise FloatingPointError("the initial point gives a non-finite potential U_i: choose another init")
        local = _local_gaussian(payload) if payload.kernel == "laplace_mh" else None
        d = int(model.dim)
        report = ReportChain(z[:, d:].copy(), log_h, DualAveraging.start(log_h)) if z.shape[1] > d else None
        curv = model.local_curvature(X, y, z, "theta") if payload.kernel == "newton_mh" else None
        return WorkerState(
            payload,
            local,
            ChainState(z, pot, grad, log_h, DualAveraging.start(log_h), np.ones(z.shape[0]), report=report, curv=curv),
        )

    def worker_step(
        self, state: WorkerState, message: Message, model: Model, X: np.ndarray, y: np.ndarray, noise: ChainNoise
    ) -> tuple[WorkerState, Reply]:
        payload, local, cs = state
        if payload.kernel == "lmc":
            cs = _lmc_steps(cs, message, payload, model, X, y, noise)
        elif payload.kernel == "laplace_mh":
            assert local is not None
            cs = _laplace_mh_steps(cs, message, payload, local, model, X, y, noise)
        elif payload.kernel == "newton_mh":
            cs = _newton_steps(cs, message, payload, model, X, y, noise)
        else:
            cs = _mala_steps(cs, message, payload, model, X, y, noise)
        if cs.report is not None and payload.kernel != "newton_mh":  # (newton_mh moves its report chain itself)
            cs = cs._replace(report=_report_steps(cs.report, message, payload, model, X, y, noise))
        return WorkerState(payload, local, cs), _reply(cs, payload.kernel != "lmc", message, model, X, y)

    # --- coordinator ----------------------------------------------------------------------------

    def messages(self, state: CoordinatorState, local_steps: np.ndarray, info: RoundInfo) -> list[Message]:
        flags = _recentring(state, info, len(local_steps))
        return [Message(state.phi, int(n), info.warmup, bool(f)) for n, f in zip(local_steps, flags)]

    def round_message(
        self, state: CoordinatorState, local_steps: np.ndarray, info: RoundInfo
    ) -> RoundMessage | list[Message]:
        """One `RoundMessage` for every shard when the kernel steps shards as one batch, else one per shard."""
        if not state.consts.stacked:
            return self.messages(state, local_steps, info)
        phi = state.phi if info.chains is None else state.phi[info.chains[0] : info.chains[1]]
        flags = _recentring(state, info, len(local_steps)) if state.consts.recentre is not False else None
        return RoundMessage(phi, np.asarray(local_steps, dtype=np.int64), info.warmup, info.chains, flags)

    def splits_chains(self, state: CoordinatorState) -> bool:
        """The batched kernels' chains are independent (no adaptation), so a round may run one chain group at a
        time."""
        return state.consts.stacked

    def coordinator_step(
        self, state: CoordinatorState, replies: Reply | list[Reply], noise: ChainNoise, info: RoundInfo
    ) -> tuple[CoordinatorState, np.ndarray]:
        """Eq. (5): θ ~ N(μ, Q⁻¹), μ = Q⁻¹(b0 + Σ_i z_i/ρ_i), drawn as μ + ξ Cᵀ (C C ᵀ = Q⁻¹ factored once);
        over-relaxed (α ≠ 0) as μ + α(θ − μ) + √(1 − α²) ξ Cᵀ. `replies` is one per shard, or all stacked."""
        c = state.consts
        if isinstance(replies, Reply):
            s = c.b0 + shard_sum(replies.z * c.inv_rho[:, None, None])
        else:
            s = c.b0 + sum(r.z * w for r, w in zip(replies, c.inv_rho))
        group, pending = info.chains, None
        if group is None or group[0] == 0:  # a whole round, or its first half: the round's numbers for every chain
            draw = noise.normal(1)[0]
            if group is not None:
                draw, pending = draw[: group[1]], draw[group[1] :]
        else:  # the second half: the numbers the first drew for these chains
            assert state.pending is not None
            draw = state.pending
        xi = draw @ c.chol_q_inv.T
        before = state.phi if group is None else state.phi[group[0] : group[1]]
        if c.overrelax == 0.0:
            phi = s @ c.q_inv + xi
        else:
            mu = s @ c.q_inv
            phi = mu + c.overrelax * (before - mu) + math.sqrt(1.0 - c.overrelax**2) * xi
        if group is not None:
            whole = state.phi.copy()
            whole[group[0] : group[1]] = phi
            phi = whole
        warm, counted = state.warm_accept, state.warm_count
        # recentre="auto": the plain proposal's acceptance per shard, over the burn-in but its last round, whose
        # second half a pipelined run takes only after sending the next round's first half (whose flags must
        # already be those of its second half: `_recentring`)
        accept = _shard_accepts(replies) if c.recentre == "auto" and info.t < info.burn_in - 1 else None
        if accept is not None:
            total = np.asarray(accept, dtype=float).sum(axis=1)
            warm, counted = (total if warm is None else warm + total), counted + accept.shape[1]
        return CoordinatorState(phi, c, pending, warm, counted), phi

    def local_draws(self, replies: Reply | list[Reply]) -> tuple[np.ndarray, np.ndarray] | None:
        """(θ in coordinates φ (K, d), the shards' local parameters drawn given it, reported scale, in shard order
        (K, Σ l_i)): the round's θ from the message, with each shard's `ReportChain` draw."""
        if isinstance(replies, Reply) or replies[0].local is None or replies[0].given is None:
            return None
        return replies[0].given, np.concatenate([r.local for r in replies if r.local is not None], axis=1)

    def reply_stats(self, replies: Reply | list[Reply]) -> dict[str, np.ndarray]:
        accept = _shard_accepts(replies)
        return {} if accept is None else {"local_accept": np.mean(accept, axis=0)}

    # --- several shards as one batch (kernels "laplace_mh" and "lmc") -------------------------------------------
    # The same operations as the per-shard functions below, on arrays with a leading shard axis: each matrix
    # product a stacked one (one BLAS call per shard, as there), everything else elementwise, so that every shard
    # gets bit for bit what it gets stepped alone.

    def stack_key(self, state: WorkerState) -> tuple[Any, ...] | None:
        """Which shards' states `stack_states` may put in one batch (None: this one steps alone)."""
        p, cs = state.payload, state.chains
        if p.kernel not in STACKED_KERNELS or cs.report is not None:
            return None
        return (p.kernel, p.overrelax == 0.0, cs.z.shape)

    def batch_keys(self, message: RoundMessage, shards: np.ndarray) -> np.ndarray:
        """What shards stepped as one batch must share in this round's message: their N_i and whether they
        re-centre their proposal."""
        if message.recentre is None:
            return message.n_steps[shards]
        return 2 * message.n_steps[shards] + message.recentre[shards]

    def stack_states(self, states: Sequence[WorkerState]) -> StackedWorkers:
        ps = [s.payload for s in states]

        def column(values: list[float]) -> np.ndarray:
            return np.asarray(values, dtype=float)[:, None, None]

        local = None
        if ps[0].kernel == "laplace_mh":
            locs = [s.local for s in states]
            assert all(loc is not None for loc in locs)
            local = LocalGaussian(*(np.stack(parts) for parts in zip(*locs)))
        chains = [s.chains for s in states]
        remainder = None
        if local is not None:  # computed as the per-shard step computes it at its start
            remainder = np.stack(
                [
                    cs.remainder if cs.remainder is not None else cs.pot - _quadratic(loc, cs.z)
                    for cs, loc in zip(chains, (s.local for s in states))
                    if loc is not None
                ]
            )
        return StackedWorkers(
            tuple(states),
            column([p.rho for p in ps]),
            column([1.0 / p.rho for p in ps]),
            column([p.gamma for p in ps]),
            column([math.sqrt(2.0 * p.gamma) for p in ps]),
            column([p.overrelax for p in ps]),
            column([math.sqrt(1.0 - p.overrelax * p.overrelax) for p in ps]),
            local,
            np.stack([cs.z for cs in chains]),
            np.stack([cs.pot for cs in chains]),
            np.stack([cs.grad for cs in chains]),
            np.stack([cs.accept for cs in chains]),
            remainder,
        )

    def split_stacked(self, sw: StackedWorkers) -> list[StackedWorkers]:
        """Each shard's slice of every stacked array (and of a pipelined round's pending numbers)."""
        out = []
        for j, state in enumerate(sw.states):
            one: list[Any] = [(state,)]
            for value in sw[1:]:
                if isinstance(value, np.ndarray):
                    one.append(value[j : j + 1])
                elif isinstance(value, LocalGaussian):
                    one.append(LocalGaussian(*(v[j : j + 1] for v in value)))
                elif isinstance(value, tuple):  # pending: arrays (N, B, K, ...) along axis 1
                    one.append(tuple(v[:, j : j + 1] if v is not None else None for v in value))
                else:
                    one.append(value)
            out.append(StackedWorkers(*one))
        return out

    def unstack_states(self, sw: StackedWorkers) -> list[WorkerState]:
        assert sw.pending is None, "a batch is unstacked between rounds, never within a pipelined round"
        rem = sw.remainder
        return [
            WorkerState(
                s.payload,
                s.local,
                s.chains._replace(
                    z=sw.z[j],
                    pot=sw.pot[j],
                    grad=sw.grad[j],
                    accept=sw.accept[j],
                    remainder=rem[j] if rem is not None else None,
                ),
            )
            for j, s in enumerate(sw.states)
        ]

    def step_stacked(
        self,
        sw: StackedWorkers,
        message: RoundMessage,
        shards: np.ndarray,
        model: Model,
        data: ShardStack,
        noise: StackedNoise,
    ) -> tuple[StackedWorkers, Reply]:
        """`worker_step` of B shards with the same N_i (and shapes but for their rows) at once; the reply stacked."""
        n_steps = int(message.n_steps[shards[0]])
        group, exact = message.chains, sw.local is not None
        if group is None or group[0] == 0:  # a whole round, or its first half: the round's numbers for every chain
            xi = noise.normal(n_steps)  # (N, B, K, d)
            logu = np.log(noise.uniform(n_steps)) if exact else None  # (N, B, K)
            pending = None
            if group is not None:
                cut = group[1]
                pending = (xi[:, :, cut:], logu[:, :, cut:] if logu is not None else None)
                xi, logu = xi[:, :, :cut], logu[:, :, :cut] if logu is not None else None
        else:  # the second half: the numbers the first drew for these chains
            assert sw.pending is not None
            (xi, logu), pending = sw.pending, None
        chains = slice(None) if group is None else slice(group[0], group[1])
        if sw.local is None:  # "lmc", eq. (4)
            u, g, phi = sw.z[:, chains], sw.grad[:, chains], message.phi
            for k in range(n_steps):
                if k:
                    g = data.apply(model.grad_stacked, u)
                u = u - sw.gamma * (g + (u - phi) * sw.inv_rho) + sw.scale * xi[k]
            g = data.apply(model.grad_stacked, u)
            sw = sw._replace(z=_put(sw.z, chains, u), grad=_put(sw.grad, chains, g), pending=pending)
            return sw, Reply(u, None)
        loc, u, pot = sw.local, sw.z[:, chains], sw.pot[:, chains]
        assert sw.remainder is not None and logu is not None
        rem = sw.remainder[:, chains]
        chol_t = loc.chol.swapaxes(1, 2)
        acc_sum = np.zeros(u.shape[:2])
        plain = bool(np.all(sw.beta == 0.0))
        with np.errstate(all="ignore"):
            mean = (message.phi / sw.rho + loc.shift[:, None, :]) @ loc.a_inv
            lin = tilt = None
            if message.recentre is not None and message.recentre[shards[0]]:
                lin = data.apply(model.grad_stacked, mean) - _quadratic_grad_stacked(loc, mean)
                mean, lin = _recentre(mean, lin, loc.a_inv)
                tilt = rem - (lin * u).sum(axis=2)
            for k in range(n_steps):
                if plain:
                    prop = mean + xi[k] @ chol_t
                else:
                    prop = mean + sw.beta * (u - mean) + sw.beta_c * (xi[k] @ chol_t)
                pot_p = data.apply(model.potential_stacked, prop)
                rem_p = pot_p - _quadratic_stacked(loc, prop)
                if lin is None:
                    accept, alpha = mh_accept(rem - rem_p, logu[k])
                else:
                    tilt_p = rem_p - (lin * prop).sum(axis=2)
                    accept, alpha = mh_accept(tilt - tilt_p, logu[k])
                    tilt = np.where(accept, tilt_p, tilt)
                u = np.where(accept[:, :, None], prop, u)
                pot = np.where(accept, pot_p, pot)
                rem = np.where(accept, rem_p, rem)
                acc_sum += alpha
        acc = acc_sum / max(n_steps, 1)
        sw = sw._replace(
            z=_put(sw.z, chains, u),
            pot=_put(sw.pot, chains, pot),
            accept=_put(sw.accept, chains, acc),
            remainder=_put(sw.remainder, chains, rem),
            pending=pending,
        )
        return sw, Reply(u, acc)


def _put(whole: np.ndarray, chains: slice, part: np.ndarray) -> np.ndarray:
    """`part` as the new value of a batch array's chains `chains` (axis 1): itself for all chains, else a copy of
    `whole` with those chains replaced."""
    if chains == slice(None):
        return part
    out = whole.copy()
    out[:, chains] = part
    return out


def _centring_proposals(
    masks: list[np.ndarray], precond: Any, rho: np.ndarray
) -> list[tuple[np.ndarray, np.ndarray] | None]:
    """Per shard, the interweaving move's coordinates (`Model.centring`) and its proposal's Cholesky factor in θ's
    units: ρ_i times the covariance of those coordinates given the others under the Laplace approximation
    (precision H = (L Lᵀ)⁻¹ from the preconditioner θ = shift + Lφ), the spread the coupling allows them."""
    Lm = precond.matrix()
    H = np.eye(len(masks[0])) if Lm is None else np.linalg.inv(Lm @ Lm.T)
    out: list[tuple[np.ndarray, np.ndarray] | None] = []
    for mask, r in zip(masks, rho):
        idx = np.flatnonzero(mask)
        if idx.size == 0:
            out.append(None)
            continue
        cov = float(r) * np.linalg.inv(H[np.ix_(idx, idx)])
        out.append((idx, np.linalg.cholesky(0.5 * (cov + cov.T))))
    return out


def is_schedule(value: Any) -> bool:
    """Whether `value` looks like a recorded N_i schedule: a sequence of (round, per-shard counts) pairs."""
    if not isinstance(value, (list, tuple)) or not value:
        return False
    first = value[0]
    return isinstance(first, (list, tuple)) and len(first) == 2 and isinstance(first[1], (list, tuple, np.ndarray))


def normalise_schedule(value: Any) -> tuple[tuple[int, tuple[int, ...]], ...]:
    """A schedule as ((round, (N_1, …, N_b)), …), rounds strictly increasing from 0, counts positive integers."""
    bad = ValueError(
        "n_local as a schedule must be (round, [N_1, ..., N_b]) pairs, rounds strictly increasing "
        f"from 0 and positive integer counts (as result.run_stats.N_schedule), got {value!r}"
    )
    out = []
    for entry in value:
        try:
            r, counts = entry
            arr = np.asarray(counts, dtype=float)
        except (TypeError, ValueError):
            raise bad from None
        if isinstance(r, bool) or int(r) != r or arr.ndim != 1 or np.any(arr < 1) or np.any(arr != np.round(arr)):
            raise bad
        out.append((int(r), tuple(int(v) for v in arr)))
    rounds = [r for r, _ in out]
    if rounds[0] != 0 or any(b <= a for a, b in zip(rounds, rounds[1:])) or len({len(n) for _, n in out}) != 1:
        raise bad
    return tuple(out)


def check_overrelax(value: Any) -> None:
    """overrelax must be "auto" or a real number strictly between −1 and 1."""
    ok = isinstance(value, (int, float, np.floating, np.integer)) and not isinstance(value, bool)
    if not ok or not -1.0 < float(value) < 1.0:
        raise ValueError(f"overrelax must be 'auto' or a number strictly between -1 and 1, got {value!r}")


def _lmc_steps(
    cs: ChainState, msg: Message, p: WorkerPayload, model: Model, X: np.ndarray, y: np.ndarray, noise: ChainNoise
) -> ChainState:
    """Eq. (4), N_i times: u ← u − γ[∇U_i(u) + (u − θ)/ρ] + √(2γ) ξ."""
    u, g, xi = cs.z, cs.grad, noise.normal(msg.n_steps)
    gamma, inv_rho, scale = p.gamma, 1.0 / p.rho, math.sqrt(2.0 * p.gamma)
    d = msg.phi.shape[1]
    for k in range(msg.n_steps):
        if k:
            g = model.grad(X, y, u)
        u = u - gamma * (g + _pad((u[:, :d] - msg.phi) * inv_rho, u.shape[1])) + scale * xi[k]
    return cs._replace(z=u, grad=model.grad(X, y, u), remainder=None)


def _mala_steps(
    cs: ChainState, msg: Message, p: WorkerPayload, model: Model, X: np.ndarray, y: np.ndarray, noise: ChainNoise
) -> ChainState:
    """N_i MALA steps on Π_ρ(z_i | θ) ∝ exp(−U_i(z) − ‖z − θ‖²/(2ρ)); during burn-in the step size adapts
    to `target_accept` by dual averaging, afterwards it is frozen at the averaged value."""
    u, pot, gU = cs.z, cs.pot, cs.grad
    inv_rho, phi = 1.0 / p.rho, msg.phi
    xi, logu = noise.normal(msg.n_steps), np.log(noise.uniform(msg.n_steps))
    log_h, da = cs.log_h, cs.da
    acc_sum = np.zeros(u.shape[0])
    d, width = phi.shape[1], u.shape[1]  # with local parameters the coupling acts on the first d coordinates only
    for k in range(msg.n_steps):
        h = np.exp(log_h if msg.warmup else da.log_hbar)
        hc = h[:, None] if h.ndim else h
        diff = u[:, :d] - phi
        g = gU + _pad(diff * inv_rho, width)
        prop = u - hc * g + np.sqrt(2.0 * hc) * xi[k]
        with np.errstate(all="ignore"):
            pot_p, gU_p = model.potential_and_grad(X, y, prop)
            diff_p = prop[:, :d] - phi
            energy_change = (pot_p - pot) + 0.5 * inv_rho * (
                np.sum(diff_p * diff_p, axis=1) - np.sum(diff * diff, axis=1)
            )
            log_alpha = -energy_change + mala_log_ratio(u, g, prop, gU_p + _pad(diff_p * inv_rho, width), h)
        accept, alpha = mh_accept(log_alpha, logu[k])
        u = np.where(accept[:, None], prop, u)
        pot = np.where(accept, pot_p, pot)
        gU = np.where(accept[:, None], gU_p, gU)
        acc_sum += alpha
        if msg.warmup:
            log_h, da = dual_averaging(da, _accept_stat(alpha, log_h), p.target_accept, math.log(p.gamma))
    return cs._replace(z=u, pot=pot, grad=gU, log_h=log_h, da=da, accept=acc_sum / max(msg.n_steps, 1))


def _newton_steps(
    cs: ChainState, msg: Message, p: WorkerPayload, model: Model, X: np.ndarray, y: np.ndarray, noise: ChainNoise
) -> ChainState:
    """N_i sweeps of Newton–Metropolis–Hastings within Gibbs on worker i's (z_i, η_i) (group effects), each followed
    by one such move of the report chain η_i | θ:

    1. η_i | z_i, block by block (`Model.local_curvature`: one block per group, independent given z_i): propose
       η_b' ~ N(η_b − H_b⁻¹g_b, H_b⁻¹) from the gradient and curvature at the current point, accept or reject each
       block on its own with the reverse move's density (gradient and curvature at the proposal). Near a Gaussian
       conditional (many rows per group, or few rows and a small sd) this is nearly an exact draw.
    2. z_i | η_i: the same Newton proposal on exp(−U_i(z, η_i) − ‖z − θ‖²/(2ρ)) in z (d coordinates; the curvature's
       eigenvalues kept at least 1/(2ρ), a function of the point, so the move stays exact).
    3. The report chain's η_i | θ at the coordinator's θ, as in 1.

    Every move is an exact Metropolis–Hastings step, so Π_ρ(z_i, η_i | θ) and p(η_i | θ) stay invariant; no step
    size to adapt. Each sweep is five passes over the shard's rows."""
    phi = msg.phi
    K, width = cs.z.shape
    d = phi.shape[1]
    inv_rho = 1.0 / p.rho
    x = cs.z
    lc = cs.curv if cs.curv is not None else model.local_curvature(X, y, x, "theta")
    report = cs.report
    assert report is not None
    eta_r = report.eta
    acc_z, acc_eta = np.zeros(K), np.zeros(K)
    with np.errstate(all="ignore"):  # a proposal with a non-finite potential is a rejection
        for _ in range(msg.n_steps):
            rows = noise.normal(4 + CENTRE_STEPS)
            x, a_eta, _ = _newton_blocks(model, X, y, x, lc, rows[0][:, d:], rows[1][:, d:])
            if p.centre is not None:
                x, _ = _centred_steps(model, X, y, x, phi, inv_rho, p.centre, rows[4:])
            lc = model.local_curvature(X, y, x, "theta")
            x, lc, a_z = _newton_global(
                model, X, y, x, lc, phi, inv_rho, rows[0][:, :d], noise.uniform(1)[0], p.overrelax
            )
            if report.given is not None and report.hess is not None and report.cross is not None:
                # follow the conditional's move with θ first (exact where it is Gaussian), so that a block the MH
                # step keeps is a draw given this θ, not the last one (over-relaxed θ jumps far between rounds)
                shift = -report.hess.solve(np.einsum("kld,kd->kl", report.cross, phi - report.given))
                eta_r = np.where(np.isfinite(shift).all(axis=1, keepdims=True), eta_r + shift, eta_r)
            xr = np.concatenate([phi, eta_r], axis=1)
            xr, _, (hess_r, cross_r) = _newton_blocks(
                model, X, y, xr, model.local_curvature(X, y, xr, "cross"), rows[2][:, d:], rows[3][:, d:], "cross"
            )
            eta_r = xr[:, d:]
            report = report._replace(eta=eta_r, given=phi, hess=hess_r, cross=cross_r)
            acc_z += a_z
            acc_eta += a_eta
    n = max(msg.n_steps, 1)
    return cs._replace(
        z=x,
        pot=lc.value,
        grad=lc.grad,
        accept=acc_z / n,
        curv=lc,
        eta_accept=acc_eta / n,
        report=report,
    )


def _centred_steps(
    model: Model,
    X: np.ndarray,
    y: np.ndarray,
    x: np.ndarray,
    phi: np.ndarray,
    inv_rho: float,
    centre: tuple[np.ndarray, np.ndarray],
    rows: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Random-walk Metropolis–Hastings in the centred parameterisation (`Model.centred_move`): the group scales (and
    the coefficients an effect duplicates) move with every row's linear predictor kept, so a step needs no pass over
    the rows; with the non-centred Newton steps around it this is interweaving (Yu & Meng 2011), which keeps the
    scales moving where the groups' data pin their effects down. The proposal's covariance is the coupling's own
    spread for those coordinates (`_centring_proposals`). rows: (steps, K, width) normals (the proposal's, and one
    whose Φ is the uniform). Returns x and the mean acceptance probability per chain (K,)."""
    idx, C = centre
    K, d = x.shape[0], phi.shape[1]
    m = idx.size
    acc = np.zeros(K)
    for row in rows:
        dtheta = np.zeros((K, d))
        dtheta[:, idx] = row[:, :m] @ C.T
        prop, delta = model.centred_move(X, y, x, dtheta)
        old, new = x[:, :d] - phi, prop[:, :d] - phi
        coupling = 0.5 * inv_rho * (np.einsum("kd,kd->k", new, new) - np.einsum("kd,kd->k", old, old))
        accept, alpha = mh_accept(-(delta + coupling), log_ndtr(row[:, m]))
        x = np.where(accept[:, None], prop, x)
        acc += alpha
    return x, acc / len(rows)


def _newton_blocks(
    model: Model,
    X: np.ndarray,
    y: np.ndarray,
    x: np.ndarray,
    lc: LocalCurvature,
    xi: np.ndarray,
    z_u: np.ndarray,
    parts: str = "eta",
) -> tuple[np.ndarray, np.ndarray, tuple[EtaHessian, np.ndarray | None]]:
    """One Newton–MH move of every block of the local parameters at fixed global part (`_newton_steps`, 1): x
    (K, d + l) and its `LocalCurvature` lc (as far as `parts`); xi (K, l) the proposal's normals, z_u (K, ≥ B)
    normals whose Φ are the blocks' uniforms. Returns the new x, each chain's mean acceptance probability over blocks
    (K,), and ∇²_ηη U and (with parts "cross") ∇²_ηθ U at the new x, block by block from the current point's or the
    proposal's pass (a block's rows are its own)."""
    K, width = x.shape
    _, B, e, _ = lc.eta.blocks.shape
    d = width - B * e
    eta = x[:, d:].reshape(K, B, e)
    L = block_cholesky(lc.eta.blocks)
    prop, fwd = newton_proposal(eta, lc.grad[:, d:].reshape(K, B, e), L, xi.reshape(K, B, e))
    xp = x.copy()
    xp[:, d:] = prop.reshape(K, B * e)
    lcp = model.local_curvature(X, y, xp, parts)
    bwd = newton_log_density(eta, prop, lcp.grad[:, d:].reshape(K, B, e), block_cholesky(lcp.eta.blocks))
    accept, alpha = mh_accept(-(lcp.blocks - lc.blocks) + bwd - fwd, log_ndtr(z_u[:, :B]))
    out = x.copy()
    out[:, d:] = np.where(accept[:, :, None], prop, eta).reshape(K, B * e)
    hess = EtaHessian(np.where(accept[:, :, None, None], lcp.eta.blocks, lc.eta.blocks))
    cross = None
    if lc.cross is not None and lcp.cross is not None:
        rows = np.repeat(accept, e, axis=1)[:, :, None]
        cross = np.where(rows, lcp.cross, lc.cross)
    return out, alpha.mean(axis=1), (hess, cross)


def _newton_global(
    model: Model,
    X: np.ndarray,
    y: np.ndarray,
    x: np.ndarray,
    lc: LocalCurvature,
    phi: np.ndarray,
    inv_rho: float,
    xi: np.ndarray,
    u: np.ndarray,
    beta: float = 0.0,
) -> tuple[np.ndarray, LocalCurvature, np.ndarray]:
    """One Newton–MH move of z_i (the first d coordinates of x) on exp(−U_i(z, η) − ‖z − θ‖²/(2ρ)) at fixed η
    (`_newton_steps`, 2), over-relaxed by β (the coordinator's α). Returns the new x, its curvature (parts "theta")
    and the acceptance probability (K,)."""
    d = phi.shape[1]

    def parts(c: LocalCurvature, pt: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        assert c.theta is not None
        diff = pt[:, :d] - phi
        value = c.value + 0.5 * inv_rho * np.einsum("kd,kd->k", diff, diff)
        w, V = np.linalg.eigh(c.theta)
        H = (V * np.maximum(w + inv_rho, 0.5 * inv_rho)[:, None, :]) @ np.swapaxes(V, 1, 2)  # V diag(.) Vᵀ
        return value, c.grad[:, :d] + inv_rho * diff, block_cholesky(H)

    T, g, L = parts(lc, x)
    prop, fwd = newton_proposal(x[:, :d], g, L, xi, beta)
    xq = x.copy()
    xq[:, :d] = prop
    lcq = model.local_curvature(X, y, xq, "theta")
    Tq, gq, Lq = parts(lcq, xq)
    bwd = newton_log_density(x[:, :d], prop, gq, Lq, beta)
    accept, alpha = mh_accept(-(Tq - T) + bwd - fwd, np.log(u))
    return np.where(accept[:, None], xq, x), _choose(accept, lcq, lc), alpha


def _choose(mask: np.ndarray, a: LocalCurvature, b: LocalCurvature) -> LocalCurvature:
    """Per chain, a's curvature where `mask` holds, else b's."""

    def pick(u: Any, v: Any) -> Any:
        if u is None:
            return None
        m = mask.reshape((-1,) + (1,) * (u.ndim - 1))
        return np.where(m, u, v)

    return LocalCurvature(
        pick(a.value, b.value),
        pick(a.grad, b.grad),
        type(a.eta)(pick(a.eta.blocks, b.eta.blocks)),
        pick(a.cross, b.cross),
        pick(a.theta, b.theta),
        pick(a.blocks, b.blocks),
    )


def _local_gaussian(p: WorkerPayload) -> LocalGaussian:
    """Factor the worker's Gaussian proposal once: A = P + I/ρ (P dense or its diagonal)."""
    assert p.quadratic is not None
    c, g, P = p.quadratic
    P = np.diag(P) if P.ndim == 1 else P
    a_inv = np.linalg.inv(P + np.eye(P.shape[0]) / p.rho)
    a_inv = 0.5 * (a_inv + a_inv.T)
    try:
        chol = np.linalg.cholesky(a_inv)
    except np.linalg.LinAlgError:
        raise ValueError(
            f"local_kernel='laplace_mh' needs P + I/rho positive definite; rho={p.rho:g} is too large "
            "for this shard's curvature (use a smaller rho or local_kernel='mala')"
        ) from None
    return LocalGaussian(c, g, P, a_inv, chol, P @ c - g)


def _laplace_mh_steps(
    cs: ChainState,
    msg: Message,
    p: WorkerPayload,
    loc: LocalGaussian,
    model: Model,
    X: np.ndarray,
    y: np.ndarray,
    noise: ChainNoise,
) -> ChainState:
    """N_i Metropolis–Hastings steps on Π_ρ(z_i | θ), proposing from a Gaussian approximation of it fitted at θ.

    With r = U_i − q the non-quadratic remainder of U_i beyond its Laplace model q(z) = gᵀ(z − c) + ½(z − c)ᵀP(z − c),
    the round's proposal law is the Laplace conditional N(m, A⁻¹) re-centred by r's gradient at its mean m:
    N(m − A⁻¹ℓ, A⁻¹) with ℓ = ∇r(m) (the step scaled down to `RECENTRE_TRUST` sds where longer), the Gaussian
    proportional to exp(−q(z) − ℓᵀz − ‖z − θ‖²/(2ρ)). It depends on θ only, so Π_ρ(z_i | θ) = that Gaussian ×
    exp(−r̃), r̃(z) = r(z) − ℓᵀz, and the acceptance ratio is
    exp(r̃(z) − r̃(z')): exact for Π_ρ(z_i | θ), and nearly always accepted where r is close to linear on the
    conditional's scale √ρ (breast_cancer: 0.97, against 0.82 for the plain Laplace proposal). With over-relaxation
    β ≠ 0 the proposal is z' = m̃ + β(z − m̃) + √(1 − β²) ξ Cᵀ, reversible with respect to that Gaussian, so the
    ratio keeps the same form; a rejection leaves z in place and weakens the over-relaxation, which is why the
    re-centring matters (docs/algorithms.md, "DG-LMC over-relaxation").
    """
    u, pot = cs.z, cs.pot
    xi, logu = noise.normal(msg.n_steps), np.log(noise.uniform(msg.n_steps))
    rem = cs.remainder if cs.remainder is not None else pot - _quadratic(loc, u)
    acc_sum = np.zeros(u.shape[0])
    beta = p.overrelax
    with np.errstate(all="ignore"):  # once per round: entering it costs as much as a small product
        mean = (msg.phi / p.rho + loc.shift) @ loc.a_inv
        lin = tilt = None
        if msg.recentre:
            mean, lin = _recentre(mean, model.grad(X, y, mean) - _quadratic_grad(loc, mean), loc.a_inv)
            tilt = rem - (lin * u).sum(axis=1)
        for k in range(msg.n_steps):
            if beta == 0.0:
                prop = mean + xi[k] @ loc.chol.T
            else:  # reversible w.r.t. the proposal's Gaussian, so α keeps the same form
                prop = mean + beta * (u - mean) + math.sqrt(1.0 - beta * beta) * (xi[k] @ loc.chol.T)
            pot_p = model.potential(X, y, prop)
            rem_p = pot_p - _quadratic(loc, prop)
            if lin is None:
                accept, alpha = mh_accept(rem - rem_p, logu[k])
            else:
                tilt_p = rem_p - (lin * prop).sum(axis=1)
                accept, alpha = mh_accept(tilt - tilt_p, logu[k])
                tilt = np.where(accept, tilt_p, tilt)
            u = np.where(accept[:, None], prop, u)
            pot = np.where(accept, pot_p, pot)
            rem = np.where(accept, rem_p, rem)
            acc_sum += alpha
    return cs._replace(z=u, pot=pot, accept=acc_sum / max(msg.n_steps, 1), remainder=rem)


def _quadratic(loc: LocalGaussian, z: np.ndarray) -> np.ndarray:
    """gᵀ(z − c) + ½(z − c)ᵀP(z − c) for each row of z."""
    w = z - loc.c
    return w @ loc.g + 0.5 * ((w @ loc.P) * w).sum(axis=1)


def _shard_accepts(replies: Reply | list[Reply]) -> np.ndarray | None:
    """Every shard's local acceptance per chain (b, K), from the stacked replies or one per shard; None for a kernel
    without an acceptance (LMC)."""
    if isinstance(replies, Reply):
        return replies.accept
    accepts = [r.accept for r in replies if r.accept is not None]
    return np.stack(accepts) if accepts and len(accepts) == len(replies) else None


def _recentring(state: CoordinatorState, info: RoundInfo, shards: int) -> np.ndarray:
    """Which shards re-centre their Laplace proposal this round (b,): all with recentre=True, none with False; with
    "auto", after burn-in those whose plain proposal was accepted less than `RECENTRE_BELOW` of the time during it,
    its last round aside (none during burn-in, or with fewer than two burn-in rounds). A function of the burn-in's
    draws only, so the same on every executor, and in a pipelined run the same for both halves of a round."""
    mode = state.consts.recentre
    if mode is True or mode is False:
        return np.full(shards, mode)
    if info.warmup or state.warm_accept is None or state.warm_count == 0:
        return np.zeros(shards, dtype=bool)
    return state.warm_accept / state.warm_count < RECENTRE_BELOW


def _recentre(mean: np.ndarray, lin: np.ndarray, a_inv: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The Laplace conditional's mean m moved by the Newton step −A⁻¹∇r(m) on the remainder's linearisation, the step
    capped at `RECENTRE_TRUST` proposal sds (‖step‖_A) and dropped where ∇r(m) is not finite: (the proposal's mean,
    the linear tilt λ∇r(m) it stands for). m and ∇r(m) are (..., K, d), one shard's or a stack's."""
    step = lin @ a_inv
    size = np.sqrt((lin * step).sum(axis=-1, keepdims=True))
    if np.all(size <= RECENTRE_TRUST):  # every step within the cap (and finite): the same numbers as below, sooner
        return mean - step, lin
    scale = np.where(np.isfinite(size), np.minimum(1.0, RECENTRE_TRUST / np.maximum(size, 1e-300)), 0.0)
    lin = np.where(scale > 0.0, lin * scale, 0.0)
    return mean - np.where(scale > 0.0, step * scale, 0.0), lin


def _quadratic_grad(loc: LocalGaussian, z: np.ndarray) -> np.ndarray:
    """∇q(z) = g + P(z − c) for each row of z (P symmetric)."""
    return loc.g + (z - loc.c) @ loc.P


def _quadratic_grad_stacked(loc: LocalGaussian, z: np.ndarray) -> np.ndarray:
    """`_quadratic_grad` of B shards at once: z (B, K, d) → (B, K, d)."""
    return loc.g[:, None, :] + (z - loc.c[:, None, :]) @ loc.P


def _quadratic_stacked(loc: LocalGaussian, z: np.ndarray) -> np.ndarray:
    """`_quadratic` of B shards at once: z (B, K, d), `loc` stacked → (B, K)."""
    w = z - loc.c[:, None, :]
    return (w @ loc.g[:, :, None])[:, :, 0] + 0.5 * ((w @ loc.P) * w).sum(axis=2)


def shard_sum(terms: np.ndarray) -> np.ndarray:
    """Σ_i terms[i] over the first (shard) axis, added in shard order as `sum` over the shards' replies adds them:
    numpy reduces a leading axis element by element in order, except when each term is one number, where it sums
    pairwise."""
    if terms[0].size > 1:
        return np.add.reduce(terms, axis=0)
    return sum(terms)


def _pad(v: np.ndarray, width: int) -> np.ndarray:
    """The coupling's gradient (K, d) on the extended state (K, width): zeros over the local parameters."""
    if v.shape[1] == width:
        return v
    out = np.zeros((v.shape[0], width))
    out[:, : v.shape[1]] = v
    return out


def _report_steps(
    rc: ReportChain, msg: Message, p: WorkerPayload, model: Model, X: np.ndarray, y: np.ndarray, noise: ChainNoise
) -> ReportChain:
    """N_i MALA steps on η_i targeting p(η_i | θ, y_i) ∝ exp(−U_i(θ, η_i)) at the round's θ (`ReportChain`); the step
    size adapts to `target_accept` by dual averaging during burn-in, then stays at the averaged value."""
    phi, eta = msg.phi, rc.eta
    d = phi.shape[1]
    xi, logu = noise.normal(msg.n_steps)[:, :, d:], np.log(noise.uniform(msg.n_steps))
    if rc.given is not None:  # follow the conditional's move with θ first, so that a few steps keep up
        with np.errstate(all="ignore"):
            shift = _conditional_shift(model, X, y, np.concatenate([phi, eta], axis=1), phi - rc.given)
        eta = np.where(np.isfinite(shift).all(axis=1, keepdims=True), eta + shift, eta)
    log_h, da = rc.log_h, rc.da
    with np.errstate(all="ignore"):
        pot, g = model.potential_and_grad(X, y, np.concatenate([phi, eta], axis=1))
    g = g[:, d:]
    for k in range(msg.n_steps):
        h = np.exp(log_h if msg.warmup else da.log_hbar)
        hc = h[:, None] if h.ndim else h
        prop = eta - hc * g + np.sqrt(2.0 * hc) * xi[k]
        with np.errstate(all="ignore"):
            pot_p, g_p = model.potential_and_grad(X, y, np.concatenate([phi, prop], axis=1))
            g_p = g_p[:, d:]
            log_alpha = -(pot_p - pot) + mala_log_ratio(eta, g, prop, g_p, h)
        accept, alpha = mh_accept(log_alpha, logu[k])
        eta = np.where(accept[:, None], prop, eta)
        pot = np.where(accept, pot_p, pot)
        g = np.where(accept[:, None], g_p, g)
        if msg.warmup:
            log_h, da = dual_averaging(da, _accept_stat(alpha, log_h), p.target_accept, math.log(p.gamma))
    return ReportChain(eta, log_h, da, phi)


def _conditional_shift(model: Model, X: np.ndarray, y: np.ndarray, x: np.ndarray, delta: np.ndarray) -> np.ndarray:
    """How far the mode of η_i | θ moves when θ moves by `delta` (K, d), to first order: −H_ηη⁻¹ H_ηθ δ at
    x = (θ, η_i) (K, l_i), solved exactly block by block (`Model.local_curvature`: with group effects one block per
    group). Shifting a draw by it keeps it a draw of the new conditional when that is Gaussian (a linear model)."""
    lc = model.local_curvature(X, y, x, "cross")
    assert lc.cross is not None
    return -lc.eta.solve(np.einsum("kld,kd->kl", lc.cross, delta))


def _accept_stat(alpha: np.ndarray, log_h: float | np.ndarray) -> Any:
    """What dual averaging adapts to: each chain's acceptance with one step size per chain, else their mean."""
    return alpha if np.ndim(log_h) else float(alpha.mean())


def _reply(cs: ChainState, exact: bool, msg: Message, model: Model, X: np.ndarray, y: np.ndarray) -> Reply:
    """The worker's reply: z_i (and its acceptance for an exact kernel); with local parameters, z_i's global part
    plus the `ReportChain`'s η_i on its reported scale and the θ it was drawn given."""
    d = msg.phi.shape[1]
    accept = cs.accept if exact else None
    if cs.report is None:
        return Reply(cs.z, accept)
    local = np.asarray(model.local_natural(msg.phi, cs.report.eta, X, y))
    return Reply(cs.z[:, :d], accept, local, msg.phi)


def _coordinator_consts(
    prior_P: np.ndarray,
    prior_b: np.ndarray,
    rho: np.ndarray,
    alpha: float,
    stacked: bool = False,
    recentre: bool | str = False,
) -> CoordinatorConsts:
    """The coordinator's fixed Gaussian step: Q⁻¹ = (prior precision + Σ_i I/ρ_i)⁻¹ and its Cholesky factor."""
    q_inv = np.linalg.inv(prior_P + np.eye(prior_P.shape[0]) * np.sum(1.0 / rho))
    q_inv = 0.5 * (q_inv + q_inv.T)
    return CoordinatorConsts(q_inv, np.linalg.cholesky(q_inv), prior_b, 1.0 / rho, alpha, stacked, recentre)


def _plan(
    phi0: np.ndarray,
    consts: CoordinatorConsts,
    payloads: list[WorkerPayload],
    n_steps: np.ndarray,
    balance: bool,
    report: TuningReport,
    schedule: Any,
    worker_model: Any,
    lap: Any,
) -> Plan:
    """The tuned run: the coordinator's start, the workers' payloads, N_i and the report."""
    return Plan(
        CoordinatorState(phi0, consts),
        payloads,
        n_steps,
        float(np.mean(n_steps)),
        balance,
        report,
        schedule=schedule,
        model=worker_model,
        precond=lap.precond,
    )
