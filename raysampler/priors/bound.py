"""The bound prior in the sampler's coordinates: its exactly Gaussian factor (`GaussianPrior`), the rest as terms
(`PriorTerm`), both together (`Prior`), and `build_prior`, which makes one from a model's prior specifications."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .specs import BetaPrior, CoefPrior, Flat, Normal, PartialCorrelations, PositivePrior, StudentT, _vec

# ------------------------------------------------------------------------------------------- the bound prior


@dataclass(frozen=True)
class GaussianPrior:
    """N(mean, P⁻¹) prior: `precision` P is diagonal (shape (d,)) or a dense symmetric matrix (d, d) (a diagonal prior
    seen in whitened coordinates); zeros on the diagonal mean a flat prior on those coordinates.

    It is also the whole of an all-Gaussian prior: `gaussian` is itself and `residual` is None (the prior contract
    above).
    """

    mean: np.ndarray
    precision: np.ndarray

    @property
    def gaussian(self) -> GaussianPrior:
        """The Gaussian factor: the prior itself."""
        return self

    @property
    def residual(self) -> None:
        """The non-Gaussian rest: none."""
        return None

    @property
    def dense(self) -> bool:
        """Whether P is a (d, d) matrix rather than its diagonal."""
        return np.ndim(self.precision) == 2

    def matrix(self) -> np.ndarray:
        """P as a (d, d) matrix."""
        return np.asarray(self.precision) if self.dense else np.diag(self.precision)

    def max_precision(self) -> float:
        """The largest eigenvalue of P (the prior's curvature)."""
        return float(np.linalg.eigvalsh(self.precision)[-1]) if self.dense else float(np.max(self.precision))

    def potential(self, x: np.ndarray) -> np.ndarray:
        """½ (x − mean)ᵀ P (x − mean) for each row of x."""
        diff = x - self.mean
        if self.dense:
            return 0.5 * np.sum((diff @ self.precision) * diff, axis=-1)
        return 0.5 * np.sum(diff * diff * self.precision, axis=-1)

    def grad(self, x: np.ndarray) -> np.ndarray:
        """P (x − mean) for each row of x."""
        diff = x - self.mean
        return diff @ self.precision if self.dense else diff * self.precision

    def hvp(self, x: np.ndarray, v: np.ndarray) -> np.ndarray:
        """P v for each row of v."""
        return v @ self.precision if self.dense else v * self.precision

    def hessian(self, x: np.ndarray) -> np.ndarray:
        """P (d, d) at one point (constant)."""
        return self.matrix()

    def hessian_diag(self, x: np.ndarray) -> np.ndarray:
        """diag(P), broadcast to x's shape."""
        diag = np.diag(self.precision) if self.dense else np.asarray(self.precision)
        return np.broadcast_to(diag, np.shape(x)).copy()


@dataclass(frozen=True, eq=False)
class TermPiece:
    """One spec applied elementwise to the coordinates `index` of θ (a Student-t on coefficients, a prior on log σ)."""

    index: np.ndarray
    spec: StudentT | PositivePrior | BetaPrior | PartialCorrelations


@dataclass(frozen=True, eq=False)
class PriorTerm:
    """The non-Gaussian part of a prior: Σ over pieces of the spec's potential on its coordinates. Separable, so its
    Hessian is diagonal: `hvp` is exact and `hessian_diag` is that exact diagonal (negative in a Student-t's tails;
    clip it where a PSD curvature is needed). Methods take (K, d) (or (d,)) and return (K,) / (K, d)."""

    dim: int
    pieces: tuple[TermPiece, ...]

    def _each(self, x: np.ndarray):
        for piece in self.pieces:
            yield piece.index, piece.spec._derivs(x[..., piece.index])

    def potential(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        out = np.zeros(x.shape[:-1])
        for _, (u, _, _) in self._each(x):
            out = out + u.sum(axis=-1)
        return out

    def grad(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        out = np.zeros_like(x)
        for idx, (_, g, _) in self._each(x):
            out[..., idx] = g
        return out

    def hessian_diag(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        out = np.zeros_like(x)
        for idx, (_, _, h) in self._each(x):
            out[..., idx] = h
        return out

    def hvp(self, x: np.ndarray, v: np.ndarray) -> np.ndarray:
        return self.hessian_diag(x) * v


@dataclass(frozen=True, eq=False)
class Prior:
    """A prior in the sampler's coordinates: the Gaussian factor `gaussian` times the non-Gaussian `residual`.

    `potential`, `grad`, `hvp` and `hessian_diag` are those of the whole prior (both parts); `hessian_diag` is exact,
    not clipped. Picklable (it travels to workers with the model)."""

    gaussian: GaussianPrior
    residual: PriorTerm | None = None

    @property
    def dim(self) -> int:
        return int(np.shape(self.gaussian.mean)[0])

    def potential(self, x: np.ndarray) -> np.ndarray:
        out = self.gaussian.potential(x)
        return out if self.residual is None else out + self.residual.potential(x)

    def grad(self, x: np.ndarray) -> np.ndarray:
        out = self.gaussian.grad(x)
        return out if self.residual is None else out + self.residual.grad(x)

    def hvp(self, x: np.ndarray, v: np.ndarray) -> np.ndarray:
        out = self.gaussian.hvp(x, v)
        return out if self.residual is None else out + self.residual.hvp(x, v)

    def hessian_diag(self, x: np.ndarray) -> np.ndarray:
        out = self.gaussian.hessian_diag(x)
        return out if self.residual is None else out + self.residual.hessian_diag(x)


def term_hessians(term: Any, x: np.ndarray) -> np.ndarray:
    """Dense Hessians (K, d, d) of a potential term with the prior contract (its `hvp`; a `PriorTerm` or one seen in
    other coordinates) at K points x (K, d): the d Hessian-vector products of every point in one call, symmetrised."""
    K, d = x.shape
    H = term.hvp(np.repeat(x, d, axis=0), np.tile(np.eye(d), (K, 1))).reshape(K, d, d)
    return 0.5 * (H + H.transpose(0, 2, 1))


def as_prior(prior: GaussianPrior | Prior) -> Prior:
    """Any object with the prior contract (a model's `prior()`, also a user model's own GaussianPrior) as a `Prior`."""
    if isinstance(prior, Prior):
        return prior
    if isinstance(prior, GaussianPrior):
        return Prior(prior, None)
    raise TypeError(f"expected a GaussianPrior or a Prior, got {type(prior).__name__}")


def build_prior(
    dim: int, parts: Sequence[tuple[np.ndarray, CoefPrior | PositivePrior | BetaPrior | PartialCorrelations]]
) -> GaussianPrior | Prior:
    """The bound prior of a model whose coordinates `index` (int arrays, disjoint, covering 0..dim−1) carry the given
    specs: Normal coordinates form the Gaussian factor (precision 0 where scale = inf), all others the residual.
    Returns the GaussianPrior itself when nothing is left for the residual."""
    mean = np.zeros(dim)
    precision = np.zeros(dim)
    pieces: list[TermPiece] = []
    covered = np.zeros(dim, dtype=int)
    for index, spec in parts:
        index = np.asarray(index, dtype=np.intp)
        covered[index] += 1
        size = getattr(spec, "size", None)
        if size is not None and size != index.size:
            raise ValueError(f"{type(spec).__name__} has {size} values for {index.size} coordinates")
        if isinstance(spec, Normal):
            scale = _vec(spec.scale, index.size)
            mean[index] = _vec(spec.mean, index.size)
            precision[index] = np.where(np.isinf(scale), 0.0, 1.0 / np.where(np.isinf(scale), 1.0, scale) ** 2)
        elif not (isinstance(spec, Flat) and spec.log):  # a flat prior on log σ has no potential at all
            pieces.append(TermPiece(index, spec))
    if np.any(covered != 1):
        raise ValueError("build_prior: the parts must cover every coordinate exactly once")
    gaussian = GaussianPrior(mean=mean, precision=precision)
    return gaussian if not pieces else Prior(gaussian, PriorTerm(dim, tuple(pieces)))
