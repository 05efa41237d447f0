"""DG-LMC's turn-key tuning, one path with or without shard-local parameters ([DG-LMC] Plassier et al., ICML 2021,
sec. 3.2): the local kernel, the coordinates (a Laplace preconditioner θ = θ* + Lφ, or the paper's plain rules), ρ_i
from a stated bias budget (or 1/M_i, sec. 3.2.1), γ_i, N_i (sec. 3.2.2 for LMC), the over-relaxation α, and each
worker's payload.

With local parameters η_i (group effects) worker i's state is (z_i, η_i) (K, d + l_i) and its kernel targets
exp(−U_i(z_i, η_i) − ‖z_i − θ‖²/(2ρ_i)) (eq. 2 with the coupling on z_i only); θ | z is the usual Gaussian step
(eq. 5). Marginally over the η_i this is DG-LMC on the shards' marginal likelihoods, so with no group spanning shards
π_ρ → the hierarchical posterior as ρ → 0. The preconditioner then whitens θ only (identity on η), and ρ comes from
the bias budget under each shard's Laplace-marginal quadratic in θ at the mode of θ's Laplace-marginal posterior
(`tuning.laplace.laplace_step_local`).
"""

from __future__ import annotations

import math
from typing import Any, Protocol

import numpy as np

from ...errors import ArgumentError
from ...models.contract import Model
from ...reparam import with_prior_share
from ...streams import ChainNoise
from ...tuning import budget
from ...tuning.curvature import smoothness_bounds
from ...tuning.laplace import initial_points, laplace_step, laplace_step_local, resolve_preconditioner, starts_at_map
from ...tuning.overrelax import overrelax_for_laplace_model
from ...tuning.report import BiasPrediction, TuningReport
from ...tuning.shards import shard_centring
from ..base import Plan, ShardPool
from ..checks import per_shard
from .kernels import KERNELS, LocalKernel
from .types import CoordinatorConsts, CoordinatorState, WorkerPayload


class Settings(Protocol):
    """DG-LMC's user-facing parameters, as `DGLMC` holds them (its docstring says what each means); a protocol, so
    that tuning does not import the algorithm that calls it."""

    @property
    def preconditioner(self) -> str | None: ...

    @property
    def local_kernel(self) -> str | None: ...

    @property
    def bias_budget(self) -> float: ...

    @property
    def rho(self) -> Any: ...

    @property
    def gamma(self) -> Any: ...

    @property
    def n_local(self) -> Any: ...

    @property
    def gamma_fraction(self) -> float: ...

    @property
    def curvature(self) -> str | None: ...

    @property
    def init(self) -> Any: ...

    @property
    def target_accept(self) -> float: ...

    @property
    def overrelax(self) -> Any: ...

    @property
    def recentre(self) -> Any: ...

    @property
    def fixed_point(self) -> bool: ...

    def check_recentre(self, kernel: LocalKernel | str | None) -> None: ...


def prepare(alg: Settings, model: Model, pool: ShardPool, *, chains: int, seed: int, noise: ChainNoise) -> Plan:
    """Tune the run and build its initial states (`Algorithm.prepare`)."""
    local = model.has_local_params()
    b, d = pool.num_shards, model.dim
    kind = resolve_preconditioner(alg.preconditioner, d)
    paper_rules = kind is None
    kernel, curvature = _kernel_and_curvature(alg, local, paper_rules)

    eta_map: list[np.ndarray] | None = None
    if local:
        assert kind is not None  # refused above: the paper's rules have no group effects
        ll = laplace_step_local(model, pool, seed=seed, preconditioner=kind)
        lap, eta_map = ll.lap, ll.eta_map
    else:
        need_quads = not paper_rules or curvature == "map" or kernel.needs_quadratics
        need_map = need_quads or starts_at_map(alg.init)
        lap = laplace_step(model, pool, seed=seed, preconditioner=kind, need_map=need_map, quadratics=need_quads)
    if curvature == "bound":
        M = smoothness_bounds(model, pool)
    else:
        assert lap.curvature is not None
        M = lap.curvature
    M = np.maximum(M, 1e-12)

    bias: BiasPrediction | None = None
    if alg.rho is not None:
        rho = per_shard(alg.rho, b, "rho")
    elif paper_rules:
        rho = 1.0 / M  # sec. 3.2.1
    else:
        start = ((1.0 + alg.bias_budget) ** 2 - 1.0) / M.max()  # bounds the sd inflation in every direction
        r, bias = budget.dglmc_rho(lap, alg.bias_budget, start)
        rho = np.full(b, r)
        if local:  # under the Laplace-marginal model, at the ρ used
            bias = budget.dglmc_bias(lap, float(rho[0]))
    if alg.gamma is not None:
        gamma = per_shard(alg.gamma, b, "gamma")
    else:
        gamma = alg.gamma_fraction * rho / (rho * M + 1.0)  # sec. 3.2.1; MALA: initial step
    exact_default = kernel.steps_with_local_params if local else 1
    n_steps, balance, schedule = local_steps(alg.n_local, b, rho, gamma, M, kernel, exact_default)

    phi0 = initial_points(alg.init, lap, chains, d, noise)
    prior = model.prior()
    prior_P, prior_b = lap.precond.prior_in_phi(np.asarray(prior.gaussian.mean, dtype=float), prior.gaussian.precision)
    alpha = _overrelax(alg.overrelax, kernel, local, lap.quads, prior_P, rho)
    consts = coordinator_consts(
        prior_P, prior_b, rho, alpha, stacked=kernel.batches and not local,
        recentre=alg.recentre if kernel.recentres else False, fixed_point=alg.fixed_point,
        adapts_to=alg.target_accept if kernel.adapts else None,
    )  # fmt: skip

    quads = lap.quads if kernel.needs_quadratics else None
    centres: list[tuple[np.ndarray, np.ndarray] | None] = [None] * b
    if kernel.interweaves:
        centres = centring_proposals(pool.map(shard_centring, [()] * b), lap.precond, rho)
    payloads = [
        WorkerPayload(
            phi0 if eta_map is None else np.concatenate([phi0, np.repeat(eta_map[i][None, :], chains, axis=0)], axis=1),
            float(rho[i]),
            float(gamma[i]),
            kernel.name,
            alg.target_accept,
            (lap.centre, *quads[i]) if quads is not None else None,
            alpha if kernel.overrelaxes else 0.0,
            per_chain_step=local,
            centre=centres[i],
            fixed_point=alg.fixed_point,
            parties=b,
        )
        for i in range(b)
    ]
    # the worker potential: U_i in the sampler's coordinates, plus a 1/b share of any non-Gaussian prior term
    worker_model = with_prior_share(lap.model(model), 1.0 / b)
    if local or worker_model is not model:
        pool.bind(worker_model)
    report = TuningReport(
        lap.precond.kind,
        bias_budget=None if paper_rules else alg.bias_budget,
        bias=bias,
        theta_map=lap.theta_map,
        rho=rho,
        gamma=gamma,
        M=M,
        local_kernel=kernel.name,
        curvature=curvature,
        overrelax=alpha,
    )
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


def _kernel_and_curvature(alg: Settings, local: bool, paper_rules: bool) -> tuple[LocalKernel, str]:
    """The run's local kernel (the default: "lmc" under the paper's rules, "laplace_mh" otherwise, "newton_mh" with
    local parameters) and curvature rule ("bound" under the paper's rules, "map" otherwise), refusing combinations that
    do not exist."""
    if local and paper_rules:
        raise ArgumentError(
            ("algorithm", "preconditioner"),
            "preconditioner=None (the paper's plain rules) is not available with group effects: use 'auto'",
        )
    name = alg.local_kernel or ("newton_mh" if local else "lmc" if paper_rules else "laplace_mh")
    kernel = KERNELS[name]
    if local and not kernel.with_local_params:
        raise ArgumentError(
            ("algorithm", "local_kernel"),
            f"local_kernel={name!r} is not available with group effects (the local parameters have no fixed "
            "Gaussian proposal): use 'mala' (the default) or 'lmc'",
        )
    if not local and not kernel.without_local_params:
        raise ArgumentError(
            ("algorithm", "local_kernel"),
            f"local_kernel={name!r} moves a model's local parameters (group effects) block by block; this "
            "model has none: use 'laplace_mh' (the default), 'mala' or 'lmc'",
        )
    if local and alg.curvature == "bound":
        raise ArgumentError(("algorithm", "curvature"), "curvature='bound' is not available with group effects")
    curvature = alg.curvature or ("bound" if paper_rules else "map")
    if curvature == "bound" and not paper_rules:
        raise ValueError("curvature='bound' is the paper's rule and needs preconditioner=None")
    alg.check_recentre(kernel)
    return kernel, curvature


def _overrelax(value: Any, kernel: LocalKernel, local: bool, quads: Any, prior_P: np.ndarray, rho: np.ndarray) -> float:
    """α: as given, or with "auto" the α minimising the predicted autocorrelation under the workers' Laplace models
    for a kernel whose local move is a near-exact Gibbs draw (`LocalKernel.overrelaxes`), 0 otherwise. An inexact
    kernel (LMC) may not over-relax: the chain's law would change."""
    if value != "auto":
        alpha = float(value)
    elif kernel.overrelaxes and quads is not None:
        alpha = overrelax_for_laplace_model([P for _, P in quads], prior_P, rho)
    else:
        alpha = 0.0
    if alpha != 0.0 and not kernel.exact:
        if local:
            raise ValueError("overrelax needs an exact local kernel (local_kernel='mala' with group effects)")
        raise ValueError(
            "overrelax needs an exact local kernel (local_kernel='laplace_mh' or 'mala'): with 'lmc' the "
            "chain's law would change"
        )
    return alpha


def local_steps(
    n_local: Any, b: int, rho: np.ndarray, gamma: np.ndarray, M: np.ndarray, kernel: LocalKernel, exact_default: int
) -> tuple[np.ndarray, bool, Any]:
    """(N_i per shard, whether the balancer may change them, the n_local schedule or None): `n_local` as given
    (per shard, or a schedule), else sec. 3.2.2's N_avg for LMC and `exact_default` for an exact kernel."""
    if isinstance(n_local, tuple) and n_local and isinstance(n_local[0], tuple):
        schedule = n_local
        if any(len(n) != b for _, n in schedule):
            raise ValueError(f"n_local schedule entries must have one step count per shard ({b})")
        return np.asarray(schedule[0][1], dtype=int), False, schedule
    if n_local is not None:
        return per_shard(n_local, b, "n_local").astype(int), False, None
    n_avg = math.ceil(np.mean(rho / (gamma * (rho * M + 1.0)))) if not kernel.exact else exact_default
    return np.full(b, n_avg, dtype=int), True, None


def coordinator_consts(
    prior_P: np.ndarray,
    prior_b: np.ndarray,
    rho: np.ndarray,
    alpha: float,
    stacked: bool = False,
    recentre: bool | str = False,
    fixed_point: bool = False,
    adapts_to: float | None = None,
) -> CoordinatorConsts:
    """The coordinator's fixed Gaussian step: Q⁻¹ = (prior precision + Σ_i I/ρ_i)⁻¹ and its Cholesky factor."""
    q_inv = np.linalg.inv(prior_P + np.eye(prior_P.shape[0]) * np.sum(1.0 / rho))
    q_inv = 0.5 * (q_inv + q_inv.T)
    return CoordinatorConsts(
        q_inv, np.linalg.cholesky(q_inv), prior_b, 1.0 / rho, alpha, stacked, recentre, fixed_point, adapts_to
    )


def centring_proposals(
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
