"""New rows for a fitted model (predictions), read the way the run read its data: by column name wherever the rows
name their columns (a DataFrame, or a mapping of column name → values), so that the order of a frame's columns
never changes a prediction; by position, in the data's column order, for a bare array.

A formula model builds its design from the named columns it reads (`BoundFormula.new_rows`): the response is not
needed, categories are matched to the run's levels by label, grouping columns hold text or numbers as the run's did.
Any other model takes the data's columns (`columns` of the bound model) by name, in its order. What cannot be read
is an ArgumentError naming the argument and the column."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import ArgumentError
from ..models.contract import Model
from ..shards import encode_rows, label_code


@dataclass(frozen=True)
class NewRows:
    """New rows as the bound model's checks read them (`X`, `shard_data`'s form) and the text labels they hold by
    `label_code` (`text`: what names a group the run never saw in an error)."""

    X: np.ndarray
    text: Mapping[float, str] = field(default_factory=dict)


def named_columns(X: Any, argname: str) -> dict[str, np.ndarray] | None:
    """X's columns by name when X names them: a DataFrame whose column names are all text, or a mapping of column
    name → one value per row; None for anything else (read by position)."""
    if hasattr(X, "columns") and hasattr(X, "to_numpy"):  # a DataFrame
        names = list(X.columns)
        if not names or not all(isinstance(c, str) for c in names):
            return None
        if len(set(names)) != len(names):
            twice = sorted({c for c in names if names.count(c) > 1})
            raise ArgumentError((argname, "columns"), f"{argname} has the column(s) {twice} more than once")
        return {c: np.asarray(X[c].to_numpy(), dtype=object) for c in names}
    if isinstance(X, Mapping):
        out = {}
        for name, values in X.items():
            if not isinstance(name, str):
                raise ArgumentError((argname,), f"{argname}: a mapping's keys must be column names, got {name!r}")
            arr = np.asarray(values.to_numpy() if hasattr(values, "to_numpy") else values, dtype=object)
            if arr.ndim != 1:
                raise ArgumentError(
                    (argname,), f"{argname}[{name!r}] must be one value per row (1-D), got shape {arr.shape}"
                )
            out[name] = arr
        lengths = {k: len(v) for k, v in out.items()}
        if len(set(lengths.values())) > 1:
            raise ArgumentError((argname,), f"{argname}: the columns have different lengths {lengths}")
        return out
    return None


def _text_codes(columns: Mapping[str, np.ndarray] | np.ndarray) -> dict[float, str]:
    """Every text value of the rows by its `label_code`."""
    arrays = list(columns.values()) if isinstance(columns, Mapping) else [np.asarray(columns, dtype=object).ravel()]
    return {label_code(v): v for a in arrays for v in set(a.tolist()) if isinstance(v, str)}


def _positional_columns(model: Model, X: Any, argname: str) -> dict[str, np.ndarray]:
    """A formula model's new rows given as a bare 2-D array: the data's columns in order (`design.columns`), the
    response's column present or left out."""
    arr = np.asarray(X.to_numpy() if hasattr(X, "to_numpy") else X, dtype=object)
    cols = list(model.design.columns)  # type: ignore[attr-defined]
    response = model.design.response[0]  # type: ignore[attr-defined]
    if arr.ndim != 2:
        raise ArgumentError((argname,), f"{argname} must be a 2-D array (rows, columns), got shape {arr.shape}")
    if arr.shape[1] == len(cols):
        names = cols
    elif response in cols and arr.shape[1] == len(cols) - 1:
        names = [c for c in cols if c != response]
    else:
        raise ArgumentError(
            (argname,),
            f"{argname} has {arr.shape[1]} columns; a formula model reads new rows by column name: give a DataFrame "
            f"or a mapping column → values, or an array with the data's columns {cols} in that order (the response "
            f"{response!r} may be left out)",
        )
    return {c: arr[:, j] for j, c in enumerate(names)}


def read_new_rows(model: Model, X: Any, argname: str) -> NewRows:
    """New rows as the bound model reads them (module docstring); ArgumentError naming `argname` (and the column)
    when they do not fit. A model holding a per-row input as an array over the training rows cannot take new rows
    (give it as a column)."""
    from ..models.common import RowValues

    if hasattr(model, "design") and hasattr(model, "new_rows"):  # a formula model (`BoundFormula`)
        columns = named_columns(X, argname)
        if columns is None:
            columns = _positional_columns(model, X, argname)
        return NewRows(model.new_rows(columns, argname), _text_codes(columns))
    local = model.has_local_params()
    # a model with group effects reads rows as loaded (group and slope columns included) through `shard_data`
    reader = getattr(model, "source", None) if local else model
    cols = getattr(reader, "columns", None)
    named = named_columns(X, argname)
    if named is not None:
        if cols is None:
            raise ArgumentError(
                (argname, "columns"),
                f"{argname} names its columns, but the run's data had no column names: give the rows as an array, "
                "its columns in the data's order",
            )
        missing = [c for c in cols if c not in named]
        if missing:
            raise ArgumentError(
                (argname, "columns"),
                f"{argname} has no column(s) {', '.join(map(repr, missing))}, which the run's model reads; it has "
                f"{list(named)} (the model reads {list(cols)})",
            )
        n = len(next(iter(named.values()))) if named else 0
        table = np.empty((n, len(cols)), dtype=object)
        for j, c in enumerate(cols):
            table[:, j] = named[c]
        X = table
    try:
        arr = np.asarray(encode_rows(X, cols, argname), dtype=np.float64)
    except ArgumentError:
        raise
    except (TypeError, ValueError) as exc:
        raise ArgumentError((argname,), f"{argname} must be a 2-D array of numbers (or group labels): {exc}") from None
    if arr.ndim != 2:
        raise ArgumentError((argname,), f"{argname} must be a 2-D array (rows, columns), got shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise ArgumentError((argname,), f"{argname} contains NaN or infinite values")
    extra = getattr(model, "_extra", None)
    if not local and extra and isinstance(getattr(model, extra, None), RowValues):
        raise ArgumentError(
            (argname,),
            f"the model's {extra} is an array over the training rows, so new rows have none: fit with "
            f"{extra}='<column name>' to predict",
        )
    want = getattr(reader, "n_features", None)
    if model.target_kind != "vector" and want is not None and arr.shape[1] != want:
        named_cols = f" ({', '.join(cols)})" if cols else ""
        raise ArgumentError(
            (argname,), f"{argname} has {arr.shape[1]} columns but the run's model reads {want}{named_cols}"
        )
    raw = np.asarray(X.to_numpy() if hasattr(X, "to_numpy") else X)
    text = _text_codes(raw) if raw.dtype.kind in "OUS" else {}
    if not local:
        return NewRows(arr, text)
    try:
        return NewRows(np.asarray(model.shard_data(arr, np.zeros(arr.shape[0]), None)[0], dtype=np.float64), text)
    except ValueError as exc:
        raise ArgumentError((argname,), f"{argname}: {exc}") from None


def new_rows(model: Model, X: Any, argname: str) -> np.ndarray:
    """New rows as the bound model's checks read them (`read_new_rows`'s X)."""
    return read_new_rows(model, X, argname).X
