"""FALD: Federated Averaging Langevin Dynamics ([DMC slides], "FALD" slides; docs/algorithms.md), with FALD* and
VR-FALD* control variates and the Bernoulli communication schedule run as geometric blocks of local steps.

Client i keeps X^i (K, d) and runs Langevin steps on its share of the potential,

    X^i ← X^i − γ Ĝ^i(X^i) + √(2γ) (√(τ/b) ξ_common + √(1−τ) ξ_i),     Ĝ^i ≈ ∇U_i + ∇U_prior / b,

(the prior is split evenly so that it is counted once in total; ξ_common is shared by all clients at each step).
After every step the server communicates with probability p_comm: it averages X̄ = (1/b) Σ_i X^i and every
client restarts from X̄. The average then follows LMC on U = Σ_i U_i + U_prior with step γ/b:
X̄ ← X̄ − (γ/b) ∇U(X̄) + √(2γ/b) ξ when every step communicates, whatever τ (the noise of the average has
variance 2γ(τ/b + (1−τ)/b) = 2γ/b). This is the correct temperature; the authors' deep-learning code scaled
gradients by the total N *and* shared one noise draw, which samples at temperature 1/b — not done here.

Bernoulli scheduling done right: the number of steps until the next communication is Geometric(p_comm) ≥ 1,
so the coordinator draws it (one draw per round, from chain 0's uniform stream of the coordinator, shared by
all chains so that one message asks every worker for the same number of steps) and sends one message per
communication. It also draws the common noise ξ_common of those steps (n_steps, K, d) from its own per-chain
normal streams and ships it in the message (the workers' streams are independent). The runtime's
`local_steps` argument of `messages` is ignored (Plan.balance = False). One round = one communication; its
draw is the server average X̄ at that communication.

Gradients: G_i = ∇U_i + ∇U_prior/b in full, or with `batch_size` = B the unbiased minibatch estimate
Ĝ^i(x) = (n_i/B) Σ_{j∈S} ∇U_{i,j}(x) + ∇U_prior(x)/b, S drawn uniformly *with replacement* (B indices), fresh at
every step and independently for every chain from the worker's own uniform stream (the prior term is exact).
A shard with n_i ≤ B uses its full gradient. Variants:
  "plain":   Ĝ^i(X^i).
  "star":    FALD*, Ĝ^i(X^i) − c_i + mean_j c_j with c_i = G_i (full) at the last server average whose gradients the
             server has collected. Workers evaluate G_i at each round's starting average X̄_t anyway (first local
             step) and return it; the server averages them and sends the mean in the next message. So in round t
             the control variate sits at X̄_{t−1} (one communication behind: getting mean_j G_j(X̄_t) before the
             round would cost an extra round trip). Σ_i (−c_i + mean c) = 0 for any anchor, so the dynamics of the
             average are those of plain FALD's average; only the client drift is reduced.
  "vr_star": VR-FALD*, Ĝ^i(X^i) − Ĝ^i(ref) + mean_j G_j(ref), the same minibatch for both Ĝ^i terms; with
             probability q per round (per chain, the coordinator's uniform draw) ref moves to the latest collected
             average. With full gradients and q = 1 it is "star".
The star variants cost one full local gradient per communication (G_i at the round's starting average).

Secure sums: the server needs only Σ_i X^i and Σ_i G_i(X̄_t), so with `fixed_point` (and in every secure-sums run)
each client sends its X^i (and G_i) side by side as one fixed-point term (`privacy.fixed_point.encode_term`), which
its site masks in a secure-sums run, and the server decodes only their total.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, NamedTuple

import numpy as np

from ..models.contract import Model
from ..privacy.fixed_point import decode, encode_term, term_sums
from ..streams import ChainNoise
from ..tuning import budget
from ..tuning.curvature import smoothness_bounds
from ..tuning.laplace import PRECONDITIONERS, initial_points, laplace_for
from ..tuning.report import BiasPrediction, TuningReport
from ..tuning.shards import shard_grad
from .base import Algorithm, Plan, RoundInfo, ShardPool, minibatch_grads
from .checks import check_bool, check_choice, check_init, check_int, check_positive, check_unit, is_real

VARIANTS = ("plain", "star", "vr_star")
MAX_LOCAL_STEPS = 1_000_000  # cap of a geometric block (reached with probability (1 − p)^1e6)


@dataclass(frozen=True)
class WorkerPayload:
    x0: np.ndarray  # (K, d) initial server average
    num_shards: int  # b: the prior's share is ∇U_prior / b
    gamma: float
    tau: float
    variant: str
    batch_size: int | None = None
    fixed_point: bool = False  # send X^i (and G_i) as one fixed-point term of their sums (`Reply.summed`)


class WorkerState(NamedTuple):
    payload: WorkerPayload
    c: np.ndarray | None  # (K, d) control variate G_i(anchor) (star / vr_star)
    g_last: np.ndarray  # (K, d) G_i at the last round's starting average
    prior: Any  # the model's GaussianPrior (cached)
    x_last: np.ndarray  # (K, d) the last round's starting average
    anchor: np.ndarray  # (K, d) the control-variate anchor (ref of vr_star)


class Message(NamedTuple):
    xbar: np.ndarray  # (K, d) server average every client restarts from
    n_steps: int  # local steps until the next communication (Geometric(p_comm))
    common: np.ndarray | None  # (n_steps, K, d) common noise ξ_common (None if τ = 0)
    cbar: np.ndarray | None  # (K, d) mean_j G_j(anchor) (star / vr_star)
    refresh: np.ndarray | None  # (K,) bool: move the anchor to the last collected average (star / vr_star)
    warmup: bool


class Reply(NamedTuple):
    """Client i's reply at a communication. With fixed-point sums (`WorkerPayload.fixed_point`) x and g are None:
    the client sends instead [X^i, G_i] side by side as its fixed-point term (`summed`, uint64 (K, d) or (K, 2d);
    masked by its site in a secure-sums run) and a flag of its own (`status`)."""

    x: np.ndarray | None  # (K, d) X^i at the communication
    g: np.ndarray | None  # (K, d) G_i(X̄_t) at the round's starting average (star / vr_star)
    n_steps: int
    summed: np.ndarray | None = None
    status: np.ndarray | None = None


class CoordinatorState(NamedTuple):
    xbar: np.ndarray
    cbar: np.ndarray | None
    refresh: np.ndarray | None
    n_steps: int
    common: np.ndarray | None


@dataclass(frozen=True)
class FALD(Algorithm):
    """Federated Averaging Langevin Dynamics (plain, FALD*, VR-FALD*) with a geometric communication schedule.

    Parameters:
      variant: "plain" (default), "star" (FALD*) or "vr_star" (VR-FALD*).
      step_size: γ, the clients' Langevin step. Default: the largest γ whose exact stationary law under the Laplace
        model (in whitened coordinates; averaged over the geometric schedule, client drift included) stays within
        `bias_budget`. Under preconditioner=None: γ = 0.1 / max_i (M_i + λ_prior/b), M_i the model's smoothness
        bound of U_i and λ_prior the largest prior precision: every client's local step is stable
        (γ·curvature ≤ 0.1) and the server average, LMC with step γ/b on U, has (γ/b)·L ≤ 0.1 with
        L = Σ_i M_i + λ_prior.
      p_comm: probability of communicating after each local step, in (0, 1] (default 0.2: 5 local steps per
        communication on average). p_comm = 1 is LMC on U with step γ/b.
      tau: correlation of the clients' noise, in [0, 1]. Default 1.0 (fully shared noise): the slides give no
        default, and their bound's last term γ(1 − τ)(1 − 1/b)d/p_c vanishes at τ = 1.
      q: probability (per round, per chain) of refreshing the VR reference point (vr_star only), in (0, 1].
      init: "map" (every chain starts at the MAP), "zeros", or an array (d,) or (K, d).
      batch_size: None (full local gradients, the default) or B ≥ 1: minibatch gradients (see the module doc).
      preconditioner ("auto", "laplace", "diag", None), bias_budget δ (0.05).
      fixed_point: each client sends its X^i (and G_i) rounded to the nearest 2⁻³² as one term of their sums
        (`privacy.fixed_point`), and the server adds the terms exactly mod 2⁶⁴: what a secure-sums run does
        (with masks), without the masks. Default False.
    """

    variant: str = "plain"
    step_size: Any = None
    p_comm: float = 0.2
    tau: float = 1.0
    q: float = 0.1
    batch_size: Any = None
    init: Any = "map"
    preconditioner: str | None = "auto"
    bias_budget: float = 0.05
    fixed_point: bool = False
    name: str = field(default="fald", init=False)

    secure_sums_refusal = None  # the server needs only Σ_i X^i and Σ_i G_i: the clients' terms go masked
    release_names = MappingProxyType({"x": "x", "g": "grad", "summed": "x,grad", "status": "status"})
    masked_fields = ("summed",)

    def for_secure_sums(self) -> FALD:
        """The clients send [X^i, G_i] in fixed point (their sites mask it): `fixed_point=True`."""
        return dataclasses.replace(self, fixed_point=True)

    def __post_init__(self) -> None:
        check_choice("variant", self.variant, VARIANTS)
        check_positive("step_size", self.step_size)
        if not (is_real(self.p_comm) and 0 < self.p_comm <= 1):
            raise ValueError(f"p_comm must be a number in (0, 1], got {self.p_comm!r}")
        if not (is_real(self.tau) and 0 <= self.tau <= 1):
            raise ValueError(f"tau must be a number in [0, 1], got {self.tau!r}")
        check_unit("q", self.q, closed=True)
        check_int("batch_size", self.batch_size, 1, allow_none=True)
        check_init(self.init)
        check_choice("preconditioner", self.preconditioner, PRECONDITIONERS)
        check_unit("bias_budget", self.bias_budget)
        check_bool("fixed_point", self.fixed_point)

    # --- tuning ---------------------------------------------------------------------------------

    def prepare(self, model: Model, pool: ShardPool, *, chains: int, seed: int, noise: ChainNoise) -> Plan:
        b, d = pool.num_shards, model.dim
        lap = laplace_for(model, pool, seed=seed, preconditioner=self.preconditioner, init=self.init)
        M: np.ndarray | None = None
        bias: BiasPrediction | None = None
        if self.step_size is not None:
            gamma = float(self.step_size)
        elif self.preconditioner is None:
            M = smoothness_bounds(model, pool)
            gamma = 0.1 / float(np.max(M + model.prior().gaussian.max_precision() / b))
        else:
            gamma, bias = budget.fald_step(lap, float(self.p_comm), float(self.tau), self.bias_budget)
        wmodel = lap.adopt(model, pool)
        prior = wmodel.prior()
        xbar = initial_points(self.init, lap, chains, d, noise)
        cbar = refresh = None
        if self.variant != "plain":
            grads = pool.map(shard_grad, [(xbar,)] * b)
            cbar = (np.sum(grads, axis=0) + prior.grad(xbar)) / b
            refresh = np.ones(chains, dtype=bool)
        n_steps, common = self._schedule(noise)
        state = CoordinatorState(xbar, cbar, refresh, n_steps, common)
        payloads = [
            WorkerPayload(
                xbar,
                b,
                gamma,
                float(self.tau),
                self.variant,
                None if self.batch_size is None else int(self.batch_size),
                self.fixed_point,
            )
            for _ in range(b)
        ]
        report = TuningReport(
            lap.precond.kind,
            bias_budget=None if bias is None else self.bias_budget,
            bias=bias,
            M=M,
            gamma=np.full(b, gamma),
            step_size=gamma,
            lmc_step_of_average=gamma / b,
            p_comm=float(self.p_comm),
            tau=float(self.tau),
            variant=self.variant,
            q=float(self.q) if self.variant == "vr_star" else None,
            batch_size=self.batch_size,
            theta_map=lap.theta_map,
        )
        return Plan.one_step(state, payloads, report, lap, wmodel, n_avg=1.0 / self.p_comm)

    def _schedule(self, noise: ChainNoise) -> tuple[int, np.ndarray | None]:
        """The next block: N ~ Geometric(p_comm) on {1, 2, …} by inversion of chain 0's uniform,
        N = ⌈log U / log(1 − p)⌉ (P(N > k) = (1 − p)^k), and its common noise (N, K, d)."""
        u = float(noise.uniform(1)[0, 0])
        n = geometric_steps(u, self.p_comm)
        common = noise.normal(n) if self.tau > 0 else None
        return n, common

    # --- worker ---------------------------------------------------------------------------------

    def worker_init(self, payload: WorkerPayload, model: Model, X: np.ndarray, y: np.ndarray) -> WorkerState:
        x0 = np.array(payload.x0, dtype=float)
        prior = model.prior()
        g = _local_grad(model, X, y, x0, payload.num_shards, prior)
        if not np.all(np.isfinite(g)):
            raise FloatingPointError("the initial point gives a non-finite gradient of U_i: choose another init")
        return WorkerState(payload, g.copy() if payload.variant != "plain" else None, g, prior, x0, x0.copy())

    def worker_step(
        self, state: WorkerState, message: Message, model: Model, X: np.ndarray, y: np.ndarray, noise: ChainNoise
    ) -> tuple[WorkerState, Reply]:
        p, prior = state.payload, state.prior
        n, b = message.n_steps, p.num_shards
        x = np.array(message.xbar, dtype=float)
        K = x.shape[0]
        n_i = len(y)
        batch = p.batch_size if p.batch_size is not None and p.batch_size < n_i else None
        g0, c, anchor, shift = None, state.c, state.anchor, None
        if p.variant != "plain":
            g0 = _local_grad(model, X, y, x, b, prior)  # G_i(X̄_t): returned for the server's next mean
            assert message.refresh is not None and message.cbar is not None  # sent by every variant but "plain"
            assert state.c is not None  # the control variate exists in every variant but "plain"
            c = np.where(message.refresh[:, None], state.g_last, state.c)
            anchor = np.where(message.refresh[:, None], state.x_last, state.anchor)
            shift = message.cbar - c
        s_common = math.sqrt(2.0 * p.gamma * p.tau / b)
        s_own = math.sqrt(2.0 * p.gamma * (1.0 - p.tau))
        own = noise.normal(n) if p.tau < 1 else None
        idx = None
        if batch is not None:  # (n, K, B) indices, with replacement, per step and chain
            u = noise.uniform(n * batch).reshape(n, batch, K).transpose(0, 2, 1)
            idx = np.minimum((u * n_i).astype(np.intp), n_i - 1)
        for k in range(n):
            if idx is None:
                g = g0 if (k == 0 and g0 is not None) else _local_grad(model, X, y, x, b, prior)
                drift = g if shift is None else g + shift
            elif p.variant == "vr_star":
                gx, ga = minibatch_grads(model, X, y, idx[k].T, x, anchor)
                drift = gx - ga + (prior.grad(x) - prior.grad(anchor)) / b + message.cbar
            else:
                drift = minibatch_grads(model, X, y, idx[k].T, x)[0] + prior.grad(x) / b
                if shift is not None:
                    drift = drift + shift
            x = x - p.gamma * drift
            if s_common and message.common is not None:
                x = x + s_common * message.common[k]
            if own is not None:
                x = x + s_own * own[k]
        term = encode_term((x,) if g0 is None else (x, g0), b) if p.fixed_point else None
        if term is not None and g0 is not None:  # the control variate as the server's mean adds it: rounded as sent
            g0 = decode(term.words)[:, x.shape[1] :]
        g_last = g0 if g0 is not None else state.g_last
        new_state = WorkerState(p, c, g_last, prior, np.array(message.xbar, dtype=float), anchor)
        if term is not None:
            return new_state, Reply(None, None, n, term.words, term.status)
        return new_state, Reply(x, g0, n)

    # --- coordinator ----------------------------------------------------------------------------

    def messages(self, state: CoordinatorState, local_steps: np.ndarray, info: RoundInfo) -> list[Message]:
        """One message per worker; `local_steps` is ignored: the block length is the geometric draw."""
        msg = Message(state.xbar, state.n_steps, state.common, state.cbar, state.refresh, info.warmup)
        return [msg] * len(local_steps)

    def coordinator_step(
        self, state: CoordinatorState, replies: list[Reply], noise: ChainNoise, info: RoundInfo
    ) -> tuple[CoordinatorState, np.ndarray]:
        """Communication: X̄ = (1/b) Σ_i X^i is the round's draw and the next start; collect mean_j G_j(X̄_t);
        draw the anchor refresh (vr_star), the next block length and its common noise."""
        xbar, gmean = _averages(replies, self.variant != "plain")
        cbar: np.ndarray | None = None
        refresh: np.ndarray | None = None
        if gmean is not None:
            if self.variant == "star":
                refresh = np.ones(xbar.shape[0], dtype=bool)
            else:
                refresh = noise.uniform(1)[0] < self.q
            cbar = np.where(refresh[:, None], gmean, state.cbar if state.cbar is not None else gmean)
        n_steps, noise_block = self._schedule(noise)
        return CoordinatorState(xbar, cbar, refresh, n_steps, noise_block), xbar

    def reply_stats(self, replies: list[Reply]) -> dict[str, np.ndarray]:
        """`local_steps`: the round's number of local steps (Geometric(p_comm)), the same for every chain."""
        first = replies[0].x if replies[0].x is not None else replies[0].summed
        assert first is not None  # a reply carries its values or their fixed-point term
        return {"local_steps": np.full(first.shape[0], float(replies[0].n_steps))}


def _averages(replies: list[Reply], with_grad: bool) -> tuple[np.ndarray, np.ndarray | None]:
    """X̄ = (1/b) Σ_i X^i and, for the star variants, (1/b) Σ_i G_i(X̄_t) (every client sends G_i there): from the
    plain replies, or from the total of their fixed-point terms (masked or not: only the total is read)."""
    b = len(replies)
    first = replies[0].summed
    if first is not None:
        d = first.shape[-1] // (2 if with_grad else 1)
        sums = term_sums(replies, (d, d) if with_grad else (d,))
        assert sums is not None  # the replies carry terms
        return sums[0] / b, (sums[1] / b if with_grad else None)
    xbar = np.mean([r.x for r in replies if r.x is not None], axis=0)
    gmean = np.mean([r.g for r in replies if r.g is not None], axis=0) if with_grad else None
    return xbar, gmean


def geometric_steps(u: float, p: float) -> int:
    """Inverse-CDF draw of Geometric(p) on {1, 2, …} from a uniform u ∈ [0, 1)."""
    if p >= 1.0:
        return 1
    u = max(u, 1e-300)
    n = math.ceil(math.log(u) / math.log1p(-p))
    return int(min(max(n, 1), MAX_LOCAL_STEPS))


def _local_grad(model: Model, X: np.ndarray, y: np.ndarray, x: np.ndarray, b: int, prior: Any) -> np.ndarray:
    """G_i(x) = ∇U_i(x) + ∇U_prior(x)/b for each row of x."""
    return model.grad(X, y, x) + prior.grad(x) / b
