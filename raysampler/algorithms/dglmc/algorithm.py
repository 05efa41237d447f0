"""DG-LMC: Distributed Gibbs with Langevin Monte Carlo ([DG-LMC] Plassier et al., ICML 2021, Algorithm 1), with
turn-key tuning.

Augmented target Π_ρ(θ, z_1..z_b) ∝ exp(−Σ_i [U_i(z_i) + ‖z_i − θ‖²/(2ρ_i)]) (eq. 2, A_i = I), sampled by Gibbs: each
worker moves z_i with N_i steps of its local kernel targeting Π_ρ(z_i | θ) (eq. 4; `kernels/`); the coordinator draws
θ | z exactly from N(μ, Q⁻¹) (eq. 5; `coordinator.py`) with Q factored once. Tuning is `tuning.py`.

Everything runs in whitened coordinates φ with θ = θ* + Lφ (Laplace preconditioner; identity for the paper's plain
rules), so the coupling ‖z_i − φ‖²/(2ρ_i) is measured in posterior units.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, cast

import numpy as np

from ...errors import ArgumentError
from ...models.contract import Model, ShardStack
from ...privacy.dp import DP, as_dp
from ...privacy.fixed_point import encode
from ...streams import ChainNoise, StackedNoise
from ...tuning.laplace import PRECONDITIONERS
from ..base import Adaptation, Algorithm, Plan, RoundInfo, ShardPool
from ..checks import check_choice, check_init, check_per_shard, check_unit
from . import coordinator, private, tuning
from .kernels import KERNELS, LOCAL_KERNELS, BatchKernel, LocalKernel, OneShard, ShardKernel
from .recentre import shard_accepts
from .report import reply, report_steps, start_report
from .types import (
    CoordinatorState,
    FixedSum,
    LocalRound,
    Message,
    Reply,
    RoundMessage,
    WorkerPayload,
    WorkerState,
)


@dataclass(frozen=True)
class DGLMC(Algorithm):
    """DG-LMC with Laplace preconditioning, exact (MALA) local steps and ρ set from a stated bias budget.

    Parameters (all optional; the defaults are turn-key):
      preconditioner: "auto" (dense Laplace for d ≤ 300, diagonal above), "laplace", "diag", or None for the
        paper's plain rules (ρ_i = 1/M_i, γ_i = 0.25ρ_i/(ρ_iM_i + 1), N_avg from sec. 3.2.2, LMC steps, bound M_i).
      local_kernel: "laplace_mh" (MH on Π_ρ(z_i | θ) proposing from the worker's Laplace approximation of it,
        re-centred at each round's θ by one gradient: exact, no γ-bias; the default), "mala" (MALA within Gibbs,
        step size adapted during burn-in) or "lmc" (eq. 4; the default under the paper's rules).
      bias_budget: δ: ρ is the largest value for which π_ρ, under the workers' Laplace (quadratic) models of U_i,
        keeps every coordinate's mean within δ posterior sd and its sd within a factor 1 + δ of the posterior's
        (`tuning.budget.dglmc_rho`).
      rho, gamma: override ρ_i, γ_i (scalar or one per shard, in the sampler's coordinates).
      n_local: fix N_i (scalar or one per shard); fixing it turns speed balancing off.
      gamma_fraction: γ_i = gamma_fraction·ρ_i/(ρ_iM_i + 1) for LMC (paper: 0.1–0.5).
      curvature: "map" (M_i = λ_max of the whitened local Hessian at the MAP) or "bound" (the model's M_i).
      init: "map" (chains start at the MAP plus a Laplace draw), "zeros", or an array (d,) or (K, d).
      target_accept: MALA acceptance target during burn-in.
      overrelax: α ∈ (−1, 1) for over-relaxed Gibbs updates (Adler 1981; Neal 1998): θ' = μ + α(θ − μ) + √(1 − α²)ξ
        for θ | z, and the same move as the Laplace proposal for z_i | θ (kernel "laplace_mh"). Each update still
        leaves its conditional of Π_ρ invariant, so the chain's law is unchanged; only its autocorrelation falls.
        "auto" (default): the α minimising the predicted integrated autocorrelation time of θ and θ² under the
        workers' Laplace models (`tuning.overrelax`) with kernel "laplace_mh", 0 otherwise. 0 is the
        paper's plain Gibbs sampler. Needs an exact local kernel ("laplace_mh" or "mala").
      recentre: kernel "laplace_mh" only: re-centre each round's proposal at θ by the gradient of U_i's remainder
        beyond its Laplace model (one gradient per round and shard; `kernels/laplace_mh.py`). "auto" (default): the
        shards whose plain proposal was accepted less than `RECENTRE_BELOW` of the time during burn-in, from the
        end of burn-in on; True: always; False: never.
      fixed_point: each worker sends its term z_i/ρ_i of θ | z's mean rounded to the nearest 2⁻³²
        (`privacy.fixed_point`) instead of z_i, and the coordinator adds the terms exactly mod 2⁶⁴: what a
        secure-sums run (`secure_sums=True`, which sets it) sends before its sites' masks, so this plain run's
        draws are bit-identical to the secure run's with the same seed.
      privacy: the DP mode (`rs.DP(epsilon, delta, clip)`, `sample(privacy=...)`): the local kernel "lmc" with every
        row's gradient clipped at C, a private set-up reading only public quantities (`private.py`), and Rényi-DP
        accounting per site that stops the run before any release would exceed the budget (docs/privacy.md).
    """

    preconditioner: str | None = "auto"
    local_kernel: str | None = None
    bias_budget: float = 0.05
    rho: Any = None
    gamma: Any = None
    n_local: Any = None
    gamma_fraction: float = 0.25
    curvature: str | None = None
    init: Any = "map"
    target_accept: float = 0.574
    overrelax: Any = "auto"
    recentre: Any = "auto"
    fixed_point: bool = False
    privacy: DP | None = None
    name: str = field(default="dglmc", init=False)
    supports_local_params = True  # group effects: worker state (z_i, η_i), coupling on z_i only (`tuning.py`)

    def __post_init__(self) -> None:
        check_choice("preconditioner", self.preconditioner, PRECONDITIONERS)
        if self.local_kernel is not None:
            check_choice("local_kernel", self.local_kernel, LOCAL_KERNELS)
        check_unit("bias_budget", self.bias_budget)
        check_unit("gamma_fraction", self.gamma_fraction, closed=True)
        check_unit("target_accept", self.target_accept)
        if self.curvature is not None:
            check_choice("curvature", self.curvature, ("map", "bound"))
        check_per_shard("rho", self.rho)
        check_per_shard("gamma", self.gamma)
        if is_schedule(self.n_local):
            object.__setattr__(self, "n_local", normalise_schedule(self.n_local))
        else:
            check_per_shard("n_local", self.n_local, integer=True)
        check_init(self.init)
        if not (isinstance(self.overrelax, str) and self.overrelax == "auto"):
            check_overrelax(self.overrelax)
        if not (self.recentre is True or self.recentre is False or self.recentre == "auto"):
            raise ArgumentError(
                ("algorithm", "recentre"), f"recentre must be true, false or 'auto', got {self.recentre!r}"
            )
        self.check_recentre(self.local_kernel or ("lmc" if self.preconditioner is None else None))
        object.__setattr__(self, "privacy", as_dp(self.privacy))
        if self.privacy is not None:
            private.check_private(self)

    @property
    def private_noise(self) -> bool:
        """The DP mode's Langevin noise is what makes its releases private: it comes from the sites' keyed streams."""
        return self.privacy is not None

    def check_recentre(self, kernel: LocalKernel | str | None) -> None:
        """recentre=True asks for the 'laplace_mh' kernel's re-centred proposal: refuse it with another kernel (None:
        not known yet, checked again when tuning resolves it)."""
        if kernel is None or self.recentre is not True:
            return
        k = KERNELS[kernel] if isinstance(kernel, str) else kernel
        if not k.recentres:
            raise ArgumentError(
                ("algorithm", "recentre"),
                f"recentre re-centres the 'laplace_mh' local kernel's proposal; this run's kernel is {k.name!r}",
            )

    secure_sums_refusal = None  # θ | z needs only s = b0 + Σ_i z_i/ρ_i: the sites' terms go masked
    release_names = MappingProxyType(
        {
            "z": "z",
            "summed": "z/rho",
            "accept": "local_accept",
            "local": "local_params",
            "given": "local_params_given_theta",
            "status": "status",
        }
    )
    masked_fields = ("summed",)

    def for_secure_sums(self) -> DGLMC:
        """The sites send z_i/ρ_i in fixed point (their hosts mask it): `fixed_point=True`."""
        return dataclasses.replace(self, fixed_point=True)

    def prepare(self, model: Model, pool: ShardPool, *, chains: int, seed: int, noise: ChainNoise) -> Plan:
        if self.privacy is not None:
            return private.prepare(self, model, pool, chains=chains, seed=seed, noise=noise)
        return tuning.prepare(self, model, pool, chains=chains, seed=seed, noise=noise)

    # --- worker ---------------------------------------------------------------------------------

    def worker_init(self, payload: WorkerPayload, model: Model, X: np.ndarray, y: np.ndarray) -> WorkerState:
        kernel = KERNELS[payload.kernel]
        chains = kernel.init(payload, model, X, y)  # type: ignore[attr-defined]  # each kind defines its init
        fixed = FixedSum(np.array([1.0 / payload.rho]), payload.parties) if payload.fixed_point else None
        return WorkerState(kernel.name, chains, start_report(payload, int(model.dim)), fixed)

    def worker_step(
        self, state: WorkerState, message: Message, model: Model, X: np.ndarray, y: np.ndarray, noise: ChainNoise
    ) -> tuple[WorkerState, Reply]:
        """One shard's round: its kernel's N_i steps (a `BatchKernel` on a batch of one), then with local parameters
        the report chain's."""
        kernel = KERNELS[state.kernel]
        rnd = LocalRound(message.phi, message.n_steps, message.warmup, message.recentre)
        report = state.report
        if kernel.shard_axis:
            batch = cast(BatchKernel, kernel)
            chains, z, accept = batch.step(state.chains, rnd, model, ShardStack.of(X[None], y[None]), OneShard(noise))
            z, accept = z[0], (accept[0] if accept is not None else None)
            clipped = getattr(chains, "clipped", None)
        else:
            chains, report = cast(ShardKernel, kernel).step(state.chains, report, rnd, model, X, y, noise)
            z, accept, clipped = chains.z, (chains.accept if kernel.exact else None), None
        if report is not None and not kernel.moves_report:
            report = report_steps(report, rnd, model, X, y, noise)
        out = reply(z, accept, report, message.phi, model, X, y)
        if clipped is not None:
            out = out._replace(clipped=clipped)
        if state.fixed is not None:
            out = fixed_reply(out, state.fixed, 1)
        return WorkerState(kernel.name, chains, report, state.fixed), out

    def step_stacked(
        self,
        stacked: WorkerState,
        message: RoundMessage,
        shards: np.ndarray,
        model: Model,
        data: ShardStack,
        noise: StackedNoise,
    ) -> tuple[WorkerState, Reply]:
        """The round of B shards with the same N_i (and shapes but for their rows) at once; the reply stacked."""
        kernel = cast(BatchKernel, KERNELS[stacked.kernel])  # only a kernel that `batches` sends one message
        j = shards[0]
        recentre = bool(message.recentre[j]) if message.recentre is not None else False
        rnd = LocalRound(message.phi, int(message.n_steps[j]), message.warmup, recentre, message.chains)
        chains, z, accept = kernel.step(stacked.chains, rnd, model, data, noise)
        out = Reply(z, accept, clipped=getattr(chains, "clipped", None))
        if stacked.fixed is not None:
            out = fixed_reply(out, stacked.fixed, len(shards))
        return stacked._replace(chains=chains), out

    # --- coordinator ----------------------------------------------------------------------------

    def messages(self, state: CoordinatorState, local_steps: np.ndarray, info: RoundInfo) -> list[Message]:
        return coordinator.messages(state, local_steps, info)

    def round_message(
        self, state: CoordinatorState, local_steps: np.ndarray, info: RoundInfo
    ) -> RoundMessage | list[Message]:
        """One `RoundMessage` for every shard when the kernel steps shards as one batch, else one per shard."""
        if not state.consts.stacked:
            return self.messages(state, local_steps, info)
        return coordinator.round_message(state, local_steps, info)

    def splits_chains(self, state: CoordinatorState) -> bool:
        """The batched kernels' chains are independent (no adaptation), so a round may run one chain group at a
        time."""
        return state.consts.stacked

    def coordinator_step(
        self, state: CoordinatorState, replies: Reply | list[Reply], noise: ChainNoise, info: RoundInfo
    ) -> tuple[CoordinatorState, np.ndarray]:
        return coordinator.coordinator_step(state, replies, noise, info)

    def local_draws(self, replies: Reply | list[Reply]) -> tuple[np.ndarray, np.ndarray] | None:
        """(θ in coordinates φ (K, d), the shards' local parameters drawn given it, reported scale, in shard order
        (K, Σ l_i)): the round's θ from the message, with each shard's `ReportChain` draw."""
        if isinstance(replies, Reply) or replies[0].local is None or replies[0].given is None:
            return None
        return replies[0].given, np.concatenate([r.local for r in replies if r.local is not None], axis=1)

    def clipped_counts(self, replies: Reply | list[Reply]) -> np.ndarray | None:
        """The DP mode: each shard's clipped per-example gradients of the round (b,), from its reply."""
        if isinstance(replies, Reply):
            return replies.clipped
        if not replies or replies[0].clipped is None:
            return None
        return np.concatenate([np.atleast_1d(r.clipped) for r in replies if r.clipped is not None])

    def reply_stats(self, replies: Reply | list[Reply]) -> dict[str, np.ndarray]:
        accept = shard_accepts(replies)
        return {} if accept is None else {"local_accept": np.mean(accept, axis=0)}

    def adaptation(self, state: CoordinatorState, stats: dict[str, np.ndarray]) -> Adaptation | None:
        """Kernel "mala": the round's local acceptance (mean over shards and chains, from the replies: a pipelined
        round's state has moved on), which each shard's dual averaging steers towards `target_accept`."""
        target = state.consts.adapts_to
        if target is None or "local_accept" not in stats:
            return None
        return Adaptation(float(np.mean(stats["local_accept"])), target)


def fixed_reply(out: Reply, fixed: FixedSum, rows: int) -> Reply:
    """A reply (one shard's, or `rows` shards' stacked) with z_i replaced by its term z_i/ρ_i in fixed point and the
    site's own flag of a term that was non-finite or out of range (`Reply.status`)."""
    assert out.z is not None
    z = out.z if rows > 1 or out.z.ndim == 3 else out.z[None]
    enc = encode(z * fixed.inv_rho.reshape(-1, 1, 1), fixed.parties, rows=z.shape[0])
    status = np.where(enc.ok, 0.0, np.nan)[:, None]
    if out.z.ndim == 2:
        return out._replace(z=None, summed=enc.words[0], status=status[0])
    return out._replace(z=None, summed=enc.words, status=status)


def is_schedule(value: Any) -> bool:
    """Whether `value` looks like a recorded N_i schedule: a sequence of (round, per-shard counts) pairs."""
    if not isinstance(value, (list, tuple)) or not value:
        return False
    first = value[0]
    return isinstance(first, (list, tuple)) and len(first) == 2 and isinstance(first[1], (list, tuple, np.ndarray))


def normalise_schedule(value: Any) -> tuple[tuple[int, tuple[int, ...]], ...]:
    """A schedule as ((round, (N_1, …, N_b)), …), rounds strictly increasing from 0, counts positive integers."""
    bad = ValueError(
        "n_local as a schedule must be (round, [N_1, ..., N_b]) pairs, rounds strictly increasing "
        f"from 0 and positive integer counts (as result.run_stats.N_schedule), got {value!r}"
    )
    out = []
    for entry in value:
        try:
            r, counts = entry
            arr = np.asarray(counts, dtype=float)
        except (TypeError, ValueError):
            raise bad from None
        if isinstance(r, bool) or int(r) != r or arr.ndim != 1 or np.any(arr < 1) or np.any(arr != np.round(arr)):
            raise bad
        out.append((int(r), tuple(int(v) for v in arr)))
    rounds = [r for r, _ in out]
    if rounds[0] != 0 or any(b <= a for a, b in zip(rounds, rounds[1:])) or len({len(n) for _, n in out}) != 1:
        raise bad
    return tuple(out)


def check_overrelax(value: Any) -> None:
    """overrelax must be "auto" or a real number strictly between −1 and 1."""
    ok = isinstance(value, (int, float, np.floating, np.integer)) and not isinstance(value, bool)
    if not ok or not -1.0 < float(value) < 1.0:
        raise ValueError(f"overrelax must be 'auto' or a number strictly between -1 and 1, got {value!r}")
