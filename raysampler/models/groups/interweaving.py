"""Interweaving moves of a group model (the centred parameterisation, `HierarchicalGLM.centred_move`): θ moves
while every row's linear predictor stays, so U changes by the effects' prior terms alone, with no pass over the
rows."""

from __future__ import annotations

import numpy as np

from .scales import apply_scale, scale_at
from .view import GroupModelView

#: the functions below take a `model.HierarchicalGLM`, seen through the members they read (model.py imports this
#: module, not back)
GroupModel = GroupModelView


def coefficient_locations(model: GroupModel) -> tuple[tuple[int, int, int], ...]:
    """(factor, effect, coefficient) triples: effect k of factor f whose column is coefficient a's too (the
    intercept and a slope that is also a feature), each coefficient with its first such factor."""
    labels = list(model.family._coef_labels() or ())
    out, taken = [], set()
    for f, ge in enumerate(model.factors):
        if model.global_levels[f] is not None:  # a spanning factor's effects are θ's: no centred move
            continue
        for k, eff in enumerate(ge.effects):
            if eff in labels and labels.index(eff) not in taken:
                taken.add(labels.index(eff))
                out.append((f, k, labels.index(eff)))
    return tuple(out)


def centring(model: GroupModel, X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The group scales (every factor's log sds and correlations), and each coefficient whose column equals a
    group effect's column on this shard (`_locations`): moving it by δ and that effect of every group by −δ
    leaves each row's linear predictor as it is."""
    mask = np.zeros(model.dim, dtype=bool)
    for ge, s0, levels in zip(model.factors, model.scale_starts, model.global_levels):
        mask[s0 : s0 + ge.n_scale] = levels is None  # a spanning factor's scales move its global η: not here
    index = model._index(X)
    Xc = index.Xc
    for f, k, a in model._locations:
        if np.array_equal(index.factors[f].Z[:, k], Xc[:, a]):
            mask[a] = True
    return mask


def centred_move(
    model: GroupModel, X: np.ndarray, y: np.ndarray, x: np.ndarray, dtheta: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """θ' = θ + dθ, and per group r' = r − δ (δ: the moved coefficients matched to its effects), η' = M(s')⁻¹ r':
    every row's linear predictor is unchanged, so U changes by ½(‖η'‖² − ‖η‖²) alone, and
    log|det ∂η'/∂η| = Σ_f G_f (log det M_f(s) − log det M_f(s')). O(l_i), no pass over the rows."""
    index = model._index(X)
    x = np.asarray(x, dtype=np.float64)
    K, d = x.shape[0], model.dim
    out = x.copy()
    out[:, :d] = x[:, :d] + dtheta
    delta = np.zeros(K)
    for f, (ge, fi, s0) in enumerate(zip(model.factors, index.factors, model.scale_starts)):
        if not fi.local:
            continue
        sl = slice(s0, s0 + ge.n_scale)
        M, M2 = scale_at(ge, x[:, sl], 0).M, scale_at(ge, out[:, sl], 0).M
        e = x[:, d + fi.start : d + fi.start + fi.width].reshape(K, fi.G, fi.q)
        r = apply_scale(M, e)
        for ff, k, a in model._locations:
            if ff == f:
                r[:, :, k] -= dtheta[:, a][:, None]
        e2 = r / M2[:, :, 0][:, None, :] if fi.q == 1 else np.linalg.solve(M2[:, None], r[..., None])[..., 0]
        out[:, d + fi.start : d + fi.start + fi.width] = e2.reshape(K, -1)
        logdet = np.log(np.abs(np.diagonal(M, axis1=1, axis2=2))).sum(axis=1)
        logdet2 = np.log(np.abs(np.diagonal(M2, axis1=1, axis2=2))).sum(axis=1)
        delta += 0.5 * (np.einsum("kgq,kgq->k", e2, e2) - np.einsum("kgq,kgq->k", e, e)) - fi.G * (logdet - logdet2)
    return out, delta
