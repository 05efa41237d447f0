"""The service's run directories: <root>/<tenant>/<run id>/ is one run's `RunDirectory` (draw chunks and the
checkpoint stored with them; see raysampler.checkpoints). The run record's `draws_stored` is raised only after a
chunk and its checkpoint are durable, and readers read below it, so a chunk is visible only once it is complete.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ..checkpoints import RunDirectory


class DrawFiles:
    """Each run's directory under `root` (the service's runs directory)."""

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = Path(root)

    def run_dir(self, tenant: str, run_id: str) -> Path:
        return self.root / tenant / run_id

    def directory(self, tenant: str, run_id: str) -> RunDirectory:
        return RunDirectory(self.run_dir(tenant, run_id))

    def append(
        self, tenant: str, run_id: str, start: int, theta: np.ndarray, stats: dict[str, np.ndarray] | None = None
    ) -> None:
        """Durably write draws [start, start + len(theta)) (theta: (n, chains, d))."""
        self.directory(tenant, run_id).append(start, theta, stats)

    def read(self, tenant: str, run_id: str, start: int, stop: int) -> np.ndarray:
        """Draws [start, stop) of every chain, shape (stop − start, chains, d); callers bound stop by draws_stored."""
        return self.directory(tenant, run_id).read(start, stop)

    def read_column(self, tenant: str, run_id: str, start: int, stop: int, step: int, column: int) -> np.ndarray:
        """Coordinate `column` of draws start, start + step, … below stop, every chain: (m, chains)."""
        return self.directory(tenant, run_id).read_column(start, stop, step, column)

    def read_stats(self, tenant: str, run_id: str, stop: int) -> dict[str, np.ndarray]:
        """Sample stats of draws [0, stop) (name → (stop, chains))."""
        return self.directory(tenant, run_id).read_stats(stop)

    def size_bytes(self, tenant: str, run_id: str) -> int:
        return self.directory(tenant, run_id).size_bytes()

    def delete(self, tenant: str, run_id: str) -> None:
        self.directory(tenant, run_id).delete()
