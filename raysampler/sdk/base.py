"""What `Client` and `AsyncClient`, and their run handles, share apart from the I/O: how a client is built (URL, key,
retry policy, certificate check) and what a handle holds (its run's id, last run object and draw-stream header)."""

from __future__ import annotations

import itertools
from typing import Any, Generic, TypeVar

import httpx

from ..wire import DrawsHeader, RunInfo
from .connection import Verify, http_options
from .operations import Operations, RunState
from .retry import RetryPolicy

HTTP = TypeVar("HTTP", httpx.Client, httpx.AsyncClient)
C = TypeVar("C")


class ClientBase(Generic[HTTP]):
    """A client of the service: `url` and `api_key` default to $RAYSAMPLER_URL and $RAYSAMPLER_API_KEY, else (as the
    CLI does) the local service's URL and the key `raysampler serve` saved in its data dir. For an https URL,
    `verify` is what checks the server's certificate (see `Verify`: e.g. the path of a private CA's certificate).
    `timeout` bounds connecting and sending (streams wait as long as their run runs); idempotent calls are retried
    `retries` times on connection errors and 502/503/504, after `backoff_s`, then twice that, and so on."""

    _http_class: type[HTTP]

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
        self._ops = Operations(RetryPolicy(retries, backoff_s))
        self.url, options = http_options(url, api_key, timeout, verify)
        self._http: HTTP = self._http_class(**options)
        self._streams = itertools.count()  # numbers the streams its driver opens

    @property
    def retry(self) -> RetryPolicy:
        """When the client resends a request, and how long it waits first."""
        return self._ops.retry

    def _stream_timeout(self, read_s: float | None) -> httpx.Timeout:
        """The client's timeouts, with each read of a stream bounded by `read_s` when given."""
        if read_s is None:
            return self._http.timeout
        return httpx.Timeout(self._http.timeout.connect, read=read_s)


class RunHandleBase(Generic[C]):
    """One run on the service, as a client (`C`) reaches it; every method asks the service (nothing is cached but
    the last run object, `_info`, and the header of the last draw stream read, `header`)."""

    def __init__(self, client: C, run_id: str, info: RunInfo | None = None) -> None:
        self.client = client
        self._run = RunState(run_id, info)

    @property
    def id(self) -> str:
        return self._run.id

    @property
    def header(self) -> DrawsHeader | None:
        """The header of the last draw stream read (None before one): chains, dimension, parameter names."""
        return self._run.header

    @property
    def _info(self) -> RunInfo | None:
        return self._run.info

    def __repr__(self) -> str:
        status: Any = self._run.info["status"] if self._run.info else "?"
        return f"{type(self).__name__}({self.id!r}, status={status})"
