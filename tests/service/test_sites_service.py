"""The service against a multi-node Ray cluster (`raysampler serve --ray-address ...`): a run over REST whose data
are shard files on their sites succeeds, its workers show where they ran, and the service process never opened a
shard file (an audit hook records every file it opens). Bad site shards are a 422 naming data.shards[i]."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import SERVICE_KEYS, service_env
from service_helpers import ALICE, hdr, wait_until

import raysampler as rs
from raysampler.service.local import LocalService

SITES = ("a", "b", "c")


@pytest.fixture(scope="module")
def cluster_service(site_cluster, tmp_path_factory):
    root = tmp_path_factory.mktemp("sites-svc")
    X, y = rs.datasets.load("breast_cancer")
    names = ["intercept"] + [f"feature {j}" for j in range(1, X.shape[1])]
    paths = []
    for i, (Xi, yi) in enumerate(zip(np.array_split(X, 3), np.array_split(y, 3))):
        folder = root / "sites" / SITES[i]
        folder.mkdir(parents=True)
        paths.append(folder / f"part-{i}.parquet")
        pd.DataFrame(Xi, columns=names).assign(label=yi).to_parquet(paths[-1])
    audit = root / "opened.txt"
    env = service_env(tempfile.mkdtemp(prefix="rs-svc-sites-")) | {"RAYSAMPLER_SITE_WAIT_S": "2"}
    svc = LocalService(
        root / "data",
        keys=SERVICE_KEYS,
        env=env,
        log=root / "server.log",
        args=["--ray-address", site_cluster.address],
        launcher=[sys.executable, str(Path(__file__).with_name("audited_cli.py")), str(audit)],
    )
    svc.start()
    yield svc, paths, names, audit
    svc.stop()


def _spec(paths, **over):
    shards = [{"path": str(p), "site": s} for p, s in zip(paths, SITES)]
    return {
        "model": {"family": "logistic_regression"},
        "data": {"shards": shards, "y_column": "label"},
        "chains": 2,
        "num_rounds": 60,
        "burn_in": 20,
        "seed": 2,
    } | over


def test_site_shards_run_over_rest_where_they_live_and_are_never_opened_by_the_service(cluster_service, site_cluster):
    svc, paths, names, audit = cluster_service
    import httpx

    with httpx.Client(base_url=svc.url, timeout=30) as c:
        r = c.post("/v1/runs", json=_spec(paths), headers=hdr(ALICE))
        assert r.status_code == 202, r.text
        rid = r.json()["id"]
        info = wait_until(
            lambda: (
                (i := c.get(f"/v1/runs/{rid}", headers=hdr(ALICE)).json())["status"] in ("SUCCEEDED", "FAILED") and i
            ),
            what="the site run to end",
        )
    assert info["status"] == "SUCCEEDED", info
    for w in info["workers"]:
        assert w["site"] == SITES[w["shard"]] and w["node_id"] == site_cluster.nodes[w["site"]].node_id, w
        assert w["hostname"] and w["pid"]
    assert info["progress"]["draws_stored"] == 60
    opened = set(audit.read_text().splitlines())
    assert opened, "the audit hook recorded nothing"
    for p in paths:
        assert str(p) not in opened and not any(o.startswith(str(p.parent)) for o in opened), p


@pytest.mark.parametrize(
    "change,field,text",
    [
        (
            lambda s: s["data"]["shards"].__setitem__(
                1, {"path": s["data"]["shards"][1]["path"].replace("part-1", "gone-1"), "site": "b"}
            ),
            ["body", "data", "shards", 1],
            "does not exist",
        ),
        (
            lambda s: s["data"]["shards"].__setitem__(2, dict(s["data"]["shards"][2], site="nowhere")),
            ["body", "data", "shards", 2],
            "no live Ray node",
        ),
        (lambda s: s["data"].__setitem__("y_column", "target"), ["body", "data", "shards", 0], "target"),
    ],
)
def test_bad_site_shards_are_422_naming_the_shard(cluster_service, change, field, text):
    svc, paths, _, _ = cluster_service
    import httpx

    body = _spec(paths)
    change(body)
    r = httpx.post(svc.url + "/v1/runs", json=body, headers=hdr(ALICE), timeout=30)
    assert r.status_code == 422, r.text
    detail = r.json()["detail"][0]
    assert detail["loc"] == field and text in detail["msg"], detail
