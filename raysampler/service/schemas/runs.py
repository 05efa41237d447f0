"""The run spec (POST /v1/runs): the model (a family with its priors, or a formula), the data (a data set, built-in
data, or site shards), the algorithm, the DP mode and the run's length and bookkeeping."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ... import priors
from ...models.formula import FORMULA_FAMILIES
from ...models.groups import GroupEffects
from ...names import ID_PATTERN, SITE_PATTERN
from ...objectstore import UnsafeKey, is_uri, parse_uri
from ...options import AUTO_BURN_IN, AUTO_MAX_ROUNDS, DEFAULT_CHAINS, DEFAULT_MAX_RHAT, DEFAULT_TARGET_ESS
from .common import (
    ALGORITHM_NAMES,
    BUILTIN_DATASETS,
    MAX_TAGS,
    MODEL_FAMILIES,
    RUN,
    SEED_MAX,
    TAG_KEY_PATTERN,
    ColumnName,
    PositiveFloat,
    one_of,
)
from .priors import CoefPriorSpec, CorPriorSpec, PositivePriorSpec, ProbabilityPriorSpec


class GroupEffectsSpec(BaseModel):
    """Varying effects by a grouping column (brms `(1 + slopes || group)`, or `(1 + slopes | group)` with
    `correlated`): r_g ~ N(0, diag(sd) Ω diag(sd)) per group label g, on the intercept and each slope column; each sd
    with `sd_prior` (default half_normal(1)); Ω = I, or with `correlated` a correlation matrix with `cor_prior`
    (default lkj(1))."""

    model_config = ConfigDict(extra="forbid", strict=True)
    group: ColumnName = Field(description="the column of group labels (numbers or text; labels, not a feature)")
    intercept: bool = Field(default=True, description="a varying intercept per group")
    slopes: list[ColumnName] = Field(default_factory=list, max_length=64, description="columns with varying slopes")
    sd_prior: PositivePriorSpec | None = Field(default=None, description="prior on each effect's sd")
    correlated: bool = Field(
        default=False, description="correlated effects (brms' default for (1 + x | g)): needs two effects or more"
    )
    cor_prior: CorPriorSpec | None = Field(default=None, description="with correlated: the correlations' prior")
    placement: Literal["auto", "local", "global"] = Field(
        default="auto",
        description='where the effects live: "auto" (global when a level occurs at several shards, else local at '
        'the workers), "global" (parameters beside β) or "local" (a group found at two shards is refused)',
    )

    def to_engine(self) -> GroupEffects:
        """The engine's `rs.GroupEffects` (its own checks name model.group_effects)."""
        sd_prior = self.sd_prior.to_prior() if self.sd_prior is not None else priors.HalfNormal(1.0)
        cor_prior = self.cor_prior.to_prior() if self.cor_prior is not None else priors.LKJ(1.0)
        return GroupEffects(
            self.group, self.intercept, tuple(self.slopes), sd_prior, self.correlated, cor_prior, self.placement
        )


class ModelSpec(BaseModel):
    """A model family of the engine (`rs.models.FAMILIES`) and its parameters: priors by name, per-row inputs by
    column, and any other parameter of the family (e.g. `hidden` for mlp_classifier)."""

    model_config = ConfigDict(extra="allow", strict=True)
    family: str = Field(description="engine model family", json_schema_extra={"enum": list(MODEL_FAMILIES)})
    prior_scale: float | None = Field(default=None, gt=0, description="shorthand for coef_prior normal(0, prior_scale)")
    coef_prior: CoefPriorSpec | None = Field(default=None, description="the coefficients' prior (default normal)")
    noise_sd: PositiveFloat | ColumnName | None = Field(
        default=None,
        description="linear_regression: a known noise sd, one number for every row or the name of a column holding "
        "each row's sd (not a feature); absent = σ unknown, sampled with sigma_prior",
    )
    sigma_prior: PositivePriorSpec | None = Field(
        default=None, description="linear_regression, lognormal_regression, student_t_regression: prior on σ"
    )
    phi_prior: PositivePriorSpec | None = Field(
        default=None,
        description="negative_binomial_regression, zero_inflated_negative_binomial_regression: prior on the "
        "dispersion φ; beta_regression: on the precision φ",
    )
    nu_prior: PositivePriorSpec | None = Field(
        default=None, description="student_t_regression: prior on the degrees of freedom ν (default gamma(2, 0.1))"
    )
    shape_prior: PositivePriorSpec | None = Field(
        default=None, description="gamma_regression, weibull_regression: prior on the shape"
    )
    sigma_formula: str | None = Field(
        default=None,
        min_length=1,
        max_length=4000,
        description="with formula and the gaussian family: the noise sd's own formula, brms' bf(y ~ x, sigma ~ z) "
        "written '~ z' (log sigma_j = z_j'gamma; common terms, categories too, no group terms); its coefficients "
        "b_sigma[...] take sigma_coef_prior",
    )
    sigma_coef_prior: CoefPriorSpec | None = Field(
        default=None, description="with sigma_formula: the prior of each of its coefficients (default normal(0, 2.5))"
    )
    coef_priors: dict[str, CoefPriorSpec] | None = Field(
        default=None,
        max_length=1000,
        description="with formula: a prior of a coefficient's own, by its name in the design ('x1', "
        "'C(region)[2]', '(Intercept)'), of coef_prior's kind (brms' prior(..., class = b, coef = x1)); the other "
        "coefficients keep coef_prior",
    )
    group_placement: dict[str, Literal["auto", "local", "global"]] | None = Field(
        default=None,
        max_length=64,
        description="with formula: where a grouping column's effects live, by the column as the formula names it "
        "('county', 'county:housing'): 'auto' (global when its levels occur at several shards), 'local' (at the "
        "workers; a group at two shards is refused) or 'global' (parameters beside the coefficients)",
    )
    threshold_prior: CoefPriorSpec | None = Field(
        default=None, description="cumulative_regression: prior on the first threshold (default student_t(3, 0, 2.5))"
    )
    gap_prior: PositivePriorSpec | None = Field(
        default=None,
        description="cumulative_regression: prior on each gap between thresholds (default half_normal(5))",
    )
    zi_prior: ProbabilityPriorSpec | None = Field(
        default=None,
        description="zero_inflated_poisson_regression, zero_inflated_negative_binomial_regression: prior on the "
        "zero-inflation probability (default beta(1, 1))",
    )
    hu_prior: ProbabilityPriorSpec | None = Field(
        default=None,
        description="hurdle_poisson_regression, hurdle_negative_binomial_regression: prior on the probability of a "
        "zero (the hurdle; default beta(1, 1))",
    )
    noise_prior: PositivePriorSpec | None = Field(default=None, description="deprecated name of sigma_prior")
    dispersion_prior: PositivePriorSpec | None = Field(default=None, description="deprecated name of phi_prior")
    offset_column: str | None = Field(
        default=None,
        min_length=1,
        description="poisson, negative_binomial and their zero-inflated and hurdle families: the column of log "
        "exposure (not a feature)",
    )
    trials_column: str | None = Field(
        default=None, min_length=1, description="binomial_regression: the column of trial counts (not a feature)"
    )
    censored_column: str | None = Field(
        default=None,
        min_length=1,
        description="weibull_regression, exponential_regression: the column of the right-censoring indicator, 0 "
        "(event observed) or 1 (censored), not a feature (a formula writes 'y | cens(column) ~ ...')",
    )
    group_effects: list[GroupEffectsSpec] | None = Field(
        default=None,
        min_length=1,
        max_length=8,
        description="GLM families: group-level effects, one entry per grouping column; each group's effects are "
        "sampled on the worker holding its rows (the run's shards keep each group in one shard: see shard_by)",
    )

    formula: str | None = Field(
        default=None,
        min_length=3,
        max_length=4000,
        description="a model written as a formula, brms' syntax ('y ~ x1 + C(region) + (1 + x1 | hospital)'): "
        "family is then brms' name of one (gaussian, bernoulli, poisson, binomial, negbinomial, lognormal, student, "
        "Gamma, Beta, weibull, exponential, zero_inflated_poisson, zero_inflated_negbinomial, hurdle_poisson, "
        "hurdle_negbinomial, cumulative, cumulative_probit) or a "
        "built-in family's name, the priors are "
        "coef_prior (b), sd_prior (the group sds), cor_prior (cor: the correlations of a term's effects, correlated "
        "as in brms when one term has one bar and two effects or more; (1 + x1 || hospital) are not), sigma_prior "
        "(sigma), phi_prior (phi), nu_prior (nu), shape_prior (shape), zi_prior (zi), hu_prior (hu), "
        "threshold_prior (Intercept) and gap_prior (delta), and each site builds its "
        "design from its own rows (the data's files name no y or x columns)",
        json_schema_extra={"x-families": list(FORMULA_FAMILIES)},
    )
    sd_prior: PositivePriorSpec | None = Field(default=None, description="with a formula: prior on each group sd")
    cor_prior: CorPriorSpec | None = Field(
        default=None, description="with a formula: prior on the correlations of each correlated group term"
    )

    @field_validator("family")
    @classmethod
    def _known_family(cls, value: str) -> str:
        return one_of(value, (*MODEL_FAMILIES, *FORMULA_FAMILIES), "model family")

    @model_validator(mode="after")
    def _old_prior_names(self) -> ModelSpec:
        """The priors' old names (noise_prior, dispersion_prior) set the new ones (sigma_prior, phi_prior)."""
        for old, new in (("noise_prior", "sigma_prior"), ("dispersion_prior", "phi_prior")):
            value = getattr(self, old)
            if value is not None:
                if getattr(self, new) is not None:
                    raise ValueError(f"model.{old} is the old name of model.{new}: give {new} only")
                setattr(self, new, value)
                setattr(self, old, None)
        return self

    @model_validator(mode="after")
    def _formula_fields(self) -> ModelSpec:
        if self.formula is None:
            if self.family in FORMULA_FAMILIES and self.family not in MODEL_FAMILIES:
                raise ValueError(f"model.family {self.family!r} is a formula's family: give model.formula too")
            for own in ("sd_prior", "cor_prior"):
                if getattr(self, own) is not None:
                    raise ValueError(f"model.{own} goes with model.formula (else group_effects[i].{own})")
            for own in ("sigma_formula", "sigma_coef_prior"):
                if getattr(self, own) is not None:
                    raise ValueError(f"model.{own} goes with model.formula")
            if self.coef_priors is not None:
                raise ValueError(
                    "model.coef_priors goes with model.formula (else coef_prior with one value per coefficient)"
                )
            if self.group_placement is not None:
                raise ValueError("model.group_placement goes with model.formula (else group_effects[i].placement)")
            return self
        clash = [
            n
            for n in ("prior_scale", "noise_sd", "offset_column", "trials_column", "censored_column", "group_effects")
            if getattr(self, n) is not None
        ] + list(self.model_extra or {})
        if clash:
            raise ValueError(f"model.{clash[0]} does not go with model.formula: the formula says it")
        if self.sigma_formula is None and self.sigma_coef_prior is not None:
            raise ValueError("model.sigma_coef_prior goes with model.sigma_formula (the noise sd's regression)")
        if self.sigma_formula is not None and self.sigma_prior is not None:
            raise ValueError(
                "model.sigma_prior is a prior on one noise sd; with model.sigma_formula give sigma_coef_prior (its "
                "coefficients' prior)"
            )
        return self

    def engine_model(self) -> Any:
        """The engine model this spec describes (unbound): the family with `params`, or the formula's model."""
        from ...models import get_model
        from ...models.formula import from_formula

        if self.formula is None:
            return get_model(self.family, **self.params())
        kinds = {
            "b": self.coef_prior,
            "sd": self.sd_prior,
            "cor": self.cor_prior,
            "sigma": self.sigma_coef_prior if self.sigma_formula is not None else self.sigma_prior,
            "phi": self.phi_prior,
            "nu": self.nu_prior,
            "shape": self.shape_prior,
            "zi": self.zi_prior,
            "hu": self.hu_prior,
            "Intercept": self.threshold_prior,
            "delta": self.gap_prior,
        }
        priors = {k: v.to_prior() for k, v in kinds.items() if v is not None}
        priors |= {f"b_{name}": v.to_prior() for name, v in (self.coef_priors or {}).items()}
        return from_formula(self.formula, self.family, priors, sigma=self.sigma_formula, placement=self.group_placement)

    def arg_names(self) -> list[str]:
        """The engine model arguments this spec sets: the keys of `params`, without building any prior."""
        named = [
            n
            for n in (
                "prior_scale",
                "noise_sd",
                "coef_prior",
                "sigma_prior",
                "phi_prior",
                "nu_prior",
                "shape_prior",
                "zi_prior",
                "hu_prior",
                "hu_prior",
                "threshold_prior",
                "gap_prior",
                "group_effects",
            )
            if getattr(self, n) is not None
        ]
        named += [
            arg
            for arg, field in (
                ("offset", "offset_column"),
                ("trials", "trials_column"),
                ("censored", "censored_column"),
            )
            if getattr(self, field) is not None
        ]
        if self.formula is not None:  # the formula's own errors name it, its priors and its levels
            named += ["formula", "priors", "levels", "sigma"]
        return [*(self.model_extra or {}), *named]

    def params(self) -> dict[str, Any]:
        """Keyword arguments of the engine model (`rs.models.get_model(family, **params)`)."""
        out = dict(self.model_extra or {})
        for name in ("prior_scale", "noise_sd"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        for name in (
            "coef_prior",
            "sigma_prior",
            "phi_prior",
            "nu_prior",
            "shape_prior",
            "zi_prior",
            "threshold_prior",
            "gap_prior",
        ):
            spec = getattr(self, name)
            if spec is not None:
                out[name] = spec.to_prior()
        if self.offset_column is not None:
            out["offset"] = self.offset_column
        if self.trials_column is not None:
            out["trials"] = self.trials_column
        if self.censored_column is not None:
            out["censored"] = self.censored_column
        if self.group_effects is not None:
            out["group_effects"] = tuple(g.to_engine() for g in self.group_effects)
        return out


class ShardRef(BaseModel):
    """A shard that stays on its site: only a worker on a node labelled raysampler.io/site=<site> reads it, a file
    there or an object the site reads with its own credentials."""

    model_config = ConfigDict(extra="forbid", strict=True)
    path: str = Field(
        min_length=1,
        max_length=4096,
        description="the file's path on the site's nodes (.parquet, .csv or .npz; a folder of parquet files ending in "
        "'/'), or an object-storage URI the site reads (s3://, gs://, abfs://: a .parquet object or a prefix ending "
        "in '/')",
    )
    site: str = Field(pattern=SITE_PATTERN, description="the raysampler.io/site label of the nodes holding it")

    @field_validator("path")
    @classmethod
    def _uri_syntax(cls, value: str) -> str:
        """A URI must be well formed (scheme, bucket, no credentials or query): a 422. Which keys lie in a grant is
        the grant check's (a 403 that tells nothing about the object)."""
        if is_uri(value):
            try:
                parse_uri(value)
            except UnsafeKey:
                pass
            except ValueError as exc:
                raise ValueError(f"the URI {exc}") from None
        return value


class DataRef(BaseModel):
    """A built-in data set ("builtin:breast_cancer", options passed to rs.datasets.load), an uploaded one, or shard
    files that stay on their sites (`shards`, with the target column `y_column` and feature columns `x_columns`)."""

    # exactly one of the three, in the schema too (absent and null mean the same); options only with a built-in set
    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={
            "oneOf": [
                {
                    "required": ["dataset"],
                    "properties": {
                        "dataset": {"type": "string"},
                        "dataset_id": {"type": "null"},
                        "shards": {"type": "null"},
                    },
                },
                {
                    "required": ["dataset_id"],
                    "properties": {
                        "dataset_id": {"type": "string"},
                        "dataset": {"type": "null"},
                        "shards": {"type": "null"},
                        "options": {"type": "object", "maxProperties": 0},
                    },
                },
                {
                    "required": ["shards"],
                    "properties": {
                        "shards": {"type": "array"},
                        "dataset": {"type": "null"},
                        "dataset_id": {"type": "null"},
                        "options": {"type": "object", "maxProperties": 0},
                    },
                },
            ]
        },
    )
    dataset: str | None = Field(
        default=None,
        description='"builtin:<name>", see rs.datasets',
        json_schema_extra={"enum": [*BUILTIN_DATASETS, None]},
    )
    dataset_id: str | None = Field(default=None, pattern=ID_PATTERN, description="id from POST /v1/datasets")
    shards: list[ShardRef] | None = Field(
        default=None,
        min_length=1,
        max_length=4096,
        description="shard files on their sites (one worker reads each, there)",
    )
    y_column: str = Field(default="y", min_length=1, max_length=256, description="target column of shard files")
    x_columns: list[str] | None = Field(
        default=None,
        min_length=1,
        max_length=100_000,
        description="feature columns of shard files (default: all but y_column)",
    )
    options: dict[str, Any] = Field(default_factory=dict, description="keyword arguments for a built-in data set")

    @field_validator("dataset")
    @classmethod
    def _known_dataset(cls, value: str | None) -> str | None:
        return None if value is None else one_of(value, BUILTIN_DATASETS, "built-in data set")

    @model_validator(mode="after")
    def _exactly_one(self) -> DataRef:
        if sum(v is not None for v in (self.dataset, self.dataset_id, self.shards)) != 1:
            raise ValueError("give exactly one of data.dataset ('builtin:<name>'), data.dataset_id or data.shards")
        if self.dataset is None and self.options:
            raise ValueError("data.options only applies to built-in data sets")
        if self.shards is None and (self.y_column != "y" or self.x_columns is not None):
            raise ValueError("data.y_column and data.x_columns apply to data.shards (uploads take them as form fields)")
        return self


class AlgorithmSpec(BaseModel):
    """An algorithm of the engine (`rs.algorithms.ALGORITHMS`) and its keyword parameters."""

    model_config = ConfigDict(extra="forbid", strict=True)
    name: str = Field(
        default="dglmc", description="engine algorithm name", json_schema_extra={"enum": list(ALGORITHM_NAMES)}
    )
    params: dict[str, Any] = Field(default_factory=dict, description="the algorithm's keyword parameters")

    @field_validator("name")
    @classmethod
    def _known_algorithm(cls, value: str) -> str:
        return one_of(value, ALGORITHM_NAMES, "algorithm")


class PrivacySpec(BaseModel):
    """The differential-privacy mode (`rs.DP`): DG-LMC with clipped Langevin steps and a budget (ε, δ) per site over
    the whole run; the run stops (stop reason privacy_budget) before any release would exceed it (docs/privacy.md)."""

    model_config = ConfigDict(extra="forbid", strict=True)
    epsilon: float = Field(default=1.0, gt=0, le=1e6, allow_inf_nan=False, description="ε per site, whole run")
    delta: float = Field(default=1e-5, gt=0, lt=1, description="δ per site")
    clip: float = Field(default=1.0, gt=0, le=1e12, allow_inf_nan=False, description="per-example gradient clip norm C")
    clip_rule: Literal["gradient", "features"] = Field(
        default="gradient",
        description="gradient: clip each row's gradient at C; features (logistic regression): scale it by "
        "min(1, C/|x_r|), a weighted likelihood",
    )


class RunSpec(BaseModel):
    """Body of POST /v1/runs: what to sample and how (the same arguments as rs.sample)."""

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={
            "examples": [
                {
                    "model": {"family": "logistic_regression", "prior_scale": 1.0},
                    "data": {"dataset": "builtin:breast_cancer"},
                    "num_shards": 4,
                    "algorithm": {"name": "dglmc", "params": {}},
                    "chains": 4,
                    "num_rounds": 1000,
                },
                {
                    "model": {"family": "logistic_regression"},
                    "data": {"dataset": "builtin:logistic_synthetic"},
                    "num_shards": 2,
                    "algorithm": {"name": "dglmc"},
                    "chains": 2,
                    "num_rounds": 100,
                    "burn_in": 10,
                    "seed": 1,
                },
            ]
        },
    )
    model: ModelSpec
    data: DataRef
    num_shards: int = Field(default=4, ge=1, le=4096)
    shard_strategy: Literal["contiguous", "random", "label_skew"] | None = Field(
        default=None,
        description='how uploaded or built-in data are split: default "contiguous" (with model.group_effects: by '
        "the first grouping column, see shard_by)",
    )
    shard_by: ColumnName | None = Field(
        default=None,
        description="keep each group of this column in one shard (balanced by rows); default with "
        "model.group_effects: the first grouping column (not with site shards, which are split already)",
    )
    algorithm: AlgorithmSpec = Field(default_factory=AlgorithmSpec)
    chains: Annotated[int, Field(ge=1, le=4096)] | Literal["auto"] = Field(
        default="auto",
        description='chains, or "auto": 4, 16 where the run stops on convergence (num_rounds "auto": the many-chain '
        "rule, nested R-hat, then stops after about a hundred draws a chain) or at a time budget (time_budget_s: "
        "more draws in the same time), or more where a round is bound by the "
        "link to far sites rather than by their compute (chosen at set-up; the run's plan says how many and why)",
    )
    max_chains: Annotated[int, Field(ge=1, le=4096)] | None = Field(
        default=None,
        description='with chains "auto": the most chains the set-up may choose (default 64; the service\'s quotas '
        "may lower it)",
    )
    num_rounds: Annotated[int, Field(ge=1, le=10_000_000)] | Literal["auto"] = Field(
        default="auto",
        description='rounds after burn-in, or "auto": sample until min bulk ESS ≥ target_ess and max '
        "R-hat < max_rhat (or max_rounds)",
    )
    target_ess: float = Field(default=DEFAULT_TARGET_ESS, gt=0, le=1e9, description='with num_rounds "auto"')
    max_rhat: float = Field(default=DEFAULT_MAX_RHAT, gt=1, le=10, description='with num_rounds "auto"')
    max_rounds: int | None = Field(
        default=None,
        ge=1,
        le=10_000_000,
        description=f'with num_rounds "auto": most rounds after burn-in (default {AUTO_MAX_ROUNDS})',
    )
    burn_in: Annotated[int, Field(ge=0, le=10_000_000)] | Literal["auto"] | None = Field(
        default=None,
        description='warm-up rounds, or "auto": end the warm-up once the chains are warm (checked at fixed round '
        f'counts, at most {AUTO_BURN_IN} rounds); default max(100, num_rounds // 10), or "auto" with num_rounds "auto"',
    )
    thin: int = Field(default=RUN.thin, ge=1)
    seed: int = Field(default=RUN.seed, ge=0, le=SEED_MAX, description="0 ≤ seed ≤ 2**63 - 1 (signed 64 bits)")
    time_budget_s: float | None = Field(default=None, gt=0)
    pipeline: bool | Literal["auto"] = Field(
        default="auto",
        description="run each round as two chain groups in flight (the sites step one while the other's messages "
        "cross the link); \"auto\": where a far link's RTT is of the order of a round's compute (plan.pipeline "
        "says whether and why); algorithm dglmc with local_kernel laplace_mh or lmc",
    )
    secure_sums: bool = Field(
        default=False,
        description="the sites send their terms of the coordinator's sums masked (pairwise masks that cancel in "
        "the sum), so the coordinator reads only sums over sites (algorithm dglmc; docs/privacy.md)",
    )
    privacy: PrivacySpec | None = Field(
        default=None, description="the differential-privacy mode: {epsilon, delta, clip} (algorithm dglmc only)"
    )
    run_id: str | None = Field(
        default=None, pattern=ID_PATTERN, description="client-chosen id (makes submit idempotent)"
    )
    name: str | None = Field(
        default=None, min_length=1, max_length=200, description="a name to find the run by (GET /v1/runs?name=)"
    )
    tags: dict[Annotated[str, Field(pattern=TAG_KEY_PATTERN)], Annotated[str, Field(max_length=200)]] = Field(
        default_factory=dict,
        max_length=MAX_TAGS,
        description="key → value labels to find the run by (GET /v1/runs?tag=key:value)",
    )

    @model_validator(mode="after")
    def _shards_count(self) -> RunSpec:
        """With site shards the shard count is theirs: num_shards is taken from them (or must agree)."""
        if self.data.shards is not None:
            if "num_shards" in self.model_fields_set and self.num_shards != len(self.data.shards):
                raise ValueError(
                    f"num_shards={self.num_shards} but data.shards lists {len(self.data.shards)} "
                    "shards (omit num_shards with site shards)"
                )
            self.num_shards = len(self.data.shards)
            if self.shard_by is not None:
                raise ValueError("shard_by splits uploaded or built-in data; site shards are split already")
        elif self.shard_by is not None and self.shard_strategy is not None:
            raise ValueError("give shard_by or shard_strategy, not both (shard_by splits by group)")
        return self

    @property
    def chain_count(self) -> int:
        """The chains as a number: as given, or for "auto" the default count (the set-up may choose more; the run's
        record then holds the count it chose)."""
        return self.chains if isinstance(self.chains, int) else DEFAULT_CHAINS

    def response_column(self) -> str | None:
        """The column the run fits as its response: the formula's (the left of '~'; the successes of p(successes,
        trials)), else the site files' `data.y_column`, or "y" for a built-in data set; None for an uploaded one
        (its target column, chosen at upload)."""
        if self.model.formula is not None:
            from ...models.formula import read_formula

            return read_formula(self.model.formula).response[0]
        if self.data.shards is not None:
            return self.data.y_column
        return "y" if self.data.dataset is not None else None

    def sharding_column(self) -> str | None:
        """The column whose groups stay in one shard: `shard_by`, else with group effects the first grouping
        column (site shards: none, they are split already)."""
        if self.data.shards is not None:
            return None
        if self.shard_by is not None:
            return self.shard_by
        if self.model.group_effects and self.shard_strategy is None:
            return self.model.group_effects[0].group
        if self.model.formula is not None and self.shard_strategy is None:
            from ...models.formula import read_formula

            groups = read_formula(self.model.formula).groups
            return groups[0][0] if groups else None
        return None
