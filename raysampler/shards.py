"""Splitting data into shards, one per worker, and describing shards a worker reads itself.

A `Shard` is either in memory (arrays `X`, `y`) or a `path` to a file the worker loads on its own
node, so big data never passes through the driver. A shard may name its `site`: the Ray node label
(`raysampler.io/site`) of the nodes that hold its file; its worker then runs only there, and nothing
on the driver opens the file. Column names (`columns`) travel with a shard and name the parameters. `shard(...)` builds
a `ShardSet` from whole
arrays (split "contiguous", "random" or "label_skew") or from data that is already split (a list
of `(X_i, y_i)` pairs, file paths or `Shard`s, one per shard).

File formats for path shards:

* ``.npz``: arrays named ``"X"`` (2-D) and ``"y"`` (1-D, or 2-D with one row per observation);
  pickled (object) arrays are refused.
* ``.csv``: comma-separated, one header row; the column named ``y`` is the target, every other
  column (in file order) is a feature. Numbers only, no missing values.
* ``.parquet`` / ``.pq``: same column convention as CSV, read with pyarrow (only the chosen columns).
* a parquet data set: a path or URI ending in ``/`` names a folder (or object prefix) of parquet files, read in
  the order of their names, with hive partitions (``.../hospital=3/part-0.parquet``) as columns.

A shard's location is a file path or an object-storage URI (``s3://``, ``gs://``, ``abfs://``: a ``.parquet``
object or a data set prefix), read through ``pyarrow.fs`` with the reading process's own credentials
(`raysampler.objectstore`).

Shards hold X as float64; y keeps an integer dtype (class labels) and is float64 otherwise. A column of X may hold
text labels (a hospital's name: a DataFrame's string column, a CSV or parquet text column): X then holds each row's
`label_code` (a stable number computed from the text alone, so every shard and site codes a label alike without
asking the others) and the shard keeps the column's labels (`levels`), which name the group effects as given.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import warnings
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, overload

import numpy as np

from .errors import ArgumentError
from .grants import check_on_site
from .names import SITE_RE
from .objectstore import filesystem, is_uri, parse_uri
from .storage import read_npy_header, read_npz

__all__ = [
    "STRATEGIES",
    "SUFFIXES",
    "DataTable",
    "FileHeader",
    "GroupPart",
    "Levels",
    "Shard",
    "ShardSet",
    "encode_rows",
    "label_code",
    "read_data_file",
    "read_header",
    "read_table",
    "shard",
    "split_site_groups",
]

#: Split strategies accepted by `shard`.
STRATEGIES: tuple[str, ...] = ("contiguous", "random", "label_skew")
#: File suffixes a path shard may have (case-insensitive).
SUFFIXES: tuple[str, ...] = (".npz", ".csv", ".parquet", ".pq")
#: `ShardSet.strategy` for data the caller split already.
PRESPLIT = "presplit"
_DEFAULT_NUM_SHARDS = 4


#: Text labels of a data set's columns: column name → the distinct labels found (sorted); X holds `label_code`s.
Levels = dict[str, tuple[str, ...]]
#: Text codes start here: apart from the small integers numeric labels usually are (hospital 1, 2, …).
_CODE_BASE = float(2**48)


def label_code(label: str) -> float:
    """The number a text label is stored as in X: 48 bits of its SHA-256 plus 2⁴⁸, an integer a float64 holds
    exactly, the same wherever it is computed (a site codes its labels without knowing the others'). Two distinct
    labels with one code are refused where shards' labels are joined (`join_levels`); 48 bits make that a matter of
    millions of labels."""
    return _CODE_BASE + float(int.from_bytes(hashlib.sha256(label.encode("utf-8")).digest()[:6], "big"))


def encode_text(values: Any) -> tuple[np.ndarray, tuple[str, ...]]:
    """Text labels (n,) → (their `label_code`s (n,) float64, the distinct labels sorted)."""
    uniq, inverse = np.unique(np.asarray(values).astype(str), return_inverse=True)
    codes = np.array([label_code(u) for u in uniq.tolist()], dtype=np.float64)
    return codes[inverse.reshape(-1)], tuple(uniq.tolist())


def join_levels(parts: Sequence[Mapping[str, Sequence[str]] | None]) -> Levels | None:
    """The text labels of several shards as one `Levels` (each column's labels merged and sorted); ValueError if two
    distinct labels share a code (`label_code`)."""
    merged: dict[str, set[str]] = {}
    for part in parts:
        for col, labels in (part or {}).items():
            merged.setdefault(col, set()).update(labels)
    if not merged:
        return None
    out = {col: tuple(sorted(labels)) for col, labels in merged.items()}
    for col, labels in out.items():
        codes = {label_code(v) for v in labels}
        if len(codes) != len(labels):
            raise ValueError(f"column {col!r}: two of its {len(labels)} text labels have the same code; rename one")
    return out


def levels_in(
    X: np.ndarray, columns: Sequence[str] | None, levels: Mapping[str, Sequence[str]] | None
) -> Levels | None:
    """`levels` cut down to the labels whose codes occur in X's rows (a shard's own labels)."""
    if not levels or columns is None:
        return None
    out = {}
    for col, labels in levels.items():
        if col in columns:
            present = set(np.unique(X[:, list(columns).index(col)]).tolist())
            out[col] = tuple(v for v in labels if label_code(v) in present)
    return out or None


def _is_text(column: np.ndarray) -> bool:
    """Whether a column of an object or string array holds text: every value a str (a DataFrame's string column),
    or, in an all-string array (np.str_), a value that does not read as a number."""
    if column.dtype.kind == "O":
        return column.size > 0 and all(isinstance(v, str) for v in column.tolist())
    try:
        column.astype(np.float64)
    except ValueError:
        return True
    return False


def _encode_features(X: Any, columns: Sequence[str] | None, name: str) -> tuple[Any, Levels | None]:
    """X with its text columns replaced by their `label_code`s, and those columns' labels; X unchanged when it holds
    no text. A text column needs a name (`columns`): it can only group effects, which name it."""
    arr = np.asarray(X)
    if arr.dtype.kind not in "OUS" or arr.ndim != 2:
        return X, None
    out = np.empty(arr.shape, dtype=np.float64)
    levels: Levels = {}
    for j in range(arr.shape[1]):
        col = arr[:, j]
        if not _is_text(col):
            try:
                out[:, j] = col.astype(np.float64)
            except (TypeError, ValueError) as exc:
                raise ValueError(f"{name}: column {j} mixes numbers with other values: {exc}") from None
            continue
        if columns is None or len(columns) != arr.shape[1]:
            raise ArgumentError(
                ("columns",),
                f"{name}: column {j} holds text labels (e.g. {str(col[0])!r}); name X's columns (columns=[...]) so "
                "that group effects can read it by name",
            )
        out[:, j], levels[str(columns[j])] = encode_text(col)
    return out, levels or None


def encode_rows(X: Any, columns: Sequence[str] | None, argname: str) -> Any:
    """New rows for a fitted model (predictions, held-out checks): a DataFrame's values, with text columns (group
    labels) replaced by their `label_code`s, so that a known group is found by its label and a new one is new."""
    return _encode_features(_frame_values(X), columns, argname)[0]


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


def _validate(X: Any, y: Any, xname: str = "X", yname: str = "y") -> tuple[np.ndarray, np.ndarray]:
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


def _check_path(path: str) -> str:
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


def _is_parquet(path: str) -> bool:
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
    lower = _check_path(path).lower()
    columns: tuple[str, ...] | None = None
    levels: Levels | None = None
    if _is_parquet(path):
        X, Y, columns, levels = _read_parquet(path, y, x)
    elif lower.endswith(".npz"):
        if y is None:
            raise ValueError(f"shard file {path!r}: an .npz has no column names for a formula; use CSV or parquet")
        X, Y = _read_npz(path, x[0] if x else "X", y)
    else:
        X, Y, columns, levels = _read_csv(path, y, x)
    Xa, Ya = _validate(X, Y, f"X in {path!r}", f"y in {path!r}")
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
    lower = _check_path(path).lower()
    if _is_parquet(path):
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


def _npz_rows(path: str) -> int | None:
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
        rows = _group_parts(labels, self.m)[self.k]
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
            object.__setattr__(self, "path", _check_path(os.fspath(self.path)))
        if self.columns is not None:
            cols = _names(self.columns, "columns")
            width = np.shape(self.X)[1] if self.X is not None and np.ndim(self.X) == 2 else None
            if width is not None and len(cols) != width:
                raise ArgumentError(("columns",), f"columns has {len(cols)} names but X has {width} columns")
            object.__setattr__(self, "columns", cols)
        if self.path is None:
            X, text = _encode_features(self.X, self.columns, "X")
            X, y = _validate(X, self.y)
            object.__setattr__(self, "X", X)
            object.__setattr__(self, "y", y)
            if text is not None:
                object.__setattr__(self, "levels", join_levels([self.levels, text]))
        if self.x_columns is not None:
            object.__setattr__(self, "x_columns", _names(self.x_columns, "x_columns"))
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
            return _npz_rows(self.path)
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
        if not _is_parquet(real) and not os.path.isfile(real):
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


def _names(value: Any, argname: str) -> tuple[str, ...]:
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


# ------------------------------------------------------------------------------------ splitting
def _check_num_shards(num_shards: Any, n_rows: int) -> int:
    if isinstance(num_shards, bool) or not isinstance(num_shards, (int, np.integer)):
        raise ArgumentError(("num_shards",), f"num_shards must be an int, got {num_shards!r}")
    if num_shards < 1:
        raise ArgumentError(("num_shards",), f"num_shards must be >= 1, got {num_shards}")
    if num_shards > n_rows:
        raise ArgumentError(("num_shards",), f"num_shards={num_shards} means more shards than rows ({n_rows})")
    return int(num_shards)


def _class_labels(y: np.ndarray) -> np.ndarray:
    """Integer class codes 0..C-1 for label_skew; ValueError naming y if labels are not discrete."""
    if y.ndim != 1:
        raise ArgumentError(("strategy",), f"y must be 1-D class labels for strategy='label_skew', got shape {y.shape}")
    if y.dtype.kind == "f" and not np.array_equal(y, np.round(y)):
        raise ArgumentError(
            ("strategy",),
            "y must hold discrete class labels (integers) for strategy='label_skew', got continuous values",
        )
    return np.unique(y, return_inverse=True)[1].reshape(-1)


def _label_skew_parts(codes: np.ndarray, num_shards: int, alpha: float, rng: np.random.Generator) -> list[np.ndarray]:
    """Row indices per shard: each class's rows are dealt to shards in Dirichlet(alpha) proportions.

    The usual federated-learning non-IID split (small alpha: each shard sees few classes). Shards
    left empty then get one row from the largest shard, so every shard has at least one row.
    """
    parts: list[list[np.ndarray]] = [[] for _ in range(num_shards)]
    for c in range(int(codes.max()) + 1):
        rows = rng.permutation(np.flatnonzero(codes == c))
        p = np.nan_to_num(rng.dirichlet(np.full(num_shards, alpha)))
        p = p / p.sum() if p.sum() > 0 else np.full(num_shards, 1.0 / num_shards)
        cuts = (np.cumsum(p)[:-1] * len(rows)).astype(np.int64)
        for i, piece in enumerate(np.split(rows, cuts)):
            parts[i].append(piece)
    out = [np.sort(np.concatenate(p)) for p in parts]
    for i in range(num_shards):
        if len(out[i]) == 0:
            big = int(np.argmax([len(o) for o in out]))  # has >= 2 rows since num_shards <= n
            k = int(rng.integers(len(out[big])))
            out[i] = out[big][k : k + 1].copy()
            out[big] = np.delete(out[big], k)
    return out


def _presplit(items: Sequence[Any], num_shards: Any, strategy: str, columns: Any = None) -> ShardSet:
    """ShardSet from already-split data: (X_i, y_i) pairs (arrays or DataFrames), paths or Shards, one per shard;
    `columns` names every shard's columns (each shard's width is checked against it)."""
    if len(items) == 0:
        raise ValueError("X is an empty list: give at least one (X_i, y_i) pair or path")
    if num_shards is not None and num_shards != len(items):
        raise ArgumentError(
            ("num_shards",), f"num_shards={num_shards!r} does not match the {len(items)} shards given in X"
        )
    if strategy not in ("contiguous", PRESPLIT):
        raise ArgumentError(
            ("strategy",), f"strategy={strategy!r} cannot re-split data given as a list of shards; omit strategy"
        )
    cols = _names(columns, "columns") if columns is not None else None
    shards: list[Shard] = []
    for i, item in enumerate(items):
        if isinstance(item, Shard):
            if cols is not None and item.columns is not None and item.columns != cols:
                raise ArgumentError(
                    ("columns",), f"columns {list(cols)} differ from X[{i}]'s own columns {list(item.columns)}"
                )
            shards.append(item if cols is None or item.columns is not None else _with_columns(item, cols, i))
        elif isinstance(item, (str, os.PathLike)):
            path = _check_path(os.fspath(item))
            if not is_uri(path) and not os.path.exists(path):  # an object is looked up where it is read
                raise FileNotFoundError(f"shard file {path!r} (X[{i}]) does not exist")
            shards.append(Shard(path=path, columns=cols))
        elif isinstance(item, (tuple, list)) and len(item) == 2:
            Xi, yi = item
            names = cols if cols is not None else _frame_columns(Xi)
            if cols is not None and np.ndim(Xi) == 2 and len(cols) != np.shape(Xi)[1]:
                raise ArgumentError(
                    ("columns",), f"columns has {len(cols)} names but X[{i}] (shard {i}) has {np.shape(Xi)[1]} columns"
                )
            try:
                shards.append(Shard(X=_frame_values(Xi), y=_frame_values(yi), columns=names))
            except ArgumentError as exc:
                raise ArgumentError(exc.path, f"X[{i}] (shard {i}): {exc.message}") from None
            except ValueError as exc:
                raise ValueError(f"X[{i}] (shard {i}): {exc}") from None
        else:
            raise ValueError(f"X[{i}] must be an (X_i, y_i) pair, a file path or a Shard, got {type(item).__name__}")
    return ShardSet(tuple(shards), PRESPLIT)


def _with_columns(item: Shard, cols: tuple[str, ...], i: int) -> Shard:
    """A Shard given without column names, named by `columns` (its width checked)."""
    try:
        return dataclasses.replace(item, columns=cols)
    except ArgumentError as exc:
        raise ArgumentError(exc.path, f"X[{i}] (shard {i}): {exc.message}") from None


def _frame_columns(X: Any) -> tuple[str, ...] | None:
    """A DataFrame's column names (None for an array)."""
    if hasattr(X, "columns") and hasattr(X, "to_numpy"):
        return tuple(str(c) for c in X.columns)
    return None


def _frame_values(X: Any) -> Any:
    """A DataFrame's or Series' values (an object array where columns mix numbers and text); arrays unchanged."""
    return X.to_numpy() if hasattr(X, "to_numpy") else X


def _group_labels(by: Any, X: np.ndarray, cols: tuple[str, ...] | None) -> np.ndarray:
    """The group label of every row: X's column named `by`, or `by` itself (an array over the rows)."""
    if isinstance(by, str):
        if cols is None or by not in cols:
            raise ArgumentError(
                ("by",), f"by={by!r} is not a column of X (columns: {None if cols is None else list(cols)})"
            )
        return X[:, cols.index(by)]
    labels = np.asarray(by.to_numpy() if hasattr(by, "to_numpy") else by)
    if labels.ndim != 1 or labels.shape[0] != X.shape[0]:
        msg = f"by must be a column name or one label per row ({X.shape[0]}), got shape {labels.shape}"
        raise ArgumentError(("by",), msg)
    return labels


def _group_parts(labels: np.ndarray, k: int) -> list[np.ndarray]:
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


def shard(
    X: Any,
    y: Any = None,
    num_shards: int | None = None,
    strategy: str = "contiguous",
    *,
    alpha: float = 1.0,
    seed: int = 0,
    columns: Sequence[str] | None = None,
    by: str | Any = None,
    levels: Mapping[str, Sequence[str]] | None = None,
) -> ShardSet:
    """Split (X, y) into `num_shards` shards (default 4), or wrap data that is already split.

    Array data: X 2-D (n, p), y (n,) or (n, k). Strategies: "contiguous" (np.array_split order,
    shards are views of X), "random" (seeded permutation, then split), "label_skew" (each class's
    rows go to shards in Dirichlet(alpha) proportions; needs discrete labels; every shard gets a row).

    Already-split data: X a list/tuple of (X_i, y_i) pairs, file paths or Shards, one per shard,
    with y=None. Then num_shards may be omitted, or must equal the list's length; strategy must stay
    "contiguous" (the data are not re-split) and the result's strategy is "presplit". Paths must
    exist where this is called. A ShardSet passed as X is returned unchanged.

    `columns` names X's columns (a pandas DataFrame X gives them itself); they become parameter names. With
    already-split data it names every shard's columns (each shard's width is checked against it; DataFrames name
    their own). A column of text (a DataFrame's string column, an object array's) holds group labels: it needs a
    name, is stored as `label_code`s, and names the group effects as given (`r_hospital[St Mary,(Intercept)]`).

    `levels` gives the labels of text columns that X already holds as codes (a `DataTable`'s, e.g. a stored
    upload); each shard keeps those its rows use.

    `by` keeps each group in one shard: a column name of X (its values are group labels) or an array of labels over
    the rows. Whole groups go to shards largest first, each to the shard with the fewest rows so far (balanced by
    rows); rows keep their order within a shard; the strategy is "by_group". Models with `group_effects` need it
    (a group's effects are local to the shard holding its rows).

    Invalid arguments raise `ArgumentError` (a ValueError) whose path names the argument.
    """
    if isinstance(X, ShardSet) and y is None:
        if num_shards is not None and num_shards != X.num_shards:
            raise ArgumentError(
                ("num_shards",), f"num_shards={num_shards!r} does not match the {X.num_shards} shards given in X"
            )
        return X
    if isinstance(X, (list, tuple)) and y is None:
        return _presplit(X, num_shards, strategy, columns)

    if columns is None:
        columns = _frame_columns(X)
        if columns is not None and y is None:  # a table for a formula, which names its response: y zeros
            y = np.zeros(len(X))
    X, y = _frame_values(X), _frame_values(y)
    cols = _names(columns, "columns") if columns is not None else None
    if cols is not None and np.ndim(X) == 2 and len(cols) != np.shape(X)[1]:
        raise ArgumentError(("columns",), f"columns has {len(cols)} names but X has {np.shape(X)[1]} columns")
    X, text = _encode_features(X, cols, "X")
    levels = join_levels([None if levels is None else {str(k): tuple(v) for k, v in levels.items()}, text])
    if strategy not in STRATEGIES:
        raise ArgumentError(("strategy",), f"strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
    if (
        isinstance(alpha, bool)
        or not isinstance(alpha, (int, float, np.floating, np.integer))
        or not (np.isfinite(alpha) and alpha > 0)
    ):
        raise ArgumentError(("alpha",), f"alpha must be a positive finite number, got {alpha!r}")
    Xa, ya = _validate(X, y)
    n = Xa.shape[0]
    k = _check_num_shards(_DEFAULT_NUM_SHARDS if num_shards is None else num_shards, n)

    def part(rows: np.ndarray | slice, index: np.ndarray) -> Shard:
        Xp = Xa[rows]
        return Shard(X=Xp, y=ya[rows], index=index, columns=cols, levels=levels_in(Xp, cols, levels))

    if by is not None:
        if strategy != "contiguous":
            raise ArgumentError(("by",), f"by= splits by group; it cannot be combined with strategy={strategy!r}")
        parts = _group_parts(_group_labels(by, Xa, cols), k)
        return ShardSet(tuple(part(p, p) for p in parts), "by_group")

    if strategy == "contiguous":
        parts = np.array_split(np.arange(n), k)
        return ShardSet(tuple(part(slice(p[0], p[-1] + 1), p) for p in parts), strategy)
    rng = np.random.default_rng(seed)
    if strategy == "random":
        parts = [np.sort(p) for p in np.array_split(rng.permutation(n), k)]
    else:
        parts = _label_skew_parts(_class_labels(ya), k, float(alpha), rng)
    return ShardSet(tuple(part(p, p) for p in parts), strategy)


def as_shard_set(shards: Any, *, tables: bool = False) -> ShardSet:
    """`shards` as a ShardSet: one already, or a list of (X_i, y_i) pairs, Shards or file paths (`shard`).
    `tables` (a model that reads whole tables, a formula, which names its own response): path shards that choose no
    feature columns are read with every column in X (`y_column=None`), whatever target column they name: the
    formula's response is one of the columns, read by name."""
    if isinstance(shards, (list, tuple)) and len(shards) > 0:
        shards = shard(list(shards))
    if isinstance(shards, ShardSet):
        if not tables:
            return shards
        return ShardSet(
            tuple(
                dataclasses.replace(s, y_column=None) if s.path is not None and s.x_columns is None else s
                for s in shards
            ),
            shards.strategy,
        )
    raise TypeError(
        "shards must come from rs.shard(X, y, num_shards=...) or be a list of (X_i, y_i) pairs or "
        f"file paths, got {type(shards).__name__}"
    )
