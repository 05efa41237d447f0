"""Checks of a fit: predictions at new rows, held-out metrics, PSIS-LOO, the Bayesian R² and comparisons of runs."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ...names import ID_PATTERN
from .common import DRAWS_DOC, MAX_INLINE_ROWS, SEED_MAX, ColumnName, DrawsChoice
from .runs import DataRef


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
    draws: DrawsChoice = Field(default=1000, description=DRAWS_DOC)
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
    draws: DrawsChoice = Field(default=1000, description=DRAWS_DOC)
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
    draws: DrawsChoice = Field(default=1000, description=DRAWS_DOC)
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
