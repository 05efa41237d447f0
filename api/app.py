"""The FastAPI application: lifespan (record store, draw files, run manager), routers, metrics, audit and
security-header middleware, error shapes."""

from __future__ import annotations

import mimetypes
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import RedirectResponse
from fastapi.staticfiles import StaticFiles
from starlette.middleware.body_limit import RequestBodyLimitMiddleware

from raysampler import __version__
from raysampler.service.audit import AuditLog
from raysampler.service.backends import check_storage, open_records
from raysampler.service.drawfiles import DrawFiles
from raysampler.service.manager import RunManager
from raysampler.service.metrics import Metrics
from raysampler.service.settings import Settings

from . import errors, openapi_doc
from .audit import AuditMiddleware
from .deps import Services
from .latency import RequestLatency
from .routers import cluster, compare, datasets, models, runs, system
from .security import SecurityHeaders

#: The dashboard's static files (HTML, JS, CSS and the vendored chart library), shipped inside the package.
UI_DIR = Path(__file__).resolve().parent / "ui"
# The dashboard's scripts are ES modules, which a browser runs only when served with a JavaScript MIME type (and the
# responses say nosniff); StaticFiles takes the type from `mimetypes`, whose table the platform may change (an
# /etc/mime.types or a Windows registry entry mapping .js to text/plain), so .js is set here.
mimetypes.add_type("text/javascript", ".js")


def create_app(settings: Settings | None = None) -> FastAPI:
    """An app over `settings` (default: from the environment). No keys configured → every /v1 call gets 401."""
    settings = settings or Settings()
    keys = settings.keys()
    audit = AuditLog(settings.audit_log_path, settings.audit_max_bytes, settings.audit_backups)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        for d in (settings.data_dir, settings.datasets_dir):  # local state: audit log, keys, uploads in progress
            d.mkdir(parents=True, exist_ok=True)
        store = open_records(settings)  # RAYSAMPLER_DATABASE_URL (default SQLite in the data dir), migrated
        files = DrawFiles(check_storage(settings).child("runs"))  # RAYSAMPLER_STORAGE_URL (default the data dir)
        metrics = Metrics(store)
        manager = RunManager(store, files, settings, metrics)
        manager.start()
        app.state.services = Services(settings, store, files, manager, metrics, keys)
        try:
            yield
        finally:
            manager.stop()
            store.close()
            audit.close()

    app = FastAPI(
        title="raysampler",
        version=__version__,
        lifespan=lifespan,
        description="Distributed Bayesian posterior sampling on Ray: submit runs, stream draws and "
        "events, read summaries. Authenticate with `Authorization: Bearer <key>`.",
    )

    # the latency histogram (innermost: it sees the matched route); pure ASGI, so a failed stream stays visibly broken
    app.add_middleware(RequestLatency)
    # request bodies over the upload limit (plus multipart framing) get 413 as they arrive, chunked or not
    app.add_middleware(RequestBodyLimitMiddleware, max_body_size=settings.max_upload_bytes + 65536)
    # one line in <data dir>/audit.log per state-changing request and per refused one (any 401/403)
    app.add_middleware(AuditMiddleware, log=audit)
    # CSP and friends on every response; the API docs pages get their own, narrower policy (api/security.py)
    app.add_middleware(SecurityHeaders, docs_paths=(app.docs_url, app.redoc_url, app.swagger_ui_oauth2_redirect_url))
    errors.install(app)
    openapi_doc.install(app)  # integer bounds exact in /openapi.json (seed ≤ 2**63 - 1)
    app.include_router(system.router)
    app.include_router(runs.router)
    app.include_router(datasets.router)
    app.include_router(models.router)
    app.include_router(cluster.router)
    app.include_router(compare.router)
    # The dashboard: static files that call the API above from the browser (no key needed to load them).
    app.mount("/ui", StaticFiles(directory=UI_DIR, html=True), name="ui")

    @app.get("/", include_in_schema=False)
    def home() -> RedirectResponse:
        return RedirectResponse("/ui/")

    return app
