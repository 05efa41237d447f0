"""Grouping factors whose levels occur at several shards (issue 48, item 3): their non-centred effects z ~ N(0, I)
are global parameters beside β (r = sd · z), their prior counted once in the global prior; factors whose levels
stay within one shard stay local; the split is decided at set-up from the levels the shards report. Checked
exactly (the joint density of crossed data over 3 shards equals the one-shard all-local model's) and against the
exact posterior of a hierarchical linear model (`hier_oracle`)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

import raysampler as rs
from raysampler.diagnostics import RunWarning
from raysampler.errors import ArgumentError
from raysampler.models import DataSpec
from raysampler.models.groups import spanning_factors


def crossed(n: int = 150, seed: int = 0) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
    """Counties (each at one of 3 sites, by row order) crossed with housing types found at every site."""
    rng = np.random.default_rng(seed)
    county = np.sort(rng.integers(0, 9, n)).astype(float)
    housing = rng.integers(1, 5, n).astype(float)
    x = rng.normal(size=n)
    y = 0.3 + x + rng.normal(0, 0.6, 9)[county.astype(int)] + rng.normal(0, 0.4, 5)[housing.astype(int)]
    y = y + rng.normal(size=n)
    return np.column_stack([np.ones(n), x, county, housing]), y, ("(Intercept)", "x", "county", "housing")


def test_the_split_follows_the_levels_the_shards_report() -> None:
    auto, local, glob = (rs.GroupEffects(g, placement=p) for g, p in [("a", "auto"), ("b", "local"), ("c", "global")])
    labels = [(["1", "2"], ["x"], ["u"]), (["2", "3"], ["y"], ["v"])]  # shard i's labels per factor
    assert spanning_factors((auto, local, glob), labels) == {"a": ("1", "2", "3"), "c": ("u", "v")}
    with pytest.raises(ArgumentError, match="group b=x has rows in shards 0 and 1"):
        spanning_factors((auto, local), [(["1"], ["x"]), (["1"], ["x"])])
    with pytest.raises(ArgumentError, match="placement must be one of auto, local, global"):
        rs.GroupEffects("a", placement="everywhere")


def test_crossed_factors_over_three_shards_give_the_one_shard_joint_density_exactly() -> None:
    """Σ_i U_i(θ, z, η_i) + prior(θ, z) (housing global, county local, 3 shards) equals the one-shard model's
    U(θ, η_county, η_housing) + prior(θ) at the same point: the housing effects' N(0, I) prior counted once, in the
    global prior, and every shard's rows reading their housing levels against the whole list. Gradients and
    Hessian-vector products agree with finite differences of the potential."""
    X, y, cols = crossed()
    ge = (rs.GroupEffects("county", slopes=("x",), correlated=True), rs.GroupEffects("housing"))
    model = rs.models.LinearRegression(noise_sd=1.0, group_effects=ge)
    spec = DataSpec(4, None, len(y), cols)
    one = model.bind(spec)
    shards = rs.shard(X, y, num_shards=3, columns=cols, by="county")  # counties whole, housing types everywhere
    labels = [one.group_labels(*one.shard_data(s.X, s.y, None)) for s in shards]
    wide = spanning_factors(one.factors, labels)
    assert list(wide) == ["housing"] and wide["housing"] == ("1", "2", "3", "4")
    span = model.bind(dataclasses.replace(spec, spanning=tuple(wide.items())))
    assert span.dim == one.dim + 4 and span.param_names()[-4:] == [f"r_housing[{h},(Intercept)]" for h in range(1, 5)]
    rng = np.random.default_rng(1)
    Xo, yo = one.shard_data(X, y, None)
    n_county = 2 * len(np.unique(X[:, 2]))
    x = 0.5 * rng.standard_normal((3, one.dim + one.local_dim(Xo, yo)))
    theta, eta_c, eta_h = x[:, : one.dim], x[:, one.dim : one.dim + n_county], x[:, one.dim + n_county :]
    th = np.hstack([theta, eta_h])
    total = span.prior().potential(th)
    at = 0
    for s in shards:
        Xs, ys = span.shard_data(s.X, s.y, None)
        li = span.local_dim(Xs, ys)
        (block,) = span.local_blocks(Xs, ys)  # this shard's counties (labels 0..8: their place in the one-shard η)
        own = np.concatenate([[2 * int(c), 2 * int(c) + 1] for c in block.coords()])
        xs = np.hstack([th, eta_c[:, own]])
        total = total + span.potential(Xs, ys, xs)
        at += li
        g = span.grad(Xs, ys, xs)
        eps, v = 1e-6, rng.standard_normal(xs.shape)
        fd = (span.potential(Xs, ys, xs + eps * v) - span.potential(Xs, ys, xs - eps * v)) / (2 * eps)
        np.testing.assert_allclose(np.einsum("kj,kj->k", g, v), fd, rtol=1e-6, atol=1e-6)
        hv = (span.grad(Xs, ys, xs + eps * v) - span.grad(Xs, ys, xs - eps * v)) / (2 * eps)
        np.testing.assert_allclose(span.hvp(Xs, ys, xs, v), hv, rtol=1e-5, atol=1e-5)
        lc = span.local_curvature(Xs, ys, xs)
        np.testing.assert_allclose(lc.value, span.potential(Xs, ys, xs), rtol=1e-12)
    assert at == n_county
    want = one.prior().potential(theta) + one.potential(Xo, yo, x)
    np.testing.assert_allclose(total, want, rtol=1e-10)


#: rounds giving the spanning factor's effects a bulk ESS of ~130 (the minimum over the 15 parameters ~85, seed 1)
ROUNDS = 1200


@pytest.mark.filterwarnings("ignore::raysampler.diagnostics.RunWarning")  # the ESS below sets the tolerances
def test_a_factor_split_at_random_over_shards_matches_the_exact_posterior() -> None:
    """Rows split at random over 3 shards, so every group is at every shard: the factor's effects are global and
    DG-LMC's means and sds of β, log sd and r = sd · z match the exact posterior (the one-shard model's, Gaussian in
    (β, η) given log sd, log sd on a grid: `hier_oracle`): means within 0.1 sd, sds within 10%, each plus Z
    Monte-Carlo standard errors from the ESS."""
    from support.hier_oracle import exact_moments
    from support.stats_helpers import Z, ess

    rng = np.random.default_rng(0)
    n, G = 240, 12
    g = rng.integers(0, G, n).astype(float)
    x = rng.normal(size=n)
    y = 0.5 + x + rng.normal(scale=0.7, size=G)[g.astype(int)] + rng.normal(size=n)
    X, cols = np.column_stack([np.ones(n), x, g, np.ones(n)]), ("(Intercept)", "x", "g", "s")
    model = rs.models.LinearRegression(noise_sd="s", group_effects=rs.GroupEffects("g"))
    one = model.bind(DataSpec(4, None, n, cols))
    mu, sd = exact_moments(one, [one.shard_data(X, y, None)], np.linspace(-5.0, 2.5, 600))
    res = rs.sample(
        model, rs.shard(X, y, num_shards=3, columns=cols), num_rounds=ROUNDS, chains=16, seed=1, executor="local",
        progress=False,
    )  # fmt: skip
    assert res.param_names[2:4] == ["sd_g[(Intercept)]", "r_g[0,(Intercept)]"] and res.draws.shape[2] == 15
    D = res.draws.copy()
    D[..., 3:] = np.exp(D[..., 2:3]) * D[..., 3:]  # r = sd · z
    reported = res.posterior()["r_g"].reshape(D.shape[0], D.shape[1], -1)
    np.testing.assert_allclose(reported, D[..., 3:], rtol=1e-12)  # reported as r, sampled as z
    for j in range(D.shape[2]):
        e = ess(D[..., j])
        assert e > 50, f"{res.param_names[j]}: ESS {e:.0f}"
        m_err = abs(D[..., j].mean() - mu[j]) / sd[j]
        assert m_err < 0.1 + Z / np.sqrt(e), f"{res.param_names[j]}: mean off by {m_err:.3f} sd (ESS {e:.0f})"
        s_err = abs(D[..., j].std() / sd[j] - 1.0)
        assert s_err < 0.1 + Z / np.sqrt(2.0 * e), f"{res.param_names[j]}: sd off by {s_err:.1%} (ESS {e:.0f})"


@pytest.mark.filterwarnings("ignore::raysampler.diagnostics.RunWarning")  # a short run: names and finiteness
def test_a_formula_with_crossed_local_and_spanning_factors_runs() -> None:
    """`(1 | county) + (1 | housing)` over sites that each hold whole counties: county stays local (r_county, from
    the workers), housing becomes global (r_housing, sampled as z in θ); the run is finite."""
    X, y, cols = crossed(120)
    df = pd.DataFrame(X[:, 1:], columns=list(cols[1:])).assign(y=y)
    df["county"] = [f"c{int(v)}" for v in df.county]
    model = rs.models.from_formula("y ~ x + (1 | county) + (1 | housing)")
    shards = rs.shard(df, num_shards=3, by="county")
    res = rs.sample(model, shards, chains=2, num_rounds=20, seed=0, executor="local", progress=False)
    names = res.param_names
    assert names[:5] == ["beta[(Intercept)]", "beta[x]", "sigma", "sd_county[(Intercept)]", "sd_housing[(Intercept)]"]
    assert names[5:9] == [f"r_housing[{h},(Intercept)]" for h in range(1, 5)]
    assert sorted(names[9:]) == sorted(f"r_county[c{c},(Intercept)]" for c in range(9))
    assert np.all(np.isfinite(res.draws))
    effects = res.ranef()  # brms' ranef: both factors, the spanning one as r = sd · z
    assert set(effects) == {"county", "housing"} and len(effects["housing"]) == 4
    sd = np.exp(res.draws[..., 4])
    by_hand = (sd[..., None] * res.draws[..., 5:9]).mean(axis=(0, 1))
    np.testing.assert_allclose(effects["housing"]["Estimate"].to_numpy(), by_hand, rtol=1e-10)


def test_a_spanning_factor_is_reported_as_scale_times_z_for_correlated_effects() -> None:
    """The "group_scale" block: r_g = diag(sd) L z_g per level, sd and L from the factor's blocks, the same M the
    model's potential uses (`scale_at`); one coordinate read alone (`natural_coordinate`, the trace and plot
    paths) equals the whole layout's (`natural_values`), for every coordinate, the correlations' too."""
    from raysampler.models.contract import ParamBlock, natural_coordinate, natural_values
    from raysampler.models.groups.scales import apply_scale, scale_at

    ge = rs.GroupEffects("g", slopes=("a", "b"), correlated=True)  # q = 3, three correlations
    q, G = 3, 4
    effects = ("(Intercept)", "a", "b")
    pairs = ("(Intercept),a", "(Intercept),b", "a,b")
    levels = tuple(f"L{k}" for k in range(G))
    blocks = (
        ParamBlock("beta", 2, "coef", ("(Intercept)", "x")),
        ParamBlock("sd_g", q, "g_effect", effects, "exp"),
        ParamBlock("cor_g", 3, "g_cor", pairs, "cholesky_corr"),
        ParamBlock("r_g", G * q, "g", levels, "group_scale", "g_effect", effects),
    )
    theta = np.random.default_rng(3).normal(size=(2, 5, 2 + q + 3 + G * q))
    out = natural_values(blocks, theta)
    flat = theta.reshape(-1, theta.shape[-1])
    M = scale_at(ge, flat[:, 2 : 2 + ge.n_scale], 0).M
    r = apply_scale(M, flat[:, 8:].reshape(-1, G, q)).reshape(theta.shape[:2] + (G * q,))
    np.testing.assert_allclose(out[..., 8:], r, rtol=1e-12, atol=1e-14)
    np.testing.assert_array_equal(out[..., :2], theta[..., :2])
    for j in range(theta.shape[-1]):
        alone = natural_coordinate(blocks, j, lambda k: theta[..., k])
        np.testing.assert_allclose(alone, out[..., j], rtol=1e-12, atol=1e-14, err_msg=f"coordinate {j}")
    with pytest.raises(ValueError, match="scale blocks"):
        blocks[3].natural(theta[..., 8:])


def test_a_formula_forces_a_factors_placement_by_its_grouping_column() -> None:
    """`from_formula(..., placement=...)`: "global" makes county's effects θ's although every county sits at one
    shard; "local" keeps housing's at the workers, so rows of one housing type at two shards are refused naming it;
    a column the formula does not group by, or another value, is an ArgumentError naming the column."""
    X, y, cols = crossed(120)
    df = pd.DataFrame(X[:, 1:], columns=list(cols[1:])).assign(y=y)
    shards = rs.shard(df, num_shards=3, by="county")
    kw = dict(chains=2, num_rounds=5, seed=0, executor="local", progress=False)
    model = rs.models.from_formula("y ~ x + (1 | county)", placement={"county": "global"})
    with pytest.warns(RunWarning):  # five rounds: the names are what is checked
        res = rs.sample(model, shards, **kw)
    assert res.param_names[4:] == [f"r_county[{c},(Intercept)]" for c in range(9)]
    forced = rs.models.from_formula("y ~ x + (1 | county) + (1 | housing)", placement={"housing": "local"})
    with pytest.raises(ArgumentError, match="housing"):
        rs.sample(forced, shards, **kw)
    with pytest.raises(ArgumentError, match="'ward' is not a grouping column") as err:
        rs.models.from_formula("y ~ x + (1 | county)", placement={"ward": "global"})
    assert err.value.path == ("model", "placement", "ward")
    with pytest.raises(ArgumentError, match="must be one of auto, local, global"):
        rs.models.from_formula("y ~ x + (1 | county)", placement={"county": "both"})
