"""Where the SDK finds the service and how it connects: the URL and API key rule the SDK and the CLI share
(`service_address`), certificate checks (`Verify`) and the options both httpx clients are built with."""

from __future__ import annotations

import os
import ssl
from typing import Any, TypeAlias

import httpx

#: Where a client finds the service when neither `url` nor $RAYSAMPLER_URL says.
DEFAULT_URL = "http://127.0.0.1:8000"
#: The run id that names the tenant's newest run, wherever a run id is taken (SDK and CLI).
LATEST = "latest"
#: The file in the service's data dir where `raysampler serve` saves the key it generated.
KEYS_FILE = "api_keys"

#: `verify=` of the clients: True (certifi's CAs, or $SSL_CERT_FILE / $SSL_CERT_DIR), False (no check: tests only),
#: a CA bundle file or directory (e.g. the self-signed certificate of a private service), or an ssl.SSLContext.
Verify: TypeAlias = bool | str | os.PathLike[str] | ssl.SSLContext


def service_address(
    url: str | None = None, api_key: str | None = None, *, key_file: bool = False
) -> tuple[str, str | None]:
    """(URL, API key) of the service, the one rule of the SDK and the CLI: the arguments, else $RAYSAMPLER_URL /
    $RAYSAMPLER_API_KEY, else DEFAULT_URL and, with `key_file`, the key `serve` saved in <data dir>/api_keys."""
    url = (url or os.environ.get("RAYSAMPLER_URL") or DEFAULT_URL).rstrip("/")
    key = api_key or os.environ.get("RAYSAMPLER_API_KEY")
    if not key and key_file:
        key = _served_key()
    return url, key or None


def _served_key() -> str | None:
    """The key `raysampler serve` generated on this machine, read by the parser the server uses (None if none, or
    where the service is not installed: then this install has served nothing)."""
    from ..extras import MissingExtraError

    try:
        from ..service.settings import Settings  # server code, imported only for this local fallback
    except MissingExtraError:
        return None

    path = Settings().data_dir / KEYS_FILE
    if not path.exists():
        return None
    return next(iter(Settings(api_keys="", api_keys_file=path).keys()), None)


def ssl_verify(verify: Verify) -> bool | ssl.SSLContext:
    """`verify` as httpx takes it: a CA file or directory becomes an SSLContext (httpx deprecates path strings)."""
    if not isinstance(verify, (str, os.PathLike)):
        return verify
    path = os.fspath(verify)
    return ssl.create_default_context(capath=path) if os.path.isdir(path) else ssl.create_default_context(cafile=path)


def http_options(url: str | None, api_key: str | None, timeout: float, verify: Verify) -> tuple[str, dict[str, Any]]:
    """(base URL, httpx client options) from the arguments or $RAYSAMPLER_URL / $RAYSAMPLER_API_KEY: the key as a
    bearer token, `timeout` for connecting and writing, and no read timeout (streams wait as long as a run runs)."""
    url, key = service_address(url, api_key, key_file=True)
    if not key:
        raise ValueError(
            "api_key is required: pass api_key=, set RAYSAMPLER_API_KEY, or start `raysampler serve` on this machine "
            "(its generated key is found in its data dir)"
        )
    return url, {
        "base_url": url,
        "headers": {"Authorization": f"Bearer {key}"},
        "timeout": httpx.Timeout(timeout, read=None),
        "verify": ssl_verify(verify),
    }
