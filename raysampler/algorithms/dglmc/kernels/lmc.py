"""Kernel "lmc": N_i unadjusted Langevin steps on Π_ρ(z_i | θ) ([DG-LMC] Plassier et al., ICML 2021, eq. 4), the
paper's own local kernel and the default under its plain rules.

    z ← z − γ_i [∇U_i(z) + (z − θ)/ρ_i] + √(2γ_i) ξ

Not exact (its γ-bias adds to the ρ-bias), so no acceptance and no over-relaxation. In the DP mode (a payload
with `clip`) ∇U_i is the sum of the rows' gradients each clipped to norm C (`privacy.clipping`), evaluated afresh at
every step, and the state counts the clipped ones of each round. Over a leading shard axis:
B shards' chains step as one batch, each matrix product a stacked one (one BLAS call per shard, as alone) and the
rest elementwise, so a shard's numbers do not depend on its batch.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

from ....models.contract import Model, ShardStack
from ....privacy.clipping import clipped_grad_stacked
from ....streams import StackedNoise
from ..types import LocalRound, WorkerPayload
from .base import BatchKernel, OneShard, chain_slice, column, put, round_noise, start


class LMCState(NamedTuple):
    """B shards' LMC chains: the per-shard constants γ_i, 1/ρ_i, √(2γ_i) (B, 1, 1), z_i and ∇U_i(z_i) (B, K, w) (w =
    d + l_i with local parameters, whose coupling is zero), and a pipelined round's normals for the later chain
    group, shard axis first."""

    gamma: np.ndarray
    inv_rho: np.ndarray
    scale: np.ndarray
    z: np.ndarray
    grad: np.ndarray
    pending: tuple[np.ndarray, None] | None = None
    #: the DP mode: the clip C (B, 1, 1), and the per-example gradients clipped during the last round, summed over
    #: its steps and chains (B,)
    clip: np.ndarray | None = None
    clipped: np.ndarray | None = None
    clip_rule: str = "gradient"  # `privacy.dp.DP.clip_rule`


class LMC(BatchKernel):
    name = "lmc"
    exact = False

    def init(self, payload: WorkerPayload, model: Model, X: np.ndarray, y: np.ndarray) -> LMCState:
        z, _, grad = start(model, X, y, payload.z0)
        gamma = payload.gamma
        clip = None if payload.clip is None else column(payload.clip)
        clipped = None if payload.clip is None else np.zeros(1)
        return LMCState(
            column(gamma), column(1.0 / payload.rho), column(math.sqrt(2.0 * gamma)), z[None], grad[None], None,
            clip, clipped, payload.clip_rule,
        )  # fmt: skip

    def step(
        self, state: LMCState, rnd: LocalRound, model: Model, data: ShardStack, noise: StackedNoise | OneShard
    ) -> tuple[LMCState, np.ndarray, None]:
        """Eq. (4), N_i times, for the round's chains of every shard of the batch."""
        xi, _, pending = round_noise(noise, rnd, state.pending, uniforms=False)
        chains = chain_slice(rnd.chains)
        u, g, phi = state.z[:, chains], state.grad[:, chains], rnd.phi
        d = phi.shape[-1]
        local = u.shape[-1] != d  # with local parameters, whose coupling is zero
        if state.clip is not None:
            u, clipped = _clipped_steps(state, rnd, model, data, u, xi)
            new = state._replace(z=put(state.z, rnd.chains, u), pending=pending, clipped=clipped)
            return new, u, None
        for k in range(rnd.n_steps):
            if k:
                g = data.apply(model.grad_stacked, u)
            coupling = _coupling(u, phi, state.inv_rho, d) if local else (u - phi) * state.inv_rho
            u = u - state.gamma * (g + coupling) + state.scale * xi[k]
        g = data.apply(model.grad_stacked, u)
        new = state._replace(z=put(state.z, rnd.chains, u), grad=put(state.grad, rnd.chains, g), pending=pending)
        return new, u, None


def _clipped_steps(
    state: LMCState, rnd: LocalRound, model: Model, data: ShardStack, u: np.ndarray, xi: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The DP mode's eq. (4), N_i times: z ← z − γ_i[Σ_r clip(∇ℓ_r(z), C) + (z − θ)/ρ_i] + √(2γ_i) ξ, the clipped sum
    evaluated at every step (none is carried over from before the round's θ); (z, clipped gradients (B,))."""
    assert state.clip is not None
    clipped = np.zeros(u.shape[0])
    for k in range(rnd.n_steps):
        g, count = _clipped(model, data, u, state.clip, state.clip_rule)
        clipped += count.sum(axis=1)
        u = u - state.gamma * (g + (u - rnd.phi) * state.inv_rho) + state.scale * xi[k]
    return u, clipped


def _clipped(
    model: Model, data: ShardStack, u: np.ndarray, clip: np.ndarray, rule: str
) -> tuple[np.ndarray, np.ndarray]:
    """Σ_r clip(∇ℓ_r, C) at u (B, K, d) for every run of the stack, and the clipped rows (B, K)."""
    grads, counts, a = [], [], 0
    for X, y in data.runs:
        c = clipped_grad_stacked(model, X, y, u[a : a + X.shape[0]], clip[a : a + X.shape[0]], rule)
        grads.append(c.grad)
        counts.append(c.clipped)
        a += X.shape[0]
    return np.concatenate(grads), np.concatenate(counts)


def _coupling(u: np.ndarray, phi: np.ndarray, inv_rho: Any, d: int) -> np.ndarray:
    """∇ of ‖z − θ‖²/(2ρ) at u (B, K, w) with local parameters: (u − θ)/ρ on the first d coordinates (θ's), zero on
    the local parameters."""
    out = np.zeros(u.shape)
    out[..., :d] = (u[..., :d] - phi) * inv_rho
    return out
