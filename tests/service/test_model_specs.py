"""Models with priors over REST (in-process app): every prior and per-row input by name, the natural-scale draws and
named parameters they report, and a 422 naming the field for a bad prior."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from support.reference_problems import PROBLEMS, reference
from support.service_helpers import ALICE, final, hdr, spec

import raysampler as rs

LINEAR = {
    "family": "linear_regression",
    "coef_prior": {"normal": {"mean": 0, "scale": [100, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10]}},
    "sigma_prior": {"half_cauchy": {"scale": 2.5}},
}


def _body(model, data=None, **over):
    return spec(
        model=model,
        data=data or {"dataset": "builtin:diabetes"},
        **({"num_rounds": 60, "burn_in": 20, "chains": 2} | over),
    )


def test_linear_regression_with_unknown_noise_reports_named_parameters_on_the_natural_scale(app_client):
    c, h = app_client, hdr(ALICE)
    r = c.post("/v1/runs", json=_body(LINEAR), headers=h)
    assert r.status_code == 202, r.text
    info = final(c, r.json()["id"])
    assert info["status"] == "SUCCEEDED", info
    lines = [json.loads(x) for x in c.get(f"/v1/runs/{info['id']}/draws", headers=h).text.splitlines()]
    names = lines[0]["param_names"]
    assert names[0] == "beta[(Intercept)]" and names[-1] == "sigma" and len(names) == 12
    sigma = np.array([line["values"][-1] for line in lines[1:]])
    assert np.all(sigma > 0) and 0.3 < np.median(sigma) < 3.0  # σ itself (standardised target), not log σ
    rows = c.get(f"/v1/runs/{info['id']}/summary", headers=h).json()["rows"]
    assert [row["param"] for row in rows] == names
    assert rows[-1]["mean"] == pytest.approx(float(sigma.mean()), rel=1e-9)


def test_offset_column_from_an_uploaded_file(app_client):
    """poisson_regression with offset_column: the upload keeps its column names, the offset is not a coefficient."""
    c, h = app_client, hdr(ALICE)
    X, y, columns = PROBLEMS["poisson_offset"].load()
    text = (
        ",".join(("y",) + columns)
        + "\n"
        + "\n".join(",".join(repr(float(v)) for v in (yi, *xi)) for xi, yi in zip(X, y))
    )
    up = c.post("/v1/datasets", files={"file": ("counts.csv", io.BytesIO(text.encode()))}, headers=h)
    assert up.status_code == 201, up.text
    model = {
        "family": "poisson_regression",
        "coef_prior": {"normal": {"scale": [5, 1, 1]}},
        "offset_column": "log_exposure",
    }
    r = c.post("/v1/runs", json=_body(model, {"dataset_id": up.json()["id"]}, num_rounds=300, burn_in=100), headers=h)
    assert r.status_code == 202, r.text
    info = final(c, r.json()["id"])
    assert info["status"] == "SUCCEEDED", info
    rows = c.get(f"/v1/runs/{info['id']}/summary", headers=h).json()["rows"]
    ref = reference("poisson_offset")
    assert [row["param"] for row in rows] == ref.names
    means = np.array([row["mean"] for row in rows])
    assert np.all(np.abs(means - ref.mean) < ref.sd)  # the offset was applied (without it the intercept moves by ~1)


def _upload(c, h, columns, X, y):
    text = (
        ",".join(("y", *columns))
        + "\n"
        + "\n".join(",".join(repr(float(v)) for v in (yi, *xi)) for xi, yi in zip(X, y))
    )
    up = c.post("/v1/datasets", files={"file": ("data.csv", io.BytesIO(text.encode()))}, headers=h)
    assert up.status_code == 201, up.text
    return up.json()["id"]


def test_known_per_row_noise_from_a_column(app_client):
    """linear_regression with noise_sd="se" (a meta-analysis): the column is each row's known sd, not a feature; the
    posterior means match the closed form."""
    c, h = app_client, hdr(ALICE)
    rng = np.random.default_rng(5)
    n = 80
    dose, se = rng.uniform(-1, 1, n), rng.uniform(0.1, 0.5, n)
    X = np.column_stack([np.ones(n), se, dose])
    y = 0.2 + 0.7 * dose + se * rng.standard_normal(n)
    data = {"dataset_id": _upload(c, h, ("(Intercept)", "se", "dose"), X, y)}
    model = {"family": "linear_regression", "noise_sd": "se", "prior_scale": 2.0}
    r = c.post("/v1/runs", json=_body(model, data, num_rounds=600, burn_in=100, chains=4), headers=h)
    assert r.status_code == 202, r.text
    info = final(c, r.json()["id"])
    assert info["status"] == "SUCCEEDED", info
    rows = c.get(f"/v1/runs/{info['id']}/summary", headers=h).json()["rows"]
    assert [row["param"] for row in rows] == ["beta[(Intercept)]", "beta[dose]"]
    Xc, w = X[:, [0, 2]], 1 / se**2
    Q = Xc.T @ (Xc * w[:, None]) + np.eye(2) / 4
    mean, sd = np.linalg.solve(Q, Xc.T @ (w * y)), np.sqrt(np.diag(np.linalg.inv(Q)))
    assert np.all(np.abs(np.array([row["mean"] for row in rows]) - mean) < sd)
    bad = {"dataset_id": _upload(c, h, ("(Intercept)", "se", "dose"), np.where(np.arange(n)[:, None] == 7, 0.0, X), y)}
    r = c.post("/v1/runs", json=_body(model, bad), headers=h)
    assert r.status_code == 422 and "row 7" in r.text, r.text


@pytest.mark.parametrize(
    "model,field",
    [
        (LINEAR | {"coef_prior": {"normal": {"scale": -1}}}, "model.coef_prior.normal.scale"),
        (LINEAR | {"coef_prior": {"normal": {"scale": [1, 2]}}}, "model.coef_prior"),  # 11 coefficients
        (LINEAR | {"coef_prior": {"student_t": {"nu": 3, "scale": []}}}, "model.coef_prior.student_t.scale"),
        (LINEAR | {"coef_prior": {"normal": {"mean": []}}}, "model.coef_prior.normal.mean"),
        (LINEAR | {"coef_prior": {"laplace": {"scale": 1}}}, "model.coef_prior.laplace"),
        (LINEAR | {"coef_prior": {"normal": {}, "student_t": {"nu": 3}}}, "model.coef_prior"),
        (LINEAR | {"sigma_prior": {"half_normal": {"scale": 0}}}, "model.sigma_prior.half_normal.scale"),
        (LINEAR | {"sigma_prior": {"gamma": {"a": 1}}}, "model.sigma_prior.gamma"),
        (LINEAR | {"noise_sd": -0.5}, "model.noise_sd"),
        ({"family": "linear_regression", "noise_sd": ""}, "model.noise_sd"),
        ({"family": "linear_regression", "noise_sd": "no_such_column"}, "model.noise_sd"),
        ({"family": "linear_regression", "noise_sd": True}, "model.noise_sd"),
        ({"family": "poisson_regression", "offset_column": "no_such_column"}, "model.offset_column"),
        ({"family": "logistic_regression", "sigma_prior": {"half_normal": {"scale": 1}}}, "model.sigma_prior"),
    ],
)
def test_bad_priors_get_422_naming_the_field(app_client, model, field):
    data = {"dataset": "builtin:breast_cancer"} if model["family"] == "logistic_regression" else None
    r = app_client.post("/v1/runs", json=_body(model, data), headers=hdr(ALICE))
    assert r.status_code == 422, r.text
    locs = [".".join(str(p) for p in e["loc"] if p != "body") for e in r.json()["detail"]]
    assert any(loc == field or loc.startswith(field + ".") for loc in locs), (field, r.json())


def test_group_effects_over_rest(app_client):
    """A hierarchical logistic model over REST on the built-in hospitals data: the run is sharded by hospital (the
    default with group_effects), reports beta, sd_hospital and every r_hospital[label,(Intercept)] in brms names, and
    its NetCDF holds r_hospital with dims (hospital, hospital_effect)."""
    import arviz_base as azb  # noqa: F401  (the NetCDF reader below needs the ArviZ stack)
    import xarray as xr

    c, h = app_client, hdr(ALICE)
    model = {
        "family": "logistic_regression",
        "prior_scale": 2.5,
        "group_effects": [{"group": "hospital", "sd_prior": {"half_normal": {"scale": 1.0}}}],
    }
    body = _body(model, {"dataset": "builtin:hospitals", "options": {"n_groups": 12}})  # 60 rounds: names, shapes
    r = c.post("/v1/runs", json=body, headers=h)
    assert r.status_code == 202, r.text
    info = final(c, r.json()["id"])
    assert info["status"] == "SUCCEEDED", (info.get("error"), info.get("failure"))
    rows = c.get(f"/v1/runs/{info['id']}/summary", headers=h).json()["rows"]
    names = [row["param"] for row in rows]
    assert names[:4] == ["beta[(Intercept)]", "beta[age]", "beta[severity]", "sd_hospital[(Intercept)]"]
    assert names[4:] == [f"r_hospital[{g},(Intercept)]" for g in range(1, 13)]
    assert rows[3]["mean"] > 0  # the sd itself, not its log
    nc = c.get(f"/v1/runs/{info['id']}/arviz", headers=h)
    assert nc.status_code == 200
    with xr.open_dataset(io.BytesIO(nc.content), group="posterior") as post:
        assert post["r_hospital"].dims == ("chain", "draw", "hospital", "hospital_effect")
        assert list(post["hospital"].values) == list(range(1, 13))  # numeric labels as numbers
    # checks: LOO at the shards, predictions for a known hospital and a new one (drawn from the population)
    lo = c.get(f"/v1/runs/{info['id']}/loo", headers=h)
    assert lo.status_code == 200, lo.text
    X, _ = rs.datasets.load("hospitals", n_groups=12)
    assert lo.json()["n_data_points"] == X.shape[0] and lo.json()["elpd"] < 0
    rows = [[1.0, 0.2, -0.3, 1.0], [1.0, 0.2, -0.3, 999.0]]
    pr = c.post(f"/v1/runs/{info['id']}/predict", json={"rows": rows}, headers=h)
    assert pr.status_code == 200, pr.text
    values = pr.json()["values"]
    assert len(values) == 2 and all(0.0 < v < 1.0 for v in values) and values[0] != values[1]
    bad = c.post(f"/v1/runs/{info['id']}/predict", json={"rows": [r[:3] for r in rows]}, headers=h)
    assert bad.status_code == 422 and "rows" in json.dumps(bad.json()["detail"]), bad.text


def test_correlated_group_effects_over_rest(app_client):
    """A correlated intercept and slope by hospital over REST (cor_prior LKJ): the run reports sd_hospital for both
    effects, cor_hospital[(Intercept),age] as a correlation in (−1, 1), and every r_hospital[label,effect]."""
    c, h = app_client, hdr(ALICE)
    model = {
        "family": "logistic_regression",
        "prior_scale": 2.5,
        "group_effects": [
            {"group": "hospital", "slopes": ["age"], "correlated": True, "cor_prior": {"lkj": {"eta": 2}}}
        ],
    }
    body = _body(model, {"dataset": "builtin:hospitals", "options": {"n_groups": 12}}, num_rounds=60)
    r = c.post("/v1/runs", json=body, headers=h)
    assert r.status_code == 202, r.text
    info = final(c, r.json()["id"])
    assert info["status"] == "SUCCEEDED", (info.get("error"), info.get("failure"))
    rows = {row["param"]: row for row in c.get(f"/v1/runs/{info['id']}/summary", headers=h).json()["rows"]}
    assert {"sd_hospital[(Intercept)]", "sd_hospital[age]", "r_hospital[12,age]"} <= set(rows)
    assert -1.0 < rows["cor_hospital[(Intercept),age]"]["mean"] < 1.0


def test_a_global_factor_over_rest_reports_its_effects_alike_in_summary_stream_and_trace(app_client):
    """`placement: "global"` over REST (correlated intercept and slope by hospital): the effects are θ's coordinates,
    sampled as z and reported as r = diag(sd) L z; the summary, the draw stream and each coordinate's trace (read
    alone, with the scales it needs) agree, the correlation's too."""
    c, h = app_client, hdr(ALICE)
    model = {
        "family": "logistic_regression",
        "prior_scale": 2.5,
        "group_effects": [{"group": "hospital", "slopes": ["age"], "correlated": True, "placement": "global"}],
    }
    body = _body(model, {"dataset": "builtin:hospitals", "options": {"n_groups": 6}}, num_rounds=40)
    r = c.post("/v1/runs", json=body, headers=h)
    assert r.status_code == 202, r.text
    info = final(c, r.json()["id"])
    assert info["status"] == "SUCCEEDED", (info.get("error"), info.get("failure"))
    names = info["param_names"]
    assert names[3:6] == ["sd_hospital[(Intercept)]", "sd_hospital[age]", "cor_hospital[(Intercept),age]"]
    assert names[6:] == [f"r_hospital[{g},{e}]" for g in range(1, 7) for e in ("(Intercept)", "age")]
    lines = [json.loads(x) for x in c.get(f"/v1/runs/{info['id']}/draws", headers=h).text.splitlines()[1:]]
    stream = np.array([[line["values"] for line in lines if line["chain"] == k] for k in range(2)])  # (2, 40, d)
    for j in (3, 5, 6, 9, len(names) - 1):
        t = c.get(f"/v1/runs/{info['id']}/trace", params={"param": j}, headers=h).json()
        np.testing.assert_allclose(np.array(t["values"]), stream[..., j], rtol=1e-12, err_msg=names[j])
    rows = {row["param"]: row for row in c.get(f"/v1/runs/{info['id']}/summary", headers=h).json()["rows"]}
    np.testing.assert_allclose(rows[names[9]]["mean"], stream[..., 9].mean(), rtol=1e-9)


def test_text_group_labels_from_an_upload_name_the_effects(app_client):
    """An uploaded CSV whose hospital column holds names: the run is split by hospital, its effects are named by the
    text (`r_hospital[St Mary,(Intercept)]`, ArviZ coordinates too), and a prediction row may name a hospital."""
    import arviz_base as azb  # noqa: F401  (the NetCDF reader below needs the ArviZ stack)
    import xarray as xr

    c, h = app_client, hdr(ALICE)
    rng = np.random.default_rng(7)
    names = ["St Mary", "Royal Free", "Guy's", "Homerton", "Whittington", "Barts"]
    hosp = np.repeat(names, 20)
    age = rng.normal(size=hosp.size)
    y = (rng.random(hosp.size) < 1.0 / (1.0 + np.exp(-0.5 * age))).astype(int)
    text = "y,(Intercept),age,hospital\n" + "".join(f"{v},1,{float(a)!r},{g}\n" for v, a, g in zip(y, age, hosp))
    up = c.post("/v1/datasets", files={"file": ("wards.csv", io.BytesIO(text.encode()))}, headers=h)
    assert up.status_code == 201, up.text
    model = {"family": "logistic_regression", "prior_scale": 2.5, "group_effects": [{"group": "hospital"}]}
    r = c.post("/v1/runs", json=_body(model, {"dataset_id": up.json()["id"]}, num_shards=2), headers=h)
    assert r.status_code == 202, r.text
    info = final(c, r.json()["id"])
    assert info["status"] == "SUCCEEDED", (info.get("error"), info.get("failure"))
    rows = c.get(f"/v1/runs/{info['id']}/summary", headers=h).json()["rows"]
    assert [row["param"] for row in rows][3:] == [f"r_hospital[{n},(Intercept)]" for n in sorted(names)]
    nc = c.get(f"/v1/runs/{info['id']}/arviz", headers=h)
    with xr.open_dataset(io.BytesIO(nc.content), group="posterior") as post:
        assert list(post["hospital"].values) == sorted(names)
    rows = [[1.0, 0.3, "St Mary"], [1.0, 0.3, "Elsewhere"]]
    pr = c.post(f"/v1/runs/{info['id']}/predict", json={"rows": rows}, headers=h)
    assert pr.status_code == 200, pr.text
    assert len(pr.json()["values"]) == 2


@pytest.mark.parametrize(
    "over,field",
    [
        ({"model": {"family": "logistic_regression", "group_effects": [{"group": "ward"}]}}, "model.group_effects"),
        (
            {"model": {"family": "logistic_regression", "group_effects": [{"group": "hospital", "slopes": ["x9"]}]}},
            "model.group_effects",
        ),
        ({"model": {"family": "logistic_regression", "group_effects": []}}, "model.group_effects"),
        (
            {"model": {"family": "logistic_regression", "group_effects": [{"group": "hospital", "placement": "x"}]}},
            "model.group_effects",
        ),
        (
            {"model": {"family": "logistic_regression", "group_effects": [{"group": "hospital", "correlated": True}]}},
            "model.group_effects",
        ),
        (
            {
                "model": {
                    "family": "logistic_regression",
                    "group_effects": [{"group": "hospital", "slopes": ["age"], "cor_prior": {"lkj": {"eta": 0}}}],
                }
            },
            "model.group_effects.0.cor_prior.lkj.eta",
        ),
        (
            {"model": {"family": "logistic_regression", "group_effects": [{"group": "hospital", "bad": 1}]}},
            "model.group_effects.0.bad",
        ),
        ({"algorithm": {"name": "dsgld"}}, "model.group_effects"),
        ({"shard_by": "hospital", "shard_strategy": "random"}, "body"),
    ],
)
def test_bad_group_effects_get_422_naming_the_field(app_client, over, field):
    body = (
        _body(
            {"family": "logistic_regression", "group_effects": [{"group": "hospital"}]},
            {"dataset": "builtin:hospitals", "options": {"n_groups": 8}},
        )
        | over
    )
    r = app_client.post("/v1/runs", json=body, headers=hdr(ALICE))
    assert r.status_code == 422, r.text
    locs = [".".join(str(p) for p in e["loc"]) for e in r.json()["detail"]]
    want = field if field == "body" else "body." + field
    assert any(loc == want or loc.startswith(want + ".") for loc in locs), (field, r.json())


def test_a_formula_over_rest_and_a_bad_one_names_the_field(app_client):
    """{"model": {"formula": ..., "family": "bernoulli"}}: the design is built from the rows where they are; the data
    are split by the formula's grouping column; a formula that cannot be read is a 422 at model.formula."""
    c, h = app_client, hdr(ALICE)
    model = {
        "formula": "y ~ age + severity + (1 | hospital)",
        "family": "bernoulli",
        "coef_prior": {"normal": {"scale": 2.5}},
        "sd_prior": {"half_normal": {"scale": 1.0}},
    }
    r = c.post("/v1/runs", json=_body(model, {"dataset": "builtin:hospitals"}, num_shards=2), headers=h)
    assert r.status_code == 202, r.text
    info = final(c, r.json()["id"])
    assert info["status"] == "SUCCEEDED", info
    names = info["param_names"]
    assert names[:4] == ["beta[(Intercept)]", "beta[age]", "beta[severity]", "sd_hospital[(Intercept)]"]
    assert names[4].startswith("r_hospital[")
    # brms-style summaries of the stored draws: fixef agrees with the summary's means, coef adds the group's effect
    summary = {row["param"]: row for row in c.get(f"/v1/runs/{info['id']}/summary", headers=h).json()["rows"]}
    fixef = c.get(f"/v1/runs/{info['id']}/effects", params={"kind": "fixef"}, headers=h).json()
    assert fixef["columns"] == ["Estimate", "Est.Error", "Q2.5", "Q97.5"]
    for row in fixef["rows"]:
        assert row["Estimate"] == pytest.approx(summary[f"beta[{row['index'][0]}]"]["mean"], rel=1e-9)
    ranef = c.get(f"/v1/runs/{info['id']}/effects", params={"kind": "ranef"}, headers=h).json()["rows"]
    coef = c.get(f"/v1/runs/{info['id']}/effects", params={"kind": "coef"}, headers=h).json()["rows"]
    first = ranef[0]["index"]  # (label, "(Intercept)")
    own = next(r for r in coef if r["index"] == first)
    assert own["group"] == "hospital"
    assert own["Estimate"] == pytest.approx(fixef["rows"][0]["Estimate"] + ranef[0]["Estimate"], rel=1e-9)
    prior = c.get(f"/v1/runs/{info['id']}/effects", params={"kind": "prior"}, headers=h).json()["rows"]
    assert [(r["class"], r["group"]) for r in prior] == [("b", ""), ("sd", "hospital")]
    # posterior predictive checks at the shards, the design built there: y is 0/1, so one bin per value
    _, y = rs.datasets.load("hospitals")
    ppc = c.get(f"/v1/runs/{info['id']}/ppc", params={"kind": "stat", "stat": "mean", "draws": 20}, headers=h)
    assert ppc.status_code == 200, ppc.text
    assert ppc.json()["observed"] == pytest.approx(float(np.mean(y)), rel=1e-12) and len(ppc.json()["replicated"]) == 20
    hist = c.get(f"/v1/runs/{info['id']}/ppc", params={"kind": "hist"}, headers=h).json()
    assert hist["edges"] == [-0.5, 0.5, 1.5] and len(hist["replicated"]) == 10
    assert {sum(row) for row in [hist["observed"], *hist["replicated"]]} == {len(y)}
    dens = c.get(f"/v1/runs/{info['id']}/ppc", headers=h).json()
    assert dens["kind"] == "dens" and len(dens["grid"]) == len(dens["observed"]) == 512
    bad = c.get(f"/v1/runs/{info['id']}/ppc", params={"kind": "stat", "stat": "trimean"}, headers=h)
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["query", "stat"], bad.text
    bad = c.post("/v1/runs", json=_body(model | {"formula": "y ~ age +"}, {"dataset": "builtin:hospitals"}), headers=h)
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"][-2:] == ["model", "formula"], bad.text
    clash = c.post("/v1/runs", json=_body(model | {"prior_scale": 1.0}, {"dataset": "builtin:hospitals"}), headers=h)
    assert clash.status_code == 422 and "does not go with model.formula" in clash.text
    # brms' bars: one term with '|' and two effects is correlated, with the spec's cor_prior; none is a 422 naming it
    from raysampler.priors import LKJ
    from raysampler.service.schemas import ModelSpec

    slope = model | {"formula": "y ~ age + (1 + age | hospital)", "cor_prior": {"lkj": {"eta": 2.0}}}
    (effects,) = ModelSpec.model_validate(slope).engine_model().group_effects
    assert effects.correlated and effects.cor_prior == LKJ(2.0)
    no_cor = c.post(
        "/v1/runs",
        json=_body(model | {"cor_prior": {"lkj": {"eta": 2.0}}}, {"dataset": "builtin:hospitals"}),
        headers=h,
    )
    assert no_cor.status_code == 422 and "priors['cor']" in no_cor.text, no_cor.text


def test_old_prior_names_set_the_new_fields() -> None:
    """REST's priors by kind (sigma_prior, phi_prior); the old field names still set them, both at once is a 422."""
    from pydantic import ValidationError

    from raysampler.priors import HalfCauchy
    from raysampler.service.schemas import ModelSpec

    old = ModelSpec.model_validate({"family": "linear_regression", "noise_prior": {"half_cauchy": {"scale": 2.5}}})
    assert old.params() == {"sigma_prior": HalfCauchy(2.5)}
    nb = ModelSpec.model_validate(
        {"family": "negative_binomial_regression", "dispersion_prior": {"half_cauchy": {"scale": 3}}}
    )
    assert set(nb.params()) == {"phi_prior"}
    both = {"half_cauchy": {"scale": 1.0}}
    with pytest.raises(ValidationError, match="old name of model.sigma_prior"):
        ModelSpec.model_validate({"family": "linear_regression", "noise_prior": both, "sigma_prior": both})


def test_the_families_brms_users_fit_over_rest(app_client):
    """Student-t by formula (brms' `student`, priors by class: sigma, nu with a gamma prior), a Weibull with its
    censoring indicator by column (`censored_column`) and by formula (`t | cens(cens) ~ ...`): each run reports its
    family's parameters by brms' name on the natural scale, as does a zero-inflated Poisson with an offset column and
    a beta prior on zi, and a cumulative model by family (n_categories) and by formula (K from the data); a Gamma
    response ≤ 0 and a censoring code that is not 0/1 are a 422 naming the row and the
    column, a zi prior that is not a beta a 422 at model.zi_prior."""
    from support.reference_problems import FAMILY_PROBLEMS

    c, h = app_client, hdr(ALICE)
    X, y, columns = FAMILY_PROBLEMS["family_student"].load()
    student = _upload(c, h, columns, X, y)
    model = {
        "formula": "y ~ x1 + x2",
        "family": "student",
        "sigma_prior": {"half_normal": {"scale": 5.0}},
        "nu_prior": {"gamma": {"shape": 2.0, "rate": 0.1}},
    }
    r = c.post("/v1/runs", json=_body(model, {"dataset_id": student}), headers=h)
    assert r.status_code == 202, r.text
    info = final(c, r.json()["id"])
    assert info["status"] == "SUCCEEDED", info
    rows = c.get(f"/v1/runs/{info['id']}/summary", headers=h).json()["rows"]
    assert [row["param"] for row in rows] == ["beta[(Intercept)]", "beta[x1]", "beta[x2]", "sigma", "nu"]
    assert rows[3]["mean"] > 0 and rows[4]["mean"] > 1  # σ and ν themselves, not their logs

    X, y, columns = FAMILY_PROBLEMS["family_weibull"].load()
    weibull = _upload(c, h, columns, X, y)
    for spec_model in (
        {
            "family": "weibull_regression",
            "censored_column": "censored",
            "shape_prior": {"gamma": {"shape": 1, "rate": 1}},
        },
        {"formula": "y | cens(censored) ~ x1 + x2", "family": "weibull"},
    ):
        r = c.post("/v1/runs", json=_body(spec_model, {"dataset_id": weibull}), headers=h)
        assert r.status_code == 202, r.text
        info = final(c, r.json()["id"])
        assert info["status"] == "SUCCEEDED", info
        names = [row["param"] for row in c.get(f"/v1/runs/{info['id']}/summary", headers=h).json()["rows"]]
        assert names == ["beta[(Intercept)]", "beta[x1]", "beta[x2]", "shape"], spec_model

    X, y, zcols = FAMILY_PROBLEMS["family_zip"].load()
    model = {"family": "zero_inflated_poisson_regression", "offset_column": "log_exposure"}
    model["zi_prior"] = {"beta": {"a": 1.0, "b": 3.0}}
    r = c.post("/v1/runs", json=_body(model, {"dataset_id": _upload(c, h, zcols, X, y)}), headers=h)
    assert r.status_code == 202, r.text
    info = final(c, r.json()["id"])
    assert info["status"] == "SUCCEEDED", info
    rows = c.get(f"/v1/runs/{info['id']}/summary", headers=h).json()["rows"]
    assert [row["param"] for row in rows] == ["beta[(Intercept)]", "beta[x1]", "beta[x2]", "zi"]
    assert 0.0 < rows[-1]["mean"] < 1.0  # zi itself, not its logit
    bad_zi = model | {"zi_prior": {"gamma": {"shape": 1.0, "rate": 1.0}}}
    r = c.post("/v1/runs", json=_body(bad_zi, {"dataset": "builtin:diabetes"}), headers=h)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][:3] == ["body", "model", "zi_prior"], r.text
    hurdle = {
        "formula": "y ~ x1 + x2 + offset(log_exposure)",
        "family": "hurdle_negbinomial",
        "hu_prior": {"beta": {"a": 2.0, "b": 2.0}},
    }
    r = c.post("/v1/runs", json=_body(hurdle, {"dataset_id": _upload(c, h, zcols, X, y)}), headers=h)
    assert r.status_code == 202, r.text
    info = final(c, r.json()["id"])
    assert info["status"] == "SUCCEEDED", info
    rows = c.get(f"/v1/runs/{info['id']}/summary", headers=h).json()["rows"]
    assert [row["param"] for row in rows] == ["beta[(Intercept)]", "beta[x1]", "beta[x2]", "phi", "hu"]
    assert rows[-1]["mean"] == pytest.approx(np.mean(y == 0), abs=0.1)  # hu is the share of zeros
    r = c.post(
        "/v1/runs",
        json=_body(hurdle | {"hu_prior": {"half_normal": {"scale": 1.0}}}, {"dataset": "builtin:diabetes"}),
        headers=h,
    )
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][:3] == ["body", "model", "hu_prior"], r.text

    X, y, ocols = FAMILY_PROBLEMS["family_cumulative"].load()  # categories 1..4, no intercept column
    ordinal = _upload(c, h, ocols, X, y)
    for spec_model in (
        {"family": "cumulative_regression", "n_categories": 4, "gap_prior": {"exponential": {"rate": 0.5}}},
        {"formula": "y ~ x1 + x2", "family": "cumulative", "threshold_prior": {"normal": {"scale": 5.0}}},
    ):
        r = c.post("/v1/runs", json=_body(spec_model, {"dataset_id": ordinal}), headers=h)
        assert r.status_code == 202, r.text
        info = final(c, r.json()["id"])
        assert info["status"] == "SUCCEEDED", info
        rows = c.get(f"/v1/runs/{info['id']}/summary", headers=h).json()["rows"]
        assert [row["param"] for row in rows] == ["beta[x1]", "beta[x2]", "Intercept", "delta[2]", "delta[3]"]
        assert rows[3]["mean"] > 0 and rows[4]["mean"] > 0  # the gaps themselves, not their logs

    X, y, columns = FAMILY_PROBLEMS["family_weibull"].load()
    bad = _upload(c, h, columns, X, np.where(np.arange(len(y)) == 7, -1.0, y))
    r = c.post("/v1/runs", json=_body({"formula": "y ~ x1", "family": "Gamma"}, {"dataset_id": bad}), headers=h)
    assert r.status_code == 422 and "row 7" in r.text and "column 'y'" in r.text, r.text
    codes = _upload(c, h, columns, np.where(np.arange(len(y))[:, None] == 5, 2.0, X), y)
    model = {"family": "weibull_regression", "censored_column": "censored"}
    r = c.post("/v1/runs", json=_body(model, {"dataset_id": codes}), headers=h)
    assert r.status_code == 422 and "row 5" in r.text and "'censored'" in r.text, r.text


def test_a_formulas_coefficient_priors_over_rest_and_a_name_the_design_lacks(app_client):
    """model.coef_priors: a coefficient's own prior by its design name, the others keeping coef_prior (the run's
    prior table says so); a name the design does not have is a 422 at model.coef_priors.<name>, naming the
    coefficients, before any sampling; coef_priors without a formula is a 422 too."""
    c, h = app_client, hdr(ALICE)
    model = {
        "formula": "y ~ age + severity",
        "family": "bernoulli",
        "coef_prior": {"normal": {"scale": 2.5}},
        "coef_priors": {"age": {"normal": {"mean": 0.5, "scale": 0.1}}, "(Intercept)": {"normal": {"scale": 10.0}}},
    }
    r = c.post("/v1/runs", json=_body(model, {"dataset": "builtin:hospitals"}, num_shards=2), headers=h)
    assert r.status_code == 202, r.text
    info = final(c, r.json()["id"])
    assert info["status"] == "SUCCEEDED", info
    prior = c.get(f"/v1/runs/{info['id']}/effects", params={"kind": "prior"}, headers=h).json()["rows"]
    assert [(row["coef"], row["prior"]) for row in prior if row["class"] == "b"] == [
        ("(Intercept)", "Normal(mean=0.0, scale=10.0)"),
        ("age", "Normal(mean=0.5, scale=0.1)"),
        ("severity", "Normal(mean=0.0, scale=2.5)"),
    ]
    bad = model | {"coef_priors": {"agee": {"normal": {"scale": 1.0}}}}
    r = c.post("/v1/runs", json=_body(bad, {"dataset": "builtin:hospitals"}, num_shards=2), headers=h)
    assert r.status_code == 422, r.text
    detail = r.json()["detail"][0]
    assert detail["loc"][-3:] == ["model", "coef_priors", "agee"] and "'age', 'severity'" in detail["msg"], detail
    plain = {"family": "logistic_regression", "coef_priors": {"x": {"normal": {"scale": 1.0}}}}
    r = c.post("/v1/runs", json=_body(plain, {"dataset": "builtin:breast_cancer"}), headers=h)
    assert r.status_code == 422 and "coef_priors goes with model.formula" in r.text, r.text


def test_a_formulas_group_placement_over_rest_and_bad_ones(app_client):
    """model.group_placement: `"global"` makes hospital's effects θ's coordinates although each hospital sits at
    one shard (they come first, beside β, and the run reports them as r); a column the formula does not group by is
    a 422 at model.group_placement.<column> naming the formula's; a value not auto/local/global and a placement
    without a formula are 422s too."""
    c, h = app_client, hdr(ALICE)
    model = {"formula": "y ~ age + (1 | hospital)", "family": "bernoulli", "group_placement": {"hospital": "global"}}
    data = {"dataset": "builtin:hospitals", "options": {"n_groups": 6}}
    r = c.post("/v1/runs", json=_body(model, data, num_shards=2, num_rounds=30), headers=h)
    assert r.status_code == 202, r.text
    info = final(c, r.json()["id"])
    assert info["status"] == "SUCCEEDED", info
    assert info["param_names"][3:] == [f"r_hospital[{g},(Intercept)]" for g in range(1, 7)], info["param_names"]
    for placement, loc, text in [
        ({"ward": "global"}, ["model", "group_placement", "ward"], "grouping columns: 'hospital'"),
        ({"hospital": "everywhere"}, ["model", "group_placement", "hospital"], "auto"),
    ]:
        r = c.post("/v1/runs", json=_body(model | {"group_placement": placement}, data, num_shards=2), headers=h)
        assert r.status_code == 422, r.text
        detail = r.json()["detail"][0]
        assert detail["loc"][-3:] == loc and text in detail["msg"], detail
    plain = {"family": "logistic_regression", "group_placement": {"hospital": "global"}}
    r = c.post("/v1/runs", json=_body(plain, data), headers=h)
    assert r.status_code == 422 and "group_placement goes with model.formula" in r.text, r.text


def test_a_noise_sd_formula_over_rest_and_one_that_cannot_be(app_client):
    """model.sigma_formula (brms' bf(y ~ x, sigma ~ z)) with sigma_coef_prior: the run reports b_sigma[...] and its
    prior; with another family than gaussian it is a 422 at model.sigma_formula; sigma_coef_prior alone, or with
    sigma_prior, is a 422 naming them."""
    c, h = app_client, hdr(ALICE)
    model = {
        "formula": "y ~ age",
        "family": "gaussian",
        "sigma_formula": "~ severity",
        "sigma_coef_prior": {"normal": {"scale": 1.0}},
    }
    r = c.post("/v1/runs", json=_body(model, {"dataset": "builtin:hospitals"}, num_shards=2), headers=h)
    assert r.status_code == 202, r.text
    info = final(c, r.json()["id"])
    assert info["status"] == "SUCCEEDED", info
    assert info["param_names"] == ["beta[(Intercept)]", "beta[age]", "b_sigma[(Intercept)]", "b_sigma[severity]"]
    prior = c.get(f"/v1/runs/{info['id']}/effects", params={"kind": "prior"}, headers=h).json()["rows"]
    assert ("b_sigma", "Normal(mean=0.0, scale=1.0)") in [(row["class"], row["prior"]) for row in prior]
    r = c.post("/v1/runs", json=_body(model | {"family": "bernoulli"}, {"dataset": "builtin:hospitals"}), headers=h)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][-2:] == ["model", "sigma_formula"], r.text
    for bad, words in (
        ({"sigma_formula": None}, "sigma_coef_prior goes with model.sigma_formula"),
        ({"sigma_prior": {"half_normal": {"scale": 1.0}}}, "with model.sigma_formula give sigma_coef_prior"),
    ):
        r = c.post("/v1/runs", json=_body(model | bad, {"dataset": "builtin:hospitals"}), headers=h)
        assert r.status_code == 422 and words in r.text, r.text
