"""The service's request and response shapes (pydantic), in one place: the REST API and its OpenAPI document.

Names the engine knows (model families, algorithms, built-in data sets) are enumerated in the schema from the engine's
registries, and checked here, so a request the document allows is one the service accepts.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, field_validator, model_validator

from .. import datasets as rs_datasets
from .. import priors
from ..algorithms import ALGORITHMS
from ..models import FAMILIES, FAMILY_INFO, Family
from ..models.formula import FORMULA_FAMILIES
from ..models.groups import GroupEffects
from ..names import ID_PATTERN, SITE_PATTERN
from ..objectstore import UnsafeKey, is_uri, parse_uri
from ..options import AUTO_BURN_IN, AUTO_MAX_ROUNDS, DEFAULT_CHAINS, DEFAULT_MAX_RHAT, DEFAULT_TARGET_ESS, RunOptions
from ..predictive import PpcStatName
from ..wire import RunStatus, RunStopReason

TAG_KEY_PATTERN = ID_PATTERN  # a run tag's key (its value is free text)
MAX_TAGS = 32
SEED_MAX = 2**63 - 1  # a run's seed is stored as a signed 64-bit integer
BUILTIN_PREFIX = "builtin:"
MODEL_FAMILIES: tuple[str, ...] = tuple(sorted(FAMILIES))
ALGORITHM_NAMES: tuple[str, ...] = tuple(sorted(ALGORITHMS))
BUILTIN_DATASETS: tuple[str, ...] = tuple(BUILTIN_PREFIX + name for name in rs_datasets.available())
_RUN = RunOptions()  # the engine's defaults for a run's length and bookkeeping


def _one_of(value: str, valid: tuple[str, ...], what: str) -> str:
    if value not in valid:
        raise ValueError(f"unknown {what} {value!r}; valid: {', '.join(valid)}")
    return value


# Request models are strict: a value must have the JSON type the schema gives it ("4" or true is not an integer).


PositiveFloat = Annotated[float, Field(gt=0)]
#: A column of the data set, by name (per-row inputs that are not features).
ColumnName = Annotated[str, Field(min_length=1, max_length=256)]
#: A coefficient prior's scale: a positive number, or "inf" for a flat (improper) prior on that coefficient.
CoefScale = Annotated[float, Field(gt=0)] | Literal["inf"]


def _scale(value: Any) -> float | tuple[float, ...]:
    """JSON scale(s) → engine scale(s) ("inf" → math.inf)."""
    if isinstance(value, list):
        return tuple(float(v) for v in value)
    return float(value)


def _vector(value: float | list[float]) -> float | tuple[float, ...]:
    """JSON mean(s) → engine mean(s)."""
    return tuple(value) if isinstance(value, list) else value


class _PriorArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class NormalArgs(_PriorArgs):
    """Normal(mean, scale²) on each coefficient: scalars for all, or one value per coefficient (length d)."""

    mean: float | Annotated[list[float], Field(min_length=1)] = Field(default=0.0, description="prior mean(s)")
    scale: CoefScale | Annotated[list[CoefScale], Field(min_length=1)] = Field(
        default=1.0, description='prior sd(s); "inf" = flat on that coefficient'
    )


class StudentTArgs(_PriorArgs):
    """Student-t(nu, mean, scale) on each coefficient (scalars, or one value per coefficient)."""

    nu: PositiveFloat = Field(description="degrees of freedom")
    mean: float | Annotated[list[float], Field(min_length=1)] = Field(default=0.0, description="location(s)")
    scale: PositiveFloat | Annotated[list[PositiveFloat], Field(min_length=1)] = Field(
        default=1.0, description="scale(s)"
    )


class ScaleArgs(_PriorArgs):
    scale: PositiveFloat = Field(description="scale of the half distribution")


class HalfStudentTArgs(_PriorArgs):
    nu: PositiveFloat = Field(description="degrees of freedom")
    scale: PositiveFloat = Field(description="scale")


class ExponentialArgs(_PriorArgs):
    rate: PositiveFloat = Field(description="rate (1 / mean)")


class GammaArgs(_PriorArgs):
    """Gamma(shape, rate) on the parameter (brms' gamma(2, 0.1) on a Student-t's ν)."""

    shape: PositiveFloat = Field(description="shape")
    rate: PositiveFloat = Field(description="rate (shape / mean)")


class InverseGammaArgs(_PriorArgs):
    """InverseGamma(a, b) on the variance σ² (the conjugate prior of linear regression)."""

    a: PositiveFloat = Field(description="shape")
    b: PositiveFloat = Field(description="scale")


class FlatArgs(_PriorArgs):
    """Flat (improper) on the parameter, or on its logarithm with `log` (the Jeffreys-like 1/σ)."""

    log: bool = Field(default=False, description="flat on log of the parameter instead")


def _exactly_one(obj: BaseModel, what: str) -> None:
    given = [k for k in type(obj).model_fields if getattr(obj, k) is not None]
    if len(given) != 1:
        raise ValueError(
            f"{what} takes exactly one of {', '.join(type(obj).model_fields)}; got "
            f"{', '.join(given) if given else 'none'}"
        )


def _is_none(value: Any) -> bool:
    return value is None


def _one_key_schema(names: list[str]) -> dict[str, Any]:
    return {
        "minProperties": 1,
        "maxProperties": 1,
        "oneOf": [{"required": [n], "properties": {n: {"type": "object"}}} for n in names],
    }


class CoefPriorSpec(BaseModel):
    """The coefficients' prior, one distribution by name: {"normal": {"mean": 0, "scale": [100, 10, 10]}} or
    {"student_t": {"nu": 3, "scale": 2.5}}."""

    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra=_one_key_schema(["normal", "student_t"]))
    normal: NormalArgs | None = Field(default=None, exclude_if=_is_none)
    student_t: StudentTArgs | None = Field(default=None, exclude_if=_is_none)

    @model_validator(mode="after")
    def _one(self) -> CoefPriorSpec:
        _exactly_one(self, "a coefficient prior")
        return self

    def to_prior(self) -> priors.CoefPrior:
        if self.normal is not None:
            return priors.Normal(_vector(self.normal.mean), _scale(self.normal.scale))
        assert self.student_t is not None
        t = self.student_t
        return priors.StudentT(t.nu, _vector(t.mean), _scale(t.scale))


_POSITIVE = ["half_normal", "half_cauchy", "half_student_t", "exponential", "gamma", "inverse_gamma", "flat"]


class PositivePriorSpec(BaseModel):
    """A prior on a positive parameter (the noise sd σ, a dispersion φ, degrees of freedom ν, a shape), one
    distribution by name, e.g. {"half_cauchy": {"scale": 2.5}}, {"gamma": {"shape": 2, "rate": 0.1}},
    {"inverse_gamma": {"a": 2, "b": 1}} (on σ²) or {"flat": {}}."""

    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra=_one_key_schema(_POSITIVE))
    half_normal: ScaleArgs | None = Field(default=None, exclude_if=_is_none)
    half_cauchy: ScaleArgs | None = Field(default=None, exclude_if=_is_none)
    half_student_t: HalfStudentTArgs | None = Field(default=None, exclude_if=_is_none)
    exponential: ExponentialArgs | None = Field(default=None, exclude_if=_is_none)
    gamma: GammaArgs | None = Field(default=None, exclude_if=_is_none)
    inverse_gamma: InverseGammaArgs | None = Field(default=None, exclude_if=_is_none)
    flat: FlatArgs | None = Field(default=None, exclude_if=_is_none)

    @model_validator(mode="after")
    def _one(self) -> PositivePriorSpec:
        _exactly_one(self, "a prior on a positive parameter")
        return self

    def to_prior(self) -> priors.PositivePrior:
        if self.half_normal is not None:
            return priors.HalfNormal(self.half_normal.scale)
        if self.half_cauchy is not None:
            return priors.HalfCauchy(self.half_cauchy.scale)
        if self.half_student_t is not None:
            return priors.HalfStudentT(self.half_student_t.nu, self.half_student_t.scale)
        if self.exponential is not None:
            return priors.Exponential(self.exponential.rate)
        if self.gamma is not None:
            return priors.Gamma(self.gamma.shape, self.gamma.rate)
        if self.inverse_gamma is not None:
            return priors.InverseGamma(self.inverse_gamma.a, self.inverse_gamma.b)
        assert self.flat is not None
        return priors.Flat(log=self.flat.log)


class BetaArgs(_PriorArgs):
    """Beta(a, b) on a probability (brms' beta(1, 1) on a zero-inflation probability)."""

    a: PositiveFloat = Field(description="first shape")
    b: PositiveFloat = Field(description="second shape")


class ProbabilityPriorSpec(BaseModel):
    """A prior on a probability (the zero-inflation zi): {"beta": {"a": 1, "b": 1}}."""

    model_config = ConfigDict(extra="forbid", strict=True)
    beta: BetaArgs = Field(description="Beta(a, b) on the probability")

    def to_prior(self) -> priors.BetaPrior:
        return priors.BetaPrior(self.beta.a, self.beta.b)


class LKJArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    eta: PositiveFloat = Field(default=1.0, description="LKJ shape: 1 is uniform over correlation matrices")


class CorPriorSpec(BaseModel):
    """The prior on a grouping factor's correlation matrix: {"lkj": {"eta": 1}} (brms' lkj(1) is the default)."""

    model_config = ConfigDict(extra="forbid", strict=True)
    lkj: LKJArgs = Field(description="LKJ(eta) on the correlation matrix")

    def to_prior(self) -> priors.LKJ:
        return priors.LKJ(self.lkj.eta)


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

    def to_engine(self) -> GroupEffects:
        """The engine's `rs.GroupEffects` (its own checks name model.group_effects)."""
        sd_prior = self.sd_prior.to_prior() if self.sd_prior is not None else priors.HalfNormal(1.0)
        cor_prior = self.cor_prior.to_prior() if self.cor_prior is not None else priors.LKJ(1.0)
        return GroupEffects(self.group, self.intercept, tuple(self.slopes), sd_prior, self.correlated, cor_prior)


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
    noise_prior: PositivePriorSpec | None = Field(default=None, description="deprecated name of sigma_prior")
    dispersion_prior: PositivePriorSpec | None = Field(default=None, description="deprecated name of phi_prior")
    offset_column: str | None = Field(
        default=None,
        min_length=1,
        description="poisson, negative_binomial and their zero-inflated families: the column of log exposure (not a "
        "feature)",
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
        "Gamma, Beta, weibull, exponential, zero_inflated_poisson, zero_inflated_negbinomial, cumulative) or a "
        "built-in family's name, the priors are "
        "coef_prior (b), sd_prior (the group sds), cor_prior (cor: the correlations of a term's effects, correlated "
        "as in brms when one term has one bar and two effects or more; (1 + x1 || hospital) are not), sigma_prior "
        "(sigma), phi_prior (phi), nu_prior (nu), shape_prior (shape), zi_prior (zi), threshold_prior (Intercept) and "
        "gap_prior (delta), and each site builds its "
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
        return _one_of(value, (*MODEL_FAMILIES, *FORMULA_FAMILIES), "model family")

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
            return self
        clash = [
            n
            for n in ("prior_scale", "noise_sd", "offset_column", "trials_column", "censored_column", "group_effects")
            if getattr(self, n) is not None
        ] + list(self.model_extra or {})
        if clash:
            raise ValueError(f"model.{clash[0]} does not go with model.formula: the formula says it")
        return self

    def engine_model(self) -> Any:
        """The engine model this spec describes (unbound): the family with `params`, or the formula's model."""
        from ..models import get_model
        from ..models.formula import from_formula

        if self.formula is None:
            return get_model(self.family, **self.params())
        kinds = {
            "b": self.coef_prior,
            "sd": self.sd_prior,
            "cor": self.cor_prior,
            "sigma": self.sigma_prior,
            "phi": self.phi_prior,
            "nu": self.nu_prior,
            "shape": self.shape_prior,
            "zi": self.zi_prior,
            "Intercept": self.threshold_prior,
            "delta": self.gap_prior,
        }
        priors = {k: v.to_prior() for k, v in kinds.items() if v is not None}
        return from_formula(self.formula, self.family, priors)

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
            named += ["formula", "priors", "levels"]
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
        return None if value is None else _one_of(value, BUILTIN_DATASETS, "built-in data set")

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
        return _one_of(value, ALGORITHM_NAMES, "algorithm")


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
        description='chains, or "auto": 4, or more where a round is bound by the link to far sites rather than by '
        "their compute (chosen at set-up from the measured RTT; the run's plan says how many and why)",
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
    thin: int = Field(default=_RUN.thin, ge=1)
    seed: int = Field(default=_RUN.seed, ge=0, le=SEED_MAX, description="0 ≤ seed ≤ 2**63 - 1 (signed 64 bits)")
    time_budget_s: float | None = Field(default=None, gt=0)
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
            from ..models.formula import read_formula

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
            from ..models.formula import read_formula

            groups = read_formula(self.model.formula).groups
            return groups[0][0] if groups else None
        return None


class Progress(BaseModel):
    rounds_done: int = 0
    rounds_total: int = 0
    draws_stored: int = Field(0, description="durable draws per chain (each is one line per chain in /draws)")
    draws_total: int = Field(0, description="draws per chain the run will keep if it runs to the end")
    fraction: float = Field(
        0.0,
        ge=0,
        le=1,
        description='how far the run is, 0 to 1: rounds_done / rounds_total, or for num_rounds "auto" the worse of '
        "min bulk ESS / target_ess and an R-hat term (1 once max R-hat < max_rhat) at the last convergence check",
    )
    basis: Literal["rounds", "convergence"] = Field(
        "rounds", description='what `fraction` measures: "rounds", or "convergence" for num_rounds "auto"'
    )


class TripsInfo(BaseModel):
    """Round trips from the coordinator to the shards' processes, by phase: each costs at least one RTT."""

    setup: int = Field(0, description="tuning and start-up calls")
    warmup: int = Field(0, description="burn-in rounds")
    sampling: int = Field(0, description="kept rounds (a pipelined round counts its two halves)")
    capture: int = Field(0, description="captures of the run's state for its checkpoints")
    total: int = 0


class NetworkInfo(BaseModel):
    """What the run's messages cost on the network so far: round trips by phase (per-worker RTTs are in `workers`)."""

    trips: TripsInfo = Field(default_factory=lambda: TripsInfo(setup=0, warmup=0, sampling=0, capture=0, total=0))


class ReleaseInfo(BaseModel):
    """One kind of message a site sent (the release ledger): what quantity, the shape of one message, how many,
    their bytes, and how they went (masked: a secure sum's term; sealed: encrypted under the site's key; plain)."""

    quantity: str = Field(description='e.g. "z/rho", "local_accept", "step_time", "setup:newton_trial"')
    shape: list[int]
    messages: int
    bytes: int
    mode: Literal["masked", "sealed", "plain"]


class SiteLedgerInfo(BaseModel):
    """Everything one shard's site sent in the run, by kind, with its totals."""

    shard: int
    site: str | None = None
    messages: int = 0
    bytes: int = 0
    masked_bytes: int = 0
    sealed_bytes: int = 0
    plain_bytes: int = 0
    releases: list[ReleaseInfo] = Field(default_factory=list)


class RunLedger(BaseModel):
    """GET /v1/runs/{id}/ledger: the release ledger of the run's shards (of one site with ?site=)."""

    run_id: str
    site: str | None = Field(None, description="the site asked for (null: every shard)")
    shards: list[SiteLedgerInfo]


class WorkerStats(BaseModel):
    shard: int
    site: str | None = Field(None, description="the site label of the node the shard's worker runs on")
    rows: int | None = Field(None, description="the rows of its shard (known after the run's set-up)")
    node_id: str | None = Field(None, description="Ray node id of the worker")
    hostname: str | None = None
    pid: int | None = Field(None, description="the worker process")
    tau_s: float | None = Field(None, description="measured seconds per local step τ_i")
    local_steps: int | None = Field(None, description="local step count N_i")
    idle_fraction: float | None = None
    channel: str | None = Field(
        None, description='how its process gets each round: "tcp", "shm" (shared memory), "actor"; None in-process'
    )
    setup_rtt_s: float | None = Field(None, description="its process's round-trip time at set-up (a Ray call)")
    rtt_s: float | None = Field(
        None, description="its process's round-trip time on its round channel: the least over the recent rounds"
    )
    rtt_median_s: float | None = Field(None, description="the same, the median over the recent rounds")
    ledger: SiteLedgerInfo | None = Field(
        None, description="the release ledger: every message its site sent so far, by kind (GET /v1/runs/{id}/ledger)"
    )
    epsilon_spent: float | None = Field(
        None, description="the DP mode (spec.privacy): ε(δ) its site has spent so far, over every release"
    )
    clip_rate: float | None = Field(
        None, description="the DP mode: the fraction of its per-example gradients clipped at privacy.clip"
    )


class FailureInfo(BaseModel):
    """Why a run stopped, and where: the engine's failure record."""

    kind: str = Field(
        description="worker_error, worker_lost, non_finite, coordinator_non_finite, coordinator_lost, "
        "site_unavailable, checkpoint or access"
    )
    message: str
    round: int | None = None
    shard: int | None = None
    site: str | None = None
    node_id: str | None = None
    traceback: str | None = None


class DiagnosticsInfo(BaseModel):
    """Convergence diagnostics of the stored draws (arviz-stats)."""

    min_ess_bulk: float | None = Field(None, description="smallest bulk ESS over the parameters")
    max_rhat: float | None = Field(None, description="largest rank-normalised split R-hat over the parameters")
    draws: int = Field(0, description="draws per chain they were computed on")
    chains: int = 0
    rule: Literal["split_rhat", "nested_rhat"] = Field(
        "split_rhat",
        description="the R-hat the convergence rule reads: split R-hat, or with 16 chains or more nested R-hat over "
        "superchains (then max_nested_rhat)",
    )
    superchains: int = Field(1, description="superchains of the nested R-hat (1: the plain rule)")
    max_nested_rhat: float | None = Field(None, description="largest rank-normalised nested R-hat (many chains)")

    @property
    def rule_rhat(self) -> float | None:
        """The R-hat the rule reads."""
        return self.max_nested_rhat if self.rule == "nested_rhat" else self.max_rhat


class RunInfo(BaseModel):
    """A run as the API shows it."""

    id: str
    name: str | None = Field(None, description="the spec's name")
    tags: dict[str, str] = Field(default_factory=dict, description="the spec's tags")
    status: RunStatus
    created_at: float
    started_at: float | None = None
    finished_at: float | None = None
    spec: RunSpec
    progress: Progress
    timings: dict[str, float] = Field(default_factory=dict)
    workers: list[WorkerStats] = Field(default_factory=list)
    param_names: list[str] | None = None
    response: str | None = Field(
        None,
        description="the column fitted as the response: a formula's left-hand side (whatever data.y_column says), "
        "the site files' y_column, 'y' for a built-in data set; null for an uploaded one (its upload's target)",
    )
    error: str | None = None
    warnings: list[str] = Field(
        default_factory=list,
        description="the submit's (planned draw bytes over RAYSAMPLER_WARN_DRAW_BYTES), then the run's own",
    )
    plan: dict[str, Any] | None = Field(None, description="tuned settings and their predicted bias (from setup)")
    failure: FailureInfo | None = None
    diagnostics: DiagnosticsInfo | None = None
    restarts: int = Field(0, description="times the run resumed from its checkpoint after a failure or restart")
    checkpoint_round: int | None = Field(None, description="round of the last checkpoint (stored with its draws)")
    stop_reason: RunStopReason | None = Field(
        None,
        description="why a finished run stopped: converged, num_rounds, time_budget, cancelled, max_rounds, failed or "
        "privacy_budget (the DP mode's budget)",
    )
    replica: str | None = Field(
        None,
        description="the service replica driving the run (it holds the run's lease); None while no replica does",
    )
    chains: int = Field(0, description='the chains it runs (with chains "auto", as the set-up chose; see plan)')
    network: NetworkInfo | None = Field(None, description="round trips by phase (set once the run starts)")


class RunList(BaseModel):
    runs: list[RunInfo]
    next_cursor: str | None = None


class DatasetInfo(BaseModel):
    id: str
    name: str
    n: int
    d: int
    created_at: float
    bytes: int


class DatasetList(BaseModel):
    datasets: list[DatasetInfo]


class ModelFamilyInfo(BaseModel):
    """A model family a run spec may name: built-in, or registered by an installed package (entry-point group
    `raysampler.models`), with the JSON schema of the parameters its `model` object takes."""

    name: str
    description: str = Field(description="the first line of the family's docstring")
    builtin: bool
    distribution: str | None = Field(description="the installed distribution that registers it (null: built-in)")
    parameters: dict[str, Any] = Field(
        description="JSON schema of the family's parameters in a run spec's `model` object (besides `family`)"
    )


class ModelFamilyList(BaseModel):
    families: list[ModelFamilyInfo]


#: An engine model argument → its name in ModelSpec, where the two differ (per-row inputs are given by column).
REST_PARAM = {"offset": "offset_column", "trials": "trials_column", "censored": "censored_column"}


def family_parameters_schema(family: Family) -> dict[str, Any]:
    """The JSON schema of a family's declared parameters as a run spec gives them: the names and schemas of
    ModelSpec's own fields (priors by name, per-row inputs by column) where the engine argument has one, else derived
    from the dataclass field's type (pydantic), with its default and its metadata `description`."""
    spec_schema = ModelSpec.model_json_schema()
    spec_props = spec_schema["properties"]
    props: dict[str, Any] = {}
    required = []
    for param in family.params():
        rest = REST_PARAM.get(param.name, param.name)
        if rest in spec_props and rest != "family":
            prop = dict(spec_props[rest])
        else:
            try:
                prop = TypeAdapter(param.type).json_schema()
            except Exception:  # a type pydantic cannot describe: no constraint in the schema, the engine checks it
                prop = {}
            if not param.required:
                try:
                    prop["default"] = TypeAdapter(param.type).dump_python(param.default, mode="json")
                except Exception:
                    pass
        if param.description and "description" not in prop:  # the REST field's own description wins
            prop["description"] = param.description
        if param.required:
            required.append(rest)
        props[rest] = prop
    out: dict[str, Any] = {"type": "object", "properties": props, "additionalProperties": False}
    if required:
        out["required"] = required
    if "$defs" in spec_schema:
        out["$defs"] = spec_schema["$defs"]
    return out


def model_families() -> ModelFamilyList:
    """Every registered family (`rs.models.FAMILY_INFO`), built-ins first in registration order."""
    return ModelFamilyList(
        families=[
            ModelFamilyInfo(
                name=fam.name,
                description=fam.description,
                builtin=fam.builtin,
                distribution=fam.distribution,
                parameters=family_parameters_schema(fam),
            )
            for fam in FAMILY_INFO.values()
        ]
    )


class ErrorMessage(BaseModel):
    """The body of an error response other than 422."""

    detail: str


class RunSummary(BaseModel):
    """Posterior summary of the draws stored so far: one row per coordinate, `columns` in order."""

    run_id: str
    status: RunStatus
    draws_per_chain: int
    chains: int
    ci_prob: float
    columns: list[str]
    rows: list[dict[str, str | float | None]] = Field(
        description='{"param": name} plus one value per column (null where not finite)'
    )


class EffectsTable(BaseModel):
    """brms-style summaries of a run's stored draws (`raysampler.effects`): kind "fixef" (the coefficients), "ranef"
    (each group's effects), "coef" (each group's coefficients, fixed plus its effect) or "prior" (the prior on every
    parameter); one row per coefficient, effect or prior: `index` names it (group label, effect or coefficient)."""

    run_id: str
    kind: Literal["fixef", "ranef", "coef", "prior"]
    columns: list[str]
    rows: list[dict[str, str | float | list[str] | None]] = Field(
        description='{"group": grouping column (ranef, coef), "index": [label, ...]} plus one value per column'
    )


class PpcDensityInfo(BaseModel):
    """A density overlay (`kind` "dens"): on `grid`, the observed y's density and each replicated data set's
    (`replicated`, one row per draw), each a Gaussian kernel density of counts binned at the shards, with its
    bandwidth (`bandwidth`: the observed's, then each replicated's)."""

    run_id: str
    kind: Literal["dens"]
    n: int = Field(description="rows of the run's data")
    response: str = Field("y", description="the response's name (a formula's left-hand side, else y): the plot's axis")
    grid: list[float]
    bandwidth: list[float]
    observed: list[float]
    replicated: list[list[float]]


class PpcHistogramInfo(BaseModel):
    """Histograms (`kind` "hist") of the observed y and of each replicated data set on the same bins (`edges`):
    counts, summed over the shards."""

    run_id: str
    kind: Literal["hist"]
    n: int = Field(description="rows of the run's data")
    response: str = Field("y", description="the response's name (a formula's left-hand side, else y): the plot's axis")
    edges: list[float]
    observed: list[int]
    replicated: list[list[int]]


class PpcStatInfo(BaseModel):
    """A test statistic (`kind` "stat"): its value on the observed y, on each replicated data set, and the posterior
    predictive p-value P(T(y_rep) ≥ T(y)); null where it is not finite (sd of one row)."""

    run_id: str
    kind: Literal["stat"]
    n: int = Field(description="rows of the run's data")
    response: str = Field("y", description="the response's name (a formula's left-hand side, else y): the plot's axis")
    stat: PpcStatName
    observed: float | None
    replicated: list[float | None]
    p_value: float


class PpcStatGroupedInfo(BaseModel):
    """A test statistic per group (`kind` "stat_grouped", asked for with `group=`): per label of the data's column
    `group` (text as given, numbers as numbers), its rows, T(y) and T(y_rep) of each replicated data set, and the
    posterior predictive p-value; null where a value is not finite."""

    run_id: str
    kind: Literal["stat_grouped"]
    response: str = Field("y", description="the response's name (a formula's left-hand side, else y): the plot's axis")
    stat: PpcStatName
    group: str
    labels: list[str | int | float]
    n: list[int] = Field(description="rows per group")
    observed: list[float | None]
    replicated: list[list[float | None]] = Field(description="per group, T of each replicated data set")
    p_values: list[float]


#: GET /v1/runs/{id}/ppc: one of the four, told apart by `kind`.
PpcInfo = Annotated[PpcDensityInfo | PpcHistogramInfo | PpcStatInfo | PpcStatGroupedInfo, Field(discriminator="kind")]


class Trace(BaseModel):
    """One parameter's stored draws, evenly thinned to at most `max_points` per chain (for plots): draw indices
    `index`, and `values[c]` chain c's values at them on the parameter's natural scale (null where not finite)."""

    run_id: str
    param: int = Field(description="the coordinate's position in param_names")
    name: str
    draws_stored: int
    step: int = Field(description="every step-th draw of the window is included")
    index: list[int]
    values: list[list[float | None]]


class ParamDiagnostics(BaseModel):
    """The plots ArviZ users read for one parameter, as bounded arrays (arviz-stats): per-chain rank histograms,
    per-chain autocorrelation, and bulk and tail ESS against the number of draws. Computed on at most `max_draws` per
    chain of the stored draws, evenly thinned (every `step`-th draw; autocorrelation lags count those draws)."""

    run_id: str
    param: int = Field(description="the coordinate's position in param_names")
    name: str
    draws_stored: int
    chains: int
    step: int = Field(description="every step-th stored draw was used")
    draws_used: int = Field(description="draws per chain the diagnostics were computed on")
    rank_bins: int
    rank_counts: list[list[int]] = Field(
        description="per chain, how many of its draws fall in each of rank_bins equal bins of the ranks over all chains"
    )
    autocorr: list[list[float | None]] = Field(description="per chain, autocorrelation at lags 0, 1, …, max_lag")
    ess_draws: list[int] = Field(description="draws per chain (stored, before thinning) at each ESS point")
    ess_bulk: list[float | None]
    ess_tail: list[float | None]
    r_hat: float | None = Field(None, description="rank-normalised split R-hat on the draws used")


class NodeWorker(BaseModel):
    """A worker of one of the caller's running runs, placed on a node."""

    run_id: str
    shard: int
    tau_s: float | None = Field(None, description="measured seconds per local step τ_i")


class ClusterNode(BaseModel):
    """A Ray node: its site label, CPUs, and the workers placed on it."""

    node_id: str
    hostname: str | None = None
    alive: bool
    site: str | None = Field(None, description="the node's raysampler.io/site label (none: not a site's node)")
    cpus: float = Field(0.0, description="the node's CPU resource")
    workers: list[NodeWorker] = Field(default_factory=list, description="the caller's running workers on the node")
    other_workers: int = Field(0, description="workers of other tenants' runs on the node (a count only)")


class QueuedRun(BaseModel):
    """One of the caller's runs waiting to sample, and where it stands in the service's queue."""

    run_id: str
    name: str | None = None
    position: int = Field(description="1 starts next; counts every tenant's waiting runs (served round-robin)")


class QuotaUse(BaseModel):
    """The caller's use of the service's limits (a limit of null is no limit)."""

    active_runs: int = Field(description="PENDING + RUNNING runs")
    max_active_runs: int | None = None
    stored_bytes: int = Field(description="draws, checkpoints and uploaded data sets")
    max_stored_bytes: int | None = None
    max_chains_x_dim: int | None = None
    max_draw_bytes: int | None = None


class ClusterView(BaseModel):
    """What an operator looks at: the nodes and the caller's workers on them, the queue, the caller's quota use,
    and where Ray's own dashboard is (when the operator gave its address)."""

    executor: Literal["ray", "local"]
    ray_connected: bool
    nodes: list[ClusterNode]
    running_runs: int = Field(description="runs sampling now, every tenant's")
    max_concurrent_runs: int
    queued_total: int = Field(description="runs waiting, every tenant's")
    queue: list[QueuedRun] = Field(description="the caller's waiting runs, in queue order")
    quota: QuotaUse
    ray_dashboard_url: str | None = Field(None, description="RAYSAMPLER_RAY_DASHBOARD_URL, for a link")


class Health(BaseModel):
    status: Literal["ok"]
    executor: Literal["ray", "local"]
    ray_connected: bool


class VersionInfo(BaseModel):
    version: str
    algorithms: list[str]
    model_families: list[str]
    builtin_datasets: list[str]


# --- checks of a fit: predictions, held-out metrics, PSIS-LOO, comparison ------------------------------------------

#: Most rows a predict request may carry inline (larger sets: upload them and give dataset_id).
MAX_INLINE_ROWS = 10_000
#: How many posterior draws a check uses: at most this many (thinned evenly within each chain), or "all".
DrawsChoice = Annotated[int, Field(ge=1, le=1_000_000)] | Literal["all"]
_DRAWS_DOC = 'posterior draws used: at most this many, thinned evenly within each chain, or "all" (every stored draw)'


class PredictRequest(BaseModel):
    """Body of POST /v1/runs/{id}/predict: new rows inline (`rows`, with their `columns` when known) or an uploaded
    data set (`dataset_id`: its X), and what to return."""

    # exactly one of rows and dataset_id, in the schema too; columns only with rows
    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={
            "oneOf": [
                {"required": ["rows"], "properties": {"rows": {"type": "array"}, "dataset_id": {"type": "null"}}},
                {
                    "required": ["dataset_id"],
                    "properties": {
                        "dataset_id": {"type": "string"},
                        "rows": {"type": "null"},
                        "columns": {"type": "null"},
                    },
                },
            ]
        },
    )
    rows: list[Annotated[list[float | str], Field(min_length=1, max_length=100_000)]] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_INLINE_ROWS,
        description="new rows: with `columns`, read by those names (any order; a formula model needs the columns its "
        "formula reads, not the response); without, in the run's data's column order (a formula's response may be "
        'left out). Numbers, and text where the data had text (a group\'s label, e.g. "St Mary", or a category)',
    )
    columns: list[ColumnName] | None = Field(
        default=None,
        min_length=1,
        description="the rows' column names, in the rows' order: the rows are read by name",
    )
    dataset_id: str | None = Field(default=None, pattern=ID_PATTERN, description="id from POST /v1/datasets")
    kind: Literal["mean", "draws", "interval", "epred", "linpred", "predict"] = Field(
        default="mean",
        description="mean: E[y|x] per row (class probabilities for a multiclass model); interval: the central `prob` "
        "interval per row; per draw (draws × rows): epred E[y|x], linpred the linear predictor (before the inverse "
        "link), predict (or draws) predictive draws of y",
    )
    draws: DrawsChoice = Field(default=1000, description=_DRAWS_DOC)
    prob: float = Field(default=0.9, gt=0, lt=1, description="with kind=interval")
    seed: int = Field(default=0, ge=0, le=SEED_MAX, description="seeds the predictive draws and new groups' effects")
    re_formula: Literal["NA", "~0"] | None = Field(
        default=None,
        description='null: every group term; "NA" or "~0" (brms\' spellings): none, population-level predictions',
    )
    allow_new_levels: bool = Field(
        default=True,
        description="a group label the run never saw gets effects drawn from its group's distribution; false: "
        "refused, naming the level",
    )

    @model_validator(mode="after")
    def _one_source(self) -> PredictRequest:
        if (self.rows is None) == (self.dataset_id is None):
            raise ValueError("give exactly one of rows (inline) or dataset_id (an uploaded data set)")
        if self.columns is not None and self.rows is None:
            raise ValueError("columns names the inline rows' columns; an uploaded data set has its own")
        return self


class Prediction(BaseModel):
    """The posterior predictive at the rows asked for: `values` is (rows,) for kind=mean ((rows, classes) for a
    multiclass model), (rows, 2) [lower, upper] for kind=interval, (draws, rows) for kind=epred, linpred, predict
    and draws ((draws, rows, classes) for epred of a multiclass model)."""

    run_id: str
    kind: Literal["mean", "draws", "interval", "epred", "linpred", "predict"]
    n_rows: int
    draws_used: int
    values: list[Any]


class EvaluateRequest(BaseModel):
    """Body of POST /v1/runs/{id}/evaluate: held-out data (a built-in data set, an uploaded one, or shard files on
    their sites, read only there) and the metrics' settings."""

    model_config = ConfigDict(extra="forbid", strict=True)
    data: DataRef
    draws: DrawsChoice = Field(default=1000, description=_DRAWS_DOC)
    bins: int = Field(default=10, ge=1, le=1000, description="equal-width confidence bins of the ECE")
    seed: int = Field(default=0, ge=0, le=SEED_MAX, description="seeds the predictive draws (CRPS, coverage)")


class ReliabilityBinInfo(BaseModel):
    """One bin of the reliability curve: confidence in [lo, hi), rows in it, their mean confidence and accuracy."""

    lo: float
    hi: float
    count: int
    confidence: float | None
    accuracy: float | None


class Evaluation(BaseModel):
    """Held-out metrics computed where the rows are. kind=classification: accuracy, nll, brier (on the predicted
    class), ece and the reliability curve; kind=regression: rmse, nll, crps, coverage_50 and coverage_90."""

    run_id: str
    kind: Literal["classification", "regression"]
    n: int
    draws_used: int
    nll: float
    accuracy: float | None = None
    brier: float | None = None
    ece: float | None = None
    reliability: list[ReliabilityBinInfo] | None = None
    rmse: float | None = None
    crps: float | None = None
    coverage_50: float | None = None
    coverage_90: float | None = None


class RowRefInfo(BaseModel):
    """A row by position only: its shard, its position there, and its row of the original data when known."""

    shard: int
    row: int
    index: int | None = None


class WarnedRowInfo(BaseModel):
    """A row the LOO warning concerns (its Pareto k above `good_k`): where it is, and its k (null: the fit failed)."""

    row: RowRefInfo
    k: float | None


class MatchedRowInfo(BaseModel):
    """What moment matching did to one row whose Pareto k was ≥ 0.7: k and elpd_i by PSIS and after matching, the
    Monte-Carlo SE of the matched elpd_i, the affine maps kept, and whether the matched values are used (k went
    down)."""

    row: RowRefInfo
    k_psis: float | None
    k_after: float | None
    elpd_psis: float | None
    elpd_after: float | None
    mcse_after: float | None
    maps: int
    used: bool


class LooInfo(BaseModel):
    """PSIS-LOO of a run on the rows it was fitted on, computed where they are: elpd and its SE, p_loo, Pareto-k
    counts by band — flat rows (log-likelihood span below `flat_span` over the draws: uniform weights, k = 0), the
    others with k < 0.7 and k ≥ 0.7 — the rows with k ≥ 0.7, and with moment_match=true what moment matching did to
    each of them (null when it was not asked for)."""

    run_id: str
    elpd: float | None
    se: float | None
    p_loo: float | None
    n_data_points: int
    n_samples: int
    good_k: float
    warning: bool
    k_flat: int
    k_ok: int
    k_high: int
    flat_span: float
    high_k_rows: list[RowRefInfo]
    moment_matched: list[MatchedRowInfo] | None = None
    warning_rows: list[WarnedRowInfo] = Field(
        default_factory=list, description="the rows the warning concerns (Pareto k above good_k), largest k first"
    )


class BayesR2Info(BaseModel):
    """The residual-based Bayesian R² of a run (Gelman et al. 2019; brms' `bayes_R2`), computed where the rows are:
    var(ŷ) / (var(ŷ) + var(y − ŷ)) over the rows, per draw, summarised by its mean, sd and central 95 % interval."""

    run_id: str
    n_samples: int
    estimate: float | None
    est_error: float | None
    lower: float | None = Field(description="the 2.5 % quantile over the draws")
    upper: float | None = Field(description="the 97.5 % quantile over the draws")


class CompareRequest(BaseModel):
    """Body of POST /v1/compare: runs fitted on the same rows, by id."""

    model_config = ConfigDict(extra="forbid", strict=True)
    runs: list[Annotated[str, Field(pattern=ID_PATTERN)]] = Field(
        min_length=2, max_length=20, json_schema_extra={"uniqueItems": True}, description="distinct run ids"
    )
    draws: DrawsChoice = Field(default=1000, description=_DRAWS_DOC)
    method: Literal["pseudo-bma", "stacking"] = Field(
        default="pseudo-bma",
        description="model weights: pseudo-BMA (exp(elpd), normalised) or stacking of the predictive distributions",
    )

    @field_validator("runs")
    @classmethod
    def _distinct(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError("runs must be distinct run ids")
        return value


class ComparisonRowInfo(BaseModel):
    """One run in a comparison (arviz-stats' columns): rank (0 best), elpd and SE, p_loo, elpd difference to the
    best and its SE from paired per-row differences, weight (pseudo-BMA or stacking), and whether a Pareto k was
    high."""

    run_id: str
    rank: int
    elpd: float | None
    se: float | None
    p_loo: float | None
    elpd_diff: float | None
    dse: float | None
    weight: float | None
    warning: bool


class Comparison(BaseModel):
    """POST /v1/compare's answer: runs best first, and how the weights were found."""

    rows: list[ComparisonRowInfo]
    method: Literal["pseudo-bma", "stacking"] = "pseudo-bma"
