"""The shared tuning layer every gradient-based algorithm starts from (docs/algorithms.md, "The shared tuning layer").

  shards     the `ShardPool` an algorithm's `prepare` may call and the per-shard functions it maps (run where the
             data lives)
  curvature  curvature from the workers: λ_max at the MAP, the models' bounds M_i, L = Σ_i M_i + prior
  laplace    the MAP, the Laplace preconditioner θ = θ* + Lφ and the shards' quadratic models: `laplace_step` →
             `Laplace`, the chains' starting points
  laws       exact stationary laws of the unadjusted samplers under the Laplace model (`stationary`, DG-LMC's π_ρ)
  budget     the bias budget: predicted bias against the Laplace posterior, the one bisection for a step or ρ
  overrelax  DG-LMC's over-relaxation α from the Laplace models
  report     `TuningReport`, what tuning decided (`Plan.report`, the run's `plan`)

Nothing here imports `raysampler.algorithms`: the algorithms depend on the tuning layer, not the other way round.
"""

from __future__ import annotations

from ..extras import engine as _requires_engine  # noqa: F401 (the import checks that the engine extra is installed)
from .laplace import Laplace, find_map, laplace_preconditioner, laplace_step, total_hessian
from .report import BiasPrediction, TuningReport

__all__ = [
    "BiasPrediction",
    "Laplace",
    "TuningReport",
    "find_map",
    "laplace_preconditioner",
    "laplace_step",
    "total_hessian",
]
