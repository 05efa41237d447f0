"""The outcome of a sampling run: draws (chains, draws, d), diagnostics through ArviZ, and runtime statistics."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class Result:
    """Posterior draws of θ with per-draw sample stats and the run's statistics.

    draws: (chains, draws, d) after burn-in and thinning. sample_stats: name → (chains, draws).
    stats: per-round wall time, per-worker compute/idle seconds and idle fraction, N_i, τ_i, ρ_i, γ_i, …
    """

    draws: np.ndarray
    param_names: list[str]
    stats: dict[str, Any] = field(default_factory=dict)
    sample_stats: dict[str, np.ndarray] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def chains(self) -> int:
        return self.draws.shape[0]

    @property
    def num_draws(self) -> int:
        return self.draws.shape[1]

    def to_arviz(self):
        """An xarray DataTree with a `posterior` group (variable `theta`, dim `param`) and `sample_stats`."""
        import arviz_base as azb

        groups: dict[str, dict[str, np.ndarray]] = {"posterior": {"theta": self.draws}}
        if self.sample_stats:
            groups["sample_stats"] = dict(self.sample_stats)
        attrs = {"algorithm": str(self.info.get("algorithm", "")), "executor": str(self.info.get("executor", ""))}
        return azb.from_dict(groups, dims={"theta": ["param"]}, coords={"param": list(self.param_names)},
                             attrs={"posterior": attrs})

    def summary(self, ci_prob: float = 0.94, round_to: int | str | None = "none"):
        """Table per coordinate: mean, sd, HDI, ess_bulk, ess_tail, r_hat, mcse (arviz-stats `summary`)."""
        import arviz_stats as azs

        if self.num_draws < 4:
            raise ValueError(f"summary needs at least 4 draws per chain, this result has {self.num_draws}")
        return azs.summary(self.to_arviz(), var_names=["theta"], ci_prob=ci_prob, ci_kind="hdi", round_to=round_to)

    def ess(self, method: str = "bulk") -> np.ndarray:
        """Effective sample size per coordinate (arviz-stats), shape (d,)."""
        import arviz_stats as azs

        return np.asarray(azs.ess(self.to_arviz(), var_names=["theta"], method=method)["theta"].values)

    def __repr__(self) -> str:
        return (f"Result(chains={self.chains}, draws={self.num_draws}, d={self.draws.shape[2]}, "
                f"algorithm={self.info.get('algorithm')!r}, executor={self.info.get('executor')!r})")
