"""raysampler's REST service (FastAPI): `create_app(settings)`; run it with `raysampler serve`."""

from ..extras import service as _requires_service  # noqa: F401 (the import checks that the service extra is installed)
from .app import create_app

__all__ = ["create_app"]
