"""Object-storage locations (`s3://`, `gs://`, `abfs://`) and the `pyarrow.fs` file system that reaches each one.

A location is parsed and checked without touching the network (`parse_uri`): a known scheme, a valid bucket (or
container), and key components without '.', '..', '~', empty components, control characters, credentials, ports,
queries or fragments. The file system is built in the process that reads, from that process's own environment: the
standard variables of each cloud's SDK, or the machine's instance role. No credential is ever part of a location, so
none passes through a run spec or the service:

* S3 and S3-compatible stores: ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY`` (and ``AWS_SESSION_TOKEN``), or the
  instance role; ``AWS_REGION`` (or ``AWS_DEFAULT_REGION``); ``AWS_ENDPOINT_URL_S3`` or ``AWS_ENDPOINT_URL`` for an
  S3-compatible store (MinIO, Ceph, ...).
* Google Cloud Storage: Application Default Credentials (``GOOGLE_APPLICATION_CREDENTIALS`` or the VM's service
  account); ``STORAGE_EMULATOR_HOST`` for an emulator.
* Azure (ADLS Gen2 / Blob): ``abfs://container@account.dfs.core.windows.net/path`` (or ``abfs://container/path``
  with ``AZURE_STORAGE_ACCOUNT_NAME``); ``AZURE_STORAGE_ACCOUNT_KEY``, else Azure's default credential chain
  (``AZURE_CLIENT_ID``/``AZURE_TENANT_ID``/``AZURE_CLIENT_SECRET``, managed identity).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

if TYPE_CHECKING:
    import pyarrow.fs

__all__ = ["SCHEMES", "ObjectURI", "UnsafeKey", "filesystem", "is_uri", "parse_uri"]

#: The object-storage schemes a location may use.
SCHEMES: tuple[str, ...] = ("s3", "gs", "abfs")

_BUCKET = {
    "s3": re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$"),
    "gs": re.compile(r"^[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]$"),
    "abfs": re.compile(r"^[a-z0-9](?!.*--)[a-z0-9-]{1,61}[a-z0-9]$"),  # a container
}
_AZURE_ACCOUNT = re.compile(r"^[a-z0-9]{3,24}$")
_AZURE_HOSTS = (".dfs.core.windows.net", ".blob.core.windows.net")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class UnsafeKey(ValueError):
    """A well-formed URI whose key has a component a grant check must refuse ('.', '..', '~...', empty)."""


def is_uri(location: str) -> bool:
    """Whether `location` is written as a URI (`scheme://...`) rather than a file path."""
    return "://" in location


@dataclass(frozen=True)
class ObjectURI:
    """A checked object-storage location: scheme, bucket (Azure: container), the Azure account when the URI names
    it, the key's components, and whether it ended with '/' (a prefix: a folder-like location)."""

    scheme: str
    bucket: str
    key: tuple[str, ...]
    account: str | None = None
    trailing_slash: bool = False

    def __str__(self) -> str:
        host = self.bucket if self.account is None else f"{self.bucket}@{self.account}.dfs.core.windows.net"
        key = "/".join(self.key)
        return f"{self.scheme}://{host}/{key}" + ("/" if self.trailing_slash and key else "")

    @property
    def parts(self) -> tuple[str, ...]:
        """The components compared when one location is checked to lie under another: scheme, bucket, key."""
        host = self.bucket if self.account is None else f"{self.bucket}@{self.account}"
        return (f"{self.scheme}://", host, *self.key)

    @property
    def fs_path(self) -> str:
        """The path `pyarrow.fs` names it by: bucket/key (Azure: container/path)."""
        return "/".join((self.bucket, *self.key))

    def child(self, *names: str) -> ObjectURI:
        """The location `names` below this one (each name one or more checked components)."""
        key = list(self.key)
        for name in names:
            key += [p for p in name.split("/") if p]
        return parse_uri(str(ObjectURI(self.scheme, self.bucket, tuple(key), self.account)))


def parse_uri(text: str) -> ObjectURI:
    """`text` as a checked `ObjectURI`; ValueError naming the rule it breaks (never looks anything up)."""
    if not isinstance(text, str) or not is_uri(text):
        raise ValueError(f"must be a URI scheme://bucket/key with a scheme of {', '.join(SCHEMES)}")
    if _CONTROL.search(text):
        raise ValueError("must not contain NUL or control characters")
    scheme = text.split("://", 1)[0]
    if scheme not in SCHEMES:
        raise ValueError(f"has the scheme {scheme!r}; object storage is one of {', '.join(s + '://' for s in SCHEMES)}")
    if "?" in text or "#" in text:
        raise ValueError("must not have a query ('?') or fragment ('#'): options and credentials come from the site")
    parts = urlsplit(text)
    host = parts.netloc
    account = None
    if scheme == "abfs" and "@" in host:
        host, _, domain = host.partition("@")
        name = next((domain[: -len(h)] for h in _AZURE_HOSTS if domain.endswith(h)), None)
        if name is None or not _AZURE_ACCOUNT.match(name):
            raise ValueError(
                "an abfs:// URI names its account as container@<account>.dfs.core.windows.net (account: 3-24 "
                "lowercase letters and digits)"
            )
        account = name
    if "@" in host or ":" in host:
        raise ValueError("must not carry credentials or a port in its host part: the site's environment gives them")
    if not _BUCKET[scheme].match(host):
        what = "container" if scheme == "abfs" else "bucket"
        raise ValueError(f"needs a valid {what} name after {scheme}:// (lowercase letters, digits, '-', '.')")
    raw = parts.path
    trailing = raw.endswith("/") and raw != "/"
    components = raw.split("/")[1:]
    if trailing:
        components = components[:-1]
    if components == [""]:
        components = []
    for c in components:
        if c == "":
            raise UnsafeKey("must not have empty components ('//')")
        if c in (".", ".."):
            raise UnsafeKey("must not have '.' or '..' components")
        if c.startswith("~"):
            raise UnsafeKey("must not have components starting with '~'")
    return ObjectURI(scheme, host, tuple(components), account, trailing)


def filesystem(uri: ObjectURI) -> pyarrow.fs.FileSystem:
    """The `pyarrow.fs` file system of `uri`'s store, configured from this process's environment (see the module
    doc); ImportError if this pyarrow was built without that store."""
    import pyarrow.fs as pafs

    env = os.environ
    if uri.scheme == "s3":
        options: dict[str, object] = {}
        region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
        if region:
            options["region"] = region
        endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
        if endpoint:
            scheme, _, host = endpoint.rstrip("/").rpartition("://")
            options["endpoint_override"] = host
            options["scheme"] = scheme or "https"
        options["allow_delayed_open"] = True  # a small file is one PutObject, not a multipart upload: fewer requests
        return pafs.S3FileSystem(**options)
    if uri.scheme == "gs":
        emulator = env.get("STORAGE_EMULATOR_HOST")
        if emulator:
            scheme, _, host = emulator.rstrip("/").rpartition("://")
            return pafs.GcsFileSystem(anonymous=True, endpoint_override=host, scheme=scheme or "http")
        return pafs.GcsFileSystem()
    account = uri.account or env.get("AZURE_STORAGE_ACCOUNT_NAME")
    if not account:
        raise ValueError(
            f"{uri}: an abfs:// location needs its storage account: abfs://container@<account>.dfs.core.windows.net/"
            "... or AZURE_STORAGE_ACCOUNT_NAME in the reading process's environment"
        )
    return pafs.AzureFileSystem(account_name=account, account_key=env.get("AZURE_STORAGE_ACCOUNT_KEY") or None)
