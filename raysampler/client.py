"""Python SDK for the raysampler service: `Client` (sync, safe inside Jupyter: no event loop used) and `AsyncClient`.

    client = Client("http://127.0.0.1:8000", api_key="...")
    run = client.submit({"model": {"family": "logistic_regression"}, "data": {"dataset": "builtin:breast_cancer"}})
    run.wait(progress=True)            # tqdm bar fed by the run's event stream
    for batch in run.stream_draws():   # DrawBatch: offset, chain, index, values (n, d)
        ...
    run.draws()                        # numpy (chains, draws, d); run.summary() → pandas; run.to_arviz() → DataTree

Idempotent calls are retried on connection errors and 502/503/504 with exponential back-off; `submit` sends an
Idempotency-Key so a retried submit returns the same run. Streams resume at their offset after a dropped connection.
"""
from __future__ import annotations

import asyncio
import json
import os
import tempfile
import time
import uuid
from dataclasses import dataclass
from typing import Any, AsyncIterator, Iterator

import httpx
import numpy as np
import orjson

from .service.schemas import TERMINAL, RunSpec
from .service.streaming import decode_values

RETRY_STATUS = {502, 503, 504}


class APIError(RuntimeError):
    """The service answered with an error; `.status_code` and `.detail` (the server's message) say which."""

    def __init__(self, status_code: int, detail: Any) -> None:
        super().__init__(f"HTTP {status_code}: {_detail_text(detail)}")
        self.status_code, self.detail = status_code, detail


def _detail_text(detail: Any) -> str:
    if isinstance(detail, list):  # FastAPI validation errors: name the field
        return "; ".join(f"{'.'.join(str(p) for p in e.get('loc', ()) if p != 'body')}: {e.get('msg')}"
                         for e in detail)
    return str(detail)


def _check(resp: httpx.Response) -> httpx.Response:
    if resp.status_code >= 400:
        try:
            detail = resp.json().get("detail", resp.text)
        except (ValueError, AttributeError):
            detail = resp.text
        raise APIError(resp.status_code, detail)
    return resp


@dataclass
class DrawBatch:
    """Consecutive draw lines of a stream: offset of the first, and per line its chain, index and values (n, d)."""

    offset: int
    chain: np.ndarray
    index: np.ndarray
    values: np.ndarray

    def __len__(self) -> int:
        return len(self.chain)


def _spec_body(spec: dict | RunSpec, run_id: str | None) -> dict:
    body = spec.model_dump(mode="json", exclude_none=True) if isinstance(spec, RunSpec) else dict(spec)
    if run_id is not None:
        body["run_id"] = run_id
    return body


def _npz_upload(X: Any, y: Any, name: str | None) -> dict:
    import io

    buf = io.BytesIO()
    np.savez(buf, X=np.asarray(X), y=np.asarray(y))
    files = {"file": ((name or "data") + ".npz", buf.getvalue(), "application/octet-stream")}
    return {"files": files, "data": {"name": name} if name else {}}


def _upload_form(y_column: str, x_columns: list[str] | None, name: str | None) -> dict:
    return {"y_column": y_column} | ({"x_columns": ",".join(x_columns)} if x_columns else {}) | \
        ({"name": name} if name else {})


def _batch(lines: list[dict]) -> DrawBatch:
    return DrawBatch(offset=lines[0]["offset"], chain=np.array([l["chain"] for l in lines]),
                     index=np.array([l["index"] for l in lines]),
                     values=np.array([decode_values(l["values"]) for l in lines], dtype=float))


def _assemble(header: dict, batches: list[DrawBatch]) -> np.ndarray:
    """(chains, draws, d) from complete lines (a trailing partial index is dropped)."""
    chains, d = header["chains"], header["dim"] or 0
    if not batches:
        return np.empty((chains, 0, d))
    values = np.concatenate([b.values for b in batches])
    n = len(values) // chains
    return np.ascontiguousarray(values[: n * chains].reshape(n, chains, d).transpose(1, 0, 2))


def _summary_frame(body: dict):
    import pandas as pd

    frame = pd.DataFrame(body["rows"]).set_index("param")
    return frame[body["columns"]]


def _sse_events(lines: Iterator[str]) -> Iterator[dict]:
    """Parse SSE lines into {"id", "event", "data"} dicts (comments and retry fields skipped)."""
    ev: dict[str, Any] = {}
    for line in lines:
        if not line:
            if "data" in ev:
                ev["data"] = json.loads(ev["data"])
                yield ev
            ev = {}
        elif line.startswith(":"):
            continue
        else:
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field in ("id", "event", "data"):
                ev[field] = value


class _Lines:
    """Split streamed text into complete lines, keeping the tail for the next chunk."""

    def __init__(self) -> None:
        self.rest = ""

    def feed(self, text: str) -> list[str]:
        self.rest += text
        *done, self.rest = self.rest.split("\n")
        return [l for l in done if l]


def _parse_draw_lines(raw: list[str], header: dict | None) -> tuple[dict | None, list[dict]]:
    out = []
    for text in raw:
        obj = orjson.loads(text)
        if obj.get("type") == "header":
            header = obj
        else:
            out.append(obj)
    return header, out


def _idempotent(method: str, kw: dict) -> bool:
    """Safe to send twice: reads, deletes, and POSTs carrying an Idempotency-Key (submits)."""
    return method in ("GET", "HEAD", "DELETE") or "Idempotency-Key" in (kw.get("headers") or {})


def _may_retry(exc: httpx.TransportError, method: str, kw: dict) -> bool:
    """Retry if the request cannot have reached the service, or if sending it twice is harmless."""
    return isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout)) or _idempotent(method, kw)


def _connection(url: str | None, api_key: str | None, timeout: float) -> tuple[str, dict]:
    """(base URL, httpx client options) from the arguments or $RAYSAMPLER_URL / $RAYSAMPLER_API_KEY."""
    url = (url or os.environ.get("RAYSAMPLER_URL") or "http://127.0.0.1:8000").rstrip("/")
    key = api_key or os.environ.get("RAYSAMPLER_API_KEY")
    if not key:
        raise ValueError("api_key is required (or set RAYSAMPLER_API_KEY)")
    return url, {"base_url": url, "headers": {"Authorization": f"Bearer {key}"},
                 "timeout": httpx.Timeout(timeout, read=None)}


class Client:
    """Synchronous client; `url` and `api_key` default to $RAYSAMPLER_URL and $RAYSAMPLER_API_KEY."""

    def __init__(self, url: str | None = None, api_key: str | None = None, *, timeout: float = 30.0,
                 retries: int = 3, backoff_s: float = 0.5) -> None:
        self.retries, self.backoff_s = retries, backoff_s
        self.url, options = _connection(url, api_key, timeout)
        self._http = httpx.Client(**options)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _request(self, method: str, path: str, **kw: Any) -> httpx.Response:
        for attempt in range(self.retries + 1):
            last = attempt == self.retries
            try:
                resp = self._http.request(method, path, **kw)
                if resp.status_code not in RETRY_STATUS or last or not _idempotent(method, kw):
                    return _check(resp)
            except httpx.TransportError as exc:
                if last or not _may_retry(exc, method, kw):
                    raise
            time.sleep(self.backoff_s * 2 ** attempt)
        raise AssertionError("unreachable")

    # --- runs ---------------------------------------------------------------------------------------------------
    def submit(self, spec: dict | RunSpec, *, run_id: str | None = None, idempotency_key: str | None = None) -> "RunHandle":
        """Submit a run (a RunSpec or its dict); returns its handle. Invalid specs raise APIError (422) naming the field."""
        key = idempotency_key or str(uuid.uuid4())
        info = self._request("POST", "/v1/runs", json=_spec_body(spec, run_id),
                             headers={"Idempotency-Key": key}).json()
        return RunHandle(self, info["id"], info)

    def run(self, run_id: str) -> "RunHandle":
        return RunHandle(self, run_id, self._request("GET", f"/v1/runs/{run_id}").json())

    def runs(self, status: str | None = None, page_size: int = 50) -> Iterator[dict]:
        """All the tenant's runs, newest first (follows the cursor pages)."""
        cursor = None
        while True:
            params = {"limit": page_size} | ({"status": status} if status else {}) | ({"cursor": cursor} if cursor else {})
            page = self._request("GET", "/v1/runs", params=params).json()
            yield from page["runs"]
            cursor = page["next_cursor"]
            if cursor is None:
                return

    # --- data sets ----------------------------------------------------------------------------------------------
    def upload_dataset(self, X: Any, y: Any, name: str | None = None) -> dict:
        """Upload arrays (as .npz) for runs to use as {"dataset_id": ...}; returns {id, n, d, ...}."""
        return self._request("POST", "/v1/datasets", **_npz_upload(X, y, name)).json()

    def upload_file(self, path: str, *, y_column: str = "y", x_columns: list[str] | None = None,
                    name: str | None = None) -> dict:
        """Upload a .npz, .csv or .parquet file; y_column / x_columns name the target and feature columns."""
        with open(path, "rb") as fh:
            return self._request("POST", "/v1/datasets", files={"file": (os.path.basename(path), fh)},
                                 data=_upload_form(y_column, x_columns, name)).json()

    def datasets(self) -> list[dict]:
        return self._request("GET", "/v1/datasets").json()["datasets"]

    def delete_dataset(self, dataset_id: str) -> None:
        self._request("DELETE", f"/v1/datasets/{dataset_id}")

    def health(self) -> dict:
        return self._request("GET", "/v1/health").json()

    def version(self) -> dict:
        return self._request("GET", "/v1/version").json()


class RunHandle:
    """One run on the service."""

    def __init__(self, client: Client, run_id: str, info: dict | None = None) -> None:
        self.client, self.id, self._info = client, run_id, info

    def __repr__(self) -> str:
        return f"RunHandle({self.id!r}, status={self._info['status'] if self._info else '?'})"

    def info(self) -> dict:
        """The run object: status, progress, timings, per-worker τ_i, N_i, idle fraction, error."""
        self._info = self.client._request("GET", f"/v1/runs/{self.id}").json()
        return self._info

    def status(self) -> str:
        return self.info()["status"]

    def events(self, after: int = 0, follow: bool = True, deadline: float | None = None) -> Iterator[dict]:
        """The run's events ({"id", "event", "data"}); reconnects with Last-Event-ID if the connection drops.
        With a `deadline` (time.monotonic()), raises TimeoutError once it passes, even while no event comes."""
        last, failures = after, 0
        while True:
            try:
                with self.client._http.stream("GET", f"/v1/runs/{self.id}/events",
                                              params={"follow": str(follow).lower()},
                                              headers={"Last-Event-ID": str(last)},
                                              timeout=_stream_timeout(self.client._http, deadline)) as resp:
                    _check_stream(resp)
                    for ev in _sse_events(_until(resp.iter_lines(), deadline, self.id)):
                        last = int(ev.get("id", last))
                        failures = 0
                        yield ev
                return
            except httpx.ReadTimeout:
                _check_deadline(deadline, self.id)  # else: no event for a while; reconnect where we were
            except httpx.TransportError:
                failures += 1
                if failures > self.client.retries:
                    raise
                time.sleep(self.client.backoff_s * 2 ** failures)

    def wait(self, progress: bool = False, timeout: float | None = None) -> dict:
        """Block until the run ends (a tqdm bar from the event stream if `progress`); returns the final run object."""
        from tqdm.auto import tqdm

        info = self.info()
        deadline = None if timeout is None else time.monotonic() + timeout
        with tqdm(total=info["progress"]["rounds_total"], disable=not progress, unit="round", desc=self.id) as bar:
            for ev in self.events(deadline=deadline):
                data = ev["data"]
                if ev.get("event") == "progress":
                    bar.update(data["rounds_done"] - bar.n)
                    bar.set_postfix(draws=data["draws_stored"], refresh=False)
                elif ev.get("event") == "status" and data["status"] in TERMINAL:
                    break
        return self.info()

    def stream_draws(self, start: int = 0, follow: bool = True) -> Iterator[DrawBatch]:
        """Draw batches from line offset `start` as the service stores them (until the run ends if `follow`)."""
        offset, failures = start, 0
        self.header: dict | None = None
        while True:
            try:
                with self.client._http.stream("GET", f"/v1/runs/{self.id}/draws",
                                              params={"start": offset, "follow": str(follow).lower()}) as resp:
                    _check_stream(resp)
                    splitter = _Lines()
                    for text in resp.iter_text():
                        self.header, lines = _parse_draw_lines(splitter.feed(text), self.header)
                        if lines:
                            failures = 0
                            batch = _batch(lines)
                            offset = lines[-1]["offset"] + 1
                            yield batch
                return
            except httpx.TransportError:
                failures += 1
                if failures > self.client.retries:
                    raise
                time.sleep(self.client.backoff_s * 2 ** failures)

    def draws(self, follow: bool = False) -> np.ndarray:
        """Stored draws as (chains, draws, d) (waits for the run to end if `follow`)."""
        batches = list(self.stream_draws(0, follow=follow))
        return _assemble(self.header, batches)

    def summary(self, ci_prob: float = 0.94):
        """pandas DataFrame per coordinate: mean, sd, HDI, ess_bulk, ess_tail, r_hat, mcse (draws stored so far)."""
        return _summary_frame(self.client._request("GET", f"/v1/runs/{self.id}/summary",
                                                   params={"ci_prob": ci_prob}).json())

    def to_arviz(self):
        """The stored draws as an ArviZ/xarray DataTree (downloaded as NetCDF)."""
        import xarray as xr

        content = self.client._request("GET", f"/v1/runs/{self.id}/arviz").content
        return _open_netcdf(content, xr)

    def cancel(self) -> dict:
        self._info = self.client._request("POST", f"/v1/runs/{self.id}/cancel").json()
        return self._info

    def delete(self) -> None:
        self.client._request("DELETE", f"/v1/runs/{self.id}")


def _open_netcdf(content: bytes, xr: Any):
    fd, path = tempfile.mkstemp(suffix=".nc")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(content)
        with xr.open_datatree(path, engine="h5netcdf") as tree:
            return tree.load()
    finally:
        os.unlink(path)


def _stream_timeout(http: httpx.Client | httpx.AsyncClient, deadline: float | None) -> httpx.Timeout:
    """The client's timeouts, with reads bounded by the time left to `deadline` (at most 5 s per read)."""
    if deadline is None:
        return http.timeout
    return httpx.Timeout(http.timeout.connect, read=max(0.05, min(5.0, deadline - time.monotonic())))


def _until(lines: Iterator[str], deadline: float | None, run_id: str) -> Iterator[str]:
    """The stream's lines (keep-alive comments included), raising TimeoutError once `deadline` has passed."""
    for line in lines:
        _check_deadline(deadline, run_id)
        yield line


def _check_deadline(deadline: float | None, run_id: str) -> None:
    if deadline is not None and time.monotonic() > deadline:
        raise TimeoutError(f"run {run_id} did not finish before the timeout")


def _check_stream(resp: httpx.Response) -> None:
    if resp.status_code >= 400:
        resp.read()
        _check(resp)


class AsyncClient:
    """The asyncio twin of `Client`: the same calls, awaited; streams are async iterators that resume too."""

    def __init__(self, url: str | None = None, api_key: str | None = None, *, timeout: float = 30.0,
                 retries: int = 3, backoff_s: float = 0.5) -> None:
        self.retries, self.backoff_s = retries, backoff_s
        self.url, options = _connection(url, api_key, timeout)
        self._http = httpx.AsyncClient(**options)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def _request(self, method: str, path: str, **kw: Any) -> httpx.Response:
        for attempt in range(self.retries + 1):
            last = attempt == self.retries
            try:
                resp = await self._http.request(method, path, **kw)
                if resp.status_code not in RETRY_STATUS or last or not _idempotent(method, kw):
                    return _check(resp)
            except httpx.TransportError as exc:
                if last or not _may_retry(exc, method, kw):
                    raise
            await asyncio.sleep(self.backoff_s * 2 ** attempt)
        raise AssertionError("unreachable")

    async def submit(self, spec: dict | RunSpec, *, run_id: str | None = None,
                     idempotency_key: str | None = None) -> "AsyncRunHandle":
        key = idempotency_key or str(uuid.uuid4())
        info = (await self._request("POST", "/v1/runs", json=_spec_body(spec, run_id),
                                    headers={"Idempotency-Key": key})).json()
        return AsyncRunHandle(self, info["id"], info)

    async def run(self, run_id: str) -> "AsyncRunHandle":
        return AsyncRunHandle(self, run_id, (await self._request("GET", f"/v1/runs/{run_id}")).json())

    async def runs(self, status: str | None = None, page_size: int = 50) -> AsyncIterator[dict]:
        cursor = None
        while True:
            params = {"limit": page_size} | ({"status": status} if status else {}) | ({"cursor": cursor} if cursor else {})
            page = (await self._request("GET", "/v1/runs", params=params)).json()
            for r in page["runs"]:
                yield r
            cursor = page["next_cursor"]
            if cursor is None:
                return

    async def upload_dataset(self, X: Any, y: Any, name: str | None = None) -> dict:
        return (await self._request("POST", "/v1/datasets", **_npz_upload(X, y, name))).json()

    async def upload_file(self, path: str, *, y_column: str = "y", x_columns: list[str] | None = None,
                          name: str | None = None) -> dict:
        with open(path, "rb") as fh:
            content = fh.read()
        return (await self._request("POST", "/v1/datasets", files={"file": (os.path.basename(path), content)},
                                    data=_upload_form(y_column, x_columns, name))).json()

    async def datasets(self) -> list[dict]:
        return (await self._request("GET", "/v1/datasets")).json()["datasets"]

    async def delete_dataset(self, dataset_id: str) -> None:
        await self._request("DELETE", f"/v1/datasets/{dataset_id}")

    async def health(self) -> dict:
        return (await self._request("GET", "/v1/health")).json()

    async def version(self) -> dict:
        return (await self._request("GET", "/v1/version")).json()


class AsyncRunHandle:
    """One run, async: info, status, events, wait, stream_draws, draws, summary, to_arviz, cancel, delete."""

    def __init__(self, client: AsyncClient, run_id: str, info: dict | None = None) -> None:
        self.client, self.id, self._info = client, run_id, info
        self.header: dict | None = None

    async def info(self) -> dict:
        self._info = (await self.client._request("GET", f"/v1/runs/{self.id}")).json()
        return self._info

    async def status(self) -> str:
        return (await self.info())["status"]

    async def events(self, after: int = 0, follow: bool = True) -> AsyncIterator[dict]:
        """Events as they come; reconnects with Last-Event-ID if the connection drops."""
        last, failures = after, 0
        while True:
            try:
                async with self.client._http.stream("GET", f"/v1/runs/{self.id}/events",
                                                    params={"follow": str(follow).lower()},
                                                    headers={"Last-Event-ID": str(last)}) as resp:
                    if resp.status_code >= 400:
                        await resp.aread()
                        _check(resp)
                    buf: list[str] = []
                    async for line in resp.aiter_lines():
                        buf.append(line)
                        if line:
                            continue
                        for ev in _sse_events(iter(buf)):
                            last = int(ev.get("id", last))
                            failures = 0
                            yield ev
                        buf = []
                return
            except httpx.TransportError:
                failures += 1
                if failures > self.client.retries:
                    raise
                await asyncio.sleep(self.client.backoff_s * 2 ** failures)

    async def wait(self, timeout: float | None = None) -> dict:
        """Until the run ends (TimeoutError after `timeout` s); returns the final run object."""
        async def until_done() -> None:
            async for ev in self.events():
                if ev.get("event") == "status" and ev["data"]["status"] in TERMINAL:
                    return

        await asyncio.wait_for(until_done(), timeout)
        return await self.info()

    async def stream_draws(self, start: int = 0, follow: bool = True) -> AsyncIterator[DrawBatch]:
        """Draw batches from line offset `start`; resumes at its offset if the connection drops."""
        offset, failures = start, 0
        while True:
            try:
                async with self.client._http.stream("GET", f"/v1/runs/{self.id}/draws",
                                                    params={"start": offset, "follow": str(follow).lower()}) as resp:
                    if resp.status_code >= 400:
                        await resp.aread()
                        _check(resp)
                    splitter = _Lines()
                    async for text in resp.aiter_text():
                        self.header, lines = _parse_draw_lines(splitter.feed(text), self.header)
                        if lines:
                            failures = 0
                            offset = lines[-1]["offset"] + 1
                            yield _batch(lines)
                return
            except httpx.TransportError:
                failures += 1
                if failures > self.client.retries:
                    raise
                await asyncio.sleep(self.client.backoff_s * 2 ** failures)

    async def draws(self, follow: bool = False) -> np.ndarray:
        batches = [b async for b in self.stream_draws(0, follow=follow)]
        return _assemble(self.header, batches)

    async def summary(self, ci_prob: float = 0.94):
        return _summary_frame((await self.client._request("GET", f"/v1/runs/{self.id}/summary",
                                                          params={"ci_prob": ci_prob})).json())

    async def to_arviz(self):
        import xarray as xr

        content = (await self.client._request("GET", f"/v1/runs/{self.id}/arviz")).content
        return _open_netcdf(content, xr)

    async def cancel(self) -> dict:
        self._info = (await self.client._request("POST", f"/v1/runs/{self.id}/cancel")).json()
        return self._info

    async def delete(self) -> None:
        await self.client._request("DELETE", f"/v1/runs/{self.id}")
