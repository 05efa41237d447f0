"""Nested and interaction grouping factors in formulas (issue 48, item 3): `(1 | a/b)` is lme4's and brms'
`(1 | a) + (1 | a:b)`, the a:b factor's levels the pairs (a's level, b's level) named "<a>_<b>"; the model equals
the hand-expanded one with the pairs' labels in a column of their own (same potentials, same draws for a seed), and
predictions by name find an a:b level from its two columns."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import raysampler as rs
from raysampler.errors import ArgumentError
from raysampler.models import DataSpec

KW = dict(chains=2, num_rounds=6, burn_in=2, seed=3, executor="local", progress=False)
COUNTIES = ["Aitkin", "Anoka", "Becker", "Beltrami", "Benton", "Big Stone"]


def homes(n: int = 160, seed: int = 0) -> pd.DataFrame:
    """Homes in text-named counties with a numeric housing type, and the hand-made pair column `ch`."""
    rng = np.random.default_rng(seed)
    df = pd.DataFrame(
        {"x": rng.standard_normal(n), "county": rng.choice(COUNTIES, n), "housing": rng.integers(1, 4, n) * 1.0}
    )
    effect = dict(zip(COUNTIES, rng.normal(0, 0.5, len(COUNTIES))))
    df["y"] = 0.5 * df.x + df.county.map(effect) + 0.3 * rng.standard_normal(n)
    df["ch"] = df.county + "_" + df.housing.map(lambda v: str(int(v)))
    return df


@pytest.mark.filterwarnings("ignore::raysampler.diagnostics.RunWarning")  # a few rounds: the draws are compared
@pytest.mark.parametrize("slope", [False, True])
def test_a_nested_term_equals_the_hand_expanded_model(slope: bool) -> None:
    df = homes()
    term = "1 + x" if slope else "1"
    nested = rs.models.from_formula(f"y ~ x + ({term} | county/housing)")
    hand = rs.models.from_formula(f"y ~ x + ({term} | county) + ({term} | ch)")
    assert [g.group for g in nested.group_effects] == ["county", "county:housing"]
    assert [g.correlated for g in nested.group_effects] == [slope, slope]  # one term, one bar: as written
    a = rs.sample(nested, rs.shard(df.drop(columns="ch"), num_shards=2, by="county"), **KW)
    b = rs.sample(hand, rs.shard(df, num_shards=2, by="county"), **KW)
    assert [p.replace("county:housing", "ch") for p in a.param_names] == b.param_names
    assert "r_county:housing[Big Stone_2,(Intercept)]" in a.param_names  # brms' name of the pair's level
    np.testing.assert_array_equal(a.draws, b.draws)


def test_an_interaction_factor_from_numeric_columns_and_its_potential() -> None:
    """`(1 | a:b)` alone, both columns numbers: the pair column is built at the site from its own rows, its levels
    named from a spec that carries no reported pairs too; the potential equals the hand-made pair column's, and new
    rows given by name code a pair as the site did."""
    rng = np.random.default_rng(2)
    n = 90
    df = pd.DataFrame({"x": rng.standard_normal(n), "a": rng.integers(1, 4, n) * 1.0, "b": rng.integers(7, 9, n) * 1.0})
    df["y"] = df.x + rng.standard_normal(n)
    df["ab"] = [f"{int(u)}_{int(v)}" for u, v in zip(df.a, df.b)]
    cats = (("a", (1.0, 2.0, 3.0)), ("b", (7.0, 8.0)))
    cols = ("x", "a", "b", "y")
    inter = rs.models.from_formula("y ~ x + (1 | a:b)").bind(DataSpec(4, None, n, cols, cats))
    labels = tuple(sorted(set(df.ab)))
    hand = rs.models.from_formula("y ~ x + (1 | ab)").bind(DataSpec(5, None, n, (*cols, "ab"), None, (("ab", labels),)))
    from raysampler.shards import label_code

    raw = df.assign(ab=[label_code(v) for v in df.ab])
    Xi, yi = inter.shard_data(df[list(cols)].to_numpy(), df.y.to_numpy(), None)
    Xh, yh = hand.shard_data(raw[[*cols, "ab"]].to_numpy(), df.y.to_numpy(), None)
    np.testing.assert_array_equal(Xi, Xh)
    x = rng.standard_normal((3, inter.dim + inter.local_dim(Xi, yi)))
    np.testing.assert_array_equal(inter.potential(Xi, yi, x), hand.potential(Xh, yh, x))
    assert [b.labels for b in inter.local_blocks(Xi, yi)] == [b.labels for b in hand.local_blocks(Xh, yh)]
    new = inter.new_rows({"x": df.x.to_numpy(), "a": df.a.astype(int).tolist(), "b": df.b.to_numpy()})
    np.testing.assert_array_equal(new[:, -2], Xi[:, -2])  # the pair's code, as the site's X holds it
    with pytest.raises(ArgumentError, match=r"levels of 'b' are unknown"):
        rs.models.from_formula("y ~ x + (1 | a:b)").bind(DataSpec(4, None, n, cols, cats[:1]))
