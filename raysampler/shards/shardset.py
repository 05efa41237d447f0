"""`Shard` (in-memory arrays, or a file a worker reads on its own node, maybe at a named site), `ShardSet` (the
shards of a run and how they were made), and `GroupPart`, the part of a site file's groups a shard holds."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, overload

import numpy as np

from ..errors import ArgumentError
from ..grants import check_on_site
from ..names import SITE_RE
from ..objectstore import is_uri
from .labels import Levels, encode_features, join_levels, levels_in
from .readers import DataTable, check_shard_path, is_parquet, npz_rows, read_table, validate_arrays

#: Split strategies accepted by `shard`.
STRATEGIES: tuple[str, ...] = ("contiguous", "random", "label_skew")


#: `ShardSet.strategy` for data the caller split already.
PRESPLIT = "presplit"


# ------------------------------------------------------------------------------------------ Shard
@dataclass(frozen=True)
class GroupPart:
    """Which rows of a site file a part shard holds: part `k` of `m` of the file's groups by column `by` (whole groups,
    largest first to the part with the fewest rows so far, as `shard(..., by=...)`), decided from the file itself
    wherever it is read, so nothing but (k, m, by) travels."""

    k: int
    m: int
    by: str

    def rows_of(self, table: DataTable, path: str) -> DataTable:
        """The part's rows of a file's table, in file order."""
        if table.columns is None or self.by not in table.columns:
            raise ValueError(f"shard file {path!r} has no column {self.by!r} to split its groups by")
        labels = table.X[:, table.columns.index(self.by)]
        rows = group_parts(labels, self.m)[self.k]
        X = table.X[rows]
        return DataTable(X, table.y[rows], table.columns, levels_in(X, table.columns, table.levels))


def split_site_groups(shard_set: ShardSet, by: str, parts: Sequence[int]) -> ShardSet:
    """Each shard i split into `parts[i]` part shards of whole groups by column `by` (`GroupPart`), in order; a
    shard with parts 1 stays as it is."""
    out: list[Shard] = []
    for s, m in zip(shard_set, parts):
        if m <= 1:
            out.append(s)
        else:
            out += [dataclasses.replace(s, parts=1, part=GroupPart(k, m, by)) for k in range(m)]
    return ShardSet(tuple(out), shard_set.strategy)


@dataclass(frozen=True, eq=False)
class Shard:
    """One worker's data: in-memory arrays (X, y) or a `path` the worker reads with `read()`.

    `site` pins the shard's worker to Ray nodes labelled `raysampler.io/site=<site>` (a path shard's file then only
    needs to exist there: nothing on the driver opens it). `columns` names X's columns (a CSV/parquet file's header
    gives them when read); `y_column` and `x_columns` choose a file's target and feature columns (default: "y" and
    every other column). `index` optionally records which rows of the original data the shard holds (set by
    `shard`). In-memory arrays are validated on construction; a path is checked for a supported suffix only.
    A site file may be split at its site into parts of whole groups, each its own worker process (a model with
    group effects, `split_site_groups`): `parts` is "auto" (as many as the site's cores for its shards), or a
    number (1 keeps it whole); a part records which one it is (`part`: part k of m of the file's groups by column
    `by`, balanced by rows like `shard(..., by=...)`) and reads only those rows, at the site, from the file.
    `grants`, when set (the service sets it from the tenant's data grants on the site), are the path prefixes the
    file must lie under, symlinks resolved, checked on the site's node before any byte is read (`grants.py`);
    None (the Python API, the cluster owner's own) checks nothing. X may hold text columns (group labels: a
    DataFrame's string column, an object array): they need `columns`, and are stored as `label_code`s with their
    labels in `levels` (a file's text columns likewise, when read).
    """

    X: np.ndarray | None = None
    y: np.ndarray | None = None
    path: str | None = None
    index: np.ndarray | None = None
    site: str | None = None
    columns: tuple[str, ...] | None = None
    y_column: str | None = "y"
    x_columns: tuple[str, ...] | None = None
    grants: tuple[str, ...] | None = None
    levels: Levels | None = None
    parts: int | str = "auto"
    part: GroupPart | None = None

    def __post_init__(self) -> None:
        has_arrays = self.X is not None or self.y is not None
        if has_arrays == (self.path is not None):
            raise ValueError("a Shard holds either arrays (X, y) or a path, not both or neither")
        if self.site is not None and not (isinstance(self.site, str) and _SITE_PATTERN.match(self.site)):
            raise ValueError(
                f"site must be a label value (letters, digits, '-', '_', '.', at most 63), got {self.site!r}"
            )
        if self.path is not None:
            if not isinstance(self.path, (str, os.PathLike)):
                raise ValueError(f"path must be a str or os.PathLike, got {type(self.path).__name__}")
            object.__setattr__(self, "path", check_shard_path(os.fspath(self.path)))
        if self.columns is not None:
            cols = column_names(self.columns, "columns")
            width = np.shape(self.X)[1] if self.X is not None and np.ndim(self.X) == 2 else None
            if width is not None and len(cols) != width:
                raise ArgumentError(("columns",), f"columns has {len(cols)} names but X has {width} columns")
            object.__setattr__(self, "columns", cols)
        if self.path is None:
            X, text = encode_features(self.X, self.columns, "X")
            X, y = validate_arrays(X, self.y)
            object.__setattr__(self, "X", X)
            object.__setattr__(self, "y", y)
            if text is not None:
                object.__setattr__(self, "levels", join_levels([self.levels, text]))
        if self.x_columns is not None:
            object.__setattr__(self, "x_columns", column_names(self.x_columns, "x_columns"))
        if self.parts != "auto" and (isinstance(self.parts, bool) or not isinstance(self.parts, int) or self.parts < 1):
            raise ArgumentError(("parts",), f"parts must be 'auto' or an integer >= 1, got {self.parts!r}")
        if self.part is not None and self.path is None:
            raise ValueError("part: only a file shard is split into parts at its site")
        if self.y_column is not None and (not isinstance(self.y_column, str) or not self.y_column):
            raise ValueError(f"y_column must be a non-empty column name or None, got {self.y_column!r}")
        if self.index is not None:
            idx = np.asarray(self.index, dtype=np.int64)
            if idx.ndim != 1 or (self.X is not None and len(idx) != len(self.X)):
                raise ValueError("index must be 1-D with one entry per row")
            object.__setattr__(self, "index", idx)

    @property
    def in_memory(self) -> bool:
        """True if the arrays are held here, False if the worker reads `path`."""
        return self.path is None

    @property
    def n_rows(self) -> int | None:
        """Rows in the shard; for a path shard only when the file header tells cheaply (.npz, .parquet) and the
        file is local (a shard with a site is never opened here)."""
        if self.X is not None:
            return int(self.X.shape[0])
        assert self.path is not None
        if self.site is not None or is_uri(self.path) or self.path.endswith("/"):
            return None  # never opened here: on its site, in object storage, or a data set of many files
        lower = self.path.lower()
        if lower.endswith(".npz"):
            return npz_rows(self.path)
        if lower.endswith((".parquet", ".pq")):
            try:
                import pyarrow.parquet as pq

                return int(pq.ParquetFile(self.path).metadata.num_rows)
            except Exception:
                return None
        return None

    def read(self) -> DataTable:
        """X, y and column names: the held arrays, or the file's contents checked like in-memory data."""
        if self.path is None:
            assert self.X is not None and self.y is not None
            return DataTable(self.X, self.y, self.columns, self.levels)
        path = self.path
        real = check_on_site(path, self.grants) if self.grants is not None else path
        if not is_parquet(real) and not os.path.isfile(real):
            raise FileNotFoundError(f"shard file {path!r} does not exist")
        table = read_table(real, y=self.y_column, x=self.x_columns)
        if self.columns is not None:  # names given for the file's columns (an .npz has none of its own)
            if len(self.columns) != table.X.shape[1]:
                raise ArgumentError(
                    ("columns",), f"columns has {len(self.columns)} names but {path!r} has {table.X.shape[1]} columns"
                )
            if table.columns is not None and table.columns != self.columns:
                raise ArgumentError(
                    ("columns",), f"columns {list(self.columns)} differ from {path!r}'s header {list(table.columns)}"
                )
            table = table._replace(columns=self.columns)
        if self.part is not None:
            table = self.part.rows_of(table, path)
        return table

    def load(self) -> tuple[np.ndarray, np.ndarray]:
        """(X, y) of `read()`."""
        table = self.read()
        return table.X, table.y

    def __repr__(self) -> str:
        where = f", site={self.site!r}" if self.site is not None else ""
        if self.part is not None:
            where += f", part {self.part.k + 1} of {self.part.m} by {self.part.by!r}"
        if self.path is not None:
            return f"Shard(path={self.path!r}{where})"
        assert self.X is not None and self.y is not None
        return f"Shard(X: {self.X.shape}, y: {self.y.shape} {self.y.dtype}{where})"


_SITE_PATTERN = SITE_RE


def column_names(value: Any, argname: str) -> tuple[str, ...]:
    """A tuple of distinct non-empty strings, else ValueError naming `argname`."""
    if isinstance(value, str) or (not isinstance(value, (list, tuple, np.ndarray)) and not hasattr(value, "__iter__")):
        raise ValueError(f"{argname} must be a list of column names, got {value!r}")
    names = tuple(str(v) for v in value)
    if any(not n for n in names) or len(set(names)) != len(names):
        raise ValueError(f"{argname} must be distinct non-empty names, got {list(names)}")
    return names


# --------------------------------------------------------------------------------------- ShardSet
@dataclass(frozen=True)
class ShardSet:
    """An immutable, list-like sequence of `Shard`s plus how they were made (`strategy`)."""

    shards: tuple[Shard, ...]
    strategy: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "shards", tuple(self.shards))
        if not self.shards or not all(isinstance(s, Shard) for s in self.shards):
            raise ValueError("shards must be a non-empty sequence of Shard")

    @property
    def num_shards(self) -> int:
        return len(self.shards)

    @property
    def n_rows(self) -> int | None:
        """Total rows, or None if some path shard's size is unknown without loading it."""
        total = 0
        for s in self.shards:
            n = s.n_rows
            if n is None:
                return None
            total += n
        return total

    def __len__(self) -> int:
        return len(self.shards)

    def __iter__(self) -> Iterator[Shard]:
        return iter(self.shards)

    @overload
    def __getitem__(self, i: int) -> Shard: ...
    @overload
    def __getitem__(self, i: slice) -> ShardSet: ...
    def __getitem__(self, i: int | slice) -> Shard | ShardSet:
        if isinstance(i, slice):
            return ShardSet(self.shards[i], self.strategy)
        return self.shards[i]

    def __repr__(self) -> str:
        return f"ShardSet(num_shards={self.num_shards}, n_rows={self.n_rows}, strategy={self.strategy!r})"


def group_parts(labels: np.ndarray, k: int) -> list[np.ndarray]:
    """Row indices of k shards holding whole groups, balanced by rows (largest group first to the lightest shard)."""
    _, code, sizes = np.unique(labels, return_inverse=True, return_counts=True)
    if sizes.size < k:
        raise ArgumentError(("by",), f"by: {sizes.size} groups cannot fill {k} shards (each group stays in one shard)")
    load, owner = np.zeros(k, dtype=np.int64), np.empty(sizes.size, dtype=np.intp)
    for g in np.argsort(-sizes, kind="stable"):
        i = int(np.argmin(load))
        owner[g] = i
        load[i] += sizes[g]
    shard_of_row = owner[code.reshape(-1)]
    return [np.flatnonzero(shard_of_row == i) for i in range(k)]
