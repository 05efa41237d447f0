"""Centralised gradient references on the pooled data (seed 003, sec. 5 baselines; ALGORITHMS.md §6).

The coordinator holds θ (K, d). Each round it sends one point to every worker, each worker returns its shard's
∇U_i (and U_i for MALA) there, and the coordinator adds the prior's and takes the step. Workers keep no state.

  ULA:  θ ← θ − γ∇U(θ) + √(2γ)ξ,  U = Σ_i U_i + U_prior.
  MALA: proposal θ' = θ − h∇U(θ) + √(2h)ξ, accepted with probability
        min(1, exp(−U(θ') + U(θ)) q(θ | θ') / q(θ' | θ)), q(a | b) ∝ exp(−‖a − b + h∇U(b)‖²/(4h)):
        the reverse density uses ∇U at the *proposal* (the authors' code used the old gradient there: a bug).
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from .. import tuning
from ..models.base import GaussianPrior, Model
from ..streams import ChainNoise
from .base import Algorithm, Plan, RoundInfo, ShardPool
from .dglmc import _check_unit, _dual_averaging


def _check_positive(name: str, value: Any, allow_none: bool = True) -> None:
    """A finite positive real (or None if allowed), else ValueError naming the parameter."""
    if value is None and allow_none:
        return
    ok = (isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value) and value > 0)
    if not ok:
        raise ValueError(f"{name} must be a positive number, got {value!r}")


def _check_init(init: Any) -> None:
    if isinstance(init, str):
        if init not in ("map", "zeros"):
            raise ValueError(f"init must be 'map', 'zeros' or an array, got {init!r}")
        return
    try:
        np.asarray(init, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"init must be 'map', 'zeros' or an array, got {init!r}") from None


def shard_batch_value_and_grad(model: Model, X: np.ndarray, y: np.ndarray, theta: np.ndarray):
    """U_i and ∇U_i at K points (K, d) on one shard (module-level so Ray can ship it)."""
    return model.potential_and_grad(X, y, theta)


def initial_points(init: Any, model: Model, pool: ShardPool, chains: int, seed: int) -> np.ndarray:
    """Initial (K, d) points: "map" (tuning.find_map, every chain at the MAP), "zeros", or an array (d,)/(K, d)."""
    d = model.dim
    if isinstance(init, str):
        if init == "map":
            x0 = 0.01 * np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(2**31,))).standard_normal(d)
            theta = tuning.find_map(model, pool, x0=x0, dense_hessian=False)
            return np.repeat(theta[None, :], chains, axis=0)
        if init == "zeros":
            return np.zeros((chains, d))
        raise ValueError(f"init must be 'map', 'zeros' or an array, got {init!r}")
    arr = np.asarray(init, dtype=float)
    if arr.shape == (d,):
        arr = np.repeat(arr[None, :], chains, axis=0)
    if arr.shape != (chains, d) or not np.all(np.isfinite(arr)):
        raise ValueError(f"init must have shape ({d},) or ({chains}, {d}) with finite values, got shape {arr.shape}")
    return arr.copy()


def lipschitz_bound(model: Model, pool: ShardPool) -> float:
    """L = Σ_i M_i + max prior precision (M_i = tuning.smoothness_bounds): a bound on ‖∇²U‖."""
    return float(np.sum(tuning.smoothness_bounds(model, pool)) + np.max(model.prior().precision))


class PointMessage(NamedTuple):
    theta: np.ndarray      # (K, d): where the workers evaluate their shard's potential


class GradReply(NamedTuple):
    grad: np.ndarray       # (K, d) ∇U_i


class ValueGradReply(NamedTuple):
    pot: np.ndarray        # (K,) U_i
    grad: np.ndarray       # (K, d) ∇U_i


class _Stateless:
    """Workers of the centralised references hold nothing but their shard."""

    def worker_init(self, payload: Any, model: Model, X: np.ndarray, y: np.ndarray) -> None:
        return None


# --- ULA ---------------------------------------------------------------------------------------------------

class ULAState(NamedTuple):
    theta: np.ndarray
    step: float
    prior: GaussianPrior


@dataclass(frozen=True)
class ULA(_Stateless, Algorithm):
    """Unadjusted Langevin on the pooled posterior: θ ← θ − γ(Σ_i ∇U_i(θ) + ∇U_prior(θ)) + √(2γ)ξ.

    Parameters: step_size γ (default 0.1/L, L = Σ_i M_i + max prior precision, M_i = tuning.smoothness_bounds);
    init "map" (default, tuning.find_map), "zeros" or an array (d,)/(K, d). Draws: θ after each step.
    """

    step_size: float | None = None
    init: Any = "map"
    name: str = field(default="ula", init=False)

    def __post_init__(self) -> None:
        _check_positive("step_size", self.step_size)
        _check_init(self.init)

    def prepare(self, model: Model, pool: ShardPool, *, chains: int, seed: int, noise: ChainNoise) -> Plan:
        b = pool.num_shards
        L = lipschitz_bound(model, pool)
        step = float(self.step_size) if self.step_size is not None else 0.1 / L
        theta0 = initial_points(self.init, model, pool, chains, seed)
        return Plan(ULAState(theta0, step, model.prior()), [None] * b, np.ones(b, dtype=int), 1.0, False,
                    {"step_size": step, "L": L})

    def worker_step(self, state: None, message: PointMessage, model: Model, X: np.ndarray, y: np.ndarray,
                    noise: ChainNoise) -> tuple[None, GradReply]:
        return None, GradReply(model.grad(X, y, message.theta))

    def messages(self, state: ULAState, local_steps: np.ndarray, info: RoundInfo) -> list[PointMessage]:
        return [PointMessage(state.theta)] * len(local_steps)

    def coordinator_step(self, state: ULAState, replies: list[GradReply], noise: ChainNoise,
                         info: RoundInfo) -> tuple[ULAState, np.ndarray]:
        g = sum(r.grad for r in replies) + state.prior.grad(state.theta)
        theta = state.theta - state.step * g + math.sqrt(2.0 * state.step) * noise.normal(1)[0]
        return state._replace(theta=theta), theta


# --- MALA --------------------------------------------------------------------------------------------------

class MALAState(NamedTuple):
    """θ (K, d) with U(θ), ∇U(θ) (prior included); the pending proposal's noise ξ (K, d); step-size adaptation."""

    theta: np.ndarray
    pot: np.ndarray
    grad: np.ndarray
    xi: np.ndarray
    log_h: float
    log_h0: float
    da: tuple
    adapt: bool
    target_accept: float
    prior: GaussianPrior
    accept: np.ndarray       # (K,) acceptance probability of the last round


@dataclass(frozen=True)
class MALA(_Stateless, Algorithm):
    """Metropolis-adjusted Langevin on the pooled posterior (exact MH), one proposal per round.

    Round t: the coordinator sends the proposal θ' = θ − h∇U(θ) + √(2h)ξ (ξ drawn at the end of the previous
    round, h the adapted step during burn-in, the dual-averaged one afterwards); the workers return
    (U_i(θ'), ∇U_i(θ')); the coordinator adds the prior and accepts with
    log α = −[U(θ') − U(θ)] + [‖θ' − θ + h∇U(θ)‖² − ‖θ − θ' + h∇U(θ')‖²]/(4h)
    (reverse density with the gradient at the proposal). Draws: the current θ after each accept/reject.

    Parameters: step_size (initial h; default 1/L as for ULA), adapt (dual averaging during burn-in,
    Hoffman & Gelman 2014, shared with DG-LMC), target_accept 0.574, init as ULA.
    """

    step_size: float | None = None
    adapt: bool = True
    target_accept: float = 0.574
    init: Any = "map"
    name: str = field(default="mala", init=False)

    def __post_init__(self) -> None:
        _check_positive("step_size", self.step_size)
        _check_unit("target_accept", self.target_accept)
        if not isinstance(self.adapt, bool):
            raise ValueError(f"adapt must be True or False, got {self.adapt!r}")
        _check_init(self.init)

    def prepare(self, model: Model, pool: ShardPool, *, chains: int, seed: int, noise: ChainNoise) -> Plan:
        b = pool.num_shards
        L = lipschitz_bound(model, pool)
        h = float(self.step_size) if self.step_size is not None else 1.0 / L
        theta0 = initial_points(self.init, model, pool, chains, seed)
        prior = model.prior()
        parts = pool.map(shard_batch_value_and_grad, [(theta0,)] * b)
        pot = sum(p[0] for p in parts) + prior.potential(theta0)
        grad = sum(p[1] for p in parts) + prior.grad(theta0)
        if not np.all(np.isfinite(pot)):
            raise FloatingPointError("the initial point gives a non-finite potential U: choose another init")
        log_h = math.log(h)
        state = MALAState(theta0, pot, grad, noise.normal(1)[0], log_h, log_h, (0, 0.0, log_h), self.adapt,
                          self.target_accept, prior, np.ones(chains))
        return Plan(state, [None] * b, np.ones(b, dtype=int), 1.0, False, {"step_size": h, "L": L})

    @staticmethod
    def _step(state: MALAState, info: RoundInfo) -> float:
        if not state.adapt:
            return math.exp(state.log_h0)
        return math.exp(state.log_h if info.warmup else state.da[2])

    @classmethod
    def _proposal(cls, state: MALAState, info: RoundInfo) -> tuple[np.ndarray, float]:
        h = cls._step(state, info)
        return state.theta - h * state.grad + math.sqrt(2.0 * h) * state.xi, h

    def worker_step(self, state: None, message: PointMessage, model: Model, X: np.ndarray, y: np.ndarray,
                    noise: ChainNoise) -> tuple[None, ValueGradReply]:
        with np.errstate(all="ignore"):
            pot, grad = model.potential_and_grad(X, y, message.theta)
        # A non-finite value at a proposal is a rejection, not a failure: send +inf/0 so the runtime's
        # finiteness check on replies does not stop the run.
        bad = ~(np.isfinite(pot) & np.all(np.isfinite(grad), axis=1))
        if np.any(bad):
            pot = np.where(bad, np.finfo(float).max, pot)
            grad = np.where(bad[:, None], 0.0, grad)
        return None, ValueGradReply(pot, grad)

    def messages(self, state: MALAState, local_steps: np.ndarray, info: RoundInfo) -> list[PointMessage]:
        prop, _ = self._proposal(state, info)
        return [PointMessage(prop)] * len(local_steps)

    def coordinator_step(self, state: MALAState, replies: list[ValueGradReply], noise: ChainNoise,
                         info: RoundInfo) -> tuple[MALAState, np.ndarray]:
        prop, h = self._proposal(state, info)          # the same proposal `messages` sent (pure in state, info)
        with np.errstate(all="ignore"):
            pot_p = sum(r.pot for r in replies) + state.prior.potential(prop)
            grad_p = sum(r.grad for r in replies) + state.prior.grad(prop)
            fwd = prop - state.theta + h * state.grad    # θ' | θ
            bwd = state.theta - prop + h * grad_p        # θ | θ', gradient at the proposal
            log_q = (np.sum(fwd * fwd, axis=1) - np.sum(bwd * bwd, axis=1)) / (4.0 * h)
            log_alpha = -(pot_p - state.pot) + log_q
            log_alpha = np.where(np.isfinite(log_alpha), log_alpha, -np.inf)
        logu = np.log(noise.uniform(1)[0])
        accept = logu < log_alpha
        theta = np.where(accept[:, None], prop, state.theta)
        pot = np.where(accept, pot_p, state.pot)
        grad = np.where(accept[:, None], grad_p, state.grad)
        alpha = np.exp(np.minimum(log_alpha, 0.0))
        log_h, da = state.log_h, state.da
        if info.warmup and state.adapt:
            log_h, da = _dual_averaging(da, float(alpha.mean()), state.target_accept, state.log_h0)
        new = state._replace(theta=theta, pot=pot, grad=grad, xi=noise.normal(1)[0], log_h=log_h, da=da,
                             accept=alpha)
        return new, theta
