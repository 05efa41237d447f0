"""Data grants: which files on which site a tenant may use as site shards.

The operator grants prefixes per tenant and site: file-system paths (`tenant@site:/prefix`) or object-storage URIs
(`tenant@site:s3://bucket/prefix/`, `gs://`, `abfs://`). A site shard is checked twice: by the service at submit, on
the location as written (`check_lexical`: an absolute path without `..`, `~` or NUL, or a well-formed URI, under a
granted prefix component by component: scheme, bucket, then each key component), and on the site's node before any
byte is read (`check_on_site`: for a path the real path, symlinks resolved, under the real path of a granted prefix;
an object key has no links, so the same check again where it is read). Only the site resolves symlinks and only the
site holds the credentials of its store; the service never opens a site file or object. A refusal says which rule
was broken and never anything about the file, so that an existing and a missing file outside the grants get the
same answer.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from .names import ID_RE, SITE_RE
from .objectstore import is_uri, parse_uri

__all__ = [
    "ACCESS_RULE",
    "AccessRefused",
    "DataGrant",
    "DataGrants",
    "check_lexical",
    "check_on_site",
    "normalise_location",
    "normalise_path",
    "parse_grants",
]

_TENANT = ID_RE
_SITE = SITE_RE

#: The rule a refused site-shard path broke, in the words every refusal uses (it names no file).
ACCESS_RULE = (
    "a site shard's location must be an absolute path without '..' components, '~' or NUL, or an s3://, gs:// or "
    "abfs:// URI, and lie (symlinks resolved on the site) under a prefix the operator granted to this tenant on "
    "that site"
)


class AccessRefused(PermissionError):
    """A site-shard path outside the tenant's grants. The message names the rule, never the file."""

    def __init__(self, message: str = f"refused: {ACCESS_RULE}") -> None:
        super().__init__(message)


@dataclass(frozen=True)
class DataGrant:
    """Tenant `tenant` may read files (or objects) under `prefix`, a path or a URI, on the nodes of site `site`."""

    tenant: str
    site: str
    prefix: str


@dataclass(frozen=True)
class DataGrants:
    """Every grant the operator configured; `prefixes(tenant, site)` is what a tenant may read on a site."""

    grants: tuple[DataGrant, ...] = ()
    _index: dict[tuple[str, str], tuple[str, ...]] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        index: dict[tuple[str, str], list[str]] = {}
        for g in self.grants:
            index.setdefault((g.tenant, g.site), []).append(g.prefix)
        object.__setattr__(self, "_index", {k: tuple(v) for k, v in index.items()})

    def prefixes(self, tenant: str, site: str) -> tuple[str, ...]:
        """The prefixes granted to `tenant` on `site` (empty: no site shard there)."""
        return self._index.get((tenant, site), ())

    def __len__(self) -> int:
        return len(self.grants)


def parse_grants(entries: Iterable[tuple[str, str]]) -> DataGrants:
    """Grants from `(entry, where)` pairs, each entry `tenant@site:/prefix` or `tenant@site:scheme://bucket/prefix`;
    blank entries are skipped. A malformed entry raises ValueError naming it and where it came from (an env variable
    or a file and line)."""
    out: list[DataGrant] = []
    for entry, where in entries:
        entry = entry.strip()
        if not entry:
            continue
        who, sep, prefix = entry.partition(":")
        tenant, at, site = who.partition("@")
        problem = None
        if not sep or not at:
            problem = "entries must be tenant@site:/path/prefix or tenant@site:s3://bucket/prefix/"
        elif not _TENANT.match(tenant):
            problem = "the tenant must be letters, digits, '_', '.', '-' (at most 64)"
        elif not _SITE.match(site):
            problem = "the site must be a Ray label value (letters, digits, '_', '.', '-', at most 63)"
        else:
            try:
                prefix = normalise_location(prefix.strip(), keep_slash=False)
            except ValueError as exc:
                problem = f"the prefix {exc}"
            else:
                if prefix == "/":
                    problem = "the prefix must not be '/' (grant a data directory, not the whole file system)"
        if problem is not None:
            raise ValueError(f"{where}: malformed data grant {entry!r}: {problem}")
        out.append(DataGrant(tenant, site, prefix))
    return DataGrants(tuple(out))


def normalise_path(path: str) -> str:
    """`path` with repeated and trailing slashes and '.' components removed; ValueError if it is not absolute or
    has a '..' component, a component starting with '~' or a NUL character (the message names the rule)."""
    if "\0" in path:
        raise ValueError("must not contain a NUL character")
    if not path.startswith("/"):
        raise ValueError("must be an absolute path (starting with '/')")
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise ValueError("must not have '..' components")
    if any(p.startswith("~") for p in parts):
        raise ValueError("must not have components starting with '~'")
    return "/" + "/".join(parts)


def normalise_location(location: str, keep_slash: bool = True) -> str:
    """A path (`normalise_path`) or an object-storage URI (`objectstore.parse_uri`) in its one written form; a
    trailing '/' (a folder or prefix: a parquet data set) is kept when `keep_slash`. ValueError naming the rule."""
    if is_uri(location):
        uri = parse_uri(location)
        text = str(uri)
        return text if keep_slash else text.rstrip("/")
    norm = normalise_path(location)
    return norm + "/" if keep_slash and location.endswith("/") and norm != "/" else norm


def _parts(location: str) -> list[str]:
    """The components `_under` compares: a path's, or a URI's scheme, bucket and key components."""
    if is_uri(location):
        return list(parse_uri(location).parts)
    return location.rstrip("/").split("/")


def _under(path: str, prefix: str) -> bool:
    """True if `path` is `prefix` or inside it, compared component by component (/a/b1 is not under /a/b, and
    s3://bucket/t1x/ is not under s3://bucket/t1/)."""
    p, q = _parts(path), _parts(prefix)
    return p[: len(q)] == q


def check_lexical(path: str, prefixes: Sequence[str]) -> str:
    """The normalised location `path` (a path or URI; a trailing '/' kept) if it lies under one of `prefixes` as
    written; AccessRefused otherwise (the same text for every miss: no word about the file)."""
    try:
        norm = normalise_location(path)
    except ValueError:
        raise AccessRefused() from None
    if not any(_under(norm, p) for p in prefixes):
        raise AccessRefused()
    return norm


def check_on_site(path: str, prefixes: Sequence[str]) -> str:
    """On the site's node, before any byte is read: for a path, its real path (symlinks resolved) if it lies under
    the real path of one of `prefixes`; for a URI (objects have no links) the location as checked at submit.
    AccessRefused otherwise, whether or not the file or object exists."""
    norm = check_lexical(path, prefixes)
    if is_uri(norm):
        return norm
    real = os.path.realpath(norm)
    local = [p for p in prefixes if not is_uri(p)]
    if not any(_under(real, posixpath.normpath(os.path.realpath(p))) for p in local):
        raise AccessRefused()
    return real + "/" if norm.endswith("/") else real
