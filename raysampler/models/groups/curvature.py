"""A group model's local curvature in one pass over the rows (`HierarchicalGLM.local_curvature`): U, ∇U and the
blocks ∇²_ηη U (group by group), ∇²_ηθ U and ∇²_θθ U that the Laplace tuning and the "laplace_mh" kernel read."""

from __future__ import annotations

from typing import cast

import numpy as np

from ..contract import EtaHessian, LocalCurvature, Model
from .index import Point
from .scales import apply_scale, apply_scale_many
from .view import GroupModelView

#: the functions below take a `model.HierarchicalGLM`, seen through the members they read (model.py imports this
#: module, not back)
GroupModel = GroupModelView


def local_curvature(
    model: GroupModel, X: np.ndarray, y: np.ndarray, x: np.ndarray, parts: str = "all"
) -> LocalCurvature:
    """U, ∇U, ∇²_ηη U block by block and, as far as `parts` asks, ∇²_ηθ U and ∇²_θθ U at K points, in one pass.

    With r_g = M η_g and W_g = Σ_{j in g} ∂²ℓ_j/∂η_j² z_j z_jᵀ, group g's block is Mᵀ W_g M + I. The cross and θ
    blocks come from the Jacobian J_j of row j's linear predictor in θ's coordinates other than ψ (β: x_j; a
    scale s_p of factor f: z_fjᵀ ∂M/∂s_p η): ∇²_{η_g θ} = Mᵀ Σ_{j in g} ∂²ℓ_j z_j J_jᵀ (+ ∂M/∂s_pᵀ g_r for the
    group's own scales, + the ψ column), ∇²_θθ = Σ_j ∂²ℓ_j J_j J_jᵀ plus ψ's terms and M's second derivatives on
    C = Σ_g g_r η_gᵀ.

    With a spanning factor (its η in θ) the blocks are the contract's default, from dense Hessians (d + l
    Hessian-vector products): exact, at a pass per coordinate."""
    if model.has_spanning:
        return Model.local_curvature(cast(Model, model), X, y, x, parts)  # the contract's default, on the model
    pt = model._point(X, y, x, 2)
    value = model._value(pt)
    g, grs, Cs = model._grad(pt)
    t, index = pt.terms, pt.index
    etas = []
    for fi, sc in zip(index.factors, pt.scales):
        W = fi.blocks(t.d2)
        if fi.q == 1:
            Hb = (sc.M[:, 0, 0] ** 2)[:, None, None, None] * W + 1.0
        else:
            # Mᵀ W_g M as stacked matmuls, faster than the 3-operand einsum (docs/performance.md, "Measurements
            # behind choices in the code")
            Hb = np.swapaxes(sc.M, 1, 2)[:, None] @ W @ sc.M[:, None]
            Hb[..., np.arange(fi.q), np.arange(fi.q)] += 1.0
        etas.append(Hb)
    eta_h = EtaHessian(etas[0] if len(etas) == 1 else dense_eta_hessian(pt)[:, None])
    if parts == "eta":
        return LocalCurvature(value, g, eta_h, None, None, model._blocks(pt))
    d, p, nf = model.dim, model.family.n_coef, model.n_family
    K, n = pt.x.shape[0], index.Xf.shape[0]
    m = nf - p
    # J's columns: β (θ's 0..p−1: x_j, the same for every chain), then every factor's scales (θ's nf..d−1:
    # U[s] (n, K) for scale s); each block below is a product with the row weights ∂²ℓ_j (n, K) as they are
    U, at = np.empty((d - nf, n, K)), 0
    for ge, fi, sc, e in zip(model.factors, index.factors, pt.scales, pt.etas):
        for k in range(ge.n_scale):
            U[at] = fi.gather(apply_scale(sc.dM[..., k], e))
            at += 1
    d2U = np.empty_like(U)
    for a in range(d - nf):
        np.multiply(t.d2, U[a], out=d2U[a])
    cross = None
    if parts in ("cross", "all"):
        cross = np.zeros((K, index.local, d))
        for ge, fi, sc, gr, s0 in zip(model.factors, index.factors, pt.scales, grs, model.scale_starts):
            block = np.zeros((K, fi.G, fi.q, d))
            block[..., :p] = apply_scale_many(sc.M, fi.scatter_x(t.d2))
            for j in range(d - nf):
                block[..., nf + j] = apply_scale(sc.M, fi.scatter(d2U[j]), transpose=True)
            if m:
                block[..., p:nf] = apply_scale_many(sc.M, fi.scatter_many(t.h_eta_psi))
            block[..., s0 : s0 + ge.n_scale] += np.einsum("kbap,kgb->kgap", sc.dM, gr)
            cross[:, fi.start : fi.start + fi.width] = block.reshape(K, fi.width, d)
    th = None
    if parts in ("theta", "all"):
        th = np.zeros((K, d, d))  # Σ_j ∂²ℓ_j J_j J_jᵀ, then ψ's terms and M's second derivatives
        # Σ_j ∂²ℓ_jk x_j x_jᵀ: by column pairs (x_a ∘ x_b)ᵀ ∂²ℓ, all chains at once, where that makes fewer products
        # along the rows (p(p + 1)/2 against K·p), else chain by chain, Xcᵀ (∂²ℓ_k ∘ Xc)
        if p <= 2 * K:
            for a in range(p):
                th[:, a:p, a] = th[:, a, a:p] = ((index.XcT[a:] * index.XcT[a]) @ t.d2).T
        else:
            for k in range(K):
                th[k, :p, :p] = (index.XcT * t.d2[:, k]) @ index.Xc
        for a in range(d - nf):
            bs = index.Xc.T @ d2U[a]  # (p, K)
            th[:, :p, nf + a] = th[:, nf + a, :p] = bs.T
            for b in range(a, d - nf):
                th[:, nf + a, nf + b] = th[:, nf + b, nf + a] = np.einsum("nk,nk->k", d2U[a], U[b])
        if m:
            th[:, p:nf, p:nf] = t.h_psi
            hpb = (t.h_eta_psi.reshape(n, K * m).T @ index.Xc).reshape(K, m, p)  # Σ_j ∂²ℓ_j/∂η_j∂ψ x_jᵀ
            th[:, p:nf, :p] = hpb
            th[:, :p, p:nf] = np.swapaxes(hpb, 1, 2)
            if d > nf:
                hps = np.einsum("nkm,bnk->kmb", t.h_eta_psi, U)
                th[:, p:nf, nf:] = hps
                th[:, nf:, p:nf] = np.swapaxes(hps, 1, 2)
        for ge, sc, C, s0 in zip(model.factors, pt.scales, Cs, model.scale_starts):
            sl = slice(s0, s0 + ge.n_scale)
            th[:, sl, sl] += np.einsum("kabpq,kab->kpq", sc.d2M, C)
        th = 0.5 * (th + np.swapaxes(th, 1, 2))
    return LocalCurvature(value, g, eta_h, cross, th, model._blocks(pt))


def dense_eta_hessian(pt: Point) -> np.ndarray:
    """∇²_ηη U (K, l, l) with several grouping factors: Jᵀ diag(∂²ℓ) J + I with J = ∂(linear predictor)/∂η, a
    sparse (n, l) matrix per chain (row j: z_fjᵀ M_f in its group's columns of each factor)."""
    import scipy.sparse as sp

    K = pt.x.shape[0]
    index = pt.index
    out = np.empty((K, index.local, index.local))
    for k in range(K):
        parts = []
        for fi, sc in zip(index.factors, pt.scales):
            vals = (fi.Z @ sc.M[k]).reshape(-1)
            parts.append(sp.csr_matrix((vals, fi.A.indices, fi.A.indptr), shape=fi.A.shape))
        Jk = sp.hstack(parts).tocsr()
        H = (Jk.T @ Jk.multiply(pt.terms.d2[:, k][:, None])).toarray()
        out[k] = 0.5 * (H + H.T) + np.eye(index.local)
    return out
