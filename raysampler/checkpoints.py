"""A run's durable directory: its draws in chunks and the checkpoint that goes with them, on local disk or object
storage (`raysampler.storage`).

Layout (NumPy reads every draw file directly):
  draws/<start:012d>.npy        draws [start, start + n) of every chain, shape (n, chains, d), float64
  draws/<start:012d>.stats.npz  their per-draw sample stats (name → (n, chains))
  checkpoint.pkl                the run's whole state (`RunState`) at the end of the last stored chunk
  manifest.pkl                  what the run is, so `rs.resume` can rebuild it (Python API runs)

Each chunk is written draws first, then its checkpoint, each atomically (a local file through a temporary name,
fsynced and renamed; an object in one upload). The checkpoint is the commit point: it records how many draws per
chain are stored (`draws_kept`); draw files at or past that count (a crash between the two writes) are dropped when
the run resumes, and the resumed run writes them again, identically. So the stored draws and the checkpoint always
agree, and a resumed run's draws are exactly those of an uninterrupted one. A checkpoint is state only: chain states
and random-stream positions, never data.

Writers with an epoch. A service replica drives a run under a lease whose epoch (a fencing token) grows with every
takeover; its files carry that epoch (`draws/<start>.e<epoch>.npy`, `checkpoint.e<epoch>.pkl`; epoch 0 is the plain
layout above, the Python API's). A replica that lost its lease may still finish a write it had begun, but only to
names of its own, older epoch: a reader takes each draw from the chunk of the highest epoch that covers it (a chunk
reaches to the next chunk of its epoch), and a new driver resumes from the checkpoint of the highest epoch, dropping
whatever does not belong to it. So a late write of a replica that lost its lease changes nothing anyone reads.
"""

from __future__ import annotations

import bisect
import io
import os
import pickle
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .algorithms import Algorithm, get_algorithm
from .enums import Balance, Executor, TransportKind
from .options import ExecutionOptions, RunOptions
from .runtime.contracts import RunState
from .storage import Storage, read_npz, storage_at

CHECKPOINT = "checkpoint.pkl"
MANIFEST = "manifest.pkl"


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be used: unreadable, from an incompatible version, or missing where draws exist."""


@dataclass(frozen=True)
class Manifest:
    """What a Python-API run is, for `rs.resume`: the model, the algorithm with its parameters, the run's options
    and executor settings, and its shards where they can be named (file shards; in-memory shards are None and must
    be passed again)."""

    model: Any
    algorithm: Algorithm
    options: RunOptions
    executor: Executor
    transport: TransportKind
    max_actors: int | None
    balance: Balance
    shards: tuple[Any, ...]

    @classmethod
    def of(
        cls, model: Any, algorithm: Algorithm, options: RunOptions, execution: ExecutionOptions, shards: tuple[Any, ...]
    ) -> Manifest:
        """The manifest of a run (the parts of `execution` that outlive its process: no callback, no directory)."""
        e = execution
        return cls(model, algorithm, options, e.executor, e.transport, e.max_actors, e.balance, shards)

    def execution(self, checkpoint_dir: str | os.PathLike, executor: Executor | str | None = None) -> ExecutionOptions:
        """How the resumed run executes: as the original run (or on `executor`), storing into `checkpoint_dir`."""
        return ExecutionOptions(
            executor=executor or self.executor,  # type: ignore[arg-type]  # parsed by ExecutionOptions
            transport=self.transport,
            balance=self.balance,
            max_actors=self.max_actors,
            checkpoint_dir=checkpoint_dir,
        )


_CHUNK = re.compile(r"^(\d{12})(?:\.e(\d+))?\.npy$")
_CHECKPOINT = re.compile(r"^checkpoint(?:\.e(\d+))?\.pkl$")


@dataclass(frozen=True)
class Chunk:
    """One draw file: its first draw index, the epoch that wrote it, and its name below the run directory."""

    start: int
    epoch: int
    name: str

    @property
    def stats_name(self) -> str:
        return self.name[: -len(".npy")] + ".stats.npz"


@dataclass(frozen=True)
class _Segment:
    """Draws [lo, hi) are read from `chunk` (hi may be unbounded: the chunk's own length ends it)."""

    lo: int
    hi: float
    chunk: Chunk


class RunDirectory:
    """One run's draws and checkpoint at `location` (a path or an object-storage URI; created on first write).

    `epoch` names what this writer writes (0: the plain layout); `fence`, when given, is called before every write
    and raises to refuse it (a service replica whose lease is gone)."""

    def __init__(
        self,
        location: str | os.PathLike | Storage,
        epoch: int = 0,
        fence: Callable[[], None] | None = None,
    ) -> None:
        self.storage = location if isinstance(location, Storage) else storage_at(location)
        self.epoch, self.fence = epoch, fence

    @property
    def location(self) -> str:
        return self.storage.location

    def writer(self, epoch: int, fence: Callable[[], None] | None = None) -> RunDirectory:
        """The same directory, written by epoch `epoch` behind `fence`."""
        return RunDirectory(self.storage, epoch, fence)

    def _suffix(self) -> str:
        return "" if self.epoch == 0 else f".e{self.epoch}"

    def _write(self, name: str, data: bytes) -> None:
        if self.fence is not None:
            self.fence()
        self.storage.write(name, data)

    # --- draws ---------------------------------------------------------------------------------------------

    def append(self, start: int, theta: np.ndarray, stats: dict[str, np.ndarray] | None = None) -> None:
        """Durably write draws [start, start + len(theta)) (theta: (n, chains, d)) and their sample stats."""
        name = f"draws/{start:012d}{self._suffix()}"
        if stats:
            buf = io.BytesIO()
            arrays: dict[str, Any] = {k: np.asarray(v) for k, v in stats.items()}
            np.savez(buf, **arrays)
            self._write(f"{name}.stats.npz", buf.getvalue())
        buf = io.BytesIO()
        np.save(buf, np.ascontiguousarray(theta, dtype=np.float64))
        self._write(f"{name}.npy", buf.getvalue())

    def chunks(self) -> list[Chunk]:
        """Every draw file, by first draw index then epoch."""
        found = []
        for name in self.storage.list("draws"):
            m = _CHUNK.match(name)
            if m:
                found.append(Chunk(int(m.group(1)), int(m.group(2) or 0), f"draws/{name}"))
        return sorted(found, key=lambda c: (c.start, c.epoch))

    def _segments(self) -> list[_Segment]:
        """Which chunk each draw is read from: of the chunks covering it (a chunk reaches to the next chunk of its own
        epoch), the one of the highest epoch; consecutive draws of one chunk form one segment. A bisection per epoch
        and chunk start: a long run's thousands of chunks stay cheap, and epochs are few (one per takeover)."""
        chunks = self.chunks()
        by_epoch: dict[int, list[Chunk]] = {}
        for c in chunks:
            by_epoch.setdefault(c.epoch, []).append(c)
        epochs = sorted(by_epoch, reverse=True)
        starts = {e: [c.start for c in by_epoch[e]] for e in epochs}
        points = sorted({c.start for c in chunks})
        out: list[_Segment] = []
        for lo, hi in zip(points, [*points[1:], float("inf")]):
            best = None
            for e in epochs:  # the highest epoch whose chunks cover `lo`
                i = bisect.bisect_right(starts[e], lo) - 1
                if i >= 0 and (i + 1 == len(starts[e]) or lo < starts[e][i + 1]):
                    best = by_epoch[e][i]
                    break
            if best is None:
                continue
            if out and out[-1].chunk == best and out[-1].hi == lo:
                out[-1] = _Segment(out[-1].lo, hi, best)
            else:
                out.append(_Segment(lo, hi, best))
        return out

    def read(self, start: int, stop: int) -> np.ndarray:
        """Draws [start, stop) of every chain, shape (stop − start, chains, d); callers bound stop by what is
        committed (the checkpoint's or the record's count)."""
        parts = []
        for seg in self._segments():
            lo, hi = max(start, seg.lo), min(stop, seg.hi)
            if lo >= hi:
                continue
            arr = self.storage.array(seg.chunk.name)
            first = seg.chunk.start
            parts.append(np.asarray(arr[lo - first : int(hi) - first]))
        if not parts:
            return np.empty((0, 0, 0))
        return np.concatenate(parts)

    def read_column(self, start: int, stop: int, step: int, column: int) -> np.ndarray:
        """Coordinate `column` of draws start, start + step, … below stop, every chain: (m, chains). Reads only
        those values where the chunks are local (memory-mapped), so a thinned trace of a long run stays cheap."""
        parts = []
        for seg in self._segments():
            lo, hi = max(start, seg.lo), min(stop, seg.hi)
            lo += (start - lo) % step  # the first index of the thinned sequence in this segment
            if lo >= hi:
                continue
            arr = self.storage.array(seg.chunk.name)
            first = seg.chunk.start
            parts.append(np.array(arr[lo - first : int(hi) - first : step, :, column], dtype=np.float64))
        if not parts:
            return np.empty((0, 0))
        return np.concatenate(parts)

    def read_stats(self, stop: int) -> dict[str, np.ndarray]:
        """Sample stats of draws [0, stop) (name → (stop, chains)); names missing from any chunk are dropped."""
        out: dict[str, list[np.ndarray]] = {}
        count = 0
        for seg in self._segments():
            if seg.lo >= stop:
                break
            try:
                data = self.storage.read(seg.chunk.stats_name)
            except FileNotFoundError:
                return {}
            first, hi = seg.chunk.start, min(stop, seg.hi)
            for k, a in read_npz(data).items():
                out.setdefault(k, []).append(a[seg.lo - first : int(hi) - first])
            count += 1
        return {k: np.concatenate(v) for k, v in out.items() if len(v) == count}

    def drop_from(self, start: int) -> None:
        """Remove draw chunks beginning at or after `start` (written past the last checkpoint)."""
        for c in self.chunks():
            if c.start >= start:
                self._remove_chunk(c)

    def _remove_chunk(self, c: Chunk) -> None:
        if self.fence is not None:
            self.fence()
        self.storage.remove(c.name)
        self.storage.remove(c.stats_name)

    # --- checkpoint ----------------------------------------------------------------------------------------

    def save_checkpoint(self, state: RunState) -> None:
        """Durably replace this epoch's checkpoint with `state` (write the chunk's draws first)."""
        self._write(f"checkpoint{self._suffix()}.pkl", pickle.dumps(state, protocol=5))

    def _checkpoints(self) -> list[tuple[int, str]]:
        """(epoch, name) of every checkpoint file, highest epoch last."""
        found = [(int(m.group(1) or 0), name) for name in self.storage.list() if (m := _CHECKPOINT.match(name))]
        return sorted(found)

    def has_checkpoint(self) -> bool:
        return bool(self._checkpoints())

    def load_checkpoint(self) -> RunState:
        """The checkpoint of the highest epoch; CheckpointError with the reason if there is none, or it is
        unreadable or of another layout."""
        found = self._checkpoints()
        if not found:
            raise CheckpointError(f"no checkpoint at {self.location}")
        return self._load_checkpoint(found[-1][1])

    def _load_checkpoint(self, name: str) -> RunState:
        where = f"{self.location.rstrip('/')}/{name}"
        try:
            state = pickle.loads(self.storage.read(name))
        except Exception as exc:
            raise CheckpointError(
                f"the checkpoint {where} cannot be read ({type(exc).__name__}: {exc}); the run "
                "cannot resume (it was written by an incompatible raysampler, or is damaged)"
            ) from None
        if not isinstance(state, RunState) or getattr(state, "version", None) != RunState.VERSION:
            raise CheckpointError(
                f"the checkpoint {where} has layout version {getattr(state, 'version', None)}; this "
                f"raysampler resumes version {RunState.VERSION}"
            )
        return state

    def rollback(self) -> RunState | None:
        """Prepare a resume: the checkpoint of the highest epoch (None if there is none), with every draw file that
        is not part of it removed: begun at or past its `draws_kept`, written by a later epoch that stored no
        checkpoint, or shadowed (a later epoch wrote from an earlier draw on: late writes of a replica that lost
        its lease). CheckpointError if the checkpoint cannot be used."""
        found = self._checkpoints()
        if not found:
            state, epoch, kept = None, -1, 0
        else:
            epoch, name = found[-1]
            state = self._load_checkpoint(name)
            kept = state.draws_kept
        chunks = self.chunks()
        first: dict[int, int] = {}  # where each epoch's draws begin
        for c in chunks:
            first.setdefault(c.epoch, c.start)
        for c in chunks:
            later = any(e > c.epoch and start <= c.start for e, start in first.items() if e <= max(epoch, 0))
            if c.start >= kept or c.epoch > max(epoch, 0) or later:
                self._remove_chunk(c)
        return state

    # --- manifest ------------------------------------------------------------------------------------------

    def save_manifest(self, manifest: Manifest) -> None:
        self._write(MANIFEST, pickle.dumps(manifest, protocol=5))

    def load_manifest(self) -> Manifest:
        where = f"{self.location.rstrip('/')}/{MANIFEST}"
        try:
            manifest = pickle.loads(self.storage.read(MANIFEST))
        except FileNotFoundError:
            raise CheckpointError(
                f"{self.location} holds no run (no {MANIFEST}): pass the checkpoint_dir of a run "
                "started with rs.sample(..., checkpoint_dir=...)"
            ) from None
        except Exception as exc:
            raise CheckpointError(f"{where} cannot be read ({type(exc).__name__}: {exc})") from None
        if not isinstance(manifest, Manifest):
            raise CheckpointError(f"{where} is not a raysampler run manifest")
        if isinstance(manifest.algorithm, str):  # written before manifests held the algorithm: name and params
            params = manifest.__dict__.pop("params", {})
            object.__setattr__(manifest, "algorithm", get_algorithm(manifest.algorithm, **params))
        return manifest

    # --- other files, housekeeping -------------------------------------------------------------------------

    def read_file(self, name: str) -> bytes:
        """A file kept beside the draws (e.g. a stored summary); FileNotFoundError if absent."""
        return self.storage.read(name)

    def write_file(self, name: str, data: bytes) -> None:
        """Keep `data` beside the draws as `name` (derived files: no fence, anyone may write them)."""
        self.storage.write(name, data)

    def remove_files(self, prefix: str) -> None:
        """Remove the top-level files whose names start with `prefix`."""
        for name in self.storage.list():
            if name.startswith(prefix):
                self.storage.remove(name)

    def size_bytes(self) -> int:
        """Bytes of everything stored for the run (draws, stats, checkpoint, manifest)."""
        return self.storage.size_bytes()

    def delete(self) -> None:
        self.storage.remove_all()


def as_run_directory(where: str | os.PathLike | RunDirectory) -> RunDirectory:
    """`where` as a RunDirectory (a path or URI is opened with the plain, epoch-0 layout)."""
    return where if isinstance(where, RunDirectory) else RunDirectory(where)
