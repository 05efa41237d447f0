"""The printed fit (issue 48 item 5): `print(result)` lays out a brms-style summary of a small seeded multilevel run,
its numbers the posterior mean, sd, 95 % equal-tailed interval, R-hat and bulk/tail ESS of arviz-stats; the repr
stays one line; pp_check's records print short, name the response and draw exactly the replicates asked for."""

from __future__ import annotations

import warnings

import arviz_stats as azs
import numpy as np
import pandas as pd
import pytest

import raysampler as rs
from raysampler.fitprint import COLUMNS, FitSummary, of_service


@pytest.fixture(scope="module")
def radon() -> rs.Result:
    rng = np.random.default_rng(0)
    n = 240
    county = rng.integers(0, 6, n)
    df = pd.DataFrame({"floor": rng.normal(size=n), "county": county + 1})
    df["log_radon"] = 1.0 - 0.6 * df.floor + rng.normal(0, 0.4, 6)[county] + rng.normal(0, 0.7, n)
    model = rs.models.from_formula("log_radon ~ floor + (1 + floor | county)", family="gaussian")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a short run: its ESS warning
        return rs.sample(
            model, rs.shard(df, num_shards=2, by="county"), chains=2, num_rounds=60, burn_in=20, seed=1,
            executor="local", progress=False,
        )  # fmt: skip


def test_the_printed_fit_has_brms_sections_and_arviz_numbers(radon: rs.Result) -> None:
    text = str(radon)
    lines = text.splitlines()
    assert lines[0] == " Family: gaussian" and lines[1] == "  Links: mu = identity; sigma = identity"
    assert "Formula: log_radon ~ floor + (1 + floor | county)" in text
    assert "   Data: 240 observations in 2 shards" in text
    assert "  Draws: 2 chains, each with 60 draws kept; warmup = 20; thin = 1;" in text
    order = [text.index(s) for s in ("Group-Level Effects:", "Population-Level Effects:", "Distributional Param")]
    assert order == sorted(order) and "~county (Number of levels: 6)" in text
    for row in ("sd(Intercept)", "sd(floor)", "cor(Intercept,floor)", "Intercept", "floor", "sigma"):
        assert any(line.split(" ")[0] == row for line in lines), row
    assert "r_county" not in text  # the group effects are ranef()'s
    tables = radon.fit_summary().tables()
    assert set(tables) == {"group:county", "population", "distributional"}
    post = radon.posterior()
    beta = post["beta"].reshape(2, 60, -1)
    pop = tables["population"]
    assert list(pop.columns) == list(COLUMNS) and list(pop.index) == ["Intercept", "floor"]
    flat = beta.reshape(-1, 2)
    np.testing.assert_allclose(pop["Estimate"], flat.mean(axis=0), rtol=1e-10)
    np.testing.assert_allclose(pop["Est.Error"], flat.std(axis=0), rtol=1e-6)
    np.testing.assert_allclose(pop["l-95% CI"], np.quantile(flat, 0.025, axis=0), rtol=1e-10)
    np.testing.assert_allclose(pop["u-95% CI"], np.quantile(flat, 0.975, axis=0), rtol=1e-10)
    for j in range(2):
        assert pop["Rhat"].iloc[j] == pytest.approx(float(azs.rhat(beta[:, :, j])), rel=1e-10)
        assert pop["Bulk_ESS"].iloc[j] == pytest.approx(float(azs.ess(beta[:, :, j], method="bulk")), rel=1e-10)
    sigma = tables["distributional"].loc["sigma"]
    assert sigma["Estimate"] == pytest.approx(float(post["sigma"].mean()), rel=1e-10)
    assert list(tables["group:county"].index) == ["sd(Intercept)", "sd(floor)", "cor(Intercept,floor)"]
    r = repr(radon)
    assert "\n" not in r and "formula='log_radon ~ floor + (1 + floor | county)'" in r


def test_the_service_path_prints_the_same_tables_from_the_wire_fields(radon: rs.Result) -> None:
    """What the CLI prints: the run object (workers with sites and rows) and the summary table at ci_prob 0.95."""
    table = radon.summary(ci_prob=0.95)
    info = {
        "id": "r1",
        "status": "SUCCEEDED",
        "chains": 2,
        "spec": {"model": {"family": "gaussian", "formula": "log_radon ~ floor + (1 + floor | county)"},
                 "burn_in": 20, "thin": 1, "algorithm": {"name": "dglmc"}},
        "progress": {"draws_stored": 60},
        "workers": [{"shard": 0, "site": "north", "rows": 130}, {"shard": 1, "site": "south", "rows": 110}],
    }  # fmt: skip
    fit = of_service(info, table)
    assert isinstance(fit, FitSummary)
    text = str(fit)
    assert "   Data: 240 observations in 2 shards at sites north (130 rows), south (110 rows)" in text
    assert "~county (Number of levels: 6)" in text and "Draws were sampled using dglmc." in text
    ours, theirs = radon.fit_summary().tables(), fit.tables()
    for key in ours:
        np.testing.assert_allclose(theirs[key].to_numpy(float), ours[key].to_numpy(float), rtol=1e-8)


def test_pp_check_prints_short_names_the_response_and_draws_ten(radon: rs.Result) -> None:
    dens = radon.pp_check()
    assert dens.replicated.shape[0] == 10 and dens.response == "log_radon"
    r = repr(dens)
    assert r.startswith("PpcDensity(response='log_radon', n=240, replicated=10") and len(r) < 200
    hist = radon.pp_check("hist", draws=7)
    assert hist.replicated.shape[0] == 7 and "\n" not in repr(hist)
    med = radon.pp_check("stat", "median", draws=20)
    assert med.replicated.shape == (20,) and "stat='median'" in repr(med)
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    assert dens.plot().get_xlabel() == "log_radon"
    assert med.plot().get_xlabel() == "median(log_radon)"
