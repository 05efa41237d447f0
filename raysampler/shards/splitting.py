"""`shard(...)`: whole arrays or tables split into shards ("contiguous", "random", "label_skew", or by a grouping
column, whole groups per shard), or data the caller split already; `as_shard_set` for what `rs.sample` takes."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import ArgumentError
from ..objectstore import is_uri
from .labels import encode_features, frame_columns, frame_values, join_levels, levels_in
from .readers import check_shard_path, validate_arrays
from .shardset import PRESPLIT, STRATEGIES, Shard, ShardSet, column_names, group_parts

_DEFAULT_NUM_SHARDS = 4


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
    cols = column_names(columns, "columns") if columns is not None else None
    shards: list[Shard] = []
    for i, item in enumerate(items):
        if isinstance(item, Shard):
            if cols is not None and item.columns is not None and item.columns != cols:
                raise ArgumentError(
                    ("columns",), f"columns {list(cols)} differ from X[{i}]'s own columns {list(item.columns)}"
                )
            shards.append(item if cols is None or item.columns is not None else _with_columns(item, cols, i))
        elif isinstance(item, (str, os.PathLike)):
            path = check_shard_path(os.fspath(item))
            if not is_uri(path) and not os.path.exists(path):  # an object is looked up where it is read
                raise FileNotFoundError(f"shard file {path!r} (X[{i}]) does not exist")
            shards.append(Shard(path=path, columns=cols))
        elif isinstance(item, (tuple, list)) and len(item) == 2:
            Xi, yi = item
            names = cols if cols is not None else frame_columns(Xi)
            if cols is not None and np.ndim(Xi) == 2 and len(cols) != np.shape(Xi)[1]:
                raise ArgumentError(
                    ("columns",), f"columns has {len(cols)} names but X[{i}] (shard {i}) has {np.shape(Xi)[1]} columns"
                )
            try:
                shards.append(Shard(X=frame_values(Xi), y=frame_values(yi), columns=names))
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
        columns = frame_columns(X)
        if columns is not None and y is None:  # a table for a formula, which names its response: y zeros
            y = np.zeros(len(X))
    X, y = frame_values(X), frame_values(y)
    cols = column_names(columns, "columns") if columns is not None else None
    if cols is not None and np.ndim(X) == 2 and len(cols) != np.shape(X)[1]:
        raise ArgumentError(("columns",), f"columns has {len(cols)} names but X has {np.shape(X)[1]} columns")
    X, text = encode_features(X, cols, "X")
    levels = join_levels([None if levels is None else {str(k): tuple(v) for k, v in levels.items()}, text])
    if strategy not in STRATEGIES:
        raise ArgumentError(("strategy",), f"strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
    if (
        isinstance(alpha, bool)
        or not isinstance(alpha, (int, float, np.floating, np.integer))
        or not (np.isfinite(alpha) and alpha > 0)
    ):
        raise ArgumentError(("alpha",), f"alpha must be a positive finite number, got {alpha!r}")
    Xa, ya = validate_arrays(X, y)
    n = Xa.shape[0]
    k = _check_num_shards(_DEFAULT_NUM_SHARDS if num_shards is None else num_shards, n)

    def part(rows: np.ndarray | slice, index: np.ndarray) -> Shard:
        Xp = Xa[rows]
        return Shard(X=Xp, y=ya[rows], index=index, columns=cols, levels=levels_in(Xp, cols, levels))

    if by is not None:
        if strategy != "contiguous":
            raise ArgumentError(("by",), f"by= splits by group; it cannot be combined with strategy={strategy!r}")
        parts = group_parts(_group_labels(by, Xa, cols), k)
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
