"""DG-LMC's private set-up for the DP mode (`DGLMC.privacy`; docs/privacy.md, "Differential privacy").

The turn-key set-up reads the data (the MAP, the shards' Hessians for the Laplace preconditioner and for ρ, the
step-time calibration); none of that is accounted. In the DP mode it is replaced by one that reads only public
quantities: each shard's row count n_i (treated as public), the clip C and the prior. The sampler then runs in θ's
own coordinates (no preconditioner), from θ = 0 or the user's init (init="map" reads the data: it means zeros here),
with the local kernel "lmc" and fixed N_i (no balancing from step times), and

    M_i = n_i C²,  ρ_i = RHO_FRACTION / M_i,  γ_i = gamma_fraction · ρ_i / (ρ_i M_i + 1),
    N_i = ⌈ρ_i / (γ_i (ρ_i M_i + 1))⌉   ([DG-LMC] sec. 3.2.1–3.2.2 with M_i in place of the data's curvature).

M_i is a scale, not a bound: the local potential's curvature is n_i times a row's, and a row whose gradient changes
by about C per unit of θ (logistic regression on standardised features with C of the order of a row's gradient
norm) has curvature about C². User-given rho, gamma and n_local replace these (they are public by being given).
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from ...errors import ArgumentError
from ...models.contract import Model
from ...privacy.accountant import DPPlan
from ...privacy.clipping import check_clippable
from ...privacy.dp import DP
from ...reparam import with_prior_share
from ...streams import ChainNoise
from ...tuning.laplace import initial_points, laplace_step, starts_at_map
from ...tuning.report import TuningReport
from ...tuning.shards import shard_rows
from ..base import Plan, ShardPool
from ..checks import per_shard
from .kernels import KERNELS
from .tuning import Settings
from .types import CoordinatorState, WorkerPayload

#: ρ_i = RHO_FRACTION / M_i: the paper's ρ_i = 1/M_i (sec. 3.2.1) with the public scale M_i. The privacy cost is
#: the Langevin time Σγ, and the consensus relaxes at about the local curvature per unit of it whatever ρ, so a
#: smaller ρ buys less ρ-bias (π_ρ's variance exceeds the posterior's by ρ_i H_i per site, its mean unmoved for
#: shards alike) for more steps of compute, not for privacy; M_i overestimates H_i where C is a row's gradient norm
RHO_FRACTION = 1.0


class PrivateSettings(Settings, Protocol):
    """What the private set-up reads of `DGLMC`: its settings (`tuning.Settings`, one list of them) and the DP mode;
    a protocol, so that this module does not import the algorithm that calls it."""

    @property
    def privacy(self) -> DP | None: ...


def public_settings(
    rows: np.ndarray, clip: float, gamma_fraction: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(M_i, ρ_i, γ_i, N_i) per shard from the public row counts and the clip alone (the module's rules)."""
    M = np.maximum(np.asarray(rows, dtype=float), 1.0) * clip**2
    rho = RHO_FRACTION / M
    gamma = gamma_fraction * rho / (rho * M + 1.0)
    n_steps = np.full(len(M), int(np.ceil(np.mean(rho / (gamma * (rho * M + 1.0))))), dtype=int)
    return M, rho, gamma, n_steps


def check_private(alg: PrivateSettings) -> None:
    """Refuse settings that read the data in ways the accountant does not cover, naming `privacy`."""
    kernel = alg.local_kernel
    if kernel not in (None, "lmc"):
        raise ArgumentError(
            ("privacy",),
            f"privacy= runs the unadjusted Langevin local kernel 'lmc' (its steps are the accounted Gaussian "
            f"mechanism); local_kernel={kernel!r} is not accounted",
        )
    pre = alg.preconditioner
    if pre not in (None, "auto"):
        raise ArgumentError(
            ("privacy",),
            f"privacy= needs the private set-up, without a preconditioner (preconditioner={pre!r} reads the data's "
            "MAP and Hessians): leave it 'auto' or None",
        )
    if alg.curvature is not None:
        raise ArgumentError(("privacy",), "privacy= sets the curvature scale from public quantities: leave curvature")


def prepare(alg: PrivateSettings, model: Model, pool: ShardPool, *, chains: int, seed: int, noise: ChainNoise) -> Plan:
    """The DP mode's `Algorithm.prepare`: the private set-up (see the module) and the accountant's `DPPlan`."""
    dp = alg.privacy
    assert dp is not None  # the DP mode's set-up
    check_clippable(model, dp.clip_rule)
    if model.has_local_params():
        raise ArgumentError(("privacy",), "privacy= does not support models with group effects")
    b, d = pool.num_shards, model.dim
    rows = np.asarray(pool.map(shard_rows, [()] * b), dtype=float)
    M, rho, gamma, _ = public_settings(rows, dp.clip, alg.gamma_fraction)
    if alg.rho is not None:
        rho = per_shard(alg.rho, b, "rho")
        gamma = alg.gamma_fraction * rho / (rho * M + 1.0)
    if alg.gamma is not None:
        gamma = per_shard(alg.gamma, b, "gamma")
    n_local = alg.n_local
    if isinstance(n_local, tuple) and n_local and isinstance(n_local[0], tuple):
        raise ArgumentError(("privacy",), "privacy= fixes N_i: give n_local as a number or one per shard")
    if n_local is not None:
        n_steps = per_shard(n_local, b, "n_local").astype(int)
    else:
        n_steps = np.full(b, int(np.ceil(np.mean(rho / (gamma * (rho * M + 1.0))))), dtype=int)

    init = "zeros" if starts_at_map(alg.init) else alg.init
    lap = laplace_step(model, pool, seed=seed, preconditioner=None, need_map=False, quadratics=False)  # data-free
    phi0 = initial_points(init, lap, chains, d, noise)
    prior = model.prior()
    prior_P, prior_b = lap.precond.prior_in_phi(np.asarray(prior.gaussian.mean, dtype=float), prior.gaussian.precision)
    from .tuning import coordinator_consts  # tuning imports this module's caller

    consts = coordinator_consts(prior_P, prior_b, rho, 0.0, stacked=True, recentre=False)
    kernel = KERNELS["lmc"]
    payloads = [
        WorkerPayload(phi0, float(rho[i]), float(gamma[i]), kernel.name, 0.0, clip=dp.clip, clip_rule=dp.clip_rule)
        for i in range(b)
    ]
    worker_model = with_prior_share(model, 1.0 / b)
    if worker_model is not model:
        pool.bind(worker_model)
    report = TuningReport(
        "none", rho=rho, gamma=gamma, M=M, local_kernel=kernel.name, curvature="public", overrelax=0.0
    )
    plan = DPPlan.of(dp.epsilon, dp.delta, dp.clip, gamma, chains)
    return Plan(
        CoordinatorState(phi0, consts),
        payloads,
        n_steps,
        float(np.mean(n_steps)),
        False,
        report,
        model=worker_model,
        precond=lap.precond,
        privacy=plan,
    )
