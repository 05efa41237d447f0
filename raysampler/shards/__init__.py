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

Modules: `labels` (text label codes), `readers` (files and their checks), `shardset` (`Shard`, `ShardSet`,
`GroupPart`), `splitting` (`shard(...)`).
"""

from __future__ import annotations

from .labels import Levels, encode_rows, encode_text, join_levels, label_code, levels_in
from .readers import PARQUET_SUFFIXES, SUFFIXES, DataTable, FileHeader, read_data_file, read_header, read_table
from .shardset import PRESPLIT, STRATEGIES, GroupPart, Shard, ShardSet, split_site_groups
from .splitting import as_shard_set, shard

__all__ = [
    "PARQUET_SUFFIXES",
    "PRESPLIT",
    "STRATEGIES",
    "SUFFIXES",
    "DataTable",
    "FileHeader",
    "GroupPart",
    "Levels",
    "Shard",
    "ShardSet",
    "as_shard_set",
    "encode_rows",
    "encode_text",
    "join_levels",
    "label_code",
    "levels_in",
    "read_data_file",
    "read_header",
    "read_table",
    "shard",
    "split_site_groups",
]
