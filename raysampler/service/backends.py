"""The service's database and file storage, opened from its settings: the record store of RAYSAMPLER_DATABASE_URL
(default SQLite in the data dir) and the storage of RAYSAMPLER_STORAGE_URL (default the data dir) under which run
directories (`runs/`) and uploaded data sets (`datasets/`) live. A setting that cannot be used is a `BackendError`
naming it, so that `raysampler serve` refuses to start with the reason rather than failing on a first request."""

from __future__ import annotations

from ..storage import Storage, storage_at
from .migrations import SchemaTooNew
from .settings import Settings
from .store import RecordStore, describe_database_url, open_store


class BackendError(RuntimeError):
    """A database or storage setting the service cannot use; the message names the setting."""


def describe_database(url: str | None) -> str:
    """The database URL without its password (what messages may show)."""
    if url is None:
        return "SQLite in the data dir"
    return describe_database_url(url)


def open_records(settings: Settings) -> RecordStore:
    """The record store, migrated to the newest schema; BackendError naming RAYSAMPLER_DATABASE_URL if it cannot be
    reached or is of a newer schema."""
    name = "RAYSAMPLER_DATABASE_URL" if settings.database_url else "RAYSAMPLER_DATA_DIR"
    try:
        if settings.database_url is None:
            settings.data_dir.mkdir(parents=True, exist_ok=True)
        return open_store(settings.database_url, settings.db_path)
    except SchemaTooNew as exc:
        raise BackendError(f"{name} ({describe_database(settings.database_url)}): {exc}") from None
    except Exception as exc:  # the drivers' own errors: refused connection, bad password, unknown database
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise BackendError(
            f"{name}: cannot open {describe_database(settings.database_url)}: {type(exc).__name__}: {reason}"
        ) from None


def file_storage(settings: Settings) -> Storage:
    """The root under which runs/ and datasets/ live (not touched yet)."""
    return storage_at(settings.storage_url or settings.data_dir)


def check_storage(settings: Settings) -> Storage:
    """`file_storage`, after making sure it can be listed (and, local, written); BackendError naming
    RAYSAMPLER_STORAGE_URL otherwise."""
    root = file_storage(settings)
    try:
        root.check()
    except Exception as exc:
        name = "RAYSAMPLER_STORAGE_URL" if settings.storage_url else "RAYSAMPLER_DATA_DIR"
        raise BackendError(f"{name}: cannot use {root.location}: {type(exc).__name__}: {exc}") from None
    return root
