"""Both SDKs behind one synchronous interface, so that a behavioural test is written once and runs on each:
`connect("sync", ...)` is a `Client`; `connect("async", ...)` an `AsyncClient` whose every call is awaited on an
event loop of its own and whose async iterators are stepped through it (`Blocking`)."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx

from raysampler.client import AsyncClient, AsyncRunHandle, Client

KINDS = ("sync", "async")


class Blocking:
    """An AsyncClient or AsyncRunHandle seen through synchronous calls on `loop`."""

    def __init__(self, target: Any, loop: asyncio.AbstractEventLoop) -> None:
        self._target, self._loop = target, loop

    def __repr__(self) -> str:
        return repr(self._target)

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._target, name)
        if not callable(value):
            return value

        def call(*args: Any, **kwargs: Any) -> Any:
            out = value(*args, **kwargs)
            if inspect.isawaitable(out):
                out = self._loop.run_until_complete(out)
            if isinstance(out, AsyncIterator):
                return self._iterate(out)
            if isinstance(out, AsyncRunHandle):
                return Blocking(out, self._loop)
            return out

        return call

    def _iterate(self, items: AsyncIterator[Any]) -> Iterator[Any]:
        try:
            while True:
                try:
                    yield self._loop.run_until_complete(anext(items))
                except StopAsyncIteration:
                    return
        finally:
            self._loop.run_until_complete(items.aclose())  # type: ignore[attr-defined]


@contextmanager
def connect(
    kind: str, url: str, key: str, handler: Callable[[httpx.Request], Any] | None = None, **options: Any
) -> Iterator[Any]:
    """A client of `kind` for `url`; with `handler`, its requests go to that function instead (httpx.MockTransport;
    for "async" the handler may return a response whose stream is an async iterator)."""
    if kind == "sync":
        with Client(url, key, **options) as client:
            if handler is not None:
                client._http = httpx.Client(transport=httpx.MockTransport(handler), base_url=url)
            yield client
        return
    loop = asyncio.new_event_loop()
    aclient = AsyncClient(url, key, **options)
    if handler is not None:
        aclient._http = httpx.AsyncClient(transport=httpx.MockTransport(handler), base_url=url)
    try:
        yield Blocking(aclient, loop)
    finally:
        loop.run_until_complete(aclient.aclose())
        loop.close()
