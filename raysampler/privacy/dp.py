"""The differential-privacy mode's user-facing settings: `DP(epsilon, delta, clip)` (`rs.DP`, the REST body's
`privacy`, the CLI's --dp-* flags), checked once when made. docs/privacy.md, "Differential privacy", states the
guarantee: (ε, δ)-DP per site under add/remove-one-row neighbours, over every release of the run."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any

from ..errors import ArgumentError

#: how a row's gradient is brought within the clip C (`DP.clip_rule`)
CLIP_RULES = ("gradient", "features")


@dataclass(frozen=True)
class DP:
    """(ε, δ) per site over the whole run, and the per-example gradient clip norm C.

    epsilon: the budget ε > 0; the run stops (stop reason `privacy_budget`) before a round whose release would take
      any site's ε(δ) above it.
    delta: δ ∈ (0, 1), the conversion's failure probability (typically well below 1/rows).
    clip: C > 0: every row's gradient ∇ℓ_r(z) is scaled to L2 norm at most C in the local Langevin steps, so that one
      row changes a step's drift by at most γC (the sensitivity). Clipping changes the target where it bites: the
      clip rate per site is reported (`RunStats.privacy`).
    clip_rule: how a row's gradient is brought within C. "gradient": clip(g_r, C) = g_r·min(1, C/‖g_r‖) at every
      step (any model with per-row gradients); the field it leaves is not a gradient, and its stationary law leans
      away from the posterior where the clip bites. "features" (logistic regression): g_r·min(1, C/‖x_r‖), whose
      norm is at most C because |σ(η) − y| ≤ 1: the drift is then the gradient of the weighted likelihood
      Σ_r w_r ℓ_r with weights set by each row's features alone, a correctly specified model's score stays unbiased
      at the truth, and the target is that weighted posterior (`privacy.clipping`).
    """

    epsilon: float = 1.0
    delta: float = 1e-5
    clip: float = 1.0
    clip_rule: str = "gradient"

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", _positive("epsilon", self.epsilon))
        delta = _positive("delta", self.delta)
        if delta >= 1.0:
            raise ArgumentError(("privacy", "delta"), f"privacy.delta must be in (0, 1), got {self.delta!r}")
        object.__setattr__(self, "delta", delta)
        object.__setattr__(self, "clip", _positive("clip", self.clip))
        if self.clip_rule not in CLIP_RULES:
            raise ArgumentError(
                ("privacy", "clip_rule"),
                f"privacy.clip_rule must be one of {', '.join(map(repr, CLIP_RULES))}, got {self.clip_rule!r}",
            )


def as_dp(value: Any) -> DP | None:
    """`privacy=` as a `DP` (a DP, a mapping with its fields, or None), else ArgumentError naming `privacy`."""
    if value is None or isinstance(value, DP):
        return value
    if isinstance(value, dict):
        unknown = sorted(set(value) - {"epsilon", "delta", "clip", "clip_rule"})
        if unknown:
            raise ArgumentError(
                ("privacy", unknown[0]), f"privacy has no field {unknown[0]!r} (epsilon, delta, clip, clip_rule)"
            )
        return DP(**value)
    raise ArgumentError(("privacy",), f"privacy must be rs.DP(epsilon=..., delta=..., clip=...) or None, got {value!r}")


def with_privacy(algorithm: str, privacy: Any, params: dict[str, Any]) -> dict[str, Any]:
    """An algorithm's parameters with `privacy` among them (`sample(privacy=)`, the REST body's `privacy`): the DP
    mode is DG-LMC's, so any other algorithm is an ArgumentError naming `privacy` and the algorithm."""
    if privacy is None:
        return params
    if algorithm != "dglmc":
        raise ArgumentError(
            ("privacy",), f"privacy= (the DP mode) is available with algorithm 'dglmc' only, not {algorithm!r}"
        )
    return {**params, "privacy": privacy}


def _positive(name: str, value: Any) -> float:
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value) and float(value) > 0
    if not ok:
        raise ArgumentError(("privacy", name), f"privacy.{name} must be a positive finite number, got {value!r}")
    return float(value)
