"""Uploaded data sets: ids, where their files live (<storage>/datasets/<tenant>/<id>.npz, on the data dir or the
service's object storage, so that every replica reads them), and turning an upload (.npz, .csv or .parquet) into a
stored (X, y) that runs reference by id. The format is read from the file's first bytes, not from its name.
"""

from __future__ import annotations

import io
import os
import secrets
import tempfile
from collections.abc import Callable, Sequence
from typing import Any, BinaryIO

import numpy as np

from ..shards import DataTable, read_header, read_table
from ..storage import Storage, read_location, read_npz, remove_location
from .backends import file_storage
from .errors import FieldError, NotFound, TooLarge
from .records import DatasetRecord
from .settings import Settings
from .store import RecordStore

_ZIP_MAGIC = b"PK\x03\x04"  # .npz files are zip archives
_PARQUET_MAGIC = b"PAR1"
_READ_CHUNK = 1 << 20
#: an upload's target column unless it names another (form field y_column)
DEFAULT_Y_COLUMN = "y"


def new_dataset_id() -> str:
    return "ds-" + secrets.token_hex(8)


def dataset_storage(settings: Settings) -> Storage:
    """Where uploaded data sets live: datasets/ below the service's storage (a folder per tenant)."""
    return file_storage(settings).child("datasets")


def load_dataset(rec: DatasetRecord) -> DataTable:
    """X, y, the column names (when the upload had them), the text columns' labels and the target's name (None for
    a table uploaded whole, for a formula) of a stored data set."""
    z = read_npz(read_location(rec.path))
    levels = {str(a[0]): tuple(str(v) for v in a[1:]) for k, a in z.items() if k.startswith("levels_")}
    columns = tuple(str(c) for c in z["columns"]) if "columns" in z else None
    # the target's name ("": uploaded whole, no target); uploads from before it was kept all had the default "y"
    target = str(z["target"]) if "target" in z else DEFAULT_Y_COLUMN
    return DataTable(z["X"], z["y"], columns, levels or None, target or None)


def sniff_suffix(head: bytes) -> str:
    """The file type of an upload from its first bytes: ".npz" (zip), ".parquet" (PAR1), else ".csv"."""
    if head.startswith(_ZIP_MAGIC):
        return ".npz"
    if head.startswith(_PARQUET_MAGIC):
        return ".parquet"
    return ".csv"


def _refusal(head: bytes, exc: Exception, tmp_name: str, filename: str | None) -> str:
    """Why an upload was refused, saying what it was read as and why: the type comes from its first bytes."""
    kind = {
        ".npz": "an .npz archive (it starts like a zip file)",
        ".parquet": "parquet (it starts with PAR1)",
        ".csv": "CSV (it is not .npz or parquet)",
    }[sniff_suffix(head)]
    detail = str(exc).replace(repr(tmp_name), repr(filename or "the upload")).replace(tmp_name, filename or "upload")
    if isinstance(exc, UnicodeDecodeError):
        return f"the file was read as {kind} but is not UTF-8 text: {detail}"
    return f"the file was read as {kind} and refused: {detail}"


def _target_column(path: str, y_column: str, x_columns: Sequence[str] | None) -> str | None:
    """The column an upload's y is read from: `y_column`; None (the table kept whole, every column in X) when
    y_column is the default "y", the file is a CSV or parquet table without such a column and no feature columns
    are chosen: a formula names its response among the columns, so its data need no target. ValueError for a CSV
    whose first row is numbers (no header row)."""
    if y_column != DEFAULT_Y_COLUMN or x_columns or path.endswith(".npz"):
        return y_column
    columns = read_header(path, y=None).columns
    if columns is None or DEFAULT_Y_COLUMN in columns:
        return y_column
    if all(_is_number(c) for c in columns):  # a headerless CSV: its first row is data
        raise ValueError(f"its first row {list(columns)} holds numbers, not column names: a CSV needs a header row")
    return None


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def store_upload(
    settings: Settings,
    store: RecordStore,
    tenant: str,
    upload: BinaryIO,
    filename: str | None,
    y_column: str,
    x_columns: Sequence[str] | None,
    name: str | None,
    admit: Callable[[int], None] | None = None,
) -> DatasetRecord:
    """Read an uploaded file (at most settings.max_upload_bytes, else TooLarge), check it like in-memory data
    (FieldError on "file" naming the problem), store it as .npz and record it for the tenant. `admit(nbytes)` may
    refuse to store that many more bytes (a quota) by raising."""
    limit = settings.max_upload_bytes
    head = upload.read(_READ_CHUNK)
    fd, tmp_name = tempfile.mkstemp(suffix=sniff_suffix(head), dir=settings.datasets_dir)
    try:
        size = 0
        with os.fdopen(fd, "wb") as tmp:
            chunk = head
            while chunk:
                size += len(chunk)
                if size > limit:
                    raise TooLarge(f"upload is over the limit of {limit} bytes (RAYSAMPLER_MAX_UPLOAD_BYTES)")
                tmp.write(chunk)
                chunk = upload.read(_READ_CHUNK)
        try:
            target = _target_column(tmp_name, y_column, x_columns)
            table = read_table(tmp_name, y=target, x=list(x_columns) if x_columns else None)
        except (ValueError, ImportError) as exc:
            raise FieldError(("file",), _refusal(head, exc, tmp_name, filename)) from None
        X, y, columns = table.X, table.y, table.columns
        if admit is not None:
            admit(int(X.nbytes + y.nbytes))
        dataset_id = new_dataset_id()
        buf = io.BytesIO()
        arrays: dict[str, Any] = {"X": X, "y": y}
        if columns is not None:  # kept so that runs name their parameters after the columns
            arrays["columns"] = np.array(columns, dtype=str)
        arrays["target"] = np.array(table.target or "", dtype=str)
        for k, (col, labels) in enumerate((table.levels or {}).items()):  # text columns' labels (X holds codes)
            arrays[f"levels_{k}"] = np.array([col, *labels], dtype=str)
        np.savez(buf, **arrays)
        where = dataset_storage(settings).child(tenant)
        where.write(f"{dataset_id}.npz", buf.getvalue())
        return store.add_dataset(
            tenant,
            dataset_id,
            name or filename or dataset_id,
            int(X.shape[0]),
            int(X.shape[1]),
            len(buf.getvalue()),
            where.location_of(f"{dataset_id}.npz"),
        )
    finally:
        os.unlink(tmp_name)


def get_dataset(store: RecordStore, tenant: str, dataset_id: str) -> DatasetRecord:
    rec = store.get_dataset(tenant, dataset_id)
    if rec is None:
        raise NotFound(f"no data set {dataset_id!r}")
    return rec


def delete_dataset(store: RecordStore, tenant: str, dataset_id: str) -> None:
    """Forget the data set and remove its file (runs that used it keep their draws)."""
    rec = get_dataset(store, tenant, dataset_id)
    store.delete_dataset(tenant, dataset_id)
    remove_location(rec.path)
