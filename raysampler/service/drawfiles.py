"""The service's run directories: <root>/<tenant>/<run id>/ is one run's `RunDirectory` (draw chunks and the
checkpoint stored with them; see raysampler.checkpoints), on local disk or object storage (`raysampler.storage`).
The run record's `draws_stored` is raised only after a chunk and its checkpoint are durable, and readers read below
it, so a chunk is visible only once it is complete. The replica driving a run writes through `writer`, with its
lease's epoch and fence; every other access reads.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import numpy as np

from ..checkpoints import RunDirectory
from ..storage import Storage, storage_at


class DrawFiles:
    """Each run's directory under `root` (the service's runs storage: a path, a URI or a `Storage`)."""

    def __init__(self, root: str | os.PathLike | Storage) -> None:
        self.root = root if isinstance(root, Storage) else storage_at(root)

    def directory(self, tenant: str, run_id: str) -> RunDirectory:
        """The run's directory, to read (or to write with the plain layout: the Python API's, and tests')."""
        return RunDirectory(self.root.child(tenant, run_id))

    def writer(self, tenant: str, run_id: str, epoch: int, fence: Callable[[], None]) -> RunDirectory:
        """The run's directory as its driver writes it: files of lease epoch `epoch`, each write behind `fence`."""
        return self.directory(tenant, run_id).writer(epoch, fence)

    def tenant_bytes(self, tenant: str) -> int:
        """Bytes of every run directory of the tenant."""
        return self.root.child(tenant).size_bytes()

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
