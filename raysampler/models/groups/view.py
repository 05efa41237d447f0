"""What the group model's helpers (`curvature`, `interweaving`, `evaluation`) read of a `model.HierarchicalGLM`:
a Protocol, so that they are type-checked against the model without importing it (model.py imports them)."""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from .index import Point, ShardIndex
from .spec import GroupEffects


class GroupModelView(Protocol):
    """The members of `model.HierarchicalGLM` its helpers use (see there for each one's meaning)."""

    @property
    def family(self) -> Any: ...  # a bound _GLM without group effects

    @property
    def factors(self) -> tuple[GroupEffects, ...]: ...

    @property
    def dim(self) -> int: ...

    @property
    def n_family(self) -> int: ...

    @property
    def scale_starts(self) -> tuple[int, ...]: ...

    @property
    def global_levels(self) -> tuple[tuple[str, ...] | None, ...]: ...

    @property
    def global_starts(self) -> tuple[int | None, ...]: ...

    @property
    def has_spanning(self) -> bool: ...

    @property
    def _widths(self) -> tuple[int, int]: ...

    @property
    def _locations(self) -> tuple[tuple[int, int, int], ...]: ...

    def label(self, f: int, value: float) -> str: ...

    def local_dim(self, X: np.ndarray, y: np.ndarray) -> int: ...

    def _index(self, X: np.ndarray) -> ShardIndex: ...

    def _local_counts(self, X: np.ndarray) -> tuple[int, ...]: ...

    def _dense_count(self, X: np.ndarray, f: int) -> int: ...

    def _point(self, X: np.ndarray, y: np.ndarray, x: np.ndarray, order: int) -> Point: ...

    def _value(self, pt: Point) -> np.ndarray: ...

    def _grad(self, pt: Point) -> tuple[np.ndarray, list[np.ndarray], list[np.ndarray]]: ...

    def _blocks(self, pt: Point) -> np.ndarray: ...
