"""Answers of the service as the objects a Python user works with: pandas tables, numpy arrays, the engine's
predictive-check records, an xarray DataTree, and the engine's `Result`. Each function reads one response body;
pandas, xarray and the engine are imported only when one is called, so that `import raysampler.sdk` stays light
(the last two are `raysampler[engine]`'s: without it, arviz() and result() say so)."""

from __future__ import annotations

import os
import tempfile
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pandas as pd
    import xarray as xr

    from ..predictive import PpcResult
    from ..result import Result
    from ..wire import RunInfo

#: A JSON object of a response body.
Body = dict[str, Any]


def summary_frame(body: Body) -> pd.DataFrame:
    """A RunSummary as a DataFrame indexed by parameter name, in the server's column order."""
    import pandas as pd

    frame = pd.DataFrame(body["rows"]).set_index("param")
    return frame[body["columns"]]


def effect_tables(body: Body) -> dict[str, pd.DataFrame]:
    """An EffectsTable as `Result`'s summaries give it: per group ("" for fixef and prior) a table indexed by label,
    or by (label, effect) for group effects; the prior summary keeps its row numbers."""
    import pandas as pd

    columns = body["columns"]
    grouped: dict[str, list[Body]] = {}
    for row in body["rows"]:
        grouped.setdefault(row.get("group", ""), []).append(row)
    out: dict[str, pd.DataFrame] = {}
    for group, rows in grouped.items():
        values = [[np.nan if r[c] is None else r[c] for c in columns] for r in rows]
        if body["kind"] == "prior":
            out[group] = pd.DataFrame(values, columns=columns)
            continue
        labels = [tuple(r["index"]) if len(r["index"]) > 1 else r["index"][0] for r in rows]
        index = pd.MultiIndex.from_tuples(labels) if labels and isinstance(labels[0], tuple) else pd.Index(labels)
        out[group] = pd.DataFrame(values, index=index, columns=columns)
    return out


def effects_frame(body: Body) -> pd.DataFrame:
    """An EffectsTable as one DataFrame indexed by (group,) label: the form of the deprecated `effects(kind)`."""
    import pandas as pd

    frame = pd.DataFrame(body["rows"])
    if frame.empty:
        return frame
    keys = (["group"] if "group" in frame else []) + ["index"]
    frame["index"] = [tuple(i) if len(i) > 1 else i[0] for i in frame["index"]]
    return frame.set_index(keys)[body["columns"]]


def prediction_values(body: Body) -> np.ndarray:
    """A Prediction's values as an array (null → nan)."""
    return np.array(body["values"], dtype=np.float64)


def ppc_result(body: Body) -> PpcResult:
    """A PpcInfo body as the engine's record (`PpcDensity`, `PpcHistogram` or `PpcStat`), so that it plots alike."""
    from ..predictive import PpcDensity, PpcHistogram, PpcStat

    def arr(v: Any) -> np.ndarray:
        return np.array(v, dtype=np.float64)  # null (not finite) -> nan

    response = str(body.get("response") or "y")
    if body["kind"] == "stat_grouped":
        from ..predictive import PpcStatGrouped

        return PpcStatGrouped(
            body["stat"],
            body["group"],
            tuple(body["labels"]),
            arr(body["observed"]),
            arr(body["replicated"]).reshape(len(body["labels"]), -1),
            np.array(body["n"], dtype=np.int64),
            response=response,
        )
    if body["kind"] == "stat":
        observed = np.nan if body["observed"] is None else float(body["observed"])
        return PpcStat(body["stat"], observed, arr(body["replicated"]), body["n"], response=response)
    if body["kind"] == "hist":
        counts = np.array(body["replicated"], dtype=np.int64).reshape(-1, len(body["observed"]))
        seen = np.array(body["observed"], dtype=np.int64)
        return PpcHistogram(arr(body["edges"]), seen, counts, body["n"], response=response)
    dens = arr(body["replicated"]).reshape(-1, len(body["grid"]))
    grid, bandwidth = arr(body["grid"]), arr(body["bandwidth"])
    return PpcDensity(grid, arr(body["observed"]), dens, bandwidth, body["n"], response=response)


def comparison_frame(body: Body) -> pd.DataFrame:
    """A Comparison's rows as a DataFrame indexed by run id, best first."""
    import pandas as pd

    rows = body["rows"]
    values = [{k: v for k, v in r.items() if k != "run_id"} for r in rows]
    return pd.DataFrame(values, index=[r["run_id"] for r in rows])


def open_netcdf(content: bytes) -> xr.DataTree:
    """The /arviz answer (NetCDF-4 bytes) as a DataTree loaded into memory (h5netcdf reads files, not bytes)."""
    from ..extras import require

    require("engine", "RunHandle.to_arviz() (and .result())", modules=("xarray", "h5netcdf", "h5py"))
    import xarray as xr

    fd, path = tempfile.mkstemp(suffix=".nc")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(content)
        with xr.open_datatree(path, engine="h5netcdf") as tree:
            return tree.load()
    finally:
        os.unlink(path)


def result_of(tree: xr.DataTree, info: RunInfo) -> Result:
    """A run's export as the `Result` that `raysampler.sample` returns: one parameter block per posterior variable
    (its dims and labels), `draws` their values side by side (chains, draws, d), its sample stats and attributes.

    The service sends every parameter on its natural scale (σ, not log σ) and not how it was sampled, so each block's
    transform is the identity: `draws` equals `RunHandle.draws()`, and `posterior`, `summary`, `fixef`, `ranef` and
    `coef` give what the service gives. The model and the rows stay on the service (`predict`, `loo` and `pp_check`
    are the handle's)."""
    from ..extras import require

    require("engine", "RunHandle.result()")  # Result is the engine's
    from ..models.contract import ParamBlock
    from ..result import Result

    posterior = tree["posterior"]
    attrs = dict(posterior.attrs)
    names = list(info.get("param_names") or [])
    blocks: list[ParamBlock] = []
    columns: list[np.ndarray] = []
    for name, var in posterior.data_vars.items():
        values = np.asarray(var.values, dtype=np.float64)
        chains, draws = values.shape[:2]
        dims = [str(d) for d in var.dims[2:]]
        if not dims:  # a scalar: it keeps the one label of its flat name (`sd_g[(Intercept)]`)
            flat = names[sum(b.size for b in blocks)] if len(names) > sum(b.size for b in blocks) else str(name)
            label = (flat[len(str(name)) + 1 : -1],) if flat.startswith(f"{name}[") else None
            blocks.append(ParamBlock(str(name), 1, None, label))
        else:
            labels = [tuple(str(v) for v in var.coords[d].values) for d in dims]
            inner_dim, inner_labels = (dims[1], labels[1]) if len(dims) > 1 else (None, None)
            size = values[0, 0].size
            numeric = bool(np.issubdtype(var.coords[dims[0]].dtype, np.number))  # group labels of a numeric column
            blocks.append(ParamBlock(str(name), size, dims[0], labels[0], "identity", inner_dim, inner_labels, numeric))
        columns.append(values.reshape(chains, draws, -1))
    stats = {}
    if "sample_stats" in tree.children:
        stats = {str(k): np.asarray(v.values) for k, v in tree["sample_stats"].data_vars.items()}
    seed = attrs.get("seed")
    return Result(
        np.ascontiguousarray(np.concatenate(columns, axis=2)),
        [n for b in blocks for n in b.names()],
        stats,
        algorithm=attrs.get("algorithm") or None,
        executor="service",
        layout=tuple(blocks),
        spec=attrs.get("spec"),
        seed=None if seed is None else int(seed),
    )
