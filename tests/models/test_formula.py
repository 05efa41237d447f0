"""Formula models (`rs.models.from_formula`): the design each site builds from its own rows equals the hand-built
one (same potentials, same draws for a seed), categories agree across sites that hold different levels, and the
formula path gives the group-effects reference problems' models exactly."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest
from support.reference_problems import GROUP_PROBLEMS

import raysampler as rs
from raysampler.errors import ArgumentError
from raysampler.models import DataSpec
from raysampler.priors import HalfNormal, Normal


def hospitals(n: int = 300, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    df = pd.DataFrame(
        {
            "x1": rng.standard_normal(n),
            "region": rng.integers(1, 4, n).astype(float),
            "hospital": rng.integers(1, 9, n).astype(float),
            "exposure": rng.uniform(0.5, 2.0, n),
        }
    )
    eta = -0.3 + 0.8 * df.x1 + 0.5 * (df.region == 2) - 0.4 * (df.region == 3)
    eta = eta + 0.4 * rng.standard_normal(9)[df.hospital.astype(int)]
    df["y"] = (rng.random(n) < 1.0 / (1.0 + np.exp(-eta))).astype(float)
    df["count"] = rng.poisson(df.exposure * np.exp(0.2 + 0.3 * df.x1)).astype(float)
    return df


def hand_design(df: pd.DataFrame) -> tuple[np.ndarray, list[str]]:
    """The design of 'x1 + C(region) + x1:C(region)' plus the grouping column, coded by hand."""
    r2, r3 = (df.region == 2).astype(float), (df.region == 3).astype(float)
    X = np.column_stack([np.ones(len(df)), df.x1, r2, r3, df.x1 * r2, df.x1 * r3, df.hospital])
    return X, ["(Intercept)", "x1", "C(region)[2]", "C(region)[3]", "x1:C(region)[2]", "x1:C(region)[3]", "hospital"]


def test_a_formula_model_equals_the_hand_built_design() -> None:
    df = hospitals()
    formula = rs.models.from_formula(
        "y ~ x1 * C(region) + (1 + x1 | hospital)",
        family="bernoulli",
        priors={"b": Normal(0, 2.5), "sd": HalfNormal(0.5)},
    )
    X, cols = hand_design(df)
    ge = rs.GroupEffects("hospital", slopes=("x1",), sd_prior=HalfNormal(0.5), correlated=True)  # brms' `|`
    hand = rs.models.LogisticRegression(coef_prior=Normal(0, 2.5), group_effects=ge)
    tables = rs.shard(df, num_shards=3, by="hospital")
    arrays = rs.shard(X, df.y.to_numpy(), num_shards=3, columns=cols, by="hospital")
    # same potentials: each shard's design built from its own rows, against the hand-built shard
    bound = formula.bind(DataSpec(len(df.columns), None, len(df), tuple(df.columns), (("region", (1.0, 2.0, 3.0)),)))
    ref = hand.bind(DataSpec(len(cols), None, len(df), tuple(cols)))
    assert bound.param_names() == ref.param_names()
    rng = np.random.default_rng(1)
    for t, a in zip(tables, arrays):
        Xf, yf = bound.shard_data(t.X, t.y, t.index)
        Xh, yh = ref.shard_data(a.X, a.y, a.index)
        np.testing.assert_array_equal(Xf, Xh)
        np.testing.assert_array_equal(yf, yh)
        x = rng.standard_normal((4, bound.dim + bound.local_dim(Xf, yf)))
        np.testing.assert_array_equal(bound.potential(Xf, yf, x), ref.potential(Xh, yh, x))
        np.testing.assert_array_equal(bound.grad(Xf, yf, x), ref.grad(Xh, yh, x))
    # same draws for a seed
    kw = dict(chains=2, num_rounds=10, burn_in=5, seed=3, executor="local", progress=False)
    a = rs.sample(formula, tables, **kw)
    b = rs.sample(hand, arrays, **kw)
    assert a.param_names == b.param_names
    np.testing.assert_array_equal(a.draws, b.draws)


def test_offsets_and_trials_come_from_the_formula() -> None:
    df = hospitals(200)
    df["trials"] = 3.0
    df["succ"] = np.minimum(df["count"], 3.0)
    cases = [
        (
            "count ~ x1 + offset(np.log(exposure))",
            "poisson",
            rs.models.PoissonRegression(prior_scale=1.0, offset="off"),
            np.column_stack([np.ones(len(df)), df.x1, np.log(df.exposure)]),
            ["(Intercept)", "x1", "off"],
            df["count"],
        ),
        (
            "p(succ, trials) ~ x1",
            "binomial",
            rs.models.BinomialRegression(prior_scale=1.0, trials="n"),
            np.column_stack([np.ones(len(df)), df.x1, df.trials]),
            ["(Intercept)", "x1", "n"],
            df["succ"],
        ),
    ]
    for text, family, hand, X, cols, y in cases:
        model = rs.models.from_formula(text, family=family, priors={"b": Normal(0, 1.0)})
        bound = model.bind(DataSpec(len(df.columns), None, len(df), tuple(df.columns)))
        ref = hand.bind(DataSpec(3, None, len(df), tuple(cols)))
        Xf, yf = bound.shard_data(df.to_numpy(dtype=float), np.zeros(len(df)), None)
        x = np.random.default_rng(0).standard_normal((3, 2))
        np.testing.assert_allclose(bound.potential(Xf, yf, x), ref.potential(X, y.to_numpy(), x), rtol=1e-13)
        assert bound.param_names() == ["beta[(Intercept)]", "beta[x1]"]


def test_categorical_levels_agree_across_sites_when_one_site_lacks_a_level(tmp_path) -> None:
    df = hospitals(240)
    site0 = df[df.region != 3]  # site 0 never saw region 3
    site1 = df[df.region != 1].iloc[:60]
    paths = []
    for i, part in enumerate((site0, site1)):
        path = tmp_path / f"site{i}.parquet"
        part.to_parquet(path, index=False)
        paths.append(str(path))
    model = rs.models.from_formula("y ~ x1 + C(region)", family="bernoulli", priors={"b": Normal(0, 2.5)})
    kw = dict(chains=2, num_rounds=30, burn_in=5, seed=1, executor="local", progress=False)  # the same draws: no law
    res = rs.sample(model, rs.shard(paths), **kw)
    assert res.param_names == ["beta[(Intercept)]", "beta[x1]", "beta[C(region)[2]]", "beta[C(region)[3]]"]
    # the same posterior as the pooled rows coded by hand
    pooled = pd.concat([site0, site1])
    X = np.column_stack([np.ones(len(pooled)), pooled.x1, pooled.region == 2, pooled.region == 3]).astype(float)
    hand = rs.models.LogisticRegression(coef_prior=Normal(0, 2.5))
    parts = [(X[: len(site0)], site0.y.to_numpy()), (X[len(site0) :], site1.y.to_numpy())]
    ref = rs.sample(hand, rs.shard(parts), **kw)
    np.testing.assert_array_equal(res.draws, ref.draws)
    # an order of levels given by the user: the first is the reference; a level no site has is an error naming it
    ordered = rs.models.from_formula("y ~ x1 + C(region)", family="bernoulli", levels={"region": [3, 1, 2]})
    spec = DataSpec(6, None, 300, tuple(df.columns), (("region", (1.0, 2.0, 3.0)),))
    assert ordered.bind(spec).param_names()[2:] == ["beta[C(region)[1]]", "beta[C(region)[2]]"]
    unseen = rs.models.from_formula("y ~ x1 + C(region)", family="bernoulli", levels={"region": [1, 2, 3, 4]})
    with pytest.raises(ArgumentError, match=r"no shard has the level\(s\) '4'") as err:
        unseen.bind(spec)
    assert err.value.path == ("model", "levels", "region")


def test_formula_errors_name_what_is_wrong() -> None:
    cases = [
        ("y ~ x1 + ", "bernoulli", ("model", "formula"), "cannot be read"),
        ("y ~ scale(x1)", "bernoulli", ("model", "formula"), "learns from the rows"),
        ("y ~ bs(x1, df=4)", "gaussian", ("model", "formula"), "learns from the rows"),
        ("y ~ x1", "skew_normal", ("model", "family"), "family must be one of"),
        ("y ~ x1 + (1 | a*b)", "bernoulli", ("model", "formula"), r"group term \(1 \| a\*b\): the grouping factor"),
        ("y ~ x1 + (1 | log(a))", "bernoulli", ("model", "formula"), r"term \(1 \| log\(a\)\).*a nesting \(1 \| a/b\)"),
        ("p(y, n) ~ x1", "poisson", ("model", "family"), "binomial"),
    ]
    for text, family, loc, msg in cases:
        with pytest.raises(ArgumentError, match=msg) as err:
            rs.models.from_formula(text, family=family)
        assert err.value.path == loc, text
    with pytest.raises(ArgumentError, match="unknown kind 'beta'") as err:
        rs.models.from_formula("y ~ x1", family="bernoulli", priors={"beta": Normal(0, 1)})
    assert err.value.path == ("model", "priors", "beta")
    model = rs.models.from_formula("y ~ x1 + z", family="bernoulli")
    with pytest.raises(ArgumentError, match="'z' is not a column"):
        model.bind(DataSpec(2, None, 10, ("x1", "y")))
    slope = rs.models.from_formula("y ~ 1 + (1 + x1 | g)", family="bernoulli")
    with pytest.raises(ArgumentError, match="must also be a common term"):
        slope.bind(DataSpec(3, None, 10, ("x1", "g", "y")))


@pytest.mark.parametrize("name", ["hier_linear", "hier_logistic", "hier_poisson"])  # one per family
def test_the_formula_path_gives_the_group_reference_models_exactly(name: str) -> None:
    """The reference problems' models (one per family; the funnel and 400 groups are these families again) written as
    formulas, on the same CSV read as a table, give the hand-built
    models' draws bit for bit (tests/models/test_group_references.py holds those against NUTS)."""
    problem = GROUP_PROBLEMS[name]
    X, y, cols = problem.load()
    slopes = " + ".join(problem.slopes)
    group = f"(1 + {slopes} || g)" if slopes else "(1 | g)"  # the references' effects are uncorrelated
    fixed = [c for c in cols if c not in ("(Intercept)", "g", "log_exposure")]
    rhs = " + ".join(["1", *fixed, *(["offset(log_exposure)"] if problem.family == "poisson" else []), group])
    family = {"linear": "gaussian", "logistic": "bernoulli", "poisson": "poisson"}[problem.family]
    priors = {"b": Normal(0.0, 2.5), "sd": HalfNormal(1.0)} | (
        {"sigma": HalfNormal(10.0)} if family == "gaussian" else {}
    )
    formula = rs.models.from_formula(f"y ~ {rhs}", family=family, priors=priors)
    table = pd.DataFrame(X, columns=list(cols)).assign(y=y)
    kw = dict(chains=2, num_rounds=10, burn_in=5, seed=5, executor="local", progress=False)
    a = rs.sample(formula, rs.shard(table, num_shards=4, by="g"), **kw)
    b = rs.sample(problem.model, rs.shard(X, y, num_shards=4, columns=cols, by="g"), **kw)
    assert a.param_names == b.param_names
    np.testing.assert_array_equal(a.draws, b.draws)


def test_fixef_ranef_coef_and_prior_summary_read_the_draws_as_brms_does() -> None:
    df = hospitals(200)
    model = rs.models.from_formula(
        "y ~ x1 + (1 + x1 | hospital)", family="bernoulli", priors={"b": Normal(0, 2.5), "sd": HalfNormal(0.5)}
    )
    res = rs.sample(
        model,
        rs.shard(df, num_shards=2, by="hospital"),
        chains=2,
        num_rounds=8,
        burn_in=2,  # summaries of the draws as they are: no law
        executor="local",
        progress=False,
    )
    beta = res.posterior()["beta"]
    fixef = res.fixef()
    assert list(fixef.index) == ["(Intercept)", "x1"]
    np.testing.assert_allclose(fixef["Estimate"], beta.reshape(-1, 2).mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(fixef["Q2.5"], np.quantile(beta.reshape(-1, 2), 0.025, axis=0), rtol=1e-12)
    r = res.ranef(summary=False)["hospital"]
    assert r.dims == ("chain", "draw", "hospital", "hospital_effect")
    c = res.coef(summary=False)["hospital"]
    for k, name in enumerate(["(Intercept)", "x1"]):  # every group's coefficient, draw by draw: β_k + r_{g,k}
        want = beta[..., k][..., None] + r.sel(hospital_effect=name).values
        np.testing.assert_array_equal(c.sel(coef=name).values, want)
    table = res.coef()["hospital"]
    assert table.index[0] == (r.coords["hospital"].values[0], "(Intercept)")
    prior = res.prior_summary()
    assert list(prior["class"]) == ["b", "sd", "cor"] and prior["prior"][1] == "HalfNormal(scale=0.5)"
    assert prior["prior"][2] == "LKJ(eta=1.0)" and prior["group"][2] == "hospital"
    assert "prior_scale" not in repr(rs.models.LogisticRegression(prior_scale=2.0))  # one prior shown, not two
    # numeric group labels come back as numbers: the export, ranef and coef select them by value
    assert r.coords["hospital"].values.dtype.kind == "i" and 3 in r.coords["hospital"].values
    tree = res.to_arviz()
    np.testing.assert_array_equal(tree.posterior["r_hospital"].sel(hospital=3).values, r.sel(hospital=3).values)
    assert res.ranef()["hospital"].loc[(3, "x1"), "Estimate"] == pytest.approx(
        float(r.sel(hospital=3, hospital_effect="x1").mean())
    )
    # VarCorr: the sds and the correlation of the hospital effects, as the draws give them
    vc = res.varcorr()
    post = res.posterior()
    assert list(vc) == ["hospital"] and list(vc["hospital"].sd.index) == ["(Intercept)", "x1"]
    np.testing.assert_allclose(
        vc["hospital"].sd["Estimate"], post["sd_hospital"].reshape(-1, 2).mean(axis=0), rtol=1e-12
    )
    assert vc["hospital"].cor is not None and len(vc["hospital"].cor) == 1
    np.testing.assert_allclose(
        vc["hospital"].cor["Q97.5"], np.quantile(post["cor_hospital"].reshape(-1), 0.975), rtol=1e-12
    )
    # Bayesian R² computed at the shards equals var(ŷ) / (var(ŷ) + var(y − ŷ)) per draw over the pooled rows
    r2 = res.bayes_r2(summary=False, draws="all")
    names = tuple(res.param_names)
    theta = res.draws.reshape(-1, res.draws.shape[2])
    mu, ys = [], []
    for shard in res.data:
        X, y = res.model.shard_data(*shard.load(), shard.index)
        mu.append(res.model.predict_mean(X, res.model.evaluation_x(X, y, theta, names, 0)))
        ys.append(np.asarray(y, dtype=float))
    mu_all, y_all = np.concatenate(mu), np.concatenate(ys)
    fit, resid = mu_all.var(axis=0, ddof=1), (y_all[:, None] - mu_all).var(axis=0, ddof=1)
    np.testing.assert_allclose(r2, fit / (fit + resid), rtol=1e-10)
    table = res.bayes_r2(draws="all")
    assert list(table.index) == ["R2"] and table["Estimate"].iloc[0] == pytest.approx(r2.mean(), rel=1e-12)


def test_text_categories_and_group_labels_from_parquet_files(tmp_path) -> None:
    """Text columns of parquet files (issue 31): a category `C(region)` and a grouping column `hospital` holding
    names. The effects are named by the labels as given, a site lacking a region codes it alike, a bare text column
    reads as a category, and the draws equal the hand-coded design with the same text labels."""
    df = hospitals(240)
    names = ["St Mary", "Royal Free", "Guy's", "King's College", "Homerton", "Whittington", "Barts", "UCLH"]
    df["region"] = df.region.map({1.0: "north", 2.0: "south", 3.0: "west"})
    df["hospital"] = [names[int(h) - 1] for h in df.hospital]
    first = df.hospital.isin(names[:4])
    site0, site1 = df[first & (df.region != "west")], df[~first]  # each hospital at one site; site 0 has no west
    paths = []
    for i, part in enumerate((site0, site1)):
        path = tmp_path / f"site{i}.parquet"
        part.to_parquet(path, index=False)
        paths.append(str(path))
    priors = {"b": Normal(0, 2.5), "sd": HalfNormal(1.0)}
    model = rs.models.from_formula("y ~ x1 + C(region) + (1 | hospital)", family="bernoulli", priors=priors)
    kw = dict(chains=2, num_rounds=12, burn_in=4, seed=2, executor="local", progress=False)
    res = rs.sample(model, rs.shard(paths), **kw)
    assert res.param_names[:4] == ["beta[(Intercept)]", "beta[x1]", "beta[C(region)[south]]", "beta[C(region)[west]]"]
    assert res.param_names[4] == "sd_hospital[(Intercept)]"
    assert sorted(res.param_names[5:]) == sorted(f"r_hospital[{h},(Intercept)]" for h in names)
    assert list(res.to_arviz().posterior["r_hospital"].coords["hospital"].values) == sorted(names)
    # the hand-coded design of the same rows, the hospitals' names in a column of their own
    cols = ["(Intercept)", "x1", "south", "west", "hospital"]

    def coded(part: pd.DataFrame) -> pd.DataFrame:
        south, west = (part.region == "south").astype(float), (part.region == "west").astype(float)
        return pd.DataFrame(dict(zip(cols, [np.ones(len(part)), part.x1, south, west, part.hospital])))

    ge = rs.GroupEffects("hospital", sd_prior=HalfNormal(1.0))
    hand = rs.models.LogisticRegression(coef_prior=Normal(0, 2.5), group_effects=ge)
    ref = rs.sample(hand, rs.shard([(coded(p), p.y.to_numpy()) for p in (site0, site1)]), **kw)
    np.testing.assert_array_equal(res.draws, ref.draws)
    # a text column named bare reads as a category too (brms reads a character column as a factor)
    bare = rs.models.from_formula("y ~ x1 + region + (1 | hospital)", family="bernoulli", priors=priors)
    res_bare = rs.sample(bare, rs.shard(paths), **kw)
    assert res_bare.param_names[2:4] == ["beta[region[south]]", "beta[region[west]]"]
    np.testing.assert_array_equal(res_bare.draws, ref.draws)


def test_bars_follow_brms_one_term_with_one_bar_is_correlated() -> None:
    """`(1 + x | g)` correlates a group's effects (brms' default, an LKJ prior: `priors["cor"]`); `(1 + x || g)` and
    separate terms do not; a `cor` prior where no term is correlated is an error naming it."""
    from raysampler.priors import LKJ

    def effects(formula: str, **priors):
        return rs.models.from_formula(formula, family="bernoulli", priors=priors).group_effects

    (one,) = effects("y ~ x1 + (1 + x1 | hospital)", cor=LKJ(2.0))
    assert one.correlated and one.cor_prior == LKJ(2.0) and one.slopes == ("x1",)
    (two,) = effects("y ~ x1 + (1 + x1 || hospital)")
    assert not two.correlated and two.intercept and two.slopes == ("x1",)
    (three,) = effects("y ~ x1 + (1 | hospital) + (0 + x1 | hospital)")
    assert not three.correlated
    g, h = effects("y ~ x1 + (1 + x1 | hospital) + (1 | ward)", cor={"hospital": LKJ(3.0)})
    assert g.correlated and g.cor_prior == LKJ(3.0) and not h.correlated
    with pytest.raises(ArgumentError) as err:
        rs.models.from_formula("y ~ x1 + (1 | hospital)", family="bernoulli", priors={"cor": LKJ(2.0)})
    assert err.value.path == ("model", "priors", "cor")
    with pytest.raises(ArgumentError) as err:
        rs.models.from_formula("y ~ x1 + (1 + x1 | g)", family="bernoulli", priors={"cor": {"ward": LKJ(2.0)}})
    assert err.value.path == ("model", "priors", "cor", "ward")
    df = hospitals(120)
    res = rs.sample(
        rs.models.from_formula("y ~ x1 + (1 + x1 | hospital)", family="bernoulli"),
        rs.shard(df, num_shards=2, by="hospital"),
        chains=2, num_rounds=8, burn_in=2, executor="local", progress=False,
    )  # fmt: skip
    assert "cor_hospital[(Intercept),x1]" in res.param_names


@pytest.mark.filterwarnings("ignore::raysampler.diagnostics.RunWarning")  # a few rounds: the draws are compared
def test_the_response_must_be_a_column_of_every_shard(tmp_path) -> None:
    """The formula's response is read from the data's columns by name (issue 48): a misspelt one, or one held apart
    as the shards' y, is refused at set-up naming it, before any sampling; a file shard naming the response as its
    y_column is read whole, the response among its columns."""
    df = hospitals(120)
    kw = dict(chains=2, num_rounds=6, burn_in=2, seed=0, executor="local", progress=False)
    cases = [
        ("yy ~ x1 + (1 | hospital)", rs.shard(df, num_shards=2, by="hospital"), "'yy'"),
        ("y ~ x1", rs.shard(df.drop(columns="y"), df.y.to_numpy(), num_shards=2), "'y'"),
    ]
    for text, shards, name in cases:
        with pytest.raises(ArgumentError, match=rf"the response {name} is not a column of the data") as err:
            rs.sample(rs.models.from_formula(text, family="bernoulli"), shards, **kw)
        assert err.value.path == ("model", "formula")
    path = tmp_path / "site.csv"
    df.to_csv(path, index=False)
    model = rs.models.from_formula("count ~ x1", family="poisson")
    named = rs.sample(model, [rs.Shard(path=str(path), y_column="count")], **kw)
    whole = rs.sample(model, rs.shard(df, num_shards=1), **kw)
    assert named.model.design.columns == tuple(df.columns)  # "count" among them
    np.testing.assert_array_equal(named.draws, whole.draws)


def test_conditional_effects_hold_the_other_predictors_at_their_means_and_first_levels(tmp_path) -> None:
    """brms' conditional_effects: the grid spans the effect's range over every shard's rows, the other numbers sit
    at their pooled means and the categories at their first level; the table is the median, MAD and interval of the
    population-level expected response there; a category's grid is its levels; a plot and clear errors."""
    df = hospitals(240)
    df["dose"] = np.random.default_rng(1).uniform(0, 4, len(df))
    model = rs.models.from_formula(
        "y ~ x1 + dose + C(region) + (1 | hospital)",
        family="bernoulli",
        priors={"b": Normal(0, 2.5), "sd": HalfNormal(0.5)},
    )
    res = rs.sample(
        model, rs.shard(df, num_shards=3, by="hospital"), chains=2, num_rounds=30, burn_in=10, executor="local",
        progress=False,
    )  # fmt: skip
    ce = res.conditional_effects("x1", points=7, prob=0.9)
    t = ce.table
    np.testing.assert_allclose(t["x1"], np.linspace(df.x1.min(), df.x1.max(), 7), rtol=1e-12)
    np.testing.assert_allclose(t["dose"], df.dose.mean(), rtol=1e-12)
    assert (t["region"] == "1").all() and ce.response == "y" and not ce.categorical
    grid = t[["x1", "dose", "region", "hospital"]]
    ep = res.predict(grid, "epred", re_formula="NA")
    np.testing.assert_allclose(t["estimate__"], np.median(ep, axis=0), rtol=1e-12)
    np.testing.assert_allclose(t["upper__"], np.quantile(ep, 0.95, axis=0), rtol=1e-12)
    np.testing.assert_allclose(t["se__"], 1.4826 * np.median(np.abs(ep - np.median(ep, axis=0)), axis=0), rtol=1e-12)
    held = res.conditional_effects("x1", conditions={"dose": 3.0}, points=3)
    assert (held.table["dose"] == 3.0).all()
    region = res.conditional_effects("region")
    assert region.categorical and list(region.table["region"]) == ["1", "2", "3"]
    ax = region.plot()
    assert ax.get_xlabel() == "region" and ax.get_ylabel() == "y"
    ce.plot().figure.savefig(tmp_path / "ce.png")
    for call, path in [
        (lambda: res.conditional_effects("age"), ("effect",)),
        (lambda: res.conditional_effects("hospital"), ("effect",)),
        (lambda: res.conditional_effects("x1", points=1), ("points",)),
        (lambda: res.conditional_effects("x1", conditions={"age": 1}), ("conditions",)),
    ]:
        with pytest.raises(ArgumentError) as err:
            call()
        assert err.value.path == path


def test_a_coefficients_own_prior_and_the_intercepts_are_the_hand_built_vector_prior() -> None:
    """brms' `prior(..., class = b, coef = x1)` and class Intercept: `b_<name>` and `Intercept` give those
    coefficients their own prior and the rest the "b" prior, exactly the family's coef_prior with one value per
    coefficient; a Student-t "b" prior takes Student-t coefficient priors the same way."""
    df = hospitals()
    spec = DataSpec(len(df.columns), None, len(df), tuple(df.columns), (("region", (1.0, 2.0, 3.0)),))
    names = ["(Intercept)", "x1", "C(region)[2]", "C(region)[3]"]
    own = {"b": Normal(0, 2.5), "b_x1": Normal(1.0, 0.5), "Intercept": Normal(-1.0, 10.0), "b_C(region)[3]": Normal()}
    formula = rs.models.from_formula("y ~ x1 + C(region)", family="bernoulli", priors=own).bind(spec)
    vector = Normal((-1.0, 1.0, 0.0, 0.0), (10.0, 0.5, 2.5, 1.0))
    hand = rs.models.LogisticRegression(coef_prior=vector).bind(DataSpec(4, None, len(df), tuple(names)))
    for got, want in zip(
        (formula.prior().mean, formula.prior().precision), (hand.prior().mean, hand.prior().precision)
    ):
        np.testing.assert_array_equal(got, want)
    t = rs.priors.StudentT(3.0, 0.0, 2.5)
    heavy = rs.models.from_formula(
        "y ~ x1", family="bernoulli", priors={"b": t, "b_x1": rs.priors.StudentT(5.0, 1.0, 1.0)}
    )
    cp = heavy.bind(spec).model.coef_prior
    assert (cp.nu, cp.mean, cp.scale) == ((3.0, 5.0), (0.0, 1.0), (2.5, 1.0))


@pytest.mark.parametrize(
    ("priors", "words"),
    [
        ({"b_x2": Normal(0, 1)}, "no coefficient 'x2'; its coefficients are '(Intercept)', 'x1'"),
        ({"b_x1": rs.priors.StudentT(3.0)}, "a StudentT prior among Normal ones"),
        ({"b_x1": Normal(0, (1.0, 2.0))}, "one coefficient's prior takes scalars"),
        ({"b_x1": rs.priors.HalfNormal(1.0)}, "priors['b_x1'] must be rs.priors.Normal"),
        ({"b_(Intercept)": Normal(), "Intercept": Normal()}, "already has priors"),
    ],
)
def test_a_coefficient_prior_that_cannot_be_is_refused_naming_its_key(priors, words) -> None:
    df = hospitals()
    spec = DataSpec(len(df.columns), None, len(df), tuple(df.columns))
    with pytest.raises(ArgumentError, match=re.escape(words)):
        rs.models.from_formula("y ~ x1", family="bernoulli", priors=priors).bind(spec)


def test_a_noise_sd_formula_is_the_distributional_gaussian_built_by_hand() -> None:
    """brms' bf(y ~ x1, sigma ~ x2 + C(region)): `sigma=` gives log σ_j its own design, after the mean's in X, and
    the model is `GaussianSigmaRegression` on the hand-built columns (same potentials and gradients, same draws for
    a seed); its coefficients are b_sigma[...], with the "sigma" prior on each; predictions read x2 by name."""
    from raysampler.models.gaussian_sigma import GaussianSigmaRegression

    rng = np.random.default_rng(2)
    df = hospitals()
    df["x2"] = rng.standard_normal(len(df))
    df["y"] = 0.5 + 0.8 * df.x1 + np.exp(-0.3 + 0.5 * df.x2 + 0.4 * (df.region == 2)) * rng.standard_normal(len(df))
    formula = rs.models.from_formula(
        "y ~ x1", family="gaussian", priors={"b": Normal(0, 5), "sigma": Normal(0, 1)}, sigma="~ x2 + C(region)"
    )
    cols = ["(Intercept)", "x1", "sigma_(Intercept)", "sigma_x2", "sigma_C(region)[2]", "sigma_C(region)[3]"]
    X = np.column_stack([np.ones(len(df)), df.x1, np.ones(len(df)), df.x2, df.region == 2, df.region == 3])
    hand = GaussianSigmaRegression(
        coef_prior=Normal(0, 5), sigma_columns=tuple(cols[2:]), sigma_coef_prior=Normal(0, 1)
    )
    spec = DataSpec(len(df.columns), None, len(df), tuple(df.columns), (("region", (1.0, 2.0, 3.0)),))
    bound, ref = formula.bind(spec), hand.bind(DataSpec(len(cols), None, len(df), tuple(cols)))
    assert bound.param_names() == ref.param_names() == [
        "beta[(Intercept)]", "beta[x1]", "b_sigma[(Intercept)]", "b_sigma[x2]", "b_sigma[C(region)[2]]",
        "b_sigma[C(region)[3]]",
    ]  # fmt: skip
    tables = rs.shard(df, num_shards=2)
    arrays = rs.shard(X.astype(float), df.y.to_numpy(), num_shards=2, columns=cols)
    x = rng.standard_normal((3, bound.dim)) * 0.3
    for t, a in zip(tables, arrays):
        Xf, yf = bound.shard_data(t.X, t.y, t.index)
        np.testing.assert_array_equal(Xf, a.X)
        np.testing.assert_array_equal(bound.potential_and_grad(Xf, yf, x)[1], ref.potential_and_grad(a.X, a.y, x)[1])
    kw = dict(chains=2, num_rounds=10, burn_in=5, seed=3, executor="local", progress=False)
    np.testing.assert_array_equal(rs.sample(formula, tables, **kw).draws, rs.sample(hand, arrays, **kw).draws)
    new = df.drop(columns=["y"]).iloc[:4][["x2", "region", "x1"]]  # by name, any order, no response
    np.testing.assert_array_equal(bound.design.new_rows(new, (), "X_new"), X[:4])


@pytest.mark.parametrize(
    ("family", "sigma", "words"),
    [
        ("gaussian", "~ x2 + (1 | hospital)", "group terms in the noise sd's formula are not available"),
        ("bernoulli", "~ x1", "the gaussian family's, not logistic_regression's"),
        ("gaussian", 3, "sigma must be a formula's right side"),
        ("gaussian", "~ offset(x1)", "takes no offset"),
    ],
)
def test_a_noise_sd_formula_that_cannot_be_is_refused_at_model_sigma(family, sigma, words) -> None:
    with pytest.raises(ArgumentError, match=re.escape(words)) as err:
        rs.models.from_formula("y ~ x1", family=family, sigma=sigma)
    assert err.value.path == ("model", "sigma")
