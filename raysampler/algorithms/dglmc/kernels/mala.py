"""Kernel "mala": N_i MALA steps on Π_ρ(z_i | θ) ∝ exp(−U_i(z) − ‖z − θ‖²/(2ρ)) ([DG-LMC] Plassier et al., ICML 2021,
eq. 4's target, Metropolis-adjusted): MALA within Gibbs, exact, its step size adapted to `target_accept` by dual
averaging during burn-in and frozen at the averaged value after.

One shard at a time (`ShardKernel`): the step size follows the shard's own acceptance history.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

from ....models.contract import Model
from ....streams import ChainNoise
from ...mcmc import DualAveraging, dual_averaging, mala_log_ratio, mh_accept
from ..types import LocalRound, ReportChain, WorkerPayload
from .base import ShardKernel, start


class MALAState(NamedTuple):
    """One shard's MALA chains: ρ_i, the initial log step size and the acceptance target (fixed), z_i (K, w), the
    cached U_i(z_i) and ∇U_i(z_i), the current log step size (one per chain with `WorkerPayload.per_chain_step`), its
    dual-averaging state, and the last round's mean acceptance (K,)."""

    rho: float
    log_h0: float
    target_accept: float
    z: np.ndarray
    pot: np.ndarray
    grad: np.ndarray
    log_h: float | np.ndarray
    da: DualAveraging
    accept: np.ndarray


#: default N_i of the MALA local kernel with group effects (shard-local η_i): several steps per round, so that η_i
#: (which only the local steps move) keeps up with θ; on the hierarchical linear test model 10 steps gave more min
#: bulk ESS/s than 1 or 40 (docs/performance.md, "Measurements behind choices in the code").
#: Newton–MH takes one sweep (nearly an exact draw of each block)
LOCAL_MALA_STEPS = 10


class MALA(ShardKernel):
    name = "mala"
    steps_with_local_params = LOCAL_MALA_STEPS
    adapts = True

    def init(self, payload: WorkerPayload, model: Model, X: np.ndarray, y: np.ndarray) -> MALAState:
        z, pot, grad = start(model, X, y, payload.z0)
        log_h0 = math.log(payload.gamma)
        log_h: float | np.ndarray = np.full(z.shape[0], log_h0) if payload.per_chain_step else log_h0
        return MALAState(
            payload.rho,
            log_h0,
            payload.target_accept,
            z,
            pot,
            grad,
            log_h,
            DualAveraging.start(log_h),
            np.ones(z.shape[0]),
        )

    def step(
        self,
        state: MALAState,
        report: ReportChain | None,
        rnd: LocalRound,
        model: Model,
        X: np.ndarray,
        y: np.ndarray,
        noise: ChainNoise,
    ) -> tuple[MALAState, ReportChain | None]:
        u, pot, gU = state.z, state.pot, state.grad
        inv_rho, phi = 1.0 / state.rho, rnd.phi
        xi, logu = noise.normal(rnd.n_steps), np.log(noise.uniform(rnd.n_steps))
        log_h, da = state.log_h, state.da
        acc_sum = np.zeros(u.shape[0])
        d, width = phi.shape[1], u.shape[1]  # with local parameters the coupling acts on the first d coordinates only
        for k in range(rnd.n_steps):
            h = np.exp(log_h if rnd.warmup else da.log_hbar)
            hc = h[:, None] if h.ndim else h
            diff = u[:, :d] - phi
            g = gU + pad(diff * inv_rho, width)
            prop = u - hc * g + np.sqrt(2.0 * hc) * xi[k]
            with np.errstate(all="ignore"):
                pot_p, gU_p = model.potential_and_grad(X, y, prop)
                diff_p = prop[:, :d] - phi
                energy_change = (pot_p - pot) + 0.5 * inv_rho * (
                    np.sum(diff_p * diff_p, axis=1) - np.sum(diff * diff, axis=1)
                )
                log_alpha = -energy_change + mala_log_ratio(u, g, prop, gU_p + pad(diff_p * inv_rho, width), h)
            accept, alpha = mh_accept(log_alpha, logu[k])
            u = np.where(accept[:, None], prop, u)
            pot = np.where(accept, pot_p, pot)
            gU = np.where(accept[:, None], gU_p, gU)
            acc_sum += alpha
            if rnd.warmup:
                log_h, da = dual_averaging(da, accept_stat(alpha, log_h), state.target_accept, state.log_h0)
        new = state._replace(z=u, pot=pot, grad=gU, log_h=log_h, da=da, accept=acc_sum / max(rnd.n_steps, 1))
        return new, report


def pad(v: np.ndarray, width: int) -> np.ndarray:
    """The coupling's gradient (K, d) on the extended state (K, width): zeros over the local parameters."""
    if v.shape[1] == width:
        return v
    out = np.zeros((v.shape[0], width))
    out[:, : v.shape[1]] = v
    return out


def accept_stat(alpha: np.ndarray, log_h: float | np.ndarray) -> Any:
    """What dual averaging adapts to: each chain's acceptance with one step size per chain, else their mean."""
    return alpha if np.ndim(log_h) else float(alpha.mean())
