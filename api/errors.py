"""Service errors as HTTP responses, and the error responses each route declares in the OpenAPI document.

FieldError → 422 (the same shape as FastAPI's validation errors, `loc` naming the field); AccessDenied → 403 (the
same shape); NotFound → 404;
StateConflict → 409; TooLarge → 413; QuotaExceeded → 429 (with Retry-After where waiting helps). Other errors are
{"detail": message}. A 405's Allow header lists every method
the path has (Starlette's names only those of the first route that matched the path).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exception_handlers import http_exception_handler, request_validation_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException

from raysampler.service.errors import AccessDenied, FieldError, NotFound, QuotaExceeded, StateConflict, TooLarge
from raysampler.service.schemas import ErrorMessage

_ERROR = {"model": ErrorMessage}
_DOCS: dict[int, dict[str, Any]] = {
    400: _ERROR | {"description": "the request body could not be parsed (e.g. malformed multipart)"},
    401: _ERROR
    | {
        "description": "no or an invalid API key (send Authorization: Bearer <key>)",
        "headers": {"WWW-Authenticate": {"schema": {"type": "string"}, "description": "Bearer"}},
    },
    403: {
        "description": "a field names data this tenant may not use (a site shard's path outside its data grants); "
        "`loc` names the field, the message the rule",
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/HTTPValidationError"}}},
    },
    404: _ERROR | {"description": "no such run or data set for this tenant"},
    422: {
        "description": "a field fails validation, or data the schema cannot judge do not fit (an upload that does not "
        "parse as .npz/.csv/.parquet, a CSV without a header row, no target column; a data set that does not fit "
        "the model family; a run that can store no draw: `thin` over the rounds after burn-in); `loc` names the "
        "field, the message the rule",
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/HTTPValidationError"}}},
    },
    409: _ERROR | {"description": "the request does not fit the run's state"},
    # JSON from the app; plain text when the body limit cuts the request off before the app answers
    429: _ERROR
    | {
        "description": "a per-tenant or per-run limit is reached (the message names it: active runs, stored bytes, "
        "chains × dimension, planned draw bytes); Retry-After says when to try again where waiting helps",
        "headers": {"Retry-After": {"schema": {"type": "integer"}, "description": "seconds"}},
    },
    413: {
        "description": "the request body is over the upload limit (RAYSAMPLER_MAX_UPLOAD_BYTES)",
        "content": {
            "application/json": {"schema": {"$ref": "#/components/schemas/ErrorMessage"}},
            "text/plain": {"schema": {"type": "string"}},
        },
    },
}


def error_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` entries for these error statuses."""
    return {code: _DOCS[code] for code in codes}


#: what pydantic puts before a validator's message
_MSG_PREFIXES = ("Value error, ", "Assertion failed, ")
#: a union branch's name in a `loc` (int, constrained-int, literal['auto'], function-after[...]), never a field name
_BRANCH = re.compile(r"^(int|float|str|bool|bytes|dict|list|none|[a-z]+(-[a-z]+)+(\[.*\])?|[a-z-]+\[.*\])$")
_SHOULD_BE = "Input should be "


def _clean_message(msg: str) -> str:
    for prefix in _MSG_PREFIXES:
        if msg.startswith(prefix):
            return msg[len(prefix) :]
    return msg


def clean_validation_errors(errors: Sequence[Any]) -> list[dict[str, Any]]:
    """Validation errors as users should read them: no pydantic prefixes ("Value error, ") in messages, no union
    branch names in `loc`; the errors of one field's union branches merged into one ("Input should be greater than
    or equal to 1 or 'auto'")."""
    merged: dict[tuple[Any, ...], dict[str, Any]] = {}
    for err in errors:
        loc = tuple(p for p in err.get("loc", ()) if not (isinstance(p, str) and _BRANCH.match(p)))
        msg = _clean_message(str(err.get("msg", "")))
        if loc in merged:
            first = merged[loc]
            if msg.startswith(_SHOULD_BE) and first["msg"].startswith(_SHOULD_BE):
                msg = msg[len(_SHOULD_BE) :]
            first["msg"] = f"{first['msg']} or {msg}"
            first.pop("ctx", None)
            continue
        merged[loc] = {**err, "loc": loc, "msg": msg}
    return list(merged.values())


async def _validation_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    return await request_validation_exception_handler(
        request, RequestValidationError(clean_validation_errors(exc.errors()), body=exc.body)
    )


def _field_detail(exc: FieldError, kind: str) -> dict[str, Any]:
    """One entry of a 422/403 `detail` list, in FastAPI's validation-error shape; `loc` within the body unless the
    error names a query, path or header field."""
    where = exc.loc if exc.loc and exc.loc[0] in ("query", "path", "header") else ("body", *exc.loc)
    return {"type": kind, "loc": list(where), "msg": str(exc), "input": None}


async def _field_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, FieldError)
    return await request_validation_exception_handler(
        request, RequestValidationError([_field_detail(exc, "value_error")])
    )


async def _access_denied(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, AccessDenied)
    return JSONResponse({"detail": [_field_detail(exc, "access_denied")]}, status_code=403)


def _status(code: int) -> Callable[[Request, Exception], Awaitable[Response]]:
    async def handler(request: Request, exc: Exception) -> Response:
        return JSONResponse({"detail": str(exc)}, status_code=code)

    return handler


async def _quota(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, QuotaExceeded)
    headers = {"Retry-After": str(exc.retry_after_s)} if exc.retry_after_s is not None else None
    return JSONResponse({"detail": str(exc)}, status_code=429, headers=headers)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 405:
        allowed = _documented_methods(request.app, request.url.path)
        if allowed:
            exc = HTTPException(405, exc.detail, headers={"Allow": ", ".join(allowed)})
    return await http_exception_handler(request, exc)


def _documented_methods(app: FastAPI, path: str) -> list[str]:
    """The methods the OpenAPI document gives `path` (its templates' {parameters} match one path segment)."""
    found: set[str] = set()
    for template, operations in app.openapi()["paths"].items():
        if re.fullmatch(re.sub(r"\\\{[^/]+\\\}", "[^/]+", re.escape(template)), path):
            found |= {method.upper() for method in operations}
    return sorted(found)


def install(app: FastAPI) -> None:
    """Register the service errors' HTTP statuses on `app`."""
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(FieldError, _field_error)
    app.add_exception_handler(AccessDenied, _access_denied)
    app.add_exception_handler(NotFound, _status(404))
    app.add_exception_handler(StateConflict, _status(409))
    app.add_exception_handler(TooLarge, _status(413))
    app.add_exception_handler(QuotaExceeded, _quota)
