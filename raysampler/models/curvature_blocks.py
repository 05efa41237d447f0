"""What a model with local parameters (group effects) gives the set-up and the kernels about a shard's curvature:
∇²_ηη U as independent blocks (`EtaHessian`) and the potential with its second derivatives (`LocalCurvature`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, eq=False)
class EtaHessian:
    """∇²_ηη U_i over a shard's local parameters η at K points, as `blocks` (K, B, e, e): B independent e × e blocks
    in η's order (a model with one grouping factor: one block per group, e its number of effects; else one block,
    e = l_i). Positive definite where the local parameters have a proper prior (group effects: ∇²_ηη ⪰ I). Solves
    and log-determinants go block by block, batched over chains and blocks, exactly (Cholesky)."""

    blocks: np.ndarray

    @property
    def size(self) -> int:
        """l_i = B·e."""
        return int(self.blocks.shape[1] * self.blocks.shape[2])

    def cholesky(self) -> np.ndarray:
        """The lower Cholesky factors (K, B, e, e) (LinAlgError where a block is not positive definite)."""
        if self.blocks.shape[-1] == 1:
            if not np.all(self.blocks > 0):
                raise np.linalg.LinAlgError("a local Hessian block is not positive definite")
            return np.sqrt(self.blocks)
        return np.linalg.cholesky(self.blocks)

    def solve(self, rhs: np.ndarray) -> np.ndarray:
        """H⁻¹ rhs per chain for rhs (K, l) or (K, l, c) (c right-hand sides)."""
        K, B, e, _ = self.blocks.shape
        r = np.asarray(rhs, dtype=np.float64)
        cols = r.shape[2:]
        rb = r.reshape(K, B, e, -1)
        if e == 1:
            out = rb / self.blocks
        else:
            out = np.linalg.solve(self.blocks, rb)
        return out.reshape((K, B * e) + cols)

    def matmul(self, v: np.ndarray) -> np.ndarray:
        """H v per chain for v (K, l)."""
        K, B, e, _ = self.blocks.shape
        return np.einsum("kbij,kbj->kbi", self.blocks, v.reshape(K, B, e)).reshape(K, B * e)

    def half_logdet(self, per_block: bool = False) -> np.ndarray:
        """½ log det H per chain (K,), or per block (K, B)."""
        L = self.cholesky()
        out = np.log(np.diagonal(L, axis1=-2, axis2=-1)).sum(axis=-1)
        return out if per_block else out.sum(axis=-1)


@dataclass(frozen=True, eq=False)
class LocalCurvature:
    """A shard's potential at K points x = (θ, η) (K, d + l_i) with the second derivatives the local parameters'
    set-up and kernels need (`Model.local_curvature`): U (K,), ∇U (K, d + l_i), ∇²_ηη U (`EtaHessian`), the cross
    block ∇²_ηθ U (K, l_i, d) and ∇²_θθ U (K, d, d) when asked for (`parts`), and the potential per η block (K, B):
    the terms of U that involve that block's η (for one accept/reject per block; their sum is U less the θ-only
    terms)."""

    value: np.ndarray
    grad: np.ndarray
    eta: EtaHessian
    cross: np.ndarray | None
    theta: np.ndarray | None
    blocks: np.ndarray


#: What `Model.local_curvature` computes: "eta" (U, ∇U, ∇²_ηη U, block potentials), "cross" (and ∇²_ηθ U), "theta"
#: (and ∇²_θθ U) or "all" (both).
CURVATURE_PARTS = ("eta", "cross", "theta", "all")
