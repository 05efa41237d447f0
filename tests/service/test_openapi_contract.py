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
from conftest import inprocess_settings
from service_helpers import ALICE

from api import create_app

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
def contract_schema(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The app's own OpenAPI document, with requests sent to the app in-process (its lifespan started on the first)."""
    from schemathesis.python.asgi import shutdown_lifespans

    app = create_app(inprocess_settings(tmp_path_factory.mktemp("contract") / "data", quota_max_chains_x_dim=2048))
    yield schemathesis.openapi.from_asgi("/openapi.json", app, config=contract_config())
    shutdown_lifespans()  # the run manager stops; runs still sampling end FAILED


schema = schemathesis.pytest.from_fixture("contract_schema")


@schema.parametrize()
def test_operation_keeps_its_contract(case: Any) -> None:
    case.call_and_validate()


def test_stateful_sequences_keep_the_contract(contract_schema: Any) -> None:
    from hypothesis import HealthCheck, Phase, settings

    machine = contract_schema.as_state_machine()
    machine.run(
        settings=settings(
            max_examples=STATEFUL_EXAMPLES,
            derandomize=True,
            phases=[Phase.explicit, Phase.reuse, Phase.generate],  # a failure is reported as found: shrinking
            # a sequence of runs that sample can take longer than the suite's per-test limit
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
    )
