"""DG-LMC's coordinator: the round's messages and the exact Gaussian draw of θ given the workers' z_i ([DG-LMC]
Plassier et al., ICML 2021, eq. 5), over-relaxed when α ≠ 0 (Adler 1981; Neal 1998)."""

from __future__ import annotations

import math
from typing import cast

import numpy as np

from ...privacy.fixed_point import decode, total
from ...streams import ChainNoise
from ..base import RoundInfo
from .recentre import recentring, shard_accepts
from .types import CoordinatorState, Message, Reply, RoundMessage


def messages(state: CoordinatorState, local_steps: np.ndarray, info: RoundInfo) -> list[Message]:
    """Round t's message to each shard: θ, its N_i, burn-in or not, and whether it re-centres its proposal."""
    flags = recentring(state, info, len(local_steps))
    return [Message(state.phi, int(n), info.warmup, bool(f)) for n, f in zip(local_steps, flags)]


def round_message(state: CoordinatorState, local_steps: np.ndarray, info: RoundInfo) -> RoundMessage:
    """Round t's one message to every shard (kernels that step shards as one batch); a pipelined half-round carries
    its chain group's θ only."""
    phi = state.phi if info.chains is None else state.phi[info.chains[0] : info.chains[1]]
    flags = recentring(state, info, len(local_steps)) if state.consts.recentre is not False else None
    return RoundMessage(phi, np.asarray(local_steps, dtype=np.int64), info.warmup, info.chains, flags)


def coordinator_step(
    state: CoordinatorState, replies: Reply | list[Reply], noise: ChainNoise, info: RoundInfo
) -> tuple[CoordinatorState, np.ndarray]:
    """Eq. (5): θ ~ N(μ, Q⁻¹), μ = Q⁻¹(b0 + Σ_i z_i/ρ_i), drawn as μ + ξ Cᵀ (C C ᵀ = Q⁻¹ factored once);
    over-relaxed (α ≠ 0) as μ + α(θ − μ) + √(1 − α²) ξ Cᵀ. `replies` is one per shard, or all stacked."""
    c = state.consts
    if c.fixed_point:  # the sites' terms z_i/ρ_i in fixed point, masked or not: only their sum is read
        s = c.b0 + summed_terms(replies)
    elif isinstance(replies, Reply):
        assert replies.z is not None
        s = c.b0 + shard_sum(replies.z * c.inv_rho[:, None, None])
    else:
        s = c.b0 + sum(cast(np.ndarray, r.z) * w for r, w in zip(replies, c.inv_rho))
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
    # recentre="auto": the plain proposal's acceptance per shard, over the burn-in but its last round, whose second
    # half a pipelined run takes only after sending the next round's first half (whose flags must already be those
    # of its second half: `recentre.recentring`)
    accept = shard_accepts(replies) if c.recentre == "auto" and info.t < info.burn_in - 1 else None
    if accept is not None:
        total = np.asarray(accept, dtype=float).sum(axis=1)
        warm, counted = (total if warm is None else warm + total), counted + accept.shape[1]
    return CoordinatorState(phi, c, pending, warm, counted), phi


def summed_terms(replies: Reply | list[Reply]) -> np.ndarray:
    """Σ_i z_i/ρ_i from the replies' fixed-point terms (`Reply.summed`), added mod 2⁶⁴ and decoded: in a
    secure-sums run each term is masked and only this sum means anything."""
    words = replies.summed if isinstance(replies, Reply) else np.stack([cast(np.ndarray, r.summed) for r in replies])
    assert words is not None
    return decode(total(words))


def shard_sum(terms: np.ndarray) -> np.ndarray:
    """Σ_i terms[i] over the first (shard) axis, added in shard order as `sum` over the shards' replies adds them:
    numpy reduces a leading axis element by element in order, except when each term is one number, where it sums
    pairwise."""
    if terms[0].size > 1:
        return np.add.reduce(terms, axis=0)
    return sum(terms)
