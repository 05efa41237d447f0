"""Durable run records, events and data-set records behind one interface (`RecordStore`), with two implementations
sharing their SQL (`SQLStore`): SQLite, the embedded default (`SQLiteStore`), and PostgreSQL for a service whose
replicas share one database (`PostgresStore`). `open_store` picks one from RAYSAMPLER_DATABASE_URL. The schema is
versioned (`migrations`), migrated when a store opens.

Records are typed values (`RunRecord`, `EventRecord`, `DatasetRecord`). Runs are keyed by (tenant, id): tenants never
share ids, and every lookup takes the tenant, so isolation is structural.

Leases. A replica drives a run only while it holds the run's lease (`acquire_lease`): an owner, an expiry on the
database's clock, and an epoch that every acquisition raises. The driver renews it; a lease not renewed expires and
another replica may take the run over. The driver's writes pass its `Lease` and carry its owner and epoch as a
condition, so once another replica holds the run, they change nothing and raise `LeaseLost` (fencing).
"""

from .base import ActiveLimit, Conflict, LeaseLost, RecordStore
from .sql import RUN_FIELDS, PostgresStore, SQLiteStore, SQLStore, open_store
from .urls import DATABASE_SCHEMES, SSL_MODES, check_database_url, describe_database_url, postgres_params

__all__ = [
    "DATABASE_SCHEMES",
    "RUN_FIELDS",
    "SSL_MODES",
    "ActiveLimit",
    "Conflict",
    "LeaseLost",
    "PostgresStore",
    "RecordStore",
    "SQLStore",
    "SQLiteStore",
    "check_database_url",
    "describe_database_url",
    "open_store",
    "postgres_params",
]
