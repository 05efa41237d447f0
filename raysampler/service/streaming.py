"""Streams read from the store, never from the sampler: NDJSON draws from the draw files and SSE events from the event
log, each from a client-given offset, optionally following the run until it ends.

NDJSON draw stream. Line 0 is a header {"type": "header", ...}; then one line per stored draw vector, in the order
(index, chain): {"offset": o, "chain": c, "index": i, "values": [...]} with o = i·chains + c. `start` is the
offset of the first line wanted, so a client that has received m draw lines resumes with start = m and gets
exactly the missing lines. Non-finite values are the strings "NaN", "Infinity", "-Infinity" (JSON has no NaN).
"""
from __future__ import annotations

import asyncio
import json
import math
from typing import Any, AsyncIterator, Callable

import numpy as np
import orjson

from .drawfiles import DrawFiles
from .schemas import TERMINAL
from .store import RecordStore

NONFINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
_ENCODE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}
BLOCK_LINES = 4096  # draw lines per read-and-encode step (done off the event loop)


def encode_values(row: np.ndarray) -> str:
    """A JSON array of floats (shortest round-trip repr, via orjson) with NaN/±inf as strings."""
    if np.all(np.isfinite(row)):
        return orjson.dumps(np.ascontiguousarray(row, dtype=np.float64), option=orjson.OPT_SERIALIZE_NUMPY).decode()
    return json.dumps([v if math.isfinite(v) else _ENCODE[repr(v)] for v in row.tolist()])


def decode_values(values: list[Any]) -> list[float]:
    return [NONFINITE[v] if isinstance(v, str) else v for v in values]


def header(rec: dict, start: int) -> dict:
    return {"type": "header", "run_id": rec["id"], "param_names": rec["param_names"], "chains": rec["chains"],
            "dim": rec["dim"], "shape": [rec["chains"], rec["draws_total"], rec["dim"]],
            "draws_stored": rec["draws_stored"], "status": rec["status"], "start": start,
            "chain_seeds": [{"chain": c, "seed": rec["spec"]["seed"], "spawn_key_prefix": [c]}
                            for c in range(rec["chains"])],
            "order": "offset = index * chains + chain", "nonfinite": list(NONFINITE)}


def draw_lines(block: np.ndarray, first_index: int) -> str:
    """NDJSON lines for draws [first_index, first_index + len(block)) of every chain (block: (m, chains, d))."""
    chains = block.shape[1]
    out = []
    for a, per_chain in enumerate(block):
        i = first_index + a
        for c, row in enumerate(per_chain):
            out.append(f'{{"offset":{i * chains + c},"chain":{c},"index":{i},"values":{encode_values(row)}}}\n')
    return "".join(out)


def _render(files: DrawFiles, tenant: str, run_id: str, i0: int, i1: int, skip: int) -> str:
    """Lines of draws [i0, i1), without the first `skip` (a client resuming in the middle of an index)."""
    text = draw_lines(files.read(tenant, run_id, i0, i1), i0)
    return "".join(text.splitlines(keepends=True)[skip:]) if skip else text


async def ndjson_draws(get_run: Callable[[], dict | None], files: DrawFiles, start: int, follow: bool,
                       poll_s: float) -> AsyncIterator[str]:
    """Header, then draw lines from offset `start`; with `follow`, wait for new durable draws until the run ends."""
    rec = get_run()
    while follow and rec is not None and rec["dim"] is None and rec["status"] not in TERMINAL:
        await asyncio.sleep(poll_s)  # the header needs the dimension, known after the run's setup
        rec = get_run()
    if rec is None:
        return
    yield json.dumps(header(rec, start)) + "\n"
    if rec["dim"] is None:
        return
    chains = rec["chains"]
    per_block = max(1, BLOCK_LINES // chains)  # draw indices per step
    offset = start
    while True:
        stored = rec["draws_stored"]
        while offset < stored * chains:
            i0 = offset // chains
            i1 = min(stored, i0 + per_block)
            yield await asyncio.to_thread(_render, files, rec["tenant"], rec["id"], i0, i1, offset - i0 * chains)
            offset = i1 * chains
        if not follow or rec["status"] in TERMINAL:
            # a last look: the final chunk may have landed between our read and the status change
            rec2 = get_run()
            if rec2 is None or rec2["draws_stored"] * chains <= offset:
                return
            rec = rec2
            continue
        await asyncio.sleep(poll_s)
        rec = get_run()
        if rec is None:
            return


def sse(seq: int, kind: str, data: dict) -> str:
    return f"id: {seq}\nevent: {kind}\ndata: {json.dumps(data)}\n\n"


async def sse_events(store: RecordStore, get_run: Callable[[], dict | None], after: int, follow: bool,
                     poll_s: float, keepalive_s: float) -> AsyncIterator[str]:
    """Events with seq > `after` as SSE; keep-alive comments while waiting; ends after the run's final status."""
    rec = get_run()
    if rec is None:
        return
    loop = asyncio.get_running_loop()
    last_sent = loop.time()
    yield f"retry: {int(1000 * max(poll_s, 1.0))}\n\n"
    while True:
        events = store.events_after(rec["key"], after)
        for ev in events:
            yield sse(ev["seq"], ev["kind"], ev["data"] | {"ts": ev["ts"]})
            after = ev["seq"]
            last_sent = loop.time()
        if events:
            continue
        rec = get_run()
        if rec is None:
            return
        if rec["status"] in TERMINAL:
            if not store.events_after(rec["key"], after):
                return
            continue
        if not follow:
            return
        if loop.time() - last_sent >= keepalive_s:
            yield ": keep-alive\n\n"
            last_sent = loop.time()
        await asyncio.sleep(poll_s)
