"""With shard-local parameters (group effects): the report chain of η_i | θ on each worker, whose draws are the ones
reported with the coordinator's θ (`types.ReportChain`), moved by MALA after the local kernel's own steps (kernel
"newton_mh" moves it itself), and the worker's reply that carries them.
"""

from __future__ import annotations

import math

import numpy as np

from ...models.contract import Model
from ...streams import ChainNoise
from ..mcmc import DualAveraging, dual_averaging, mala_log_ratio, mh_accept
from .kernels.mala import accept_stat
from .types import LocalRound, Reply, ReportChain, WorkerPayload


def start_report(payload: WorkerPayload, d: int) -> ReportChain | None:
    """The report chain's start from the worker's initial (z_i, η_i) (K, d + l_i); None without local parameters."""
    z = np.asarray(payload.z0, dtype=float)
    if z.shape[1] <= d:
        return None
    log_h0 = math.log(payload.gamma)
    log_h: float | np.ndarray = np.full(z.shape[0], log_h0) if payload.per_chain_step else log_h0
    return ReportChain(log_h0, payload.target_accept, z[:, d:].copy(), log_h, DualAveraging.start(log_h))


def report_steps(
    rc: ReportChain, msg: LocalRound, model: Model, X: np.ndarray, y: np.ndarray, noise: ChainNoise
) -> ReportChain:
    """N_i MALA steps on η_i targeting p(η_i | θ, y_i) ∝ exp(−U_i(θ, η_i)) at the round's θ (`ReportChain`); the step
    size adapts to `target_accept` by dual averaging during burn-in, then stays at the averaged value."""
    phi, eta = msg.phi, rc.eta
    d = phi.shape[1]
    xi, logu = noise.normal(msg.n_steps)[:, :, d:], np.log(noise.uniform(msg.n_steps))
    if rc.given is not None:  # follow the conditional's move with θ first, so that a few steps keep up
        with np.errstate(all="ignore"):
            shift = conditional_shift(model, X, y, np.concatenate([phi, eta], axis=1), phi - rc.given)
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
            log_h, da = dual_averaging(da, accept_stat(alpha, log_h), rc.target_accept, rc.log_h0)
    return rc._replace(eta=eta, log_h=log_h, da=da, given=phi, hess=None, cross=None)


def conditional_shift(model: Model, X: np.ndarray, y: np.ndarray, x: np.ndarray, delta: np.ndarray) -> np.ndarray:
    """How far the mode of η_i | θ moves when θ moves by `delta` (K, d), to first order: −H_ηη⁻¹ H_ηθ δ at
    x = (θ, η_i) (K, l_i), solved exactly block by block (`Model.local_curvature`: with group effects one block per
    group). Shifting a draw by it keeps it a draw of the new conditional when that is Gaussian (a linear model)."""
    lc = model.local_curvature(X, y, x, "cross")
    assert lc.cross is not None
    return -lc.eta.solve(np.einsum("kld,kd->kl", lc.cross, delta))


def reply(
    z: np.ndarray,
    accept: np.ndarray | None,
    report: ReportChain | None,
    phi: np.ndarray,
    model: Model,
    X: np.ndarray,
    y: np.ndarray,
) -> Reply:
    """One shard's reply: z_i (K, w) and its acceptance (None for an inexact kernel); with local parameters, z_i's
    global part plus the report chain's η_i on its reported scale and the θ it was drawn given."""
    if report is None:
        return Reply(z, accept)
    d = phi.shape[1]
    local = np.asarray(model.local_natural(phi, report.eta, X, y))
    return Reply(z[:, :d], accept, local, phi)
