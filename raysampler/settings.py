"""Engine settings from the environment (RAYSAMPLER_*): read once by the driver when a run starts and handed to the
coordinator and workers inside `RunConfig`, so no actor reads the environment itself."""

from __future__ import annotations

from pydantic import Field, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

ENV_PREFIX = "RAYSAMPLER_"


class EngineSettings(BaseSettings):
    """How the engine runs, whatever the caller (Python API or service). Environment: RAYSAMPLER_<FIELD>."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore", frozen=True)

    max_restarts: int = Field(default=10, ge=0, description="recoveries from lost processes allowed per run")
    object_store_bytes: int = Field(
        default=1 << 30, ge=75 * 2**20, description="object store of the private local Ray a driver starts"
    )
    site_wait_s: float = Field(
        default=60.0, ge=0, allow_inf_nan=False, description="seconds workers wait for a live node of their site"
    )
    coordinator_shards: bool = Field(
        default=True, description="the coordinator's process hosts a group of site-less shards (0: all on actors)"
    )
    worker_processes: int = Field(
        default=0,
        ge=0,
        description="worker processes per node (at most its CPUs and shards); 0: as many as the shards' size pays for",
    )
    warm_hosts: int = Field(
        default=1,
        ge=0,
        description="coordinator actors a driver keeps idle between runs on Ray, so a run starts no process (0: none)",
    )
    shm_spin_us: float = Field(
        default=1000.0,
        ge=0,
        allow_inf_nan=False,
        description="µs a shared-memory channel reader watches for the next message before it sleeps (0: sleep)",
    )
    startup_timeout_s: float = Field(
        default=300.0, gt=0, allow_inf_nan=False, description="seconds worker actors may take to start and load"
    )
    link_deadline_s: float = Field(
        default=45.0,
        gt=0,
        allow_inf_nan=False,
        description="seconds a worker process on another node may take to answer a call before its site is "
        "unavailable (a stalled link is waited for this long; past it the run fails with site_unavailable, its "
        "draws kept, and resume continues it)",
    )

    @property
    def shm_spin_s(self) -> float:
        return self.shm_spin_us * 1e-6

    @classmethod
    def from_env(cls) -> EngineSettings:
        """The settings from the environment now; a bad value raises ValueError naming its variable."""
        try:
            return cls()
        except ValidationError as exc:
            raise ValueError(describe(exc)) from None

    def engine(self) -> EngineSettings:
        """Just the engine's fields, as an `EngineSettings` (from a subclass such as the service's `Settings`)."""
        return EngineSettings.model_construct(**{f: getattr(self, f) for f in EngineSettings.model_fields})


#: Settings whose values may hold a secret (a password in a URL, API keys): errors never repeat them.
SECRET_FIELDS = frozenset({"database_url", "storage_url", "api_keys"})


def describe(exc: ValidationError) -> str:
    """A settings ValidationError as one line per bad value, each naming its environment variable (and the value
    given, unless the setting may hold a secret)."""
    parts = []
    for err in exc.errors():
        field = ".".join(str(p) for p in err["loc"])
        msg = str(err["msg"]).removeprefix("Value error, ")
        given = "" if field in SECRET_FIELDS else f", got {err.get('input')!r}"
        parts.append(f"{ENV_PREFIX}{field.upper()}: {msg}{given}")
    return "; ".join(parts)
