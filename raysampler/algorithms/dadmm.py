"""D-ADMMS ([D-ADMMS], Algorithm 1; docs/algorithms.md) and its noise-free optimiser ADMM.

Agent i is worker i; it holds its primal x_i (K, d) and dual p_i (K, d) (p_i starts at 0). Its potential is
V_i = U_i + U_prior/b (the prior split evenly, as in `decentralized`). With neighbours N_i, n_i = |N_i|:

  w_i ~ N(0, I)  (one per agent and round, shared by all its neighbour terms; w = 0 for ADMM)
  x_i ← argmin_x V_i(x) + p_iᵀx + ρ Σ_{j∈N_i} ‖x − (x_i + x_j)/2 + s_i‖²,   s_i = C_i^{1/2} w_i
      = prox_{γ_i V_i}( mean_{j∈N_i}(x_i + x_j)/2 − s_i − γ_i p_i ),   γ_i = 1/(2ρ n_i)
  exchange x with the neighbours;  p_i ← p_i + ρ Σ_{j∈N_i}(x_i − x_j)   (the *new* x's)

Noise covariance C_i (parameter `noise`):
  "paper"      C_i = (1/(2ρ²)) I, i.e. s_i = (√2/(2ρ)) w_i: [D-ADMMS]'s Algorithm 1 / eq. 6, docs/algorithms.md.
  "langevin"   C_i = 2γ_i I = I/(ρ n_i): the proximal Langevin step x' = prox_{γV}(x + √(2γ) w) (Salim et al. 2019).
  "curvature"  C_i = 2γ_i I + γ_i² ∇²V_i(x_i) (Hessian at the agent's current x_i; default).
Why (derivation in tests/test_dadmm.py): summing the agents' optimality conditions, the dual terms cancel
(Σ_i p_i = 0) and the neighbour terms telescope, so with N = Σ_i n_i and h = 1/(2ρN)
    Σ_i [∇V_i(x_i') + 2ρ n_i (x_i' − x_i) + 2ρ n_i s_i] = 0,
which near consensus (x_i ≈ x̄) is the implicit-Euler (proximal) Langevin step for U = Σ V_i with step h and
noise −(1/N)Σ_i n_i s_i. That needs noise covariance 2h (consistent Langevin: "langevin", since
Σ_i n_i² · 2γ_i / N² = 2h) or, to make the implicit-Euler step *exact* for a Gaussian (stationary covariance
A⁻¹ solves S = (I+hA)⁻¹(S + C)(I+hA)⁻¹ iff C = 2h I + h²A), 2h I + h² Σ_i ∇²V_i, which is what
"curvature" supplies agent by agent (Σ_i n_i²(2γ_i I + γ_i² A_i)/N² = 2h I + h² Σ_i A_i). The paper's scale
gives the average a covariance ≈ (n_i/(2ρ)) × that of "langevin": it shrinks like 1/ρ and grows with the degree.
Exact stationary laws (Gaussian, tests/test_dadmm.py): "curvature" makes the agent average's covariance equal
to the posterior's for identical shards on a regular graph, and within ≈0.2–3% otherwise (ρ ≥ 1); "langevin"
is under-dispersed by the implicit-Euler factor (≈ (1 + h λ/2)⁻¹) plus a network term, → 1 as ρ → ∞.
For d > DENSE_MAX "curvature" falls back to "langevin" (the Hessian square root would need d² work per chain);
the run's info records the noise used.

The sum runs over the neighbours themselves (the authors' code loops over indices 0..n_i−1: a bug, not copied).

One exchange per round: the dual update of iteration k needs the neighbours' x^{k+1}, which are exactly the values
the primal update of iteration k+1 needs. So round t's message carries the neighbours' x^t; the worker first
completes the previous iteration's dual update p^t = p^{t−1} + ρ Σ_j (x_i^t − x_j^t) (skipped in its first round,
where p^0 = 0), then computes x^{t+1}. This is the same sequence as Algorithm 1. The coordinator only routes
(`topology.route`): a worker never receives a non-neighbour's value.

Edgeless graph / isolated agent (n_i = 0): there is no coupling and no noise term, so x_i = argmin V_i (the
agent's local MAP) after the first round and stays there; p_i stays 0. D-ADMMS is then deterministic (the
paper's observation) — no division by n_i happens.

Draws: the agent average x̄ = (1/b) Σ_i x_i (K, d) after each round (as for the other graph samplers).

The proximal map prox_{γV}(v) = argmin_x V(x) + ‖x − v‖²/(2γ) is computed on the worker from the model's own
methods by Newton's method warm-started at the agent's previous x_i: at most `newton_steps` steps, stopping early
once a step is below NEWTON_STOP·(1 + ‖x‖_∞), when the next would be about its square (deterministic: same
inputs give the same iterates on every executor).
For quadratic V (Gaussian / linear-regression models) the first step is exact. For d ≤ DENSE_MAX the Newton
system uses the dense Hessians of all K chains at once (`model.hessians`: one batched computation for the built-in
families, `hessian` chain by chain for a model without a closed form) and one batched solve; for larger d it is
solved by conjugate gradients with `model.hvp`, batched over chains.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from .. import topology as topo
from ..models.contract import Model
from ..priors import term_hessians
from ..streams import ChainNoise
from ..tuning import budget
from ..tuning.laplace import Laplace
from .base import ShardPool
from .checks import check_choice, check_int, check_positive, check_unit
from .decentralized import AgentMessage, AgentPayload, AgentReply, AgentWorker, Tuned, _Decentralized

DENSE_MAX = 200  # largest d for which the prox's Newton system uses the dense Hessian
_CG_TOL = 1e-12


def prior_hessians(prior: Any, x: np.ndarray) -> np.ndarray:
    """The prior's Hessian at each of K points (K, d, d): its Gaussian part (a read-only broadcast of the one matrix
    when there is no residual term) plus the residual term's."""
    K, d = x.shape
    G = np.asarray(prior.gaussian.matrix(), dtype=float)
    if prior.residual is None:
        return np.broadcast_to(G, (K, d, d))
    return G + term_hessians(prior.residual, x)


def _cg(matvec, rhs: np.ndarray, iters: int) -> np.ndarray:
    """Solve matvec(u) = rhs row-wise (K independent SPD systems) by conjugate gradients, fixed max iterations."""
    u = np.zeros_like(rhs)
    r = rhs.copy()
    q = r.copy()
    rr = np.einsum("kd,kd->k", r, r)
    stop = _CG_TOL**2 * np.maximum(rr, 1e-300)
    for _ in range(iters):
        active = rr > stop
        if not np.any(active):
            break
        Aq = matvec(q)
        qAq = np.einsum("kd,kd->k", q, Aq)
        alpha = np.where(active, rr / np.where(qAq > 0, qAq, 1.0), 0.0)
        u = u + alpha[:, None] * q
        r = r - alpha[:, None] * Aq
        rr_new = np.einsum("kd,kd->k", r, r)
        beta = np.where(active, rr_new / np.where(rr > 0, rr, 1.0), 0.0)
        q = r + beta[:, None] * q
        rr = rr_new
    return u


def agent_hessians(model: Model, X: np.ndarray, y: np.ndarray, prior: Any, b: int, x: np.ndarray) -> np.ndarray:
    """∇²V_i = ∇²U_i + ∇²U_prior/b at each of K points (K, d, d), from the model's batched `hessians`."""
    H = model.hessians(X, y, x)
    return 0.5 * (H + H.transpose(0, 2, 1)) + prior_hessians(prior, x) / b


#: prox's Newton iterations stop after a step below this, relative to 1 + ‖x‖_∞ (the next would be about its square)
NEWTON_STOP = 1e-6


def prox(
    model: Model,
    X: np.ndarray,
    y: np.ndarray,
    prior: Any,
    b: int,
    v: np.ndarray,
    gamma: float,
    x0: np.ndarray | None = None,
    newton_steps: int = 5,
    hessian0: np.ndarray | None = None,
) -> np.ndarray:
    """prox_{γV}(v) = argmin_x V(x) + ‖x − v‖²/(2γ), V = U_i + U_prior/b, for K rows of v (K, d).

    Newton's method from x0 (default v): g = ∇U_i(x) + ∇U_prior(x)/b + (x − v)/γ,
    H = ∇²U_i(x) + ∇²U_prior(x)/b + I/γ, x ← x − H⁻¹g; at most `newton_steps` steps, stopping after a step below
    NEWTON_STOP·(1 + ‖x‖_∞) (on the GLMs tried the steps shrink fast enough that this saves the fifth pass:
    docs/performance.md, "Measurements behind choices in the code").
    γ = ∞ (`math.inf`) gives argmin V. `hessian0`: ∇²V at x0 if already known.
    """
    x = np.array(v if x0 is None else x0, dtype=float, copy=True)
    d = x.shape[-1]
    inv_gamma = 0.0 if math.isinf(gamma) else 1.0 / gamma
    for k in range(newton_steps):
        g = model.grad(X, y, x) + prior.grad(x) / b
        if inv_gamma:
            g = g + (x - v) * inv_gamma
        if d <= DENSE_MAX:
            H = hessian0 if (k == 0 and hessian0 is not None) else agent_hessians(model, X, y, prior, b, x)
            step = np.linalg.solve(H + np.eye(d) * inv_gamma, g[:, :, None])[:, :, 0]
        else:
            step = _cg(lambda u, x=x: model.hvp(X, y, x, u) + prior.hvp(x, u) / b + u * inv_gamma, g, iters=min(d, 100))
        x = x - step
        if np.max(np.abs(step)) <= NEWTON_STOP * (1.0 + np.max(np.abs(x))):
            break
    return x


NOISES = ("curvature", "langevin", "paper")


def noise_sample(kind: str, w: np.ndarray, gamma: float, rho: float, hessian: np.ndarray | None) -> np.ndarray:
    """The primal step's noise s_i = S_i w with S_i S_iᵀ = C_i, for K rows of w ~ N(0, I) (see the module docstring);
    "curvature" needs ∇²V_i at the agent's point (K, d, d)."""
    if kind == "paper":
        return (math.sqrt(2.0) / (2.0 * rho)) * w
    if kind == "langevin":
        return math.sqrt(2.0 * gamma) * w
    # "curvature": C = 2γ I + γ² ∇²V_i(x), ∇²V_i = ∇²U_i + ∇²U_prior/b, PSD part (eigenvalues ≥ 0)
    assert hessian is not None
    try:  # ∇²V_i positive definite at every chain's point (Gaussian priors): C's Cholesky factor is a square root
        np.linalg.cholesky(hessian)
        d = hessian.shape[-1]
        L = np.linalg.cholesky(2.0 * gamma * np.eye(d) + gamma**2 * hessian)
        # two Cholesky factorisations: cheaper than eigh (docs/performance.md, "Measurements behind choices in the
        # code")
        return (L @ w[:, :, None])[:, :, 0]
    except np.linalg.LinAlgError:  # an indefinite or singular ∇²V_i somewhere: its PSD part, from eigh
        pass
    lam, Q = np.linalg.eigh(hessian)
    scale = np.sqrt(2.0 * gamma + gamma**2 * np.clip(lam, 0.0, None))  # (K, d)
    return np.einsum("kij,kj->ki", Q, scale * np.einsum("kji,kj->ki", Q, w))


class ADMMState(NamedTuple):
    x: np.ndarray  # x_i^t (K, d)
    p: np.ndarray  # p_i^{t−1} (K, d): the dual before this round's (lagged) update
    started: bool  # False until the first primal update (p^0 = 0 needs no update)


@dataclass(frozen=True)
class ADMMConsts:
    """D-ADMMS / ADMM's tuned constants: the penalty ρ and the primal step's noise covariance (None for ADMM)."""

    rho: float
    noise: str | None


class _ADMMBase(_Decentralized):
    """Shared D-ADMMS / ADMM worker step; graph, routing, init and draws come from `_Decentralized`."""

    noisy = True  # class attribute (ADMM overrides it), not a parameter
    rho: float | None
    newton_steps: int

    def _tune(self, top: topo.Topology, W: np.ndarray, lap: Laplace, model: Model, pool: ShardPool) -> Tuned:
        noise = getattr(self, "noise", "paper") if self.noisy else None
        if noise == "curvature" and model.dim > DENSE_MAX:
            noise = "langevin"  # the Hessian square root would cost d² per chain and round
        if self.rho is not None:
            return ADMMConsts(float(self.rho), noise), None, None
        if lap.quads is None or not self.noisy:
            return ADMMConsts(PAPER_RHO, noise), None, None
        delta = getattr(self, "bias_budget", 0.05)
        rho, bias = budget.dadmms_rho(lap, top, noise, delta)
        return ADMMConsts(rho, noise), delta, bias

    def worker_init(self, payload: AgentPayload, model: Model, X: np.ndarray, y: np.ndarray) -> AgentWorker:
        x = np.array(payload.x0, dtype=float)
        return AgentWorker(payload, ADMMState(x, np.zeros_like(x), False))

    def worker_step(
        self, state: AgentWorker, message: AgentMessage, model: Model, X: np.ndarray, y: np.ndarray, noise: ChainNoise
    ) -> tuple[AgentWorker, AgentReply]:
        p, s = state
        if message.neighbours != p.neighbours:
            raise RuntimeError(
                f"shards[{p.index}]: received values from {message.neighbours}, expected its neighbours {p.neighbours}"
            )
        c: ADMMConsts = p.consts
        rho, n_i, noise_kind = c.rho, len(p.neighbours), c.noise
        x, dual = s.x, s.p
        nb_sum = np.sum(message.values, axis=0) if n_i else np.zeros_like(x)  # Σ_{j∈N_i} x_j^t
        if s.started and n_i:  # p^t = p^{t−1} + ρ Σ_j (x_i^t − x_j^t)
            dual = dual + rho * (n_i * x - nb_sum)
        # ∇²V_i at the agent's point: the "curvature" noise's and the prox's first Newton step's (x0 = x)
        H = agent_hessians(model, X, y, p.prior, p.b, x) if x.shape[1] <= DENSE_MAX else None
        if n_i == 0:  # isolated: x = argmin V_i, deterministic
            x_new = prox(model, X, y, p.prior, p.b, x, math.inf, x0=x, newton_steps=self.newton_steps, hessian0=H)
        else:
            gamma = 1.0 / (2.0 * rho * n_i)
            v = 0.5 * (x + nb_sum / n_i) - dual * gamma
            if self.noisy:
                assert noise_kind is not None  # D-ADMMS always tunes a noise
                v = v - noise_sample(noise_kind, noise.normal(1)[0], gamma, rho, H)
            x_new = prox(model, X, y, p.prior, p.b, v, gamma, x0=x, newton_steps=self.newton_steps, hessian0=H)
        return AgentWorker(p, ADMMState(x_new, dual, True)), AgentReply(x_new)


#: ρ under the paper's plain rules ([D-ADMMS]'s experiments).
PAPER_RHO = 5.0


@dataclass(frozen=True)
class DADMMS(_ADMMBase):
    """D-ADMMS ([D-ADMMS], Algorithm 1): noisy proximal primal step, dual ascent on the graph disagreement.

    Parameters: rho ρ > 0 (default: in whitened coordinates the smallest ρ — the fastest mixing, since the
    autocorrelation grows with ρ — whose predicted bias under the Laplace model stays within `bias_budget`;
    under preconditioner=None the paper's 5), noise ("curvature" default, "langevin", or "paper" for [D-ADMMS]'s
    scale √2/(2ρ); see the module docstring), topology ("complete" default, "ring", "star", "edgeless" or a list
    of edges), init ("map" default, "zeros", array), newton_steps (max Newton steps of the prox, default 5),
    preconditioner, bias_budget. Draws: x̄ = (1/b) Σ_i x_i. Edgeless: each x_i = argmin V_i, deterministic.
    """

    rho: float | None = None
    noise: str = "curvature"
    topology: Any = "complete"
    init: Any = "map"
    newton_steps: int = 5
    preconditioner: str | None = "auto"
    bias_budget: float = 0.05
    name: str = field(default="dadmms", init=False)

    def __post_init__(self) -> None:
        check_positive("rho", self.rho)
        check_choice("noise", self.noise, NOISES)
        check_int("newton_steps", self.newton_steps, 1)
        check_unit("bias_budget", self.bias_budget)
        self._common_checks()


@dataclass(frozen=True)
class ADMM(_ADMMBase):
    """Decentralised ADMM: D-ADMMS with w = 0, an optimiser; its agent average x̄ converges to the MAP.

    Parameters as `DADMMS` (rho default 5.0, topology "complete", init "map", newton_steps 5, preconditioner).
    """

    rho: float | None = PAPER_RHO
    topology: Any = "complete"
    init: Any = "map"
    newton_steps: int = 5
    preconditioner: str | None = "auto"
    name: str = field(default="admm", init=False)
    noisy = False  # class attribute, not a parameter

    def __post_init__(self) -> None:
        check_positive("rho", self.rho)
        check_int("newton_steps", self.newton_steps, 1)
        self._common_checks()
