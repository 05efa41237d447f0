"""Database URLs (RAYSAMPLER_DATABASE_URL): checked, and described without the password (the store they open:
`sql.open_store`)."""

from __future__ import annotations

from urllib.parse import urlsplit

#: The URL schemes RAYSAMPLER_DATABASE_URL may have.
DATABASE_SCHEMES = ("sqlite", "postgresql", "postgres")


#: libpq's sslmode values (https://www.postgresql.org/docs/current/libpq-ssl.html).
SSL_MODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")


def postgres_params(url: str) -> dict[str, str]:
    """The connection parameters libpq reads from a postgresql:// URL: host and port in the authority (several,
    comma-separated, for failover), or `host=` in the query (a hostname or a Unix-socket directory, as
    `postgresql://user@/db?host=/cloudsql/project:region:instance`), and any other libpq parameter (`sslmode`,
    `connect_timeout`, `options`, ...). ValueError saying what is wrong, never echoing a password."""
    try:
        from psycopg import ProgrammingError
        from psycopg.conninfo import conninfo_to_dict
    except ImportError:  # the light install
        raise ValueError("a PostgreSQL URL needs the postgres extra: pip install 'raysampler[postgres]'") from None
    try:
        params = {k: str(v) for k, v in conninfo_to_dict(url).items()}
    except ProgrammingError as exc:
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        password = urlsplit(url).password
        if password:
            reason = reason.replace(password, "***")
        raise ValueError(f"libpq cannot read it: {reason}") from None
    for port in filter(None, params.get("port", "").split(",")):
        if not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"the port must be a number from 1 to 65535, not {port!r}")
    mode = params.get("sslmode")
    if mode is not None and mode not in SSL_MODES:
        raise ValueError(f"sslmode is {mode!r}; libpq takes one of {', '.join(SSL_MODES)}")
    return params


def check_database_url(url: str) -> str:
    """`url` if it is a database URL the service can use: sqlite:///path, or a postgresql:// (postgres://) URL
    as libpq takes it (`postgres_params`; parts it leaves out take libpq's defaults: the local socket, port 5432,
    the user's name as the database). ValueError saying what is wrong, never echoing a password."""
    parts = urlsplit(url)
    if parts.scheme not in DATABASE_SCHEMES:
        raise ValueError(
            f"the scheme is {parts.scheme or 'missing'!r}; give sqlite:///path/to/file.sqlite3 or "
            "postgresql://user:password@host:5432/database"
        )
    if parts.scheme == "sqlite":
        if parts.netloc or not parts.path.strip("/"):
            raise ValueError("a SQLite URL is sqlite:///absolute/path/to/file.sqlite3 (three slashes, then the path)")
        return url
    postgres_params(url)
    return url


def describe_database_url(url: str) -> str:
    """A checked database URL as messages may show it: scheme, user, host(s) or socket directory, port(s),
    database and sslmode, never the password."""
    parts = urlsplit(url)
    if parts.scheme == "sqlite":
        return url
    params = postgres_params(url)
    user = f"{params['user']}@" if params.get("user") else ""
    hosts = params.get("host", "")
    ports = params.get("port", "")
    query = [f"{k}={params[k]}" for k in ("sslmode",) if k in params]
    if hosts.startswith("/") or (hosts == "" and "hostaddr" not in params):  # a socket directory (or libpq's own)
        authority = ""
        if hosts:
            query.insert(0, f"host={hosts}")
    else:
        names = hosts.split(",") if hosts else [params.get("hostaddr", "")]
        numbers = ports.split(",") if ports else []
        authority = ",".join(
            (f"[{h}]" if ":" in h else h) + (f":{numbers[min(i, len(numbers) - 1)]}" if numbers else "")
            for i, h in enumerate(names)
        )
    tail = f"?{'&'.join(query)}" if query else ""
    return f"{parts.scheme}://{user}{authority}/{params.get('dbname', '')}{tail}"
