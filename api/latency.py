"""The request-latency histogram's HTTP side: a pure ASGI middleware that times each request until its response
starts and records it by method, route and status (`Metrics.requests`).

Pure ASGI rather than Starlette's `BaseHTTPMiddleware` (`@app.middleware("http")`): that one relays a streamed body
through a stream of its own and, when the route fails midway (a draw file that cannot be read), ended the relayed
body as if complete, so a client saw a draws stream cut short as a clean end. Here the failure propagates, the server
drops the connection, and clients see a broken stream (the SDK resumes at its offset)."""

from __future__ import annotations

import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send


class RequestLatency:
    """Observes `services.metrics.requests` (method, route path or "unmatched", status) for every HTTP request."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t0 = time.perf_counter()
        seen: dict[str, float | int] = {}

        async def observe(message: Message) -> None:
            if message["type"] == "http.response.start":
                seen["status"], seen["latency"] = message["status"], time.perf_counter() - t0
            await send(message)

        try:
            await self.app(scope, receive, observe)
        except Exception:
            seen.setdefault("status", 500)
            raise
        finally:
            svc = getattr(scope["app"].state, "services", None) if "app" in scope else None
            if svc is not None:
                route = scope.get("route")
                svc.metrics.requests.labels(
                    scope["method"], getattr(route, "path", "unmatched"), str(seen.get("status", 500))
                ).observe(seen.get("latency", time.perf_counter() - t0))
