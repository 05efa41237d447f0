"""Security headers on every response: a strict Content-Security-Policy (same-origin scripts, styles and
connections only; no inline script or style), no framing, no MIME sniffing, no Referer.

The API documentation pages (/docs: Swagger UI, /redoc) are FastAPI's: they load their scripts and styles from a CDN
and start with an inline script. They get a narrower policy of their own: the CDN, and only the inline scripts the
page was served with (by SHA-256 hash, computed from the page), never inline script in general."""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Iterable

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

#: The policy of the dashboard, the API and everything else: what the dashboard needs and nothing more (its images
#: are the data: favicon; uPlot styles its elements through the CSSOM, which style-src does not restrict).
STRICT_CSP = (
    "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)
#: The documentation pages' policy; {scripts} is replaced by the hashes of the page's own inline scripts. Redoc
#: injects <style> elements and a blob: worker, hence style-src 'unsafe-inline' and worker-src blob: here only.
DOCS_CDN = "https://cdn.jsdelivr.net"
DOCS_CSP = (
    f"default-src 'self'; script-src 'self' {DOCS_CDN}{{scripts}}; "
    f"style-src 'self' {DOCS_CDN} https://fonts.googleapis.com 'unsafe-inline'; "
    "font-src 'self' https://fonts.gstatic.com data:; "
    f"img-src 'self' data: {DOCS_CDN} https://fastapi.tiangolo.com; worker-src 'self' blob:; connect-src 'self'; "
    "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
#: Sent with every response (a Content-Security-Policy is added too).
COMMON_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",  # frame-ancestors for browsers that predate it
}
_INLINE_SCRIPT = re.compile(rb"<script\b(?![^>]*\bsrc\s*=)[^>]*>(.*?)</script\s*>", re.DOTALL | re.IGNORECASE)


def docs_policy(html: bytes) -> str:
    """DOCS_CSP allowing exactly the inline scripts of `html` (by their SHA-256, as browsers hash them)."""
    hashes = [base64.b64encode(hashlib.sha256(body).digest()).decode() for body in _INLINE_SCRIPT.findall(html)]
    return DOCS_CSP.format(scripts="".join(f" 'sha256-{h}'" for h in hashes))


class SecurityHeaders:
    """ASGI middleware adding COMMON_HEADERS and a Content-Security-Policy to every HTTP response: DOCS_CSP (with the
    page's script hashes) on `docs_paths`, STRICT_CSP elsewhere. Headers a route set itself are kept."""

    def __init__(self, app: ASGIApp, docs_paths: Iterable[str | None] = ()) -> None:
        self.app = app
        self.docs_paths = frozenset(p for p in docs_paths if p)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["path"] in self.docs_paths:
            await self._docs(scope, receive, send)
            return

        async def add_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                _set_default(message, STRICT_CSP)
            await send(message)

        await self.app(scope, receive, add_headers)

    async def _docs(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Buffer the (small) documentation page to hash its inline scripts, then send it with its policy."""
        start: Message | None = None
        body: list[bytes] = []

        async def hold(message: Message) -> None:
            nonlocal start
            if message["type"] == "http.response.start":
                start = message
            elif message["type"] == "http.response.body":
                body.append(message.get("body", b""))
                if not message.get("more_body", False):
                    assert start is not None
                    content = b"".join(body)
                    _set_default(start, docs_policy(content))
                    await send(start)
                    await send({"type": "http.response.body", "body": content, "more_body": False})
            else:
                await send(message)

        await self.app(scope, receive, hold)


def _set_default(start: Message, csp: str) -> None:
    start.setdefault("headers", [])
    headers = MutableHeaders(scope=start)
    for name, value in {"Content-Security-Policy": csp, **COMMON_HEADERS}.items():
        headers.setdefault(name, value)
