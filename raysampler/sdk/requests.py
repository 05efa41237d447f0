"""The service's requests as values (`Request`), one builder per endpoint: what to send, never how.

Both clients send what these functions build, so a request is spelled once; `Request.idempotent` tells the retry
policy whether sending it twice is harmless.
"""

from __future__ import annotations

import io
import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike

if TYPE_CHECKING:
    from ..service.schemas import RunSpec

#: A JSON value as a request body or query parameter holds it.
JSON = Any


@dataclass(frozen=True)
class Request:
    """One API request; `idempotent` if sending it twice is harmless (reads, deletes, submits with a key)."""

    method: str
    path: str
    params: dict[str, JSON] | None = None
    json: JSON = None
    headers: dict[str, str] | None = None
    files: Mapping[str, tuple[str, IO[bytes] | bytes] | tuple[str, bytes, str]] | None = None
    data: dict[str, str] | None = None

    @property
    def idempotent(self) -> bool:
        return self.method in ("GET", "HEAD", "DELETE") or "Idempotency-Key" in (self.headers or {})

    def kwargs(self) -> dict[str, Any]:
        """The request's parts as httpx's keyword arguments (those it has)."""
        out = {"params": self.params, "json": self.json, "headers": self.headers}
        out |= {"files": self.files, "data": self.data}
        return {k: v for k, v in out.items() if v is not None}


# --- runs ----------------------------------------------------------------------------------------------------------


def submit(
    spec: Mapping[str, Any] | RunSpec,
    run_id: str | None,
    idempotency_key: str | None,
    name: str | None = None,
    tags: Mapping[str, str] | None = None,
    secure_sums: bool | None = None,
    privacy: Any = None,
) -> Request:
    """POST /v1/runs with an Idempotency-Key (a fresh one unless given), so that a resent submit makes one run;
    `privacy` (an `rs.DP` or a mapping {epsilon, delta, clip}) sets the body's DP mode."""
    body = dict(spec) if isinstance(spec, Mapping) else spec.model_dump(mode="json", exclude_none=True)
    if secure_sums is not None:
        body["secure_sums"] = secure_sums
    if privacy is not None:
        body["privacy"] = privacy_body(privacy)
    if run_id is not None:
        body["run_id"] = run_id
    if name is not None:
        body["name"] = name
    if tags:
        body["tags"] = dict(body.get("tags") or {}) | dict(tags)
    return Request("POST", "/v1/runs", json=body, headers={"Idempotency-Key": idempotency_key or str(uuid.uuid4())})


def privacy_body(privacy: Any) -> dict[str, Any]:
    """The run body's `privacy` from an `rs.DP` (its fields) or a mapping (as given: the service checks it)."""
    if isinstance(privacy, Mapping):
        return dict(privacy)
    body = {"epsilon": privacy.epsilon, "delta": privacy.delta, "clip": privacy.clip}
    rule = getattr(privacy, "clip_rule", "gradient")
    return body if rule == "gradient" else body | {"clip_rule": rule}


def run(run_id: str) -> Request:
    return Request("GET", f"/v1/runs/{run_id}")


def runs(
    status: str | None,
    page_size: int,
    cursor: str | None,
    name: str | None = None,
    tags: Mapping[str, str] | None = None,
) -> Request:
    """One page of GET /v1/runs (newest first), from `cursor`."""
    params: dict[str, JSON] = (
        {"limit": page_size} | ({"status": status} if status else {}) | ({"cursor": cursor} if cursor else {})
    )
    if name is not None:
        params["name"] = name
    if tags:
        params["tag"] = [f"{k}:{v}" for k, v in tags.items()]
    return Request("GET", "/v1/runs", params=params)


def cancel(run_id: str) -> Request:
    return Request("POST", f"/v1/runs/{run_id}/cancel")


def resume(run_id: str) -> Request:
    return Request("POST", f"/v1/runs/{run_id}/resume")


def delete_run(run_id: str) -> Request:
    return Request("DELETE", f"/v1/runs/{run_id}")


# --- a run's streams and results -----------------------------------------------------------------------------------


def events(run_id: str, follow: bool, last_event_id: int) -> Request:
    """The run's Server-Sent Events after `last_event_id` (how a dropped stream resumes)."""
    return Request(
        "GET",
        f"/v1/runs/{run_id}/events",
        params={"follow": str(follow).lower()},
        headers={"Last-Event-ID": str(last_event_id)},
    )


def draws(run_id: str, start: int, follow: bool) -> Request:
    """The NDJSON draw stream from line offset `start` (how a dropped stream resumes)."""
    return Request("GET", f"/v1/runs/{run_id}/draws", params={"start": start, "follow": str(follow).lower()})


def summary(run_id: str, ci_prob: float) -> Request:
    return Request("GET", f"/v1/runs/{run_id}/summary", params={"ci_prob": ci_prob})


def effects(run_id: str, kind: str, probs: tuple[float, float]) -> Request:
    """A brms-style table: kind "fixef", "ranef", "coef" or "prior", with the central interval `probs`."""
    return Request("GET", f"/v1/runs/{run_id}/effects", params={"kind": kind, "lower": probs[0], "upper": probs[1]})


def arviz(run_id: str) -> Request:
    return Request("GET", f"/v1/runs/{run_id}/arviz")


def _rows_json(rows: Any, columns: list[str] | None) -> tuple[list[list[JSON]], list[str] | None]:
    """New rows as JSON: a pandas DataFrame or a mapping of column name -> values gives its names as `columns`
    (the service reads rows by name); an array-like is sent row by row, numbers as numbers and text (group
    labels) as text."""
    if hasattr(rows, "columns") and hasattr(rows, "to_numpy"):  # a pandas DataFrame
        names = [str(c) for c in rows.columns]
        values = rows.to_numpy(dtype=object)
    elif isinstance(rows, Mapping):
        names = [str(c) for c in rows]
        values = np.column_stack([np.asarray(v, dtype=object) for v in rows.values()]) if rows else np.empty((0, 0))
    else:
        names = None
        values = np.asarray(rows, dtype=object)
    if names is not None and columns is not None and list(columns) != names:
        raise ValueError(f"columns {list(columns)} differ from the rows' own column names {names}: give one of them")
    if values.ndim != 2:
        raise ValueError(f"rows must be 2-D (rows × columns), got shape {values.shape}")
    return [[_cell(v) for v in row] for row in values], (names if names is not None else columns)


def _cell(v: Any) -> JSON:
    if isinstance(v, (str, np.str_)):
        return str(v)
    if isinstance(v, (bool, np.bool_)):
        return float(v)
    try:
        return float(v)
    except (TypeError, ValueError):
        return str(v)


def predict(
    run_id: str,
    rows: Any,
    dataset_id: str | None,
    columns: list[str] | None,
    kind: str,
    draws: int | str,
    prob: float,
    seed: int,
    re_formula: str | None = None,
    allow_new_levels: bool = True,
) -> Request:
    """POST /v1/runs/{id}/predict at inline `rows` (an array, a DataFrame or a mapping of columns) or an uploaded
    data set's."""
    body: dict[str, JSON] = {"kind": kind, "draws": draws, "prob": prob, "seed": seed}
    if rows is not None:
        body["rows"], columns = _rows_json(rows, columns)
    if dataset_id is not None:
        body["dataset_id"] = dataset_id
    if columns is not None:
        body["columns"] = list(columns)
    if re_formula is not None:
        body["re_formula"] = re_formula
    if not allow_new_levels:
        body["allow_new_levels"] = False
    return Request("POST", f"/v1/runs/{run_id}/predict", json=body)


def evaluate(run_id: str, data: Mapping[str, JSON], draws: int | str, bins: int, seed: int) -> Request:
    body = {"data": dict(data), "draws": draws, "bins": bins, "seed": seed}
    return Request("POST", f"/v1/runs/{run_id}/evaluate", json=body)


def ledger(run_id: str, site: str | None) -> Request:
    return Request("GET", f"/v1/runs/{run_id}/ledger", params={} if site is None else {"site": site})


def loo(run_id: str, draws: int | str, moment_match: bool = False) -> Request:
    params = {"draws": str(draws)} | ({"moment_match": "true"} if moment_match else {})
    return Request("GET", f"/v1/runs/{run_id}/loo", params=params)


def bayes_r2(run_id: str, draws: int | str) -> Request:
    return Request("GET", f"/v1/runs/{run_id}/r2", params={"draws": str(draws)})


def ppc(
    run_id: str, kind: str, stat: str, draws: int | str | None, bins: int | None, seed: int, group: str | None = None
) -> Request:
    params: dict[str, JSON] = {"kind": kind, "stat": stat, "seed": seed}
    if group is not None:
        params["group"] = group
    if draws is not None:
        params["draws"] = str(draws)
    if bins is not None:
        params["bins"] = bins
    return Request("GET", f"/v1/runs/{run_id}/ppc", params=params)


def compare(run_ids: list[str], draws: int | str, method: str = "pseudo-bma") -> Request:
    return Request("POST", "/v1/compare", json={"runs": list(run_ids), "draws": draws, "method": method})


# --- data sets and the service -------------------------------------------------------------------------------------


def upload_arrays(X: ArrayLike, y: ArrayLike, name: str | None) -> Request:
    """POST /v1/datasets of arrays, sent as one .npz."""
    buf = io.BytesIO()
    np.savez(buf, X=np.asarray(X), y=np.asarray(y))
    files = {"file": ((name or "data") + ".npz", buf.getvalue(), "application/octet-stream")}
    return Request("POST", "/v1/datasets", files=files, data={"name": name} if name else {})


def upload_file(
    path: str, content: IO[bytes] | bytes, y_column: str, x_columns: list[str] | None, name: str | None
) -> Request:
    """POST /v1/datasets of a file; an open file is read in chunks as the request is sent, never whole."""
    form = {"y_column": y_column} | ({"x_columns": ",".join(x_columns)} if x_columns else {})
    form |= {"name": name} if name else {}
    return Request("POST", "/v1/datasets", files={"file": (os.path.basename(path), content)}, data=form)


def datasets() -> Request:
    return Request("GET", "/v1/datasets")


def delete_dataset(dataset_id: str) -> Request:
    return Request("DELETE", f"/v1/datasets/{dataset_id}")


def models() -> Request:
    return Request("GET", "/v1/models")


def health() -> Request:
    return Request("GET", "/v1/health")


def version() -> Request:
    return Request("GET", "/v1/version")
