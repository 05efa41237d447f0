"""`raysampler serve` (the REST service, its API keys), `raysampler audit`, `raysampler demo` and
`raysampler site-identity` (a site's key for the other sites to pin)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import secrets
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..service.settings import Settings
from .output import version_string

KEYS_FILE = "api_keys"  # = client.KEYS_FILE, not imported from there so that the CLI starts fast


def _settings(**overrides: Any) -> Settings:
    from ..service.settings import Settings

    return Settings(**{k: v for k, v in overrides.items() if v is not None})


def ensure_keys(settings: Settings) -> tuple[Settings, str | None]:
    """Settings with API keys: the configured ones, else a key generated for tenant 'default' and saved in
    <data dir>/api_keys, a file created private (0600, O_EXCL: never through a planted link, never readable for a
    moment). Returns (settings, the generated key or None); a keys file others may read raises ValueError."""
    if settings.keys():
        return settings, None
    path = settings.data_dir / KEYS_FILE
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    generated = None
    if not path.exists() or not path.read_text().strip():
        generated = secrets.token_urlsafe(24)
        path.unlink(missing_ok=True)  # an empty file left by an interrupted first start
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(f"default:{generated}\n")
    out = settings.model_copy(update={"api_keys_file": path})
    out.keys()  # a key file kept from an earlier start must parse and be private too
    return out, generated


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn
    from pydantic import ValidationError
    from uvicorn.config import STARTUP_FAILURE  # 3: what uvicorn exits with when it cannot start

    from ..api import create_app
    from ..service.backends import BackendError, check_storage, describe_database, open_records
    from ..settings import describe

    try:
        settings = _settings(
            host=args.host,
            port=args.port,
            data_dir=args.data_dir,
            ray_address=args.ray_address,
            executor=args.executor,
            max_concurrent_runs=args.max_concurrent_runs,
            ssl_certfile=args.ssl_certfile,
            ssl_keyfile=args.ssl_keyfile,
            forwarded_allow_ips=args.forwarded_allow_ips,
            database_url=args.database_url,
            storage_url=args.storage_url,
        )
    except ValidationError as exc:  # a malformed setting: refuse to start, naming its variable
        print(f"raysampler serve: {describe(exc)}", file=sys.stderr)
        return 2
    if (settings.ssl_certfile is None) != (settings.ssl_keyfile is None):
        print("raysampler serve: HTTPS needs both --ssl-certfile and --ssl-keyfile", file=sys.stderr)
        return 2
    try:
        settings, generated = ensure_keys(settings)
        grants = settings.grants()
        open_records(settings).close()  # reachable and migrated before the first request
        storage = check_storage(settings)
    except (ValueError, OSError, BackendError) as exc:  # malformed keys or grants, unusable database or storage
        print(f"raysampler serve: {exc}", file=sys.stderr)
        return 2
    url = f"{'https' if settings.ssl_certfile else 'http'}://{settings.host}:{settings.port}"
    if args.format == "json":
        print(
            json.dumps(
                {
                    "url": url,
                    "data_dir": str(settings.data_dir),
                    "database": describe_database(settings.database_url),
                    "storage": storage.location,
                    "replica": settings.replica,
                    "executor": settings.executor,
                    "generated_api_key": generated,
                    "data_grants": [dataclasses.asdict(g) for g in grants.grants],
                }
            ),
            flush=True,
        )
    else:
        if generated:
            print(f"API key for tenant 'default': {generated}  (saved in {settings.data_dir / KEYS_FILE})")
        print(
            f"raysampler {version_string()} serving on {url} (docs at /docs; data in {settings.data_dir}; executor "
            f"{settings.executor})",
            flush=True,
        )
        print(
            f"records: {describe_database(settings.database_url)}; draws and uploads: {storage.location}; "
            f"replica {settings.replica!r} (lease {settings.lease_s:g} s)"
        )
        print(
            f"data grants: {len(grants)}"
            + ("" if len(grants) else " (no tenant may use site shards; set RAYSAMPLER_DATA_GRANTS)")
        )
        for g in grants.grants:
            print(f"  tenant {g.tenant!r} on site {g.site!r}: {g.prefix}")
        sys.stdout.flush()
    config = uvicorn.Config(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_level=args.log_level,
        timeout_graceful_shutdown=3,  # open follow-streams would otherwise hold a graceful stop until their runs end
        ssl_certfile=settings.ssl_certfile,
        ssl_keyfile=settings.ssl_keyfile,
        forwarded_allow_ips=settings.forwarded_allow_ips,  # whose X-Forwarded-For/-Proto uvicorn believes
    )
    server = uvicorn.Server(config)
    # The port is bound now, before the app's start-up starts Ray: uvicorn itself binds after it, and meanwhile one
    # of Ray's own processes could take a port its caller had found free (seen: the demo's service failing with
    # "address already in use"). A port already taken exits here, with uvicorn's message, before Ray starts.
    try:
        sock = config.bind_socket()  # on failure uvicorn logs the OS's reason and exits
    except SystemExit:
        print(
            f"raysampler serve: cannot listen on {settings.host}:{settings.port} (--host/--port, RAYSAMPLER_HOST/"
            "RAYSAMPLER_PORT): the port is taken or the address is not this machine's",
            file=sys.stderr,
        )
        return STARTUP_FAILURE
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:  # the SIGINT of a graceful stop, raised again once the server has stopped
        pass
    finally:
        sock.close()
    return 0 if server.started else STARTUP_FAILURE


def cmd_demo(args: argparse.Namespace) -> int:
    from .. import demo

    demo.main(["--format", args.format])
    return 0


def cmd_site_identity(args: argparse.Namespace) -> int:
    """Print this site's identity public key (derived from its secret on this node: RAYSAMPLER_SITE_SECRET or its key
    file), as the other sites pin it in RAYSAMPLER_SITE_PEERS (`privacy.identity`)."""
    from ..privacy.identity import PEERS_ENV, identity_public

    key = identity_public(args.site)
    if args.format == "json":
        print(json.dumps({"site": args.site, "identity": key}))
    else:
        print(f"{args.site}={key}")
        print(f"# the other sites add this entry to {PEERS_ENV} (comma-separated) on their nodes", file=sys.stderr)
    return 0


def cmd_audit(args: argparse.Namespace) -> int:
    """Print the audit log's records (rotated files included, oldest first) that match the filters."""
    from ..service.audit import AuditQuery, log_files, parse_since, read_records

    path = _settings(data_dir=args.data_dir).audit_log_path
    if not log_files(path):
        raise SystemExit(f"error: no audit log at {path} (give the service's --data-dir)")
    try:
        since = parse_since(args.since) if args.since else None
    except ValueError as exc:
        raise SystemExit(f"error: {exc}") from None
    records = read_records(path, AuditQuery(tenant=args.tenant, since=since, action=args.action))
    if args.format == "table":
        print(
            f"{'time':<29} {'tenant':<12} {'key id':<12} {'action':<14} {'run/data set':<22} {'status':<12} "
            f"{'client':<15} path"
        )
    for r in records:
        if args.format == "json":
            print(r.to_json())
        else:
            status = f"{r.status} {r.outcome}"
            print(
                f"{r.time:<29} {r.tenant or '-':<12} {r.key_id or '-':<12} {r.action:<14} "
                f"{r.run_id or r.dataset_id or '-':<22} {status:<12} {r.client or '-':<15} {r.method} {r.path}"
            )
    return 0
