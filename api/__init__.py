"""raysampler's REST service (FastAPI): `create_app(settings)`; run it with `raysampler serve`."""

from .app import create_app

__all__ = ["create_app"]
