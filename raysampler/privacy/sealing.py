"""Sealed worker states: in a secure-sums run a shard's captured state (its z_i, kernel state, step sizes) reaches
the coordinator and the checkpoint only encrypted under a key its site keeps, so a checkpoint reveals no site's
z_i, yet the run still resumes from it (the site, restarted or not, opens its own states again).

The site's key: HKDF-SHA256 of a site secret, per shard. The secret is `RAYSAMPLER_SITE_SECRET` where the site's
nodes set it (the operator's choice: the same value on every node of the site), else 32 random bytes kept in a file
of the site's node, `<RAYSAMPLER_SITE_KEYS or ~/.raysampler/site-keys>/<site>.key` (created 0600 at first use), which
a worker restarted on the same node reads again. A state sealed on one node and restored on another node of the
site needs the shared secret. Encryption: ChaCha20-Poly1305 (authenticated), a random 96-bit nonce per seal, the
shard id as associated data (a state cannot be opened as another shard's).
"""

from __future__ import annotations

import os
import pickle
import struct
from pathlib import Path
from typing import Any, NamedTuple

from ..extras import privacy  # noqa: F401  # first: MissingExtraError naming the extra where cryptography is absent

# isort: split
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

SECRET_ENV = "RAYSAMPLER_SITE_SECRET"
KEYS_ENV = "RAYSAMPLER_SITE_KEYS"
_INFO = b"raysampler sealed worker state v1"


class SealedState(NamedTuple):
    """A shard's worker state as the coordinator holds it in a secure-sums run: ciphertext only."""

    shard: int
    nonce: bytes
    ciphertext: bytes


def site_secret(site: str | None) -> bytes:
    """The site's secret: RAYSAMPLER_SITE_SECRET, else its key file on this node (made at first use)."""
    env = os.environ.get(SECRET_ENV)
    if env:
        return env.encode()
    folder = Path(os.environ.get(KEYS_ENV) or Path.home() / ".raysampler" / "site-keys")
    path = folder / f"{site or 'unsited'}.key"
    try:
        return path.read_bytes()
    except FileNotFoundError:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        secret = os.urandom(32)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another worker of the site made it meanwhile
            return path.read_bytes()
        with os.fdopen(fd, "wb") as f:
            f.write(secret)
        return secret


def shard_key(secret: bytes, shard: int) -> bytes:
    """The key sealing shard `shard`'s states."""
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_INFO + struct.pack("<Q", shard)).derive(secret)


def seal(key: bytes, shard: int, state: Any) -> SealedState:
    """`state` pickled and encrypted under `key` (a fresh nonce), bound to `shard`."""
    nonce = os.urandom(12)
    blob = ChaCha20Poly1305(key).encrypt(nonce, pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL), _aad(shard))
    return SealedState(shard, nonce, blob)


def unseal(key: bytes, sealed: SealedState) -> Any:
    """The state inside `sealed`; ValueError naming the shard if this site's key does not open it."""
    from cryptography.exceptions import InvalidTag

    try:
        raw = ChaCha20Poly1305(key).decrypt(sealed.nonce, sealed.ciphertext, _aad(sealed.shard))
    except InvalidTag:
        raise ValueError(
            f"shards[{sealed.shard}]: its sealed state does not open with this site's key (another site's "
            f"checkpoint, or the site's secret changed: set {SECRET_ENV} to the value it had)"
        ) from None
    return pickle.loads(raw)


def _aad(shard: int) -> bytes:
    return _INFO + struct.pack("<Q", shard)
