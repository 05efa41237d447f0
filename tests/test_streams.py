"""Random streams: a captured position continues with exactly the same numbers, and is small (generator states,
never the buffered draws), so a checkpoint's size does not grow with the block size, the dimension or the chains'
pre-drawn noise."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from raysampler.streams import ChainNoise


def test_capture_anywhere_restores_identical_numbers():
    rng = np.random.default_rng(0)
    for _ in range(100):
        a = ChainNoise(seed=7, chains=3, role=1, dim=5, block=16)
        for _ in range(int(rng.integers(0, 10))):  # stop inside a block, at its end, across several blocks
            a.normal(int(rng.integers(1, 40)))
            a.uniform(int(rng.integers(1, 40)))
        b = ChainNoise(seed=7, chains=3, role=1, dim=5, block=16)
        b.restore(pickle.loads(pickle.dumps(a.capture())))
        for _ in range(5):
            n = int(rng.integers(1, 40))
            np.testing.assert_array_equal(a.normal(n), b.normal(n))
            np.testing.assert_array_equal(a.uniform(n), b.uniform(n))


def test_captured_position_is_small_whatever_the_buffer_holds():
    noise = ChainNoise(seed=1, chains=8, role=0, dim=200, block=256)
    noise.normal(1)  # 255 × 8 × 200 buffered normals (3.3 MB) are not part of the state
    noise.uniform(1)
    assert len(pickle.dumps(noise.capture())) < 8 * 1000


def test_state_for_other_chains_is_refused():
    state = ChainNoise(seed=1, chains=2, role=0, dim=3).capture()
    with pytest.raises(ValueError, match="chains"):
        ChainNoise(seed=1, chains=3, role=0, dim=3).restore(state)
