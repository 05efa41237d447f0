"""Results as a multilevel-model user reads them (brms' `fixef`, `ranef`, `coef`, `prior_summary`).

A run's draws name the coefficients `beta[<column>]`, the group sds `sd_<group>[<effect>]` and the group effects
`r_<group>[<label>,<effect>]` (natural scale). From those:

- `fixef`: the coefficients' summary (Estimate, Est.Error and the central interval's quantiles);
- `ranef`: each grouping column's effects, per draw (chain, draw, <group>, <group>_effect) or summarised;
- `coef`: per group, every coefficient plus that group's effect where it has one (β_k + r_{g,k}), per draw or
  summarised: what a hospital's own intercept and slopes are;
- `varcorr`: per grouping column, its effects' sds and correlations summarised, and the residual sd (brms'
  `VarCorr`);
- `prior_summary`: the prior on every parameter, by brms' classes (b, sd, cor, sigma, phi).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import numpy as np

if TYPE_CHECKING:
    import pandas as pd
    import xarray as xr

    from .models.contract import ParamBlock

__all__ = ["Draws", "GroupVarCorr", "coef", "fixef", "prior_summary", "ranef", "varcorr"]


class Draws(Protocol):
    """What the summaries read of a run (a `Result`): its parameter layout and its draws on the natural scale."""

    @property
    def param_blocks(self) -> tuple[ParamBlock, ...]: ...

    @property
    def chains(self) -> int: ...

    @property
    def num_draws(self) -> int: ...

    def posterior(self) -> dict[str, np.ndarray]: ...


def _quantile_names(probs: tuple[float, float]) -> list[str]:
    return [f"Q{100 * p:g}" for p in probs]


def summarise(values: np.ndarray, labels: list[Any], probs: tuple[float, float]) -> pd.DataFrame:
    """Estimate (mean), Est.Error (sd) and two quantiles over the first two axes of values (chain, draw, k)."""
    import pandas as pd

    flat = values.reshape(-1, values.shape[-1])
    q = np.quantile(flat, probs, axis=0)
    data = {"Estimate": flat.mean(axis=0), "Est.Error": flat.std(axis=0, ddof=1)}
    data |= dict(zip(_quantile_names(probs), q))
    index = pd.MultiIndex.from_tuples(labels) if labels and isinstance(labels[0], tuple) else labels
    return pd.DataFrame(data, index=index)


def _block(result: Draws, name: str) -> Any:
    return next((b for b in result.param_blocks if b.name == name), None)


def check_probs(probs: Any) -> tuple[float, float]:
    from .errors import ArgumentError

    try:
        lo, hi = (float(p) for p in probs)
    except (TypeError, ValueError):
        raise ArgumentError(("probs",), f"probs must be two probabilities, got {probs!r}") from None
    if not 0.0 <= lo < hi <= 1.0:
        raise ArgumentError(("probs",), f"probs must be two increasing probabilities in [0, 1], got {probs!r}")
    return lo, hi


def fixef(result: Draws, probs: tuple[float, float] = (0.025, 0.975)) -> pd.DataFrame:
    """The coefficients (block `beta`): one row per column, Estimate, Est.Error, Q2.5, Q97.5."""
    b = _block(result, "beta")
    if b is None:
        raise ValueError("fixef: the model has no coefficients (no parameter block 'beta')")
    return summarise(
        result.posterior()["beta"].reshape(result.chains, result.num_draws, -1), b.coords(), check_probs(probs)
    )


def _factors(result: Draws) -> list[str]:
    return [b.name[2:] for b in result.param_blocks if b.name.startswith("r_") and b.inner_dim is not None]


def ranef(
    result: Draws, summary: bool = True, probs: tuple[float, float] = (0.025, 0.975)
) -> dict[str, pd.DataFrame] | dict[str, xr.DataArray]:
    """Each grouping column's effects r_<group>: per draw as a DataArray (chain, draw, <group>, <group>_effect), or
    (`summary`) a table indexed by (label, effect)."""
    import xarray as xr

    post = result.posterior()
    out: dict[str, Any] = {}
    for g in _factors(result):
        b = _block(result, f"r_{g}")
        values = post[f"r_{g}"]
        if summary:
            labels = [(lab, e) for lab in b.coord_values() for e in b.inner_labels]
            out[g] = summarise(values.reshape(result.chains, result.num_draws, -1), labels, check_probs(probs))
        else:
            out[g] = xr.DataArray(
                values,
                dims=("chain", "draw", g, f"{g}_effect"),
                coords={g: b.coord_values(), f"{g}_effect": list(b.inner_labels)},
                name=f"r_{g}",
            )
    if not out:
        raise ValueError("ranef: the model has no group effects")
    return out


def coef(
    result: Draws, summary: bool = True, probs: tuple[float, float] = (0.025, 0.975)
) -> dict[str, pd.DataFrame] | dict[str, xr.DataArray]:
    """Per grouping column, each group's coefficients: β_k + r_{g,k} where the group has an effect on k, else β_k;
    per draw a DataArray (chain, draw, <group>, coef), or (`summary`) a table indexed by (label, coefficient)."""
    import xarray as xr

    bblock = _block(result, "beta")
    if bblock is None:
        raise ValueError("coef: the model has no coefficients (no parameter block 'beta')")
    post = result.posterior()
    beta = post["beta"].reshape(result.chains, result.num_draws, -1)
    names = bblock.coords()
    out: dict[str, Any] = {}
    for g, r in ranef(result, summary=False).items():
        assert isinstance(r, xr.DataArray)
        labels = list(r.coords[g].values)
        values = np.repeat(beta[:, :, None, :], len(labels), axis=2).copy()
        for e in r.coords[f"{g}_effect"].values:
            if e not in names:
                raise ValueError(f"coef: the effect {e!r} of {g} has no coefficient of that name")
            values[:, :, :, names.index(e)] += r.sel({f"{g}_effect": e}).values
        if summary:
            rows = [(lab, c) for lab in labels for c in names]
            out[g] = summarise(values.reshape(result.chains, result.num_draws, -1), rows, check_probs(probs))
        else:
            out[g] = xr.DataArray(values, dims=("chain", "draw", g, "coef"), coords={g: labels, "coef": names})
    return out


class GroupVarCorr(NamedTuple):
    """One grouping column's part of `varcorr`: its effects' sds (one row per effect) and, for correlated effects,
    their correlations (one row per pair a < b, labelled "a,b"); None for a single or uncorrelated effect."""

    sd: pd.DataFrame
    cor: pd.DataFrame | None = None


def varcorr(result: Draws, probs: tuple[float, float] = (0.025, 0.975)) -> dict[str, GroupVarCorr]:
    """brms' `VarCorr`: per grouping column, the summaries (Estimate, Est.Error and the `probs` quantiles) of its
    effects' sds `sd_<group>` and correlations `cor_<group>`; and "residual__", the residual sd `sigma`, where the
    model has one."""
    checked = check_probs(probs)
    post = result.posterior()
    out: dict[str, GroupVarCorr] = {}

    def table(name: str, labels: list[Any]) -> pd.DataFrame:
        return summarise(post[name].reshape(result.chains, result.num_draws, -1), labels, checked)

    for b in result.param_blocks:
        if not b.name.startswith("sd_"):
            continue
        g = b.name[3:]
        sd_labels = list(b.labels) if b.labels is not None else b.coords()
        cor = _block(result, f"cor_{g}")
        out[g] = GroupVarCorr(table(b.name, sd_labels), None if cor is None else table(cor.name, cor.coords()))
    if not out:
        raise ValueError("varcorr: the model has no group effects (no parameter blocks 'sd_<group>')")
    sigma = _block(result, "sigma")
    if sigma is not None:
        out["residual__"] = GroupVarCorr(table("sigma", ["sigma"]))
    return out


def prior_summary(model: Any) -> pd.DataFrame:
    """The prior on every parameter of a built-in family's model (a formula's too): columns prior, class (b, sd,
    sigma, phi), coef and group, one row per prior (a coefficient prior with one value per coefficient: per
    coefficient)."""
    import pandas as pd

    inner = getattr(model, "model", None)
    if inner is not None and hasattr(model, "design"):  # a formula: its family's
        model = inner
    factors = tuple(getattr(model, "factors", ()))
    family = getattr(model, "family", model) if factors else model
    if not hasattr(family, "coef_prior"):
        raise ValueError(f"prior_summary knows the built-in families; {type(model).__name__} is not one")
    rows: list[dict[str, str]] = []
    cp = family.coef_prior
    labels = family.param_blocks()[0].coords()
    args = [v for v in vars(cp).values() if isinstance(v, tuple)]
    if args:  # one value per coefficient
        for j, lab in enumerate(labels):
            one = type(cp)(**{k: (v[j] if isinstance(v, tuple) else v) for k, v in vars(cp).items()})
            rows.append({"prior": repr(one), "class": "b", "coef": lab, "group": ""})
    else:
        rows.append({"prior": repr(cp), "class": "b", "coef": "", "group": ""})
    for attr, cls in (("sigma_prior", "sigma"), ("phi_prior", "phi")):
        spec = getattr(family, attr, None)
        if spec is not None and not (attr == "sigma_prior" and getattr(family, "noise_sd", None) is not None):
            rows.append({"prior": repr(spec), "class": cls, "coef": "", "group": ""})
    sigma_coef = getattr(family, "sigma_coef_prior", None)  # a distributional model's noise sd coefficients
    if sigma_coef is not None:
        rows.append({"prior": repr(sigma_coef), "class": "b_sigma", "coef": "", "group": ""})
    for ge in factors:
        rows.append({"prior": repr(ge.sd_prior), "class": "sd", "coef": "", "group": ge.group})
    for ge in factors:
        if ge.correlated:
            rows.append({"prior": repr(ge.cor_prior), "class": "cor", "coef": "", "group": ge.group})
    return pd.DataFrame(rows, columns=["prior", "class", "coef", "group"])
