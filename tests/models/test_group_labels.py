"""Group labels as given and data already split: `rs.shard([(X_a, y_a), ...], columns=...)` names every shard's
columns (length checked); text labels from a DataFrame, an object array, a CSV or a parquet file name the group
effects (`r_hospital[St Mary,(Intercept)]`) and their ArviZ coordinates; a text column is refused as a feature;
predictions find a known group by its label."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy.special import expit

import raysampler as rs
from raysampler.errors import ArgumentError
from raysampler.models.contract import natural_values
from raysampler.shards import label_code

#: a few rounds on a few rows: names and labels are the point, not the draws
pytestmark = pytest.mark.filterwarnings("ignore::raysampler.diagnostics.RunWarning")
COLS = ["(Intercept)", "age", "hospital"]
NAMES = ["St Mary", "Royal Free", "Guy's", "King's College", "Homerton", "Whittington"]


def _site(rng: np.random.Generator, names: list[str], rows: int = 15) -> tuple[np.ndarray, np.ndarray]:
    """One site's rows: an object array with a text hospital column, and 0/1 outcomes."""
    hosp = np.repeat(names, rows)
    age = rng.normal(size=hosp.size)
    effect = {n: 0.8 * rng.normal() for n in names}
    y = (rng.random(hosp.size) < expit(0.3 * age + np.array([effect[h] for h in hosp]))).astype(float)
    X = np.empty((hosp.size, 3), dtype=object)
    X[:, 0], X[:, 1], X[:, 2] = 1.0, age, hosp
    return X, y


def _model() -> rs.models.LogisticRegression:
    return rs.models.LogisticRegression(prior_scale=2.5, group_effects=rs.GroupEffects("hospital"))


def _sample(shards: rs.ShardSet) -> rs.Result:
    return rs.sample(_model(), shards, chains=2, num_rounds=30, burn_in=5, seed=0, executor="local", progress=False)


def test_already_split_arrays_keep_their_columns_and_text_labels() -> None:
    rng = np.random.default_rng(0)
    a, b = _site(rng, NAMES[:3]), _site(rng, NAMES[3:])
    shards = rs.shard([a, b], columns=COLS)
    assert [s.columns for s in shards] == [tuple(COLS)] * 2
    assert shards[0].levels == {"hospital": tuple(sorted(NAMES[:3]))}
    np.testing.assert_array_equal(shards[0].X[:15, 2], label_code("St Mary"))
    res = _sample(shards)
    assert res.param_names[:3] == ["beta[(Intercept)]", "beta[age]", "sd_hospital[(Intercept)]"]
    assert sorted(res.param_names[3:]) == sorted(f"r_hospital[{n},(Intercept)]" for n in NAMES)
    coords = res.to_arviz().posterior["r_hospital"].coords["hospital"].values.tolist()
    assert sorted(coords) == sorted(NAMES)  # the labels as given, not numbers or codes
    with pytest.raises(ArgumentError, match=r"columns has 2 names but X\[0\]") as e:
        rs.shard([a, b], columns=COLS[:2])
    assert e.value.path == ("columns",)
    with pytest.raises(ArgumentError, match="column 2 holds text labels") as e:
        rs.shard([a, b])  # text needs a column name: group effects read it by name
    assert e.value.path == ("columns",)


def test_dataframe_labels_shard_by_group_and_predict_by_label() -> None:
    pd = pytest.importorskip("pandas")  # xarray's dependency, so present wherever arviz is
    rng = np.random.default_rng(1)
    X, y = _site(rng, NAMES, rows=12)
    frame = pd.DataFrame({"(Intercept)": X[:, 0].astype(float), "age": X[:, 1].astype(float), "hospital": X[:, 2]})
    shards = rs.shard(frame, y, num_shards=2, by="hospital")
    assert all(set(s.levels["hospital"]) <= set(NAMES) for s in shards)
    assert sorted(v for s in shards for v in s.levels["hospital"]) == sorted(NAMES)
    res = _sample(shards)
    new = pd.DataFrame({"(Intercept)": [1.0, 1.0], "age": [0.5, 0.5], "hospital": ["St Mary", "Not seen before"]})
    mean = res.predict(new)
    values = natural_values(res.param_blocks, res.draws).reshape(-1, len(res.param_names))
    j = res.param_names.index("r_hospital[St Mary,(Intercept)]")
    want = expit(values[:, 0] + 0.5 * values[:, 1] + values[:, j]).mean()
    np.testing.assert_allclose(mean[0], want, rtol=1e-10)  # the known group found by its label
    assert abs(mean[1] - want) > 1e-6  # a new group drawn from its population


def test_text_labels_in_csv_and_parquet_files(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(2)
    (Xa, ya), (Xb, yb) = _site(rng, NAMES[:3]), _site(rng, NAMES[3:])
    csv = tmp_path / "site_a.csv"
    lines = ["y,(Intercept),age,hospital"] + [f"{v:g},1,{age!r},{h}" for v, age, h in zip(ya, Xa[:, 1], Xa[:, 2])]
    csv.write_text("\n".join(lines) + "\n")
    parquet = tmp_path / "site_b.parquet"
    table = {"y": yb, "(Intercept)": np.ones(len(yb)), "age": Xb[:, 1].astype(float), "hospital": Xb[:, 2].tolist()}
    pq.write_table(pa.table(table), parquet)
    shards = rs.shard([str(csv), str(parquet)])
    tables = [s.read() for s in shards]
    assert [t.columns for t in tables] == [tuple(COLS)] * 2
    assert tables[0].levels == {"hospital": tuple(sorted(NAMES[:3]))}
    assert tables[1].levels == {"hospital": tuple(sorted(NAMES[3:]))}
    res = _sample(shards)
    assert sorted(res.param_names[3:]) == sorted(f"r_hospital[{n},(Intercept)]" for n in NAMES)
    twice = rs.shard([str(csv), str(csv)])  # the same hospitals on two sites: a local group must lie in one shard
    local = rs.models.LogisticRegression(prior_scale=2.5, group_effects=rs.GroupEffects("hospital", placement="local"))
    with pytest.raises(ArgumentError, match=r"group hospital=(St Mary|Royal Free|Guy's) has rows in shards 0 and 1"):
        rs.sample(local, twice, chains=2, num_rounds=5, executor="local", progress=False)
    spanning = _sample(twice)  # placement "auto": the hospitals span the sites, so their effects are global
    assert sorted(spanning.param_names[3:]) == sorted(f"r_hospital[{n},(Intercept)]" for n in NAMES[:3])


def test_a_text_column_is_refused_as_a_feature() -> None:
    rng = np.random.default_rng(3)
    shards = rs.shard([_site(rng, NAMES[:3]), _site(rng, NAMES[3:])], columns=COLS)
    plain = rs.models.LogisticRegression(prior_scale=2.5)
    with pytest.raises(ArgumentError, match=r"column 'hospital' holds text labels \(e\.g\. \"Guy's\"\)") as e:
        rs.sample(plain, shards, num_rounds=5, executor="local", progress=False)
    assert e.value.path == ("model",)
    sloped = rs.models.LogisticRegression(group_effects=rs.GroupEffects("age"))  # hospital left as a feature
    with pytest.raises(ArgumentError, match="column 'hospital' holds text labels") as e:
        rs.sample(sloped, shards, num_rounds=5, executor="local", progress=False)
    assert e.value.path == ("model", "group_effects")


def test_text_labels_reach_ray_workers(ray_session) -> None:
    """In-memory shards travel to Ray workers with their labels: the same names and draws as in-process."""
    rng = np.random.default_rng(4)
    shards = rs.shard([_site(rng, NAMES[:3]), _site(rng, NAMES[3:])], columns=COLS)
    kw = dict(chains=2, num_rounds=20, burn_in=5, seed=0, progress=False)
    local = rs.sample(_model(), shards, executor="local", **kw)
    on_ray = rs.sample(_model(), shards, executor="ray", **kw)
    assert on_ray.param_names == local.param_names and "r_hospital[St Mary,(Intercept)]" in local.param_names
    np.testing.assert_array_equal(on_ray.draws, local.draws)
