"""DG-LMC: Distributed Gibbs with Langevin Monte Carlo (seed 000, Algorithm 1), with turn-key tuning.

Augmented target Π_ρ(θ, z_1..z_b) ∝ exp(−Σ_i [U_i(z_i) + ‖z_i − θ‖²/(2ρ_i)]) (eq. 2, A_i = I), sampled
by Gibbs: each worker moves z_i with N_i local steps targeting Π_ρ(z_i | θ) (eq. 4); the coordinator
draws θ | z exactly from N(μ, Q⁻¹) (eq. 5) with Q factored once.

Everything runs in whitened coordinates φ with θ = θ* + Lφ (Laplace preconditioner; identity for the
paper's plain rules), so the coupling ‖z_i − φ‖²/(2ρ_i) is measured in posterior units.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from .. import tuning
from ..models.base import Model
from ..streams import ChainNoise
from .base import Algorithm, Plan, RoundInfo, ShardPool

LOCAL_KERNELS = ("laplace_mh", "mala", "lmc")
PRECONDITIONERS = ("auto", "laplace", "diag", None)


@dataclass(frozen=True)
class WorkerPayload:
    """Everything a worker needs to run its local kernel: fixed for the run."""

    z0: np.ndarray                    # (K, d) initial z_i, in φ coordinates
    rho: float
    gamma: float                      # LMC step size (kernel "lmc") or initial MALA step size (kernel "mala")
    kernel: str
    precond: tuning.Preconditioner
    target_accept: float


class WorkerState(NamedTuple):
    """Worker i: its latent z_i (K, d) in φ coordinates, cached U_i(z_i) and ∇_φU_i(z_i), and MALA adaptation."""

    z: np.ndarray
    pot: np.ndarray
    grad: np.ndarray
    log_h: float          # current MALA log step size
    da: tuple             # dual averaging (count, H̄, log h̄) — Hoffman & Gelman (2014), Alg. 5
    accept: np.ndarray    # (K,) mean acceptance of the last round


class LocalGaussian(NamedTuple):
    """Worker i's Laplace approximation of Π_ρ(z_i | θ) in φ: U_i(z) ≈ gᵀz + ½zᵀPz, so z | θ ≈ N((θ/ρ − g)A⁻¹, A⁻¹)
    with A = P + I/ρ; `chol` is a Cholesky factor of A⁻¹. Built by the worker from its own shard at the MAP."""

    g: np.ndarray
    P: np.ndarray
    a_inv: np.ndarray
    chol: np.ndarray


class Message(NamedTuple):
    phi: np.ndarray       # θ of the current round, in φ coordinates (K, d)
    n_steps: int
    warmup: bool


class Reply(NamedTuple):
    z: np.ndarray
    accept: np.ndarray | None


@dataclass(frozen=True)
class CoordinatorConsts:
    """The fixed Gaussian conditional θ | z (eq. 5) in φ: μ = (b0 + Σ z_i/ρ_i) Q⁻¹, θ = μ + ξ Cᵀ with C Cᵀ = Q⁻¹."""

    q_inv: np.ndarray
    chol_q_inv: np.ndarray
    b0: np.ndarray
    inv_rho: np.ndarray
    precond: tuning.Preconditioner


class CoordinatorState(NamedTuple):
    phi: np.ndarray               # (K, d)
    consts: CoordinatorConsts


@dataclass(frozen=True)
class DGLMC(Algorithm):
    """DG-LMC with Laplace preconditioning, exact (MALA) local steps and ρ set from a stated bias budget.

    Parameters (all optional; the defaults are turn-key):
      preconditioner: "auto" (dense Laplace for d ≤ 300, diagonal above), "laplace", "diag", or None for the
        paper's plain rules (ρ_i = 1/M_i, γ_i = 0.25ρ_i/(ρ_iM_i + 1), N_avg from sec. 3.2.2, LMC steps, bound M_i).
      local_kernel: "mala" (MALA within Gibbs on Π_ρ(z_i | θ): no γ-bias; the default) or "lmc" (eq. 4; the
        default under the paper's rules).
      bias_budget: δ in the rule ρ = ((1 + δ)² − 1)/max_i M_i, which keeps π_ρ's sd inflation ≤ δ under the
        Laplace approximation (π_ρ's precision ⪰ Σ_i P_i/(1 + ρM_i)).
      rho, gamma: override ρ_i, γ_i (scalar or one per shard, in the sampler's coordinates).
      n_local: fix N_i (scalar or one per shard); fixing it turns speed balancing off.
      gamma_fraction: γ_i = gamma_fraction·ρ_i/(ρ_iM_i + 1) for LMC (paper: 0.1–0.5).
      curvature: "map" (M_i = λ_max of the whitened local Hessian at the MAP) or "bound" (the model's M_i).
      init: "map" (chains start at the MAP plus a Laplace draw), "zeros", or an array (d,) or (K, d).
      target_accept: MALA acceptance target during burn-in.
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
    name: str = field(default="dglmc", init=False)

    def __post_init__(self) -> None:
        if self.preconditioner not in PRECONDITIONERS:
            raise ValueError(f"preconditioner must be one of {PRECONDITIONERS}, got {self.preconditioner!r}")
        if self.local_kernel is not None and self.local_kernel not in LOCAL_KERNELS:
            raise ValueError(f"local_kernel must be one of {LOCAL_KERNELS}, got {self.local_kernel!r}")
        if not (0 < self.bias_budget < 1):
            raise ValueError(f"bias_budget must be in (0, 1), got {self.bias_budget!r}")
        if not (0 < self.gamma_fraction <= 1):
            raise ValueError(f"gamma_fraction must be in (0, 1], got {self.gamma_fraction!r}")
        if not (0 < self.target_accept < 1):
            raise ValueError(f"target_accept must be in (0, 1), got {self.target_accept!r}")
        if self.curvature not in (None, "map", "bound"):
            raise ValueError(f"curvature must be 'map' or 'bound', got {self.curvature!r}")
        for name in ("rho", "gamma", "n_local"):
            value = getattr(self, name)
            if value is not None:
                arr = np.asarray(value, dtype=float)
                if arr.ndim > 1 or arr.size == 0 or not np.all(np.isfinite(arr)) or np.any(arr <= 0):
                    raise ValueError(f"{name} must be a positive number or one positive number per shard, got {value!r}")
                if name == "n_local" and np.any(arr != np.round(arr)):
                    raise ValueError(f"n_local must be a positive integer (or one per shard), got {value!r}")

    # --- tuning ---------------------------------------------------------------------------------

    def prepare(self, model: Model, pool: ShardPool, *, chains: int, seed: int, noise: ChainNoise) -> Plan:
        b, d = pool.num_shards, model.dim
        prior = model.prior()
        kind = self.preconditioner
        if kind == "auto":
            kind = "laplace" if d <= tuning.DENSE_PRECONDITIONER_MAX_DIM else "diag"
        need_map = kind is not None or (isinstance(self.init, str) and self.init == "map")
        x0 = 0.01 * np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(2**31,))).standard_normal(d)
        theta_map = tuning.find_map(model, pool, x0=x0, dense_hessian=(kind == "laplace")) if need_map else None
        if kind is None:
            precond = tuning.Preconditioner(np.zeros(d), None, "none")
        else:
            precond = tuning.laplace_preconditioner(model, pool, theta_map, kind)

        curvature = self.curvature or ("bound" if kind is None else "map")
        if curvature == "bound":
            if kind is not None:
                raise ValueError("curvature='bound' is the paper's rule and needs preconditioner=None")
            M = tuning.smoothness_bounds(model, pool)
        else:
            M = tuning.local_curvatures(model, pool, theta_map, precond)
        M = np.maximum(M, 1e-12)

        paper_rules = kind is None
        if self.rho is not None:
            rho = _per_shard(self.rho, b, "rho")
        elif paper_rules:
            rho = 1.0 / M                                                 # sec. 3.2.1
        else:
            rho = np.full(b, ((1.0 + self.bias_budget) ** 2 - 1.0) / M.max())
        kernel = self.local_kernel or ("lmc" if paper_rules else "laplace_mh")
        if self.gamma is not None:
            gamma = _per_shard(self.gamma, b, "gamma")
        else:
            gamma = self.gamma_fraction * rho / (rho * M + 1.0)          # sec. 3.2.1; MALA: initial step
        if self.n_local is not None:
            n_steps = _per_shard(self.n_local, b, "n_local").astype(int)
            balance = False
        else:
            if kernel == "lmc":
                n_avg = math.ceil(np.mean(rho / (gamma * (rho * M + 1.0))))  # sec. 3.2.2
            else:
                n_avg = 1
            n_steps = np.full(b, n_avg, dtype=int)
            balance = True

        phi0 = self._initial_phi(precond, theta_map, chains, d, noise)
        prior_P, prior_b = precond.prior_in_phi(prior.mean, prior.precision)
        Q = prior_P + np.eye(d) * np.sum(1.0 / rho)
        q_inv = np.linalg.inv(Q)
        q_inv = 0.5 * (q_inv + q_inv.T)
        consts = CoordinatorConsts(q_inv, np.linalg.cholesky(q_inv), prior_b, 1.0 / rho, precond)
        payloads = [WorkerPayload(phi0, float(rho[i]), float(gamma[i]), kernel, precond, self.target_accept)
                    for i in range(b)]
        info = {"rho": rho, "gamma": gamma, "M": M, "local_kernel": kernel, "preconditioner": precond.kind,
                "theta_map": theta_map, "curvature": curvature,
                "sd_inflation_bound": float(np.sqrt(1.0 + rho.max() * M.max())) - 1.0 if not paper_rules else None}
        return Plan(CoordinatorState(phi0, consts), payloads, n_steps, float(np.mean(n_steps)), balance, info)

    def _initial_phi(self, precond: tuning.Preconditioner, theta_map: np.ndarray | None, chains: int, d: int,
                     noise: ChainNoise) -> np.ndarray:
        if isinstance(self.init, str):
            if self.init == "map":
                phi = precond.to_phi(theta_map[None, :])
                if precond.kind != "none":  # overdispersed-enough start: a draw from the Laplace approximation
                    return phi + noise.normal(1)[0]
                return np.repeat(phi, chains, axis=0)
            if self.init == "zeros":
                return np.repeat(precond.to_phi(np.zeros((1, d))), chains, axis=0)
            raise ValueError(f"init must be 'map', 'zeros' or an array, got {self.init!r}")
        arr = np.asarray(self.init, dtype=float)
        if arr.shape == (d,):
            arr = np.repeat(arr[None, :], chains, axis=0)
        if arr.shape != (chains, d) or not np.all(np.isfinite(arr)):
            raise ValueError(f"init must have shape ({d},) or ({chains}, {d}) with finite values, got shape {arr.shape}")
        return precond.to_phi(arr)

    # --- worker ---------------------------------------------------------------------------------

    def worker_init(self, payload: WorkerPayload, model: Model, X: np.ndarray, y: np.ndarray) -> tuple:
        z = np.array(payload.z0, dtype=float)
        pot, grad = _local_potential(model, X, y, payload.precond, z)
        log_h = math.log(payload.gamma)
        local = _local_gaussian(payload, model, X, y) if payload.kernel == "laplace_mh" else None
        return payload, local, WorkerState(z, pot, grad, log_h, (0, 0.0, log_h), np.ones(z.shape[0]))

    def worker_step(self, state: tuple, message: Message, model: Model, X: np.ndarray, y: np.ndarray,
                    noise: ChainNoise) -> tuple[tuple, Reply]:
        payload, local, ws = state
        if payload.kernel == "lmc":
            ws = _lmc_steps(ws, message, payload, model, X, y, noise)
            return (payload, local, ws), Reply(ws.z, None)
        if payload.kernel == "laplace_mh":
            ws = _laplace_mh_steps(ws, message, payload, local, model, X, y, noise)
        else:
            ws = _mala_steps(ws, message, payload, model, X, y, noise)
        return (payload, local, ws), Reply(ws.z, ws.accept)

    # --- coordinator ----------------------------------------------------------------------------

    def messages(self, state: CoordinatorState, local_steps: np.ndarray, info: RoundInfo) -> list[Message]:
        return [Message(state.phi, int(n), info.warmup) for n in local_steps]

    def coordinator_step(self, state: CoordinatorState, replies: list[Reply], noise: ChainNoise,
                         info: RoundInfo) -> tuple[CoordinatorState, np.ndarray]:
        """Eq. (5): θ ~ N(μ, Q⁻¹), μ = Q⁻¹(b0 + Σ_i z_i/ρ_i), drawn as μ + ξ Cᵀ (C C ᵀ = Q⁻¹ factored once)."""
        c = state.consts
        s = c.b0 + sum(r.z * w for r, w in zip(replies, c.inv_rho))
        phi = s @ c.q_inv + noise.normal(1)[0] @ c.chol_q_inv.T
        return CoordinatorState(phi, c), c.precond.to_theta(phi)

    def reply_stats(self, replies: list[Reply]) -> dict[str, np.ndarray]:
        if replies[0].accept is None:
            return {}
        return {"local_accept": np.mean([r.accept for r in replies], axis=0)}


def _per_shard(value: Any, b: int, name: str) -> np.ndarray:
    arr = np.asarray(value, dtype=float)
    if arr.ndim == 0:
        return np.full(b, float(arr))
    if arr.shape != (b,):
        raise ValueError(f"{name} must be a scalar or have one value per shard ({b}), got {arr.shape[0]} values")
    return arr.copy()


def _local_potential(model: Model, X: np.ndarray, y: np.ndarray, precond: tuning.Preconditioner,
                     z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """U_i and its gradient in φ coordinates at z (K, d)."""
    pot, grad = model.potential_and_grad(X, y, precond.to_theta(z))
    return pot, precond.pull_grad(grad)


def _lmc_steps(ws: WorkerState, msg: Message, p: WorkerPayload, model: Model, X: np.ndarray, y: np.ndarray,
               noise: ChainNoise) -> WorkerState:
    """Eq. (4), N_i times: u ← u − γ[∇U_i(u) + (u − θ)/ρ] + √(2γ) ξ."""
    u, g, xi = ws.z, ws.grad, noise.normal(msg.n_steps)
    gamma, inv_rho, scale = p.gamma, 1.0 / p.rho, math.sqrt(2.0 * p.gamma)
    for k in range(msg.n_steps):
        if k:
            g = p.precond.pull_grad(model.grad(X, y, p.precond.to_theta(u)))
        u = u - gamma * (g + (u - msg.phi) * inv_rho) + scale * xi[k]
    g = p.precond.pull_grad(model.grad(X, y, p.precond.to_theta(u)))
    return ws._replace(z=u, grad=g)


def _mala_steps(ws: WorkerState, msg: Message, p: WorkerPayload, model: Model, X: np.ndarray, y: np.ndarray,
                noise: ChainNoise) -> WorkerState:
    """N_i MALA steps on Π_ρ(z_i | θ) ∝ exp(−U_i(z) − ‖z − θ‖²/(2ρ)); during burn-in the step size adapts
    to `target_accept` by dual averaging, afterwards it is frozen at the averaged value."""
    u, pot, gU = ws.z, ws.pot, ws.grad
    inv_rho, phi = 1.0 / p.rho, msg.phi
    xi, logu = noise.normal(msg.n_steps), np.log(noise.uniform(msg.n_steps))
    log_h, da = ws.log_h, ws.da
    acc_sum = np.zeros(u.shape[0])
    for k in range(msg.n_steps):
        h = math.exp(log_h) if msg.warmup else math.exp(da[2])
        diff = u - phi
        g = gU + diff * inv_rho
        prop = u - h * g + math.sqrt(2.0 * h) * xi[k]
        with np.errstate(all="ignore"):
            pot_p, gU_p = _local_potential(model, X, y, p.precond, prop)
            diff_p = prop - phi
            g_p = gU_p + diff_p * inv_rho
            energy_change = (pot_p - pot) + 0.5 * inv_rho * (np.sum(diff_p * diff_p, axis=1) - np.sum(diff * diff, axis=1))
            fwd = prop - u + h * g
            bwd = u - prop + h * g_p
            log_q = (np.sum(fwd * fwd, axis=1) - np.sum(bwd * bwd, axis=1)) / (4.0 * h)
            log_alpha = np.where(np.isfinite(energy_change) & np.isfinite(log_q), -energy_change + log_q, -np.inf)
        accept = logu[k] < log_alpha
        u = np.where(accept[:, None], prop, u)
        pot = np.where(accept, pot_p, pot)
        gU = np.where(accept[:, None], gU_p, gU)
        alpha = np.exp(np.minimum(log_alpha, 0.0))
        acc_sum += alpha
        if msg.warmup:
            log_h, da = _dual_averaging(da, float(alpha.mean()), p.target_accept, math.log(p.gamma))
    return WorkerState(u, pot, gU, log_h, da, acc_sum / max(msg.n_steps, 1))


def _local_gaussian(p: WorkerPayload, model: Model, X: np.ndarray, y: np.ndarray) -> LocalGaussian:
    """The worker's quadratic model of U_i at the MAP (φ = 0), in φ: gradient Lᵀ∇U_i(θ*), Hessian LᵀH_iL."""
    theta = p.precond.shift
    _, g = model.potential_and_grad(X, y, theta[None, :])
    scale = p.precond.scale
    if scale is not None and scale.ndim == 2:
        H = model.hessian(X, y, theta)
        P = scale.T @ H @ scale
    else:
        hd = model.hessian_diag(X, y, theta)
        P = np.diag(hd if scale is None else hd * scale * scale)
    P = 0.5 * (P + P.T)
    A = P + np.eye(P.shape[0]) / p.rho
    a_inv = np.linalg.inv(A)
    a_inv = 0.5 * (a_inv + a_inv.T)
    return LocalGaussian(p.precond.pull_grad(g)[0], P, a_inv, np.linalg.cholesky(a_inv))


def _laplace_mh_steps(ws: WorkerState, msg: Message, p: WorkerPayload, loc: LocalGaussian, model: Model,
                      X: np.ndarray, y: np.ndarray, noise: ChainNoise) -> WorkerState:
    """N_i independence Metropolis–Hastings steps on Π_ρ(z_i | θ), proposing from its Laplace approximation.

    The coupling ‖z − θ‖²/(2ρ) is Gaussian and cancels in the ratio, leaving α = exp(−[r(z') − r(z)]) with
    r = U_i − (gᵀz + ½zᵀPz) the non-quadratic remainder of U_i: exact for Π_ρ(z_i | θ), and nearly always
    accepted where U_i is close to quadratic on the scale √ρ.
    """
    u, pot = ws.z, ws.pot
    mean = (msg.phi / p.rho - loc.g) @ loc.a_inv
    xi, logu = noise.normal(msg.n_steps), np.log(noise.uniform(msg.n_steps))
    rem = pot - u @ loc.g - 0.5 * np.sum((u @ loc.P) * u, axis=1)
    acc_sum = np.zeros(u.shape[0])
    for k in range(msg.n_steps):
        prop = mean + xi[k] @ loc.chol.T
        with np.errstate(all="ignore"):
            pot_p = model.potential(X, y, p.precond.to_theta(prop))
            rem_p = pot_p - prop @ loc.g - 0.5 * np.sum((prop @ loc.P) * prop, axis=1)
            log_alpha = np.where(np.isfinite(rem_p), rem - rem_p, -np.inf)
        accept = logu[k] < log_alpha
        u = np.where(accept[:, None], prop, u)
        pot = np.where(accept, pot_p, pot)
        rem = np.where(accept, rem_p, rem)
        acc_sum += np.exp(np.minimum(log_alpha, 0.0))
    return ws._replace(z=u, pot=pot, accept=acc_sum / max(msg.n_steps, 1))


def _dual_averaging(da: tuple, accept: float, target: float, log_h0: float,
                    gamma: float = 0.05, t0: float = 10.0, kappa: float = 0.75) -> tuple[float, tuple]:
    """One dual-averaging update of the log step size (Hoffman & Gelman 2014, Alg. 5); returns (log h, state)."""
    m, hbar, log_hbar = da
    m += 1
    hbar = (1.0 - 1.0 / (m + t0)) * hbar + (target - accept) / (m + t0)
    log_h = math.log(10.0) + log_h0 - math.sqrt(m) / gamma * hbar
    w = m ** (-kappa)
    log_hbar = w * log_h + (1.0 - w) * log_hbar
    return log_h, (m, hbar, log_hbar)
