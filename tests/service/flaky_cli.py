"""Run the raysampler CLI with draw-file reads that fail once (the third read raises), to check that a stream cut by
a server-side error is seen by the client as a broken connection, not as the stream's end."""

from __future__ import annotations

import sys

from raysampler.service import drawfiles

_real = drawfiles.DrawFiles.read
_calls = [0]


def _read_failing_once(self, tenant, run_id, start, stop):
    _calls[0] += 1
    if _calls[0] == 3:
        raise SystemError("injected read failure")
    return _real(self, tenant, run_id, start, stop)


drawfiles.DrawFiles.read = _read_failing_once

from raysampler.cli import main  # noqa: E402

sys.exit(main(sys.argv[1:]))
