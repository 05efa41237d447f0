"""Kernel "newton_mh" (the default with group effects): Newton–Metropolis–Hastings within Gibbs on worker i's
(z_i, η_i), its shard-local parameters η_i (group effects) included ([DG-LMC] Plassier et al., ICML 2021: the worker
targets exp(−U_i(z_i, η_i) − ‖z_i − θ‖²/(2ρ_i)), eq. 4's target with the coupling on z_i only).

One sweep:
1. η_i | z_i, block by block (`Model.local_curvature`: one block per group, independent given z_i): propose
   η_b' ~ N(η_b − H_b⁻¹g_b, H_b⁻¹) from the gradient and curvature at the current point, accept or reject each block
   on its own with the reverse move's density (gradient and curvature at the proposal). Near a Gaussian conditional
   (many rows per group, or few rows and a small sd) this is nearly an exact draw.
2. `CENTRE_STEPS` random-walk steps in the centred parameterisation (interweaving, no pass over the rows).
3. z_i | η_i: the same Newton proposal on exp(−U_i(z, η_i) − ‖z − θ‖²/(2ρ)) in z (d coordinates; the curvature's
   eigenvalues kept at least 1/(2ρ), a function of the point, so the move stays exact), over-relaxed by the
   coordinator's α.
4. The report chain's η_i | θ at the coordinator's θ, as in 1.

Every move is an exact Metropolis–Hastings step, so Π_ρ(z_i, η_i | θ) and p(η_i | θ) stay invariant; no step size to
adapt. Each sweep is five passes over the shard's rows. One shard at a time (`ShardKernel`): the shards' numbers of
local parameters differ.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
from scipy.special import log_ndtr

from ....models.contract import EtaHessian, LocalCurvature, Model
from ....streams import ChainNoise
from ...mcmc import block_cholesky, mh_accept, newton_log_density, newton_proposal
from ..types import LocalRound, ReportChain, WorkerPayload
from .base import ShardKernel, start

#: interweaving (centred) random-walk steps per sweep (each O(l_i), no pass over the rows)
CENTRE_STEPS = 3


class NewtonState(NamedTuple):
    """One shard's chains on (z_i, η_i) (K, d + l_i): ρ_i, the over-relaxation β of the z_i move, the interweaving
    move's coordinates and proposal factor (`WorkerPayload.centre`), the chains, the model's curvature at them (what
    the next step reuses), and the last round's mean acceptance of the z_i move and of the η blocks' moves (K,)."""

    rho: float
    overrelax: float
    centre: tuple[np.ndarray, np.ndarray] | None
    z: np.ndarray
    curv: LocalCurvature
    accept: np.ndarray
    eta_accept: np.ndarray


class NewtonMH(ShardKernel):
    name = "newton_mh"
    without_local_params = False
    overrelaxes = True
    moves_report = True
    interweaves = True

    def init(self, payload: WorkerPayload, model: Model, X: np.ndarray, y: np.ndarray) -> NewtonState:
        z, _, _ = start(model, X, y, payload.z0)
        curv = model.local_curvature(X, y, z, "theta")
        ones = np.ones(z.shape[0])
        return NewtonState(payload.rho, payload.overrelax, payload.centre, z, curv, ones, ones)

    def step(
        self,
        state: NewtonState,
        report: ReportChain | None,
        rnd: LocalRound,
        model: Model,
        X: np.ndarray,
        y: np.ndarray,
        noise: ChainNoise,
    ) -> tuple[NewtonState, ReportChain | None]:
        """N_i sweeps (the module's docstring), each followed by one such move of the report chain η_i | θ."""
        phi = rnd.phi
        K = state.z.shape[0]
        d = phi.shape[1]
        inv_rho = 1.0 / state.rho
        x, lc = state.z, state.curv
        assert report is not None
        eta_r = report.eta
        acc_z, acc_eta = np.zeros(K), np.zeros(K)
        with np.errstate(all="ignore"):  # a proposal with a non-finite potential is a rejection
            for _ in range(rnd.n_steps):
                rows = noise.normal(4 + CENTRE_STEPS)
                x, a_eta, _ = newton_blocks(model, X, y, x, lc, rows[0][:, d:], rows[1][:, d:])
                if state.centre is not None:
                    x, _ = _centred_steps(model, X, y, x, phi, inv_rho, state.centre, rows[4:])
                lc = model.local_curvature(X, y, x, "theta")
                x, lc, a_z = _newton_global(
                    model, X, y, x, lc, phi, inv_rho, rows[0][:, :d], noise.uniform(1)[0], state.overrelax
                )
                if report.given is not None and report.hess is not None and report.cross is not None:
                    # follow the conditional's move with θ first (exact where it is Gaussian), so that a block the MH
                    # step keeps is a draw given this θ, not the last one (over-relaxed θ jumps far between rounds)
                    shift = -report.hess.solve(np.einsum("kld,kd->kl", report.cross, phi - report.given))
                    eta_r = np.where(np.isfinite(shift).all(axis=1, keepdims=True), eta_r + shift, eta_r)
                xr = np.concatenate([phi, eta_r], axis=1)
                xr, _, (hess_r, cross_r) = newton_blocks(
                    model, X, y, xr, model.local_curvature(X, y, xr, "cross"), rows[2][:, d:], rows[3][:, d:], "cross"
                )
                eta_r = xr[:, d:]
                report = report._replace(eta=eta_r, given=phi, hess=hess_r, cross=cross_r)
                acc_z += a_z
                acc_eta += a_eta
        n = max(rnd.n_steps, 1)
        return state._replace(z=x, curv=lc, accept=acc_z / n, eta_accept=acc_eta / n), report


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


def newton_blocks(
    model: Model,
    X: np.ndarray,
    y: np.ndarray,
    x: np.ndarray,
    lc: LocalCurvature,
    xi: np.ndarray,
    z_u: np.ndarray,
    parts: str = "eta",
) -> tuple[np.ndarray, np.ndarray, tuple[EtaHessian, np.ndarray | None]]:
    """One Newton–MH move of every block of the local parameters at fixed global part (`NewtonMH.step`, 1): x
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
    (`NewtonMH.step`, 2), over-relaxed by β (the coordinator's α). Returns the new x, its curvature (parts "theta")
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
