"""Run the raysampler CLI with a draw-file read that fails once, to check that a stream cut by a server-side error is
seen by the client as a broken connection, not as the stream's end. A stream reads its draws 50 indices at a time
here, and the first read that starts after index 0 raises: a stream's second read, whether the run is still going
or already over when the stream starts (only streams read from the middle; summaries and diagnostics read from 0)."""

from __future__ import annotations

import sys

from raysampler.service import drawfiles, streaming

_real = drawfiles.DrawFiles.read
_failed = [False]


def _read_failing_once(self, tenant, run_id, start, stop):
    if start > 0 and not _failed[0]:
        _failed[0] = True
        raise SystemError("injected read failure")
    return _real(self, tenant, run_id, start, stop)


drawfiles.DrawFiles.read = _read_failing_once
streaming.BLOCK_LINES = 100  # 50 draw indices a read with 2 chains: a 400-draw run takes 8 reads

from raysampler.cli import main  # noqa: E402

sys.exit(main(sys.argv[1:]))
