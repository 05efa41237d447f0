"""Posteriors without a closed form, with long-run references on pooled data cached under tests/data/models/ by
scripts/make_model_references.py: per-coefficient prior scales with unknown noise, a Student-t coefficient prior,
Poisson with an offset column, binomial with a trials column, negative binomial; group effects
(scripts/make_group_references.py) and the families brms users fit (scripts/make_family_references.py) by NUTS.

Each problem's data is a CSV file (target column "y", every other column in X, named); its model reads the offset or
trials from a column by name. `reference(name)` gives the cached summaries of θ (the sampler's unconstrained
coordinates) and a thinned set of the reference draws.
"""

from __future__ import annotations

import pathlib
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from raysampler.models import (
    BetaRegression,
    BinomialRegression,
    CumulativeProbitRegression,
    CumulativeRegression,
    DataSpec,
    ExponentialRegression,
    GammaRegression,
    GroupEffects,
    HurdleNegativeBinomialRegression,
    HurdlePoissonRegression,
    LinearRegression,
    LogisticRegression,
    Model,
    NegativeBinomialRegression,
    PoissonRegression,
    StudentTRegression,
    WeibullRegression,
    ZeroInflatedNegativeBinomialRegression,
    ZeroInflatedPoissonRegression,
)
from raysampler.models.gaussian_sigma import GaussianSigmaRegression
from raysampler.priors import HalfCauchy, HalfNormal, Normal, StudentT
from raysampler.shards import read_table

DATA_DIR = pathlib.Path(__file__).resolve().parents[1] / "data" / "models"


@dataclass(frozen=True)
class ReferenceProblem:
    """A named model (unbound) and where its data and cached reference live."""

    name: str
    model: Model

    @property
    def data_path(self) -> pathlib.Path:
        return DATA_DIR / f"{self.name}.csv"

    @property
    def reference_path(self) -> pathlib.Path:
        return DATA_DIR / f"{self.name}_reference.npz"

    def load(self) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
        """(X, y, X's column names) from the CSV file."""
        table = read_table(str(self.data_path))
        return table.X, table.y, table.columns

    def bound(self) -> Model:
        X, y, columns = self.load()
        return self.model.bind(DataSpec(X.shape[1], n_rows=X.shape[0], columns=columns))


class Reference(NamedTuple):
    """Summaries of θ's coordinates from the long MALA run, and a thinned subset of its draws (chains, draws, d)."""

    names: list[str]
    mean: np.ndarray
    sd: np.ndarray
    quantiles: np.ndarray  # (len(probs), d)
    probs: np.ndarray
    mcse_mean: np.ndarray
    ess_bulk: np.ndarray
    rhat: np.ndarray
    thinned: np.ndarray


PROBLEMS: dict[str, ReferenceProblem] = {
    p.name: p
    for p in (
        ReferenceProblem(
            "linear_per_coef",
            LinearRegression(
                coef_prior=Normal([0.0, 0.5, 0.0, 0.0], [10.0, 0.2, 1.0, 0.1]), sigma_prior=HalfCauchy(2.5)
            ),
        ),
        ReferenceProblem(
            "logistic_student_t", LogisticRegression(coef_prior=StudentT(3.0, 0.0, [10.0, 1.0, 1.0, 1.0]))
        ),
        ReferenceProblem(
            "poisson_offset", PoissonRegression(coef_prior=Normal(0.0, [5.0, 1.0, 1.0]), offset="log_exposure")
        ),
        ReferenceProblem("binomial_trials", BinomialRegression(coef_prior=Normal(0.0, 2.5), trials="trials")),
        ReferenceProblem(
            "negative_binomial",
            NegativeBinomialRegression(coef_prior=Normal(0.0, 5.0), offset="log_exposure", phi_prior=HalfNormal(10.0)),
        ),
    )
}


@dataclass(frozen=True)
class GroupProblem(ReferenceProblem):
    """A hierarchical GLM with group effects by column "g" (intercept, plus `slopes`), sd prior HalfNormal(1) and
    coefficient prior Normal(0, coef_scale); referenced by NUTS on the pooled data (scripts/make_group_references.py),
    in brms names on the natural scale (sd, σ)."""

    family: str = "logistic"
    slopes: tuple[str, ...] = ()
    coef_scale: float = 2.5
    correlated: bool = False  # correlated effects, LKJ(1) on their correlation matrix


def _group_problem(name: str, family: str, slopes: tuple[str, ...] = (), correlated: bool = False) -> GroupProblem:
    ge = GroupEffects("g", slopes=slopes, sd_prior=HalfNormal(1.0), correlated=correlated)
    prior = Normal(0.0, 2.5)
    model: Model
    if family == "linear":
        model = LinearRegression(coef_prior=prior, sigma_prior=HalfNormal(10.0), group_effects=ge)
    elif family == "logistic":
        model = LogisticRegression(coef_prior=prior, group_effects=ge)
    else:
        model = PoissonRegression(coef_prior=prior, offset="log_exposure", group_effects=ge)
    return GroupProblem(name, model, family, slopes, 2.5, correlated)


#: group effects: a varying intercept and slope (linear), a logistic and a Poisson case, the funnel (2–5 rows per
#: group), 400 groups (hundreds per shard), and a correlated intercept and slope (logistic, LKJ(1))
GROUP_PROBLEMS: dict[str, GroupProblem] = {
    p.name: p
    for p in (
        _group_problem("hier_linear", "linear", ("x",)),
        _group_problem("hier_logistic", "logistic"),
        _group_problem("hier_poisson", "poisson"),
        _group_problem("hier_funnel", "logistic"),
        _group_problem("hier_many", "poisson"),
        _group_problem("hier_correlated", "logistic", ("x",), correlated=True),
    )
}


#: the families brms users fit (issue 48 item 4) at their default priors (brms' own: Gamma(2, 0.1) on ν, Gamma(0.01,
#: 0.01) on a shape or precision), referenced by NUTS on the pooled data (scripts/make_family_references.py), in brms
#: names on the natural scale; the survival problems read their censoring indicator from column "censored", the
#: zero-inflated Poisson and negative binomial their offset from "log_exposure" (BetaPrior(1, 1) on zi, HalfCauchy(10)
#: on the negative binomial's φ)
FAMILY_PROBLEMS: dict[str, ReferenceProblem] = {
    p.name: p
    for p in (
        ReferenceProblem("family_student", StudentTRegression()),
        ReferenceProblem("family_gamma", GammaRegression()),
        ReferenceProblem("family_beta", BetaRegression()),
        ReferenceProblem("family_weibull", WeibullRegression(censored="censored")),
        ReferenceProblem("family_exponential", ExponentialRegression(censored="censored")),
        ReferenceProblem("family_zip", ZeroInflatedPoissonRegression(offset="log_exposure")),
        ReferenceProblem("family_zinb", ZeroInflatedNegativeBinomialRegression(offset="log_exposure")),
        ReferenceProblem("family_cumulative", CumulativeRegression(n_categories=4)),
        ReferenceProblem("family_sigma", GaussianSigmaRegression(sigma_columns=("sigma_(Intercept)", "sigma_x2"))),
        ReferenceProblem("family_cumulative_probit", CumulativeProbitRegression(n_categories=4)),
        ReferenceProblem("family_hurdle_poisson", HurdlePoissonRegression(offset="log_exposure")),
        ReferenceProblem("family_hurdle_nb", HurdleNegativeBinomialRegression(offset="log_exposure")),
    )
}


def reference(name: str) -> Reference:
    problem = PROBLEMS.get(name) or GROUP_PROBLEMS.get(name) or FAMILY_PROBLEMS[name]
    with np.load(problem.reference_path, allow_pickle=False) as f:
        return Reference(
            [str(n) for n in f["names"]],
            f["mean"],
            f["sd"],
            f["quantiles"],
            f["probs"],
            f["mcse_mean"],
            f["ess_bulk"],
            f["rhat"],
            f["thinned"],
        )
