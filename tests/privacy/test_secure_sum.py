"""Secure sums' arithmetic: fixed point mod 2⁶⁴ with its stated precision and range, X25519 key agreement, and
pairwise masks that cancel in the sum over every party and in no strict subset of them."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from raysampler.privacy import fixed_point as fp
from raysampler.privacy import secure_sum as ss


def _parties(b):
    pairs = [ss.new_key_pair() for _ in range(b)]
    publics = [p.public for p in pairs]
    return [ss.agree(p, i, publics) for i, p in enumerate(pairs)]


@pytest.mark.parametrize("b", [2, 3, 5])
def test_masks_cancel_in_the_sum_and_the_decoded_sum_is_within_the_stated_precision(b):
    rng = np.random.default_rng(b)
    keys = _parties(b)
    x = rng.normal(scale=1e4, size=(b, 4, 7))
    enc = fp.encode(x, b, rows=b)
    assert enc.ok.all()
    streams = [ss.MaskStream(k) for k in keys]
    sent = np.stack([streams[i].masked(enc.words[i]) for i in range(b)])
    np.testing.assert_array_equal(fp.total(sent), fp.total(enc.words))  # exact, mod 2⁶⁴
    err = np.abs(fp.decode(fp.total(sent)) - x.sum(axis=0))
    assert err.max() <= b * 2.0 ** -(fp.FRAC_BITS + 1) + 1e-12 * np.abs(x).sum(axis=0).max()


def test_pairwise_keys_agree_at_both_ends_and_differ_between_pairs():
    keys = _parties(4)
    for i, j in itertools.combinations(range(4), 2):
        assert keys[i].keys[j] == keys[j].keys[i] and len(keys[i].keys[j]) == 32
    assert len({keys[i].keys[j] for i, j in itertools.combinations(range(4), 2)}) == 6
    assert all(keys[i].keys[i] is None for i in range(4))


def test_a_relay_without_the_partys_own_key_is_refused():
    pairs = [ss.new_key_pair() for _ in range(3)]
    publics = [p.public for p in pairs]
    swapped = [publics[1], publics[0], publics[2]]
    with pytest.raises(ValueError, match="party 0's own key"):
        ss.agree(pairs[0], 0, swapped)


def test_masks_change_every_step_and_no_strict_subset_sums_to_its_true_partial_sum():
    b = 4
    keys = _parties(b)
    x = np.arange(b * 3, dtype=float).reshape(b, 3) - 5.0
    enc = fp.encode(x, b, rows=b)
    streams = [ss.MaskStream(k) for k in keys]
    sent = np.stack([streams[i].masked(enc.words[i]) for i in range(b)])
    again = np.stack([streams[i].masked(enc.words[i]) for i in range(b)])
    assert not np.any(sent == again)  # a fresh mask every step
    np.testing.assert_array_equal(fp.total(again), fp.total(enc.words))
    for k in range(1, b):
        for subset in itertools.combinations(range(b), k):
            part = list(subset)
            assert not np.any(fp.total(sent[part]) == fp.total(enc.words[part])), subset
    np.testing.assert_array_equal(fp.total(sent), fp.total(enc.words))


def test_a_masked_term_looks_uniform_whatever_the_term():
    """Each bit of a masked word is a fair coin, for a term of zeros as for a term of large values."""
    keys = _parties(3)
    for value in (0.0, 1e6):
        words = fp.encode(np.full((1, 20_000), value), 3).words[0]
        sent = ss.MaskStream(keys[1]).masked(words)
        bits = (sent[:, None] >> np.arange(64, dtype=np.uint64)) & np.uint64(1)
        assert np.abs(bits.mean(axis=0) - 0.5).max() < 0.02


def test_encode_flags_non_finite_and_out_of_range_terms_instead_of_wrapping():
    lim = fp.limit(4)
    assert lim == 2.0**31 / 4
    x = np.array([[1.0, 2.0], [np.nan, 0.0], [lim * 1.01, 0.0], [-lim * 0.99, 3.5]])
    enc = fp.encode(x, 4, rows=4)
    assert enc.ok.tolist() == [True, False, False, True]
    np.testing.assert_array_equal(enc.words[1], 0)
    np.testing.assert_array_equal(fp.decode(enc.words[3]), np.rint(x[3] * 2.0**32) / 2.0**32)
