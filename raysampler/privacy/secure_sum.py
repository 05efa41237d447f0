"""Secure sums: each shard (a party) sends its term masked so that only the sum over all parties is readable.

Pairwise masks (Bonawitz et al., CCS 2017, without the dropout recovery): parties i < j agree a key k_ij once per
run (X25519, then HKDF-SHA256 over the shared secret and both public keys); at each step s, party i adds to its
fixed-point term x_i

    m_i = Σ_{j>i} PRG(k_ij, s) − Σ_{j<i} PRG(k_ij, s)   (mod 2⁶⁴),

PRG being ChaCha20's key stream read as little-endian uint64 words, with step s as its nonce. Every pair's stream is
added once and subtracted once, so Σ_i m_i = 0 and Σ_i (x_i + m_i) = Σ_i x_i exactly, mod 2⁶⁴. A strict subset of
the masked terms is uniformly distributed whatever the terms (each misses a stream that only the absent parties and
it share). A party lost mid-step leaves its partners' masks uncancelled: that step's sum is garbage and the step
fails, as any lost party's step does.

The terms are fixed point (`fixed_point`): exact sums mod 2⁶⁴, a stated precision of 2⁻³².
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from ..extras import privacy  # noqa: F401  # first: MissingExtraError naming the extra where cryptography is absent

# isort: split
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

_INFO = b"raysampler secure sums v1"


class KeyPair(NamedTuple):
    """One party's X25519 key pair for a run's key agreement: the private key stays at the party; `public` (32 raw
    bytes) goes to the coordinator, which relays every party's to every party."""

    private: X25519PrivateKey
    public: bytes


def new_key_pair() -> KeyPair:
    """A fresh X25519 key pair (made at each key agreement: a run's start, and each resume)."""
    private = X25519PrivateKey.generate()
    public = private.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return KeyPair(private, public)


class PartyKeys(NamedTuple):
    """Party `party`'s pairwise keys k_ij for every other party j (None at its own index): what it masks with."""

    party: int
    keys: tuple[bytes | None, ...]


def agree(pair: KeyPair, party: int, publics: Sequence[bytes]) -> PartyKeys:
    """Party `party`'s pairwise keys from its key pair and every party's public key (its own included, at index
    `party`): k_ij = HKDF-SHA256(X25519(sk_i, pk_j), info = label ‖ i ‖ j ‖ pk_i ‖ pk_j) with i < j, the same at
    both ends. Raises ValueError if the relayed list does not hold this party's own public key where it should."""
    if not 0 <= party < len(publics) or publics[party] != pair.public:
        raise ValueError(f"publics: the relayed public keys do not hold party {party}'s own key at index {party}")
    keys: list[bytes | None] = []
    for j, pk in enumerate(publics):
        if j == party:
            keys.append(None)
            continue
        if len(pk) != 32:
            raise ValueError(f"publics[{j}]: an X25519 public key is 32 bytes, got {len(pk)}")
        shared = pair.private.exchange(X25519PublicKey.from_public_bytes(pk))
        lo, hi = min(party, j), max(party, j)
        info = _INFO + struct.pack("<QQ", lo, hi) + publics[lo] + publics[hi]
        keys.append(HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(shared))
    return PartyKeys(party, tuple(keys))


def prg(key: bytes, step: int, words: int) -> np.ndarray:
    """`words` uint64 words of ChaCha20's key stream under `key`, nonce = step (block counter from 0)."""
    nonce = struct.pack("<IQI", 0, int(step), 0)
    stream = Cipher(algorithms.ChaCha20(key, nonce), mode=None).encryptor().update(bytes(8 * words))
    return np.frombuffer(stream, dtype="<u8").astype(np.uint64)


def mask(keys: PartyKeys, step: int, shape: tuple[int, ...]) -> np.ndarray:
    """Party i's mask for step `step`: Σ_{j>i} PRG(k_ij) − Σ_{j<i} PRG(k_ij) mod 2⁶⁴, of shape `shape`."""
    n = int(np.prod(shape, dtype=np.int64))
    out = np.zeros(n, dtype=np.uint64)
    for j, key in enumerate(keys.keys):
        if key is None:
            continue
        stream = prg(key, step, n)
        if j > keys.party:
            out += stream
        else:
            out -= stream
    return out.reshape(shape)


def masked(words: np.ndarray, keys: PartyKeys, step: int) -> np.ndarray:
    """A party's fixed-point term with its step-`step` mask added (mod 2⁶⁴): what it sends."""
    return np.asarray(words, dtype=np.uint64) + mask(keys, step, np.shape(words))
