"""How raysampler is packaged: the app folder api/ is the package raysampler.api (no top-level `api` anywhere)."""

from __future__ import annotations

import ast
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("raysampler", "api", "tests", "benchmarks", "scripts")


def test_the_app_folder_is_the_package_raysampler_api():
    link = ROOT / "raysampler" / "api"
    assert link.is_symlink() and os.readlink(link) == "../api", "raysampler/api is a relative link to api/"
    import raysampler.api
    from raysampler.api.app import UI_DIR

    assert Path(raysampler.api.__file__).resolve() == ROOT / "api" / "__init__.py"
    assert callable(raysampler.api.create_app)
    assert (UI_DIR / "index.html").is_file() and UI_DIR.resolve() == ROOT / "api" / "ui"


def test_nothing_imports_a_top_level_api():
    """Importing `api` would load the app a second time under another name (and needs the checkout on sys.path)."""
    found = []
    for folder in SOURCES:
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
                if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                if any(n == "api" or n.startswith("api.") for n in names):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not found, f"import raysampler.api instead: {found}"
