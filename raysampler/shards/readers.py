"""Reading shard files where they live: .npz, .csv, .parquet files and parquet data sets (a folder or an object
prefix, hive partitions as columns), local or in object storage; a file's header without its rows; and the checks
on arrays (numbers, finite, shapes) every shard passes."""

from __future__ import annotations

import os
import warnings
import zipfile
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from ..errors import ArgumentError
from ..objectstore import filesystem, is_uri, parse_uri
from ..storage import read_npy_header, read_npz
from .labels import Levels, encode_text

#: File suffixes a path shard may have (case-insensitive).
SUFFIXES: tuple[str, ...] = (".npz", ".csv", ".parquet", ".pq")


# ------------------------------------------------------------------------------------ validation
def _as_features(X: Any, name: str) -> np.ndarray:
    """X as a 2-D float64 array (no copy if it already is one); ValueError naming `name` otherwise."""
    if np.asarray(X).dtype.kind == "c":
        raise ValueError(f"{name} must be real-valued, got a complex array")
    try:
        arr = np.asarray(X, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a numeric 2-D array: {exc}") from None
    if arr.ndim != 2:
        raise ValueError(f"{name} must be 2-D (rows x features), got shape {arr.shape}")
    return arr


def _as_target(y: Any, name: str) -> np.ndarray:
    """y as int64 (integer labels) or float64 array, 1-D or 2-D; ValueError naming `name` otherwise."""
    arr = np.asarray(y)
    if arr.dtype.kind == "c":
        raise ValueError(f"{name} must be real-valued, got a complex array")
    if arr.dtype.kind in "iu":
        arr = arr.astype(np.int64, copy=False)
    else:
        try:
            arr = arr.astype(np.float64, copy=False)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{name} must be numeric: {exc}") from None
    if arr.ndim not in (1, 2):
        raise ValueError(f"{name} must be 1-D (or 2-D with one row per observation), got shape {arr.shape}")
    return arr


def _check_finite(arr: np.ndarray, name: str) -> None:
    """ValueError naming `name` and the first bad row if arr has NaN or inf."""
    if arr.dtype.kind == "f" and arr.size:
        ok = np.isfinite(arr)
        if not ok.all():
            bad = ok.reshape(len(arr), -1).all(axis=1)
            row = int(np.flatnonzero(~bad)[0])
            raise ValueError(f"{name} contains NaN or inf (first at row {row})")


def validate_arrays(X: Any, y: Any, xname: str = "X", yname: str = "y") -> tuple[np.ndarray, np.ndarray]:
    """Check and convert one (X, y) pair: 2-D float64 X, matching rows, finite values, at least one row."""
    Xa = _as_features(X, xname)
    if y is None:
        raise ValueError(f"{yname} is required with array data (y=None only for already-split data)")
    ya = _as_target(y, yname)
    if ya.shape[0] != Xa.shape[0]:
        raise ValueError(f"{yname} has {ya.shape[0]} rows but {xname} has {Xa.shape[0]}")
    if Xa.shape[0] == 0:
        raise ValueError(f"{xname} has no rows")
    _check_finite(Xa, xname)
    _check_finite(ya, yname)
    return Xa, ya


#: Suffixes of parquet files (in a data set, the files read).
PARQUET_SUFFIXES: tuple[str, ...] = (".parquet", ".pq")


def check_shard_path(path: str) -> str:
    """ValueError naming the location if it is no supported format: a file with one of SUFFIXES, a folder or prefix
    ending in '/' (a parquet data set), or a well-formed object-storage URI of a parquet object or prefix."""
    if is_uri(path):
        try:
            parse_uri(path)
        except ValueError as exc:
            raise ValueError(f"shard location {path!r} {exc}") from None
        if not (path.endswith("/") or path.lower().endswith(PARQUET_SUFFIXES)):
            raise ValueError(
                f"shard location {path!r}: object-storage shards are parquet, a .parquet object or a data set prefix "
                "ending in '/'"
            )
        return path
    if not (path.endswith("/") or path.lower().endswith(SUFFIXES)):
        raise ValueError(
            f"shard file {path!r} has an unsupported extension; expected one of {', '.join(SUFFIXES)}, or a "
            "folder of parquet files ending in '/'"
        )
    return path


def is_parquet(path: str) -> bool:
    """Whether a location is read as parquet: a .parquet file or object, or a data set (ending in '/')."""
    return path.endswith("/") or path.lower().endswith(PARQUET_SUFFIXES)


# ----------------------------------------------------------------------------------- file readers
class DataTable(NamedTuple):
    """A file's (or array's) data: X (n, p) float64, y, X's column names when the source has them, the labels
    of its text columns (`Levels`; X holds their `label_code`s), and the name of the column (or .npz array) y was
    read from (`target`: None where the table was read whole and y is zeros, or y came without a name)."""

    X: np.ndarray
    y: np.ndarray
    columns: tuple[str, ...] | None
    levels: Levels | None = None
    target: str | None = None

    def with_target_column(self) -> DataTable:
        """The table with y back among X's columns, named `target` (a formula reads its response from the columns,
        by name); the table itself when y has no name or X none."""
        if self.target is None or self.columns is None or self.target in self.columns:
            return self
        X = np.column_stack([self.X, np.asarray(self.y, dtype=np.float64)])
        return DataTable(X, np.zeros(X.shape[0]), (*self.columns, self.target), self.levels, None)


def read_table(path: str, *, y: str | None = "y", x: Sequence[str] | None = None) -> DataTable:
    """X, y and X's column names from an .npz (arrays named `x` (default "X") and `y`; no column names), .csv or
    .parquet (target column `y`, feature columns `x`, default all others), checked like in-memory data; errors are
    ValueError naming the file. `y=None` (a formula's table, which names its own response) keeps every column of a
    CSV or parquet file in X, and y is zeros."""
    lower = check_shard_path(path).lower()
    columns: tuple[str, ...] | None = None
    levels: Levels | None = None
    if is_parquet(path):
        X, Y, columns, levels = _read_parquet(path, y, x)
    elif lower.endswith(".npz"):
        if y is None:
            raise ValueError(f"shard file {path!r}: an .npz has no column names for a formula; use CSV or parquet")
        X, Y = _read_npz(path, x[0] if x else "X", y)
    else:
        X, Y, columns, levels = _read_csv(path, y, x)
    Xa, Ya = validate_arrays(X, Y, f"X in {path!r}", f"y in {path!r}")
    return DataTable(Xa, Ya, columns, levels, y)


class FileHeader(NamedTuple):
    """What a data file's header says without reading its data: X's column names (None for .npz) and the row count
    (None where the header does not tell, e.g. CSV)."""

    columns: tuple[str, ...] | None
    n_rows: int | None
    n_features: int


def read_header(path: str, *, y: str | None = "y", x: Sequence[str] | None = None) -> FileHeader:
    """The header of a data file: for CSV its first line, for parquet its schema and row count, for .npz the .npy
    headers of X and y — never the data. Errors (missing file, no target column, unknown feature columns) are
    ValueError/FileNotFoundError naming the file."""
    lower = check_shard_path(path).lower()
    if is_parquet(path):
        source = _parquet_source(path)
        names, rows = list(source.schema.names), int(source.count_rows())
        columns = _feature_names(path, names, y, x)
        return FileHeader(columns, rows, len(columns))
    if not os.path.isfile(path):
        raise FileNotFoundError(f"shard file {path!r} does not exist")
    if lower.endswith(".npz"):
        if y is None:
            raise ValueError(f"shard file {path!r}: an .npz has no column names for a formula; use CSV or parquet")
        shapes = _npz_shapes(path, (x[0] if x else "X", y))
        xs = shapes[0]
        if len(xs) != 2:
            raise ValueError(f"shard file {path!r}: X must be 2-D, has shape {xs}")
        return FileHeader(None, int(xs[0]), int(xs[1]))
    with open(path, encoding="utf-8") as fh:
        header = fh.readline()
    if not header.strip():
        raise ValueError(f"shard file {path!r} has no header row")
    names = [c.strip().strip('"').strip("'") for c in header.strip().split(",")]
    columns = _feature_names(path, names, y, x)
    return FileHeader(columns, None, len(columns))


def _feature_names(path: str, names: list[str], y: str | None, x: Sequence[str] | None) -> tuple[str, ...]:
    """The feature columns a file's target `y` and feature choice `x` select (checked like `_split_columns`)."""
    if y is None:
        return tuple(names)
    if sum(c == y for c in names) != 1:
        raise ValueError(f"shard file {path!r} needs exactly one column named {y!r}, has columns {names}")
    if x is None:
        return tuple(c for c in names if c != y)
    if y in x:
        raise ValueError(f"shard file {path!r}: the target column {y!r} cannot also be a feature column")
    missing = [c for c in x if c not in names]
    if missing or not x:
        raise ValueError(f"shard file {path!r} has no column(s) {missing or 'given'} for X; it has {names}")
    return tuple(x)


def _npz_shapes(path: str, names: Sequence[str]) -> list[tuple[int, ...]]:
    """Shapes of arrays `names` in an .npz from their .npy headers (ValueError naming the file if absent)."""
    out = []
    try:
        with zipfile.ZipFile(path) as z:
            have = {n[:-4] for n in z.namelist() if n.endswith(".npy")}
            missing = [n for n in names if n not in have]
            if missing:
                raise ValueError(f"shard file {path!r} lacks array(s) {missing}; it has {sorted(have)}")
            for n in names:
                with z.open(f"{n}.npy") as f:
                    shape = read_npy_header(f, np.lib.format.read_magic(f))[0]
                out.append(tuple(int(v) for v in shape))
    except zipfile.BadZipFile as exc:
        raise ValueError(f"shard file {path!r} is not a readable .npz: {exc}") from None
    return out


def read_data_file(path: str, *, y: str = "y", x: Sequence[str] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(X, y) of `read_table`."""
    table = read_table(path, y=y, x=x)
    return table.X, table.y


def _read_npz(path: str, x: str = "X", y: str = "y") -> tuple[np.ndarray, np.ndarray]:
    try:
        arrays = read_npz(path, [x, y])
    except FileNotFoundError:
        raise
    except zipfile.BadZipFile as exc:
        with open(path, "rb") as fh:
            if fh.read(6) == b"\x93NUMPY":
                raise ValueError(
                    f"shard file {path!r} is not an .npz archive (save it with np.savez(path, X=X, y=y))"
                ) from None
        raise ValueError(f"shard file {path!r} is not a readable .npz: {exc}") from None
    except (OSError, EOFError) as exc:
        raise ValueError(f"shard file {path!r} is not a readable .npz: {exc}") from None
    except ValueError as exc:  # e.g. object arrays refused without pickle
        raise ValueError(f"shard file {path!r}: {exc}") from None
    missing = [k for k in (x, y) if k not in arrays]
    if missing:
        with zipfile.ZipFile(path) as z:
            have = [n[:-4] for n in z.namelist() if n.endswith(".npy")]
        raise ValueError(f"shard file {path!r} lacks array(s) {missing}; it has {have}")
    return arrays[x], arrays[y]


def _split_columns(
    path: str, names: list[str], data: np.ndarray, y: str | None = "y", x: Sequence[str] | None = None
) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
    """Separate the target column `y` from the feature columns `x` (default: every other column); also the
    feature columns' names. `y=None`: every column is X, y zeros (a formula's table)."""
    if y is None:
        return data, np.zeros(data.shape[0]), tuple(names)
    hits = [i for i, c in enumerate(names) if c == y]
    if len(hits) != 1:
        raise ValueError(f"shard file {path!r} needs exactly one column named {y!r}, has columns {names}")
    j = hits[0]
    if x is None:
        return np.delete(data, j, axis=1), data[:, j], tuple(c for i, c in enumerate(names) if i != j)
    if y in x:
        raise ValueError(f"shard file {path!r}: the target column {y!r} cannot also be a feature column")
    missing = [c for c in x if c not in names]
    if missing or not x:
        raise ValueError(f"shard file {path!r} has no column(s) {missing or 'given'} for X; it has {names}")
    return data[:, [names.index(c) for c in x]], data[:, j], tuple(x)


_Columns = tuple[np.ndarray, np.ndarray, tuple[str, ...], "Levels | None"]


def _read_csv(path: str, y: str | None = "y", x: Sequence[str] | None = None) -> _Columns:
    with open(path, encoding="utf-8") as fh:
        header = fh.readline()
    names = [c.strip().strip('"').strip("'") for c in header.strip().split(",")]
    if not header.strip():
        raise ValueError(f"shard file {path!r} has no header row")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "no data": reported below as "has no rows"
            data = np.loadtxt(path, delimiter=",", skiprows=1, ndmin=2, dtype=np.float64)
    except ValueError:  # a text column (group labels), or a missing value: read with column types
        import pyarrow.csv as pa_csv

        try:
            return _from_arrow(path, pa_csv.read_csv(path), y, x)
        except Exception as exc:  # pyarrow's own errors name the row and column
            if isinstance(exc, (ValueError, ArgumentError)) and not type(exc).__module__.startswith("pyarrow"):
                raise
            raise ValueError(f"shard file {path!r} cannot be read as a table: {exc}") from None
    if data.size == 0:
        data = data.reshape(0, len(names))
    if data.shape[1] != len(names):
        raise ValueError(f"shard file {path!r}: header has {len(names)} columns, rows have {data.shape[1]}")
    return (*_split_columns(path, names, data, y, x), None)


def _parquet_source(path: str) -> Any:
    """A `pyarrow.dataset.Dataset` over a parquet file, or over the parquet files below a folder or prefix (`path`
    ending in '/'; files in name order, names starting with '_' or '.' skipped, hive partitions as columns). A path
    or URI: a URI is reached with this process's own credentials. FileNotFoundError naming `path` if nothing is
    there."""
    import pyarrow.dataset as ds
    import pyarrow.fs as pafs

    if is_uri(path):
        uri = parse_uri(path)
        fs, root = filesystem(uri), uri.fs_path
    else:
        fs, root = pafs.LocalFileSystem(), path.rstrip("/") if path.endswith("/") else path
    if not path.endswith("/"):
        if fs.get_file_info(root).type != pafs.FileType.File:
            raise FileNotFoundError(f"shard file {path!r} does not exist")
        return ds.dataset(root, filesystem=fs, format="parquet")
    found = fs.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True))
    files = sorted(
        info.path
        for info in found
        if info.type == pafs.FileType.File
        and info.path.lower().endswith(PARQUET_SUFFIXES)
        and not any(part.startswith(("_", ".")) for part in info.path[len(root) :].split("/"))
    )
    if not files:
        raise FileNotFoundError(f"shard data set {path!r} holds no parquet files")
    return ds.dataset(files, filesystem=fs, format="parquet", partitioning="hive", partition_base_dir=root)


def _read_parquet(path: str, y: str | None = "y", x: Sequence[str] | None = None) -> _Columns:
    """A parquet file or data set (`_parquet_source`): only the target and the chosen feature columns are read
    (`y=None`: every column, as `_split_columns` takes it); text columns as labels (`_from_arrow`)."""
    source = _parquet_source(path)
    features = _feature_names(path, list(source.schema.names), y, x)
    wanted = [*features] if y is None else [*features, y]
    return _from_arrow(path, source.to_table(columns=wanted), y, None if y is None else list(features))


def _from_arrow(path: str, table: Any, y: str | None, x: Sequence[str] | None) -> _Columns:
    """X, y, X's names and its text columns' labels from an Arrow table (parquet, or a CSV with a text column):
    numeric columns as float64, text columns as `label_code`s; the target must be numeric, no value missing."""
    import pyarrow as pa

    names = list(table.column_names)
    columns: list[np.ndarray] = []
    text: dict[str, tuple[str, ...]] = {}
    for name in names:
        col = table.column(name)
        if col.null_count:
            raise ValueError(f"shard file {path!r}: column {name!r} has {col.null_count} missing value(s)")
        kind = col.type.value_type if pa.types.is_dictionary(col.type) else col.type
        if pa.types.is_string(kind) or pa.types.is_large_string(kind):
            if name == y:
                raise ValueError(f"shard file {path!r}: the target column {y!r} holds text; it must hold numbers")
            codes, labels = encode_text(col.to_numpy(zero_copy_only=False))
            columns.append(codes)
            text[name] = labels
        else:
            try:
                columns.append(np.asarray(col.to_numpy(zero_copy_only=False), dtype=np.float64))
            except (TypeError, ValueError, pa.ArrowException) as exc:
                raise ValueError(f"shard file {path!r}: column {name!r} is neither numbers nor text: {exc}") from None
    data = np.column_stack(columns) if columns else np.empty((table.num_rows, 0))
    X, Y, feats = _split_columns(path, names, data, y, x)
    levels = {c: labels for c, labels in text.items() if c in feats}
    return X, Y, feats, levels or None


def npz_rows(path: str) -> int | None:
    """Row count from the .npy header of 'X' inside an .npz, without reading the data."""
    try:
        with zipfile.ZipFile(path) as z, z.open("X.npy") as f:
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                shape = np.lib.format.read_array_header_1_0(f)[0]
            elif version == (2, 0):
                shape = np.lib.format.read_array_header_2_0(f)[0]
            else:
                return None
        return int(shape[0]) if shape else None
    except Exception:  # a cheap hint only: load() reports real problems
        return None
