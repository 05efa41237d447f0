"""A fit printed as brms prints one (`summary.brmsfit`): a header (family and links, formula, data, draws), then the
group-level effects (each grouping column's sds and correlations), the population-level effects and the
distributional parameters (σ, φ, ...), each row with the posterior mean (Estimate), sd (Est.Error), the central 95 %
interval (l-95% CI, u-95% CI), R-hat and the bulk and tail ESS (arviz-stats, rank-normalised as everywhere in the
project).

`print(result)` and `raysampler summary ID` both build a `FitSummary`: the first from the `Result` in memory
(`of_result`), the second from what the service answers (`of_service`: the run, whose workers say their sites and
rows, and its summary at ci_prob 0.95). The rows are chosen by parameter name, as the draws name them: `beta[<coef>]`,
`sd_<group>[<effect>]`, `cor_<group>[<a>,<b>]`, `r_<group>[<label>,<effect>]` (counted, not printed: `ranef()` has
them) and the scalars (sigma, phi, ...); a model without that layout (an MLP, a NumPyro model) gets one table of its
parameters.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["COLUMNS", "FitSummary", "brms_family", "of_result", "of_service"]

#: The columns of every table, as brms names them.
COLUMNS = ("Estimate", "Est.Error", "l-95% CI", "u-95% CI", "Rhat", "Bulk_ESS", "Tail_ESS")
#: The built-in families by brms' names, with their links (brms' `Links:` line).
_BRMS = {
    "linear_regression": ("gaussian", "mu = identity; sigma = identity"),
    "logistic_regression": ("bernoulli", "mu = logit"),
    "poisson_regression": ("poisson", "mu = log"),
    "binomial_regression": ("binomial", "mu = logit"),
    "negative_binomial_regression": ("negbinomial", "mu = log; shape = identity"),
    "softmax_regression": ("categorical", "mu = logit"),
    "student_t_regression": ("student", "mu = identity; sigma = identity; nu = identity"),
    "gamma_regression": ("gamma", "mu = log; shape = identity"),
    "beta_regression": ("beta", "mu = logit; phi = identity"),
    "weibull_regression": ("weibull", "mu = log; shape = identity"),
    "exponential_regression": ("exponential", "mu = log"),
    "zero_inflated_poisson_regression": ("zero_inflated_poisson", "mu = log; zi = identity"),
    "cumulative_regression": ("cumulative", "mu = logit; disc = identity"),
    "cumulative_probit_regression": ("cumulative", "mu = probit; disc = identity"),
    "hurdle_poisson_regression": ("hurdle_poisson", "mu = log; hu = identity"),
    "hurdle_negative_binomial_regression": ("hurdle_negbinomial", "mu = log; shape = identity; hu = identity"),
    "zero_inflated_negative_binomial_regression": (
        "zero_inflated_negbinomial",
        "mu = log; shape = identity; zi = identity",
    ),
}
#: At most this many rows of a model without the brms layout are printed (the rest are counted).
MAX_OTHER_ROWS = 40
_FOOTER = (
    "For each parameter, Bulk_ESS and Tail_ESS are effective sample size measures, and Rhat is the potential\n"
    "scale reduction factor on split chains (at convergence, Rhat = 1)."
)


def brms_family(name: str | None) -> tuple[str | None, str | None]:
    """A family's registry name (or brms name) → (brms' name, its links); unknown families keep their name."""
    if name is None:
        return None, None
    for reg, (brms, links) in _BRMS.items():
        if name in (reg, brms):
            return brms, links
    return name, None


@dataclass(frozen=True)
class FitSummary:
    """A printed fit: the header lines and, per parameter name, its row of `COLUMNS` values (in θ's order).
    `str()` lays it out as brms does; `tables()` gives the sections as DataFrames."""

    rows: Mapping[str, Sequence[float]]
    family: str | None = None
    links: str | None = None
    formula: str | None = None
    data: str | None = None
    draws: str | None = None
    algorithm: str | None = None
    prob: float = 0.95
    notes: tuple[str, ...] = field(default=())
    #: groups per grouping column (else counted from the `r_<group>[...]` rows, when there are any)
    levels: Mapping[str, int] = field(default_factory=dict)

    def sections(self) -> list[tuple[str, str | None, list[tuple[str, Sequence[float]]]]]:
        """(section title, sub-heading or None, [(row label, values)]) in brms' order: group-level effects (one
        sub-table per grouping column), population-level effects, distributional parameters; or one table of
        every parameter for a model without that layout."""
        names = list(self.rows)
        groups: dict[str, list[tuple[str, Sequence[float]]]] = {}
        effects: dict[str, int] = {}
        levels: dict[str, int] = {}
        population: list[tuple[str, Sequence[float]]] = []
        dpars: list[tuple[str, Sequence[float]]] = []
        other: list[tuple[str, Sequence[float]]] = []
        for n in names:
            base, inner = _split(n)
            if base.startswith("sd_") and inner is not None:
                g = base[3:]
                groups.setdefault(g, []).append((f"sd({_effect(inner)})", self.rows[n]))
                effects[g] = effects.get(g, 0) + 1
            elif base.startswith("cor_") and inner is not None and base[4:] in groups:
                a, _, b = inner.partition(",")
                groups[base[4:]].append((f"cor({_effect(a)},{_effect(b)})", self.rows[n]))
            elif base.startswith("r_") and inner is not None:
                levels[base[2:]] = levels.get(base[2:], 0) + 1
            elif base == "beta" and inner is not None:
                population.append((_effect(inner), self.rows[n]))
            elif n == "Intercept" or (base == "delta" and inner is not None):  # an ordinal model's thresholds
                population.append(("Intercept[1]" if n == "Intercept" else n, self.rows[n]))
            elif inner is None and population:
                dpars.append((n, self.rows[n]))
            else:
                other.append((n, self.rows[n]))
        out: list[tuple[str, str | None, list[tuple[str, Sequence[float]]]]] = []
        for g, rows in groups.items():
            count = self.levels.get(g) or levels.get(g, 0) // max(effects.get(g, 1), 1)
            sub = f"~{g} (Number of levels: {count})" if count else f"~{g}"
            out.append(("Group-Level Effects:", sub, rows))
        if population:
            out.append(("Population-Level Effects:", None, population))
        if dpars:
            out.append(("Distributional Parameters:", None, dpars))
        if other:
            out.append(("Parameters:", None, other))
        return out

    def tables(self) -> dict[str, pd.DataFrame]:
        """The sections as DataFrames with `COLUMNS`, keyed "population", "distributional", "parameters" and
        "group:<column>"."""
        import pandas as pd

        out: dict[str, pd.DataFrame] = {}
        for title, sub, rows in self.sections():
            key = {
                "Population-Level Effects:": "population",
                "Distributional Parameters:": "distributional",
                "Parameters:": "parameters",
            }.get(title)
            if key is None:
                assert sub is not None
                key = "group:" + sub[1:].split(" (")[0]
            out[key] = pd.DataFrame([list(v) for _, v in rows], index=[r for r, _ in rows], columns=list(COLUMNS))
        return out

    def to_string(self, digits: int = 2) -> str:
        lines = []
        if self.family is not None:
            lines.append(f" Family: {self.family}")
        if self.links is not None:
            lines.append(f"  Links: {self.links}")
        if self.formula is not None:
            lines.append(f"Formula: {self.formula}")
        if self.data is not None:
            lines.append(f"   Data: {self.data}")
        if self.draws is not None:
            lines.append(f"  Draws: {self.draws}")
        lines.extend(self.notes)
        pct = f"{100 * self.prob:g}"
        header = [c.replace("95", pct) for c in COLUMNS]
        current = None
        for title, sub, rows in self.sections():
            if title != current:
                lines += ["", title]
                current = title
            if sub is not None:
                lines.append(sub)
            shown = rows if title != "Parameters:" else rows[:MAX_OTHER_ROWS]
            lines += _table(shown, header, digits)
            if len(shown) < len(rows):
                lines.append(f"... and {len(rows) - len(shown)} more (result.summary() has them all)")
        if not self.rows:
            lines += ["", "No posterior summary: too few draws (at least 4 per chain)."]
        lines.append("")
        if self.algorithm is not None:
            lines.append(f"Draws were sampled using {self.algorithm}.")
        lines.append(_FOOTER)
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.to_string()

    def __repr__(self) -> str:
        return self.to_string()


def _split(name: str) -> tuple[str, str | None]:
    """`base[inner]` → (base, inner); a name without brackets → (name, None)."""
    if name.endswith("]") and "[" in name:
        at = name.index("[")
        return name[:at], name[at + 1 : -1]
    return name, None


def _effect(label: str) -> str:
    """brms' row label of a coefficient or effect: `Intercept` for `(Intercept)`."""
    return "Intercept" if label == "(Intercept)" else label


def _cell(v: float, digits: int, integer: bool) -> str:
    if v is None or not math.isfinite(v):
        return "NA"
    if integer:
        return f"{int(round(v))}"
    return f"{v:.{digits}f}"


def _table(rows: Sequence[tuple[str, Sequence[float]]], header: Sequence[str], digits: int) -> list[str]:
    """Right-aligned columns under `header`, labels left-aligned (brms' layout)."""
    cells = [[_cell(float(v) if v is not None else math.nan, digits, j >= 5) for j, v in enumerate(vals)]
             for _, vals in rows]  # fmt: skip
    widths = [max([len(h)] + [len(c[j]) for c in cells]) for j, h in enumerate(header)]
    lw = max([0] + [len(label) for label, _ in rows])
    out = [" " * lw + " " + " ".join(h.rjust(w) for h, w in zip(header, widths))]
    for (label, _), c in zip(rows, cells):
        out.append(label.ljust(lw) + " " + " ".join(v.rjust(w) for v, w in zip(c, widths)))
    return out


def _printed(names: Sequence[str]) -> list[int]:
    """The positions of the names a fit prints (every name but the group effects `r_<group>[...]`)."""
    return [j for j, n in enumerate(names) if not (n.startswith("r_") and n.endswith("]"))]


def _draws_line(chains: int, draws: int, burn_in: Any, thin: Any) -> str:
    warm = "" if burn_in is None else f"; warmup = {burn_in}"
    th = "" if thin is None else f"; thin = {thin}"
    return (
        f"{chains} chains, each with {draws} draws kept{warm}{th};\n         total post-warmup draws = {chains * draws}"
    )


def _data_line(rows: Sequence[int | None], sites: Sequence[str | None]) -> str | None:
    """`<n> observations in <k> shards` and, where shards sit at sites, `at sites A (230 rows), B (...)`."""
    if not rows:
        return None
    known = [r for r in rows if r is not None]
    n = f"{sum(known)} observations" if len(known) == len(rows) else "observations"
    text = f"{n} in {len(rows)} shard{'s' if len(rows) != 1 else ''}"
    per: dict[str, list[int | None]] = {}
    for r, s in zip(rows, sites):
        if s is not None:
            per.setdefault(s, []).append(r)
    if per:

        def rows_at(rs: list[int | None]) -> str:
            return "" if None in rs else f" ({sum(r for r in rs if r is not None)} rows)"

        listed = ", ".join(s + rows_at(rs) for s, rs in per.items())
        text += f" at site{'s' if len(per) != 1 else ''} {listed}"
    return text


def _table_of_result(result: Any, prob: float) -> dict[str, list[float]]:
    """arviz-stats' summary of the printed coordinates: mean, sd, the central `prob` interval, R-hat, bulk and tail
    ESS, per name (natural scale)."""
    import arviz_stats as azs

    blocks = [b for b in result.param_blocks if not b.name.startswith("r_")]
    if result.num_draws < 4 or not blocks:
        return {}
    tree = result.to_arviz(log_likelihood=False)
    table = azs.summary(
        tree, var_names=[b.name for b in blocks], ci_prob=prob, ci_kind="eti", round_to="none", kind="all"
    )
    names = [n for b in blocks for n in b.names()]
    cols = list(table.columns)
    lo, hi = cols[2], cols[3]
    out = {}
    for name, (_, row) in zip(names, table.iterrows()):
        out[name] = [row["mean"], row["sd"], row[lo], row[hi], row["r_hat"], row["ess_bulk"], row["ess_tail"]]
    return out


def of_result(result: Any, prob: float = 0.95) -> FitSummary:
    """The fit of a run in memory (`print(result)`)."""
    model = result.model
    family = formula = None
    if model is not None:
        source = getattr(model, "source", None)
        formula = getattr(source, "formula", None) if source is not None else None
        family = getattr(source, "family", None) if source is not None else None
        if family is None:
            inner = getattr(model, "family", None)
            family = getattr(inner, "name", None) if inner is not None else None
            family = family or getattr(model, "name", None) or type(model).__name__
    fam, links = brms_family(family)
    rows: list[int | None] = []
    sites: list[str | None] = []
    if result.setup is not None:
        rows = list(result.setup.shard_rows)
        by_shard = {p.shard: p.site for p in result.setup.placement}
        sites = [by_shard.get(i) for i in range(len(rows))]
    elif result.data is not None:
        rows = [s.n_rows for s in result.data]
        sites = [s.site for s in result.data]
    opts = result.outcome.options if result.outcome is not None else None
    burn = None if opts is None else opts.burn_in
    if result.run_stats is not None and result.run_stats.burn_in is not None:
        burn = result.run_stats.burn_in
    draws = _draws_line(result.chains, result.num_draws, burn, None if opts is None else opts.thin)
    algo = None
    if result.algorithm is not None:
        algo = result.algorithm + (f" (executor {result.executor})" if result.executor else "")
    levels = {b.name[2:]: b.shape[0] for b in result.param_blocks if b.name.startswith("r_") and b.inner_dim}
    table = _table_of_result(result, prob)
    return FitSummary(table, fam, links, formula, _data_line(rows, sites), draws, algo, prob, levels=levels)


def of_service(info: Mapping[str, Any], summary: Any, prob: float = 0.95) -> FitSummary:
    """The fit of a run on the service: `info` its run object (GET /v1/runs/{id}: spec, workers with their sites and
    rows, chains, progress) and `summary` its summary table at ci_prob `prob` (a DataFrame indexed by parameter, with
    arviz-stats' columns mean, sd, the interval's bounds, ess_bulk, ess_tail, r_hat)."""
    spec = info.get("spec") or {}
    model = spec.get("model") or {}
    fam, links = brms_family(model.get("family"))
    workers = info.get("workers") or []
    rows = [w.get("rows") for w in workers]
    sites = [w.get("site") for w in workers]
    cols = list(summary.columns)
    lo, hi = cols[2], cols[3]
    table: dict[str, list[float]] = {}
    for name, row in summary.iterrows():
        vals = [row["mean"], row["sd"], row[lo], row[hi], row["r_hat"], row["ess_bulk"], row["ess_tail"]]
        table[str(name)] = [np.nan if v is None else float(v) for v in vals]
    progress = info.get("progress") or {}
    draws = _draws_line(
        int(info.get("chains") or spec.get("chains") or 0),
        int(progress.get("draws_stored") or 0),
        spec.get("burn_in"),
        spec.get("thin"),
    )
    algo = (spec.get("algorithm") or {}).get("name")
    notes: tuple[str, ...] = ()
    if info.get("status") not in (None, "SUCCEEDED"):
        notes = (f"  Run {info.get('id')} is {info.get('status')}: the draws stored so far.",)
    return FitSummary(table, fam, links, model.get("formula"), _data_line(rows, sites), draws, algo, prob, notes)
