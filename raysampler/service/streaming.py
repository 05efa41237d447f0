"""Streams read from the store, never from the sampler: NDJSON draws from the draw files and SSE events from the event
log, each from a client-given offset, optionally following the run until it ends. The line and frame formats are
`raysampler.wire`'s.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

from ..models.contract import natural_values
from ..wire import SSE_KEEPALIVE, ChainSeed, DrawsHeader, draw_lines, sse_frame, sse_retry
from .drawfiles import DrawFiles
from .records import RunRecord
from .store import RecordStore

BLOCK_LINES = 4096  # draw lines per read-and-encode step (done off the event loop)


def header(rec: RunRecord, start: int) -> DrawsHeader:
    """The draw stream's header line for a run (chain c is seeded by SeedSequence(seed) spawned along [c])."""
    return DrawsHeader(
        run_id=rec.id,
        param_names=rec.param_names,
        chains=rec.chains,
        dim=rec.dim,
        draws_total=rec.draws_total,
        draws_stored=rec.draws_stored,
        status=rec.status,
        start=start,
        chain_seeds=tuple(ChainSeed(c, rec.spec.seed, (c,)) for c in range(rec.chains)),
    )


def _render(files: DrawFiles, rec: RunRecord, i0: int, i1: int, skip: int) -> str:
    """Lines of draws [i0, i1) on the parameters' natural scale (σ, not log σ), without the first `skip` (a client
    resuming in the middle of an index)."""
    text = draw_lines(natural_values(rec.param_blocks or (), files.read(rec.tenant, rec.id, i0, i1)), i0)
    return "".join(text.splitlines(keepends=True)[skip:]) if skip else text


async def ndjson_draws(
    get_run: Callable[[], RunRecord | None], files: DrawFiles, start: int, follow: bool, poll_s: float
) -> AsyncIterator[str]:
    """Header, then draw lines from offset `start`; with `follow`, wait for new durable draws until the run ends."""
    rec = get_run()
    while follow and rec is not None and rec.dim is None and not rec.status.is_terminal:
        await asyncio.sleep(poll_s)  # the header needs the dimension, known after the run's setup
        rec = get_run()
    if rec is None:
        return
    yield header(rec, start).to_line()
    if rec.dim is None:
        return
    chains = rec.chains
    per_block = max(1, BLOCK_LINES // chains)  # draw indices per step
    offset = start
    while True:
        stored = rec.draws_stored
        while offset < stored * chains:
            i0 = offset // chains
            i1 = min(stored, i0 + per_block)
            yield await asyncio.to_thread(_render, files, rec, i0, i1, offset - i0 * chains)
            offset = i1 * chains
        if not follow or rec.status.is_terminal:
            # a last look: the final chunk may have landed between our read and the status change
            again = get_run()
            if again is None or again.draws_stored * chains <= offset:
                return
            rec = again
            continue
        await asyncio.sleep(poll_s)
        latest = get_run()
        if latest is None:
            return
        rec = latest


async def sse_events(
    store: RecordStore,
    get_run: Callable[[], RunRecord | None],
    after: int,
    follow: bool,
    poll_s: float,
    keepalive_s: float,
) -> AsyncIterator[str]:
    """Events with seq > `after` as SSE; keep-alive comments while waiting; ends after the run's final status."""
    rec = get_run()
    if rec is None:
        return
    loop = asyncio.get_running_loop()
    last_sent = loop.time()
    yield sse_retry(int(1000 * max(poll_s, 1.0)))
    while True:
        events = store.events_after(rec.key, after)
        for ev in events:
            yield sse_frame(ev.seq, ev.kind, ev.data | {"ts": ev.ts})
            after = ev.seq
            last_sent = loop.time()
        if events:
            continue
        latest = get_run()
        if latest is None:
            return
        rec = latest
        if rec.status.is_terminal:
            if not store.events_after(rec.key, after):
                return
            continue
        if not follow:
            return
        if loop.time() - last_sent >= keepalive_s:
            yield SSE_KEEPALIVE
            last_sent = loop.time()
        await asyncio.sleep(poll_s)
