"""Service settings from the environment (RAYSAMPLER_*), command-line flags override them; API keys per tenant.
They extend the engine's own (`EngineSettings`), which the service hands to every run it starts."""

from __future__ import annotations

import hashlib
import os
import re
import socket
import stat
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import SettingsConfigDict

from ..enums import Executor
from ..grants import DataGrants, parse_grants
from ..names import ID_RE
from ..objectstore import is_uri, parse_uri
from ..settings import EngineSettings

TENANT_PATTERN = ID_RE
REPLICA_PATTERN = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")


class Settings(EngineSettings):
    """Where the service keeps its state and how it runs samplers, plus the engine's settings (`EngineSettings`).
    Environment: RAYSAMPLER_<FIELD>."""

    model_config = SettingsConfigDict(env_prefix="RAYSAMPLER_", extra="ignore", frozen=False)

    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    data_dir: Path = Field(
        default_factory=lambda: Path.home() / ".raysampler",
        description="SQLite database, uploaded data sets and draw files",
    )
    ray_address: str | None = Field(
        default=None, description="Ray cluster to run on (else $RAY_ADDRESS, else a local Ray)"
    )
    ray_dashboard_url: str | None = Field(
        default=None, description="where browsers reach Ray's own dashboard (the dashboard's operator view links it)"
    )
    ray_num_cpus: int | None = Field(default=None, ge=1, description="CPUs of the local Ray the service starts")
    # The values of `Executor`, spelt out: the REST `Health.executor` is this Literal.
    executor: Literal["ray", "local"] = Executor.RAY.value
    api_keys: str | None = Field(default=None, description="comma-separated tenant:key pairs")
    api_keys_file: Path | None = Field(default=None, description="file of tenant:key lines ('#' starts a comment)")
    data_grants: str | None = Field(
        default=None, description="comma-separated tenant@site:/path/prefix grants of site files (none: no site shard)"
    )
    data_grants_file: Path | None = Field(
        default=None, description="file of tenant@site:/path/prefix lines ('#' starts a comment)"
    )
    max_upload_bytes: int = Field(default=256 * 2**20, ge=1, description="largest accepted data set upload (else 413)")
    max_concurrent_runs: int = Field(default=1, ge=1, description="runs sampled at once; the rest wait as PENDING")
    quota_max_active_runs: int | None = Field(default=None, ge=1, description="per tenant: PENDING + RUNNING runs")
    quota_max_stored_bytes: int | None = Field(
        default=None, ge=1, description="per tenant: bytes of draws, checkpoints and uploaded data sets"
    )
    quota_max_chains_x_dim: int | None = Field(default=None, ge=1, description="per run: chains × parameter dimension")
    quota_max_draw_bytes: int | None = Field(
        default=None, ge=1, description="per run: planned draw bytes (chains × draws × dimension × 8); more is a 429"
    )
    warn_draw_bytes: int = Field(
        default=10**9, ge=1, description="planned draw bytes of a run over which its submit answers with a warning"
    )
    keepalive_s: float = Field(default=15.0, gt=0, description="SSE keep-alive comment interval")
    poll_s: float = Field(default=0.1, gt=0, description="how often follow-streams look for new draws and events")
    chunk_s: float = Field(default=0.5, gt=0, description="target seconds of sampling between durable writes")
    ssl_certfile: Path | None = Field(default=None, description="serve HTTPS with this PEM certificate (chain)")
    ssl_keyfile: Path | None = Field(default=None, description="the certificate's PEM private key")
    forwarded_allow_ips: str | None = Field(
        default=None,
        description="comma-separated proxy addresses whose X-Forwarded-For/-Proto are trusted (uvicorn's; default "
        "$FORWARDED_ALLOW_IPS, else 127.0.0.1 and ::1)",
    )
    audit_max_bytes: int = Field(default=10 * 2**20, ge=1024, description="audit.log size at which it rotates")
    audit_backups: int = Field(default=10, ge=1, description="rotated audit logs kept (audit.log.1 … .N)")
    database_url: str | None = Field(
        default=None,
        description="the run records' database: postgresql://user:password@host:5432/database (shared by replicas) "
        "or sqlite:///path; default SQLite in the data dir",
    )
    storage_url: str | None = Field(
        default=None,
        description="where draw files, checkpoints and uploads live: an s3://, gs:// or abfs:// prefix (shared by "
        "replicas; credentials from the cloud SDK's standard variables) or an absolute path; default the data dir",
    )
    replica_id: str | None = Field(
        default=None,
        description="this replica's name in run leases (default: host name and a digest of the data dir, so a "
        "restarted replica takes its own runs back at once)",
    )
    lease_s: float = Field(
        default=15.0,
        ge=1.0,
        le=3600.0,
        allow_inf_nan=False,
        description="seconds a run's lease lasts unless its replica renews it (every third of it); another replica "
        "takes over a run whose lease expired",
    )

    @field_validator("database_url")
    @classmethod
    def _database_url(cls, value: str | None) -> str | None:
        from .store import check_database_url

        return None if value is None or not value.strip() else check_database_url(value.strip())

    @field_validator("storage_url")
    @classmethod
    def _storage_url(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        value = value.strip()
        if is_uri(value):
            try:
                parse_uri(value)
            except ValueError as exc:
                raise ValueError(f"the URI {exc}") from None
        elif not value.startswith("/"):
            raise ValueError("must be an s3://, gs:// or abfs:// URI or an absolute path")
        return value

    @field_validator("replica_id")
    @classmethod
    def _replica_id(cls, value: str | None) -> str | None:
        if value is not None and not REPLICA_PATTERN.match(value):
            raise ValueError("must be 1-128 letters, digits, '_', '.', ':', '-'")
        return value

    def chains_cap(self, dim: int, max_draws: int) -> int | None:
        """The most chains the per-run quotas allow a run of `dim` parameters and `max_draws` draws a chain (chains
        × dimension, planned draw bytes), so that a chains="auto" run never chooses more than was admitted; None
        without such quotas."""
        caps = []
        if self.quota_max_chains_x_dim is not None:
            caps.append(self.quota_max_chains_x_dim // max(1, dim))
        if self.quota_max_draw_bytes is not None:
            caps.append(self.quota_max_draw_bytes // max(1, max_draws * dim * 8))
        return max(1, min(caps)) if caps else None

    @property
    def replica(self) -> str:
        """This replica's name in run leases (`replica_id`, else host name + a digest of the data dir)."""
        if self.replica_id:
            return self.replica_id
        digest = hashlib.sha256(str(Path(self.data_dir).resolve()).encode()).hexdigest()[:8]
        return f"{socket.gethostname()}-{digest}"

    @property
    def db_path(self) -> Path:
        return self.data_dir / "raysampler.sqlite3"

    @property
    def runs_dir(self) -> Path:
        return self.data_dir / "runs"

    @property
    def datasets_dir(self) -> Path:
        return self.data_dir / "datasets"

    @property
    def audit_log_path(self) -> Path:
        return self.data_dir / "audit.log"

    def keys(self) -> dict[str, str]:
        """key → tenant, from api_keys and api_keys_file (both may be given). Malformed entries, and a keys file
        others may read or write (check_private), raise ValueError."""
        entries: list[tuple[str, str]] = []
        if self.api_keys:
            entries += [(e.strip(), "RAYSAMPLER_API_KEYS") for e in self.api_keys.split(",") if e.strip()]
        if self.api_keys_file is not None:
            check_private(Path(self.api_keys_file))
            text = Path(self.api_keys_file).read_text()
            entries += [(line.split("#", 1)[0].strip(), str(self.api_keys_file)) for line in text.splitlines()]
        out: dict[str, str] = {}
        for entry, where in entries:
            if not entry:
                continue
            tenant, sep, key = entry.partition(":")
            tenant, key = tenant.strip(), key.strip()
            if not sep or not TENANT_PATTERN.match(tenant) or len(key) < 8:
                raise ValueError(
                    f"{where}: entries must be tenant:key (tenant of letters, digits, _.-; key of at "
                    f"least 8 characters), got {entry.split(':', 1)[0]!r}:…"
                )
            if key in out and out[key] != tenant:
                raise ValueError(f"{where}: the same key is given to tenants {out[key]!r} and {tenant!r}")
            out[key] = tenant
        return out

    def grants(self) -> DataGrants:
        """The data grants from data_grants and data_grants_file (both may be given); a malformed entry raises
        ValueError naming it and where it came from."""
        entries: list[tuple[str, str]] = []
        if self.data_grants:
            entries += [(e, "RAYSAMPLER_DATA_GRANTS") for e in self.data_grants.split(",")]
        if self.data_grants_file is not None:
            lines = Path(self.data_grants_file).read_text().splitlines()
            entries += [(line.split("#", 1)[0], f"{self.data_grants_file}:{n}") for n, line in enumerate(lines, 1)]
        return parse_grants(entries)


def check_private(path: Path) -> None:
    """Raise ValueError (naming the file, its mode and the fix) if group or others may read or write `path`.

    One exception, as PostgreSQL makes for its key file: a root-owned file read by a non-root server may be readable
    by its group (never writable), which is how a Kubernetes Secret mounted with an fsGroup arrives (0440)."""
    if os.name != "posix":
        return
    st = path.stat()
    allowed = stat.S_IRGRP if st.st_uid == 0 and os.geteuid() != 0 else 0
    loose = st.st_mode & (stat.S_IRGRP | stat.S_IWGRP | stat.S_IROTH | stat.S_IWOTH) & ~allowed
    if loose:
        mode = stat.S_IMODE(st.st_mode)
        raise ValueError(
            f"API keys file {path} has mode {mode:04o}: group or others may read or write it, so it is refused. "
            f"Make it private to the user that runs the service: chmod 600 {path}"
        )
