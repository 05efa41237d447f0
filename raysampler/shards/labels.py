"""Text labels in numeric data: each label's stable code (`label_code`, from the text alone, so every site codes
its labels alike without asking the others), a table's text columns encoded, and the labels of several shards
joined (`Levels`)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import ArgumentError

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


def encode_features(X: Any, columns: Sequence[str] | None, name: str) -> tuple[Any, Levels | None]:
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
    return encode_features(frame_values(X), columns, argname)[0]


def frame_columns(X: Any) -> tuple[str, ...] | None:
    """A DataFrame's column names (None for an array)."""
    if hasattr(X, "columns") and hasattr(X, "to_numpy"):
        return tuple(str(c) for c in X.columns)
    return None


def frame_values(X: Any) -> Any:
    """A DataFrame's or Series' values (an object array where columns mix numbers and text); arrays unchanged."""
    return X.to_numpy() if hasattr(X, "to_numpy") else X
