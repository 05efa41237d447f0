"""Predictions of formula models at new rows read by column name (issue 48): they equal the hand-built design's,
draw by draw, for text and numeric group labels; a frame's column order and extra columns (the response among them)
change nothing; a new group follows `allow_new_levels`; `re_formula="NA"` leaves the group effects out; the three
kinds epred, linpred and predict; a missing or unreadable column is an error naming it."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy.special import expit

import raysampler as rs
from raysampler.errors import ArgumentError
from raysampler.models.contract import natural_values
from raysampler.priors import HalfNormal, Normal

#: a few rounds: the numbers compared are functions of the draws, whatever the draws are
pytestmark = pytest.mark.filterwarnings("ignore::raysampler.diagnostics.RunWarning")
COUNTIES = ["Aitkin", "Anoka", "Becker", "Beltrami", "Benton", "Big Stone"]
KW = dict(chains=2, num_rounds=25, burn_in=5, seed=1, executor="local", progress=False)


def homes(n: int = 240, seed: int = 0, numeric: bool = False) -> pd.DataFrame:
    """Homes in counties (text names, or numbers 1..6), a text category `basement` and a 0/1 response."""
    rng = np.random.default_rng(seed)
    county = rng.integers(0, len(COUNTIES), n)
    df = pd.DataFrame(
        {
            "floor": rng.normal(size=n),
            "basement": rng.choice(["no", "yes", "partial"], n),
            "county": (county + 1.0) if numeric else np.array(COUNTIES)[county],
        }
    )
    logit = -0.2 + 0.7 * df.floor + 0.5 * (df.basement == "yes") + rng.normal(0, 0.6, len(COUNTIES))[county]
    df["high"] = (rng.random(n) < expit(logit)).astype(float)
    return df


def fit(df: pd.DataFrame) -> rs.Result:
    model = rs.models.from_formula(
        "high ~ floor + basement + (1 | county)",
        family="bernoulli",
        priors={"b": Normal(0, 2.5), "sd": HalfNormal(1.0)},
    )
    return rs.sample(model, rs.shard(df, num_shards=2, by="county"), **KW)


@pytest.fixture(scope="module")
def text_fit() -> tuple[pd.DataFrame, rs.Result]:
    df = homes()
    return df, fit(df)


@pytest.fixture(scope="module")
def numeric_fit() -> tuple[pd.DataFrame, rs.Result]:
    df = homes(numeric=True, seed=3)
    return df, fit(df)


def hand_linpred(res: rs.Result, new: pd.DataFrame, groups: bool = True) -> np.ndarray:
    """(S, n) linear predictors of the rows from every draw, the design coded by hand: intercept, floor, basement's
    dummies against the first level ("no"; levels sorted: no, partial, yes), plus the county's r from the draws."""
    values = natural_values(res.param_blocks, res.draws).reshape(-1, len(res.param_names))
    col = {name: j for j, name in enumerate(res.param_names)}
    beta = values[:, [col[f"beta[{c}]"] for c in ("(Intercept)", "floor", "basement[partial]", "basement[yes]")]]
    X = np.column_stack([np.ones(len(new)), new.floor, new.basement == "partial", new.basement == "yes"]).astype(float)
    lin = beta @ X.T
    if groups:
        label = [c if isinstance(c, str) else rs.models.groups.group_label(c) for c in new.county]
        lin += values[:, [col[f"r_county[{c},(Intercept)]"] for c in label]]
    return lin


@pytest.mark.parametrize("which", ["text_fit", "numeric_fit"])
def test_predictions_equal_the_hand_built_design(which: str, request: pytest.FixtureRequest) -> None:
    df, res = request.getfixturevalue(which)
    new = df[["floor", "basement", "county"]].iloc[:12].reset_index(drop=True)  # no response column
    lin = hand_linpred(res, new)
    np.testing.assert_allclose(res.predict(new, "linpred", draws="all"), lin, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(res.predict(new, "epred", draws="all"), expit(lin), rtol=1e-12)
    np.testing.assert_allclose(res.predict(new, draws="all"), expit(lin).mean(axis=0), rtol=1e-12)
    ydraw = res.predict(new, "predict", draws="all", seed=4)
    assert ydraw.shape == lin.shape and set(np.unique(ydraw)) <= {0.0, 1.0}
    np.testing.assert_array_equal(ydraw, res.predict(new, "draws", draws="all", seed=4))  # the older name
    # population level: the group effects left out, in either of brms' spellings
    pop = hand_linpred(res, new, groups=False)
    for spelling in ("NA", "~0"):
        np.testing.assert_allclose(res.predict(new, "linpred", draws="all", re_formula=spelling), pop, rtol=1e-12)


def test_column_order_and_extra_columns_change_nothing(text_fit) -> None:
    df, res = text_fit
    new = df.iloc[:10]  # the response and every column, in the data's order
    want = res.predict(new[["floor", "basement", "county"]], "epred", draws="all")
    shuffled = new[["county", "high", "basement", "floor"]].assign(unused=1.0)
    np.testing.assert_array_equal(res.predict(shuffled, "epred", draws="all"), want)
    mapping = {c: new[c].tolist() for c in ("basement", "county", "floor")}
    np.testing.assert_array_equal(res.predict(mapping, "epred", draws="all"), want)
    # a bare array: the data's columns in their order, the response present or left out
    np.testing.assert_array_equal(res.predict(new.to_numpy(), "epred", draws="all"), want)
    np.testing.assert_array_equal(res.predict(new.drop(columns="high").to_numpy(), "epred", draws="all"), want)


@pytest.mark.parametrize("which,unseen", [("text_fit", "Nowhere"), ("numeric_fit", 99)])
def test_new_levels_are_drawn_from_their_population_or_refused(which: str, unseen, request) -> None:
    df, res = request.getfixturevalue(which)
    new = pd.DataFrame({"floor": [0.3, 0.3], "basement": ["yes", "yes"], "county": [df.county.iloc[0], unseen]})
    lin = res.predict(new, "linpred", draws="all", seed=7)
    np.testing.assert_allclose(lin[:, 0], hand_linpred(res, new.iloc[:1])[:, 0], rtol=1e-12)
    # the new county's effect: sd_county · z per draw, z ~ N(0, 1) from a stream of (seed, label)
    effect = lin[:, 1] - hand_linpred(res, new.iloc[1:], groups=False)[:, 0]
    values = natural_values(res.param_blocks, res.draws).reshape(-1, len(res.param_names))
    sd = values[:, res.param_names.index("sd_county[(Intercept)]")]
    z = effect / sd
    assert 0.3 < z.std() < 3.0 and not np.allclose(effect, 0.0)
    np.testing.assert_array_equal(res.predict(new, "linpred", draws="all", seed=7), lin)  # seeded
    with pytest.raises(ArgumentError, match=rf"never saw: county='{unseen}'.*allow_new_levels=True") as err:
        res.predict(new, allow_new_levels=False)
    assert err.value.path == ("X",)
    known = res.predict(new.iloc[:1], "linpred", draws="all", allow_new_levels=False)
    np.testing.assert_allclose(known[:, 0], lin[:, 0], rtol=1e-12)  # one row, not two: BLAS may sum apart
    res.predict(new, allow_new_levels=False, re_formula="NA")  # no group effects: no level is new


def test_missing_or_unreadable_columns_are_refused_naming_them(text_fit) -> None:
    df, res = text_fit
    new = df[["floor", "basement", "county"]].iloc[:3]
    cases = [
        (new.drop(columns="county"), ("X", "columns"), r"no column\(s\) 'county'.*the response 'high' is not needed"),
        (new.rename(columns={"floor": "flor"}), ("X", "columns"), r"no column\(s\) 'floor'"),
        (new.assign(floor=["a", "b", "c"]), ("X",), r"column 'floor' must hold numbers.*'a'"),
        (new.assign(floor=np.nan), ("X",), r"column 'floor' contains NaN"),
        (new.assign(basement="attic"), ("X",), r"column 'basement' has level\(s\) \['attic'\] that set-up did not see"),
        (new.to_numpy()[:, :2], ("X",), r"has 2 columns; a formula model reads new rows by column name"),
        ({"floor": [1.0], "basement": ["no", "yes"], "county": ["Anoka"]}, ("X",), "different lengths"),
    ]
    for rows, path, msg in cases:
        with pytest.raises(ArgumentError, match=msg) as err:
            res.predict(rows)
        assert err.value.path == path, msg
    for kwargs, path in [({"kind": "posterior"}, ("kind",)), ({"re_formula": "~ (1 | county)"}, ("re_formula",))]:
        with pytest.raises(ArgumentError) as err:
            res.predict(new, **kwargs)
        assert err.value.path == path


def test_a_model_with_group_effects_reads_a_frame_by_name_too() -> None:
    """`LinearRegression(group_effects=...)` without a formula: a frame's columns are matched by name, not place."""
    rng = np.random.default_rng(5)
    frame = pd.DataFrame(
        {"(Intercept)": 1.0, "age": rng.normal(size=90), "hospital": np.repeat(["St Mary", "Guy's", "UCLH"], 30)}
    )
    y = 1.0 + 0.5 * frame.age + rng.normal(size=90)
    model = rs.models.LinearRegression(prior_scale=2.5, group_effects=rs.GroupEffects("hospital"))
    res = rs.sample(model, rs.shard(frame, y, num_shards=3, by="hospital"), **KW)
    new = frame.iloc[[0, 40, 80]]
    want = res.predict(new, "epred", draws="all")
    np.testing.assert_array_equal(res.predict(new[["hospital", "age", "(Intercept)"]], "epred", draws="all"), want)
    values = natural_values(res.param_blocks, res.draws).reshape(-1, len(res.param_names))
    j = res.param_names.index("r_hospital[St Mary,(Intercept)]")
    np.testing.assert_allclose(want[:, 0], values[:, 0] + new.age.iloc[0] * values[:, 1] + values[:, j], rtol=1e-12)
    with pytest.raises(ArgumentError, match=r"no column\(s\) 'age'") as err:
        res.predict(new[["hospital", "(Intercept)"]])
    assert err.value.path == ("X", "columns")


@pytest.fixture(scope="module")
def spanning_fit() -> tuple[pd.DataFrame, rs.Result]:
    """Counties at both shards (rows split in order, counties drawn at random): county's effects are global."""
    df = homes(seed=5)
    model = rs.models.from_formula(
        "high ~ floor + basement + (1 | county)", family="bernoulli", priors={"b": Normal(0, 2.5)}
    )
    res = rs.sample(model, rs.shard(df, num_shards=2), **KW)
    assert "r_county[Aitkin,(Intercept)]" in res.param_names[:12]  # among θ's coordinates, not a worker's
    return df, res


def test_a_spanning_factor_predicts_known_and_new_levels(spanning_fit) -> None:
    """A factor whose levels span shards (its effects global, sampled as z): known counties' predictions equal the
    hand-built design's with r = sd · z; a new county's effect is sd · z with z ~ N(0, 1) per draw (seeded), or is
    refused naming it; re_formula="NA" leaves the effects out; many rows in several blocks give the same numbers."""
    df, res = spanning_fit
    new = pd.DataFrame(
        {"floor": [0.3, -1.0, 0.3], "basement": ["yes", "no", "yes"], "county": ["Anoka", "Benton", "Nowhere"]}
    )
    lin = res.predict(new, "linpred", draws="all", seed=7)
    np.testing.assert_allclose(lin[:, :2], hand_linpred(res, new.iloc[:2]), rtol=1e-12, atol=1e-12)
    pop = hand_linpred(res, new, groups=False)
    values = natural_values(res.param_blocks, res.draws).reshape(-1, len(res.param_names))
    z = (lin[:, 2] - pop[:, 2]) / values[:, res.param_names.index("sd_county[(Intercept)]")]
    assert 0.3 < z.std() < 3.0 and not np.allclose(z, 0.0)
    np.testing.assert_array_equal(res.predict(new, "linpred", draws="all", seed=7), lin)
    with pytest.raises(ArgumentError, match=r"never saw: county='Nowhere'"):
        res.predict(new, allow_new_levels=False)
    np.testing.assert_allclose(res.predict(new, "linpred", draws="all", re_formula="NA"), pop, rtol=1e-12)
    many = df[["floor", "basement", "county"]].iloc[np.arange(3000) % len(df)].reset_index(drop=True)
    whole = res.predict(many, "linpred", draws="all")
    np.testing.assert_allclose(whole, hand_linpred(res, many), rtol=1e-10, atol=1e-10)
