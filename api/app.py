"""The FastAPI application: lifespan (store, draw files, run manager), routers, metrics middleware, error shapes."""
from __future__ import annotations

import time
from contextlib import asynccontextmanager

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse

from raysampler import __version__
from raysampler.service.drawfiles import DrawFiles
from raysampler.service.metrics import Metrics
from raysampler.service.runs import RunManager
from raysampler.service.settings import Settings
from raysampler.service.store import SQLiteStore

from .deps import Services
from .routers import datasets, runs, system


class UploadLimit:
    """ASGI middleware: a POST to `path` whose body passes `limit` bytes gets 413 while it arrives (also when it is
    sent chunked, without a Content-Length), before it is parsed or spooled to disk."""

    def __init__(self, app, path: str, limit: int) -> None:
        self.app, self.path, self.limit = app, path, limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != self.path:
            return await self.app(scope, receive, send)
        seen = 0
        slack = 65536  # multipart framing around the file

        async def counted():
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.limit + slack:
                raise HTTPException(413, f"upload is over the limit of {self.limit} bytes "
                                         "(RAYSAMPLER_MAX_UPLOAD_BYTES)")
            return message

        return await self.app(scope, counted, send)


def create_app(settings: Settings | None = None) -> FastAPI:
    """An app over `settings` (default: from the environment). No keys configured → every /v1 call gets 401."""
    settings = settings or Settings()
    keys = settings.keys()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        for d in (settings.data_dir, settings.runs_dir, settings.datasets_dir):
            d.mkdir(parents=True, exist_ok=True)
        store = SQLiteStore(str(settings.db_path))
        files = DrawFiles(settings.runs_dir)
        metrics = Metrics(store)
        manager = RunManager(store, files, settings, metrics)
        manager.start()
        app.state.services = Services(settings, store, files, manager, metrics, keys)
        try:
            yield
        finally:
            manager.stop()
            store.close()

    app = FastAPI(title="raysampler", version=__version__, lifespan=lifespan,
                  description="Distributed Bayesian posterior sampling on Ray: submit runs, stream draws and "
                              "events, read summaries. Authenticate with `Authorization: Bearer <key>`.")

    @app.middleware("http")
    async def limits_and_metrics(request: Request, call_next):
        t0 = time.perf_counter()
        if request.method == "POST" and request.url.path == "/v1/datasets":
            length = request.headers.get("content-length")
            if length is not None and length.isdigit() and int(length) > settings.max_upload_bytes + 65536:
                return JSONResponse({"detail": f"upload of {int(length)} bytes is over the limit of "
                                               f"{settings.max_upload_bytes} bytes (RAYSAMPLER_MAX_UPLOAD_BYTES)"},
                                    status_code=413)
        response = await call_next(request)
        route = request.scope.get("route")
        svc = getattr(request.app.state, "services", None)
        if svc is not None:
            svc.metrics.requests.labels(request.method, getattr(route, "path", "unmatched"),
                                        str(response.status_code)).observe(time.perf_counter() - t0)
        return response

    app.add_middleware(UploadLimit, path="/v1/datasets", limit=settings.max_upload_bytes)
    app.include_router(system.router)
    app.include_router(runs.router)
    app.include_router(datasets.router)
    return app
