"""Shards pinned to sites on a real multi-node Ray (ray.cluster_utils.Cluster: a head with no CPUs and three 1-CPU
nodes labelled raysampler.io/site = a, b, c): each worker runs on its site's node, draws equal the in-process run,
a missing site and a node lost mid-run are failures naming the shard and its site, with the draws kept."""
from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest

import raysampler as rs
from raysampler.errors import FailureKind
from raysampler.sampling import Run

SITES = ("a", "a", "b", "c")      # site a holds two shards


@pytest.fixture(scope="module")
def site_files(tmp_path_factory):
    """breast_cancer split into 4 parquet files in per-site directories, with column names."""
    X, y = rs.datasets.load("breast_cancer")
    root = tmp_path_factory.mktemp("sites")
    names = ["intercept"] + [f"f{j}" for j in range(1, X.shape[1])]
    shards = []
    for i, (Xi, yi) in enumerate(zip(np.array_split(X, 4), np.array_split(y, 4))):
        folder = root / SITES[i]
        folder.mkdir(exist_ok=True)
        path = folder / f"part-{i}.parquet"
        pd.DataFrame(Xi, columns=names).assign(y=yi).to_parquet(path)
        shards.append(rs.Shard(path=str(path), site=SITES[i]))
    return shards, names


KW = dict(chains=2, num_rounds=60, burn_in=20, seed=7, progress=False)


def test_workers_run_on_their_sites_nodes_and_draw_as_in_process(site_cluster, site_files):
    shards, names = site_files
    res = rs.sample(rs.models.LogisticRegression(), shards, executor="ray", **KW)
    placement = res.stats["placement"]
    assert [p["site"] for p in placement] == list(SITES)
    for p in placement:
        assert p["node_id"] == site_cluster.nodes[p["site"]].node_id, p
    assert placement[0]["pid"] == placement[1]["pid"]            # one 1-CPU node: one worker owns both of a's shards
    assert len({p["pid"] for p in placement}) == 3
    local = rs.sample(rs.models.LogisticRegression(), [rs.Shard(path=s.path) for s in shards], executor="local",
                      **KW)
    np.testing.assert_array_equal(res.draws, local.draws)


def test_a_site_with_no_live_node_is_an_error_naming_the_shard(site_cluster, site_files, monkeypatch):
    shards, _ = site_files
    monkeypatch.setenv("RAYSAMPLER_SITE_WAIT_S", "1")
    nowhere = list(shards[:2]) + [rs.Shard(path=shards[2].path, site="z")]
    with pytest.raises(rs.SamplingError, match=r"shards\[2\].*site=z") as err:
        rs.sample(rs.models.LogisticRegression(), nowhere, executor="ray", **KW)
    f = err.value.failure
    assert (f.kind, f.shard, f.site) == (FailureKind.SITE_UNAVAILABLE, 2, "z")


def test_a_missing_file_on_its_site_names_shard_path_and_host(site_cluster, site_files):
    shards, _ = site_files
    gone = list(shards[:3]) + [rs.Shard(path=shards[3].path + ".missing.parquet", site="c")]
    with pytest.raises(rs.SamplingError) as err:
        rs.sample(rs.models.LogisticRegression(), gone, executor="ray", **KW)
    f = err.value.failure
    assert f.kind == FailureKind.WORKER_ERROR and f.shard == 3 and f.site == "c"
    assert ".missing.parquet" in f.message and "does not exist" in f.message
    assert f.node_id == site_cluster.nodes["c"].node_id


def test_node_lost_mid_run_stops_naming_shard_and_site_with_draws_kept(site_cluster, site_files):
    shards, _ = site_files
    with Run(rs.models.LogisticRegression(), shards, executor="ray", chains=2, num_rounds=10**6, burn_in=5,
             seed=1) as run:
        kept = 0
        for i, chunk in enumerate(run.chunks(target_chunk_s=0.05)):
            kept += len(chunk.theta)
            if i == 2:
                site_cluster.cluster.remove_node(site_cluster.nodes["b"])
        f = run.failure
        assert f is not None and f.kind == FailureKind.WORKER_LOST and f.shard == 2 and f.site == "b"
        assert kept > 0 and run.result().draws.shape[1] == kept
    site_cluster.add_site_node("b")                              # the site comes back for the next tests
    site_cluster.cluster.wait_for_nodes()


def test_columns_differing_between_shards_are_refused(site_cluster, site_files, tmp_path):
    shards, names = site_files
    X, y = rs.datasets.load("breast_cancer")
    other = tmp_path / "other.parquet"
    pd.DataFrame(X[:50], columns=[n + "_x" for n in names]).assign(y=y[:50]).to_parquet(other)
    with pytest.raises(ValueError, match=r"shards\[3\].*columns"):
        rs.sample(rs.models.LogisticRegression(), list(shards[:3]) + [rs.Shard(path=str(other), site="c")],
                  executor="ray", **KW)
    assert os.path.exists(other)
