"""D-MALA ([D-MALA], Algorithm 1; docs/algorithms.md), made a correct posterior sampler: decentralised MALA
(one leapfrog step per iteration, fresh momentum) with gradient tracking, momentum and uniform shared by the
agents, and an MH test on tracked *exact* quantities (global gradient at both points, global potential difference).

Agent i is worker i, with potential V_i = U_i + U_prior/b (prior split evenly, as in `decentralized`), so
U = Σ_i V_i. W is the Metropolis matrix of the graph; W^k is applied as k routed mixing rounds (`routed_mix`:
agent i combines its own value with its neighbours' values only). k_t comes from `mixing_schedule`.
Per agent: its point ω_i, its tracked average gradient y_i (estimates (1/b) Σ_j ∇V_j(ω_j), so G_i = b·y_i is its
estimate of the global gradient), and the pending proposal ω_i*. Iteration t = runtime round t:

  shared draws (coordinator, chain-level stream, as FALD's shared noise): p ~ N(0, I) (drawn at the end of round
      t − 1, with the proposal) and log u, u ~ U(0, 1) (drawn in round t); the same p and u for every agent.
  proposal (end of round t − 1):  ω_i' = ω_i + εp − ½ε²G_i               (leapfrog half-kick + drift = MALA, h = ε²/2)
      consensus on the proposals:  ω* = W^{k_t} ω'                         (k_t routed rounds)
  worker i (round t): receives ω_i* only; returns Δg_i = ∇V_i(ω_i*) − ∇V_i(ω_i), Δv_i = V_i(ω_i*) − V_i(ω_i)
      (it keeps ∇V_i, V_i at its current point; non-finite values → flagged `bad`, sent as 0).
  one mixing phase (the three packed in one message per edge and round): z = W^{k_t}(y + Δg) (gradient tracking
      at the proposals: innovation added once, then k_t rounds), d = W^{k_t} Δv, β = W^{k_t} bad.
  agent i (exact MH with its tracked quantities): G_i* = b z_i, ΔU_i = b d_i,
      p_i* = p − ½ε(G_i + G_i*),  ΔH_i = ΔU_i + ½‖p_i*‖² − ½‖p‖²,
      accept a_i = [β_i = 0 and ω_i* finite and log u ≤ −ΔH_i]; for t < mh_burn_in: a_i = [β_i = 0 and ω_i* finite].
      ω_i ← ω_i* if a_i else ω_i.
  tracking update: y ← W^{k_t}(y + a ⊙ Δg)   (keeps mean_i y_i = (1/b) Σ_i ∇V_i(ω_i) exactly, whatever the a_i).
Draws: the agent average ω̄ = (1/b) Σ_i ω_i after the decision. Start: ω_i = init, y = W^{k_0} ∇V(ω^0).

Exactness. If the agents agree (b = 1; or the complete graph, whose Metropolis W = 11ᵀ/b averages exactly in one
round), every agent holds the same ω, G_i = ∇U(ω), G_i* = ∇U(ω*), ΔU_i = U(ω*) − U(ω) exactly, takes the same
proposal and the same decision: the chain is exactly MALA on U with h = ε²/2 (ΔH_i is the log MH ratio of MALA),
hence π-invariant. On a sparse graph with finite k_t the tracked quantities differ from the exact ones by
O(λ₂(W)^{k_t}) (λ₂ the second largest |eigenvalue|), so the chain is π-invariant up to that error (as the seed's
guarantee, which is also only approximate); k_t = 10 on a 5-ring gives λ₂^k ≈ 2e-3.
On the 5-ring a small k shrinks the average's variance below the posterior's, and k = 10 matches it within
Monte-Carlo error: at small k agents take different decisions, and the average then makes partial moves, which
shrink its variance (docs/performance.md, "Measurements behind choices in the code").
So keep k_t large enough that λ₂(W)^{k_t} is small (the default schedule reaches 10).

Where and why this departs from [D-MALA] (see docs/algorithms.md; verified in tests/test_dmala.py):
 1. Integrator. The seed's EulerUpdate (Algorithm 2; its sign p* = p + εg is for g = ∇log p) p* = p − εG,
    ω* = ω + εp* with fresh momentum is x' = x − ε²∇U + εξ: Langevin for 2U (half the posterior variance), and
    the one-step symplectic Euler map is not time-reversible, so no MH test on ΔH can correct it. Replaced by one
    leapfrog step ω* = ω + εp − ½ε²G (with one agent exactly MALA, h = ε²/2).
 2. Momentum and uniform. Algorithm 1 draws p_i and u_i per agent; the consensus average then moves with noise
    variance ε²/b per step (≈ 1/b of the variance). Here p and u are shared (chain-level draws), so the average moves
    with noise ε² and near-consensus agents take the same accept/reject decision.
 3. MH test. The seed's Taylor test (§2.2, ΔH ≈ −½ε²(ℵ + ‖g‖²), and a sign-corrected ½ε²(ℵ − ‖G‖²),
    a second-order expansion for the Euler step) is replaced by the exact ratio: for leapfrog the second-order
    expansion of ΔH vanishes identically (ΔH = O(ε³)), so a Taylor test accepts everything. The exact ratio needs
    ∇U(ω*) and U(ω*) − U(ω): both are tracked as above (gradient tracking, eq. (2), at the proposals; the potential
    difference as a fresh average, since only the difference enters). No Hessian-vector products (ℵ) are needed.
 4. Consensus step. Eq. (3) / Algorithm 1 mix the points after the MH step (ω ← W^{k_t} ω̃). Here the consensus
    is applied to the proposals before they are evaluated: after the MH step each agent must sit at a point where
    its own ∇V_i and V_i are known (ω_i* or ω_i), otherwise a second evaluation — a second round trip per
    iteration — would be needed. The contraction of disagreements is the same (each move is W^{k_t}-averaged).
 5. Communication. 3 k_t routed rounds per iteration (tracking at the proposals + potential difference + bad
    flags packed in one, the tracking update, the proposal consensus), as the seed's 3 k_t (g, ℵ, ω).

Round structure (one runtime round, one worker evaluation and one draw per iteration): as the centralised MALA
(`gradient.MALA`), the proposal is formed at the end of the previous round, so round t = evaluate ω* →
coordinator_step (mix, decide, update tracking, draw, then p and the next mixed proposal). The coordinator does the
routed mixing and, between mixing phases, each agent's own arithmetic on its behalf (using only agent i's own
ω_i, y_i, z_i, d_i, β_i and the shared p, u), since a worker round trip per mixing phase would triple the rounds.
Worker i's message carries only its own proposal ω_i* and whether it moved to its previous proposal.

`mh_burn_in` (T_MH, default 1000) counts iterations from the start of the run *including* rs.sample's burn-in
rounds: with burn_in ≥ T_MH every kept draw is MH-adjusted. With MH off the average follows (near-consensus) ULA
with step ε²/2, whose stationary law is biased at O(ε²).
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from .. import topology as topo
from ..models.contract import Model
from ..streams import ChainNoise
from ..tuning import budget
from ..tuning.curvature import lipschitz_bound
from ..tuning.laplace import Laplace
from .base import Adaptation, Plan, RoundInfo, ShardPool
from .checks import check_int, check_positive, check_unit
from .decentralized import AgentPayload, AgentWorker, Tuned, _Decentralized
from .mcmc import DualAveraging, dual_averaging

#: The seed's mixing schedule and MH burn-in (the plain rules, preconditioner=None).
DEFAULT_SCHEDULE = ((0, 1), (500, 5), (1000, 10))
PAPER_MH_BURN_IN = 1000
#: Tuned default: k mixing rounds with λ₂(W)^k ≤ this (the agents' tracked quantities agree to that accuracy).
MIXING_TOLERANCE = 1e-3


def _normalise_schedule(value: Any) -> tuple[tuple[int, int], ...]:
    """mixing_schedule: (iteration, k) milestones, iterations strictly increasing from 0, k ≥ 1 integers."""
    bad = ValueError(
        "mixing_schedule must be a non-empty list of (iteration, k) pairs with iterations strictly "
        f"increasing from 0 and integers k ≥ 1, got {value!r}"
    )
    if isinstance(value, (str, bytes)):
        raise bad
    try:
        pairs = [tuple(e) for e in value]
    except TypeError:
        raise bad from None
    if not pairs:
        raise bad
    out = []
    for e in pairs:
        if len(e) != 2 or not all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in e):
            raise bad
        out.append((int(e[0]), int(e[1])))
    its = [it for it, _ in out]
    if its[0] != 0 or any(b <= a for a, b in zip(its, its[1:])) or any(k < 1 for _, k in out):
        raise bad
    return tuple(out)


def mixing_rounds(schedule: Sequence[tuple[int, int]], t: int) -> int:
    """k_t: the k of the last milestone (iteration, k) with iteration ≤ t."""
    k = schedule[0][1]
    for it, kk in schedule:
        if it <= t:
            k = kk
    return k


def routed_mix(top: topo.Topology, W: np.ndarray, values: Sequence[Any], k: int) -> list[Any]:
    """W^k applied to the agents' values as k routed mixing rounds: in each round agent i combines its own value
    with the values `topology.route` delivers to it (its neighbours', nobody else's): W_ii v_i + Σ_{j∈N_i} W_ij v_j."""
    vals = list(values)
    for _ in range(k):
        routed = topo.route(top, vals)
        new = []
        for i, (ids, nb) in enumerate(routed):
            out = W[i, i] * vals[i]
            for j, vj in zip(ids, nb):
                out = out + W[i, j] * vj
            new.append(out)
        vals = new
    return vals


def mixing_rounds_for(W: np.ndarray, tol: float = MIXING_TOLERANCE) -> int:
    """The smallest k with λ₂(W)^k ≤ tol (λ₂ the second largest |eigenvalue| of W); 1 for an exact average."""
    lam = np.sort(np.abs(np.linalg.eigvalsh(W)))[::-1]
    lam2 = float(lam[1]) if len(lam) > 1 else 0.0
    if lam2 < 1e-12:
        return 1
    if lam2 >= 1.0 - 1e-12:
        return 100  # disconnected graph: agents never agree; cap the work
    return int(min(100, max(1, np.ceil(np.log(tol) / np.log(lam2)))))


def agent_value_and_grad(
    model: Model, X: np.ndarray, y: np.ndarray, x: np.ndarray, b: int
) -> tuple[np.ndarray, np.ndarray]:
    """(V_i(x), ∇V_i(x)) with V_i = U_i + U_prior/b, at K points x (K, d) (module-level so Ray can ship it)."""
    prior = model.prior()
    with np.errstate(all="ignore"):
        v, g = model.potential_and_grad(X, y, x)
        return v + prior.potential(x) / b, g + prior.grad(x) / b


class DMALAMessage(NamedTuple):
    """Round t's message to agent i: its own pending proposal ω_i* (K, d) and whether it moved to its previous
    proposal (K,) bool. Nothing of any other agent."""

    t: int
    index: int  # type: ignore[assignment]  # the field shadows tuple.index, which nothing here calls
    proposal: np.ndarray
    moved: np.ndarray


class DMALAReply(NamedTuple):
    dg: np.ndarray  # ∇V_i(ω_i*) − ∇V_i(ω_i) (K, d); 0 where bad
    dv: np.ndarray  # V_i(ω_i*) − V_i(ω_i) (K,); 0 where bad
    bad: np.ndarray  # (K,) bool: V_i or ∇V_i not finite at ω_i*


class DMALAWorker(NamedTuple):
    v: np.ndarray  # V_i at the agent's current point (K,)
    g: np.ndarray  # ∇V_i at the current point (K, d)
    v_prop: np.ndarray  # at the last proposal
    g_prop: np.ndarray


class StepAdaptation(NamedTuple):
    """ε and its dual averaging towards the acceptance target during burn-in (frozen at exp(da.log_hbar) after)."""

    log_eps: float
    log_eps0: float
    da: DualAveraging
    adapt: bool
    target: float

    def eps(self, warmup: bool) -> float:
        if not self.adapt:
            return math.exp(self.log_eps0)
        return math.exp(self.log_eps if warmup else self.da.log_hbar)


class DMALAState(NamedTuple):
    top: topo.Topology
    W: np.ndarray
    omegas: tuple[np.ndarray, ...]  # ω_i (K, d), the agents' current points
    ys: tuple[np.ndarray, ...]  # tracked average gradient y_i (K, d) at the current points
    p: np.ndarray  # shared momentum of the pending proposal (K, d)
    proposals: tuple[np.ndarray, ...]  # pending mixed proposals ω_i* (K, d)
    accepted: np.ndarray  # (b, K) decisions of the last round
    step: StepAdaptation
    mh_burn_in: int
    schedule: tuple[tuple[int, int], ...]
    alpha: float = 1.0  # the last round's acceptance probability, mean over agents and chains (what ε adapts to)


@dataclass(frozen=True)
class DMALAConsts:
    """D-MALA's tuned constants: the initial step ε, whether it adapts (to `target_accept`), the MH burn-in and
    the mixing schedule ((iteration, k) milestones)."""

    initial_step_size: float
    adapt: bool
    target_accept: float
    mh_burn_in: int
    mixing_schedule: tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class DMALA(_Decentralized):
    """Decentralised MALA with gradient tracking ([D-MALA], Algorithm 1, corrected: leapfrog step, shared
    momentum and uniform, exact MH on tracked global gradient and potential difference); see the module docstring.

    Parameters: step_size ε (with one agent the rule is MALA with h = ε²/2; default: adapted by dual averaging
    during burn-in to `target_accept`, from ε0 = √(2h0) with MALA's optimal-scaling h0), adapt (default: adapt
    unless step_size is given), target_accept
    (0.574), topology ("complete" default, "ring", "star", "edgeless" or edges), mh_burn_in T_MH (MH off for
    iterations t < T_MH, counted from the start including rs.sample's burn_in; default 0 in whitened coordinates,
    where the chains start at the MAP, and the seed's 1000 under preconditioner=None), mixing_schedule
    (milestones (iteration, k_t); default a constant k with λ₂(W)^k ≤ 1e-3 — 1 on the complete graph — and the
    seed's [(0, 1), (500, 5), (1000, 10)] under preconditioner=None), init ("map" default, "zeros", array),
    preconditioner. Draws: ω̄ = (1/b) Σ_i ω_i.
    """

    step_size: float | None = None
    adapt: bool | None = None
    target_accept: float = 0.574
    topology: Any = "complete"
    mh_burn_in: int | None = None
    mixing_schedule: Any = None
    init: Any = "map"
    preconditioner: str | None = "auto"
    name: str = field(default="dmala", init=False)

    def __post_init__(self) -> None:
        check_positive("step_size", self.step_size)
        if self.adapt is not None and not isinstance(self.adapt, bool):
            raise ValueError(f"adapt must be None, True or False, got {self.adapt!r}")
        check_unit("target_accept", self.target_accept)
        check_int("mh_burn_in", self.mh_burn_in, 0, allow_none=True)
        if self.mixing_schedule is not None:
            object.__setattr__(self, "mixing_schedule", _normalise_schedule(self.mixing_schedule))
        self._common_checks()

    def _tune(self, top: topo.Topology, W: np.ndarray, lap: Laplace, model: Model, pool: ShardPool) -> Tuned:
        tuned = lap.quads is not None
        if self.step_size is not None:
            eps = float(self.step_size)
        elif tuned:
            eps = math.sqrt(2.0 * budget.mala_initial_step(lap))
        else:
            eps = math.sqrt(2.0 / lipschitz_bound(model, pool))
        schedule = (
            self.mixing_schedule
            if self.mixing_schedule is not None
            else (((0, mixing_rounds_for(W)),) if tuned else DEFAULT_SCHEDULE)
        )
        mh_burn_in = self.mh_burn_in if self.mh_burn_in is not None else (0 if tuned else PAPER_MH_BURN_IN)
        adapt = self.adapt if self.adapt is not None else self.step_size is None
        return DMALAConsts(eps, adapt, self.target_accept, int(mh_burn_in), schedule), None, None

    # --- coordinator ----------------------------------------------------------------------------

    def prepare(self, model: Model, pool: ShardPool, *, chains: int, seed: int, noise: ChainNoise) -> Plan:
        plan = super().prepare(model, pool, chains=chains, seed=seed, noise=noise)
        gs = plan.coordinator_state
        top, b = gs.top, gs.top.b
        c: DMALAConsts = plan.worker_payloads[0].consts
        W = np.asarray(plan.report.W, dtype=float)
        parts = pool.map(agent_value_and_grad, [(gs.xs[i], b) for i in range(b)])
        if not all(np.all(np.isfinite(v)) and np.all(np.isfinite(g)) for v, g in parts):
            raise FloatingPointError("the initial point gives a non-finite potential or gradient: choose another init")
        schedule = c.mixing_schedule
        k0 = mixing_rounds(schedule, 0)
        ys = tuple(routed_mix(top, W, [g for _, g in parts], k0))
        log_eps = math.log(c.initial_step_size)
        step = StepAdaptation(log_eps, log_eps, DualAveraging.start(log_eps), bool(c.adapt), c.target_accept)
        p = noise.normal(1)[0]
        props = self._propose(top, W, gs.xs, ys, p, k0, step.eps(True))
        K = gs.xs[0].shape[0]
        state = DMALAState(top, W, gs.xs, ys, p, props, np.zeros((b, K), dtype=bool), step, c.mh_burn_in, schedule)
        return dataclasses.replace(plan, coordinator_state=state)

    @staticmethod
    def _propose(
        top: topo.Topology,
        W: np.ndarray,
        omegas: Sequence[np.ndarray],
        ys: Sequence[np.ndarray],
        p: np.ndarray,
        k: int,
        eps: float,
    ) -> tuple[np.ndarray, ...]:
        """ω* = W^k(ω + εp − ½ε² b y): each agent's leapfrog proposal with the shared p, then k routed rounds."""
        b = top.b
        with np.errstate(all="ignore"):
            own = [w + eps * p - 0.5 * eps**2 * b * y for w, y in zip(omegas, ys)]
            return tuple(routed_mix(top, W, own, k))

    # D-MALA reuses the graph plumbing of _Decentralized but sends proposals and MH decisions: its own message
    # types, hence the narrower signatures below.
    def messages(  # type: ignore[override]
        self, state: DMALAState, local_steps: np.ndarray, info: RoundInfo
    ) -> list[DMALAMessage]:
        return [DMALAMessage(info.t, i, prop, state.accepted[i]) for i, prop in enumerate(state.proposals)]

    def coordinator_step(  # type: ignore[override]
        self,
        state: DMALAState,
        replies: list[DMALAReply],
        noise: ChainNoise,
        info: RoundInfo,
    ) -> tuple[DMALAState, np.ndarray]:
        top, W, b = state.top, state.W, state.top.b
        eps = state.step.eps(info.warmup)  # the ε the pending proposals were made with
        d = state.omegas[0].shape[1]
        k = mixing_rounds(state.schedule, info.t)
        # one mixing phase, one packed message per edge and round: [y + Δg | Δv | bad]
        packed = [
            np.concatenate([y + r.dg, r.dv[:, None], np.asarray(r.bad, dtype=float)[:, None]], axis=1)
            for y, r in zip(state.ys, replies)
        ]
        mixed = routed_mix(top, W, packed, k)
        log_u = np.log(noise.uniform(1)[0])  # shared by the agents (chain-level stream)
        mh = info.t >= state.mh_burn_in
        p = state.p
        acc, alphas = [], []
        for i, r in enumerate(replies):  # agent i's own quantities only
            z, dv, heard_bad = mixed[i][:, :d], mixed[i][:, d], mixed[i][:, d + 1]
            ok = (heard_bad == 0) & ~np.asarray(r.bad, dtype=bool) & np.all(np.isfinite(state.proposals[i]), axis=1)
            with np.errstate(all="ignore"):
                p_star = p - 0.5 * eps * b * (state.ys[i] + z)
                dH = b * dv + 0.5 * np.einsum("kd,kd->k", p_star, p_star) - 0.5 * np.einsum("kd,kd->k", p, p)
                dH = np.where(ok & np.isfinite(dH), dH, np.inf)
            alphas.append(np.exp(-np.maximum(dH, 0.0)))
            acc.append(ok & (log_u <= -dH) if mh else ok)
        acc_arr = np.array(acc)
        omegas = tuple(np.where(a[:, None], prop, w) for a, prop, w in zip(acc_arr, state.proposals, state.omegas))
        ys = tuple(routed_mix(top, W, [y + a[:, None] * r.dg for y, a, r in zip(state.ys, acc_arr, replies)], k))
        draws = np.mean(omegas, axis=0)
        step = state.step
        if info.warmup and step.adapt:  # adapt ε to the acceptance target (mean over agents and chains)
            log_eps, da = dual_averaging(step.da, float(np.mean(alphas)), step.target, step.log_eps0)
            step = step._replace(log_eps=log_eps, da=da)
        k_next = mixing_rounds(state.schedule, info.t + 1)
        p_next = noise.normal(1)[0]
        props = self._propose(top, W, omegas, ys, p_next, k_next, step.eps(info.t + 1 < info.burn_in))
        new = state._replace(
            omegas=omegas, ys=ys, p=p_next, proposals=props, accepted=acc_arr, step=step, alpha=float(np.mean(alphas))
        )
        return new, draws

    def adaptation(self, state: DMALAState, stats: dict[str, np.ndarray]) -> Adaptation | None:
        """The round's mean acceptance probability, which dual averaging steers ε towards while it adapts."""
        return Adaptation(state.alpha, state.step.target) if state.step.adapt else None

    def reply_stats(self, replies: list[DMALAReply]) -> dict[str, np.ndarray]:
        return {}

    # --- worker ---------------------------------------------------------------------------------

    def worker_init(self, payload: AgentPayload, model: Model, X: np.ndarray, y: np.ndarray) -> AgentWorker:
        x0 = np.asarray(payload.x0, dtype=float)
        v, g = agent_value_and_grad(model, X, y, x0, payload.b)
        return AgentWorker(payload, DMALAWorker(v, g, v, g))

    def worker_step(  # type: ignore[override]
        self, state: AgentWorker, message: DMALAMessage, model: Model, X: np.ndarray, y: np.ndarray, noise: ChainNoise
    ) -> tuple[AgentWorker, DMALAReply]:
        pay, s = state
        if message.index != pay.index:
            raise RuntimeError(f"shards[{pay.index}]: received agent {message.index}'s state")
        moved = np.asarray(message.moved, dtype=bool)
        v_cur = np.where(moved, s.v_prop, s.v)
        g_cur = np.where(moved[:, None], s.g_prop, s.g)
        v, g = agent_value_and_grad(model, X, y, message.proposal, pay.b)
        bad = ~(np.isfinite(v) & np.all(np.isfinite(g), axis=1))
        # a non-finite value at a proposal is a rejection, not a failure: send 0 and the flag
        v, g = np.where(bad, 0.0, v), np.where(bad[:, None], 0.0, g)
        reply = DMALAReply(np.where(bad[:, None], 0.0, g - g_cur), np.where(bad, 0.0, v - v_cur), bad)
        return AgentWorker(pay, DMALAWorker(v_cur, g_cur, v, g)), reply
