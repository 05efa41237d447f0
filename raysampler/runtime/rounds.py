"""The round loop's small parts: the failure that ends a chunk (`_Stop`), the rows recorded once per round
(`_Rows`), the draws and statistics a chunk keeps (`_Kept`), a pipelined round's statistics joined from its halves
(`_joined`), and the check that a round's replies are finite (`_nonfinite`, `_finite`).

They carry no run state of their own; `Coordinator` (`coordinator.py`) uses them every round.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import Failure
from .batches import nonfinite_shard


class _Stop(Exception):
    """A failure that ends the chunk (its round filled in by `Coordinator.run`)."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.message)
        self.failure = failure


class _Rows:
    """A growing (n, width) float array, one row appended per round (rows in a preallocated block, not tuples)."""

    def __init__(self, width: int) -> None:
        self.data = np.empty((256, width))
        self.n = 0

    def append(self, row: Sequence[float]) -> None:
        if self.n == len(self.data):
            self.data = np.concatenate([self.data, np.empty_like(self.data)])
        self.data[self.n] = row
        self.n += 1

    def array(self) -> np.ndarray:
        return self.data[: self.n].copy()


class _Kept:
    """The draws and per-chain statistics a chunk keeps."""

    def __init__(self) -> None:
        self.theta: list[np.ndarray] = []
        self.stats: dict[str, list[np.ndarray]] = {}


def _joined(first: dict[str, np.ndarray], second: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A round's per-chain statistics from its two halves' (chain groups in order)."""
    return {k: np.concatenate([first[k], second[k]]) for k in first}


def _nonfinite(replies: Any) -> int | None:
    """The first shard whose reply holds a non-finite number (replies one per shard, or one block), else None."""
    if not isinstance(replies, list):
        return nonfinite_shard(replies)
    return next((i for i, r in enumerate(replies) if not _finite(r)), None)


def _finite(obj: Any) -> bool:
    """True if every array inside a reply (nested tuples/lists) is finite. A loop, not a generator: it runs on every
    field of every shard's reply each round."""
    if obj is None:
        return True
    if isinstance(obj, np.ndarray):
        return obj.dtype.kind not in "fc" or bool(np.isfinite(obj).all())
    if isinstance(obj, (tuple, list)):
        for o in obj:  # noqa: SIM110  (a loop: no generator per field, per reply, per round)
            if not _finite(o):
                return False
        return True
    if isinstance(obj, float):
        return bool(np.isfinite(obj))
    return True
