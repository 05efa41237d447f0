"""tests/support/markers.py names only tests that exist: a renamed slow test must not slip into the fast lane
unnoticed."""

from __future__ import annotations

import ast
from pathlib import Path

from support.markers import ALL, SLOW

ROOT = Path(__file__).resolve().parents[1]


def test_every_listed_slow_test_exists() -> None:
    missing = []
    for rel, entry in SLOW.items():
        path = ROOT / rel
        if not path.exists():
            missing.append(rel)
            continue
        if entry == ALL:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        defined = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
        missing += [f"{rel}::{name}" for name in sorted(entry) if name.split("[")[0] not in defined]
    assert not missing, f"tests/support/markers.py lists tests that do not exist: {missing}"
