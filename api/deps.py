"""Dependencies: the service objects of this app and the caller's tenant (Bearer key → tenant)."""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from typing import Annotated, Literal

from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic.json_schema import SkipJsonSchema

from raysampler.service.audit import key_id
from raysampler.service.checks import Context
from raysampler.service.drawfiles import DrawFiles
from raysampler.service.manager import RunManager
from raysampler.service.metrics import Metrics
from raysampler.service.settings import Settings
from raysampler.service.store import RecordStore

#: `T | Absent = None` for an optional parameter: absent means None, and the OpenAPI document offers no `null` (a
#: client cannot send null in a query, header or form field; "null" would be the text "null").
Absent = SkipJsonSchema[None]


@dataclass
class Services:
    settings: Settings
    store: RecordStore
    files: DrawFiles
    manager: RunManager
    metrics: Metrics
    keys: dict[str, str]  # key → tenant


# The two dependencies of every /v1 route are `async`: they never block, and as plain `def`s FastAPI ran each in its
# thread pool, two hops there and back per request, which slowed every request (docs/performance.md, "Measurements
# behind choices in the code").
async def services(request: Request) -> Services:
    svc: Services = request.app.state.services
    return svc


_bearer = HTTPBearer(auto_error=False, description="API key: Authorization: Bearer <key>")


async def tenant(
    request: Request,
    creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    svc: Annotated[Services, Depends(services)],
) -> str:
    """The tenant owning the presented key; 401 without a valid key. Leaves the key's id (audit.key_id, never the
    key) and the tenant in the request state for the audit log."""
    if creds is None or creds.scheme.lower() != "bearer":
        raise HTTPException(
            401, "missing API key: send Authorization: Bearer <key>", headers={"WWW-Authenticate": "Bearer"}
        )
    request.state.key_id = key_id(creds.credentials)
    given = creds.credentials.encode()
    found = None
    for key, name in svc.keys.items():  # compare against every key, each in constant time, with no early exit
        if hmac.compare_digest(given, key.encode()):
            found = name
    if found is None:
        raise HTTPException(401, "invalid API key", headers={"WWW-Authenticate": "Bearer"})
    request.state.tenant = found
    return found


#: `draws` as a query parameter: a count of draws, or "all".
DRAWS_QUERY_PATTERN = r"^(all|[1-9][0-9]{0,5})$"


def draws_arg(value: str) -> int | Literal["all"]:
    """A `draws` query value (checked by DRAWS_QUERY_PATTERN) as the engine takes it."""
    return "all" if value == "all" else int(value)


def check_context(svc: Services) -> Context:
    """What the checks of a fit need of this app's service objects."""
    return Context(svc.store, svc.files, svc.manager.grants, svc.settings.executor)
