"""Shards stepped as one batch: a worker process holding several shards of like shapes steps them together.

With one message per shard, a round costs a process a fixed amount of Python per shard (the local kernel's numpy
calls, the model's, the message and the reply; docs/performance.md, "The round against shards, processes and
pipelining") before any data is touched, so on small shards the round grows with
the number of shards, not with the data. An algorithm that can (`Algorithm.step_stacked`; DG-LMC's default kernels)
sends one message for all shards, and each process steps its shards in batches: shards whose data have the same
shapes but for their row counts and whose worker states stack (`algorithms.stacking.stack_key`) form a group whose
data are stacked once per run of equal row counts ((b, n, p) each, the shards' own arrays becoming views on it;
`ShardStack`), so that the n mod b shards one row longer than the others still share the batch; a round's batch is
the part of a group that shares the message's per-shard settings (its `batch_keys`, DG-LMC's N_i). The batch's
stacked state stays cached between rounds; the per-shard states are written back only when something reads them
(`capture`). The arithmetic is the per-shard step's on arrays with a leading shard axis (the model's once per
run), so a shard's numbers do not depend on its batch.

Replies of a batch (and of a process) are blocks: named tuples of arrays whose first axis runs over the shards,
joined by `join_blocks`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import numpy as np

from ..algorithms import stacking
from ..algorithms.base import Algorithm
from ..models.contract import Model, ShardStack
from ..streams import ChainNoise, StackedNoise

#: Shards larger than this (elements of X) step alone: the fixed cost per shard is then a small part of a step, and
#: stacking would copy the data
MAX_STACKED_ELEMENTS = 1 << 20


def join_blocks(parts: Sequence[tuple[np.ndarray, Any]], total: int) -> Any:
    """One block of `total` shards from blocks of some of them: `parts` holds (the shards' positions, their block), a
    block being a named tuple of arrays whose first axis runs over those shards (None fields stay None). Each field is
    one concatenation and one assignment, however many parts."""
    positions, first = parts[0]
    if len(parts) == 1 and len(positions) == total and positions[0] == 0 and positions[-1] == total - 1:
        return first  # one block over every shard, in order (positions always come increasing)
    order = np.concatenate([where for where, _ in parts])
    fields: list[Any] = []
    for f, value in enumerate(first):
        if value is None:
            fields.append(None)
            continue
        out = np.empty((total,) + value.shape[1:], dtype=value.dtype)
        out[order] = np.concatenate([block[f] for _, block in parts])
        fields.append(out)
    return type(first)(*fields)


def nonfinite_shard(block: Any) -> int | None:
    """The first shard (position along the first axis) with a non-finite number in a block's arrays, else None."""
    bad: np.ndarray | None = None
    for value in block:
        if isinstance(value, np.ndarray) and value.dtype.kind in "fc":
            rows = np.logical_not(np.isfinite(value.reshape(value.shape[0], -1)).all(axis=1))
            bad = rows if bad is None else np.logical_or(bad, rows)
    if bad is None or not bad.any():
        return None
    return int(np.argmax(bad))


class Batch:
    """Positions (in the host's shard order) stepped together this round, with their data (runs of equal row counts,
    each one stack) and each shard's share of the batch's time (its rows' fraction)."""

    def __init__(self, positions: tuple[int, ...], data: ShardStack, shards: np.ndarray) -> None:
        self.positions, self.data, self.shards = positions, data, shards
        self.where = np.asarray(positions, dtype=np.intp)
        rows = data.rows().astype(float)
        self.share = rows / rows.sum() if rows.sum() > 0 else np.full(len(rows), 1.0 / len(rows))


class ShardBatches:
    """A host's shards grouped for stepping as batches, and the batches' cached stacked states and noise streams.

    `states` and `noises` are the host's per-shard lists (shared, not copied): a position whose state sits in a
    cached stack has a stale entry in `states` (and its stream a stale position) until `sync` writes it back.
    """

    def __init__(
        self,
        algorithm: Algorithm,
        shard_ids: Sequence[int],
        data: list[tuple[np.ndarray, np.ndarray]],
        states: list[Any],
        noises: list[ChainNoise],
        alone: Callable[[int], bool],
    ) -> None:
        self.algorithm, self.states, self.noises = algorithm, states, noises
        self.shard_ids = np.asarray(shard_ids, dtype=np.int64)
        self.stacks: dict[tuple[int, ...], tuple[Any, StackedNoise]] = {}
        self._last: tuple[np.ndarray, list[Batch]] | None = None
        # groups of positions whose data and states may stack (row counts may differ); each run of consecutive
        # members with the same row count stacked once, the shards' arrays becoming views on it
        keys: dict[Hashable, list[int]] = {}
        for j, (X, y) in enumerate(data):
            key = None if alone(j) else _stack_key(states[j], X, y)
            keys.setdefault(key if key is not None else ("alone", j), []).append(j)
        #: per group: its members, and each member's (run, index in the run) in the group's run stacks
        self.groups: list[tuple[list[int], list[tuple[np.ndarray, np.ndarray]], list[tuple[int, int]]]] = []
        for members in keys.values():
            runs: list[list[int]] = []
            for j in members:
                if runs and data[runs[-1][-1]][0].shape[0] == data[j][0].shape[0]:
                    runs[-1].append(j)
                else:
                    runs.append([j])
            stacks: list[tuple[np.ndarray, np.ndarray]] = []
            where: list[tuple[int, int]] = []
            for r, run in enumerate(runs):
                if len(run) == 1:
                    X, y = data[run[0]]
                    stacks.append((X[None], y[None]))
                else:
                    Xs, ys = np.stack([data[j][0] for j in run]), np.stack([data[j][1] for j in run])
                    for k, j in enumerate(run):
                        data[j] = (Xs[k], ys[k])
                    stacks.append((Xs, ys))
                where.extend((r, k) for k in range(len(run)))
            self.groups.append((members, stacks, where))

    def batches(self, message: Any) -> list[Batch]:
        """This round's batches: each group split by the message's per-shard settings (its `batch_keys`);
        the same as the last round's while those settings do not change."""
        keys = _batch_keys(message, self.shard_ids)
        if self._last is not None and np.array_equal(keys, self._last[0]):
            return self._last[1]
        out = []
        for members, stacks, where in self.groups:
            split: dict[Hashable, list[int]] = {}
            for k, j in enumerate(members):
                split.setdefault(keys[j].item(), []).append(k)
            for ks in split.values():
                positions = tuple(members[k] for k in ks)
                data = stacks if len(ks) == len(members) else _runs_of(stacks, [where[k] for k in ks])
                out.append(Batch(positions, ShardStack(tuple(data)), self.shard_ids[list(positions)]))
        self._last = (keys.copy(), out)
        return out

    def stacked(self, positions: tuple[int, ...]) -> tuple[Any, StackedNoise]:
        """The batch's stacked state and streams: cached from the last round, or stacked now (writing back any cached
        stack that holds some of these positions first)."""
        cached = self.stacks.get(positions)
        if cached is not None:
            return cached
        wanted = set(positions)
        for other in [p for p in self.stacks if wanted.intersection(p)]:
            self._write_back(other, *self.stacks.pop(other))
        return (
            stacking.stack([self.states[j] for j in positions]),
            StackedNoise([self.noises[j] for j in positions]),
        )

    def _write_back(self, positions: tuple[int, ...], stacked: Any, noise: StackedNoise) -> None:
        noise.sync()
        for j, state in zip(positions, stacking.unstack(stacked)):
            self.states[j] = state

    def sync(self) -> None:
        """Write every cached stack back to the per-shard states and streams (they stay cached: both agree now)."""
        for positions, (stacked, noise) in self.stacks.items():
            self._write_back(positions, stacked, noise)

    def step(self, batch: Batch, message: Any, model: Model) -> tuple[Any, float]:
        """Step one batch: its reply block and the thread's CPU seconds it took."""
        stacked, noise = self.stacked(batch.positions)
        t0 = time.thread_time()
        stacked, reply = self.algorithm.step_stacked(stacked, message, batch.shards, model, batch.data, noise)
        seconds = time.thread_time() - t0
        self.stacks[batch.positions] = (stacked, noise)
        return reply, seconds

    def culprit(self, batch: Batch, message: Any, model: Model) -> tuple[int, BaseException] | None:
        """After a batch raised: step its shards one at a time from their states before the round to find the one
        that raises (position, its exception). The random streams move on, but the run stops (or rolls back to a
        checkpoint) after a failure anyway."""
        stacked, noise = self.stacked(batch.positions)
        noise.sync()
        for k, (j, alone) in enumerate(zip(batch.positions, stacking.unstack(stacked))):
            try:
                self.algorithm.step_stacked(
                    alone,
                    message,
                    batch.shards[k : k + 1],
                    model,
                    batch.data.shard(k),
                    StackedNoise([self.noises[j]]),
                )
            except Exception as exc:
                return j, exc
        return None


def _batch_keys(message: Any, shards: np.ndarray) -> np.ndarray:
    """What the shards of a batch must share in a round's message, one value per shard of `shards`: the message's
    `batch_keys(shards)` (e.g. DG-LMC's N_i), or nothing."""
    keys = getattr(message, "batch_keys", None)
    return keys(shards) if keys is not None else np.zeros(len(shards), dtype=np.int64)


def _stack_key(state: Any, X: np.ndarray, y: np.ndarray) -> Hashable | None:
    """What shards must share to stack: their worker states' structure, static parts and array shapes
    (`stacking.stack_key`), X's and y's shapes but for the rows, their dtypes, C order (so that a stacked product is
    the same BLAS call as the shard's own), and a size where stacking pays."""
    if X.size > MAX_STACKED_ELEMENTS:
        return None
    key = stacking.stack_key(state)
    if not (isinstance(X, np.ndarray) and isinstance(y, np.ndarray) and X.flags.c_contiguous and y.flags.c_contiguous):
        return None
    return (key, X.shape[1:], X.dtype.str, y.shape[1:], y.dtype.str)


def _runs_of(
    stacks: list[tuple[np.ndarray, np.ndarray]], picks: list[tuple[int, int]]
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Some shards of a group ((run, index) each, in order) as runs: consecutive picks from one run share a stack, a
    view where their indices are consecutive."""
    out: list[tuple[np.ndarray, np.ndarray]] = []
    a = 0
    while a < len(picks):
        b = a + 1
        while b < len(picks) and picks[b][0] == picks[a][0]:
            b += 1
        Xs, ys = stacks[picks[a][0]]
        idx = [k for _, k in picks[a:b]]
        if idx[-1] - idx[0] == len(idx) - 1:
            out.append((Xs[idx[0] : idx[-1] + 1], ys[idx[0] : idx[-1] + 1]))
        else:
            out.append((Xs[idx], ys[idx]))
        a = b
    return out
