"""QLSD / QLSD++ — Quantised Langevin Stochastic Dynamics ([DMC slides]; docs/algorithms.md).

Server–worker shape of ULA (`gradient.py`): the coordinator holds θ (K, d); each round it sends θ to every
client, client i returns a *compressed* gradient vector, and the server steps

    θ ← θ − γ·(Σ_i ĝ_i + ∇U_prior(θ)) + √(2γ)ξ           (the prior's gradient is exact: the server holds it).

Variants (`variant`):
  "sharp" QLSD#:  g_i = ∇U_i(θ) or its minibatch estimate (n_i/B)Σ_{r∈S}∇ℓ_r(θ); ĝ_i = C(g_i).
  "star"  QLSD*:  the same g_i with the memory term (below).  NB the slides' QLSD* uses control variates at
                  θ* = argmin U; here (as the project brief asks) "star" is QLSD# + memory.
  "pp"    QLSD++: g_i = (n_i/B)Σ_{r∈S}(∇ℓ_r(θ) − ∇ℓ_r(ζ)) + ∇U_i(ζ) (the same rows S at θ and ζ), the anchor ζ
                  reset to the current θ every `ref_every` rounds (rounds t ≡ 0 mod ref_every, t counting burn-in;
                  the server decides and says so in the message), ∇U_i(ζ) computed once per reset on the worker;
                  plus the memory term. With full gradients g_i = ∇U_i(θ) exactly.
Memory term (Horváth et al. 2019): client i keeps h_i (K, d), 0 at start, its own (never shared). It sends only
q_i = C(g_i − h_i); ĝ_i = q_i + h_i and then h_i ← h_i + α q_i (the same quantised vector, quantised once).
The server keeps H = Σ_i h_i itself (H ← H + αΣ_i q_i), so Σ_i ĝ_i = Σ_i q_i + H with no extra traffic.

Quantiser C (QSGD, s levels), row-wise: for v ≠ 0, r_j = s|v_j|/‖v‖₂, l_j = ⌊r_j⌋,
C(v)_j = ‖v‖₂ sign(v_j)(l_j + 1[u_j < r_j − l_j])/s; C(0) = 0; s None/0: identity. Unbiased,
E‖C(v) − v‖² ≤ ω‖v‖², ω = min(d/s², √d/s). The (K, d) uniforms come from the client's own stream:
u = noise.uniform(d).T (d rows of (K,) uniforms, transposed: chain k's uniforms are its own stream's next d).
Minibatch rows (if any) are drawn first from that stream (as `decentralized.local_gradient`), then u.

Communication: each client sends one vector per round; counted with the simple bound
bits(d, s) = 32 + d·(1 + log2(s + 1)) per vector (a float32 norm, a sign bit and log2(s+1) bits for the level
per coordinate; not QSGD's Elias coding), 32·d without compression. Only the uplink (client → server) is
counted. Reported per round and chain as sample_stats["bits"] (sum over clients) and in the plan info.
Also reported: sample_stats["sq_error"], Σ_i ‖ĝ_i − g_i‖² per chain (the compression error of the round).

Secure sums: the server needs only Σ_i q_i, so with `fixed_point` (and in every secure-sums run) each client sends
q_i rounded to the nearest 2⁻³² as its fixed-point term of that sum (`privacy.fixed_point.encode_term`; its site
masks it in a secure-sums run) and uses the rounded q_i for its own memory, so the server's H stays Σ_i h_i. Its
squared error is then not sent (a per-site value, and one that can leave the fixed point's range): sample_stats has
no "sq_error". Its bit counts are then what it sends: 64 a coordinate and 64 for its flag (the quantiser's
compression is not used on the wire).

Known bugs of the authors' class code avoided: memory starts at 0 (not at the parameters) and is per client;
the difference is quantised once; the anchor is the θ *before* the round's update.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, NamedTuple, cast

import numpy as np

from ..models.contract import Model
from ..privacy.fixed_point import decode, encode_term, term_sums
from ..streams import ChainNoise
from ..tuning import budget
from ..tuning.laplace import PRECONDITIONERS, initial_points, laplace_for
from ..tuning.report import TuningReport
from .base import Algorithm, Plan, RoundInfo, ShardPool, minibatch_grads
from .checks import check_bool, check_choice, check_init, check_int, check_positive, check_unit

VARIANTS = ("sharp", "star", "pp")
BITS_FORMULA = "32 + d*(1 + log2(s + 1)) per vector (32*d uncompressed), uplink only"


# --- quantiser ---------------------------------------------------------------------------------------------


def quantize(v: np.ndarray, s: int | None, u: np.ndarray | None) -> np.ndarray:
    """QSGD stochastic quantiser with s levels applied to every row of v (K, d), uniforms u (K, d).

    C(v)_j = ‖v‖ sign(v_j)(l_j + 1[u_j < r_j − l_j])/s with r_j = s|v_j|/‖v‖, l_j = ⌊r_j⌋; C(0) = 0;
    s None or 0: identity (v returned unchanged).
    """
    v = np.asarray(v, dtype=float)
    if s is None or s == 0:  # no compression
        return v
    if u is None:
        raise ValueError("u: the quantiser needs uniforms when s > 0")
    u = np.asarray(u, dtype=float)
    if u.shape != v.shape:
        raise ValueError(f"u must have the shape of v {v.shape}, got {u.shape}")
    norm = np.linalg.norm(v, axis=-1, keepdims=True)
    safe = np.where(norm > 0, norm, 1.0)
    r = s * np.abs(v) / safe
    lev = np.floor(r)
    lev = lev + (u < (r - lev))
    return np.where(norm > 0, safe * np.sign(v) * lev / s, 0.0)


def omega(d: int, s: int | None) -> float:
    """Variance factor of the quantiser: min(d/s², √d/s); 0 without compression."""
    if s is None or s == 0:  # no compression
        return 0.0
    return min(d / s**2, math.sqrt(d) / s)


def bits(d: int, s: int | None, fixed_point: bool = False) -> float:
    """Bits per compressed d-vector, simple bound 32 + d(1 + log2(s + 1)); 32·d (float32) without compression; with
    fixed-point sums what the term is, 64 a coordinate and 64 for the client's flag (no compression on the wire)."""
    if fixed_point:
        return 64.0 * (d + 1)
    if s is None or s == 0:  # no compression
        return 32.0 * d
    return 32.0 + d * (1.0 + math.log2(s + 1))


def quantizer_uniforms(noise: ChainNoise, d: int) -> np.ndarray:
    """(K, d) uniforms for `quantize`: the next d draws of every chain's stream, noise.uniform(d).T."""
    return noise.uniform(d).T


# --- messages and states -----------------------------------------------------------------------------------


class QLSDMessage(NamedTuple):
    theta: np.ndarray  # (K, d): where the clients evaluate their gradients
    reset: bool  # QLSD++: set ζ = θ (and recompute ∇U_i(ζ)) before this round's gradient


class QLSDReply(NamedTuple):
    """Client i's reply. With fixed-point sums (`WorkerParams.fixed_point`) q and sq_error are None: the client
    sends q_i as its fixed-point term of Σ_i q_i (`summed`, uint64 (K, d); masked by its site in a secure-sums run)
    and a flag of its own (`status`)."""

    q: np.ndarray | None  # (K, d) the sent vector: C(g_i − h_i) with memory, C(g_i) without
    bits: np.ndarray  # (K,) bits sent for it (a fixed-point term's: 64 a word, and the flag's)
    sq_error: np.ndarray | None  # (K,) ‖ĝ_i − g_i‖² = ‖q − (g_i − h_i)‖²
    summed: np.ndarray | None = None
    status: np.ndarray | None = None


class WorkerParams(NamedTuple):
    variant: str
    levels: int | None
    memory: bool
    alpha: float
    batch_size: int | None
    fixed_point: bool = False  # send q_i as a fixed-point term of Σ_i q_i (`QLSDReply.summed`)
    parties: int = 1  # b, the number of terms summed (the fixed point's range per term)


class QLSDWorkerState(NamedTuple):
    p: WorkerParams
    h: np.ndarray | None  # (K, d) memory, None until the first round
    zeta: np.ndarray | None  # (K, d) anchor (QLSD++)
    gzeta: np.ndarray | None  # (K, d) ∇U_i(ζ) in full (QLSD++)


class QLSDState(NamedTuple):
    theta: np.ndarray
    H: np.ndarray  # (K, d) Σ_i h_i kept by the server
    step: float
    prior: Any
    memory: bool
    alpha: float
    reset_every: int | None


def _batch_rows(n: int, batch_size: int | None, noise: ChainNoise) -> np.ndarray | None:
    """(B, K) row indices ⌊u·n⌋ (with replacement) from the chain streams, or None for the full gradient."""
    if batch_size is None or n <= batch_size:
        return None
    return np.minimum((noise.uniform(batch_size) * n).astype(int), n - 1)


# --- algorithm ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class QLSD(Algorithm):
    """QLSD#, QLSD* and QLSD++ (see the module doc).

    Parameters:
      variant: "sharp" (QLSD#), "star" (QLSD# + memory, the default) or "pp" (QLSD++).
      step_size γ: default the largest within `bias_budget` under the Laplace model in whitened coordinates,
        with the quantiser's added gradient variance (see raysampler.tuning.laws); 0.1/L as ULA under
        preconditioner=None (L = Σ_i M_i + max prior precision).
      levels s: quantisation levels ≥ 1, default 8 (the slides give no value); None: no compression.
      memory: None (default: False for "sharp", True for "star"/"pp") or an explicit True/False.
      alpha: memory rate in (0, 1], default 1/(ω + 1), ω = min(d/s², √d/s).
      batch_size: None (full local gradients) or B ≥ 1 rows per client and chain (with replacement).
      ref_every: QLSD++ anchor period (rounds), default 100.
      init: "map" (default), "zeros" or an array (d,)/(K, d).
      preconditioner ("auto", "laplace", "diag", None), bias_budget δ (0.05).
      fixed_point: each client sends q_i rounded to the nearest 2⁻³² as a term of Σ_i q_i (`privacy.fixed_point`),
        which the server adds exactly mod 2⁶⁴: what a secure-sums run does (with masks), without the masks.
    """

    variant: str = "star"
    step_size: float | None = None
    levels: int | None = 8
    memory: bool | None = None
    alpha: float | None = None
    batch_size: int | None = None
    ref_every: int = 100
    init: Any = "map"
    preconditioner: str | None = "auto"
    bias_budget: float = 0.05
    fixed_point: bool = False
    name: str = field(default="qlsd", init=False)

    secure_sums_refusal = None  # the server needs only Σ_i q_i: the clients' terms go masked
    release_names = MappingProxyType({"summed": "q", "status": "status"})
    masked_fields = ("summed",)

    def for_secure_sums(self) -> QLSD:
        """The clients send q_i in fixed point (their sites mask it): `fixed_point=True`."""
        return dataclasses.replace(self, fixed_point=True)

    def __post_init__(self) -> None:
        check_choice("variant", self.variant, VARIANTS)
        check_positive("step_size", self.step_size)
        check_int("levels", self.levels, 1, allow_none=True)
        if self.memory is not None and not isinstance(self.memory, bool):
            raise ValueError(f"memory must be None, True or False, got {self.memory!r}")
        if self.alpha is not None:
            check_unit("alpha", self.alpha, closed=True)
        check_int("batch_size", self.batch_size, 1, allow_none=True)
        check_int("ref_every", self.ref_every, 1)
        check_init(self.init)
        check_choice("preconditioner", self.preconditioner, PRECONDITIONERS)
        check_unit("bias_budget", self.bias_budget)
        check_bool("fixed_point", self.fixed_point)

    def _uses_memory(self) -> bool:
        return self.memory if self.memory is not None else self.variant in ("star", "pp")

    def prepare(self, model: Model, pool: ShardPool, *, chains: int, seed: int, noise: ChainNoise) -> Plan:
        b, d = pool.num_shards, model.dim
        lap = laplace_for(model, pool, seed=seed, preconditioner=self.preconditioner, init=self.init)
        s = None if self.levels is None or self.levels == 0 else int(self.levels)
        om = omega(d, s)
        alpha = float(self.alpha) if self.alpha is not None else 1.0 / (om + 1.0)
        memory = self._uses_memory()
        step, L, bias = budget.gradient_step(
            self.step_size,
            self.preconditioner is not None,
            model,
            pool,
            lambda: budget.qlsd_step(lap, om, memory, self.bias_budget),
        )
        wmodel = lap.adopt(model, pool)
        theta0 = initial_points(self.init, lap, chains, d, noise)
        batch = None if self.batch_size is None else int(self.batch_size)
        wp = WorkerParams(self.variant, s, memory, alpha, batch, self.fixed_point, b)
        state = QLSDState(
            theta0,
            np.zeros_like(theta0),
            step,
            wmodel.prior(),
            memory,
            alpha,
            int(self.ref_every) if self.variant == "pp" else None,
        )
        report = TuningReport(
            lap.precond.kind,
            bias_budget=None if bias is None else self.bias_budget,
            bias=bias,
            L=L,
            step_size=step,
            variant=self.variant,
            levels=s,
            omega=om,
            memory=memory,
            alpha=alpha,
            batch_size=self.batch_size,
            ref_every=state.reset_every,
            bits_per_vector=bits(d, s, self.fixed_point),
            bits_per_round=b * bits(d, s, self.fixed_point),
            bits_formula=BITS_FORMULA,
        )
        return Plan.one_step(state, [wp] * b, report, lap, wmodel)

    def worker_init(self, payload: WorkerParams, model: Model, X: np.ndarray, y: np.ndarray) -> QLSDWorkerState:
        return QLSDWorkerState(payload, None, None, None)

    def worker_step(
        self,
        state: QLSDWorkerState,
        message: QLSDMessage,
        model: Model,
        X: np.ndarray,
        y: np.ndarray,
        noise: ChainNoise,
    ) -> tuple[QLSDWorkerState, QLSDReply]:
        p, theta = state.p, message.theta
        K, d = theta.shape
        zeta, gzeta = state.zeta, state.gzeta
        idx = _batch_rows(np.asarray(y).shape[0], p.batch_size, noise)
        if p.variant == "pp" and idx is not None and (message.reset or zeta is None):
            # anchor = θ before this round's update; with full gradients the control variate cancels exactly
            zeta, gzeta = theta.copy(), model.grad(X, y, theta)
        if idx is None:
            g = model.grad(X, y, theta)
        elif p.variant == "pp":
            assert zeta is not None and gzeta is not None  # anchored above
            g_theta, g_zeta = minibatch_grads(model, X, y, idx, theta, zeta)
            g = g_theta - g_zeta + gzeta
        else:
            g = minibatch_grads(model, X, y, idx, theta)[0]
        h = state.h if state.h is not None else np.zeros((K, d))
        delta = g - h if p.memory else g
        q = quantize(delta, p.levels, quantizer_uniforms(noise, d) if p.levels is not None else None)
        term = encode_term((q,), p.parties) if p.fixed_point else None
        if term is not None:  # the memory follows the q_i the server adds: rounded as sent
            q = decode(term.words)
        if p.memory:
            h = h + p.alpha * q
        n_bits = np.full(K, bits(d, p.levels, p.fixed_point))
        if term is not None:
            return QLSDWorkerState(p, h, zeta, gzeta), QLSDReply(None, n_bits, None, term.words, term.status)
        reply = QLSDReply(q, n_bits, np.sum((q - delta) ** 2, axis=1))
        return QLSDWorkerState(p, h, zeta, gzeta), reply

    def messages(self, state: QLSDState, local_steps: np.ndarray, info: RoundInfo) -> list[QLSDMessage]:
        reset = state.reset_every is not None and info.t % state.reset_every == 0
        return [QLSDMessage(state.theta, reset)] * len(local_steps)

    def coordinator_step(
        self, state: QLSDState, replies: list[QLSDReply], noise: ChainNoise, info: RoundInfo
    ) -> tuple[QLSDState, np.ndarray]:
        sums = term_sums(replies, (state.theta.shape[1],))  # fixed-point terms, masked or not: only their total
        qsum = sums[0] if sums is not None else sum(cast(np.ndarray, r.q) for r in replies)
        ghat = qsum + state.H if state.memory else qsum
        g = ghat + state.prior.grad(state.theta)
        theta = state.theta - state.step * g + math.sqrt(2.0 * state.step) * noise.normal(1)[0]
        H = state.H + state.alpha * qsum if state.memory else state.H
        return state._replace(theta=theta, H=H), theta

    def reply_stats(self, replies: list[QLSDReply]) -> dict[str, np.ndarray]:
        stats = {"bits": np.sum([r.bits for r in replies], axis=0)}
        if replies[0].sq_error is not None:
            stats["sq_error"] = np.sum([r.sq_error for r in replies if r.sq_error is not None], axis=0)
        return stats
