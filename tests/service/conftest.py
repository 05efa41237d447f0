"""Fixtures of the service tests: the SDK client of tenant alice on the session's real service (`service`)."""

from __future__ import annotations

import pytest
from support.service_helpers import ALICE

from raysampler.client import Client


@pytest.fixture(scope="module")
def alice(service):
    with Client(service.url, ALICE) as c:
        yield c
