"""Data grants: which files on which site a tenant may use as site shards.

The operator grants path prefixes per tenant and site (`tenant@site:/prefix`). A site shard is checked twice: by
the service at submit, on the path as written (`check_lexical`: absolute, no `..`, no `~`, no NUL, under a granted
prefix component by component), and on the site's node before any byte is read (`check_on_site`: the real path,
symlinks resolved, under the real path of a granted prefix). Only the site can resolve symlinks; the service never
opens a site file. A refusal says which rule was broken and never anything about the file, so that an existing and
a missing file outside the grants get the same answer.
"""

from __future__ import annotations

import os
import posixpath
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

__all__ = [
    "ACCESS_RULE",
    "AccessRefused",
    "DataGrant",
    "DataGrants",
    "check_lexical",
    "check_on_site",
    "normalise_path",
    "parse_grants",
]

_TENANT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_SITE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?$")

#: The rule a refused site-shard path broke, in the words every refusal uses (it names no file).
ACCESS_RULE = (
    "a site shard's path must be absolute, without '..' components, '~' or NUL, and lie (symlinks resolved on "
    "the site) under a path prefix the operator granted to this tenant on that site"
)


class AccessRefused(PermissionError):
    """A site-shard path outside the tenant's grants. The message names the rule, never the file."""

    def __init__(self, message: str = f"refused: {ACCESS_RULE}") -> None:
        super().__init__(message)


@dataclass(frozen=True)
class DataGrant:
    """Tenant `tenant` may read files under `prefix` on the nodes of site `site`."""

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
    """Grants from `(entry, where)` pairs, each entry `tenant@site:/prefix`; blank entries are skipped. A malformed
    entry raises ValueError naming it and where it came from (an env variable or a file and line)."""
    out: list[DataGrant] = []
    for entry, where in entries:
        entry = entry.strip()
        if not entry:
            continue
        who, sep, prefix = entry.partition(":")
        tenant, at, site = who.partition("@")
        problem = None
        if not sep or not at:
            problem = "entries must be tenant@site:/path/prefix"
        elif not _TENANT.match(tenant):
            problem = "the tenant must be letters, digits, '_', '.', '-' (at most 64)"
        elif not _SITE.match(site):
            problem = "the site must be a Ray label value (letters, digits, '_', '.', '-', at most 63)"
        else:
            try:
                prefix = normalise_path(prefix)
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


def _under(path: str, prefix: str) -> bool:
    """True if `path` is `prefix` or inside it, compared component by component (/a/b1 is not under /a/b)."""
    p, q = path.rstrip("/").split("/"), prefix.rstrip("/").split("/")
    return p[: len(q)] == q


def check_lexical(path: str, prefixes: Sequence[str]) -> str:
    """The normalised `path` if it lies under one of `prefixes` as written; AccessRefused otherwise (the same text
    for every miss: no word about the file)."""
    try:
        norm = normalise_path(path)
    except ValueError:
        raise AccessRefused() from None
    if not any(_under(norm, p) for p in prefixes):
        raise AccessRefused()
    return norm


def check_on_site(path: str, prefixes: Sequence[str]) -> str:
    """On the site's node, before any byte is read: the real path (symlinks resolved) of `path` if it lies under
    the real path of one of `prefixes`; AccessRefused otherwise, whether or not the file exists."""
    norm = check_lexical(path, prefixes)
    real = os.path.realpath(norm)
    if not any(_under(real, posixpath.normpath(os.path.realpath(p))) for p in prefixes):
        raise AccessRefused()
    return real
