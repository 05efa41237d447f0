"""The SDK's error for an answer the service refused (`APIError`), and the check that raises it."""

from __future__ import annotations

from typing import Any

import httpx


class APIError(RuntimeError):
    """The service answered with an error; `.status_code` and `.detail` (the server's message) say which."""

    def __init__(self, status_code: int, detail: Any) -> None:
        super().__init__(f"HTTP {status_code}: {_detail_text(detail)}")
        self.status_code, self.detail = status_code, detail


def _detail_text(detail: Any) -> str:
    """The server's message as one line; FastAPI's validation errors name their field (`spec.model.family: ...`)."""
    if isinstance(detail, list):
        return "; ".join(f"{'.'.join(str(p) for p in e.get('loc', ()) if p != 'body')}: {e.get('msg')}" for e in detail)
    return str(detail)


def check_response(resp: httpx.Response) -> httpx.Response:
    """`resp` itself when its status is below 400, else APIError with the server's `detail` (its body has been read:
    a streamed answer's driver reads it first)."""
    if resp.status_code >= 400:
        try:
            detail = resp.json().get("detail", resp.text)
        except (ValueError, AttributeError):
            detail = resp.text
        raise APIError(resp.status_code, detail)
    return resp
