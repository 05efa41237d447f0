"""Service layer: run specs → engine runs, durable records and draw files, streams, settings, metrics."""

from ..extras import service as _requires_service  # noqa: F401 (the import checks that the service extra is installed)
