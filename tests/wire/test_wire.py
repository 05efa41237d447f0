"""The wire format both ends share (raysampler.wire), the SDK's independence from the server, and its retry policy."""

from __future__ import annotations

import asyncio
import json
import math
import subprocess
import sys

import httpx
import numpy as np
import pytest

from raysampler.client import APIError, AsyncClient, Client, RetryPolicy
from raysampler.sdk import requests
from raysampler.wire import (
    ChainSeed,
    DrawLine,
    DrawsHeader,
    LineSplitter,
    RunStatus,
    SSEParser,
    decode_values,
    draw_lines,
    encode_values,
    parse_draw_stream_line,
    sse_frame,
)


def test_nonfinite_values_are_encoded_explicitly():
    row = np.array([1.5, math.nan, math.inf, -math.inf, -0.25])
    text = encode_values(row)
    assert text == '[1.5, "NaN", "Infinity", "-Infinity", -0.25]'
    back = decode_values(json.loads(text))
    np.testing.assert_array_equal(np.array(back), row)


def test_draw_lines_and_header_round_trip():
    block = np.arange(12.0).reshape(2, 3, 2)  # 2 draws, 3 chains, d = 2
    block[1, 2, 0] = math.nan
    lines = LineSplitter().feed(draw_lines(block, first_index=5))
    parsed = [parse_draw_stream_line(t) for t in lines]
    assert [(p.offset, p.chain, p.index) for p in parsed if isinstance(p, DrawLine)] == [
        (15, 0, 5),
        (16, 1, 5),
        (17, 2, 5),
        (18, 0, 6),
        (19, 1, 6),
        (20, 2, 6),
    ]
    np.testing.assert_array_equal(np.array([p.values for p in parsed if isinstance(p, DrawLine)]), block.reshape(6, 2))
    head = DrawsHeader("r", ("a", "b"), 3, 2, 10, 2, RunStatus.RUNNING, 15, (ChainSeed(0, 7, (0,)),))
    assert parse_draw_stream_line(head.to_line().strip()) == head
    assert head.to_json()["shape"] == [3, 10, 2] and head.to_json()["order"] == "offset = index * chains + chain"


def test_line_splitter_keeps_partial_lines():
    s = LineSplitter()
    assert s.feed('{"a"') == [] and s.feed(': 1}\n{"b": 2}\n{"c"') == ['{"a": 1}', '{"b": 2}'] and s.rest == '{"c"'


def test_sse_parser_reads_what_the_server_writes():
    text = (
        "retry: 1000\n\n"
        + sse_frame(1, "status", {"status": "PENDING"})
        + ": keep-alive\n\n"
        + sse_frame(2, "progress", {"rounds_done": 3})
    )
    parser = SSEParser()
    events = [ev for line in text.split("\n") if (ev := parser.feed(line)) is not None]
    assert events == [
        {"id": "1", "event": "status", "data": {"status": "PENDING"}},
        {"id": "2", "event": "progress", "data": {"rounds_done": 3}},
    ]


def test_the_sdk_imports_no_server_code():
    code = (
        "import sys, raysampler.client, raysampler.wire; "
        "print([m for m in sys.modules if m.split('.')[0] in ('fastapi', 'starlette', 'uvicorn', 'api', "
        "'sqlite3', 'prometheus_client') or m.startswith(('raysampler.service', 'raysampler.api'))])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_retry_policy():
    policy = RetryPolicy(retries=2, backoff_s=0.1)
    get, cancel = requests.run("r"), requests.cancel("r")
    assert policy.after_response(get, httpx.Response(503), 0) == 0.1
    assert policy.after_response(get, httpx.Response(503), 1) == 0.2
    assert policy.after_response(get, httpx.Response(503), 2) is None  # out of retries
    assert policy.after_response(get, httpx.Response(500), 0) is None
    assert policy.after_response(cancel, httpx.Response(503), 0) is None  # not idempotent
    assert policy.after_error(cancel, httpx.ConnectError("refused"), 0) == 0.1  # never reached the service
    assert policy.after_error(cancel, httpx.ReadError("reset"), 0) is None
    assert policy.reconnect_after(2) == 0.4 and policy.reconnect_after(3) is None


@pytest.mark.parametrize("asynchronous", [False, True])
def test_both_clients_follow_the_policy(asynchronous):
    """Both clients resend a GET after a 503 and give a POST /cancel's 503 back as an error."""
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(f"{request.method} {request.url.path}")
        if len(seen) == 1 or request.method == "POST":
            return httpx.Response(503, json={"detail": "busy"})
        return httpx.Response(200, json={"id": "r", "status": "RUNNING"})

    transport = httpx.MockTransport(handler)
    if asynchronous:

        async def go() -> tuple[str, int]:
            async with AsyncClient("http://svc", "k" * 10, backoff_s=0.0) as c:
                c._http = httpx.AsyncClient(transport=transport, base_url="http://svc")
                status = await (await c.run("r")).status()
                with pytest.raises(APIError) as err:
                    await (await c.run("r")).cancel()
                return status, err.value.status_code

        status, code = asyncio.run(go())
    else:
        with Client("http://svc", "k" * 10, backoff_s=0.0) as c:
            c._http = httpx.Client(transport=transport, base_url="http://svc")
            status = c.run("r").status()
            with pytest.raises(APIError) as err:
                c.run("r").cancel()
            code = err.value.status_code
    assert status == "RUNNING" and code == 503
    assert seen == ["GET /v1/runs/r", "GET /v1/runs/r", "GET /v1/runs/r", "GET /v1/runs/r", "POST /v1/runs/r/cancel"]


def test_progress_event_carries_fraction_and_the_last_convergence_check():
    from raysampler.diagnostics import convergence_fraction
    from raysampler.wire import ProgressEvent

    plain = ProgressEvent(10, 100, 5)
    assert plain.to_json() == {"rounds_done": 10, "rounds_total": 100, "draws_stored": 5}
    assert ProgressEvent.from_json(plain.to_json()) == plain
    auto = ProgressEvent(10, 100, 5, 0.25, "convergence", 100.0, 1.2)
    assert ProgressEvent.from_json(auto.to_json()) == auto
    assert "max_rhat" not in ProgressEvent(1, 2, 3, 0.0, "convergence", 1.0, float("nan")).to_json()
    assert convergence_fraction(100, 1.001, 400, 1.01) == 0.25  # ESS is the worse
    assert convergence_fraction(800, 1.02, 400, 1.01) == pytest.approx(0.5)  # R-hat: (1.01 − 1) / (1.02 − 1)
    assert convergence_fraction(800, 1.005, 400, 1.01) == 1.0
    assert convergence_fraction(float("nan"), 1.0, 400, 1.01) == 0.0


def test_the_sdks_typed_answers_have_the_fields_of_the_servers_schemas():
    """Each typed dict of `raysampler.wire.responses` restates the pydantic schema of the same name, field for field,
    so that the SDK's types cannot drift from what the server sends."""
    from typing import get_type_hints

    from raysampler.service import schemas
    from raysampler.wire import responses

    for name in responses.__all__:
        ours, theirs = getattr(responses, name), getattr(schemas, name)
        assert list(get_type_hints(ours)) == list(theirs.model_fields), name
