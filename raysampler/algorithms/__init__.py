"""Registry of sampling algorithms by name."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from ..extras import engine as _requires_engine  # noqa: F401 (the import checks that the engine extra is installed)
from .base import Algorithm, Plan, RoundInfo, ShardPool
from .dadmm import ADMM, DADMMS
from .decentralized import DSGHMC, DSGLD, DULA
from .dglmc import DGLMC
from .dmala import DMALA
from .fald import FALD
from .gradient import MALA, ULA
from .qlsd import QLSD

ALGORITHMS: dict[str, type[Algorithm]] = {
    "ula": ULA,
    "mala": MALA,
    "dsgld": DSGLD,
    "dsghmc": DSGHMC,
    "dula": DULA,
    "dglmc": DGLMC,
    "dadmms": DADMMS,
    "admm": ADMM,
    "dmala": DMALA,
    "fald": FALD,
    "qlsd": QLSD,
}


def get_algorithm(name: str, **params: Any) -> Algorithm:
    """Build algorithm `name` with `params`; unknown names or parameters raise ValueError naming them."""
    if not isinstance(name, str) or name not in ALGORITHMS:
        raise ValueError(f"algorithm must be one of {sorted(ALGORITHMS)}, got {name!r}")
    cls = ALGORITHMS[name]
    valid = {f.name for f in fields(cls) if f.init}  # type: ignore[arg-type]  # every algorithm is a dataclass
    unknown = sorted(set(params) - valid)
    if unknown:
        raise ValueError(f"unknown parameter(s) {unknown} for algorithm {name!r}; valid: {sorted(valid)}")
    return cls(**params)


__all__ = [
    "ADMM",
    "ALGORITHMS",
    "DADMMS",
    "DGLMC",
    "DMALA",
    "DSGHMC",
    "DSGLD",
    "DULA",
    "FALD",
    "MALA",
    "QLSD",
    "ULA",
    "Algorithm",
    "Plan",
    "RoundInfo",
    "ShardPool",
    "get_algorithm",
]
