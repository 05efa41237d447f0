"""Bad input gets a clear exception naming the argument."""

from __future__ import annotations

import numpy as np
import pytest

import raysampler as rs


@pytest.fixture(scope="module")
def data():
    X, y = rs.datasets.load("breast_cancer")
    return X, y, rs.shard(X, y, num_shards=2)


def _sample(shards, **kw):
    base = dict(chains=2, num_rounds=10, burn_in=5, executor="local", progress=False)
    return rs.sample(rs.models.LogisticRegression(), shards, **{**base, **kw})


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"algorithm": "nuts"}, "algorithm"),
        ({"chains": 0}, "chains"),
        ({"num_rounds": -1}, "num_rounds"),
        ({"num_rounds": 2.5}, "num_rounds"),
        ({"burn_in": -1}, "burn_in"),
        ({"thin": 0}, "thin"),
        ({"seed": -3}, "seed"),
        ({"executor": "gpu"}, "executor"),
        ({"time_budget_s": 0}, "time_budget_s"),
        ({"rho": 0.0}, "rho"),
        ({"rho": -1.0}, "rho"),
        ({"gamma": -0.1}, "gamma"),
        ({"n_local": 0}, "n_local"),
        ({"n_local": 1.5}, "n_local"),
        ({"rho": [0.1, 0.2, 0.3]}, "rho"),
        ({"bias_budget": 2.0}, "bias_budget"),
        ({"local_kernel": "hmc"}, "local_kernel"),
        ({"preconditioner": "full"}, "preconditioner"),
        ({"step_size": 0.1}, "step_size"),
        ({"balance": "sometimes"}, "balance"),
        ({"balance": 1}, "balance"),
        ({"time_budget_s": True}, "time_budget_s"),
        ({"bias_budget": "0.1"}, "bias_budget"),
        ({"target_accept": None}, "target_accept"),
        ({"rho": "abc"}, "rho"),
        ({"n_local": True}, "n_local"),
        ({"init": np.zeros(5)}, "init"),
        ({"overrelax": -1.0}, "overrelax"),
        ({"overrelax": 1.0}, "overrelax"),
        ({"overrelax": "fast"}, "overrelax"),
        ({"overrelax": True}, "overrelax"),
        ({"overrelax": -0.5, "local_kernel": "lmc", "preconditioner": None}, "overrelax"),
        ({"recentre": "yes"}, "recentre"),
        ({"recentre": 1.5}, "recentre"),
        ({"recentre": True, "local_kernel": "mala"}, "recentre"),
    ],
)
def test_bad_arguments_name_themselves(data, kw, match):
    with pytest.raises(ValueError, match=match):
        _sample(data[2], **kw)


def test_callback_must_be_callable(data):
    with pytest.raises(TypeError, match="callback"):
        _sample(data[2], callback=5)


def test_model_must_be_an_instance(data):
    with pytest.raises(TypeError, match="model"):
        rs.sample(rs.models.LogisticRegression, data[2], executor="local")
    with pytest.raises(TypeError, match="model"):
        rs.sample(object(), data[2], executor="local")


def test_unknown_model_family():
    with pytest.raises(ValueError, match="family"):
        rs.models.get_model("probit_regression")


def test_shards_argument(data):
    with pytest.raises(TypeError, match="shards"):
        rs.sample(rs.models.LogisticRegression(), data[0], executor="local")


def test_data_errors_name_the_argument(data):
    X, y, _ = data
    with pytest.raises(ValueError, match="y"):
        rs.shard(X, y[:-1], num_shards=2)
    Xn = X.copy()
    Xn[3, 4] = np.nan
    with pytest.raises(ValueError, match="X"):
        rs.shard(Xn, y, num_shards=2)
    with pytest.raises(ValueError, match="num_shards"):
        rs.shard(X[:3], y[:3], num_shards=4)


def test_data_that_does_not_fit_the_model_names_the_shard(data):
    X, y, _ = data
    y3 = y.copy()
    y3[-1] = 2.0  # not a binary label
    with pytest.raises(ValueError, match=r"shards\[1\]"):
        _sample(rs.shard(X, y3, num_shards=2))


def test_shards_with_different_columns(data):
    X, y, _ = data
    with pytest.raises(ValueError, match="features|columns"):
        _sample(rs.shard([(X[:200], y[:200]), (X[200:, :10], y[200:])]))


@pytest.mark.parametrize("value", ["fast", "-5", "nan"])
def test_bad_spin_setting_names_the_variable(data, monkeypatch, value):
    monkeypatch.setenv("RAYSAMPLER_SHM_SPIN_US", value)
    with pytest.raises(ValueError, match="RAYSAMPLER_SHM_SPIN_US"):
        _sample(data[2])
