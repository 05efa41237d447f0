"""Run the raysampler CLI with an audit hook that appends every file path this process opens to a log (argv[1]):
the site tests check that the service never opens a site shard's file."""

from __future__ import annotations

import os
import sys

_log = open(sys.argv[1], "a", buffering=1)  # noqa: SIM115 (the log outlives every call)


def _hook(event: str, args: tuple) -> None:
    if event == "open" and args and isinstance(args[0], (str, bytes, os.PathLike)):
        _log.write(f"{os.fsdecode(args[0])}\n")


sys.addaudithook(_hook)

from raysampler.cli import main  # noqa: E402  (imported after the hook so its own opens are recorded too)

sys.exit(main(sys.argv[2:]))
