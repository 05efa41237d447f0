"""Centralised gradient references on the pooled data ([D-ADMMS], sec. 5 baselines).

The coordinator holds θ (K, d). Each round it sends one point to every worker, each worker returns its shard's
∇U_i (and U_i for MALA) there, and the coordinator adds the prior's and takes the step. Workers keep no state.

  ULA:  θ ← θ − γ∇U(θ) + √(2γ)ξ,  U = Σ_i U_i + U_prior.
  MALA: proposal θ' = θ − h∇U(θ) + √(2h)ξ, accepted with probability
        min(1, exp(−U(θ') + U(θ)) q(θ | θ') / q(θ' | θ)), q(a | b) ∝ exp(−‖a − b + h∇U(b)‖²/(4h)):
        the reverse density uses ∇U at the *proposal* (the authors' code used the old gradient there: a bug).

By default both run in the Laplace-whitened coordinates of the shared tuning step (`raysampler.tuning`), where the
posterior is close to N(0, I): ULA's step then comes from the bias budget (its exact stationary law on the
Laplace model, `raysampler.tuning.laws`), MALA's initial step from the optimal-scaling rule h ≈ 1.36 d^{-1/3},
adapted to `target_accept` during burn-in. `preconditioner=None` keeps the plain rules (γ = 0.1/L, h = 1/L,
L = Σ_i M_i + the prior's largest precision).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, NamedTuple, cast

import numpy as np

from ..errors import ArgumentError
from ..models.contract import Model
from ..privacy.fixed_point import encode_term, term_sums
from ..streams import ChainNoise
from ..tuning import budget
from ..tuning.curvature import lipschitz_bound
from ..tuning.laplace import PRECONDITIONERS, initial_points, laplace_for, laplace_step_local
from ..tuning.report import TuningReport
from ..tuning.shards import shard_batch_value_and_grad
from .base import Adaptation, Algorithm, Plan, RoundInfo, ShardPool
from .checks import check_bool, check_choice, check_init, check_positive, check_unit
from .mcmc import DualAveraging, dual_averaging, mala_log_ratio, mh_accept


class PointMessage(NamedTuple):
    theta: np.ndarray  # (K, d): where the workers evaluate their shard's potential


class GradReply(NamedTuple):
    """Shard i's ∇U_i (K, d); with fixed-point sums (`ULA(fixed_point=True)`, every secure-sums run) grad is None
    and the shard sends it as its fixed-point term of Σ_i ∇U_i (`summed`, masked by its site in a secure-sums run)
    with a flag of its own (`status`)."""

    grad: np.ndarray | None
    summed: np.ndarray | None = None
    status: np.ndarray | None = None


class ValueGradReply(NamedTuple):
    pot: np.ndarray  # (K,) U_i
    grad: np.ndarray  # (K, d) ∇U_i


class Stateless:
    """Workers of the centralised references hold nothing but their shard (and ULA's, with fixed-point sums, the
    number of terms summed)."""

    def worker_init(self, payload: Any, model: Model, X: np.ndarray, y: np.ndarray) -> Any:
        return None


# --- ULA ---------------------------------------------------------------------------------------------------


class ULAState(NamedTuple):
    theta: np.ndarray
    step: float
    prior: Any


@dataclass(frozen=True)
class ULA(Stateless, Algorithm):
    """Unadjusted Langevin on the pooled posterior: θ ← θ − γ(Σ_i ∇U_i(θ) + ∇U_prior(θ)) + √(2γ)ξ.

    Parameters: step_size γ (default: from `bias_budget` in whitened coordinates; 0.1/L under
    preconditioner=None); preconditioner ("auto", "laplace", "diag", None); bias_budget δ (default 0.05: the
    predicted mean shift ≤ δ posterior sd and sd within a factor 1 ± δ); init "map" (default), "zeros" or an array.
    Draws: θ after each step. fixed_point: each shard sends ∇U_i rounded to the nearest 2⁻³² as a term of Σ_i ∇U_i
    (`privacy.fixed_point`), added exactly mod 2⁶⁴: what a secure-sums run does (with masks), without the masks.
    """

    step_size: float | None = None
    init: Any = "map"
    preconditioner: str | None = "auto"
    bias_budget: float = 0.05
    fixed_point: bool = False
    name: str = field(default="ula", init=False)

    secure_sums_refusal = None  # the coordinator needs only Σ_i ∇U_i: the shards' terms go masked
    release_names = MappingProxyType({"summed": "grad", "status": "status"})
    masked_fields = ("summed",)

    def for_secure_sums(self) -> ULA:
        """The shards send ∇U_i in fixed point (their sites mask it): `fixed_point=True`."""
        return dataclasses.replace(self, fixed_point=True)

    def __post_init__(self) -> None:
        check_positive("step_size", self.step_size)
        check_init(self.init)
        check_choice("preconditioner", self.preconditioner, PRECONDITIONERS)
        check_unit("bias_budget", self.bias_budget)
        check_bool("fixed_point", self.fixed_point)

    def prepare(self, model: Model, pool: ShardPool, *, chains: int, seed: int, noise: ChainNoise) -> Plan:
        b, d = pool.num_shards, model.dim
        lap = laplace_for(model, pool, seed=seed, preconditioner=self.preconditioner, init=self.init)
        step, L, bias = budget.gradient_step(
            self.step_size, self.preconditioner is not None, model, pool, lambda: budget.ula_step(lap, self.bias_budget)
        )
        report = TuningReport(
            lap.precond.kind,
            bias_budget=None if bias is None else self.bias_budget,
            bias=bias,
            L=L,
            step_size=step,
        )
        wmodel = lap.adopt(model, pool)
        theta0 = initial_points(self.init, lap, chains, d, noise)
        # a fixed-point term's range depends on the number of terms
        payloads = [b if self.fixed_point else None] * b
        return Plan.one_step(ULAState(theta0, step, wmodel.prior()), payloads, report, lap, wmodel)

    def worker_init(self, payload: Any, model: Model, X: np.ndarray, y: np.ndarray) -> int | None:
        return payload  # the number of shards whose terms are summed, with fixed-point sums; else None

    def worker_step(
        self, state: int | None, message: PointMessage, model: Model, X: np.ndarray, y: np.ndarray, noise: ChainNoise
    ) -> tuple[int | None, GradReply]:
        grad = model.grad(X, y, message.theta)
        if state is None:
            return None, GradReply(grad)
        term = encode_term((grad,), state)
        return state, GradReply(None, term.words, term.status)

    def messages(self, state: ULAState, local_steps: np.ndarray, info: RoundInfo) -> list[PointMessage]:
        return [PointMessage(state.theta)] * len(local_steps)

    def coordinator_step(
        self, state: ULAState, replies: list[GradReply], noise: ChainNoise, info: RoundInfo
    ) -> tuple[ULAState, np.ndarray]:
        sums = term_sums(replies, (state.theta.shape[1],))  # fixed-point terms, masked or not: only their total
        total = sums[0] if sums is not None else sum(cast(np.ndarray, r.grad) for r in replies)
        g = total + state.prior.grad(state.theta)
        theta = state.theta - state.step * g + math.sqrt(2.0 * state.step) * noise.normal(1)[0]
        return state._replace(theta=theta), theta


# --- MALA --------------------------------------------------------------------------------------------------


class LocalMALAPayload(NamedTuple):
    """MALA with shard-local parameters (group effects): the worker's starting θ (φ) and η_i (K, l_i)."""

    theta0: np.ndarray
    eta0: np.ndarray


class LocalMALAWorker(NamedTuple):
    """Shard i's part of the joint MALA chain: η_i with ∇_η U_i at the current (θ, η_i), and the pending proposal
    (η_i', ∇_η U_i at (θ', η_i')) that the coordinator's next message accepts or rejects."""

    eta: np.ndarray
    grad: np.ndarray
    pending: tuple[np.ndarray, np.ndarray] | None


class LocalPointMessage(NamedTuple):
    """θ's proposal (K, d) and step h; the current θ (after the last accept/reject) and, per chain, whether the last
    proposal was accepted (None before the first)."""

    theta: np.ndarray
    h: float
    current: np.ndarray
    accepted: np.ndarray | None


class LocalValueGradReply(NamedTuple):
    """U_i and ∇_θ U_i at the joint proposal (θ', η_i'), the η_i part of the proposal's log density ratio, and the
    shard's current η_i on the reported scale with the θ it goes with (the previous round's state)."""

    pot: np.ndarray  # (K,)
    grad: np.ndarray  # (K, d)
    log_ratio: np.ndarray  # (K,)
    local: np.ndarray  # (K, l_i)
    given: np.ndarray  # (K, d)


class MALAState(NamedTuple):
    """θ (K, d) with U(θ), ∇U(θ) (prior included); the pending proposal's noise ξ (K, d); step-size adaptation."""

    theta: np.ndarray
    pot: np.ndarray
    grad: np.ndarray
    xi: np.ndarray
    log_h: float
    log_h0: float
    da: DualAveraging
    adapt: bool
    target_accept: float
    prior: Any
    accept: np.ndarray  # (K,) acceptance probability of the last round
    accepted: np.ndarray | None = None  # (K,) with local parameters: whether the last proposal was accepted
    local: bool = False  # the workers hold shard-local parameters (group effects): joint proposals


@dataclass(frozen=True)
class MALA(Stateless, Algorithm):
    """Metropolis-adjusted Langevin on the pooled posterior (exact MH), one proposal per round.

    Round t: the coordinator sends the proposal θ' = θ − h∇U(θ) + √(2h)ξ (ξ drawn at the end of the previous
    round, h the adapted step during burn-in, the dual-averaged one afterwards); the workers return
    (U_i(θ'), ∇U_i(θ')); the coordinator adds the prior and accepts with
    log α = −[U(θ') − U(θ)] + [‖θ' − θ + h∇U(θ)‖² − ‖θ − θ' + h∇U(θ')‖²]/(4h)
    (reverse density with the gradient at the proposal). Draws: the current θ after each accept/reject.

    Parameters: step_size (initial h; default 1.36·d^{-1/3}/λ_max in whitened coordinates, 1/L under
    preconditioner=None), adapt (dual averaging during burn-in; default: adapt unless step_size is given),
    target_accept 0.574, preconditioner, init.
    """

    step_size: float | None = None
    adapt: bool | None = None
    target_accept: float = 0.574
    init: Any = "map"
    preconditioner: str | None = "auto"
    name: str = field(default="mala", init=False)

    def __post_init__(self) -> None:
        check_positive("step_size", self.step_size)
        check_unit("target_accept", self.target_accept)
        if self.adapt is not None and not isinstance(self.adapt, bool):
            raise ValueError(f"adapt must be None, True or False, got {self.adapt!r}")
        check_init(self.init)
        check_choice("preconditioner", self.preconditioner, PRECONDITIONERS)

    supports_local_params = True  # group effects: one joint MALA chain on (θ, η_1..η_b), η_i kept by worker i
    secure_sums_refusal = (
        "a proposal's U_i can be of any size (a non-finite one is sent as the largest float, to be rejected), beyond "
        "the range of the fixed-point terms that masks need; use 'dglmc', 'fald', 'qlsd' or 'ula'"
    )

    def prepare(self, model: Model, pool: ShardPool, *, chains: int, seed: int, noise: ChainNoise) -> Plan:
        if model.has_local_params():
            return self._prepare_local(model, pool, chains=chains, seed=seed, noise=noise)
        b, d = pool.num_shards, model.dim
        lap = laplace_for(model, pool, seed=seed, preconditioner=self.preconditioner, init=self.init)
        L: float | None = None
        if self.step_size is not None:
            h = float(self.step_size)
        elif self.preconditioner is None:
            L = lipschitz_bound(model, pool)
            h = 1.0 / L
        else:
            h = budget.mala_initial_step(lap)
        report = TuningReport(lap.precond.kind, target_accept=self.target_accept, L=L, initial_step_size=h)
        wmodel = lap.adopt(model, pool)
        theta0 = initial_points(self.init, lap, chains, d, noise)
        prior = wmodel.prior()
        parts = pool.map(shard_batch_value_and_grad, [(theta0,)] * b)
        pot = sum(p[0] for p in parts) + prior.potential(theta0)
        grad = sum(p[1] for p in parts) + prior.grad(theta0)
        if not np.all(np.isfinite(pot)):
            raise FloatingPointError("the initial point gives a non-finite potential U: choose another init")
        log_h = math.log(h)
        adapt = self.adapt if self.adapt is not None else self.step_size is None
        state = MALAState(
            theta0,
            pot,
            grad,
            noise.normal(1)[0],
            log_h,
            log_h,
            DualAveraging.start(log_h),
            adapt,
            self.target_accept,
            prior,
            np.ones(chains),
        )
        return Plan.one_step(state, [None] * b, report, lap, wmodel)

    def _prepare_local(self, model: Model, pool: ShardPool, *, chains: int, seed: int, noise: ChainNoise) -> Plan:
        """Joint MALA on (θ, η_1..η_b) with shard-local η_i (group effects): the coordinator proposes θ' and each
        worker its η_i' with the same step h; the worker returns U_i, ∇_θ U_i at (θ', η_i') and its part of the
        proposal's density ratio (the ratio is a sum over blocks), the coordinator accepts or rejects all blocks
        together and tells the workers in the next message. θ is whitened by the joint MAP's Laplace-marginal
        Hessian (`tuning.laplace.laplace_step_local`), η is left alone (non-centred: prior N(0, I))."""
        b, d = pool.num_shards, model.dim
        if self.preconditioner is None:
            raise ArgumentError(
                ("algorithm", "preconditioner"),
                "preconditioner=None (the plain rules) is not available with group effects: use 'auto'",
            )
        ll = laplace_step_local(model, pool, seed=seed, preconditioner=self.preconditioner)
        lap = ll.lap
        total = d + sum(ll.local_dims)
        h = float(self.step_size) if self.step_size is not None else 1.36 * total ** (-1.0 / 3.0)
        report = TuningReport(lap.precond.kind, target_accept=self.target_accept, initial_step_size=h)
        wmodel = lap.adopt(model, pool)
        theta0 = initial_points(self.init, lap, chains, d, noise)
        etas = [np.repeat(e[None, :], chains, axis=0) for e in ll.eta_map]
        prior = wmodel.prior()
        parts = pool.map(shard_batch_value_and_grad, [(np.concatenate([theta0, e], axis=1),) for e in etas])
        pot = sum(p[0] for p in parts) + prior.potential(theta0)
        grad = sum(p[1][:, :d] for p in parts) + prior.grad(theta0)
        if not np.all(np.isfinite(pot)):
            raise FloatingPointError("the initial point gives a non-finite potential U: choose another init")
        log_h = math.log(h)
        adapt = self.adapt if self.adapt is not None else self.step_size is None
        state = MALAState(
            theta0, pot, grad, noise.normal(1)[0], log_h, log_h, DualAveraging.start(log_h), adapt,
            self.target_accept, prior, np.ones(chains), None, True,
        )  # fmt: skip
        return Plan(
            state,
            [LocalMALAPayload(theta0, e) for e in etas],
            np.ones(b, dtype=int),
            1.0,
            False,
            report,
            model=wmodel,
            precond=lap.precond,
        )

    def worker_init(self, payload: Any, model: Model, X: np.ndarray, y: np.ndarray) -> Any:
        if not isinstance(payload, LocalMALAPayload):
            return None
        d = payload.theta0.shape[1]
        _, g = model.potential_and_grad(X, y, np.concatenate([payload.theta0, payload.eta0], axis=1))
        return LocalMALAWorker(np.array(payload.eta0, dtype=float), g[:, d:], None)

    @staticmethod
    def _step(state: MALAState, info: RoundInfo) -> float:
        if not state.adapt:
            return math.exp(state.log_h0)
        return math.exp(state.log_h if info.warmup else state.da.log_hbar)

    @classmethod
    def _proposal(cls, state: MALAState, info: RoundInfo) -> tuple[np.ndarray, float]:
        h = cls._step(state, info)
        return state.theta - h * state.grad + math.sqrt(2.0 * h) * state.xi, h

    def worker_step(
        self,
        state: LocalMALAWorker | None,
        message: PointMessage | LocalPointMessage,
        model: Model,
        X: np.ndarray,
        y: np.ndarray,
        noise: ChainNoise,
    ) -> tuple[LocalMALAWorker | None, ValueGradReply | LocalValueGradReply]:
        if isinstance(message, LocalPointMessage):
            assert state is not None
            return _local_worker_step(state, message, model, X, y, noise)
        with np.errstate(all="ignore"):
            pot, grad = model.potential_and_grad(X, y, message.theta)
        # A non-finite value at a proposal is a rejection, not a failure: send +inf/0 so the runtime's
        # finiteness check on replies does not stop the run.
        bad = ~(np.isfinite(pot) & np.all(np.isfinite(grad), axis=1))
        if np.any(bad):
            pot = np.where(bad, np.finfo(float).max, pot)
            grad = np.where(bad[:, None], 0.0, grad)
        return None, ValueGradReply(pot, grad)

    def messages(
        self, state: MALAState, local_steps: np.ndarray, info: RoundInfo
    ) -> list[PointMessage] | list[LocalPointMessage]:
        prop, h = self._proposal(state, info)
        if state.local:
            return [LocalPointMessage(prop, h, state.theta, state.accepted)] * len(local_steps)
        return [PointMessage(prop)] * len(local_steps)

    def coordinator_step(
        self,
        state: MALAState,
        replies: list[ValueGradReply] | list[LocalValueGradReply],
        noise: ChainNoise,
        info: RoundInfo,
    ) -> tuple[MALAState, np.ndarray]:
        prop, h = self._proposal(state, info)  # the same proposal `messages` sent (pure in state, info)
        with np.errstate(all="ignore"):
            pot_p = sum(r.pot for r in replies) + state.prior.potential(prop)
            grad_p = sum(r.grad for r in replies) + state.prior.grad(prop)
            log_alpha = -(pot_p - state.pot) + mala_log_ratio(state.theta, state.grad, prop, grad_p, h)
            for r in replies:  # the shards' local blocks' share of the joint proposal's density ratio
                if isinstance(r, LocalValueGradReply):
                    log_alpha = log_alpha + r.log_ratio
        accept, alpha = mh_accept(log_alpha, np.log(noise.uniform(1)[0]))
        theta = np.where(accept[:, None], prop, state.theta)
        pot = np.where(accept, pot_p, state.pot)
        grad = np.where(accept[:, None], grad_p, state.grad)
        log_h, da = state.log_h, state.da
        if info.warmup and state.adapt:
            log_h, da = dual_averaging(da, float(alpha.mean()), state.target_accept, state.log_h0)
        new = state._replace(theta=theta, pot=pot, grad=grad, xi=noise.normal(1)[0], log_h=log_h, da=da, accept=alpha)
        if replies and isinstance(replies[0], LocalValueGradReply):
            new = new._replace(accepted=accept)
        return new, theta

    def adaptation(self, state: MALAState, stats: dict[str, np.ndarray]) -> Adaptation | None:
        """The round's mean acceptance probability, which dual averaging steers towards `target_accept`."""
        return Adaptation(float(np.mean(state.accept)), state.target_accept) if state.adapt else None

    def local_draws(self, replies: list[Any]) -> tuple[np.ndarray, np.ndarray] | None:
        """(the previous round's θ, the shards' η_i of that round on the reported scale, shard order): a worker
        learns whether its proposal was accepted only from the next message."""
        if not replies or not isinstance(replies[0], LocalValueGradReply):
            return None
        return replies[0].given, np.concatenate([r.local for r in replies], axis=1)

    def reply_stats(self, replies: list[Any]) -> dict[str, np.ndarray]:
        return {}


def _local_worker_step(
    w: LocalMALAWorker, msg: LocalPointMessage, model: Model, X: np.ndarray, y: np.ndarray, noise: ChainNoise
) -> tuple[LocalMALAWorker, LocalValueGradReply]:
    """Shard i's half of a joint MALA round: settle the last proposal by the coordinator's decision, report η_i with
    the θ it goes with, propose η_i' = η_i − h∇_η U_i + √(2h)ξ and evaluate U_i at (θ', η_i')."""
    d = msg.theta.shape[1]
    eta, grad = w.eta, w.grad
    if w.pending is not None and msg.accepted is not None:
        eta = np.where(msg.accepted[:, None], w.pending[0], eta)
        grad = np.where(msg.accepted[:, None], w.pending[1], grad)
    local = np.asarray(model.local_natural(msg.current, eta, X, y))
    h = msg.h
    prop = eta - h * grad + math.sqrt(2.0 * h) * noise.normal(1)[0][:, d:]
    with np.errstate(all="ignore"):
        pot, g = model.potential_and_grad(X, y, np.concatenate([msg.theta, prop], axis=1))
        g_eta = g[:, d:]
        ratio = mala_log_ratio(eta, grad, prop, g_eta, h)
    bad = ~(np.isfinite(pot) & np.all(np.isfinite(g), axis=1) & np.isfinite(ratio))
    if np.any(bad):  # a non-finite proposal is a rejection, not a failure (as for θ alone)
        pot = np.where(bad, np.finfo(float).max, pot)
        g = np.where(bad[:, None], 0.0, g)
        g_eta = np.where(bad[:, None], 0.0, g_eta)
        ratio = np.where(bad, 0.0, ratio)
    reply = LocalValueGradReply(pot, g[:, :d], ratio, local, msg.current)
    return LocalMALAWorker(eta, grad, (prop, g_eta)), reply
