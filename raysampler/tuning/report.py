"""What tuning decided, as one typed value: `TuningReport` (an algorithm's `Plan.report`, the run's `SetupInfo.plan`,
`Result.setup.plan`), and the predicted bias it carries (`BiasPrediction`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class BiasPrediction:
    """Predicted stationary bias against the Laplace posterior: max |Δmean|/sd and max |sd ratio − 1| over θ."""

    mean_shift_sd: float
    sd_error: float

    @property
    def worst(self) -> float:
        return max(self.mean_shift_sd, self.sd_error)


@dataclass(frozen=True)
class TuningReport:
    """An algorithm's tuned settings and their predicted bias. Every algorithm reports its `preconditioner`
    ("laplace", "diag" or "none"); the other fields are None where they do not apply to it.

    `bias` is the stationary bias predicted under the Laplace model for the tuned values (None where no bias budget
    chose them); `overrelax` is DG-LMC's over-relaxation α; `rho`, `gamma`, `M` are per-shard arrays for DG-LMC
    (`rho` a number for D-ADMMS); the graph samplers report their rule's constants under the same names as the rule
    (`step_size`, `friction`, `alpha0`…`delta2`, `noise`, `mixing_schedule`, …).
    """

    preconditioner: str
    bias_budget: float | None = None
    bias: BiasPrediction | None = None
    theta_map: np.ndarray | None = None
    # step sizes and curvature
    step_size: float | None = None
    initial_step_size: float | None = None
    target_accept: float | None = None
    adapt: bool | None = None
    L: float | None = None
    M: np.ndarray | None = None
    rho: np.ndarray | float | None = None
    gamma: np.ndarray | None = None
    # DG-LMC
    local_kernel: str | None = None
    curvature: str | None = None
    overrelax: float | None = None
    # FALD and QLSD
    variant: str | None = None
    batch_size: int | None = None
    lmc_step_of_average: float | None = None
    p_comm: float | None = None
    tau: float | None = None
    q: float | None = None
    levels: int | None = None
    omega: float | None = None
    memory: bool | None = None
    alpha: float | None = None
    ref_every: int | None = None
    bits_per_vector: float | None = None
    bits_per_round: float | None = None
    bits_formula: str | None = None
    # graph samplers
    topology: tuple[tuple[int, int], ...] | None = None
    W: np.ndarray | None = None
    max_degree: int | None = None
    friction: float | None = None
    alpha0: float | None = None
    beta0: float | None = None
    b1: float | None = None
    b2: float | None = None
    delta1: float | None = None
    delta2: float | None = None
    noise: str | None = None
    mh_burn_in: int | None = None
    mixing_schedule: tuple[tuple[int, int], ...] | None = None

    def as_dict(self) -> dict[str, Any]:
        """The report as flat keys (the run's `plan` over REST): one per field that applies, `bias` as
        `predicted_mean_shift_sd` and `predicted_sd_error`."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is None:
                continue
            if isinstance(value, BiasPrediction):
                out["predicted_mean_shift_sd"] = value.mean_shift_sd
                out["predicted_sd_error"] = value.sd_error
            else:
                out[f.name] = value
        return out
