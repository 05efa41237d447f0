"""Priors as a request states them: one kind per prior, `{"normal": {"loc": 0, "scale": 2.5}}`, for coefficients,
positive parameters, probabilities and correlations; each checked against the engine's prior and built by it."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ... import priors
from .common import PositiveFloat

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
