"""Decentralised graph baselines ([D-ADMMS], eqs. 22–25; docs/algorithms.md): D-SGLD, D-SGHMC, D-ULA.

Agent i is worker i and holds x_i (K, d) (and v_i for D-SGHMC). Each round the coordinator only routes:
worker i receives exactly its neighbours' current x_j (`topology.route`), never a non-neighbour's value.
The prior is split evenly: agent i's potential is Ũ_i = U_i + U_prior/b, so ∇Ũ_i = ∇U_i + ∇U_prior/b.
Draws: the agent average x̄ = (1/b) Σ_i x_i (K, d) after each round.

  D-SGLD  (eq. 22): x_i ← Σ_j W_ij x_j − η∇Ũ_i(x_i) + √(2η)ξ_i.
  D-SGHMC (eq. 23–24): v_i ← v_i − η(γv_i + ∇Ũ_i(x_i)) + √(2γη)ξ_i;  x_i ← Σ_j W_ij x_j + ηv_i (new v_i).
  D-ULA   (eq. 25, Parayil et al.): x_i ← x_i − β_k Σ_{j∈N_i}(x_i − x_j) − α_k·b·∇Ũ_i(x_i) + √(2α_k b)ξ_i,
          α_k = α0/(b1 + k)^{δ2}, β_k = β0/(b2 + k)^{δ1} (k = round index, burn-in included).
          The noise has variance 2α_k·b per agent: [D-ADMMS]'s eq. 25 draws w ~ N(0, N·I), and so does the
          authors' code. (With noise √(2α_k)ξ instead, the average x̄ moves with drift α_k∇U but noise
          variance 2α_k/b and samples π^b, i.e. 1/b of the posterior covariance — checked with the exact law.)
Why the agent average is the output: summing over agents (the Laplacian / W terms cancel), x̄ follows
  D-SGLD:  x̄' = x̄ − (η/b)Σ_i∇Ũ_i(x_i) + N(0, 2η/b) = Langevin on U with step η/b;
  D-SGHMC: underdamped Langevin on U with mass b (v̄' = v̄ − η(γv̄ + ∇U/b) + N(0, 2γη/b));
  D-ULA:   x̄' = x̄ − α_k Σ_i∇Ũ_i(x_i) + N(0, 2α_k) = Langevin on U with step α_k,
up to the disagreement x_i − x̄. The single agent's iterate carries that disagreement as extra variance
(exact laws at ηL = 0.02 on 5–20 agents: D-SGLD 1.1–2.5×, D-ULA 1.06–2×, D-SGHMC ≤ 1.01× the posterior
variance), so it is not the sample; the average is (ULA-level bias only).
W is the Metropolis matrix of the graph. Gradients are full local gradients by default; with `batch_size` = B,
agent i uses the unbiased estimate (n_i/B) Σ_{r∈batch} ∇ℓ_r (B rows drawn uniformly with replacement, per chain,
from the worker's own uniform stream, so draws stay identical across executors); shards with n_i ≤ B use
their full gradient.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from .. import topology as topo
from ..models.contract import Model
from ..streams import ChainNoise
from ..tuning import budget
from ..tuning.curvature import lipschitz_bound
from ..tuning.laplace import PRECONDITIONERS, Laplace, initial_points, laplace_for
from ..tuning.report import BiasPrediction, TuningReport
from .base import Algorithm, Plan, RoundInfo, ShardPool, minibatch_grads
from .checks import check_choice, check_init, check_int, check_nonnegative, check_positive, check_topology, check_unit


def local_gradient(
    model: Model, X: np.ndarray, y: np.ndarray, x: np.ndarray, batch_size: int | None, noise: ChainNoise
) -> np.ndarray:
    """∇U_i at x (K, d): exact, or the minibatch estimate (n_i/B) Σ_{r∈batch_k} ∇ℓ_r(x_k) for each chain k,
    rows r = ⌊u·n_i⌋ from B uniforms of chain k's stream (with replacement). Full gradient if n_i ≤ B."""
    n = np.asarray(y).shape[0]
    if batch_size is None or n <= batch_size:
        return model.grad(X, y, x)
    idx = np.minimum((noise.uniform(batch_size) * n).astype(int), n - 1)  # (B, K)
    return minibatch_grads(model, X, y, idx, x)[0]


@dataclass(frozen=True)
class AgentPayload:
    """Agent i's fixed settings: its index, neighbours and mixing weights, the prior share, the rule's constants."""

    index: int
    b: int
    neighbours: tuple[int, ...]
    w_self: float
    w_nbrs: np.ndarray  # W_ij for j in neighbours
    x0: np.ndarray  # (K, d)
    prior: Any  # the prior (Gaussian part + residual) in the sampler's coordinates
    kind: str  # "dsgld" | "dsghmc" | "dula" | …
    consts: Any  # the rule's tuned constants, a frozen dataclass (`DSGLDConsts`, `DSGHMCConsts`, `DULAConsts`, …)


class AgentState(NamedTuple):
    x: np.ndarray
    v: np.ndarray | None


class AgentWorker(NamedTuple):
    """A graph agent's worker state: its fixed payload and its moving state (whose type the rule defines)."""

    payload: AgentPayload
    state: Any


class AgentMessage(NamedTuple):
    """Round k's message to agent i: its neighbours' indices and their current x_j, nothing else."""

    t: int
    neighbours: tuple[int, ...]
    values: tuple[np.ndarray, ...]


class AgentReply(NamedTuple):
    x: np.ndarray


class GraphState(NamedTuple):
    top: topo.Topology
    xs: tuple[np.ndarray, ...]  # the agents' current x_i, as last reported


#: What a graph rule's tuning gives: its constants, and the bias budget with the predicted bias where the budget
#: chose them (None, None otherwise).
Tuned = tuple[Any, float | None, BiasPrediction | None]


class _Decentralized(Algorithm):
    """Shared plumbing: shared tuning step, graph, routing, initial states; subclasses define `_tune` (their tuned
    constants) and `_update` (one agent's step)."""

    secure_sums_refusal = (
        "it routes each site's own values to its neighbours on the graph (not only their sum over sites), "
        "which pairwise masks cannot hide"
    )
    preconditioner: str | None
    init: Any
    topology: Any
    batch_size: int | None = None

    def _tune(self, top: topo.Topology, W: np.ndarray, lap: Laplace, model: Model, pool: ShardPool) -> Tuned:
        """The rule's constants (a frozen dataclass whose fields the report repeats by name) and their bias."""
        raise NotImplementedError

    def _common_checks(self) -> None:
        check_topology(self.topology)
        check_init(self.init)
        check_int("batch_size", self.batch_size, 1, allow_none=True)
        check_choice("preconditioner", self.preconditioner, PRECONDITIONERS)

    def prepare(self, model: Model, pool: ShardPool, *, chains: int, seed: int, noise: ChainNoise) -> Plan:
        b, d = pool.num_shards, model.dim
        top = topo.make_topology(self.topology, b)
        W = topo.metropolis_weights(top)
        lap = laplace_for(model, pool, seed=seed, preconditioner=self.preconditioner, init=self.init)
        consts, bias_budget, bias = self._tune(top, W, lap, model, pool)
        wmodel = lap.adopt(model, pool)
        x0 = initial_points(self.init, lap, chains, d, noise)
        prior = wmodel.prior()
        payloads = [
            AgentPayload(
                i,
                b,
                top.neighbours[i],
                float(W[i, i]),
                W[i, list(top.neighbours[i])].copy(),
                x0,
                prior,
                self.name,
                consts,
            )
            for i in range(b)
        ]
        report = TuningReport(
            lap.precond.kind,
            bias_budget=bias_budget,
            bias=bias,
            topology=top.edges,
            W=W,
            max_degree=top.max_degree,
            **{f.name: getattr(consts, f.name) for f in dataclasses.fields(consts)},  # the rule's constants
        )
        return Plan.one_step(GraphState(top, tuple(x0.copy() for _ in range(b))), payloads, report, lap, wmodel)

    def worker_init(self, payload: AgentPayload, model: Model, X: np.ndarray, y: np.ndarray) -> AgentWorker:
        x = np.array(payload.x0, dtype=float)
        v = np.zeros_like(x) if payload.kind == "dsghmc" else None
        return AgentWorker(payload, AgentState(x, v))

    def _update(
        self, p: AgentPayload, s: AgentState, msg: AgentMessage, grad: np.ndarray, xi: np.ndarray
    ) -> AgentState:
        """One agent's step from its neighbours' values, its gradient and its noise (each subclass's rule)."""
        raise NotImplementedError

    def worker_step(
        self, state: AgentWorker, message: AgentMessage, model: Model, X: np.ndarray, y: np.ndarray, noise: ChainNoise
    ) -> tuple[AgentWorker, AgentReply]:
        p, s = state
        if message.neighbours != p.neighbours:
            raise RuntimeError(
                f"shards[{p.index}]: received values from {message.neighbours}, expected its neighbours {p.neighbours}"
            )
        grad = local_gradient(model, X, y, s.x, self.batch_size, noise) + p.prior.grad(s.x) / p.b  # ∇Ũ_i
        s = self._update(p, s, message, grad, noise.normal(1)[0])
        return AgentWorker(p, s), AgentReply(s.x)

    def messages(self, state: GraphState, local_steps: np.ndarray, info: RoundInfo) -> list[AgentMessage]:
        return [AgentMessage(info.t, ids, vals) for ids, vals in topo.route(state.top, state.xs)]

    def coordinator_step(
        self, state: GraphState, replies: list[AgentReply], noise: ChainNoise, info: RoundInfo
    ) -> tuple[GraphState, np.ndarray]:
        """Collect the agents' new x_i; the round's draws are their average x̄ = (1/b) Σ_i x_i."""
        xs = tuple(r.x for r in replies)
        return state._replace(xs=xs), np.mean(xs, axis=0)

    @staticmethod
    def _mix(p: AgentPayload, x: np.ndarray, msg: AgentMessage) -> np.ndarray:
        """Σ_j W_ij x_j over j ∈ {i} ∪ N_i."""
        out = p.w_self * x
        for w, xj in zip(p.w_nbrs, msg.values):
            out = out + w * xj
        return out


@dataclass(frozen=True)
class DSGLDConsts:
    """D-SGLD's tuned constant ([D-ADMMS] eq. 22): the step η."""

    step_size: float


@dataclass(frozen=True)
class DSGLD(_Decentralized):
    """D-SGLD ([D-ADMMS], eq. 22): x_i ← Σ_j W_ij x_j − η∇Ũ_i(x_i) + √(2η)ξ_i, W Metropolis on the graph.

    Parameters: step_size η (default: the largest within `bias_budget` under the Laplace model in whitened
    coordinates; b·0.1/L under preconditioner=None), topology ("complete" default, "ring", "star", "edgeless" or
    edges), init ("map" default, "zeros", array), batch_size (None: full gradients), preconditioner, bias_budget.
    Draws: x̄ = (1/b)Σ_i x_i, which follows Langevin with step η/b on U.
    """

    step_size: float | None = None
    topology: Any = "complete"
    init: Any = "map"
    batch_size: int | None = None
    preconditioner: str | None = "auto"
    bias_budget: float = 0.05
    name: str = field(default="dsgld", init=False)

    def __post_init__(self) -> None:
        check_positive("step_size", self.step_size)
        check_unit("bias_budget", self.bias_budget)
        self._common_checks()

    def _tune(self, top: topo.Topology, W: np.ndarray, lap: Laplace, model: Model, pool: ShardPool) -> Tuned:
        if self.step_size is not None:
            return DSGLDConsts(float(self.step_size)), None, None
        if lap.quads is None:
            return DSGLDConsts(top.b * 0.1 / lipschitz_bound(model, pool)), None, None
        eta, bias = budget.dsgld_step(lap, W, self.bias_budget)
        return DSGLDConsts(eta), self.bias_budget, bias

    def _update(
        self, p: AgentPayload, s: AgentState, msg: AgentMessage, grad: np.ndarray, xi: np.ndarray
    ) -> AgentState:
        c: DSGLDConsts = p.consts
        eta = c.step_size
        return s._replace(x=self._mix(p, s.x, msg) - eta * grad + math.sqrt(2.0 * eta) * xi)


@dataclass(frozen=True)
class DSGHMCConsts:
    """D-SGHMC's tuned constants ([D-ADMMS] eqs. 23–24): the step η and the friction γ."""

    step_size: float
    friction: float


@dataclass(frozen=True)
class DSGHMC(_Decentralized):
    """D-SGHMC ([D-ADMMS], eqs. 23–24): v_i ← v_i − η(γv_i + ∇Ũ_i(x_i)) + √(2γη)ξ_i; x_i ← Σ_j W_ij x_j + ηv_i.

    Parameters: step_size η and friction γ (defaults: tuned from `bias_budget` under the Laplace model in whitened
    coordinates; under preconditioner=None γ = 1 and η = √(b·0.1/L)), topology, init, batch_size,
    preconditioner, bias_budget; v_i starts at 0. Draws: x̄ = (1/b)Σ_i x_i.
    """

    step_size: float | None = None
    friction: float | None = None
    topology: Any = "complete"
    init: Any = "map"
    batch_size: int | None = None
    preconditioner: str | None = "auto"
    bias_budget: float = 0.05
    name: str = field(default="dsghmc", init=False)

    def __post_init__(self) -> None:
        check_positive("step_size", self.step_size)
        check_positive("friction", self.friction)
        check_unit("bias_budget", self.bias_budget)
        self._common_checks()

    def _tune(self, top: topo.Topology, W: np.ndarray, lap: Laplace, model: Model, pool: ShardPool) -> Tuned:
        if lap.quads is None:
            eta = (
                self.step_size if self.step_size is not None else math.sqrt(top.b * 0.1 / lipschitz_bound(model, pool))
            )
            return DSGHMCConsts(float(eta), float(self.friction if self.friction is not None else 1.0)), None, None
        eta, gam, bias = budget.dsghmc_tuning(lap, W, self.bias_budget, self.step_size, self.friction)
        return DSGHMCConsts(eta, gam), self.bias_budget, bias

    def _update(
        self, p: AgentPayload, s: AgentState, msg: AgentMessage, grad: np.ndarray, xi: np.ndarray
    ) -> AgentState:
        c: DSGHMCConsts = p.consts
        eta, gam = c.step_size, c.friction
        assert s.v is not None
        v = s.v - eta * (gam * s.v + grad) + math.sqrt(2.0 * gam * eta) * xi
        return AgentState(self._mix(p, s.x, msg) + eta * v, v)


#: D-ULA's schedule constants under the paper's plain rules ([D-ADMMS] sec. 6.2 and the authors' code).
DULA_PAPER = {"alpha0": 8.2e-4, "beta0": 0.48, "b1": 230.0, "b2": 230.0, "delta1": 0.55, "delta2": 0.05}


@dataclass(frozen=True)
class DULAConsts:
    """D-ULA's schedule ([D-ADMMS] eq. 25): α_k = α0/(b1 + k)^{δ2}, β_k = β0/(b2 + k)^{δ1}."""

    alpha0: float
    beta0: float
    b1: float
    b2: float
    delta1: float
    delta2: float

    def alpha(self, k: int) -> float:
        """The gradient step α_k of round k."""
        return dula_rate(self.alpha0, self.b1, self.delta2, k)

    def beta(self, k: int) -> float:
        """The consensus step β_k of round k."""
        return dula_rate(self.beta0, self.b2, self.delta1, k)


@dataclass(frozen=True)
class DULA(_Decentralized):
    """D-ULA (Parayil et al.; [D-ADMMS], eq. 25):
    x_i ← x_i − β_k Σ_{j∈N_i}(x_i − x_j) − α_k·b·∇Ũ_i(x_i) + √(2α_k b)ξ_i   (noise N(0, b·I) as in eq. 25),
    α_k = α0/(b1 + k)^{δ2}, β_k = β0/(b2 + k)^{δ1}, k the round index (burn-in included).

    Defaults. In whitened coordinates (the default) the steps are constant (δ1 = δ2 = 0), β0 = 0.5/max degree and
    α0 the largest within `bias_budget` under the Laplace model, so that the chain has a stationary law whose
    bias is predicted. Under preconditioner=None, the paper's schedule ([D-ADMMS] sec. 6.2, complete graph, and
    the authors' code): alpha0 8.2e-4, beta0 0.48, b1 = b2 = 230, delta1 0.55, delta2 0.05 ([D-ADMMS] uses
    δ1 = 0.05 on ring / edgeless graphs and notes that its values violate the conditions of Parayil et al.; with
    δ1 > δ2 the ratio β_k/α_k → 0, so the agents' disagreement, of variance ≈ α_k b/(β_k λ₂(L)), grows slowly
    over very long runs — the average is what is returned). Any parameter given explicitly is used as given.
    Requires β_0·max degree < 1 (β_k only decreases). topology ("complete" default), init, batch_size.
    Draws: x̄ = (1/b)Σ_i x_i.
    """

    alpha0: float | None = None
    beta0: float | None = None
    b1: float | None = None
    b2: float | None = None
    delta1: float | None = None
    delta2: float | None = None
    topology: Any = "complete"
    init: Any = "map"
    batch_size: int | None = None
    preconditioner: str | None = "auto"
    bias_budget: float = 0.05
    name: str = field(default="dula", init=False)

    def __post_init__(self) -> None:
        check_positive("alpha0", self.alpha0)
        check_positive("beta0", self.beta0)
        for nm in ("b1", "b2", "delta1", "delta2"):
            if getattr(self, nm) is not None:
                check_nonnegative(nm, getattr(self, nm))
        check_unit("bias_budget", self.bias_budget)
        self._common_checks()

    def schedule(self, tuned: bool) -> dict[str, float]:
        """The schedule constants given explicitly, the rest from the plain rules or constant steps (`tuned`)."""
        base = dict(DULA_PAPER) if not tuned else {"b1": 0.0, "b2": 0.0, "delta1": 0.0, "delta2": 0.0}
        given = {k: float(getattr(self, k)) for k in DULA_PAPER if getattr(self, k) is not None}
        out = base | given
        for nm, exp in (("b1", "delta2"), ("b2", "delta1")):
            if out.get(nm, 1.0) == 0 and out.get(exp, 0.0) > 0:
                raise ValueError(f"{nm} must be positive when its exponent is positive (the step at k = 0 is 1/0^δ)")
        return out

    def _tune(self, top: topo.Topology, W: np.ndarray, lap: Laplace, model: Model, pool: ShardPool) -> Tuned:
        tuned = lap.quads is not None
        c = self.schedule(tuned)
        bias: BiasPrediction | None = None
        if tuned:
            c.setdefault("beta0", 0.5 / max(top.max_degree, 1))
            if "alpha0" not in c:
                c["alpha0"], bias = budget.dula_step(lap, top, c["beta0"], self.bias_budget)
        consts = DULAConsts(**c)
        beta_first = consts.beta(0)
        if beta_first * top.max_degree >= 1.0:
            raise ValueError(
                f"beta0 too large for this graph: β_0·max degree = {beta_first:g}·{top.max_degree} must be < 1"
            )
        return consts, None if bias is None else self.bias_budget, bias

    def alpha(self, k: int) -> float:
        """α_k under the plain rules (the paper's schedule, explicit constants as given)."""
        return DULAConsts(**self.schedule(False)).alpha(k)

    def beta(self, k: int) -> float:
        """β_k under the plain rules (the paper's schedule, explicit constants as given)."""
        return DULAConsts(**self.schedule(False)).beta(k)

    def _update(
        self, p: AgentPayload, s: AgentState, msg: AgentMessage, grad: np.ndarray, xi: np.ndarray
    ) -> AgentState:
        c: DULAConsts = p.consts
        a, bk = c.alpha(msg.t), c.beta(msg.t)
        lap = len(msg.values) * s.x - sum(msg.values) if msg.values else 0.0  # Σ_{j∈N_i}(x_i − x_j)
        return s._replace(x=s.x - bk * lap - a * p.b * grad + math.sqrt(2.0 * a * p.b) * xi)


def dula_rate(c0: float, base: float, delta: float, k: int) -> float:
    """c0/(base + k)^δ (constant c0 when δ = 0)."""
    return c0 / (base + k) ** delta if delta else c0
