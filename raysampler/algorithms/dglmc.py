"""DG-LMC: Distributed Gibbs with Langevin Monte Carlo (seed 000, Algorithm 1), with turn-key tuning.

Augmented target Π_ρ(θ, z_1..z_b) ∝ exp(−Σ_i [U_i(z_i) + ‖z_i − θ‖²/(2ρ_i)]) (eq. 2, A_i = I), sampled
by Gibbs: each worker moves z_i with N_i local steps targeting Π_ρ(z_i | θ) (eq. 4); the coordinator
draws θ | z exactly from N(μ, Q⁻¹) (eq. 5) with Q factored once.

Everything runs in whitened coordinates φ with θ = θ* + Lφ (Laplace preconditioner; identity for the
paper's plain rules), so the coupling ‖z_i − φ‖²/(2ρ_i) is measured in posterior units.
"""
from __future__ import annotations

import math
import numbers
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
    quadratic: tuple | None = None    # (c, g, P): U_i(z) ≈ gᵀ(z − c) + ½(z − c)ᵀP(z − c) in φ, for "laplace_mh"


class WorkerState(NamedTuple):
    """Worker i: its latent z_i (K, d) in φ coordinates, cached U_i(z_i) and ∇_φU_i(z_i), and MALA adaptation."""

    z: np.ndarray
    pot: np.ndarray
    grad: np.ndarray
    log_h: float          # current MALA log step size
    da: tuple             # dual averaging (count, H̄, log h̄) — Hoffman & Gelman (2014), Alg. 5
    accept: np.ndarray    # (K,) mean acceptance of the last round


class LocalGaussian(NamedTuple):
    """Worker i's Laplace approximation of Π_ρ(z_i | θ) in φ: with U_i(z) ≈ gᵀ(z − c) + ½(z − c)ᵀP(z − c) (its own
    shard's gradient and Hessian at the MAP c), z | θ ≈ N(A⁻¹(θ/ρ − g + Pc), A⁻¹), A = P + I/ρ; C Cᵀ = A⁻¹."""

    c: np.ndarray
    g: np.ndarray
    P: np.ndarray
    a_inv: np.ndarray
    chol: np.ndarray
    shift: np.ndarray     # Pc − g: the θ-free part of the proposal mean


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
      local_kernel: "laplace_mh" (independence MH on Π_ρ(z_i | θ) proposing from the worker's Laplace approximation
        of it: exact, no γ-bias; the default), "mala" (MALA within Gibbs, step size adapted during burn-in) or
        "lmc" (eq. 4; the default under the paper's rules).
      bias_budget: δ: ρ is the largest value for which π_ρ, under the workers' Laplace (quadratic) models of U_i,
        keeps every coordinate's mean within δ posterior sd and its sd within a factor 1 + δ of the posterior's
        (`tuning.rho_for_bias_budget`).
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
        _check_unit("bias_budget", self.bias_budget)
        _check_unit("gamma_fraction", self.gamma_fraction, closed=True)
        _check_unit("target_accept", self.target_accept)
        if self.curvature not in (None, "map", "bound"):
            raise ValueError(f"curvature must be 'map' or 'bound', got {self.curvature!r}")
        for name in ("rho", "gamma", "n_local"):
            value = getattr(self, name)
            if value is not None:
                try:
                    arr = np.asarray(value, dtype=float)
                except (TypeError, ValueError):
                    raise ValueError(f"{name} must be a positive number or one per shard, got {value!r}") from None
                if isinstance(value, bool) or np.asarray(value).dtype == bool:
                    raise ValueError(f"{name} must be a positive number or one per shard, got {value!r}")
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
        paper_rules = kind is None
        kernel = self.local_kernel or ("lmc" if paper_rules else "laplace_mh")
        curvature = self.curvature or ("bound" if paper_rules else "map")
        if curvature == "bound" and not paper_rules:
            raise ValueError("curvature='bound' is the paper's rule and needs preconditioner=None")
        need_map = (not paper_rules or curvature == "map" or kernel == "laplace_mh"
                    or (isinstance(self.init, str) and self.init == "map"))
        x0 = 0.01 * np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(2**31,))).standard_normal(d)
        theta_map = tuning.find_map(model, pool, x0=x0, dense_hessian=(kind == "laplace")) if need_map else None
        if paper_rules:
            precond = tuning.Preconditioner(np.zeros(d), None, "none")
        else:
            precond = tuning.laplace_preconditioner(model, pool, theta_map, kind)
        prior_P, prior_b = precond.prior_in_phi(prior.mean, prior.precision)

        # Each worker's quadratic model of U_i at the MAP, in φ: for the bias rule and the local-Laplace kernel.
        dense = d <= tuning.DENSE_PRECONDITIONER_MAX_DIM and kind != "diag"
        quads = tuning.local_quadratics(model, pool, theta_map, precond, dense) if theta_map is not None else None
        if curvature == "bound":
            M = tuning.smoothness_bounds(model, pool)
        elif dense:
            M = np.array([np.linalg.eigvalsh(P)[-1] for _, P in quads])
        else:
            M = tuning.local_curvatures(model, pool, theta_map, precond)
        M = np.maximum(M, 1e-12)

        bias_info: dict[str, Any] = {}
        if self.rho is not None:
            rho = _per_shard(self.rho, b, "rho")
        elif paper_rules:
            rho = 1.0 / M                                                 # sec. 3.2.1
        else:
            start = ((1.0 + self.bias_budget) ** 2 - 1.0) / M.max()      # bounds the sd inflation in every direction
            r, bias_info = tuning.rho_for_bias_budget(quads, prior_P, prior_b, precond, self.bias_budget, start)
            rho = np.full(b, r)
        if self.gamma is not None:
            gamma = _per_shard(self.gamma, b, "gamma")
        else:
            gamma = self.gamma_fraction * rho / (rho * M + 1.0)          # sec. 3.2.1; MALA: initial step
        if self.n_local is not None:
            n_steps = _per_shard(self.n_local, b, "n_local").astype(int)
            balance = False
        else:
            n_avg = math.ceil(np.mean(rho / (gamma * (rho * M + 1.0)))) if kernel == "lmc" else 1  # sec. 3.2.2
            n_steps = np.full(b, n_avg, dtype=int)
            balance = True

        phi0 = self._initial_phi(precond, theta_map, chains, d, noise)
        Q = prior_P + np.eye(d) * np.sum(1.0 / rho)
        q_inv = np.linalg.inv(Q)
        q_inv = 0.5 * (q_inv + q_inv.T)
        consts = CoordinatorConsts(q_inv, np.linalg.cholesky(q_inv), prior_b, 1.0 / rho, precond)
        centre = precond.to_phi(theta_map[None, :])[0] if theta_map is not None else None
        payloads = [WorkerPayload(phi0, float(rho[i]), float(gamma[i]), kernel, precond, self.target_accept,
                                  (centre, *quads[i]) if kernel == "laplace_mh" else None) for i in range(b)]
        info = {"rho": rho, "gamma": gamma, "M": M, "local_kernel": kernel, "preconditioner": precond.kind,
                "theta_map": theta_map, "curvature": curvature, "bias_budget": None if paper_rules else self.bias_budget,
                **bias_info}
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
        if not np.all(np.isfinite(pot)):
            raise FloatingPointError("the initial point gives a non-finite potential U_i: choose another init")
        local = _local_gaussian(payload) if payload.kernel == "laplace_mh" else None
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


def _check_unit(name: str, value: Any, closed: bool = False) -> None:
    """A real number in (0, 1) (or (0, 1] if `closed`), else ValueError naming the parameter."""
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and 0 < value < 1 + (closed and value == 1)
    if not ok:
        raise ValueError(f"{name} must be a number in (0, {'1]' if closed else '1)'}, got {value!r}")


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


def _local_gaussian(p: WorkerPayload) -> LocalGaussian:
    """Factor the worker's Gaussian proposal once: A = P + I/ρ (P dense or its diagonal)."""
    c, g, P = p.quadratic
    P = np.diag(P) if P.ndim == 1 else P
    a_inv = np.linalg.inv(P + np.eye(P.shape[0]) / p.rho)
    a_inv = 0.5 * (a_inv + a_inv.T)
    try:
        chol = np.linalg.cholesky(a_inv)
    except np.linalg.LinAlgError:
        raise ValueError(f"local_kernel='laplace_mh' needs P + I/rho positive definite; rho={p.rho:g} is too large "
                         "for this shard's curvature (use a smaller rho or local_kernel='mala')") from None
    return LocalGaussian(c, g, P, a_inv, chol, P @ c - g)


def _laplace_mh_steps(ws: WorkerState, msg: Message, p: WorkerPayload, loc: LocalGaussian, model: Model,
                      X: np.ndarray, y: np.ndarray, noise: ChainNoise) -> WorkerState:
    """N_i independence Metropolis–Hastings steps on Π_ρ(z_i | θ), proposing from its Laplace approximation.

    The coupling ‖z − θ‖²/(2ρ) is Gaussian and cancels in the ratio, leaving α = exp(−[r(z') − r(z)]) with
    r = U_i − (gᵀz + ½zᵀPz) the non-quadratic remainder of U_i: exact for Π_ρ(z_i | θ), and nearly always
    accepted where U_i is close to quadratic on the scale √ρ.
    """
    u, pot = ws.z, ws.pot
    mean = (msg.phi / p.rho + loc.shift) @ loc.a_inv
    xi, logu = noise.normal(msg.n_steps), np.log(noise.uniform(msg.n_steps))
    rem = pot - _quadratic(loc, u)
    acc_sum = np.zeros(u.shape[0])
    for k in range(msg.n_steps):
        prop = mean + xi[k] @ loc.chol.T
        with np.errstate(all="ignore"):
            pot_p = model.potential(X, y, p.precond.to_theta(prop))
            rem_p = pot_p - _quadratic(loc, prop)
            log_alpha = np.where(np.isfinite(rem_p), rem - rem_p, -np.inf)
        accept = logu[k] < log_alpha
        u = np.where(accept[:, None], prop, u)
        pot = np.where(accept, pot_p, pot)
        rem = np.where(accept, rem_p, rem)
        acc_sum += np.exp(np.minimum(log_alpha, 0.0))
    return ws._replace(z=u, pot=pot, accept=acc_sum / max(msg.n_steps, 1))


def _quadratic(loc: LocalGaussian, z: np.ndarray) -> np.ndarray:
    """gᵀ(z − c) + ½(z − c)ᵀP(z − c) for each row of z."""
    w = z - loc.c
    return w @ loc.g + 0.5 * np.sum((w @ loc.P) * w, axis=1)


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
