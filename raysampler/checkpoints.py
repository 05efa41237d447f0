"""A run's durable directory: its draws in chunks and the checkpoint that goes with them.

Layout (NumPy reads every draw file directly):
  draws/<start:012d>.npy        draws [start, start + n) of every chain, shape (n, chains, d), float64
  draws/<start:012d>.stats.npz  their per-draw sample stats (name → (n, chains))
  checkpoint.pkl                the run's whole state (`RunState`) at the end of the last stored chunk
  manifest.pkl                  what the run is, so `rs.resume` can rebuild it (Python API runs)

Each chunk is written draws first, then its checkpoint, each to a temporary name, fsynced and renamed. The
checkpoint is the commit point: it records how many draws per chain are stored (`draws_kept`); draw files at or
past that count (a crash between the two writes) are dropped when the run resumes, and the resumed run writes
them again, identically. So the stored draws and the checkpoint always agree, and a resumed run's draws are
exactly those of an uninterrupted one. A checkpoint is state only: chain states and random-stream positions,
never data.
"""

from __future__ import annotations

import bisect
import os
import pickle
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from .algorithms import Algorithm, get_algorithm
from .enums import Balance, Executor, TransportKind
from .options import ExecutionOptions, RunOptions
from .runtime.contracts import RunState

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


class RunDirectory:
    """One run's draws and checkpoint under `path` (created on first write)."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)

    @property
    def draws_dir(self) -> Path:
        return self.path / "draws"

    # --- draws ---------------------------------------------------------------------------------------------

    def append(self, start: int, theta: np.ndarray, stats: dict[str, np.ndarray] | None = None) -> None:
        """Durably write draws [start, start + len(theta)) (theta: (n, chains, d)) and their sample stats."""
        folder = self.draws_dir
        folder.mkdir(parents=True, exist_ok=True)
        name = f"{start:012d}"
        if stats:
            arrays: dict[str, Any] = {k: np.asarray(v) for k, v in stats.items()}
            atomic_write(folder / f"{name}.stats.npz", lambda f: np.savez(f, **arrays))
        atomic_write(folder / f"{name}.npy", lambda f: np.save(f, np.ascontiguousarray(theta, dtype=np.float64)))

    def read(self, start: int, stop: int) -> np.ndarray:
        """Draws [start, stop) of every chain, shape (stop − start, chains, d); callers bound stop by what is
        committed (the checkpoint's or the record's count)."""
        parts = []
        chunks = self.chunks()
        i = max(0, bisect.bisect_right([first for first, _ in chunks], start) - 1)  # skip earlier chunks unopened
        for first, path in chunks[i:]:
            arr = np.load(path, mmap_mode="r")
            lo, hi = max(start, first), min(stop, first + len(arr))
            if lo < hi:
                parts.append(np.asarray(arr[lo - first : hi - first]))
            if first >= stop:
                break
        if not parts:
            return np.empty((0, 0, 0))
        return np.concatenate(parts)

    def read_column(self, start: int, stop: int, step: int, column: int) -> np.ndarray:
        """Coordinate `column` of draws start, start + step, … below stop, every chain: (m, chains). Reads only
        those values (memory-mapped chunks), so a thinned trace of a long run stays cheap."""
        parts = []
        chunks = self.chunks()
        i = max(0, bisect.bisect_right([first for first, _ in chunks], start) - 1)
        for first, path in chunks[i:]:
            if first >= stop:
                break
            arr = np.load(path, mmap_mode="r")
            lo, hi = max(start, first), min(stop, first + len(arr))
            lo += (start - lo) % step  # the first index of the thinned sequence in this chunk
            if lo < hi:
                parts.append(np.array(arr[lo - first : hi - first : step, :, column], dtype=np.float64))
        if not parts:
            return np.empty((0, 0))
        return np.concatenate(parts)

    def read_stats(self, stop: int) -> dict[str, np.ndarray]:
        """Sample stats of draws [0, stop) (name → (stop, chains)); names missing from any chunk are dropped."""
        out: dict[str, list[np.ndarray]] = {}
        count = 0
        for first, path in self.chunks():
            if first >= stop:
                break
            side = path.with_suffix(".stats.npz")
            if not side.exists():
                return {}
            with np.load(side) as z:
                for k in z.files:
                    out.setdefault(k, []).append(z[k][: stop - first])
            count += 1
        return {k: np.concatenate(v) for k, v in out.items() if len(v) == count}

    def chunks(self) -> list[tuple[int, Path]]:
        """(first draw index, file) of every draw chunk, in order."""
        if not self.draws_dir.exists():
            return []
        found = [
            (int(p.name[:12]), p) for p in self.draws_dir.iterdir() if p.name.endswith(".npy") and p.name[:12].isdigit()
        ]
        return sorted(found)

    def drop_from(self, start: int) -> None:
        """Remove draw chunks beginning at or after `start` (written past the last checkpoint)."""
        for first, path in self.chunks():
            if first >= start:
                path.unlink(missing_ok=True)
                path.with_suffix(".stats.npz").unlink(missing_ok=True)

    # --- checkpoint ----------------------------------------------------------------------------------------

    def save_checkpoint(self, state: RunState) -> None:
        """Durably replace the checkpoint with `state` (write the chunk's draws first)."""
        self.path.mkdir(parents=True, exist_ok=True)
        atomic_write(self.path / CHECKPOINT, lambda f: pickle.dump(state, f, protocol=5))

    def has_checkpoint(self) -> bool:
        return (self.path / CHECKPOINT).exists()

    def load_checkpoint(self) -> RunState:
        """The last checkpoint; CheckpointError with the reason if it is missing, unreadable or of another layout."""
        path = self.path / CHECKPOINT
        if not path.exists():
            raise CheckpointError(f"no checkpoint at {path}")
        try:
            with open(path, "rb") as f:
                state = pickle.load(f)
        except Exception as exc:
            raise CheckpointError(
                f"the checkpoint {path} cannot be read ({type(exc).__name__}: {exc}); the run "
                "cannot resume (it was written by an incompatible raysampler, or is damaged)"
            ) from None
        if not isinstance(state, RunState) or getattr(state, "version", None) != RunState.VERSION:
            raise CheckpointError(
                f"the checkpoint {path} has layout version {getattr(state, 'version', None)}; this "
                f"raysampler resumes version {RunState.VERSION}"
            )
        return state

    # --- manifest ------------------------------------------------------------------------------------------

    def save_manifest(self, manifest: Manifest) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        atomic_write(self.path / MANIFEST, lambda f: pickle.dump(manifest, f, protocol=5))

    def load_manifest(self) -> Manifest:
        path = self.path / MANIFEST
        try:
            with open(path, "rb") as f:
                manifest = pickle.load(f)
        except FileNotFoundError:
            raise CheckpointError(
                f"{self.path} holds no run (no {MANIFEST}): pass the checkpoint_dir of a run "
                "started with rs.sample(..., checkpoint_dir=...)"
            ) from None
        except Exception as exc:
            raise CheckpointError(f"{path} cannot be read ({type(exc).__name__}: {exc})") from None
        if not isinstance(manifest, Manifest):
            raise CheckpointError(f"{path} is not a raysampler run manifest")
        if isinstance(manifest.algorithm, str):  # written before manifests held the algorithm: name and params
            params = manifest.__dict__.pop("params", {})
            object.__setattr__(manifest, "algorithm", get_algorithm(manifest.algorithm, **params))
        return manifest

    # --- housekeeping --------------------------------------------------------------------------------------

    def size_bytes(self) -> int:
        """Bytes of everything stored for the run (draws, stats, checkpoint, manifest)."""
        if not self.path.exists():
            return 0
        return sum(p.stat().st_size for p in self.path.rglob("*") if p.is_file())

    def delete(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def atomic_write(path: Path, write: Callable[[BinaryIO], None]) -> None:
    """Write `path` through a temporary file, fsynced and renamed, so readers see all of it or nothing."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
