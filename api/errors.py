"""Service errors as HTTP responses, and the error responses each route declares in the OpenAPI document.

FieldError → 422 (the same shape as FastAPI's validation errors, `loc` naming the field); NotFound → 404;
StateConflict → 409; TooLarge → 413. Other errors are {"detail": message}.
"""
from __future__ import annotations

from typing import Any, Awaitable, Callable

from fastapi import FastAPI, Request
from fastapi.exception_handlers import request_validation_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response

from raysampler.service.errors import FieldError, NotFound, StateConflict, TooLarge
from raysampler.service.schemas import ErrorMessage

_ERROR = {"model": ErrorMessage}
_DOCS: dict[int, dict[str, Any]] = {
    400: _ERROR | {"description": "the request body could not be parsed (e.g. malformed multipart)"},
    401: _ERROR | {"description": "no or an invalid API key (send Authorization: Bearer <key>)",
                   "headers": {"WWW-Authenticate": {"schema": {"type": "string"}, "description": "Bearer"}}},
    404: _ERROR | {"description": "no such run or data set for this tenant"},
    409: _ERROR | {"description": "the request does not fit the run's state"},
    # JSON from the app; plain text when the body limit cuts the request off before the app answers
    413: {"description": "the request body is over the upload limit (RAYSAMPLER_MAX_UPLOAD_BYTES)",
          "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorMessage"}},
                      "text/plain": {"schema": {"type": "string"}}}},
}


def error_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` entries for these error statuses."""
    return {code: _DOCS[code] for code in codes}


async def _field_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, FieldError)
    error = {"type": "value_error", "loc": ("body", *exc.loc), "msg": str(exc), "input": None}
    return await request_validation_exception_handler(request, RequestValidationError([error]))


def _status(code: int) -> Callable[[Request, Exception], Awaitable[Response]]:
    async def handler(request: Request, exc: Exception) -> Response:
        return JSONResponse({"detail": str(exc)}, status_code=code)

    return handler


def install(app: FastAPI) -> None:
    """Register the service errors' HTTP statuses on `app`."""
    app.add_exception_handler(FieldError, _field_error)
    app.add_exception_handler(NotFound, _status(404))
    app.add_exception_handler(StateConflict, _status(409))
    app.add_exception_handler(TooLarge, _status(413))
