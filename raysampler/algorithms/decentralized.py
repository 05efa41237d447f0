"""Decentralised graph baselines (seed 003, eqs. 22–25; ALGORITHMS.md §6): D-SGLD, D-SGHMC, D-ULA.

Agent i is worker i and holds x_i (K, d) (and v_i for D-SGHMC). Each round the coordinator only routes:
worker i receives exactly its neighbours' current x_j (`topology.route`), never a non-neighbour's value.
The prior is split evenly: agent i's potential is Ũ_i = U_i + U_prior/b, so ∇Ũ_i = ∇U_i + ∇U_prior/b.
Draws: the agent average x̄ = (1/b) Σ_i x_i (K, d) after each round.

  D-SGLD  (eq. 22): x_i ← Σ_j W_ij x_j − η∇Ũ_i(x_i) + √(2η)ξ_i.
  D-SGHMC (eq. 23–24): v_i ← v_i − η(γv_i + ∇Ũ_i(x_i)) + √(2γη)ξ_i;  x_i ← Σ_j W_ij x_j + ηv_i (new v_i).
  D-ULA   (eq. 25, Parayil et al.): x_i ← x_i − β_k Σ_{j∈N_i}(x_i − x_j) − α_k·b·∇Ũ_i(x_i) + √(2α_k b)ξ_i,
          α_k = α0/(b1 + k)^{δ2}, β_k = β0/(b2 + k)^{δ1} (k = round index, burn-in included).
          The noise has variance 2α_k·b per agent: seed 003's eq. 25 draws w ~ N(0, N·I), and so does the
          authors' code. (ALGORITHMS.md §6 writes √(2α_k)ξ: then the average x̄ moves with drift α_k∇U but noise
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

import math
import numbers
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from .. import topology as topo
from ..models.base import GaussianPrior, Model
from ..streams import ChainNoise
from .base import Algorithm, Plan, RoundInfo, ShardPool, minibatch_grads
from .gradient import _check_init, _check_positive, initial_points


def _check_nonnegative(name: str, value: Any) -> None:
    ok = (isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value) and value >= 0)
    if not ok:
        raise ValueError(f"{name} must be a non-negative number, got {value!r}")


def _check_batch_size(value: Any) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"batch_size must be a positive integer or None, got {value!r}")


def local_gradient(model: Model, X: np.ndarray, y: np.ndarray, x: np.ndarray, batch_size: int | None,
                   noise: ChainNoise) -> np.ndarray:
    """∇U_i at x (K, d): exact, or the minibatch estimate (n_i/B) Σ_{r∈batch_k} ∇ℓ_r(x_k) for each chain k,
    rows r = ⌊u·n_i⌋ from B uniforms of chain k's stream (with replacement). Full gradient if n_i ≤ B."""
    n = np.asarray(y).shape[0]
    if batch_size is None or n <= batch_size:
        return model.grad(X, y, x)
    idx = np.minimum((noise.uniform(batch_size) * n).astype(int), n - 1)   # (B, K)
    return minibatch_grads(model, X, y, idx, x)[0]


def _check_topology(spec: Any) -> None:
    if isinstance(spec, (str, topo.Topology)):
        if isinstance(spec, str) and spec not in topo.TOPOLOGIES:
            raise ValueError(f"topology must be one of {topo.TOPOLOGIES} or a list of edges (i, j), got {spec!r}")
        return
    try:
        iter(spec)
    except TypeError:
        raise ValueError(f"topology must be one of {topo.TOPOLOGIES} or a list of edges (i, j), got {spec!r}") from None


@dataclass(frozen=True)
class AgentPayload:
    """Agent i's fixed settings: its index, neighbours and mixing weights, the prior share, the rule's constants."""

    index: int
    b: int
    neighbours: tuple[int, ...]
    w_self: float
    w_nbrs: np.ndarray          # W_ij for j in neighbours
    x0: np.ndarray              # (K, d)
    prior: GaussianPrior
    kind: str                   # "dsgld" | "dsghmc" | "dula"
    consts: dict


class AgentState(NamedTuple):
    x: np.ndarray
    v: np.ndarray | None


class AgentMessage(NamedTuple):
    """Round k's message to agent i: its neighbours' indices and their current x_j, nothing else."""

    t: int
    neighbours: tuple[int, ...]
    values: tuple[np.ndarray, ...]


class AgentReply(NamedTuple):
    x: np.ndarray


class GraphState(NamedTuple):
    top: topo.Topology
    xs: tuple[np.ndarray, ...]      # the agents' current x_i, as last reported


class _Decentralized(Algorithm):
    """Shared plumbing: graph, routing, initial states; subclasses define `_consts` and `_update`."""

    def _consts(self, top: topo.Topology, b: int) -> dict:
        return {}

    def prepare(self, model: Model, pool: ShardPool, *, chains: int, seed: int, noise: ChainNoise) -> Plan:
        b = pool.num_shards
        top = topo.make_topology(self.topology, b)
        W = topo.metropolis_weights(top)
        consts = self._consts(top, b)
        x0 = initial_points(self.init, model, pool, chains, seed)
        prior = model.prior()
        payloads = [AgentPayload(i, b, top.neighbours[i], float(W[i, i]), W[i, list(top.neighbours[i])].copy(),
                                 x0, prior, self.name, consts) for i in range(b)]
        info = {"topology": top.edges, "W": W, "max_degree": top.max_degree, **consts}
        return Plan(GraphState(top, tuple(x0.copy() for _ in range(b))), payloads, np.ones(b, dtype=int), 1.0,
                    False, info)

    def worker_init(self, payload: AgentPayload, model: Model, X: np.ndarray, y: np.ndarray) -> tuple:
        x = np.array(payload.x0, dtype=float)
        v = np.zeros_like(x) if payload.kind == "dsghmc" else None
        return payload, AgentState(x, v)

    def worker_step(self, state: tuple, message: AgentMessage, model: Model, X: np.ndarray, y: np.ndarray,
                    noise: ChainNoise) -> tuple[tuple, AgentReply]:
        p, s = state
        if message.neighbours != p.neighbours:
            raise RuntimeError(f"shards[{p.index}]: received values from {message.neighbours}, "
                               f"expected its neighbours {p.neighbours}")
        grad = local_gradient(model, X, y, s.x, self.batch_size, noise) + p.prior.grad(s.x) / p.b  # ∇Ũ_i
        s = self._update(p, s, message, grad, noise.normal(1)[0])
        return (p, s), AgentReply(s.x)

    def messages(self, state: GraphState, local_steps: np.ndarray, info: RoundInfo) -> list[AgentMessage]:
        return [AgentMessage(info.t, ids, vals) for ids, vals in topo.route(state.top, state.xs)]

    def coordinator_step(self, state: GraphState, replies: list[AgentReply], noise: ChainNoise,
                         info: RoundInfo) -> tuple[GraphState, np.ndarray]:
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
class DSGLD(_Decentralized):
    """D-SGLD (seed 003, eq. 22): x_i ← Σ_j W_ij x_j − η∇Ũ_i(x_i) + √(2η)ξ_i, W Metropolis on the graph.

    Parameters: step_size η (required), topology ("complete" default, "ring", "star", "edgeless" or edges),
    init ("map" default, "zeros", array), batch_size (None: full gradients).
    Draws: x̄ = (1/b)Σ_i x_i, which follows Langevin with step η/b on U.
    """

    step_size: float | None = None
    topology: Any = "complete"
    init: Any = "map"
    batch_size: int | None = None
    name: str = field(default="dsgld", init=False)

    def __post_init__(self) -> None:
        _check_positive("step_size", self.step_size, allow_none=False)
        _check_topology(self.topology)
        _check_init(self.init)
        _check_batch_size(self.batch_size)

    def _update(self, p, s, msg, grad, xi):
        eta = self.step_size
        return s._replace(x=self._mix(p, s.x, msg) - eta * grad + math.sqrt(2.0 * eta) * xi)


@dataclass(frozen=True)
class DSGHMC(_Decentralized):
    """D-SGHMC (seed 003, eqs. 23–24): v_i ← v_i − η(γv_i + ∇Ũ_i(x_i)) + √(2γη)ξ_i; x_i ← Σ_j W_ij x_j + ηv_i.

    Parameters: step_size η (required), friction γ (default 1.0), topology, init, batch_size; v_i starts at 0.
    Draws: x̄ = (1/b)Σ_i x_i.
    """

    step_size: float | None = None
    friction: float = 1.0
    topology: Any = "complete"
    init: Any = "map"
    batch_size: int | None = None
    name: str = field(default="dsghmc", init=False)

    def __post_init__(self) -> None:
        _check_positive("step_size", self.step_size, allow_none=False)
        _check_positive("friction", self.friction, allow_none=False)
        _check_topology(self.topology)
        _check_init(self.init)
        _check_batch_size(self.batch_size)

    def _update(self, p, s, msg, grad, xi):
        eta, gam = self.step_size, self.friction
        v = s.v - eta * (gam * s.v + grad) + math.sqrt(2.0 * gam * eta) * xi
        return AgentState(self._mix(p, s.x, msg) + eta * v, v)


@dataclass(frozen=True)
class DULA(_Decentralized):
    """D-ULA (Parayil et al.; seed 003, eq. 25):
    x_i ← x_i − β_k Σ_{j∈N_i}(x_i − x_j) − α_k·b·∇Ũ_i(x_i) + √(2α_k b)ξ_i   (noise N(0, b·I) as in eq. 25),
    α_k = α0/(b1 + k)^{δ2}, β_k = β0/(b2 + k)^{δ1}, k the round index (burn-in included).

    Parameters (seed 003 sec. 6.2, complete graph, and the authors' code): alpha0 8.2e-4, beta0 0.48,
    b1 = b2 = 230, delta1 0.55, delta2 0.05 (seed 003 uses δ1 = 0.05 on ring / edgeless graphs and notes that
    its values violate the conditions of Parayil et al.; with δ1 > δ2 the ratio β_k/α_k → 0, so the agents'
    disagreement, of variance ≈ α_k b/(β_k λ₂(L)), grows slowly over very long runs — the average is what is
    returned). delta1 = delta2 = 0 gives the constant steps α_k = α0, β_k = β0.
    Requires β_0·max degree < 1 (β_k only decreases). topology ("complete" default), init, batch_size.
    Draws: x̄ = (1/b)Σ_i x_i.
    """

    alpha0: float = 8.2e-4
    beta0: float = 0.48
    b1: float = 230.0
    b2: float = 230.0
    delta1: float = 0.55
    delta2: float = 0.05
    topology: Any = "complete"
    init: Any = "map"
    batch_size: int | None = None
    name: str = field(default="dula", init=False)

    def __post_init__(self) -> None:
        _check_positive("alpha0", self.alpha0, allow_none=False)
        _check_positive("beta0", self.beta0, allow_none=False)
        for nm in ("b1", "b2", "delta1", "delta2"):
            _check_nonnegative(nm, getattr(self, nm))
        for nm, base, dl in (("b1", self.b1, self.delta2), ("b2", self.b2, self.delta1)):
            if base == 0 and dl > 0:
                raise ValueError(f"{nm} must be positive when its exponent is positive (the step at k = 0 is 1/0^δ)")
        _check_topology(self.topology)
        _check_init(self.init)
        _check_batch_size(self.batch_size)

    def _consts(self, top: topo.Topology, b: int) -> dict:
        beta_first = self.beta(0)
        if beta_first * top.max_degree >= 1.0:
            raise ValueError(f"beta0 too large for this graph: β_0·max degree = {beta_first:g}·{top.max_degree} "
                             "must be < 1")
        return {}

    def alpha(self, k: int) -> float:
        return self.alpha0 / (self.b1 + k) ** self.delta2 if self.delta2 else self.alpha0

    def beta(self, k: int) -> float:
        return self.beta0 / (self.b2 + k) ** self.delta1 if self.delta1 else self.beta0

    def _update(self, p, s, msg, grad, xi):
        a, bk = self.alpha(msg.t), self.beta(msg.t)
        lap = len(msg.values) * s.x - sum(msg.values) if msg.values else 0.0     # Σ_{j∈N_i}(x_i − x_j)
        return s._replace(x=s.x - bk * lap - a * p.b * grad + math.sqrt(2.0 * a * p.b) * xi)
