"""Python SDK for the raysampler service: `Client` (sync, safe inside Jupyter: no event loop used) and `AsyncClient`.

    client = Client("http://127.0.0.1:8000", api_key="...")
    run = client.submit({"model": {"family": "logistic_regression"}, "data": {"dataset": "builtin:breast_cancer"}})
    run.wait(progress=True)            # tqdm bar fed by the run's event stream
    for batch in run.stream_draws():   # DrawBatch: offset, chain, index, values (n, d)
        ...
    run.draws()                        # numpy (chains, draws, d); run.summary() → pandas; run.to_arviz() → DataTree

Idempotent calls are retried on connection errors and 502/503/504 with exponential back-off; `submit` sends an
Idempotency-Key so a retried submit returns the same run. Streams resume at their offset after a dropped connection.
The two clients build the same requests (`_API`) and follow the same retry policy (`RetryPolicy`); the wire format
is `raysampler.wire`'s. The SDK imports no server code.
"""

from __future__ import annotations

import asyncio
import io
import itertools
import os
import ssl
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any, TypeAlias

import httpx
import numpy as np

from .wire import (
    DrawLine,
    DrawsHeader,
    LineSplitter,
    ProgressEvent,
    RunStatus,
    ServerEvent,
    SSEParser,
    StatusEvent,
    parse_draw_stream_line,
)

if TYPE_CHECKING:
    import pandas as pd
    import xarray as xr

    from .predictive import PpcResult
    from .service.schemas import RunSpec

RETRY_STATUS = frozenset({502, 503, 504})


class APIError(RuntimeError):
    """The service answered with an error; `.status_code` and `.detail` (the server's message) say which."""

    def __init__(self, status_code: int, detail: Any) -> None:
        super().__init__(f"HTTP {status_code}: {_detail_text(detail)}")
        self.status_code, self.detail = status_code, detail


def _detail_text(detail: Any) -> str:
    if isinstance(detail, list):  # FastAPI validation errors: name the field
        return "; ".join(f"{'.'.join(str(p) for p in e.get('loc', ()) if p != 'body')}: {e.get('msg')}" for e in detail)
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

    @classmethod
    def of(cls, lines: list[DrawLine]) -> DrawBatch:
        return cls(
            offset=lines[0].offset,
            chain=np.array([line.chain for line in lines]),
            index=np.array([line.index for line in lines]),
            values=np.array([line.values for line in lines], dtype=float),
        )


# --- what both clients share: requests, retries, stream parsing ------------------------------------------------------


@dataclass(frozen=True)
class _Call:
    """One API request; `idempotent` if sending it twice is harmless (reads, deletes, submits with a key)."""

    method: str
    path: str
    params: dict[str, Any] | None = None
    json: Any = None
    headers: dict[str, str] | None = None
    files: dict[str, Any] | None = None
    data: dict[str, str] | None = None

    @property
    def idempotent(self) -> bool:
        return self.method in ("GET", "HEAD", "DELETE") or "Idempotency-Key" in (self.headers or {})

    def kwargs(self) -> dict[str, Any]:
        """httpx keyword arguments."""
        out = {
            "params": self.params,
            "json": self.json,
            "headers": self.headers,
            "files": self.files,
            "data": self.data,
        }
        return {k: v for k, v in out.items() if v is not None}


class _API:
    """The service's requests, built once for both clients."""

    @staticmethod
    def submit(
        spec: Mapping[str, Any] | RunSpec,
        run_id: str | None,
        idempotency_key: str | None,
        name: str | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> _Call:
        body = dict(spec) if isinstance(spec, Mapping) else spec.model_dump(mode="json", exclude_none=True)
        if run_id is not None:
            body["run_id"] = run_id
        if name is not None:
            body["name"] = name
        if tags:
            body["tags"] = dict(body.get("tags") or {}) | dict(tags)
        return _Call("POST", "/v1/runs", json=body, headers={"Idempotency-Key": idempotency_key or str(uuid.uuid4())})

    @staticmethod
    def run(run_id: str) -> _Call:
        return _Call("GET", f"/v1/runs/{run_id}")

    @staticmethod
    def runs(
        status: str | None,
        page_size: int,
        cursor: str | None,
        name: str | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> _Call:
        params: dict[str, Any] = (
            {"limit": page_size} | ({"status": status} if status else {}) | ({"cursor": cursor} if cursor else {})
        )
        if name is not None:
            params["name"] = name
        if tags:
            params["tag"] = [f"{k}:{v}" for k, v in tags.items()]
        return _Call("GET", "/v1/runs", params=params)

    @staticmethod
    def upload_arrays(X: Any, y: Any, name: str | None) -> _Call:
        buf = io.BytesIO()
        np.savez(buf, X=np.asarray(X), y=np.asarray(y))
        files = {"file": ((name or "data") + ".npz", buf.getvalue(), "application/octet-stream")}
        return _Call("POST", "/v1/datasets", files=files, data={"name": name} if name else {})

    @staticmethod
    def upload_file(
        path: str, content: IO[bytes] | bytes, y_column: str, x_columns: list[str] | None, name: str | None
    ) -> _Call:
        form = (
            {"y_column": y_column}
            | ({"x_columns": ",".join(x_columns)} if x_columns else {})
            | ({"name": name} if name else {})
        )
        return _Call("POST", "/v1/datasets", files={"file": (os.path.basename(path), content)}, data=form)

    @staticmethod
    def datasets() -> _Call:
        return _Call("GET", "/v1/datasets")

    @staticmethod
    def models() -> _Call:
        return _Call("GET", "/v1/models")

    @staticmethod
    def delete_dataset(dataset_id: str) -> _Call:
        return _Call("DELETE", f"/v1/datasets/{dataset_id}")

    @staticmethod
    def health() -> _Call:
        return _Call("GET", "/v1/health")

    @staticmethod
    def version() -> _Call:
        return _Call("GET", "/v1/version")

    @staticmethod
    def events(run_id: str, follow: bool, last_event_id: int) -> _Call:
        return _Call(
            "GET",
            f"/v1/runs/{run_id}/events",
            params={"follow": str(follow).lower()},
            headers={"Last-Event-ID": str(last_event_id)},
        )

    @staticmethod
    def draws(run_id: str, start: int, follow: bool) -> _Call:
        return _Call("GET", f"/v1/runs/{run_id}/draws", params={"start": start, "follow": str(follow).lower()})

    @staticmethod
    def summary(run_id: str, ci_prob: float) -> _Call:
        return _Call("GET", f"/v1/runs/{run_id}/summary", params={"ci_prob": ci_prob})

    @staticmethod
    def arviz(run_id: str) -> _Call:
        return _Call("GET", f"/v1/runs/{run_id}/arviz")

    @staticmethod
    def cancel(run_id: str) -> _Call:
        return _Call("POST", f"/v1/runs/{run_id}/cancel")

    @staticmethod
    def resume(run_id: str) -> _Call:
        return _Call("POST", f"/v1/runs/{run_id}/resume")

    @staticmethod
    def delete_run(run_id: str) -> _Call:
        return _Call("DELETE", f"/v1/runs/{run_id}")

    @staticmethod
    def predict(
        run_id: str,
        rows: Any,
        dataset_id: str | None,
        columns: list[str] | None,
        kind: str,
        draws: int | str,
        prob: float,
        seed: int,
    ) -> _Call:
        body: dict[str, Any] = {"kind": kind, "draws": draws, "prob": prob, "seed": seed}
        if rows is not None:
            body["rows"] = np.asarray(rows, dtype=np.float64).tolist()
        if dataset_id is not None:
            body["dataset_id"] = dataset_id
        if columns is not None:
            body["columns"] = list(columns)
        return _Call("POST", f"/v1/runs/{run_id}/predict", json=body)

    @staticmethod
    def evaluate(run_id: str, data: Mapping[str, Any], draws: int | str, bins: int, seed: int) -> _Call:
        body = {"data": dict(data), "draws": draws, "bins": bins, "seed": seed}
        return _Call("POST", f"/v1/runs/{run_id}/evaluate", json=body)

    @staticmethod
    def loo(run_id: str, draws: int | str, moment_match: bool = False) -> _Call:
        params = {"draws": str(draws)} | ({"moment_match": "true"} if moment_match else {})
        return _Call("GET", f"/v1/runs/{run_id}/loo", params=params)

    @staticmethod
    def ppc(run_id: str, kind: str, stat: str, draws: int | str | None, bins: int | None, seed: int) -> _Call:
        params: dict[str, Any] = {"kind": kind, "stat": stat, "seed": seed}
        if draws is not None:
            params["draws"] = str(draws)
        if bins is not None:
            params["bins"] = bins
        return _Call("GET", f"/v1/runs/{run_id}/ppc", params=params)

    @staticmethod
    def compare(run_ids: list[str], draws: int | str, method: str = "pseudo-bma") -> _Call:
        return _Call("POST", "/v1/compare", json={"runs": list(run_ids), "draws": draws, "method": method})


@dataclass(frozen=True)
class RetryPolicy:
    """When to send a request again and how long to wait first: exponential back-off, `retries` times at most."""

    retries: int = 3
    backoff_s: float = 0.5

    def after_response(self, call: _Call, resp: httpx.Response, attempt: int) -> float | None:
        """Seconds to wait before resending after `resp` (a 502/503/504 to an idempotent call), else None."""
        if resp.status_code in RETRY_STATUS and call.idempotent and attempt < self.retries:
            return self.backoff_s * 2**attempt
        return None

    def after_error(self, call: _Call, exc: httpx.TransportError, attempt: int) -> float | None:
        """Seconds to wait before resending after a transport error, else None (re-raise): a request that cannot
        have reached the service, or one that is harmless to send twice."""
        reached = not isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout))
        if attempt >= self.retries or (reached and not call.idempotent):
            return None
        return self.backoff_s * 2**attempt

    def reconnect_after(self, failures: int) -> float | None:
        """Seconds to wait before reopening a stream after `failures` drops in a row, else None (give up)."""
        return None if failures > self.retries else self.backoff_s * 2**failures


@dataclass
class _DrawStream:
    """Where a draw stream stands: the header, the offset to resume from, and the unfinished tail of the text."""

    offset: int
    header: DrawsHeader | None = None
    splitter: LineSplitter = field(default_factory=LineSplitter)

    def feed(self, text: str) -> DrawBatch | None:
        """The draw lines `text` completes, as a batch (None if it completes none)."""
        lines: list[DrawLine] = []
        for raw in self.splitter.feed(text):
            parsed = parse_draw_stream_line(raw)
            if isinstance(parsed, DrawsHeader):
                self.header = parsed
            else:
                lines.append(parsed)
        if not lines:
            return None
        self.offset = lines[-1].offset + 1
        return DrawBatch.of(lines)

    def reopen(self) -> None:
        self.splitter = LineSplitter()


def _assemble(header: DrawsHeader | None, batches: list[DrawBatch]) -> np.ndarray:
    """(chains, draws, d) from complete lines (a trailing partial index is dropped)."""
    if header is None:
        raise RuntimeError("the draw stream ended before its header line")
    chains, d = header.chains, header.dim or 0
    if not batches:
        return np.empty((chains, 0, d))
    values = np.concatenate([b.values for b in batches])
    n = len(values) // chains
    return np.ascontiguousarray(values[: n * chains].reshape(n, chains, d).transpose(1, 0, 2))


def _summary_frame(body: dict[str, Any]) -> pd.DataFrame:
    import pandas as pd

    frame = pd.DataFrame(body["rows"]).set_index("param")
    return frame[body["columns"]]


def _ends_run(ev: ServerEvent) -> bool:
    return ev["event"] == StatusEvent.kind and StatusEvent.from_json(ev["data"]).status.is_terminal


def _is_over(info: dict[str, Any]) -> bool:
    """Whether the run object says the run has ended: an end in the event history may be an earlier attempt's
    (a FAILED or CANCELLED run that was resumed since), which `wait` reads past."""
    return RunStatus(info["status"]).is_terminal


#: `verify=` of the clients: True (certifi's CAs, or $SSL_CERT_FILE / $SSL_CERT_DIR), False (no check: tests only),
#: a CA bundle file or directory (e.g. the self-signed certificate of a private service), or an ssl.SSLContext.
Verify: TypeAlias = bool | str | os.PathLike[str] | ssl.SSLContext


def _ssl_verify(verify: Verify) -> bool | ssl.SSLContext:
    """`verify` as httpx takes it: a CA file or directory becomes an SSLContext (httpx deprecates path strings)."""
    if not isinstance(verify, (str, os.PathLike)):
        return verify
    path = os.fspath(verify)
    return ssl.create_default_context(capath=path) if os.path.isdir(path) else ssl.create_default_context(cafile=path)


#: Where a client finds the service when neither `url` nor $RAYSAMPLER_URL says.
DEFAULT_URL = "http://127.0.0.1:8000"
#: The run id that names the tenant's newest run, wherever a run id is taken (SDK and CLI).
LATEST = "latest"
#: The file in the service's data dir where `raysampler serve` saves the key it generated.
KEYS_FILE = "api_keys"


def service_address(
    url: str | None = None, api_key: str | None = None, *, key_file: bool = False
) -> tuple[str, str | None]:
    """(URL, API key) of the service, the one rule of the SDK and the CLI: the arguments, else $RAYSAMPLER_URL /
    $RAYSAMPLER_API_KEY, else DEFAULT_URL and, with `key_file`, the key `serve` saved in <data dir>/api_keys."""
    url = (url or os.environ.get("RAYSAMPLER_URL") or DEFAULT_URL).rstrip("/")
    key = api_key or os.environ.get("RAYSAMPLER_API_KEY")
    if not key and key_file:
        key = _served_key()
    return url, key or None


def _served_key() -> str | None:
    """The key `raysampler serve` generated on this machine, read by the parser the server uses (None if none)."""
    from .service.settings import Settings  # server code, imported only for this local fallback

    path = Settings().data_dir / KEYS_FILE
    if not path.exists():
        return None
    return next(iter(Settings(api_keys="", api_keys_file=path).keys()), None)


def _connection(url: str | None, api_key: str | None, timeout: float, verify: Verify) -> tuple[str, dict[str, Any]]:
    """(base URL, httpx client options) from the arguments or $RAYSAMPLER_URL / $RAYSAMPLER_API_KEY."""
    url, key = service_address(url, api_key, key_file=True)
    if not key:
        raise ValueError(
            "api_key is required: pass api_key=, set RAYSAMPLER_API_KEY, or start `raysampler serve` on this machine "
            "(its generated key is found in its data dir)"
        )
    return url, {
        "base_url": url,
        "headers": {"Authorization": f"Bearer {key}"},
        "timeout": httpx.Timeout(timeout, read=None),
        "verify": _ssl_verify(verify),
    }


def _open_netcdf(content: bytes) -> xr.DataTree:
    import xarray as xr

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


# --- the synchronous client ----------------------------------------------------------------------------------------


class Client:
    """Synchronous client; `url` and `api_key` default to $RAYSAMPLER_URL and $RAYSAMPLER_API_KEY, else (as the CLI
    does) the local service's URL and the key `raysampler serve` saved in its data dir. For an https URL,
    `verify` is what checks the server's certificate (see `Verify`: e.g. the path of a private CA's certificate)."""

    def __init__(
        self,
        url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = 30.0,
        retries: int = 3,
        backoff_s: float = 0.5,
        verify: Verify = True,
    ) -> None:
        self.retry = RetryPolicy(retries, backoff_s)
        self.url, options = _connection(url, api_key, timeout, verify)
        self._http = httpx.Client(**options)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _send(self, call: _Call) -> httpx.Response:
        """Send `call`, retrying as the policy says; an error status raises APIError."""
        for attempt in itertools.count():
            try:
                resp = self._http.request(call.method, call.path, **call.kwargs())
            except httpx.TransportError as exc:
                delay = self.retry.after_error(call, exc, attempt)
                if delay is None:
                    raise
            else:
                delay = self.retry.after_response(call, resp, attempt)
                if delay is None:
                    return _check(resp)
            time.sleep(delay)
        raise AssertionError("unreachable")

    # --- runs ---------------------------------------------------------------------------------------------------
    def submit(
        self,
        spec: Mapping[str, Any] | RunSpec,
        *,
        run_id: str | None = None,
        idempotency_key: str | None = None,
        name: str | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> RunHandle:
        """Submit a run (a RunSpec or its dict; `name` and `tags` label it to find it by, see `runs`); returns its
        handle. Invalid specs raise APIError (422) naming the field."""
        info = self._send(_API.submit(spec, run_id, idempotency_key, name, tags)).json()
        return RunHandle(self, info["id"], info)

    def run(self, run_id: str) -> RunHandle:
        """The handle of run `run_id`; "latest" is the tenant's newest run."""
        info = self._send(_API.run(self._resolve(run_id))).json()
        return RunHandle(self, info["id"], info)

    def _resolve(self, run_id: str) -> str:
        """`run_id`, or for "latest" the id of the tenant's newest run (LookupError if it has none)."""
        if run_id != LATEST:
            return run_id
        newest = next(self.runs(page_size=1), None)
        if newest is None:
            raise LookupError("no runs yet: 'latest' names the newest run")
        return str(newest["id"])

    def runs(
        self,
        status: str | None = None,
        page_size: int = 50,
        *,
        name: str | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> Iterator[dict[str, Any]]:
        """All the tenant's runs, newest first (follows the cursor pages); only those of `name` and with all `tags`
        when given."""
        cursor = None
        while True:
            page = self._send(_API.runs(status, page_size, cursor, name, tags)).json()
            yield from page["runs"]
            cursor = page["next_cursor"]
            if cursor is None:
                return

    # --- data sets ----------------------------------------------------------------------------------------------
    def upload_dataset(self, X: Any, y: Any, name: str | None = None) -> dict[str, Any]:
        """Upload arrays (as .npz) for runs to use as {"dataset_id": ...}; returns {id, n, d, ...}."""
        return self._send(_API.upload_arrays(X, y, name)).json()

    def upload_file(
        self, path: str, *, y_column: str = "y", x_columns: list[str] | None = None, name: str | None = None
    ) -> dict[str, Any]:
        """Upload a .npz, .csv or .parquet file; y_column / x_columns name the target and feature columns."""
        with open(path, "rb") as fh:
            return self._send(_API.upload_file(path, fh, y_column, x_columns, name)).json()

    def datasets(self) -> list[dict[str, Any]]:
        return self._send(_API.datasets()).json()["datasets"]

    def models(self) -> list[dict[str, Any]]:
        """The model families a run spec may name (built-in and registered), with their parameters' JSON schema."""
        return self._send(_API.models()).json()["families"]

    def delete_dataset(self, dataset_id: str) -> None:
        self._send(_API.delete_dataset(dataset_id))

    def health(self) -> dict[str, Any]:
        return self._send(_API.health()).json()

    def version(self) -> dict[str, Any]:
        return self._send(_API.version()).json()

    def compare(self, run_ids: list[str], draws: int | str = 1000, method: str = "pseudo-bma") -> pd.DataFrame:
        """Rank runs fitted on the same rows by PSIS-LOO computed at their shards: a DataFrame indexed by run id,
        best first (rank, elpd, se, p_loo, elpd_diff, dse, weight, warning); weights by `method` ("pseudo-bma" or
        "stacking")."""
        ids = [self._resolve(r) for r in run_ids]
        return _comparison_frame(self._send(_API.compare(ids, draws, method)).json())


class RunHandle:
    """One run on the service."""

    def __init__(self, client: Client, run_id: str, info: dict[str, Any] | None = None) -> None:
        self.client, self.id, self._info = client, run_id, info
        self.header: DrawsHeader | None = None  # of the last draw stream read

    def __repr__(self) -> str:
        return f"RunHandle({self.id!r}, status={self._info['status'] if self._info else '?'})"

    def info(self) -> dict[str, Any]:
        """The run object: status, progress, timings, per-worker τ_i, N_i, idle fraction, error."""
        self._info = self.client._send(_API.run(self.id)).json()
        return self._info

    def status(self) -> str:
        return self.info()["status"]

    def events(self, after: int = 0, follow: bool = True, deadline: float | None = None) -> Iterator[ServerEvent]:
        """The run's events ({"id", "event", "data"}); reconnects with Last-Event-ID if the connection drops.
        With a `deadline` (time.monotonic()), raises TimeoutError once it passes, even while no event comes."""
        last, failures = after, 0
        while True:
            call = _API.events(self.id, follow, last)
            try:
                with self.client._http.stream(
                    call.method, call.path, **call.kwargs(), timeout=_stream_timeout(self.client._http, deadline)
                ) as resp:
                    _check_stream(resp)
                    parser = SSEParser()
                    for line in _until(resp.iter_lines(), deadline, self.id):
                        ev = parser.feed(line)
                        if ev is not None:
                            last = int(ev["id"] or last)
                            failures = 0
                            yield ev
                return
            except httpx.ReadTimeout:
                _check_deadline(deadline, self.id)  # else: no event for a while; reconnect where we were
            except httpx.TransportError:
                failures += 1
                delay = self.client.retry.reconnect_after(failures)
                if delay is None:
                    raise
                time.sleep(delay)

    def wait(self, progress: bool = False, timeout: float | None = None) -> dict[str, Any]:
        """Block until the run ends (a tqdm bar from the event stream if `progress`: rounds against their total, or
        for num_rounds="auto" the percentage of the way to convergence with the last min ESS and max R-hat); returns
        the final run object."""
        from tqdm.auto import tqdm

        info = self.info()
        deadline = None if timeout is None else time.monotonic() + timeout
        convergence = info["progress"].get("basis") == "convergence"
        total, unit = (100, "%") if convergence else (info["progress"]["rounds_total"], "round")
        with tqdm(total=total, disable=not progress, unit=unit, desc=self.id) as bar:
            for ev in self.events(deadline=deadline):
                if ev["event"] == ProgressEvent.kind:
                    step = ProgressEvent.from_json(ev["data"])
                    bar.update(_bar_position(step, convergence) - bar.n)
                    post: dict[str, Any] = {"draws": step.draws_stored}
                    if step.min_ess_bulk is not None and step.max_rhat is not None:
                        post |= {"ess": f"{step.min_ess_bulk:.0f}", "rhat": f"{step.max_rhat:.3f}"}
                    bar.set_postfix(post, refresh=False)
                elif _ends_run(ev) and _is_over(self.info()):
                    break
            final = self.info()
            if final.get("stop_reason") == "converged":  # the targets are met: the bar ends full
                bar.update(total - bar.n)
        return final

    def stream_draws(self, start: int = 0, follow: bool = True) -> Iterator[DrawBatch]:
        """Draw batches from line offset `start` as the service stores them (until the run ends if `follow`)."""
        state, failures = _DrawStream(start), 0
        self.header = None
        while True:
            call = _API.draws(self.id, state.offset, follow)
            try:
                with self.client._http.stream(call.method, call.path, **call.kwargs()) as resp:
                    _check_stream(resp)
                    state.reopen()
                    for text in resp.iter_text():
                        batch = state.feed(text)
                        self.header = state.header
                        if batch is not None:
                            failures = 0
                            yield batch
                return
            except httpx.TransportError:
                failures += 1
                delay = self.client.retry.reconnect_after(failures)
                if delay is None:
                    raise
                time.sleep(delay)

    def draws(self, follow: bool = False) -> np.ndarray:
        """Stored draws as (chains, draws, d) (waits for the run to end if `follow`)."""
        batches = list(self.stream_draws(0, follow=follow))
        return _assemble(self.header, batches)

    def summary(self, ci_prob: float = 0.94) -> pd.DataFrame:
        """pandas DataFrame per coordinate: mean, sd, HDI, ess_bulk, ess_tail, r_hat, mcse (draws stored so far)."""
        return _summary_frame(self.client._send(_API.summary(self.id, ci_prob)).json())

    def effects(self, kind: str = "fixef", probs: tuple[float, float] = (0.025, 0.975)) -> pd.DataFrame:
        """brms-style summaries of the stored draws as a DataFrame: "fixef" (coefficients), "ranef" (each group's
        effects), "coef" (each group's coefficients, fixed plus its effect) or "prior" (the prior on every
        parameter); rows indexed by (group,) label and effect or coefficient."""
        import pandas as pd

        params = {"kind": kind, "lower": probs[0], "upper": probs[1]}
        body = self.client._send(_Call("GET", f"/v1/runs/{self.id}/effects", params=params)).json()
        frame = pd.DataFrame(body["rows"])
        if frame.empty:
            return frame
        keys = (["group"] if "group" in frame else []) + ["index"]
        frame["index"] = [tuple(i) if len(i) > 1 else i[0] for i in frame["index"]]
        return frame.set_index(keys)[body["columns"]]

    def to_arviz(self) -> xr.DataTree:
        """The stored draws as an ArviZ/xarray DataTree (downloaded as NetCDF)."""
        return _open_netcdf(self.client._send(_API.arviz(self.id)).content)

    def cancel(self) -> dict[str, Any]:
        self._info = self.client._send(_API.cancel(self.id)).json()
        return self._info

    def resume(self) -> dict[str, Any]:
        """Continue a FAILED or CANCELLED run from its checkpoint."""
        self._info = self.client._send(_API.resume(self.id)).json()
        return self._info

    def delete(self) -> None:
        self.client._send(_API.delete_run(self.id))

    def predict(
        self,
        rows: Any = None,
        *,
        dataset_id: str | None = None,
        columns: list[str] | None = None,
        kind: str = "mean",
        draws: int | str = 1000,
        prob: float = 0.9,
        seed: int = 0,
    ) -> np.ndarray:
        """The posterior predictive at `rows` (inline) or an uploaded data set: kind "mean" (rows,) or (rows,
        classes), "draws" (draws, rows), "interval" (rows, 2)."""
        call = _API.predict(self.id, rows, dataset_id, columns, kind, draws, prob, seed)
        return _prediction_values(self.client._send(call).json())

    def evaluate(self, data: Mapping[str, Any], *, draws: int | str = 1000, bins: int = 10, seed: int = 0) -> dict:
        """Held-out metrics on `data` (a data reference as in a run spec: {"dataset_id": ...}, {"dataset":
        "builtin:..."} or {"shards": [...], "y_column": ...}), computed where the rows are."""
        return self.client._send(_API.evaluate(self.id, data, draws, bins, seed)).json()

    def loo(self, draws: int | str = 1000, moment_match: bool = False) -> dict[str, Any]:
        """PSIS-LOO on the run's own rows, computed at its shards: elpd, se, p_loo, Pareto-k counts by band (flat
        rows apart), high-k rows; with `moment_match`, what moment matching did to each of them."""
        return self.client._send(_API.loo(self.id, draws, moment_match)).json()

    def pp_check(
        self,
        kind: str = "dens",
        stat: str = "mean",
        *,
        draws: int | str | None = None,
        bins: int | None = None,
        seed: int = 0,
    ) -> PpcResult:
        """A posterior predictive check on the run's own rows, computed at its shards (only bin counts and sums come
        back): "dens", "hist" or "stat" of `stat`, as `Result.pp_check` gives it (`.plot()` draws it)."""
        return _ppc_result(self.client._send(_API.ppc(self.id, kind, stat, draws, bins, seed)).json())


def _bar_position(step: ProgressEvent, convergence: bool) -> float:
    """Where a progress bar stands: percent of the way to convergence, or rounds done."""
    if not convergence:
        return step.rounds_done
    return round(100 * (step.fraction or 0.0), 1)


def _check_stream(resp: httpx.Response) -> None:
    if resp.status_code >= 400:
        resp.read()
        _check(resp)


# --- the asyncio client --------------------------------------------------------------------------------------------


class AsyncClient:
    """The asyncio twin of `Client`: the same calls, awaited; streams are async iterators that resume too."""

    def __init__(
        self,
        url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = 30.0,
        retries: int = 3,
        backoff_s: float = 0.5,
        verify: Verify = True,
    ) -> None:
        self.retry = RetryPolicy(retries, backoff_s)
        self.url, options = _connection(url, api_key, timeout, verify)
        self._http = httpx.AsyncClient(**options)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _send(self, call: _Call) -> httpx.Response:
        """Send `call`, retrying as the policy says; an error status raises APIError."""
        for attempt in itertools.count():
            try:
                resp = await self._http.request(call.method, call.path, **call.kwargs())
            except httpx.TransportError as exc:
                delay = self.retry.after_error(call, exc, attempt)
                if delay is None:
                    raise
            else:
                delay = self.retry.after_response(call, resp, attempt)
                if delay is None:
                    return _check(resp)
            await asyncio.sleep(delay)
        raise AssertionError("unreachable")

    async def submit(
        self,
        spec: Mapping[str, Any] | RunSpec,
        *,
        run_id: str | None = None,
        idempotency_key: str | None = None,
        name: str | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> AsyncRunHandle:
        info = (await self._send(_API.submit(spec, run_id, idempotency_key, name, tags))).json()
        return AsyncRunHandle(self, info["id"], info)

    async def run(self, run_id: str) -> AsyncRunHandle:
        """The handle of run `run_id`; "latest" is the tenant's newest run."""
        info = (await self._send(_API.run(await self._resolve(run_id)))).json()
        return AsyncRunHandle(self, info["id"], info)

    async def _resolve(self, run_id: str) -> str:
        """`run_id`, or for "latest" the id of the tenant's newest run (LookupError if it has none)."""
        if run_id != LATEST:
            return run_id
        async for newest in self.runs(page_size=1):
            return str(newest["id"])
        raise LookupError("no runs yet: 'latest' names the newest run")

    async def runs(
        self,
        status: str | None = None,
        page_size: int = 50,
        *,
        name: str | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> AsyncIterator[dict[str, Any]]:
        cursor = None
        while True:
            page = (await self._send(_API.runs(status, page_size, cursor, name, tags))).json()
            for r in page["runs"]:
                yield r
            cursor = page["next_cursor"]
            if cursor is None:
                return

    async def upload_dataset(self, X: Any, y: Any, name: str | None = None) -> dict[str, Any]:
        return (await self._send(_API.upload_arrays(X, y, name))).json()

    async def upload_file(
        self, path: str, *, y_column: str = "y", x_columns: list[str] | None = None, name: str | None = None
    ) -> dict[str, Any]:
        with open(path, "rb") as fh:
            content = fh.read()
        return (await self._send(_API.upload_file(path, content, y_column, x_columns, name))).json()

    async def datasets(self) -> list[dict[str, Any]]:
        return (await self._send(_API.datasets())).json()["datasets"]

    async def models(self) -> list[dict[str, Any]]:
        """The model families a run spec may name (built-in and registered), with their parameters' JSON schema."""
        return (await self._send(_API.models())).json()["families"]

    async def delete_dataset(self, dataset_id: str) -> None:
        await self._send(_API.delete_dataset(dataset_id))

    async def health(self) -> dict[str, Any]:
        return (await self._send(_API.health())).json()

    async def version(self) -> dict[str, Any]:
        return (await self._send(_API.version())).json()

    async def compare(self, run_ids: list[str], draws: int | str = 1000, method: str = "pseudo-bma") -> pd.DataFrame:
        ids = [await self._resolve(r) for r in run_ids]
        return _comparison_frame((await self._send(_API.compare(ids, draws, method))).json())


class AsyncRunHandle:
    """One run, async: info, status, events, wait, stream_draws, draws, summary, to_arviz, cancel, delete."""

    def __init__(self, client: AsyncClient, run_id: str, info: dict[str, Any] | None = None) -> None:
        self.client, self.id, self._info = client, run_id, info
        self.header: DrawsHeader | None = None

    async def info(self) -> dict[str, Any]:
        self._info = (await self.client._send(_API.run(self.id))).json()
        return self._info

    async def status(self) -> str:
        return (await self.info())["status"]

    async def events(self, after: int = 0, follow: bool = True) -> AsyncIterator[ServerEvent]:
        """Events as they come; reconnects with Last-Event-ID if the connection drops."""
        last, failures = after, 0
        while True:
            call = _API.events(self.id, follow, last)
            try:
                async with self.client._http.stream(call.method, call.path, **call.kwargs()) as resp:
                    await _acheck_stream(resp)
                    parser = SSEParser()
                    async for line in resp.aiter_lines():
                        ev = parser.feed(line)
                        if ev is not None:
                            last = int(ev["id"] or last)
                            failures = 0
                            yield ev
                return
            except httpx.TransportError:
                failures += 1
                delay = self.client.retry.reconnect_after(failures)
                if delay is None:
                    raise
                await asyncio.sleep(delay)

    async def wait(self, timeout: float | None = None) -> dict[str, Any]:
        """Until the run ends (TimeoutError after `timeout` s); returns the final run object."""

        async def until_done() -> None:
            async for ev in self.events():
                if _ends_run(ev) and _is_over(await self.info()):
                    return

        await asyncio.wait_for(until_done(), timeout)
        return await self.info()

    async def stream_draws(self, start: int = 0, follow: bool = True) -> AsyncIterator[DrawBatch]:
        """Draw batches from line offset `start`; resumes at its offset if the connection drops."""
        state, failures = _DrawStream(start), 0
        while True:
            call = _API.draws(self.id, state.offset, follow)
            try:
                async with self.client._http.stream(call.method, call.path, **call.kwargs()) as resp:
                    await _acheck_stream(resp)
                    state.reopen()
                    async for text in resp.aiter_text():
                        batch = state.feed(text)
                        self.header = state.header
                        if batch is not None:
                            failures = 0
                            yield batch
                return
            except httpx.TransportError:
                failures += 1
                delay = self.client.retry.reconnect_after(failures)
                if delay is None:
                    raise
                await asyncio.sleep(delay)

    async def draws(self, follow: bool = False) -> np.ndarray:
        batches = [b async for b in self.stream_draws(0, follow=follow)]
        return _assemble(self.header, batches)

    async def summary(self, ci_prob: float = 0.94) -> pd.DataFrame:
        return _summary_frame((await self.client._send(_API.summary(self.id, ci_prob))).json())

    async def to_arviz(self) -> xr.DataTree:
        return _open_netcdf((await self.client._send(_API.arviz(self.id))).content)

    async def cancel(self) -> dict[str, Any]:
        self._info = (await self.client._send(_API.cancel(self.id))).json()
        return self._info

    async def resume(self) -> dict[str, Any]:
        """Continue a FAILED or CANCELLED run from its checkpoint."""
        self._info = (await self.client._send(_API.resume(self.id))).json()
        return self._info

    async def delete(self) -> None:
        await self.client._send(_API.delete_run(self.id))

    async def predict(
        self,
        rows: Any = None,
        *,
        dataset_id: str | None = None,
        columns: list[str] | None = None,
        kind: str = "mean",
        draws: int | str = 1000,
        prob: float = 0.9,
        seed: int = 0,
    ) -> np.ndarray:
        call = _API.predict(self.id, rows, dataset_id, columns, kind, draws, prob, seed)
        return _prediction_values((await self.client._send(call)).json())

    async def evaluate(
        self, data: Mapping[str, Any], *, draws: int | str = 1000, bins: int = 10, seed: int = 0
    ) -> dict:
        return (await self.client._send(_API.evaluate(self.id, data, draws, bins, seed))).json()

    async def loo(self, draws: int | str = 1000, moment_match: bool = False) -> dict[str, Any]:
        return (await self.client._send(_API.loo(self.id, draws, moment_match))).json()

    async def pp_check(
        self,
        kind: str = "dens",
        stat: str = "mean",
        *,
        draws: int | str | None = None,
        bins: int | None = None,
        seed: int = 0,
    ) -> PpcResult:
        return _ppc_result((await self.client._send(_API.ppc(self.id, kind, stat, draws, bins, seed))).json())


def _prediction_values(body: dict[str, Any]) -> np.ndarray:
    """A Prediction's values as an array (null → nan)."""
    return np.array(body["values"], dtype=np.float64)


def _ppc_result(body: dict[str, Any]) -> PpcResult:
    """A PpcInfo body as the engine's record (`PpcDensity`, `PpcHistogram` or `PpcStat`), so that it plots alike."""
    from .predictive import PpcDensity, PpcHistogram, PpcStat

    def arr(v: Any) -> np.ndarray:
        return np.array(v, dtype=np.float64)  # null (not finite) -> nan

    if body["kind"] == "stat":
        observed = np.nan if body["observed"] is None else float(body["observed"])
        return PpcStat(body["stat"], observed, arr(body["replicated"]), body["n"])
    if body["kind"] == "hist":
        counts = np.array(body["replicated"], dtype=np.int64).reshape(-1, len(body["observed"]))
        return PpcHistogram(arr(body["edges"]), np.array(body["observed"], dtype=np.int64), counts, body["n"])
    dens = arr(body["replicated"]).reshape(-1, len(body["grid"]))
    return PpcDensity(arr(body["grid"]), arr(body["observed"]), dens, arr(body["bandwidth"]), body["n"])


def _comparison_frame(body: dict[str, Any]) -> pd.DataFrame:
    """A Comparison's rows as a DataFrame indexed by run id, best first."""
    import pandas as pd

    rows = body["rows"]
    values = [{k: v for k, v in r.items() if k != "run_id"} for r in rows]
    return pd.DataFrame(values, index=[r["run_id"] for r in rows])


async def _acheck_stream(resp: httpx.Response) -> None:
    if resp.status_code >= 400:
        await resp.aread()
        _check(resp)
