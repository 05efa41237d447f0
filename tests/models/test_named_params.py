"""Named parameters: every model's ParamBlock layout, labels from the data's columns (scikit-learn's feature names for
the bundled data sets), and Result.to_arviz / summary / ess with one variable per parameter on the natural scale."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

import raysampler as rs
from raysampler.models import (
    BinomialRegression,
    DataSpec,
    Gaussian,
    LinearRegression,
    LogisticRegression,
    MLPClassifier,
    NegativeBinomialRegression,
    ParamBlock,
    PoissonRegression,
    SoftmaxRegression,
)


def test_bundled_data_sets_name_their_columns():
    X, _ = rs.datasets.load("breast_cancer")
    cols = rs.datasets.columns("breast_cancer")
    assert len(cols) == X.shape[1] and cols[:2] == ("(Intercept)", "mean radius") and np.all(X[:, 0] == 1)
    assert rs.datasets.columns("diabetes")[:3] == ("(Intercept)", "age", "sex")
    assert len(rs.datasets.columns("digits")) == 65 and rs.datasets.columns("gaussian_toy") == ()
    assert rs.datasets.columns("logistic_synthetic", d=3) == ("(Intercept)", "x1", "x2")
    assert len(rs.datasets.columns("covtype_like")) == rs.datasets.load("covtype_like", n=10)[0].shape[1]
    with pytest.raises(ValueError, match="name"):
        rs.datasets.columns("nope")
    with pytest.raises(TypeError, match="d"):
        rs.datasets.columns("breast_cancer", d=3)
    model = LogisticRegression().bind(DataSpec(X.shape[1], columns=cols))
    assert model.param_names()[:2] == ["beta[(Intercept)]", "beta[mean radius]"]


def test_every_model_names_its_parameters():
    cols = ("a", "b", "c")
    spec = DataSpec(3, n_classes=2, columns=cols)
    assert LinearRegression().bind(spec).param_names() == ["beta[a]", "beta[b]", "beta[c]", "sigma"]
    assert LinearRegression(noise_sd=1.0).bind(spec).param_names() == ["beta[a]", "beta[b]", "beta[c]"]
    assert LinearRegression().bind(DataSpec(2)).param_names() == ["beta[0]", "beta[1]", "sigma"]
    assert NegativeBinomialRegression(offset="b").bind(spec).param_names() == ["beta[a]", "beta[c]", "phi"]
    assert BinomialRegression(trials="a").bind(spec).param_names() == ["beta[b]", "beta[c]"]
    assert PoissonRegression(offset=np.zeros(4)).bind(DataSpec(3, n_rows=4, columns=cols)).param_names() == [
        "beta[a]",
        "beta[b]",
        "beta[c]",
    ]
    assert SoftmaxRegression().bind(spec).param_names()[:3] == ["w[a,0]", "w[a,1]", "w[b,0]"]
    mlp = MLPClassifier(hidden=2).bind(spec)
    names = mlp.param_names()
    assert names[:3] == ["W1[a,0]", "W1[a,1]", "W1[b,0]"] and names[6] == "b1[0]" and names[-1] == "b2[1]"
    assert Gaussian(noise_scale=1.0).bind(DataSpec(2)).param_names() == ["theta[0]", "theta[1]"]
    blocks = LinearRegression().bind(spec).param_blocks()
    assert blocks == (ParamBlock("beta", 3, "coef", cols, "identity"), ParamBlock("sigma", 1, None, None, "exp"))
    for m in (LinearRegression().bind(spec), mlp, NegativeBinomialRegression().bind(spec)):
        assert sum(b.size for b in m.param_blocks()) == m.dim == len(set(m.param_names()))


def _result(blocks, seed=0, chains=3, draws=200):
    d = sum(b.size for b in blocks)
    x = np.random.default_rng(seed).standard_normal((chains, draws, d))
    x[..., -1] = np.log(2.0) + 0.1 * x[..., -1]
    return rs.Result(x, [n for b in blocks for n in b.names()], layout=tuple(blocks))


def test_result_reports_one_variable_per_parameter_on_the_natural_scale():
    blocks = LinearRegression().bind(DataSpec(2, columns=("(Intercept)", "age"))).param_blocks()
    res = _result(blocks)
    tree = res.to_arviz()
    post = tree["posterior"]
    assert set(post.data_vars) == {"beta", "sigma"}
    assert post["beta"].dims == ("chain", "draw", "coef") and list(post["coef"].values) == ["(Intercept)", "age"]
    np.testing.assert_array_equal(post["beta"].values, res.draws[..., :2])
    np.testing.assert_allclose(post["sigma"].values, np.exp(res.draws[..., 2]))  # σ = exp(log σ)
    table = res.summary()
    assert list(table.index) == ["beta[(Intercept)]", "beta[age]", "sigma"]
    np.testing.assert_allclose(table.loc["sigma", "mean"], np.exp(res.draws[..., 2]).mean(), rtol=1e-12)
    ess = res.ess()
    assert ess.shape == (3,)
    theta_only = rs.Result(res.draws, res.param_names).ess()  # rank-based ESS: the same for log σ and σ
    np.testing.assert_allclose(ess, theta_only, rtol=1e-10)
    # the layout survives a JSON store as dicts
    stored = json.loads(json.dumps([b.as_dict() for b in blocks]))
    again = rs.Result(res.draws, res.param_names, layout=tuple(stored))
    assert again.param_blocks == blocks and list(again.summary().index) == list(table.index)


def test_result_without_layout_and_bad_layouts():
    x = np.zeros((2, 5, 2))
    res = rs.Result(x, ["u", "v"])
    assert res.param_blocks == (ParamBlock("theta", 2, "param", ("u", "v")),)
    assert set(res.to_arviz()["posterior"].data_vars) == {"theta"}
    with pytest.raises(ValueError, match="3 coordinates"):
        rs.Result(x, ["u", "v"], layout=(ParamBlock("beta", 3, "coef"),)).param_blocks  # noqa: B018
    clash = (ParamBlock("a", 2, "k", ("x", "y")), ParamBlock("b", 2, "k", ("p", "q")))
    with pytest.raises(ValueError, match="dim 'k'"):
        rs.Result(np.zeros((2, 5, 4)), list("abcd"), layout=tuple(clash)).to_arviz()
    for bad in (
        dict(name="", size=1),
        dict(name="b", size=0),
        dict(name="b", size=2),
        dict(name="b", size=2, dim="k", labels=("x",)),
        dict(name="b", size=1, transform="log"),
    ):
        with pytest.raises(ValueError):
            ParamBlock(**bad)


def test_named_parameters_through_sample():
    """rs.sample with column names: draws stay (β, log σ); the summary says beta[age] and sigma (natural scale)."""
    X, y = rs.datasets.load("diabetes")
    shards = rs.shard(X, y, num_shards=2, columns=rs.datasets.columns("diabetes"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # too few draws for converged diagnostics, on purpose
        res = rs.sample(
            LinearRegression(), shards, chains=2, num_rounds=40, burn_in=40, executor="local", progress=False
        )
    assert res.param_names[1] == "beta[age]" and res.param_names[-1] == "sigma"
    table = res.summary()
    assert list(table.index)[:2] == ["beta[(Intercept)]", "beta[age]"] and table.index[-1] == "sigma"
    np.testing.assert_allclose(table.loc["sigma", "mean"], np.exp(res.draws[..., -1]).mean(), rtol=1e-10)
    assert 0.5 < table.loc["sigma", "mean"] < 0.9  # standardised y, R² ≈ 0.5
