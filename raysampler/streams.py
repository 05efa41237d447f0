"""Per-chain random streams, derived from one seed so every executor draws the same numbers.

Stream (chain c, role r, kind k) is `SeedSequence(seed, spawn_key=(c, r, k))`: role 0 is the
coordinator, role i + 1 is shard i. Chain c's numbers do not depend on how many chains run, or on
which process runs them. Draws are taken in blocks so K chains cost one generator call per block.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

_NORMAL, _UNIFORM = 0, 1


class NoiseState(NamedTuple):
    """Where a `ChainNoise` stands: every chain's generator states and the draws already made but not yet used."""

    normal: tuple[dict[str, Any], ...]
    uniform: tuple[dict[str, Any], ...]
    normal_buffer: np.ndarray
    uniform_buffer: np.ndarray


class ChainNoise:
    """Gaussian (n, K, dim) and uniform (n, K) draws for K chains from independent per-chain streams."""

    def __init__(self, seed: int, chains: int, role: int, dim: int, block: int = 256) -> None:
        self.dim = dim
        self.block = block
        self._normal_gens = [_generator(seed, c, role, _NORMAL) for c in range(chains)]
        self._uniform_gens = [_generator(seed, c, role, _UNIFORM) for c in range(chains)]
        self._nbuf = np.empty((0, chains, dim))
        self._ubuf = np.empty((0, chains))

    def normal(self, n: int) -> np.ndarray:
        """n fresh standard normal (K, dim) arrays, stacked: shape (n, K, dim)."""
        if n > len(self._nbuf):
            fresh = np.stack([g.standard_normal((max(n, self.block), self.dim)) for g in self._normal_gens], axis=1)
            self._nbuf = np.concatenate([self._nbuf, fresh]) if len(self._nbuf) else fresh
        out, self._nbuf = self._nbuf[:n], self._nbuf[n:]
        return out

    def capture(self) -> NoiseState:
        """The streams' position, to continue later with exactly the same numbers (`restore`)."""
        return NoiseState(
            tuple(dict(g.bit_generator.state) for g in self._normal_gens),
            tuple(dict(g.bit_generator.state) for g in self._uniform_gens),
            self._nbuf.copy(),
            self._ubuf.copy(),
        )

    def restore(self, state: NoiseState) -> None:
        """Continue from a captured position (same seed, chains and dimension)."""
        if len(state.normal) != len(self._normal_gens) or state.normal_buffer.shape[1:] != self._nbuf.shape[1:]:
            raise ValueError("noise state does not fit these streams (other number of chains or dimension)")
        for g, st in zip(self._normal_gens, state.normal):
            g.bit_generator.state = st
        for g, st in zip(self._uniform_gens, state.uniform):
            g.bit_generator.state = st
        self._nbuf, self._ubuf = state.normal_buffer.copy(), state.uniform_buffer.copy()

    def uniform(self, n: int) -> np.ndarray:
        """n fresh Uniform(0, 1) draws per chain: shape (n, K)."""
        if n > len(self._ubuf):
            fresh = np.stack([g.random(max(n, self.block)) for g in self._uniform_gens], axis=1)
            self._ubuf = np.concatenate([self._ubuf, fresh]) if len(self._ubuf) else fresh
        out, self._ubuf = self._ubuf[:n], self._ubuf[n:]
        return out


def _generator(seed: int, chain: int, role: int, kind: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed, spawn_key=(chain, role, kind))))
