"""The service against a multi-node Ray cluster (`raysampler serve --ray-address ...`): a run over REST whose data
are shard files on their sites succeeds, its workers show where they ran, and the service process never opened a
shard file (an audit hook records every file it opens). Bad site shards are a 422 naming data.shards[i].

Site d keeps its data in object storage (a real S3-compatible server): its node alone has the credentials, in its
own environment; the service has none. A parquet data set there (hive partitions, columns chosen) gives exactly the
draws of the same rows in files; prefixes outside the tenant's grants get the one refusal paths get."""

from __future__ import annotations

import io
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from support.service_helpers import ALICE, BOB, SERVICE_KEYS, final, hdr, service_env

import raysampler as rs
from raysampler.client import Client
from raysampler.service.local import LocalService

pytestmark = [pytest.mark.service, pytest.mark.slow]  # starts a server of its own (LocalService) on site_cluster

SITES = ("a", "b", "c")


CAROL = "carol-key-0123456789"  # a tenant with a key and no data grant
SECRET_COLUMNS = ("bob_secret_income", "bob_secret_diagnosis")


def _parquet_bytes(frame: pd.DataFrame) -> bytes:
    buf = io.BytesIO()
    frame.to_parquet(buf)
    return buf.getvalue()


@pytest.fixture(scope="module")
def bucket(site_cluster, s3):
    """Site d: a node whose own environment holds the credentials of an S3 bucket with alice's and bob's data. Alice
    has shard 0's rows as a hive-partitioned data set (`part=0/`, `part=1/`) with a non-numeric column left out by
    the columns she picks, a file that is not parquet and an empty prefix; bob has a secret; `alicex/` looks like
    alice's prefix as a string."""
    assert "AWS_ACCESS_KEY_ID" not in os.environ, "the service must not have the site's credentials"
    name = s3.new_bucket()
    client = s3.client()
    X, y = rs.datasets.load("breast_cancer")
    names = ["intercept"] + [f"feature {j}" for j in range(1, X.shape[1])]
    X0, y0 = np.array_split(X, 3)[0], np.array_split(y, 3)[0]
    for k, (Xk, yk) in enumerate(zip(np.array_split(X0, 2), np.array_split(y0, 2))):
        frame = pd.DataFrame(Xk, columns=names).assign(label=yk, note="free text")
        client.put_object(Bucket=name, Key=f"alice/hospital/part={k}/rows.parquet", Body=_parquet_bytes(frame))
    client.put_object(Bucket=name, Key="alice/hospital/_SUCCESS", Body=b"")
    client.put_object(Bucket=name, Key="alice/broken.parquet", Body=b"this is not parquet")
    secret = pd.DataFrame(X[:50, :2], columns=list(SECRET_COLUMNS)).assign(label=y[:50])
    client.put_object(Bucket=name, Key="bob/secret.parquet", Body=_parquet_bytes(secret))
    client.put_object(Bucket=name, Key="alicex/rows.parquet", Body=_parquet_bytes(secret))
    node = site_cluster.add_site_node("d", env=s3.env())
    site_cluster.cluster.wait_for_nodes()
    yield name
    site_cluster.cluster.remove_node(node)  # the cluster may serve the next module (conftest.CLUSTER_MODULES)
    del site_cluster.nodes["d"]


@pytest.fixture(scope="module")
def cluster_service(site_cluster, bucket, tmp_path_factory):
    root = tmp_path_factory.mktemp("sites-svc")
    X, y = rs.datasets.load("breast_cancer")
    names = ["intercept"] + [f"feature {j}" for j in range(1, X.shape[1])]
    paths = []
    for i, (Xi, yi) in enumerate(zip(np.array_split(X, 3), np.array_split(y, 3))):
        folder = root / "sites" / SITES[i] / "alice"
        folder.mkdir(parents=True)
        paths.append(folder / f"part-{i}.parquet")
        pd.DataFrame(Xi, columns=names).assign(label=yi).to_parquet(paths[-1])
    bob = root / "sites" / "a" / "bob"
    bob.mkdir()
    pd.DataFrame(X[:50, :2], columns=list(SECRET_COLUMNS)).assign(label=y[:50]).to_parquet(bob / "secret.parquet")
    lookalike = root / "sites" / "a" / "alicex"  # shares alice's prefix as a string, not as a directory
    lookalike.mkdir()
    pd.DataFrame(Xi, columns=names).assign(label=yi).to_parquet(lookalike / "part-0.parquet")
    (paths[0].parent / "escape.parquet").symlink_to(bob / "secret.parquet")
    grants = [f"alice@{s}:{root / 'sites' / s / 'alice'}" for s in SITES] + [f"bob@a:{bob}", "alice@nowhere:/srv"]
    grants += [f"alice@d:s3://{bucket}/alice/", f"bob@d:s3://{bucket}/bob/"]
    audit = root / "opened.txt"
    env = service_env(tempfile.mkdtemp(prefix="rs-svc-sites-")) | {
        "RAYSAMPLER_SITE_WAIT_S": "2",
        "RAYSAMPLER_DATA_GRANTS": ",".join(grants),
    }
    svc = LocalService(
        root / "data",
        keys=SERVICE_KEYS | {"carol": CAROL},
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


@pytest.fixture(scope="module")
def alice_runs(cluster_service) -> list[dict]:
    """Alice's runs on her three site shards, seeds 2 and 3 (ended): the first test's run and the pair that the
    checks compare (one run of each spec for the module)."""
    svc, paths, _, _ = cluster_service
    import httpx

    with httpx.Client(base_url=svc.url, timeout=30) as c:
        rids = []
        for seed in (2, 3):
            r = c.post("/v1/runs", json=_spec(paths, seed=seed), headers=hdr(ALICE))
            assert r.status_code == 202, r.text
            rids.append(r.json()["id"])
        return [final(c, rid) for rid in rids]


def test_site_shards_run_over_rest_where_they_live_and_are_never_opened_by_the_service(
    cluster_service, site_cluster, alice_runs
):
    _, paths, _, audit = cluster_service
    for info in alice_runs:
        assert info["status"] == "SUCCEEDED", info
        for w in info["workers"]:
            assert w["site"] == SITES[w["shard"]] and w["node_id"] == site_cluster.nodes[w["site"]].node_id, w
            assert w["hostname"] and w["pid"]
            # each site's process is another node's: its rounds go over TCP, and its RTT is measured on them
            assert w["channel"] == "tcp" and w["setup_rtt_s"] > 0 and 0 <= w["rtt_s"] <= w["rtt_median_s"], w
        assert info["progress"]["draws_stored"] == 60 and info["chains"] == 2
        trips = info["network"]["trips"]
        assert (trips["warmup"], trips["sampling"]) == (20, 60) and trips["setup"] > 0, trips
        assert trips["total"] == trips["setup"] + trips["warmup"] + trips["sampling"] + trips["capture"]
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
            lambda s: s["data"]["shards"].__setitem__(2, {"path": "/srv/part.parquet", "site": "nowhere"}),
            ["body", "data", "shards", 2],
            "no live Ray node carries the label raysampler.io/site=nowhere (waited 2 s",
        ),
        (lambda s: s["data"].__setitem__("y_column", "target"), ["body", "data", "shards", 0], "target"),
        (
            lambda s: s.__setitem__("model", {"family": "poisson_regression", "offset_column": "exposure"}),
            ["body", "model", "offset_column"],
            "exposure",
        ),
    ],
)
def test_bad_site_shards_within_the_grants_are_422_naming_the_shard(cluster_service, change, field, text):
    svc, paths, _, _ = cluster_service
    import httpx

    body = _spec(paths)
    change(body)
    r = httpx.post(svc.url + "/v1/runs", json=body, headers=hdr(ALICE), timeout=30)
    assert r.status_code == 422, r.text
    detail = r.json()["detail"][0]
    assert detail["loc"] == field and text in detail["msg"], detail


def _refusals(paths: list[Path]) -> dict[str, tuple[str, str]]:
    """Shard 0 replaced by each path outside alice's grants on site a: (key of the caller, path)."""
    a = paths[0].parent  # .../sites/a/alice
    return {
        "another tenant's file": (ALICE, str(a.parent / "bob" / "secret.parquet")),
        "a missing file elsewhere": (ALICE, str(a.parent / "bob" / "no-such-file.parquet")),
        "a '..' escape": (ALICE, f"{a}/../bob/secret.parquet"),
        "a symlink escape": (ALICE, str(a / "escape.parquet")),
        "a prefix that is not a directory of the grant": (ALICE, str(a.parent / "alicex" / "part-0.parquet")),
        "a relative path": (ALICE, "sites/a/alice/part-0.parquet"),
        "a '~' path": (ALICE, "~/part-0.parquet"),
        "a tenant without grants": (CAROL, str(paths[0])),
        "the owner's file on a site not granted to it": (
            BOB,
            str(a.parent / "bob" / "secret.parquet").replace("/sites/a/", "/sites/b/"),
        ),
    }


def test_paths_outside_the_grants_are_403_with_one_answer_that_names_only_field_and_rule(cluster_service):
    svc, paths, _, _ = cluster_service
    import httpx

    answers = {}
    with httpx.Client(base_url=svc.url, timeout=30) as c:
        for case, (key, path) in _refusals(paths).items():
            body = _spec(paths)
            body["data"]["shards"][0] = {"path": path, "site": "b" if key == BOB else "a"}
            r = c.post("/v1/runs", json=body, headers=hdr(key))
            assert r.status_code == 403, (case, r.text)
            detail = r.json()["detail"]
            assert detail[0]["loc"] == ["body", "data", "shards", 0, "path"], (case, detail)
            assert "data.shards[0].path" in detail[0]["msg"] and "granted" in detail[0]["msg"], (case, detail)
            assert path not in r.text and "secret" not in r.text and "bob" not in r.text, (case, r.text)
            answers[case] = r.content
        # nothing was created for anyone, and nothing of bob's file reached alice
        for key in (ALICE, CAROL):
            listed = c.get("/v1/runs", headers=hdr(key)).text
            assert not any(col in listed for col in SECRET_COLUMNS)
    assert len(set(answers.values())) == 1, answers  # byte-identical, existing or missing, whatever the reason


def test_bob_runs_on_his_own_file_and_alice_sees_none_of_it(cluster_service):
    svc, paths, _, _ = cluster_service
    import httpx

    secret = str(paths[0].parent.parent / "bob" / "secret.parquet")
    body = _spec(paths)
    body["data"] = {"shards": [{"path": secret, "site": "a"}], "y_column": "label"}
    with httpx.Client(base_url=svc.url, timeout=30) as c:
        r = c.post("/v1/runs", json=body, headers=hdr(BOB))
        assert r.status_code == 202, r.text
        rid = r.json()["id"]
        info = final(c, rid, BOB)
        assert info["status"] == "SUCCEEDED", info
        assert any(col in name for name in info["param_names"] for col in SECRET_COLUMNS), info["param_names"]
        assert c.get(f"/v1/runs/{rid}", headers=hdr(ALICE)).status_code == 404
        assert c.get(f"/v1/runs/{rid}/events", headers=hdr(ALICE)).status_code == 404
        listed = c.get("/v1/runs", headers=hdr(ALICE)).text
        assert rid not in listed and not any(col in listed for col in SECRET_COLUMNS)


def test_checks_of_a_site_run_are_computed_on_the_sites_and_the_service_opens_no_shard(cluster_service, alice_runs):
    """loo, evaluate (held-out shards on the sites), a posterior predictive check, predict, compare and the export of
    a run on site shards: each answers, and the audit hook still records no open of any site file by the service
    process; the export says why it has no log_likelihood group; a held-out shard outside the grants is a 403 naming
    it."""
    svc, paths, names, audit = cluster_service
    import httpx

    held = [{"path": str(p), "site": s} for p, s in zip(paths, SITES)]
    rids = [info["id"] for info in alice_runs]
    assert [info["status"] for info in alice_runs] == ["SUCCEEDED", "SUCCEEDED"], alice_runs
    with httpx.Client(base_url=svc.url, timeout=120) as c:
        lo = c.get(f"/v1/runs/{rids[0]}/loo", headers=hdr(ALICE))
        assert lo.status_code == 200, lo.text
        bands = lo.json()["k_flat"] + lo.json()["k_ok"] + lo.json()["k_high"]
        assert lo.json()["n_data_points"] == 569 and bands == 569 and lo.json()["elpd"] is not None
        ev = c.post(
            f"/v1/runs/{rids[0]}/evaluate",
            json={"data": {"shards": held, "y_column": "label"}},
            headers=hdr(ALICE),
        )
        assert ev.status_code == 200 and ev.json()["n"] == 569 and ev.json()["kind"] == "classification", ev.text
        comp = c.post("/v1/compare", json={"runs": rids}, headers=hdr(ALICE))
        assert comp.status_code == 200 and {row["run_id"] for row in comp.json()["rows"]} == set(rids), comp.text
        ppc = c.get(f"/v1/runs/{rids[0]}/ppc", params={"kind": "hist"}, headers=hdr(ALICE))  # drawn on the sites
        assert ppc.status_code == 200 and ppc.json()["edges"] == [-0.5, 0.5, 1.5], ppc.text
        assert {sum(row) for row in [ppc.json()["observed"], *ppc.json()["replicated"]]} == {569}
        pred = c.post(f"/v1/runs/{rids[0]}/predict", json={"rows": [[1.0] + [0.0] * 30]}, headers=hdr(ALICE))
        assert pred.status_code == 200 and 0 < pred.json()["values"][0] < 1, pred.text
        nc = c.get(f"/v1/runs/{rids[0]}/arviz", headers=hdr(ALICE))
        assert nc.status_code == 200 and b"live on sites" in nc.content
        secret = str(paths[0].parent.parent / "bob" / "secret.parquet")
        refused = c.post(
            f"/v1/runs/{rids[0]}/evaluate",
            json={"data": {"shards": [{"path": secret, "site": "a"}], "y_column": "label"}},
            headers=hdr(ALICE),
        )
        assert refused.status_code == 403 and refused.json()["detail"][0]["loc"][:4] == ["body", "data", "shards", 0]
    opened = set(audit.read_text().splitlines())
    for p in paths:
        assert str(p) not in opened and not any(o.startswith(str(p.parent)) for o in opened), p


def _s3_spec(bucket: str, paths: list[Path], names: list[str], shard0: str, **over):
    """Shard 0 as an object-storage location on site d (the others: files on sites b and c), columns chosen."""
    body = _spec(paths, **over)
    body["data"]["shards"][0] = {"path": shard0, "site": "d"}
    body["data"]["x_columns"] = names
    return body


def test_a_site_reads_a_parquet_data_set_from_object_storage_with_its_own_credentials(cluster_service, bucket):
    """Shard 0 from s3://<bucket>/alice/hospital/ (two hive partitions, a free-text column left out) on site d: the
    run's draws are exactly those of the same rows read from files (in-process: draws do not depend on where a
    shard is read)."""
    svc, paths, names, _ = cluster_service
    import httpx

    from raysampler.algorithms import get_algorithm
    from raysampler.models import get_model
    from raysampler.options import ExecutionOptions
    from raysampler.sampling import Run
    from raysampler.service.schemas import RunSpec
    from raysampler.service.specs import run_options

    body = _s3_spec(bucket, paths, names, f"s3://{bucket}/alice/hospital/", seed=4)
    with httpx.Client(base_url=svc.url, timeout=60) as c:
        r = c.post("/v1/runs", json=body, headers=hdr(ALICE))
        assert r.status_code == 202, r.text
        rid = r.json()["id"]
        info = final(c, rid)
        assert info["status"] == "SUCCEEDED", info
        assert [w["site"] for w in info["workers"]] == ["d", "b", "c"] and info["param_names"][1] == "beta[feature 1]"
        stored = Client(svc.url, ALICE).run(rid).draws()
    spec_obj = RunSpec.model_validate(body)
    files = [rs.Shard(path=str(p), y_column="label", x_columns=tuple(names)) for p in paths]
    model = get_model("logistic_regression", **spec_obj.model.params())
    local = ExecutionOptions(executor="local")
    with Run(model, rs.shard(files), get_algorithm("dglmc"), run_options(spec_obj), local) as run:
        expected = np.concatenate([ch.theta for ch in run.chunks()])
    np.testing.assert_array_equal(stored.transpose(1, 0, 2), expected)


@pytest.mark.parametrize(
    "location,text",
    [
        ("s3://{bucket}/alice/missing.parquet", "does not exist"),
        ("s3://{bucket}/alice/broken.parquet", "parquet"),
        ("s3://{bucket}/alice/nothing-here/", "holds no parquet files"),
    ],
    ids=["missing-object", "not-parquet", "empty-prefix"],
)
def test_an_unreadable_object_inside_the_grant_is_a_422_naming_the_shard(cluster_service, bucket, location, text):
    svc, paths, names, _ = cluster_service
    import httpx

    body = _s3_spec(bucket, paths, names, location.format(bucket=bucket))
    r = httpx.post(svc.url + "/v1/runs", json=body, headers=hdr(ALICE), timeout=60)
    assert r.status_code == 422, r.text
    detail = r.json()["detail"][0]
    assert detail["loc"] == ["body", "data", "shards", 0] and text in detail["msg"], detail


def test_a_malformed_uri_is_a_422_naming_the_path(cluster_service, bucket):
    svc, paths, names, _ = cluster_service
    import httpx

    for bad, text in (("s3://Not_A_Bucket/x.parquet", "bucket"), (f"s3://key:secret@{bucket}/alice/", "credentials")):
        r = httpx.post(svc.url + "/v1/runs", json=_s3_spec(bucket, paths, names, bad), headers=hdr(ALICE), timeout=60)
        assert r.status_code == 422, r.text
        detail = r.json()["detail"][0]
        assert detail["loc"] == ["body", "data", "shards", 0, "path"] and text in detail["msg"], detail


def test_prefixes_outside_the_grants_get_the_one_refusal_paths_get(cluster_service, bucket):
    """Bob's existing object, a missing one next to it, a look-alike prefix, a '..' escape, another bucket, another
    scheme, a tenant without grants: one byte-identical 403 body, the same as for a path outside the grants."""
    svc, paths, names, _ = cluster_service
    import httpx

    cases = {
        "another tenant's object": (ALICE, f"s3://{bucket}/bob/secret.parquet"),
        "a missing object there": (ALICE, f"s3://{bucket}/bob/no-such-object.parquet"),
        "a look-alike prefix": (ALICE, f"s3://{bucket}/alicex/rows.parquet"),
        "a '..' escape": (ALICE, f"s3://{bucket}/alice/../bob/secret.parquet"),
        "another bucket": (ALICE, "s3://another-bucket/alice/hospital/"),
        "another scheme": (ALICE, f"gs://{bucket}/alice/hospital/"),
        "a tenant without grants": (CAROL, f"s3://{bucket}/alice/hospital/"),
    }
    answers = {}
    with httpx.Client(base_url=svc.url, timeout=60) as c:
        for case, (key, location) in cases.items():
            r = c.post("/v1/runs", json=_s3_spec(bucket, paths, names, location), headers=hdr(key))
            assert r.status_code == 403, (case, r.text)
            assert "bob" not in r.text and "secret" not in r.text and bucket not in r.text, (case, r.text)
            answers[case] = r.content
        body = _spec(paths)
        body["data"]["shards"][0] = {"path": str(paths[0].parent.parent / "bob" / "secret.parquet"), "site": "a"}
        body["data"]["x_columns"] = names
        answers["a path outside the grants"] = c.post("/v1/runs", json=body, headers=hdr(ALICE)).content
    assert len(set(answers.values())) == 1, answers
