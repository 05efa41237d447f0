"""The outcome of a sampling run: draws (chains, draws, d), diagnostics through ArviZ, and the run's typed records:
what setup decided (`SetupInfo`), the runtime statistics (`RunStats`) and how the run went (`RunOutcome`)."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np

from .models.contract import ParamBlock, natural_values
from .models.foreign import defines

if TYPE_CHECKING:
    from .diagnostics import Diagnostics, RunWarning
    from .enums import StopReason
    from .errors import Failure
    from .evaluation import DrawsArg, PredictKind
    from .events import RunEvent
    from .fitprint import FitSummary
    from .models.contract import Model
    from .options import RunOptions
    from .predictive import PpcKind, PpcResult
    from .runtime.contracts import RunConfig, RunStats, SetupInfo
    from .shards import ShardSet


#: The most log-likelihood values (rows × draws) `to_arviz()` adds without being asked (160 MB of float64).
LOG_LIK_MAX_VALUES = 20_000_000


@dataclass(frozen=True)
class Timings:
    """Seconds spent: setting up (binding, tuning, starting workers), sampling, in all (from the run's start), and
    writing draws and checkpoints durably (None without a `checkpoint_dir`)."""

    setup_s: float
    sampling_s: float
    wall_s: float
    checkpoint_write_s: float | None = None


@dataclass(frozen=True)
class RunOutcome:
    """How a run went: its options and the coordinator's config, timings, rounds done, why it stopped, the failure
    that stopped it (if any), its warnings (each with its `WarningKind`), the final diagnostics, recoveries from
    lost processes (`restarts`, `events`) and the round of its last checkpoint."""

    options: RunOptions
    config: RunConfig
    timings: Timings
    rounds_done: int
    stop_reason: StopReason | None
    failure: Failure | None = None
    warnings: tuple[RunWarning, ...] = ()
    diagnostics: Diagnostics | None = None
    restarts: int = 0
    events: tuple[RunEvent, ...] = ()
    checkpoint_round: int | None = None

    @property
    def stopped_by_time_budget(self) -> bool:
        return self.stop_reason == "time_budget"


@dataclass
class Result:
    """Posterior draws of θ with per-draw sample stats and the run's typed records.

    draws: (chains, draws, d) of the sampler's unconstrained θ (positive parameters as logs) after burn-in and
    thinning; `param_names` names its coordinates and `layout` groups them into the model's parameters
    (`param_blocks`), which `posterior`, `to_arviz` and `summary` report on their natural scale.
    sample_stats: name → (chains, draws).
    setup: what setup found and decided (`SetupInfo`: dimension, shard sizes, placement, the tuning report `plan`).
    run_stats: the runtime statistics (`RunStats`: per-round wall time, per-worker compute/idle seconds and idle
    fraction, N_i and its `N_schedule`, τ_i, placement, ρ_i, γ_i, M_i).
    outcome: how the run went (`RunOutcome`: timings, stop reason, failure, warnings, diagnostics, restarts).
    model: the model bound to the data, and data: the shards it was fitted on (`predict`, `loo`, exports); a result
    read back from stored draws (the service) has them only when the service gives them back; `spec` (the run's spec
    as JSON, from the service) and `seed` go into exports.
    """

    draws: np.ndarray
    param_names: list[str]
    sample_stats: dict[str, np.ndarray] = field(default_factory=dict)
    algorithm: str | None = None
    executor: str | None = None
    layout: tuple[ParamBlock, ...] = ()
    setup: SetupInfo | None = None
    run_stats: RunStats | None = None
    outcome: RunOutcome | None = None
    model: Model | None = None
    data: ShardSet | None = None
    spec: str | None = None
    seed: int | None = None

    @property
    def stats(self) -> Mapping[str, Any]:
        """A read-only dict view of `run_stats` (placement as dicts) with the timings as `setup_time_s`,
        `wall_time_s` and `checkpoint_write_s`: the per-round and per-worker arrays by name, e.g. `stats["M"]`.
        Prefer the typed `run_stats` and `outcome.timings`."""
        if self.run_stats is None:
            return MappingProxyType({})
        out = self.run_stats.as_dict()
        if self.outcome is not None:
            t = self.outcome.timings
            out |= {"setup_time_s": t.setup_s, "wall_time_s": t.wall_s}
            if t.checkpoint_write_s is not None:
                out["checkpoint_write_s"] = t.checkpoint_write_s
        return MappingProxyType(out)

    @property
    def chains(self) -> int:
        return self.draws.shape[0]

    @property
    def num_draws(self) -> int:
        return self.draws.shape[1]

    @property
    def param_blocks(self) -> tuple[ParamBlock, ...]:
        """θ's layout as named parameters: `layout` (ParamBlock objects, or their `as_dict` form from a JSON store)
        when the run recorded one, else a single block `theta` (dim `param`) labelled by `param_names`."""
        d = self.draws.shape[2]
        if self.layout:
            blocks = tuple(b if isinstance(b, ParamBlock) else ParamBlock.from_dict(b) for b in self.layout)
            if sum(b.size for b in blocks) != d:
                raise ValueError(f"layout has {sum(b.size for b in blocks)} coordinates, the draws {d}")
            return blocks
        labels = tuple(self.param_names) if len(self.param_names) == d and len(set(self.param_names)) == d else None
        return (ParamBlock("theta", d, "param", labels, "identity"),)

    def posterior(self) -> dict[str, np.ndarray]:
        """One array per model parameter on its natural scale (σ = exp(log σ)): (chains, draws) for a scalar,
        (chains, draws, size) otherwise; `draws` stays the unconstrained vector."""
        blocks = self.param_blocks
        values = natural_values(blocks, self.draws)
        out: dict[str, np.ndarray] = {}
        start = 0
        for b in blocks:
            block = values[..., start : start + b.size]
            out[b.name] = block.reshape(block.shape[:-1] + b.shape)
            start += b.size
        return out

    def fixef(self, probs: tuple[float, float] = (0.025, 0.975)) -> Any:
        """The coefficients' summary, one row per column: Estimate, Est.Error, Q2.5, Q97.5 (`raysampler.effects`)."""
        from .effects import fixef

        return fixef(self, probs)

    def ranef(self, summary: bool = True, probs: tuple[float, float] = (0.025, 0.975)) -> Any:
        """Each grouping column's effects: {group: table by (label, effect)}, or per draw {group: DataArray (chain,
        draw, <group>, <group>_effect)} (`summary=False`)."""
        from .effects import ranef

        return ranef(self, summary, probs)

    def coef(self, summary: bool = True, probs: tuple[float, float] = (0.025, 0.975)) -> Any:
        """Each group's coefficients, fixed plus the group's effect, per draw (`summary=False`: {group: DataArray
        (chain, draw, <group>, coef)}) or summarised ({group: table by (label, coefficient)})."""
        from .effects import coef

        return coef(self, summary, probs)

    def conditional_effects(
        self,
        effect: str,
        *,
        conditions: Mapping[str, Any] | None = None,
        points: int = 100,
        prob: float = 0.95,
        draws: DrawsArg = 1000,
        executor: str | None = None,
    ) -> Any:
        """brms' `conditional_effects` for one predictor of a formula model: the expected response along `effect`,
        the other predictors at their means or first levels (or `conditions`), without group effects; `.table` and
        `.plot()` (`raysampler.evaluation.conditional`)."""
        from .evaluation.conditional import conditional_effects

        return conditional_effects(
            self, effect, conditions=conditions, points=points, prob=prob, draws=draws, executor=executor
        )

    def varcorr(self, probs: tuple[float, float] = (0.025, 0.975)) -> Any:
        """brms' `VarCorr`: {group: `GroupVarCorr` (its effects' sds and correlations, summarised)}, with
        "residual__" for the residual sd where the model has one (`raysampler.effects.varcorr`)."""
        from .effects import varcorr

        return varcorr(self, probs)

    def bayes_r2(
        self,
        *,
        summary: bool = True,
        probs: tuple[float, float] = (0.025, 0.975),
        draws: DrawsArg = 1000,
        executor: str | None = None,
    ) -> Any:
        """brms' `bayes_R2`: the residual-based Bayesian R² (Gelman et al. 2019), computed where the run's rows are: a
        one-row table (Estimate, Est.Error, quantiles), or its value per draw (`summary=False`)
        (`raysampler.evaluation.r2`)."""
        from .evaluation.r2 import bayes_r2

        return bayes_r2(self, summary=summary, probs=probs, draws=draws, executor=executor)

    def prior_summary(self) -> Any:
        """The prior on every parameter: a table of prior, class (b, sd, sigma, phi), coef and group."""
        from .effects import prior_summary

        if self.model is None:
            raise ValueError("prior_summary: the result does not carry its model")
        return prior_summary(self.model)

    def predict(
        self,
        X_new: Any,
        kind: PredictKind = "mean",
        *,
        draws: DrawsArg = 1000,
        prob: float = 0.9,
        seed: int = 0,
        re_formula: str | None = None,
        allow_new_levels: bool = True,
    ) -> np.ndarray:
        """The posterior predictive at new rows (a DataFrame or a mapping column → values, read by name; or an
        array in the data's column order): "mean" (n,) (class probabilities (n, C) for a multiclass model),
        "interval" (n, 2), the central `prob` interval, or per draw (S, n) "epred" (E[y | x]), "linpred" (the
        linear predictor) and "predict" (alias "draws": predictive draws). `re_formula="NA"` leaves the group
        effects out; `allow_new_levels=False` refuses a group the run never saw (`raysampler.evaluation.predict`)."""
        from .evaluation import predict

        return predict(
            self,
            X_new,
            kind,
            draws=draws,
            prob=prob,
            seed=seed,
            re_formula=re_formula,
            allow_new_levels=allow_new_levels,
        )

    def loo(
        self,
        *,
        executor: str | None = None,
        draws: DrawsArg = 1000,
        pointwise: bool = False,
        moment_match: bool = False,
    ) -> Any:
        """PSIS-LOO computed where the run's rows are: an arviz-stats ELPDData (`raysampler.evaluation.loo`);
        `moment_match=True` improves the rows with Pareto k̂ ≥ 0.7 by moment matching at the shards."""
        from .evaluation import loo

        return loo(self, executor=executor, draws=draws, pointwise=pointwise, moment_match=moment_match)

    def pp_check(
        self,
        kind: PpcKind = "dens",
        stat: str = "mean",
        *,
        draws: DrawsArg | None = None,
        bins: int | None = None,
        seed: int = 0,
        executor: str | None = None,
        group: str | None = None,
    ) -> PpcResult:
        """A posterior predictive check computed where the run's rows are (`raysampler.evaluation.pp_check`):
        "dens" (density overlay), "hist" (histograms) or "stat" (the statistic `stat` of y against y_rep); the
        replicated data never leave the shards, only bin counts and sums. `.plot()` draws it with matplotlib. With
        `group` (kind "stat"), the statistic per label of that column of the data (`PpcStatGrouped`)."""
        from .evaluation import pp_check

        return pp_check(self, kind, stat, draws=draws, bins=bins, seed=seed, executor=executor, group=group)

    def data_movable(self) -> str | None:
        """None when the run's rows may be read here (in-memory shards, files without a site), else why not."""
        if self.model is None or self.data is None:
            return "the result does not carry its model and data"
        sited = [i for i, s in enumerate(self.data) if s.site is not None]
        if sited:
            return f"shards {sited} live on sites: their rows never leave them"
        return None

    def to_arviz(self, log_likelihood: bool | None = None):
        """An xarray DataTree: a `posterior` group with one variable per model parameter (e.g. `beta` with dim `coef`
        labelled by column, `sigma`; `theta` with dim `param` for a model without a layout) and `sample_stats`;
        `log_likelihood` and `observed_data` (variable `y`, dim `obs`) when the rows may be moved and
        `log_likelihood` is not False (None: only up to LOG_LIK_MAX_VALUES values); else the `log_likelihood`
        attribute says why they are absent. Attributes: algorithm, executor, seed, model and the spec when known."""
        import arviz_base as azb

        blocks = self.param_blocks
        dims: dict[str, list[str]] = {}
        coords: dict[str, list[str]] = {}
        for b in blocks:
            if b.dim is None:
                continue
            dims[b.name] = b.dims()
            for dim, labels in zip(b.dims(), (b.coord_values(), list(b.inner_labels or ()))):
                if dim in coords and coords[dim] != labels:
                    raise ValueError(f"parameter blocks share the dim {dim!r} with different labels")
                coords[dim] = labels
        groups: dict[str, dict[str, np.ndarray]] = {"posterior": self.posterior()}
        if self.sample_stats:
            groups["sample_stats"] = dict(self.sample_stats)
        attrs = {"algorithm": str(self.algorithm or ""), "executor": str(self.executor or "")}
        if self.seed is not None:
            attrs["seed"] = str(self.seed)
        if self.model is not None:
            attrs["model"] = repr(self.model)
        if self.spec is not None:
            attrs["spec"] = self.spec
        why = self._pointwise_groups(groups, dims, log_likelihood)
        if why is not None:
            attrs["log_likelihood"] = why
        return azb.from_dict(groups, dims=dims, coords=coords, attrs={"posterior": attrs})

    def _pointwise_groups(
        self, groups: dict[str, dict[str, np.ndarray]], dims: dict[str, list[str]], wanted: bool | None
    ) -> str | None:
        """Add `log_likelihood` (chain, draw, obs) and `observed_data` to `groups`; or say why not."""
        if wanted is False:
            return "not asked for"
        why = self.data_movable()
        if why is None and self.model is not None and not defines(self.model, "log_likelihood"):
            why = f"model {type(self.model).__name__} does not define log_likelihood"
        if why is None and wanted is None:
            n = sum(s.n_rows or 0 for s in self.data or ())
            if n * self.chains * self.num_draws > LOG_LIK_MAX_VALUES:
                size = f"{n} rows x {self.chains * self.num_draws} draws"
                why = f"{size} exceed the {LOG_LIK_MAX_VALUES} values added unasked (to_arviz(log_likelihood=True))"
                # said aloud, not only in the attributes: ArviZ's own loo on this export would find no log_likelihood
                warnings.warn(
                    f"to_arviz: log_likelihood left out ({why}); result.loo() computes PSIS-LOO at the shards "
                    "without it",
                    UserWarning,
                    stacklevel=3,
                )
        if why is not None:
            if wanted:
                raise ValueError(f"log_likelihood: {why}")
            return why
        assert self.model is not None and self.data is not None
        theta = self.draws.reshape(-1, self.draws.shape[2])
        lls, ys = [], []
        for shard in self.data:
            X, y = shard.load()
            X, y = self.model.shard_data(X, y, shard.index)
            lls.append(self.model.log_likelihood(X, y, self.model.evaluation_x(X, y, theta, self.param_names, 0)))
            ys.append(np.asarray(y))
        ll = np.concatenate(lls).T.reshape(self.chains, self.num_draws, -1)
        groups["log_likelihood"] = {"y": ll}
        groups["observed_data"] = {"y": np.concatenate(ys)}
        dims["y"] = ["obs"] if ys[0].ndim == 1 else ["obs", "y_dim"]
        return None

    def summary(self, ci_prob: float = 0.94, round_to: int | str | None = "none"):
        """Table per coordinate of every parameter, named `beta[age]`, `sigma`, …: mean, sd, HDI, ess_bulk, ess_tail,
        r_hat, mcse (arviz-stats `summary`), on the natural scale."""
        import arviz_stats as azs

        if self.num_draws < 4:
            raise ValueError(f"summary needs at least 4 draws per chain, this result has {self.num_draws}")
        blocks = self.param_blocks
        tree = self.to_arviz(log_likelihood=False)
        table = azs.summary(tree, var_names=[b.name for b in blocks], ci_prob=ci_prob, ci_kind="hdi", round_to=round_to)
        table.index = [n for b in blocks for n in b.names()]  # brms-style `r_g[a,(Intercept)]`, as param_names
        return table

    def ess(self, method: str = "bulk") -> np.ndarray:
        """Effective sample size per coordinate of θ (arviz-stats), shape (d,), in θ's order. Computed on the reported
        parameters; "bulk" and "tail" ESS are rank based, hence the same for log σ and σ."""
        import arviz_stats as azs

        blocks = self.param_blocks
        out = azs.ess(self.to_arviz(log_likelihood=False), var_names=[b.name for b in blocks], method=method)
        return np.concatenate([np.asarray(out[b.name].values, dtype=np.float64).reshape(-1) for b in blocks])

    def fit_summary(self, prob: float = 0.95) -> FitSummary:
        """The fit as brms prints it (`raysampler.fitprint`): family, formula, data, draws, then the group-level
        effects (sds, correlations), population-level effects and distributional parameters, each with Estimate,
        Est.Error, the central `prob` interval, Rhat, Bulk_ESS and Tail_ESS; `str()` lays it out, `tables()` gives
        the sections as DataFrames. `print(result)` prints it at 95 %."""
        from .fitprint import of_result

        return of_result(self, prob)

    def __str__(self) -> str:
        return self.fit_summary().to_string()

    def __repr__(self) -> str:
        model = ""
        if self.model is not None:
            formula = getattr(getattr(self.model, "source", None), "formula", None)
            model = f", formula={formula!r}" if formula else f", model={type(self.model).__name__}"
        return (
            f"Result(chains={self.chains}, draws={self.num_draws}, d={self.draws.shape[2]}{model}, "
            f"algorithm={self.algorithm!r}, executor={self.executor!r})"
        )
