"""The audit log's HTTP side: an ASGI middleware that writes one record per state-changing request and per refused
request (any 401 or 403, whichever route or error produced it), after the response is sent.

The tenant dependency (deps.tenant) leaves the caller's tenant and key id in the request state; the route matched
and its path parameters name the action and the run or data set; a created run's or data set's id is read from the
response body."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from raysampler.service.audit import AuditLog, AuditRecord, outcome_of

#: (method, route path) → the action logged for it.
ACTIONS: dict[tuple[str, str], str] = {
    ("POST", "/v1/runs"): "submit",
    ("POST", "/v1/runs/{run_id}/cancel"): "cancel",
    ("POST", "/v1/runs/{run_id}/resume"): "resume",
    ("DELETE", "/v1/runs/{run_id}"): "delete_run",
    ("POST", "/v1/datasets"): "upload_dataset",
    ("DELETE", "/v1/datasets/{dataset_id}"): "delete_dataset",
}
#: Actions that create a resource: the id is the response body's "id", under this record field.
CREATES = {"submit": "run_id", "upload_dataset": "dataset_id"}
#: The action of a refused request to any other route.
OTHER = "request"


@dataclass
class _Seen:
    """What the middleware saw of the response."""

    status: int = 0
    body: bytes = b""
    keep_body: bool = False


def action_of(scope: Scope) -> str | None:
    """The audited action of the route this request matched, None for one that is not audited."""
    route = scope.get("route")
    return ACTIONS.get((scope["method"], getattr(route, "path", "")))


class AuditMiddleware:
    """Records audited and refused requests in `log` (see the module docstring)."""

    def __init__(self, app: ASGIApp, log: AuditLog) -> None:
        self.app = app
        self.log = log

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        state: dict[str, Any] = scope.setdefault("state", {})
        seen = _Seen()

        async def observe(message: Message) -> None:
            if message["type"] == "http.response.start":
                seen.status = message["status"]
                seen.keep_body = action_of(scope) in CREATES and 200 <= seen.status < 300
            elif message["type"] == "http.response.body" and seen.keep_body:
                seen.body += message.get("body", b"")
            await send(message)

        try:
            await self.app(scope, receive, observe)
        except Exception:
            seen.status = seen.status or 500
            raise
        finally:
            record = self.record(scope, state, seen)
            if record is not None:
                self.log.write(record)

    @staticmethod
    def record(scope: Scope, state: dict[str, Any], seen: _Seen) -> AuditRecord | None:
        """The record of this request, None if it is neither audited nor refused."""
        action = action_of(scope)
        outcome = outcome_of(seen.status)
        if action is None and outcome != "refused":
            return None
        ids: dict[str, str | None] = {"run_id": None, "dataset_id": None}
        params = scope.get("path_params") or {}
        for name in ids:
            ids[name] = params.get(name)
        if action in CREATES and seen.body:
            try:
                ids[CREATES[action]] = json.loads(seen.body).get("id")
            except (ValueError, AttributeError):
                pass
        client = scope.get("client")
        return AuditRecord(
            time=AuditRecord.now(),
            tenant=state.get("tenant"),
            key_id=state.get("key_id"),
            action=action or OTHER,
            run_id=ids["run_id"],
            dataset_id=ids["dataset_id"],
            status=seen.status,
            outcome=outcome,
            method=scope["method"],
            path=scope["path"],
            client=client[0] if client else None,
        )
