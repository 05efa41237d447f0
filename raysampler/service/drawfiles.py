"""Chunked draw files per run, in NumPy's .npy format (np.load reads each chunk directly).

Layout: <root>/<tenant>/<run id>/draws/<start:012d>.npy holds draws [start, start + n) of every chain, shape
(n, chains, d), float64; a sibling <start:012d>.stats.npz holds the per-draw sample stats (name → (n, chains)).
A chunk is written to a temporary name, fsynced and renamed, *then* the run record's `draws_stored` is raised:
readers only read below `draws_stored`, so a chunk is visible only once it is complete and durable. Files past
`draws_stored` (a crash between rename and record update) are ignored and overwritten by a resumed writer.
"""
from __future__ import annotations

import bisect
import os
import shutil
from pathlib import Path
from typing import Any, BinaryIO, Callable

import numpy as np


class DrawFiles:
    """Append and read one run's draws; `root` is the service's runs directory."""

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = Path(root)

    def run_dir(self, tenant: str, run_id: str) -> Path:
        return self.root / tenant / run_id

    def append(self, tenant: str, run_id: str, start: int, theta: np.ndarray,
               stats: dict[str, np.ndarray] | None = None) -> None:
        """Durably write draws [start, start + len(theta)) (theta: (n, chains, d))."""
        folder = self.run_dir(tenant, run_id) / "draws"
        folder.mkdir(parents=True, exist_ok=True)
        name = f"{start:012d}"
        if stats:
            arrays: dict[str, Any] = {k: np.asarray(v) for k, v in stats.items()}
            _atomic(folder / f"{name}.stats.npz", lambda f: np.savez(f, **arrays))
        _atomic(folder / f"{name}.npy", lambda f: np.save(f, np.ascontiguousarray(theta, dtype=np.float64)))

    def read(self, tenant: str, run_id: str, start: int, stop: int) -> np.ndarray:
        """Draws [start, stop) of every chain, shape (stop − start, chains, d); callers bound stop by draws_stored."""
        parts = []
        chunks = self._chunks(tenant, run_id)
        i = max(0, bisect.bisect_right([first for first, _ in chunks], start) - 1)  # skip earlier chunks unopened
        for first, path in chunks[i:]:
            arr = np.load(path, mmap_mode="r")
            lo, hi = max(start, first), min(stop, first + len(arr))
            if lo < hi:
                parts.append(np.asarray(arr[lo - first:hi - first]))
            if first >= stop:
                break
        if not parts:
            return np.empty((0, 0, 0))
        return np.concatenate(parts)

    def read_stats(self, tenant: str, run_id: str, stop: int) -> dict[str, np.ndarray]:
        """Sample stats of draws [0, stop) (name → (stop, chains)); names missing from any chunk are dropped."""
        out: dict[str, list[np.ndarray]] = {}
        count = 0
        for first, path in self._chunks(tenant, run_id):
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

    def delete(self, tenant: str, run_id: str) -> None:
        shutil.rmtree(self.run_dir(tenant, run_id), ignore_errors=True)

    def _chunks(self, tenant: str, run_id: str) -> list[tuple[int, Path]]:
        folder = self.run_dir(tenant, run_id) / "draws"
        if not folder.exists():
            return []
        found = [(int(p.name[:12]), p) for p in folder.iterdir() if p.name.endswith(".npy") and p.name[:12].isdigit()]
        return sorted(found)


def _atomic(path: Path, write: Callable[[BinaryIO], None]) -> None:
    """Write `path` through a temporary file, fsynced and renamed, so readers see all of it or nothing."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
