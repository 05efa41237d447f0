"""Dependencies: the service objects of this app and the caller's tenant (Bearer key → tenant)."""
from __future__ import annotations

import hmac
from dataclasses import dataclass

from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from raysampler.service.drawfiles import DrawFiles
from raysampler.service.metrics import Metrics
from raysampler.service.runs import RunManager
from raysampler.service.settings import Settings
from raysampler.service.store import RecordStore


@dataclass
class Services:
    settings: Settings
    store: RecordStore
    files: DrawFiles
    manager: RunManager
    metrics: Metrics
    keys: dict[str, str]  # key → tenant


def services(request: Request) -> Services:
    return request.app.state.services


_bearer = HTTPBearer(auto_error=False, description="API key: Authorization: Bearer <key>")


def tenant(creds: HTTPAuthorizationCredentials | None = Depends(_bearer), svc: Services = Depends(services)) -> str:
    """The tenant owning the presented key; 401 without a valid key."""
    if creds is None or creds.scheme.lower() != "bearer":
        raise HTTPException(401, "missing API key: send Authorization: Bearer <key>",
                            headers={"WWW-Authenticate": "Bearer"})
    given = creds.credentials.encode()
    found = None
    for key, name in svc.keys.items():  # compare against every key in constant time
        if hmac.compare_digest(given, key.encode()):
            found = name
    if found is None:
        raise HTTPException(401, "invalid API key", headers={"WWW-Authenticate": "Bearer"})
    return found
