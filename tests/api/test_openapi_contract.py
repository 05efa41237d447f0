"""The OpenAPI document tells the truth: schemathesis runs every check against the app in-process (executor "local"),
per operation (examples, coverage and fuzzing phases) and as stateful sequences that follow the links it infers
(submit → inspect → stream → cancel → delete, upload → use → delete). Deterministic (derandomised, fixed seed) and
bounded. The settings shared with the command line are in schemathesis.toml at the repository root.

Streams are read with follow=false: a followed stream lasts as long as its run, which test_service.py covers.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from fastapi import FastAPI
from support.service_helpers import ALICE, inprocess_settings

from raysampler.api import create_app
from raysampler.api.deps import Services
from raysampler.service.datasets import delete_dataset

pytestmark = pytest.mark.service  # the app in-process (executor "local")

CONFIG_FILE = Path(__file__).resolve().parents[2] / "schemathesis.toml"
MAX_EXAMPLES = 8  # per operation and phase: the module runs in about 20 s
STATEFUL_EXAMPLES = 8
SEED = 20_251_109


def contract_config() -> Any:
    """schemathesis.toml plus this suite's bounds: the test tenant's key, a fixed seed, few examples, no database."""
    text = f"seed = {SEED}\n{CONFIG_FILE.read_text()}\n[auth.openapi.HTTPBearer]\nbearer = {ALICE!r}\n"
    config = schemathesis.Config.from_str(text)
    project = config.projects.default
    project.update(request_timeout=30, parameters={"follow": False})
    project.generation.update(max_examples=MAX_EXAMPLES, deterministic=True, database="none")
    return config


@pytest.fixture(scope="module")
def contract_app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FastAPI]:
    """The in-process app under test (its lifespan starts with the first request schemathesis sends)."""
    from schemathesis.python.asgi import shutdown_lifespans

    # small runs only (draws of at most 400 kB; a larger one is a 429 the contract allows): the runs it submits are
    # sampled while it goes on, and a few default-sized ones were half the module's time
    settings = inprocess_settings(
        tmp_path_factory.mktemp("contract") / "data", quota_max_chains_x_dim=2048, quota_max_draw_bytes=400_000
    )
    yield create_app(settings)
    shutdown_lifespans()  # the run manager stops; runs still sampling end FAILED


@pytest.fixture(scope="module")
def contract_schema(contract_app: FastAPI) -> Any:
    """The app's own OpenAPI document, with requests sent to the app in-process."""
    return schemathesis.openapi.from_asgi("/openapi.json", contract_app, config=contract_config())


schema = schemathesis.pytest.from_fixture("contract_schema")


@schema.parametrize()
def test_operation_keeps_its_contract(case: Any) -> None:
    case.call_and_validate()


def _empty_tenant(services: Services) -> None:
    """Delete every run and data set of the test tenant."""
    tenant = services.keys[ALICE]
    while runs := services.store.list_runs(tenant, None, None, 500):
        for rec in runs:  # the executor is stopped: nothing writes to them (one stopped mid-run stays RUNNING)
            services.store.delete_run(tenant, rec.id)
            services.files.delete(tenant, rec.id)
    for ds in services.store.list_datasets(tenant):
        delete_dataset(services.store, tenant, ds.id)


def test_stateful_sequences_keep_the_contract(contract_app: FastAPI, contract_schema: Any) -> None:
    """Hypothesis replays the sequences it generates and requires the service's answers to depend on the requests
    alone, so here runs queue without sampling (the executor is stopped: a run stays PENDING until cancelled; the
    per-operation test above samples them) and every scenario starts from an empty tenant."""
    from hypothesis import HealthCheck, Phase, settings

    contract_schema["/v1/runs"]["GET"].Case(query={"limit": 1}).call()  # starts the app's lifespan if not yet
    services: Services = contract_app.state.services
    services.manager.stop()  # runs still sampling end FAILED; new ones wait as PENDING

    class Workflow(contract_schema.as_state_machine()):  # type: ignore[misc]
        def setup(self) -> None:
            _empty_tenant(services)

        def before_call(self, case: Any) -> None:
            if case.path.endswith(("/events", "/draws")):  # a followed stream of a PENDING run never ends
                case.query = {**(case.query or {}), "follow": "false"}

    Workflow.run(
        settings=settings(
            max_examples=STATEFUL_EXAMPLES,
            derandomize=True,
            phases=[Phase.explicit, Phase.reuse, Phase.generate],  # report a failure as found, without shrinking
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
    )


def test_the_document_bounds_what_the_service_accepts(app_client: Any) -> None:
    """The two requests an independent `schemathesis run --checks all` flagged (ST202): a seed at the document's
    bound (an exact integer, not FastAPI's float 9.223372036854776e+18) is accepted and one past it refused; an
    upload whose CSV has no header row gets the 422 the route documents."""
    from support.service_helpers import hdr, spec

    doc = app_client.get("/openapi.json").json()
    seed = doc["components"]["schemas"]["RunSpec"]["properties"]["seed"]
    assert seed["maximum"] == 2**63 - 1 and isinstance(seed["maximum"], int) and "exclusiveMaximum" not in seed
    top = app_client.post("/v1/runs", json=spec(seed=seed["maximum"], num_rounds=20, burn_in=10), headers=hdr(ALICE))
    assert top.status_code == 202, top.text
    app_client.post(f"/v1/runs/{top.json()['id']}/cancel", headers=hdr(ALICE))
    assert app_client.post("/v1/runs", json=spec(seed=2**63 + 190), headers=hdr(ALICE)).status_code == 422

    upload = doc["paths"]["/v1/datasets"]["post"]["responses"]
    assert "header row" in upload["422"]["description"]
    headless = app_client.post("/v1/datasets", files={"file": ("d.csv", b"1,54,0.5\n0,61,0.2\n")}, headers=hdr(ALICE))
    assert headless.status_code == 422 and headless.json()["detail"][0]["loc"] == ["body", "file"], headless.text
