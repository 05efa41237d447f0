"""Puts benchmarks/ on sys.path, so that the scripts in this folder, run as `python benchmarks/<folder>/<name>.py`,
can `from harness import ...`: they `import _path  # noqa: F401` first, for this side effect only."""

import sys
from pathlib import Path

_BENCHMARKS = str(Path(__file__).resolve().parents[1])
if _BENCHMARKS not in sys.path:
    sys.path.insert(1, _BENCHMARKS)
