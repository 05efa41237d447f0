"""Data sets and sharding: shapes, scaling, determinism, partitions, file shards and argument checks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from raysampler import datasets
from raysampler.shards import Shard, ShardSet, read_data_file, shard


# ------------------------------------------------------------------------------------ datasets
def _assert_standardised(F: np.ndarray) -> None:
    np.testing.assert_allclose(F.mean(axis=0), 0.0, atol=1e-10)
    np.testing.assert_allclose(F.std(axis=0), 1.0, atol=1e-10)


def test_available_lists_all_names() -> None:
    assert set(datasets.available()) >= {
        "breast_cancer",
        "digits",
        "diabetes",
        "gaussian_toy",
        "covtype_like",
        "logistic_synthetic",
    }


def test_breast_cancer() -> None:
    X, y = datasets.load("breast_cancer")
    assert X.shape == (569, 31) and y.shape == (569,)
    assert X.dtype == np.float64 and y.dtype == np.float64
    np.testing.assert_array_equal(X[:, 0], 1.0)
    _assert_standardised(X[:, 1:])
    assert set(np.unique(y)) == {0.0, 1.0}


def test_digits() -> None:
    X, y = datasets.load("digits")
    assert X.shape == (1797, 65) and X.dtype == np.float64
    np.testing.assert_array_equal(X[:, 0], 1.0)
    assert X[:, 1:].min() == 0.0 and X[:, 1:].max() == 1.0
    assert y.dtype == np.int64 and set(np.unique(y)) == set(range(10))


def test_diabetes() -> None:
    X, y = datasets.load("diabetes")
    assert X.shape == (442, 11) and y.shape == (442,) and y.dtype == np.float64
    np.testing.assert_array_equal(X[:, 0], 1.0)
    _assert_standardised(X[:, 1:])
    assert abs(y.mean()) < 1e-10 and abs(y.std() - 1.0) < 1e-10


def test_gaussian_toy() -> None:
    X, y = datasets.load("gaussian_toy", seed=3)
    assert X.shape == (20_000, 0) and X.dtype == np.float64
    assert y.shape == (20_000, 2) and y.dtype == np.float64
    np.testing.assert_array_equal(datasets.GAUSSIAN_TOY_NOISE_COV, [[1.0, 0.5], [0.5, 2.0]])
    np.testing.assert_array_equal(datasets.gaussian_toy_noise_cov(2), datasets.GAUSSIAN_TOY_NOISE_COV)
    # The sample matches the generating law: mean near theta_true, covariance near Sigma_1.
    theta = datasets.true_params("gaussian_toy", seed=3)
    np.testing.assert_allclose(y.mean(axis=0), theta, atol=0.05)
    np.testing.assert_allclose(np.cov(y.T), datasets.GAUSSIAN_TOY_NOISE_COV, atol=0.1)
    X, y = datasets.load("gaussian_toy", n=50, d=3)
    assert X.shape == (50, 0) and y.shape == (50, 3)
    assert np.all(np.linalg.eigvalsh(datasets.gaussian_toy_noise_cov(5)) > 0)


def test_covtype_like_small() -> None:
    X, y = datasets.load("covtype_like", n=5000, seed=1)
    assert X.shape == (5000, 54) and X.dtype == np.float64 and y.shape == (5000,)
    np.testing.assert_array_equal(X[:, 0], 1.0)
    _assert_standardised(X[:, 1:11])
    assert set(np.unique(X[:, 11:])) <= {0.0, 1.0}
    assert X[:, 11:14].sum(axis=1).max() <= 1 and X[:, 14:].sum(axis=1).max() <= 1  # one level per group
    assert set(np.unique(y)) == {0.0, 1.0} and 0.35 < y.mean() < 0.65
    assert datasets.true_params("covtype_like", seed=1).shape == (54,)


def test_covtype_like_full_size() -> None:
    X, y = datasets.load("covtype_like")
    assert X.shape == (581_012, 54) and X.dtype == np.float64
    assert y.shape == (581_012,) and y.dtype == np.float64


def test_logistic_synthetic() -> None:
    X, y = datasets.load("logistic_synthetic", n=300, d=4, seed=2)
    assert X.shape == (300, 4) and y.shape == (300,)
    np.testing.assert_array_equal(X[:, 0], 1.0)
    assert set(np.unique(y)) <= {0.0, 1.0}
    assert datasets.true_params("logistic_synthetic", seed=2, d=4).shape == (4,)


def test_hospitals_log_uniform_sizes_and_one_large_group() -> None:
    """sizes="log-uniform": every hospital within [min_rows, max_rows], many more small ones than large ones (the
    median near the geometric mean, not the midpoint); large_group: the last hospital has exactly that many rows."""
    opts = {"n_groups": 240, "min_rows": 15, "max_rows": 200, "sizes": "log-uniform"}
    X, y = datasets.load("hospitals", seed=0, **opts)
    assert X.shape == (len(y), 4) and datasets.columns("hospitals", **opts)[-1] == "hospital"
    sizes = np.bincount(X[:, 3].astype(int))[1:]
    assert sizes.size == 240 and sizes.min() >= 15 and sizes.max() <= 200
    assert 40 <= np.median(sizes) <= 75  # geometric mean ≈ 55; a uniform law's median would be near 107
    assert np.mean(sizes < 55) > 0.4 and 12_000 < len(y) < 22_000
    uniform = np.bincount(datasets.load("hospitals", seed=0, n_groups=240, min_rows=15, max_rows=200)[0][:, 3]
                          .astype(int))[1:]  # fmt: skip
    assert np.median(uniform) > 90
    Xl, _ = datasets.load("hospitals", seed=0, large_group=3000, **opts)
    big = np.bincount(Xl[:, 3].astype(int))[1:]
    assert big[-1] == 3000 and np.array_equal(big[:-1], sizes[:-1])
    with pytest.raises(ValueError, match="sizes"):
        datasets.load("hospitals", sizes="normal")
    with pytest.raises(ValueError, match="large_group"):
        datasets.load("hospitals", large_group=-1)
    with pytest.raises(TypeError, match="bogus"):
        datasets.columns("hospitals", bogus=1)


@pytest.mark.parametrize(
    ("name", "kwargs"),
    [("gaussian_toy", {"n": 100}), ("covtype_like", {"n": 500}), ("logistic_synthetic", {}), ("digits", {})],
)
def test_datasets_deterministic_for_a_seed(name: str, kwargs: dict) -> None:
    X1, y1 = datasets.load(name, seed=7, **kwargs)
    X2, y2 = datasets.load(name, seed=7, **kwargs)
    np.testing.assert_array_equal(X1, X2)
    np.testing.assert_array_equal(y1, y2)


@pytest.mark.parametrize(("name", "kwargs"), [("gaussian_toy", {"n": 100}), ("covtype_like", {"n": 500})])
def test_synthetic_datasets_change_with_seed(name: str, kwargs: dict) -> None:
    _, y1 = datasets.load(name, seed=1, **kwargs)
    X2, y2 = datasets.load(name, seed=2, **kwargs)
    assert not np.array_equal(y1, y2) or not np.array_equal(datasets.load(name, seed=1, **kwargs)[0], X2)


def test_unknown_dataset_names_it_and_lists_valid_names() -> None:
    with pytest.raises(ValueError, match="no_such_data") as info:
        datasets.load("no_such_data")
    assert "breast_cancer" in str(info.value) and "covtype_like" in str(info.value)


def test_dataset_bad_kwargs() -> None:
    with pytest.raises(TypeError, match="bogus"):
        datasets.load("gaussian_toy", bogus=1)
    with pytest.raises(TypeError):
        datasets.load("breast_cancer", n=10)
    with pytest.raises(ValueError, match="n must"):
        datasets.load("covtype_like", n=0)
    with pytest.raises(ValueError, match="seed"):
        datasets.load("logistic_synthetic", seed=-1)
    with pytest.raises(ValueError, match="digits"):
        datasets.true_params("digits")


# -------------------------------------------------------------------------------------- shards
def _indexed_data(n: int = 103, p: int = 3, classes: int = 4, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """X whose first column is the row number, so a shard's rows can be traced back."""
    rng = np.random.default_rng(seed)
    X = np.column_stack([np.arange(n, dtype=float), rng.standard_normal((n, p - 1))])
    y = rng.integers(0, classes, size=n).astype(float)
    return X, y


@pytest.mark.parametrize("strategy", ["contiguous", "random", "label_skew"])
@pytest.mark.parametrize("num_shards", [1, 3, 7])
def test_strategies_partition_every_row_once(strategy: str, num_shards: int) -> None:
    X, y = _indexed_data()
    ss = shard(X, y, num_shards=num_shards, strategy=strategy, alpha=0.5, seed=4)
    assert isinstance(ss, ShardSet) and len(ss) == ss.num_shards == num_shards
    assert ss.strategy == strategy and ss.n_rows == len(X)
    rows = np.concatenate([s.X[:, 0] for s in ss]).astype(int)
    np.testing.assert_array_equal(np.sort(rows), np.arange(len(X)))
    for s in ss:
        assert s.n_rows is not None and s.n_rows >= 1
        np.testing.assert_array_equal(s.X, X[s.index])
        np.testing.assert_array_equal(s.y, y[s.index])
        Xs, ys = s.load()
        assert Xs is s.X and ys is s.y


def test_contiguous_matches_array_split() -> None:
    X, y = _indexed_data(n=10)
    ss = shard(X, y, num_shards=3)
    for s, part in zip(ss, np.array_split(np.arange(10), 3)):
        np.testing.assert_array_equal(s.index, part)
        assert np.shares_memory(s.X, X)  # views: no copy of the data


def test_random_strategy_is_seeded() -> None:
    X, y = _indexed_data()
    a = shard(X, y, 4, "random", seed=1)
    b = shard(X, y, 4, "random", seed=1)
    c = shard(X, y, 4, "random", seed=2)
    assert all(np.array_equal(s.index, t.index) for s, t in zip(a, b))
    assert not all(np.array_equal(s.index, t.index) for s, t in zip(a, c))
    assert not np.array_equal(a[0].index, np.arange(len(a[0].index)))


def test_label_skew_small_alpha_skews_labels_and_uses_every_shard() -> None:
    X, y = _indexed_data(n=4000, classes=4)

    def mean_top_share(alpha: float) -> float:
        ss = shard(X, y, num_shards=8, strategy="label_skew", alpha=alpha, seed=0)
        assert len(ss) == 8 and all(s.n_rows >= 1 for s in ss)
        return float(np.mean([np.bincount(s.y.astype(int), minlength=4).max() / s.n_rows for s in ss]))

    assert mean_top_share(0.05) > 0.8  # nearly one class per shard
    assert mean_top_share(1000.0) < 0.35  # ~ iid: a quarter each


def test_label_skew_every_shard_gets_a_row_even_when_tight() -> None:
    X, y = _indexed_data(n=12, classes=2)
    ss = shard(X, y, num_shards=12, strategy="label_skew", alpha=0.01, seed=3)
    assert [s.n_rows for s in ss] == [1] * 12


def test_label_skew_accepts_integer_labels_and_integral_floats() -> None:
    X, y = _indexed_data()
    a = shard(X, y.astype(np.int64), 3, "label_skew", seed=5)
    b = shard(X, y, 3, "label_skew", seed=5)
    assert all(np.array_equal(s.index, t.index) for s, t in zip(a, b))
    assert a[0].y.dtype == np.int64


def test_two_dimensional_y_gaussian_toy() -> None:
    X, y = datasets.load("gaussian_toy", n=100)
    ss = shard(X, y, num_shards=4, strategy="random")
    assert [s.X.shape[1] for s in ss] == [0] * 4 and all(s.y.shape[1] == 2 for s in ss)
    assert ss.n_rows == 100


def test_list_of_pairs() -> None:
    X, y = _indexed_data(n=20)
    pairs = [(X[:5], y[:5]), (X[5:], y[5:])]
    ss = shard(pairs)
    assert len(ss) == 2 and ss.strategy == "presplit" and ss.n_rows == 20
    for s, (Xi, yi) in zip(ss, pairs):
        Xl, yl = s.load()
        np.testing.assert_array_equal(Xl, Xi)
        np.testing.assert_array_equal(yl, yi)
    assert len(shard(pairs, num_shards=2)) == 2
    with pytest.raises(ValueError, match="num_shards"):
        shard(pairs, num_shards=3)
    with pytest.raises(ValueError, match="strategy"):
        shard(pairs, strategy="random")
    with pytest.raises(ValueError, match=r"X\[1\]"):
        shard([(X[:5], y[:5]), (X[5:], y[:3])])


def test_file_paths_npz_and_csv(tmp_path: Path) -> None:
    X, y = _indexed_data(n=30)
    X[:, 1] *= 1e6  # values must survive the text round trip exactly
    npz = tmp_path / "part0.npz"
    np.savez(npz, X=X[:10], y=y[:10])
    csv = tmp_path / "part1.csv"
    names = [f"x{j}" for j in range(X.shape[1])]
    np.savetxt(
        csv, np.column_stack([y[10:], X[10:]]), delimiter=",", header=",".join(["y", *names]), comments="", fmt="%.17g"
    )
    ss = shard([npz, str(csv)])  # PathLike and str
    assert len(ss) == 2 and not ss[0].in_memory and ss[0].path == str(npz)
    assert ss[0].n_rows == 10 and ss[1].n_rows is None and ss.n_rows is None
    X0, y0 = ss[0].load()
    X1, y1 = ss[1].load()
    np.testing.assert_array_equal(X0, X[:10])
    np.testing.assert_array_equal(y0, y[:10])
    np.testing.assert_array_equal(X1, X[10:])  # the y column may sit anywhere: here it is first
    np.testing.assert_array_equal(y1, y[10:])
    mixed = shard([(X[:10], y[:10]), npz, Shard(path=str(csv))])
    assert len(mixed) == 3 and mixed[1:].num_shards == 2


def test_path_errors_name_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "missing.npz"
    with pytest.raises(FileNotFoundError, match="missing.npz"):
        shard([missing])
    with pytest.raises(FileNotFoundError, match="missing.npz"):
        Shard(path=str(missing)).load()
    with pytest.raises(ValueError, match="data.txt"):
        shard([tmp_path / "data.txt"])
    nokeys = tmp_path / "nokeys.npz"
    np.savez(nokeys, features=np.ones((3, 2)), y=np.ones(3))
    with pytest.raises(ValueError, match="nokeys.npz"):
        Shard(path=str(nokeys)).load()
    noy = tmp_path / "noy.csv"
    noy.write_text("a,b\n1,2\n3,4\n")
    with pytest.raises(ValueError, match="noy.csv"):
        Shard(path=str(noy)).load()
    bad = tmp_path / "nan.csv"
    bad.write_text("a,y\n1,nan\n3,4\n")
    with pytest.raises(ValueError, match="nan.csv"):
        Shard(path=str(bad)).load()


def test_parquet_shard_reads_named_columns(tmp_path: Path) -> None:
    """pyarrow is a dependency (the service takes parquet uploads): parquet shards read like csv ones."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    X, y = _indexed_data(n=12)
    path = tmp_path / "part.parquet"
    pq.write_table(pa.table({"y": y.astype(float)} | {f"x{j}": X[:, j] for j in range(X.shape[1])}), path)
    Xr, yr = Shard(path=str(path)).load()
    np.testing.assert_array_equal(Xr, X)
    np.testing.assert_array_equal(yr, y)
    assert Shard(path=str(path)).n_rows == 12
    with pytest.raises(ValueError, match="column named 'label'"):
        read_data_file(str(path), y="label")
    Xs, _ = read_data_file(str(path), x=["x1"])
    np.testing.assert_array_equal(Xs, X[:, [1]])


# ---------------------------------------------------------------------------------- validation
def test_validation_errors_name_their_argument() -> None:
    X, y = _indexed_data(n=10)
    with pytest.raises(ValueError, match="X must be 2-D"):
        shard(X[:, 0], y)
    with pytest.raises(ValueError, match="y has 9 rows"):
        shard(X, y[:9])
    with pytest.raises(ValueError, match="y is required"):
        shard(X)
    Xn = X.copy()
    Xn[3, 1] = np.nan
    with pytest.raises(ValueError, match="X contains NaN or inf"):
        shard(Xn, y)
    yi = y.copy()
    yi[2] = np.inf
    with pytest.raises(ValueError, match="y contains NaN or inf"):
        shard(X, yi)
    with pytest.raises(ValueError, match="num_shards must be >= 1"):
        shard(X, y, num_shards=0)
    with pytest.raises(ValueError, match="num_shards=11 means more shards than rows"):
        shard(X, y, num_shards=11)
    with pytest.raises(ValueError, match="num_shards must be an int"):
        shard(X, y, num_shards=2.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="strategy must be one of"):
        shard(X, y, strategy="sorted")
    with pytest.raises(ValueError, match="alpha must be"):
        shard(X, y, strategy="label_skew", alpha=0.0)
    with pytest.raises(ValueError, match="alpha must be"):
        shard(X, y, strategy="label_skew", alpha=-1.0)
    with pytest.raises(ValueError, match="y must hold discrete class labels"):
        shard(X, y + 0.5, strategy="label_skew")
    with pytest.raises(ValueError, match="y must be 1-D class labels"):
        shard(X, np.column_stack([y, y]), strategy="label_skew")
    with pytest.raises(ValueError, match="X is an empty list"):
        shard([])
    with pytest.raises(ValueError, match="either arrays"):
        Shard()


def test_shardset_is_list_like_and_frozen() -> None:
    X, y = _indexed_data(n=12)
    ss = shard(X, y, num_shards=3)
    assert [s.n_rows for s in ss] == [4, 4, 4] and ss[-1] is ss.shards[-1]
    assert shard(ss) is ss
    with pytest.raises(AttributeError):
        ss.strategy = "random"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        ss[0].X = X  # type: ignore[misc]


def test_a_folder_of_parquet_files_is_one_shard_with_hive_partitions_and_only_the_chosen_columns(tmp_path):
    """A path ending in '/' names a parquet data set: its files in name order (hidden and '_' files skipped), hive
    partition values as columns, and only the chosen columns read (a non-numeric column left out is no error)."""
    import pandas as pd

    from raysampler.shards import Shard, read_header, read_table

    rng = np.random.default_rng(0)
    parts = {}
    for h in (2, 10, 1):  # written out of order; read in name order: hospital=1, hospital=10, hospital=2
        frame = pd.DataFrame({"a": rng.normal(size=4), "b": rng.normal(size=4), "y": rng.integers(0, 2, 4)})
        (tmp_path / "ds" / f"hospital={h}").mkdir(parents=True)
        frame.assign(note="text").to_parquet(tmp_path / "ds" / f"hospital={h}" / "part-0.parquet")
        parts[h] = frame
    (tmp_path / "ds" / "_SUCCESS").write_text("")
    (tmp_path / "ds" / ".part.crc").write_text("x")
    order = [parts[1], parts[10], parts[2]]
    header = read_header(str(tmp_path / "ds") + "/", y="y", x=["hospital", "b"])
    assert header == (("hospital", "b"), 12, 2)
    table = read_table(str(tmp_path / "ds") + "/", y="y", x=["a", "hospital"])
    np.testing.assert_array_equal(table.X[:, 0], np.concatenate([p["a"] for p in order]))
    assert table.X[:, 1].tolist() == [1.0] * 4 + [10.0] * 4 + [2.0] * 4 and table.columns == ("a", "hospital")
    np.testing.assert_array_equal(table.y, np.concatenate([p["y"] for p in order]))
    shard = Shard(path=str(tmp_path / "ds") + "/", x_columns=("a", "b"))
    assert shard.n_rows is None and shard.read().X.shape == (12, 2)
    # every column but y: the free text too, read as labels (a model refuses them unless they name groups)
    assert read_table(str(tmp_path / "ds") + "/", y="y").levels == {"note": ("text",)}
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="holds no parquet files"):
        read_header(str(tmp_path / "empty") + "/")
    with pytest.raises(ValueError, match="object-storage shards are parquet"):
        Shard(path="s3://bucket/data/part.csv")
    with pytest.raises(ValueError, match="valid bucket"):
        Shard(path="s3://B/data/")
