"""The SDK against a real `raysampler serve` (uvicorn, SQLite, executor "local": the point is the SDK and the wire,
not Ray), every test on the sync and the async client alike (`sdk_twins`): the async SDK passes the sync one's tests.
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd
import pytest
from sdk_twins import KINDS, connect
from support.service_helpers import ALICE, spec

from raysampler.client import APIError
from raysampler.result import Result

pytestmark = [pytest.mark.service]

SMALL = dict(num_rounds=120, burn_in=20, chains=2, seed=4)


@pytest.mark.parametrize("kind", KINDS)
def test_a_run_from_submit_to_its_result(local_service, kind):
    tag = f"sdk-{kind}-{time.monotonic_ns()}"
    with connect(kind, local_service.url, ALICE) as c:
        run = c.submit(spec(**SMALL), name="parity", tags={"case": tag})
        info = run.wait(progress=True, timeout=300)
        assert info["status"] == "SUCCEEDED" and info["stop_reason"] == "num_rounds"
        assert run.status() == "SUCCEEDED" and repr(run).endswith("status=SUCCEEDED)")
        assert [r["id"] for r in c.runs(name="parity", tags={"case": tag})] == [run.id]
        assert c.run("latest").id == run.id
        last = list(run.events(follow=False))[-1]
        assert last["event"] == "status" and last["data"]["status"] == "SUCCEEDED"

        draws = run.draws()
        assert draws.shape == (2, 120, 31) and run.header is not None and run.header.chains == 2
        offsets = [b.offset for b in run.stream_draws(start=100, follow=False)]
        assert offsets[0] == 100 and sum(len(b) for b in run.stream_draws(start=100, follow=False)) == 140

        table = run.summary()
        np.testing.assert_allclose(table["mean"].to_numpy(), draws.mean(axis=(0, 1)), rtol=1e-10, atol=1e-12)
        np.testing.assert_array_equal(run.to_arviz().posterior["beta"].values, draws)

        result = run.result()  # the type raysampler.sample returns, with its names
        assert isinstance(result, Result) and result.executor == "service"
        np.testing.assert_array_equal(result.draws, draws)
        assert list(result.summary().index) == list(table.index)
        np.testing.assert_allclose(result.summary()["mean"].to_numpy(), table["mean"].to_numpy(), rtol=1e-10)
        pd.testing.assert_frame_equal(run.fixef(), result.fixef(), rtol=1e-10)
        assert list(run.prior_summary().columns) == ["prior", "class", "coef", "group"]


@pytest.mark.parametrize("kind", KINDS)
def test_data_sets_and_the_service(local_service, kind, tmp_path):
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(40, 3)), (rng.random(40) < 0.5).astype(float)
    path = tmp_path / "rows.csv"
    pd.DataFrame(np.column_stack([X, y]), columns=["a", "b", "c", "y"]).to_csv(path, index=False)
    with connect(kind, local_service.url, ALICE) as c:
        arrays = c.upload_dataset(X, y, name=f"arrays-{kind}")
        rows = c.upload_file(str(path), y_column="y", name=f"file-{kind}")
        assert (arrays["n"], arrays["d"], rows["n"], rows["d"]) == (40, 3, 40, 3)
        assert {arrays["id"], rows["id"]} <= {d["id"] for d in c.datasets()}
        c.delete_dataset(arrays["id"])
        assert arrays["id"] not in {d["id"] for d in c.datasets()}
        assert c.health()["status"] == "ok" and "dglmc" in c.version()["algorithms"]
        assert "logistic_regression" in {m["name"] for m in c.models()}


@pytest.mark.parametrize("kind", KINDS)
def test_wait_times_out_and_a_cancelled_run_keeps_its_draws(local_service, kind):
    with connect(kind, local_service.url, ALICE) as c:
        run = c.submit(spec(num_rounds=10**6, burn_in=0, chains=2, seed=8))
        t0 = time.monotonic()
        with pytest.raises(TimeoutError):
            run.wait(timeout=1.0)
        assert time.monotonic() - t0 < 15
        assert run.cancel()["status"] in ("RUNNING", "CANCELLED", "PENDING")
        assert run.wait(timeout=120)["status"] == "CANCELLED"


@pytest.mark.parametrize("kind", KINDS)
def test_a_bad_spec_is_an_api_error_naming_the_field(local_service, kind):
    with connect(kind, local_service.url, ALICE) as c, pytest.raises(APIError, match="num_shards") as err:
        c.submit(spec(num_shards=0))
    assert err.value.status_code == 422
