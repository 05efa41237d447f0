"""Rejected arguments raise `ArgumentError` whose `.path` names them (and which survives pickling, as through Ray);
the service maps that path to the 422's `loc` through one table (`specs.REST_LOC`); run warnings carry a kind."""

from __future__ import annotations

import math
import pickle
import warnings

import pytest
from support.service_helpers import SERVICE_KEYS

import raysampler as rs
from raysampler.algorithms import get_algorithm
from raysampler.diagnostics import Diagnostics, RunWarning, WarningKind
from raysampler.errors import ArgumentError
from raysampler.models import get_model
from raysampler.options import RunOptions
from raysampler.priors import Normal
from raysampler.runtime.binding import validate_run


@pytest.fixture(scope="module")
def data():
    X, y = rs.datasets.load("breast_cancer")
    return X, y


def test_argument_error_is_a_value_error_that_pickles():
    exc = ArgumentError(("model", "coef_prior", "scale"), "coef_prior: scale must be > 0")
    back = pickle.loads(pickle.dumps(exc))
    assert isinstance(back, ValueError) and back.path == exc.path and str(back) == str(exc)
    assert exc.within("outer").path == ("outer", "model", "coef_prior", "scale")


@pytest.mark.parametrize(
    "make, path",
    [
        (lambda X, y: RunOptions(num_rounds=-1), ("num_rounds",)),
        (lambda X, y: RunOptions(time_budget_s=0), ("time_budget_s",)),
        (lambda X, y: RunOptions(num_rounds=10, max_rounds=5), ("max_rounds",)),
        (lambda X, y: Normal(0.0, -1.0), ("scale",)),
        (lambda X, y: Normal(0.0, [1.0, -1.0]), ("scale", 1)),
        (lambda X, y: get_model("no_such_family"), ("model", "family")),
        (lambda X, y: get_model("logistic_regression", bogus=1), ("model", "bogus")),
        (lambda X, y: rs.models.LogisticRegression(prior_scale=-1.0), ("model", "prior_scale")),
        (lambda X, y: rs.models.LinearRegression(noise_sd=0.0), ("model", "noise_sd")),
        (lambda X, y: rs.models.LogisticRegression(coef_prior=1.0), ("model", "coef_prior")),
        (lambda X, y: get_algorithm("dglmc", n_local=0), ("algorithm", "n_local")),
        (lambda X, y: rs.shard(X, y, num_shards=0), ("num_shards",)),
        (lambda X, y: rs.shard(X, y, num_shards=2, strategy="bogus"), ("strategy",)),
    ],
)
def test_python_errors_carry_the_argument_path(data, make, path):
    with pytest.raises(ArgumentError) as info:
        make(*data)
    assert info.value.path == path, info.value


def test_validate_run_binds_without_workers_and_names_bad_algorithm_shapes(data):
    shards = rs.shard(*data, num_shards=2)
    bound, d = validate_run(rs.models.LogisticRegression(), shards, get_algorithm("dglmc"), chains=2)
    assert d == 31 and int(bound.dim) == 31
    with pytest.raises(ArgumentError) as info:
        validate_run(rs.models.LogisticRegression(), shards, get_algorithm("dglmc", init=[0.0, 1.0]), chains=2)
    assert info.value.path[0] == "algorithm"
    wide = rs.models.LogisticRegression(coef_prior=Normal(0.0, [1.0, 2.0]))
    with pytest.raises(ArgumentError) as info:
        validate_run(wide, shards, get_algorithm("dglmc"), chains=2)
    assert info.value.path == ("model", "coef_prior")


def _spec(**over):
    base = {
        "model": {"family": "logistic_regression", "prior_scale": 1.0},
        "data": {"dataset": "builtin:breast_cancer"},
        "num_shards": 2,
        "chains": 2,
        "num_rounds": 20,
        "burn_in": 5,
    }
    return base | over


@pytest.mark.parametrize(
    "body, loc",
    [
        (_spec(max_rounds=50), ["max_rounds"]),
        (_spec(num_shards=10**4), ["num_shards"]),
        (
            _spec(
                shard_strategy="label_skew", model={"family": "linear_regression"}, data={"dataset": "builtin:diabetes"}
            ),
            ["shard_strategy"],
        ),
        (
            _spec(model={"family": "logistic_regression", "coef_prior": {"normal": {"scale": [1, 2]}}}),
            ["model", "coef_prior"],
        ),
        (
            _spec(
                model={"family": "poisson_regression", "offset_column": "nope"}, data={"dataset": "builtin:diabetes"}
            ),
            ["model", "offset_column"],
        ),
        (_spec(algorithm={"name": "dglmc", "params": {"rho": [1.0, 2.0, 3.0]}}), ["algorithm", "params"]),
        (_spec(algorithm={"name": "dglmc", "params": {"n_local": 0}}), ["algorithm", "params"]),
    ],
)
def test_rest_answers_the_mapped_loc(app_client, body, loc):
    r = app_client.post("/v1/runs", json=body, headers={"Authorization": f"Bearer {SERVICE_KEYS['alice']}"})
    assert r.status_code == 422, r.text
    assert [e["loc"] for e in r.json()["detail"]] == [["body", *loc]], r.json()


def test_run_warnings_carry_a_kind():
    diag = Diagnostics(min_ess_bulk=10.0, max_rhat=math.nan, draws=50, chains=4)
    notes = diag.warnings()
    assert [w.kind for w in notes] == [WarningKind.RHAT, WarningKind.ESS]
    assert all(isinstance(w, UserWarning) and "R-hat" in str(notes[0]) for w in notes)
    back = pickle.loads(pickle.dumps(notes[1]))
    assert isinstance(back, RunWarning) and back.kind == WarningKind.ESS and str(back) == str(notes[1])
    with pytest.warns(RunWarning, match="R-hat"):
        warnings.warn(notes[0], stacklevel=1)
