"""Secure sums: each shard (a party) sends its term masked so that only the sum over all parties is readable.

Pairwise masks (Bonawitz et al., CCS 2017, without the dropout recovery): parties i < j agree a key k_ij once per
run (X25519, then HKDF-SHA256 over the shared secret and both public keys); at each step s, party i adds to its
fixed-point term x_i

    m_i = Σ_{j>i} PRG(k_ij, s) − Σ_{j<i} PRG(k_ij, s)   (mod 2⁶⁴),

PRG(k_ij, s) being step s's words of ChaCha20's key stream under k_ij, read on step after step as little-endian
uint64 words (`MaskStream`: the step is the stream's position, so each round and each pipelined half-round, that is
each chain group, gets words of its own).

Every pair's stream is added once and subtracted once, so Σ_i m_i = 0 and Σ_i (x_i + m_i) = Σ_i x_i exactly,
mod 2⁶⁴. A strict subset of the masked terms is uniformly distributed whatever the terms (each misses a stream that
only the absent parties and it share). A party lost mid-step leaves its partners' masks uncancelled: that step's sum
is garbage and the step fails, as any lost party's step does.

The terms are fixed point (`fixed_point`): exact sums mod 2⁶⁴, a stated precision of 2⁻³².
"""

from __future__ import annotations

import math
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


class MaskStream:
    """Party i's masks, step after step: one ChaCha20 key stream per partner j, under k_ij with a zero nonce (a key
    serves one run's agreement only: a resume agrees new keys), read on in order as little-endian uint64 words, and
    combined into one stream of mask words Σ_{j>i} PRG(k_ij) − Σ_{j<i} PRG(k_ij) mod 2⁶⁴. A step takes the next words
    of it, as many as its term has: both ends of a pair take the same words at the same step, since every party masks
    every step (each round, or each half of a pipelined round) with a term of the same size, and no step's words are
    another's. The streams are read `READ_AHEAD` words at a time (a step then costs a slice, not a cipher call per
    partner)."""

    #: words of mask read from the key streams at a time
    READ_AHEAD = 8192

    def __init__(self, keys: PartyKeys) -> None:
        self.party = keys.party
        nonce = bytes(16)
        self._streams = [
            (j > keys.party, Cipher(algorithms.ChaCha20(key, nonce), mode=None).encryptor())
            for j, key in enumerate(keys.keys)
            if key is not None
        ]
        self._buf = np.zeros(0, dtype=np.uint64)
        self._at = 0

    def _refill(self, need: int) -> None:
        """Keep what is left of the buffer and read at least `need` more words of every key stream."""
        n = max(self.READ_AHEAD, need)
        zeros = bytes(8 * n)
        fresh = np.zeros(n, dtype=np.uint64)
        for plus, enc in self._streams:
            words = np.frombuffer(enc.update(zeros), dtype="<u8")
            if plus:
                fresh += words
            else:
                fresh -= words
        self._buf, self._at = np.concatenate([self._buf[self._at :], fresh]), 0

    def next(self, shape: tuple[int, ...]) -> np.ndarray:
        """This step's mask, of shape `shape`."""
        n = math.prod(shape)
        at = self._at
        if at + n > len(self._buf):
            self._refill(n)
            at = 0
        self._at = at + n
        return self._buf[at : at + n].reshape(shape)

    def masked(self, words: np.ndarray) -> np.ndarray:
        """A fixed-point term (uint64) with this step's mask added (mod 2⁶⁴): what the party sends."""
        return words + self.next(words.shape)
