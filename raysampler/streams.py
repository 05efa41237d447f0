"""Per-chain random streams, derived from one seed so every executor draws the same numbers.

Stream (chain c, role r, kind k) is `SeedSequence(seed, spawn_key=(c, r, k))`: role 0 is the
coordinator, role i + 1 is shard i. Chain c's numbers do not depend on how many chains run, or on
which process runs them. Draws are taken in blocks so K chains cost one generator call per block.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

_NORMAL, _UNIFORM = 0, 1


class Block(NamedTuple):
    """One block of draws still (partly) unused: every chain's generator state before it was drawn, and its rows."""

    states: tuple[dict[str, Any], ...]
    rows: int


class NoiseState(NamedTuple):
    """Where a `ChainNoise` stands, in a few hundred bytes per chain: every generator's state, and the blocks drawn
    but not used up (as the states that redraw them), with how many rows of the oldest were used. A checkpoint
    holds this, never the buffered numbers themselves (they are regenerated on restore, bit for bit)."""

    normal: tuple[dict[str, Any], ...]
    uniform: tuple[dict[str, Any], ...]
    normal_blocks: tuple[Block, ...]
    normal_used: int
    uniform_blocks: tuple[Block, ...]
    uniform_used: int


class _Buffered:
    """Draws from K per-chain generators taken `block` rows at a time; remembers how to redraw what it holds."""

    def __init__(
        self,
        gens: list[np.random.Generator],
        draw: Callable[[np.random.Generator, int], np.ndarray],
        empty: np.ndarray,
        block: int,
    ) -> None:
        self.gens, self.draw, self.block = gens, draw, block
        self.buf = empty
        self.blocks: list[Block] = []
        self.used = 0  # rows of blocks[0] already handed out

    def take(self, n: int) -> np.ndarray:
        if n > len(self.buf):
            self._append(max(n, self.block))
        out, self.buf = self.buf[:n], self.buf[n:]
        self._advance(n)
        return out

    def _advance(self, n: int) -> None:
        """Count n more rows used (the buffer itself is sliced by the caller)."""
        self.used += n
        while self.blocks and self.used >= self.blocks[0].rows:
            self.used -= self.blocks.pop(0).rows

    def _append(self, rows: int) -> None:
        self.blocks.append(Block(self._states(), rows))
        fresh = np.stack([self.draw(g, rows) for g in self.gens], axis=1)
        self.buf = np.concatenate([self.buf, fresh]) if len(self.buf) else fresh

    def _states(self) -> tuple[dict[str, Any], ...]:
        return tuple(dict(g.bit_generator.state) for g in self.gens)

    def capture(self) -> tuple[tuple[dict[str, Any], ...], tuple[Block, ...], int]:
        return self._states(), tuple(self.blocks), self.used

    def restore(self, states: tuple[dict[str, Any], ...], blocks: tuple[Block, ...], used: int) -> None:
        """Redraw the pending blocks from their states, drop the used rows, then continue from `states`."""
        self.buf, self.blocks, self.used = self.buf[:0], [], 0
        for b in blocks:
            for g, st in zip(self.gens, b.states, strict=True):
                g.bit_generator.state = st
            self._append(b.rows)
            self.blocks[-1] = b
        self.buf, self.used = self.buf[used:], used
        for g, st in zip(self.gens, states, strict=True):
            g.bit_generator.state = st


class ChainNoise:
    """Gaussian (n, K, dim) and uniform (n, K) draws for K chains from independent per-chain streams."""

    def __init__(self, seed: int, chains: int, role: int, dim: int, block: int = 256) -> None:
        self.dim = dim
        self.block = block
        self._normal = _Buffered(
            [_generator(seed, c, role, _NORMAL) for c in range(chains)],
            lambda g, rows: g.standard_normal((rows, dim)),
            np.empty((0, chains, dim)),
            block,
        )
        self._uniform = _Buffered(
            [_generator(seed, c, role, _UNIFORM) for c in range(chains)],
            lambda g, rows: g.random(rows),
            np.empty((0, chains)),
            block,
        )

    def normal(self, n: int) -> np.ndarray:
        """n fresh standard normal (K, dim) arrays, stacked: shape (n, K, dim)."""
        return self._normal.take(n)

    def uniform(self, n: int) -> np.ndarray:
        """n fresh Uniform(0, 1) draws per chain: shape (n, K)."""
        return self._uniform.take(n)

    def capture(self) -> NoiseState:
        """The streams' position, to continue later with exactly the same numbers (`restore`)."""
        normal, nblocks, nused = self._normal.capture()
        uniform, ublocks, uused = self._uniform.capture()
        return NoiseState(normal, uniform, nblocks, nused, ublocks, uused)

    def restore(self, state: NoiseState) -> None:
        """Continue from a captured position (same seed, chains and dimension)."""
        if len(state.normal) != len(self._normal.gens) or len(state.uniform) != len(self._uniform.gens):
            raise ValueError("noise state does not fit these streams (another number of chains)")
        self._normal.restore(state.normal, state.normal_blocks, state.normal_used)
        self._uniform.restore(state.uniform, state.uniform_blocks, state.uniform_used)


def _generator(seed: int, chain: int, role: int, kind: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed, spawn_key=(chain, role, kind))))


class _Joint:
    """The same stream kind of B `_Buffered` taken together: their buffered rows as one (rows, B, ...) array while
    they stay aligned (the same rows left), the members' own positions brought up to date at `sync`."""

    def __init__(self, parts: list[_Buffered]) -> None:
        self.parts = parts
        self.pending = 0
        self.buf: np.ndarray | None = None
        self._join()

    def _join(self) -> None:
        if len({len(p.buf) for p in self.parts}) == 1:
            self.buf = np.stack([p.buf for p in self.parts], axis=1)
            for p in self.parts:  # the rows live here now; `sync` hands each its column back
                p.buf = np.empty((0,) + p.buf.shape[1:])
        else:
            self.buf = None

    def take(self, n: int) -> np.ndarray:
        if self.buf is None or n > len(self.buf):  # a refill (or misaligned members): each member draws itself
            self.sync()
            out = np.stack([p.take(n) for p in self.parts], axis=1)
            self._join()
            return out
        out, self.buf = self.buf[:n], self.buf[n:]
        self.pending += n
        return out

    def sync(self) -> None:
        """Give every member its remaining rows and count the rows taken since the last sync as its own."""
        if self.buf is not None:
            for j, p in enumerate(self.parts):
                p.buf = self.buf[:, j]
                p._advance(self.pending)
            self.buf = None
        self.pending = 0


class StackedNoise:
    """The draws of B shards' `ChainNoise` streams taken together, bit for bit what each gives alone: normal
    (n, B, K, dim), uniform (n, B, K). Each member's own position is brought up to date by `sync` (before it is
    captured or used alone again)."""

    def __init__(self, members: list[ChainNoise]) -> None:
        self.members = members
        self._normal = _Joint([m._normal for m in members])
        self._uniform = _Joint([m._uniform for m in members])

    def normal(self, n: int) -> np.ndarray:
        return self._normal.take(n)

    def uniform(self, n: int) -> np.ndarray:
        return self._uniform.take(n)

    def sync(self) -> None:
        self._normal.sync()
        self._uniform.sync()
