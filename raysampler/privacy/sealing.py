"""Sealed worker states and keyed random streams: in a run with keyed streams (`RunOptions.keyed_noise`: secure sums,
the DP mode) a shard's random streams start from a seed derived from the run's seed *and its site's secret*
(`SiteSeals.noise_seed`), and its captured state (its z_i, kernel state, step sizes and the streams' position)
reaches the coordinator and the checkpoint only encrypted under a key its site keeps. So neither a checkpoint nor the
seed reveals a site's z_i or its noise, yet the run still resumes from its checkpoint (the site, restarted or not,
opens its own states again). Without the keyed streams the coordinator, which knows the seed, could replay a site's
proposals (the default local kernel's depend only on θ, the site's quadratic sent at set-up, and the stream) and read
its z_i off the acceptances; and whoever reads a DP run's draws could subtract its Langevin noise.

The site's key: HKDF-SHA256 of a site secret, per shard. The secret is `RAYSAMPLER_SITE_SECRET` where the site's
nodes set it (the operator's choice: the same value on every node of the site), else 32 random bytes kept in a file
of the site's node, `<RAYSAMPLER_SITE_KEYS or ~/.raysampler/site-keys>/<site>.key` (created 0600 at first use), which
a worker restarted on the same node reads again. A state sealed on one node and restored on another node of the
site needs the shared secret. Encryption: ChaCha20-Poly1305 (authenticated), a random 96-bit nonce per seal, the
shard id as associated data (a state cannot be opened as another shard's).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import pickle
import struct
from collections.abc import Sequence
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
_NOISE = b"raysampler keyed noise v1"


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


class SiteSeals:
    """A worker process's shards' seals (`shard_ids`, their `sites`): the key each shard's captured states are sealed
    under, and the seed its keyed random streams start from."""

    def __init__(self, shard_ids: Sequence[int], sites: Sequence[str | None]) -> None:
        self.shard_ids = [int(i) for i in shard_ids]
        self._keys = [shard_key(site_secret(s), i) for i, s in zip(self.shard_ids, sites)]

    def noise_seed(self, position: int, seed: int) -> int:
        """The seed of shard `position`'s (in this process's order) random streams: HMAC-SHA256 under its key of the
        run's seed, 256 bits (a `SeedSequence` takes it whole). The same seed and site secret give the same streams,
        so the run is reproducible where the secret is known, and only there."""
        mac = hmac.new(self._keys[position], _NOISE + struct.pack("<Q", int(seed) % 2**64), hashlib.sha256)
        return int.from_bytes(mac.digest(), "big")

    def seal(self, position: int, state: Any) -> SealedState:
        """Shard `position`'s captured state, sealed under its site's key."""
        return seal(self._keys[position], self.shard_ids[position], state)

    def unseal(self, position: int, sealed: Any) -> Any:
        """The state inside a sealed one (ValueError if it is not sealed or not this shard's)."""
        if not isinstance(sealed, SealedState) or sealed.shard != self.shard_ids[position]:
            raise ValueError(
                f"shards[{self.shard_ids[position]}]: a run with keyed streams resumes only from its own sealed states"
            )
        return unseal(self._keys[position], sealed)


def _aad(shard: int) -> bytes:
    return _INFO + struct.pack("<Q", shard)
