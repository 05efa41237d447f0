"""The affine reparameterisation θ = shift + Lφ that every gradient-based sampler runs in by default, and the model
and prior seen in φ.

With L Lᵀ the inverse Hessian of U at the MAP (the Laplace preconditioner), the posterior in φ is close to N(0, I):
one step size fits every direction, whatever the data's scales and correlations. A sampler runs unchanged on
`WhitenedModel(model, precond)`; its draws φ map back with `precond.to_theta`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, TypeAlias

import numpy as np

from .models.contract import DataSpec, LocalCurvature, Model, ParamBlock, per_shard
from .priors import GaussianPrior, PriorTerm, term_hessians


@dataclass(frozen=True)
class Preconditioner:
    """Affine change of variables θ = shift + L φ (L dense (d, d), diagonal (d,), or None for identity)."""

    shift: np.ndarray
    scale: np.ndarray | None
    kind: str  # "laplace" | "diag" | "none"

    @classmethod
    def identity(cls, d: int) -> Preconditioner:
        return cls(np.zeros(d), None, "none")

    def matrix(self) -> np.ndarray | None:
        """L as a (d, d) matrix (None for the identity)."""
        if self.scale is None:
            return None
        return np.diag(self.scale) if self.scale.ndim == 1 else self.scale

    def to_theta(self, phi: np.ndarray) -> np.ndarray:
        """θ = shift + L φ for a (K, d) batch."""
        if self.scale is None:
            return phi + self.shift
        return self.shift + (phi * self.scale if self.scale.ndim == 1 else phi @ self.scale.T)

    def to_phi(self, theta: np.ndarray) -> np.ndarray:
        """φ = L⁻¹(θ − shift) for a (K, d) batch."""
        diff = theta - self.shift
        if self.scale is None:
            return diff
        if self.scale.ndim == 1:
            return diff / self.scale
        return np.linalg.solve(self.scale, diff.T).T

    def push(self, v: np.ndarray) -> np.ndarray:
        """L v for a (K, d) batch of directions."""
        if self.scale is None:
            return v
        return v * self.scale if self.scale.ndim == 1 else v @ self.scale.T

    def pull_grad(self, g: np.ndarray) -> np.ndarray:
        """Gradient in φ from the gradient in θ: Lᵀ∇U, for a (K, d) batch."""
        if self.scale is None:
            return g
        return g * self.scale if self.scale.ndim == 1 else g @ self.scale

    def pull_matrix(self, H: np.ndarray) -> np.ndarray:
        """A Hessian in φ from one in θ: LᵀHL, for one (d, d) or a stack (K, d, d)."""
        if self.scale is None:
            return H
        if self.scale.ndim == 1:
            return H * np.outer(self.scale, self.scale)
        out = self.scale.T @ H @ self.scale
        return 0.5 * (out + np.swapaxes(out, -1, -2))

    def pull_diag(self, hd: np.ndarray) -> np.ndarray:
        """diag(LᵀHL) from diag(H) — exact for a diagonal L (used only there)."""
        if self.scale is None:
            return hd
        if self.scale.ndim != 1:
            raise ValueError("pull_diag needs a diagonal preconditioner")
        return hd * self.scale * self.scale

    def prior_in_phi(self, mean: np.ndarray, precision: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """A Gaussian N(mean, P⁻¹) (P diagonal (d,) or dense) in φ: (precision matrix, linear term b), density
        ∝ exp(−½φᵀPφ + bᵀφ)."""
        P = np.diag(precision) if np.ndim(precision) == 1 else np.asarray(precision)
        Lm = self.matrix()
        if Lm is None:
            return P, P @ (mean - self.shift)
        Pphi = Lm.T @ P @ Lm
        return 0.5 * (Pphi + Pphi.T), Lm.T @ (P @ (mean - self.shift))

    def gaussian_in_phi(self, prior: GaussianPrior) -> GaussianPrior:
        """The same Gaussian prior in φ (dense precision unless L is diagonal or the identity)."""
        mean = self.to_phi(np.asarray(prior.mean, dtype=float)[None, :])[0]
        if self.scale is None:
            return GaussianPrior(mean, prior.precision)
        if self.scale.ndim == 1 and not prior.dense:
            return GaussianPrior(mean, prior.precision * self.scale * self.scale)
        return GaussianPrior(mean, self.pull_matrix(prior.matrix()))


@dataclass(frozen=True)
class WhitenedTerm:
    """A (non-Gaussian) potential term seen in φ: term(shift + Lφ) with its derivatives pulled back."""

    term: PriorTerm | WhitenedTerm
    precond: Preconditioner

    def potential(self, x: np.ndarray) -> np.ndarray:
        return self.term.potential(self.precond.to_theta(x))

    def grad(self, x: np.ndarray) -> np.ndarray:
        return self.precond.pull_grad(self.term.grad(self.precond.to_theta(x)))

    def hvp(self, x: np.ndarray, v: np.ndarray) -> np.ndarray:
        return self.precond.pull_grad(self.term.hvp(self.precond.to_theta(x), self.precond.push(v)))

    def hessian_diag(self, x: np.ndarray) -> np.ndarray:
        x2 = np.atleast_2d(x)
        d = x2.shape[1]
        out = np.stack([np.diag(np.stack([self.hvp(xk[None, :], e[None, :])[0] for e in np.eye(d)])) for xk in x2])
        return out[0] if np.ndim(x) == 1 else out


@dataclass(frozen=True)
class PriorInPhi:
    """A prior (Gaussian part + optional residual term) seen in φ, with the same contract as the model's prior."""

    gaussian: GaussianPrior
    residual: WhitenedTerm | None

    def potential(self, x: np.ndarray) -> np.ndarray:
        out = self.gaussian.potential(x)
        return out + self.residual.potential(x) if self.residual is not None else out

    def grad(self, x: np.ndarray) -> np.ndarray:
        out = self.gaussian.grad(x)
        return out + self.residual.grad(x) if self.residual is not None else out

    def hvp(self, x: np.ndarray, v: np.ndarray) -> np.ndarray:
        out = self.gaussian.hvp(x, v)
        return out + self.residual.hvp(x, v) if self.residual is not None else out

    def hessian_diag(self, x: np.ndarray) -> np.ndarray:
        out = self.gaussian.hessian_diag(x)
        return out + self.residual.hessian_diag(x) if self.residual is not None else out

    def max_precision(self) -> float:
        return self.gaussian.max_precision()


class _LocalLayout:
    """What a wrapper of `model` keeps as the model's: its dimension, parameter layout and names, data checks, and
    the local-parameter layout (group effects): a change of coordinates or a prior share acts on θ only, so whether
    a shard has local parameters, how many and their names are the model's."""

    model: ModelLike

    @property
    def dim(self) -> int:
        return int(self.model.dim)

    @property
    def target_kind(self) -> str:
        return self.model.target_kind

    def param_blocks(self) -> tuple[ParamBlock, ...]:
        return self.model.param_blocks()

    def param_names(self) -> list[str]:
        return list(self.model.param_names())

    def shard_data(self, X: np.ndarray, y: np.ndarray, rows: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        return self.model.shard_data(X, y, rows)

    def validate(self, X: np.ndarray, y: np.ndarray, argname: str = "data") -> None:
        self.model.validate(X, y, argname=argname)

    def gram(self, X: np.ndarray, y: np.ndarray) -> np.ndarray | None:
        return self.model.gram(X, y)

    def check_proper(self, gram: np.ndarray | None, n_rows: int | None = None) -> None:
        self.model.check_proper(gram, n_rows=n_rows)

    def has_local_params(self) -> bool:
        return bool(self.model.has_local_params())

    def work_per_element(self) -> float:
        return float(self.model.work_per_element())

    def work_per_step(self) -> float:
        return float(self.model.work_per_step())

    def local_dim(self, X: np.ndarray, y: np.ndarray) -> int:
        return int(self.model.local_dim(X, y))

    def local_blocks(self, X: np.ndarray, y: np.ndarray) -> tuple[Any, ...]:
        return tuple(self.model.local_blocks(X, y))

    def block_potential(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        """The model's potential per η block (θ-only terms, such as a prior share, are in none of them)."""
        return self.model.block_potential(X, y, self._theta(x))

    def centring(self, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        """The model's own (in θ's coordinates: a change of coordinates keeps θ's meaning)."""
        return np.asarray(self.model.centring(X, y), dtype=bool)

    def _theta(self, x: np.ndarray) -> np.ndarray:
        """x in the wrapped model's coordinates (the identity, unless the wrapper changes θ's)."""
        return x


@dataclass(frozen=True)
class WhitenedModel(_LocalLayout):
    """`model` seen in φ (θ = shift + Lφ): U_i(φ) = U_i^model(θ), ∇_φ = Lᵀ∇_θ, ∇²_φ = Lᵀ∇²_θ L, the prior likewise.

    It has every method of the model contract, so any algorithm runs on it unchanged; its `smoothness` is the
    model's bound scaled by ‖L‖² (the curvature met at the MAP is what tuning uses instead). The layout and data
    methods are the model's own (θ's names, per-row inputs and properness do not change with the coordinates).
    """

    model: ModelLike
    precond: Preconditioner

    name = "whitened"

    def bind(self, spec: DataSpec) -> WhitenedModel:
        return WhitenedModel(self.model.bind(spec), self.precond)

    def prior(self) -> PriorInPhi:
        base = self.model.prior()
        residual = base.residual
        return PriorInPhi(
            self.precond.gaussian_in_phi(base.gaussian),
            WhitenedTerm(residual, self.precond) if residual is not None else None,
        )

    # local parameters (group effects): x is (K, d + l_i), φ first; the change of variables acts on φ only

    def local_natural(self, phi: np.ndarray, eta: np.ndarray, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        return self.model.local_natural(self.precond.to_theta(phi), eta, X, y)

    def _theta(self, x: np.ndarray) -> np.ndarray:
        d = self.dim
        if x.shape[-1] == d:
            return self.precond.to_theta(x)
        return np.concatenate([self.precond.to_theta(x[:, :d]), x[:, d:]], axis=1)

    def _pull(self, g: np.ndarray) -> np.ndarray:
        d = self.dim
        if g.shape[-1] == d:
            return self.precond.pull_grad(g)
        return np.concatenate([self.precond.pull_grad(g[:, :d]), g[:, d:]], axis=1)

    def _push(self, v: np.ndarray) -> np.ndarray:
        d = self.dim
        if v.shape[-1] == d:
            return self.precond.push(v)
        return np.concatenate([self.precond.push(v[:, :d]), v[:, d:]], axis=1)

    def potential(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        return self.model.potential(X, y, self._theta(x))

    def grad(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        return self._pull(self.model.grad(X, y, self._theta(x)))

    def potential_and_grad(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        pot, g = self.model.potential_and_grad(X, y, self._theta(x))
        return pot, self._pull(g)

    def hvp(self, X: np.ndarray, y: np.ndarray, x: np.ndarray, v: np.ndarray) -> np.ndarray:
        return self._pull(self.model.hvp(X, y, self._theta(x), self._push(v)))

    def potential_stacked(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        """Several shards at once (x (B, K, d)): θ = shift + Lφ is a stacked product, as in `potential`."""
        if x.shape[-1] != self.dim:
            return per_shard(self.potential, X, y, x)
        return self.model.potential_stacked(X, y, self.precond.to_theta(x))

    def grad_stacked(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        if x.shape[-1] != self.dim:
            return per_shard(self.grad, X, y, x)
        return self.precond.pull_grad(self.model.grad_stacked(X, y, self.precond.to_theta(x)))

    def hessian(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        theta = self.precond.to_theta(np.asarray(x, dtype=float)[None, :])[0]
        return self.precond.pull_matrix(self.model.hessian(X, y, theta))

    def hessians(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        """The model's batched Hessians at θ_k = shift + Lφ_k, each pulled back to LᵀH_kL."""
        theta = self.precond.to_theta(np.asarray(x, dtype=float))
        return self.precond.pull_matrix(self.model.hessians(X, y, theta))

    def centred_move(
        self, X: np.ndarray, y: np.ndarray, x: np.ndarray, dtheta: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """The model's move, x in φ and dtheta in θ's coordinates (the Jacobian of θ ↔ φ is constant)."""
        moved, delta = self.model.centred_move(X, y, self._theta(x), dtheta)
        d = self.dim
        return np.concatenate([self.precond.to_phi(moved[:, :d]), moved[:, d:]], axis=1), delta

    def local_curvature(self, X: np.ndarray, y: np.ndarray, x: np.ndarray, parts: str = "all") -> LocalCurvature:
        """The model's, with θ's parts seen in φ: ∇_φ = Lᵀ∇_θ, ∇²_ηφ = ∇²_ηθ L, ∇²_φφ = Lᵀ∇²_θθ L."""
        lc = self.model.local_curvature(X, y, self._theta(x), parts)
        Lm = self.precond.matrix()
        cross = lc.cross if lc.cross is None or Lm is None else lc.cross @ Lm
        theta = lc.theta
        if theta is not None and Lm is not None:
            theta = np.einsum("ia,kij,jb->kab", Lm, theta, Lm)
        return LocalCurvature(lc.value, self._pull(lc.grad), lc.eta, cross, theta, lc.blocks)

    def hessian_diag(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=float)
        if self.precond.scale is not None and self.precond.scale.ndim == 2:
            H = self.hessian(X, y, x) if x.ndim == 1 else self.hessians(X, y, x)
            return np.clip(np.diagonal(H, axis1=-2, axis2=-1), 0.0, None)
        theta = self.precond.to_theta(x[None, :])[0] if x.ndim == 1 else self.precond.to_theta(x)
        return self.precond.pull_diag(np.asarray(self.model.hessian_diag(X, y, theta)))

    def smoothness(self, X: np.ndarray, y: np.ndarray) -> float:
        Lm = self.precond.matrix()
        norm2 = 1.0 if Lm is None else float(np.linalg.norm(Lm, 2)) ** 2
        return float(self.model.smoothness(X, y)) * norm2


@dataclass(frozen=True)
class WithPriorShare(_LocalLayout):
    """`model` whose every shard potential also carries `weight` × the prior's non-Gaussian term:
    U_i + w·R. Algorithms whose coordinator holds only the Gaussian part of the prior (DG-LMC's exact θ | z step)
    give each of the b workers w = 1/b of the residual, so Σ_i (U_i + R/b) + Gaussian part = U exactly."""

    model: ModelLike
    weight: float

    @functools.cached_property
    def term(self) -> PriorTerm | WhitenedTerm:
        """R, the prior's non-Gaussian term (`with_prior_share` wraps only models whose prior has one); found once
        (every shard potential of every local step adds it)."""
        term = self.model.prior().residual
        if term is None:
            raise ValueError("WithPriorShare: the model's prior has no non-Gaussian term to share")
        return term

    def bind(self, spec: DataSpec) -> WithPriorShare:
        return WithPriorShare(self.model.bind(spec), self.weight)

    def prior(self) -> Any:
        return self.model.prior()

    # local parameters (group effects): x is (K, d + l_i); the prior (and its share) is on the global part only

    def local_natural(self, theta: np.ndarray, eta: np.ndarray, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        return self.model.local_natural(theta, eta, X, y)

    def _pad(self, g: np.ndarray, width: int) -> np.ndarray:
        """A gradient or Hessian-vector product on the global part, padded with zeros over the local part."""
        if width == g.shape[-1]:
            return g
        out = np.zeros((g.shape[0], width))
        out[:, : g.shape[-1]] = g
        return out

    def potential(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        return self.model.potential(X, y, x) + self.weight * self.term.potential(x[:, : self.dim])

    def grad(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        return self.model.grad(X, y, x) + self.weight * self._pad(self.term.grad(x[:, : self.dim]), x.shape[1])

    def potential_and_grad(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        pot, g = self.model.potential_and_grad(X, y, x)
        term, xg = self.term, x[:, : self.dim]
        return pot + self.weight * term.potential(xg), g + self.weight * self._pad(term.grad(xg), x.shape[1])

    def hvp(self, X: np.ndarray, y: np.ndarray, x: np.ndarray, v: np.ndarray) -> np.ndarray:
        d = self.dim
        return self.model.hvp(X, y, x, v) + self.weight * self._pad(self.term.hvp(x[:, :d], v[:, :d]), x.shape[1])

    def potential_stacked(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        return per_shard(self.potential, X, y, x)

    def grad_stacked(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        return per_shard(self.grad, X, y, x)

    def hessian(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        return self.model.hessian(X, y, x) + self.weight * term_hessians(self.term, np.asarray(x, dtype=float)[None])[0]

    def hessians(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        """The model's batched Hessians plus w × the term's (on θ's block) at the K points."""
        x = np.asarray(x, dtype=float)
        H = np.array(self.model.hessians(X, y, x), dtype=float)
        d = self.dim
        H[:, :d, :d] += self.weight * term_hessians(self.term, x[:, :d])
        return H

    def hessian_diag(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        return self.model.hessian_diag(X, y, x) + self.weight * np.clip(self.term.hessian_diag(x), 0.0, None)

    def centred_move(
        self, X: np.ndarray, y: np.ndarray, x: np.ndarray, dtheta: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """The model's move, plus the change of the prior share."""
        moved, delta = self.model.centred_move(X, y, x, dtheta)
        d = self.dim
        return moved, delta + self.weight * (self.term.potential(moved[:, :d]) - self.term.potential(x[:, :d]))

    def local_curvature(self, X: np.ndarray, y: np.ndarray, x: np.ndarray, parts: str = "all") -> LocalCurvature:
        """The model's, plus the prior share on θ (its value, gradient and, when asked, Hessian)."""
        lc = self.model.local_curvature(X, y, x, parts)
        d = self.dim
        xg = x[:, :d]
        grad = lc.grad + self.weight * self._pad(self.term.grad(xg), x.shape[1])
        theta = lc.theta
        if theta is not None:
            theta = theta + self.weight * term_hessians(self.term, xg)
        return LocalCurvature(
            lc.value + self.weight * self.term.potential(xg), grad, lc.eta, lc.cross, theta, lc.blocks
        )

    def smoothness(self, X: np.ndarray, y: np.ndarray) -> float:
        return float(self.model.smoothness(X, y))


#: What the wrappers above wrap: a model, or a model already wrapped (a whitened model given a prior share).
ModelLike: TypeAlias = Model | WhitenedModel | WithPriorShare


def with_prior_share(model: ModelLike, weight: float) -> ModelLike:
    """`model` itself when its prior is all Gaussian, else `WithPriorShare(model, weight)`."""
    return model if model.prior().residual is None else WithPriorShare(model, weight)
