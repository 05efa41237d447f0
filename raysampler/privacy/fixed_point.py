"""Fixed-point terms for secure sums (`secure_sum`): exact integer arithmetic mod 2⁶⁴ with a stated precision.

A term x is sent as round(x · 2^FRAC_BITS) in two's complement mod 2⁶⁴, i.e. rounded to the nearest 2⁻³²; the sum of
b terms is exact as long as each |x| < 2^(63 − FRAC_BITS) / b (`limit`: 2³¹/b, 5.4·10⁸ for 4 parties), which each
party checks of its own term before sending (`encode` flags a term outside it, or non-finite, instead of wrapping).
The decoded sum differs from the float sum of the terms by at most b·2⁻³³ (each term's rounding) plus float64's
own rounding of the result. Pure numpy: a plain run may round its terms the same way without any masks (DG-LMC's,
FALD's, QLSD's and ULA's `fixed_point=True`), which makes its draws bit-identical to the secure run's. `encode_term`
and `decode_sum` carry several arrays side by side as one term and split their sum back.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

#: fractional bits of the fixed-point encoding: terms are rounded to the nearest 2⁻³²
FRAC_BITS = 32
_SCALE = float(2**FRAC_BITS)


def limit(parties: int) -> float:
    """The largest |term| each of `parties` may send so that their sum cannot leave int64: 2^(63 − FRAC_BITS)/b."""
    return float(2 ** (63 - FRAC_BITS)) / max(int(parties), 1)


class Encoded(NamedTuple):
    """A term in fixed point (uint64, the shape of the term) and, per leading row, whether it was representable
    (finite and within `limit`): a row that was not is sent as zeros, and the party flags it."""

    words: np.ndarray
    ok: np.ndarray


def encode(x: np.ndarray, parties: int, rows: int = 1) -> Encoded:
    """x rounded to the nearest 2^-FRAC_BITS, as uint64 words mod 2⁶⁴ (two's complement). `rows`: how many leading
    rows x has when it stacks several parties' terms (then `ok` has one flag per row), else 1 (x is one term)."""
    x = np.asarray(x, dtype=float)
    flat = x.reshape(rows, -1)
    ok = np.abs(flat).max(axis=1, initial=0.0) < limit(parties)  # False for a row with NaN or ±inf too
    scaled = flat * _SCALE if ok.all() else np.where(ok[:, None], flat, 0.0) * _SCALE
    words = np.rint(scaled).astype(np.int64).view(np.uint64)
    return Encoded(words.reshape(x.shape), ok)


def decode(words: np.ndarray) -> np.ndarray:
    """Fixed-point words (a term, or a sum of terms mod 2⁶⁴) back to float64."""
    return np.asarray(words, dtype=np.uint64).view(np.int64).astype(float) / _SCALE


def total(words: np.ndarray) -> np.ndarray:
    """Σ over the first (party) axis mod 2⁶⁴: numpy's unsigned addition wraps, as the masks need."""
    return np.add.reduce(np.asarray(words, dtype=np.uint64), axis=0)


class FixedTerm(NamedTuple):
    """One party's term of a sum in fixed point: its words (uint64, masked by the party's site in a secure-sums run)
    and the party's own flag (1,): 0.0, or NaN where the term was non-finite or out of range (sent as zeros), which
    the coordinator's non-finite check reads as it reads a plain reply."""

    words: np.ndarray
    status: np.ndarray


def encode_term(parts: tuple[np.ndarray, ...], parties: int) -> FixedTerm:
    """Several arrays (K, w_j) of one party's term, side by side along their last axis, as one fixed-point term
    (K, Σ w_j): what an algorithm whose coordinator needs only sums over sites sends instead of its values."""
    enc = encode(np.concatenate([np.asarray(p, dtype=float) for p in parts], axis=-1), parties)
    return FixedTerm(enc.words, np.where(enc.ok, 0.0, np.nan))


def term_sums(replies: Sequence[Any], widths: tuple[int, ...]) -> list[np.ndarray] | None:
    """The sums over parties of a round's replies' fixed-point terms (each reply's `summed`), split as `widths`
    (`decode_sum`); None where the replies carry plain values (no term). A fixed-point round missing a party's term
    is an error, not a smaller sum."""
    if not replies or replies[0].summed is None:  # plain replies: no list built on the plain runs' rounds
        return None
    terms = [r.summed for r in replies]
    if any(t is None for t in terms):
        raise ValueError("a fixed-point round: every party sends its term")
    return decode_sum(terms, widths)


def decode_sum(terms: list[np.ndarray], widths: tuple[int, ...]) -> list[np.ndarray]:
    """The parties' fixed-point terms (each (K, Σ w_j), as `encode_term` made them, masked or not) added mod 2⁶⁴
    and decoded, split back into the arrays' sums (K, w_j): only this total is readable in a secure-sums run."""
    s = decode(total(np.stack(terms)))
    return np.split(s, np.cumsum(widths)[:-1], axis=-1)
