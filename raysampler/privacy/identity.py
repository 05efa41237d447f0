"""Authenticated key agreement for secure sums: each site signs its shards' X25519 public keys with an identity key
of its own, and a site whose operator pinned the other sites' identities (`RAYSAMPLER_SITE_PEERS`) agrees pairwise
keys only with keys those identities signed.

Without pins the coordinator, which relays the public keys, is trusted to relay them unchanged (the semi-honest
model): a coordinator that replaced every key with its own would share a pairwise key with every site and could
unmask each term. With pins it cannot: a replaced key carries no valid signature, and the site refuses the run,
naming the shard and its claimed site.

- The identity: an Ed25519 key derived from the site's secret (`sealing.site_secret`: `RAYSAMPLER_SITE_SECRET`, or
  the key file on the node) by HKDF-SHA256, so every node of a site that shares the secret has the same identity and
  nothing new is stored. `raysampler site-identity --site a` prints its public half for the other sites' operators.
- The pins: `RAYSAMPLER_SITE_PEERS="b=<base64>,c=<base64>"` in each site node's environment (the site's own
  configuration: never the coordinator's). A site's own shards are checked against its own identity.
- What a shard's `describe` sends (`signed_entry`): its public key (32 bytes), the signature (64 bytes) over the
  context string, the shard id, the site label and the public key, and the site label. The coordinator relays these
  entries as they are, and `verified_publics` checks each against the pin of the site it names.

What pins do not stop on their own: a coordinator colluding with a pinned site can leave other sites out of a run,
and in a run of two parties one party learns the other's term from the sum (docs/privacy.md, "What secure sums
hide"). `RAYSAMPLER_SECURE_MIN_SITES=N` on a site's nodes makes it refuse a run in which fewer than N distinct sites,
itself included, hold shards (`check_min_sites`; with pins the labels counted are the signed ones).
"""

from __future__ import annotations

import base64
import binascii
import os
import struct
from collections.abc import Mapping, Sequence

from ..extras import privacy  # noqa: F401  # first: MissingExtraError naming the extra where cryptography is absent

# isort: split
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from .sealing import site_secret

PEERS_ENV = "RAYSAMPLER_SITE_PEERS"
MIN_SITES_ENV = "RAYSAMPLER_SECURE_MIN_SITES"
_INFO = b"raysampler site identity v1"
_CONTEXT = b"raysampler secure-sums key v1"
_PUBLIC, _SIGNATURE = 32, 64


class UnverifiedKey(ValueError):
    """A relayed public key that no pinned identity signed: the site refuses to agree keys with it."""


def identity_key(site: str | None) -> Ed25519PrivateKey:
    """The site's Ed25519 identity key, derived from its secret (the same on every node that shares the secret)."""
    seed = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_INFO).derive(site_secret(site))
    return Ed25519PrivateKey.from_private_bytes(seed)


def identity_public(site: str | None) -> str:
    """The site's identity public key as the other sites pin it: 32 raw bytes, base64."""
    raw = identity_key(site).public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return base64.b64encode(raw).decode()


def _message(shard: int, site: str | None, public: bytes) -> bytes:
    label = (site or "").encode()
    return _CONTEXT + struct.pack("<QQ", shard, len(label)) + label + public


def signed_entry(shard: int, site: str | None, public: bytes) -> bytes:
    """What a shard's `describe` sends for its X25519 public key: the key, the site's signature and the site label."""
    signature = identity_key(site).sign(_message(shard, site, public))
    return public + signature + (site or "").encode()


def pinned_peers(env: Mapping[str, str] | None = None) -> dict[str, bytes] | None:
    """The other sites' identity keys this site trusts (`RAYSAMPLER_SITE_PEERS`, "site=base64,..."), or None where
    none are pinned (the semi-honest model). A malformed value is a ValueError naming the variable."""
    text = (os.environ if env is None else env).get(PEERS_ENV, "").strip()
    if not text:
        return None
    pins: dict[str, bytes] = {}
    for item in text.split(","):
        site, sep, key = item.strip().partition("=")
        try:
            raw = base64.b64decode(key.strip(), validate=True) if sep else b""
        except binascii.Error:
            raw = b""
        if not site.strip() or len(raw) != _PUBLIC:
            raise ValueError(f"{PEERS_ENV}: {item.strip()!r} is not site=<base64 of a 32-byte Ed25519 public key>")
        pins[site.strip()] = raw
    return pins


def verified_publics(
    entries: Sequence[bytes], own_sites: Sequence[str | None], pins: Mapping[str, bytes] | None
) -> list[bytes]:
    """The X25519 public keys of the relayed `entries` (in shard order), each checked, where `pins` is given, against
    the identity of the site it names: a pinned peer's, or this process's own for the sites of its own shards
    (`own_sites`). Raises UnverifiedKey naming the shard and the site for a key no such identity signed, or whose
    site is not pinned."""
    publics = []
    for shard, entry in enumerate(entries):
        if len(entry) < _PUBLIC + _SIGNATURE:
            raise UnverifiedKey(f"shard {shard}: its relayed key entry is {len(entry)} bytes, not a signed key")
        public, signature = entry[:_PUBLIC], entry[_PUBLIC : _PUBLIC + _SIGNATURE]
        site = entry_site(entry)
        if pins is not None:
            if site in own_sites:
                verifier = identity_key(site).public_key()
            elif site is not None and site in pins:
                verifier = Ed25519PublicKey.from_public_bytes(pins[site])
            else:
                raise UnverifiedKey(
                    f"shard {shard}: its key names site {site!r}, which {PEERS_ENV} does not pin here: refusing to "
                    "agree keys with it"
                )
            try:
                verifier.verify(signature, _message(shard, site, public))
            except InvalidSignature:
                raise UnverifiedKey(
                    f"shard {shard}: its public key is not signed by site {site!r}'s pinned identity (replaced on the "
                    "way?): refusing to agree keys with it"
                ) from None
        publics.append(public)
    return publics


def entry_site(entry: bytes) -> str | None:
    """The site label a relayed key entry names (checked against its signature by `verified_publics` with pins)."""
    return entry[_PUBLIC + _SIGNATURE :].decode(errors="replace") or None


def check_min_sites(entries: Sequence[bytes], env: Mapping[str, str] | None = None) -> None:
    """Refuse (UnverifiedKey) a run whose relayed keys name fewer distinct sites than `RAYSAMPLER_SECURE_MIN_SITES`
    asks (unset: no minimum): with fewer, the sum tells the sites that take part more about each other's terms
    (with two, each reads the other's). A value that is not a positive integer is a ValueError naming the variable."""
    text = (os.environ if env is None else env).get(MIN_SITES_ENV, "").strip()
    if not text:
        return
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"{MIN_SITES_ENV} must be a positive integer, got {text!r}")
    sites = {entry_site(e) for e in entries}
    if len(sites) < int(text):
        names = ", ".join(sorted(repr(x) for x in sites))
        raise UnverifiedKey(
            f"{len(sites)} site(s) take part in this secure-sums run ({names}), fewer than {MIN_SITES_ENV} = {text}: "
            "refusing to agree keys"
        )
