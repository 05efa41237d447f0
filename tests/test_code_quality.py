"""The habits that keep the code readable, run with the tests (so CI runs them): ruff's lint rules and formatting
(configured in pyproject.toml) over the whole repository, and mypy with check_untyped_defs on raysampler/ (with
raysampler.api, the api/ folder)."""

from __future__ import annotations

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_ruff_lint_is_clean():
    out = _run("ruff", "check", "--no-cache", ".")
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-2000:]


def test_ruff_format_is_clean():
    out = _run("ruff", "format", "--check", "--no-cache", ".")
    assert out.returncode == 0, "run `ruff format .`:\n" + out.stdout[-4000:] + out.stderr[-2000:]


def test_mypy_is_clean():
    out = _run("mypy", "--no-incremental")
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-2000:]
