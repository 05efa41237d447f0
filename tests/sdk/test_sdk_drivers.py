"""What the sans-IO operations do under each driver, against scripted answers (httpx.MockTransport): deadlines on a
quiet event stream, resumes after a dropped stream, chunked uploads, the progress bar, errors of streamed answers.
Each test runs on the sync and the async client (`sdk_twins`): these are the places where the two used to differ."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from sdk_twins import KINDS, Blocking, connect

from raysampler.client import APIError, AsyncRunHandle, RunHandle
from raysampler.sdk import operations
from raysampler.wire import DrawsHeader, RunStatus, draw_lines, sse_frame

URL, KEY = "http://svc", "k" * 16


def stream(kind: str, parts: list[bytes | float | Exception]) -> httpx.SyncByteStream | httpx.AsyncByteStream:
    """A streamed body for the client `kind`: bytes are sent, a float sleeps that long, an exception is raised."""

    class Sync(httpx.SyncByteStream):
        def __iter__(self) -> Iterator[bytes]:
            for p in parts:
                if isinstance(p, Exception):
                    raise p
                if isinstance(p, float):
                    time.sleep(p)
                    continue
                yield p

    class Async(httpx.AsyncByteStream):
        async def __aiter__(self) -> AsyncIterator[bytes]:
            for p in parts:
                if isinstance(p, Exception):
                    raise p
                if isinstance(p, float):
                    await asyncio.sleep(p)
                    continue
                yield p

    return Sync() if kind == "sync" else Async()


def run_object(status: str = "RUNNING", **over: Any) -> dict[str, Any]:
    progress = {"rounds_done": 0, "rounds_total": 10, "draws_stored": 0, "draws_total": 10, "fraction": 0.0}
    return {"id": "r1", "status": status, "progress": progress | {"basis": "rounds"}, "stop_reason": None} | over


@pytest.mark.parametrize("kind", KINDS)
def test_events_raise_timeout_at_the_deadline_while_only_keep_alives_come(kind: str) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, stream=stream(kind, [b": keep-alive\n\n", 0.05] * 200))

    with connect(kind, URL, KEY, handler) as c:
        run = _handle(c, kind)
        t0 = time.monotonic()
        with pytest.raises(TimeoutError, match="r1"):
            list(run.events(deadline=time.monotonic() + 0.3))
        assert time.monotonic() - t0 < 3.0


@pytest.mark.parametrize("kind", KINDS)
def test_events_resume_after_a_dropped_connection_with_last_event_id(kind: str) -> None:
    seen: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("Last-Event-ID"))
        if len(seen) == 1:
            frames = [sse_frame(i, "warning", {"message": m}).encode() for i, m in ((1, "a"), (2, "b"))]
            return httpx.Response(200, stream=stream(kind, [*frames, httpx.ReadError("dropped")]))
        return httpx.Response(200, stream=stream(kind, [sse_frame(3, "warning", {"message": "c"}).encode()]))

    with connect(kind, URL, KEY, handler, backoff_s=0.0) as c:
        events = list(_handle(c, kind).events(follow=False))
    assert [e["id"] for e in events] == ["1", "2", "3"] and seen == ["0", "2"]


@pytest.mark.parametrize("kind", KINDS)
def test_draws_resume_at_their_offset_after_a_dropped_connection(kind: str) -> None:
    import numpy as np

    block = np.arange(12, dtype=float).reshape(3, 2, 2)  # 3 draws x 2 chains x d 2
    header = DrawsHeader("r1", ("a", "b"), 2, 2, 3, 3, RunStatus.SUCCEEDED, 0, ()).to_line().encode()
    lines = draw_lines(block, 0).encode().splitlines(keepends=True)
    starts: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        starts.append(request.url.params["start"])
        if len(starts) == 1:  # the header, two lines and half of the third, then the connection drops
            parts = [header, lines[0], lines[1], lines[2][:7], httpx.RemoteProtocolError("cut")]
        else:
            parts = [header, *lines[int(starts[-1]) :]]
        return httpx.Response(200, stream=stream(kind, parts))

    with connect(kind, URL, KEY, handler, backoff_s=0.0) as c:
        run = _handle(c, kind)
        draws = run.draws()
    assert starts == ["0", "2"]
    np.testing.assert_array_equal(draws, block.transpose(1, 0, 2))
    assert run.header.chains == 2


@pytest.mark.parametrize("kind", KINDS)
def test_upload_file_sends_the_file_in_chunks(kind: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "rows.csv"
    content = b"x,y\n" + b"".join(f"{i},{i % 2}\n".encode() for i in range(60_000))
    path.write_bytes(content)
    reads: list[int] = []

    class Recording:
        def __init__(self, fh: Any) -> None:
            self.fh = fh

        def read(self, size: int = -1) -> bytes:
            reads.append(size)
            return self.fh.read(size)

        def __getattr__(self, name: str) -> Any:
            return getattr(self.fh, name)

        def __enter__(self) -> Recording:
            return self

        def __exit__(self, *exc: object) -> None:
            self.fh.close()

    monkeypatch.setattr(operations, "open", lambda p, mode: Recording(open(p, mode)), raising=False)  # noqa: SIM115
    got: list[bytes] = []

    def handler(request: httpx.Request) -> httpx.Response:
        got.append(request.read())
        return httpx.Response(201, json={"id": "d1", "name": "rows", "n": 60_000, "d": 1, "created_at": 0, "bytes": 1})

    with connect(kind, URL, KEY, handler) as c:
        assert c.upload_file(str(path), y_column="y")["id"] == "d1"
    assert content in got[0]
    assert reads and all(0 < size < len(content) for size in reads)  # never read(-1): never the whole file at once


@pytest.mark.parametrize("kind", KINDS)
def test_wait_feeds_a_progress_bar_and_returns_the_final_run_object(kind: str, capsys: pytest.CaptureFixture) -> None:
    infos = iter([run_object(), run_object("SUCCEEDED", stop_reason="num_rounds"), run_object("SUCCEEDED")])

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/events"):
            progress = {"rounds_done": 7, "rounds_total": 10, "draws_stored": 5}
            frames = [sse_frame(1, "progress", progress), sse_frame(2, "status", {"status": "SUCCEEDED"})]
            return httpx.Response(200, stream=stream(kind, [f.encode() for f in frames]))
        return httpx.Response(200, json=next(infos))

    with connect(kind, URL, KEY, handler) as c:
        final = _handle(c, kind).wait(progress=True, timeout=30)
    assert final["status"] == "SUCCEEDED"
    assert "7/10" in capsys.readouterr().err  # the bar stood at the progress event's rounds


@pytest.mark.parametrize("kind", KINDS)
def test_an_error_answer_to_a_stream_is_an_api_error_with_the_servers_detail(kind: str) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(404, json={"detail": "run r1 not found"})

    with connect(kind, URL, KEY, handler) as c, pytest.raises(APIError, match="run r1 not found") as err:
        list(_handle(c, kind).stream_draws())
    assert err.value.status_code == 404


def test_the_deprecated_effects_names_its_replacement() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        body = {"run_id": "r1", "kind": "ranef", "columns": ["Estimate"], "rows": []}
        return httpx.Response(200, json=body)

    with connect("sync", URL, KEY, handler) as c, pytest.warns(DeprecationWarning, match=r"RunHandle\.ranef\(\)"):
        _handle(c, "sync").effects("ranef")


def _handle(client: Any, kind: str) -> Any:
    """A handle of run r1 without asking the service (as `submit` makes one from its answer)."""
    if kind == "sync":
        return RunHandle(client, "r1", run_object())
    return Blocking(AsyncRunHandle(client._target, "r1", run_object()), client._loop)
