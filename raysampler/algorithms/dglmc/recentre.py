"""Re-centring kernel "laplace_mh"'s proposal at each round's θ ([DG-LMC] Plassier et al., ICML 2021, eq. 4's
conditional Π_ρ(z_i | θ)): which shards do it, and how far the proposal's mean moves.

The plain proposal is the Laplace conditional N(m, A⁻¹) of Π_ρ(z_i | θ); re-centred, its mean moves by a Newton step
on the gradient of U_i's remainder beyond its Laplace model (`kernels/laplace_mh.py`), one gradient per round and
shard, which pays where the remainder is not flat on the conditional's scale √ρ.
"""

from __future__ import annotations

import numpy as np

from ..base import RoundInfo
from .types import CoordinatorState, Reply

#: kernel "laplace_mh": the re-centring step's cap, in proposal sds (‖A⁻¹∇r(m)‖_A). The step is a Newton step on
#: the remainder's linearisation at m, which stops holding a few sds away: on softmax on digits uncapped steps were
#: rarely accepted and capped ones nearly always; breast_cancer's steps stay under the cap (docs/performance.md,
#: "Measurements behind choices in the code")
RECENTRE_TRUST = 2.0

#: kernel "laplace_mh", recentre="auto": shards whose plain proposal is accepted less often than this during burn-in
#: re-centre it after. A rejection weakens the over-relaxation (β_eff = aβ + 1 − a at acceptance a), while the
#: re-centring costs a gradient a round: on breast_cancer (accepted less often) it paid in ESS/s, on covtype_like's
#: 25,000-row shards (accepted nearly always, nothing to gain) it would have made the round much longer
#: (docs/performance.md, "Measurements behind choices in the code")
RECENTRE_BELOW = 0.9


def recentre(mean: np.ndarray, lin: np.ndarray, a_inv: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The Laplace conditional's mean m moved by the Newton step −A⁻¹∇r(m) on the remainder's linearisation, the step
    capped at `RECENTRE_TRUST` proposal sds (‖step‖_A) and dropped where ∇r(m) is not finite: (the proposal's mean,
    the linear tilt λ∇r(m) it stands for). m and ∇r(m) are (B, K, d), a batch of shards' (a_inv (B, d, d))."""
    step = lin @ a_inv
    size = np.sqrt((lin * step).sum(axis=-1, keepdims=True))
    if np.all(size <= RECENTRE_TRUST):  # every step within the cap (and finite): the same numbers as below, sooner
        return mean - step, lin
    scale = np.where(np.isfinite(size), np.minimum(1.0, RECENTRE_TRUST / np.maximum(size, 1e-300)), 0.0)
    lin = np.where(scale > 0.0, lin * scale, 0.0)
    return mean - np.where(scale > 0.0, step * scale, 0.0), lin


def recentring(state: CoordinatorState, info: RoundInfo, shards: int) -> np.ndarray:
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


def shard_accepts(replies: Reply | list[Reply]) -> np.ndarray | None:
    """Every shard's local acceptance per chain (b, K), from the stacked replies or one per shard; None for a kernel
    without an acceptance (LMC)."""
    if isinstance(replies, Reply):
        return replies.accept
    accepts = [r.accept for r in replies if r.accept is not None]
    return np.stack(accepts) if accepts and len(accepts) == len(replies) else None
