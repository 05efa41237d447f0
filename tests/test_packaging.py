"""How raysampler is packaged: the app folder api/ is the package raysampler.api (no top-level `api` anywhere), and
`pip install raysampler` is the SDK and the CLI alone, the engine and the service being extras (raysampler/extras).

Building the light install into a fresh venv takes minutes, too slow for the suite; instead the import graph is
checked: a process imports what the light install offers and may load only the standard library and the closure of
the base dependencies, and with the extras' modules made unimportable (as where they are not installed) each engine
or service entry point raises MissingExtraError naming its extra.
"""

from __future__ import annotations

import ast
import importlib.metadata
import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

from raysampler.extras import EXTRAS, INCLUDES

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("raysampler", "api", "tests", "benchmarks", "scripts")
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_the_app_folder_is_the_package_raysampler_api():
    link = ROOT / "raysampler" / "api"
    assert link.is_symlink() and os.readlink(link) == "../api", "raysampler/api is a relative link to api/"
    import raysampler.api
    from raysampler.api.app import UI_DIR

    assert Path(raysampler.api.__file__).resolve() == ROOT / "api" / "__init__.py"
    assert callable(raysampler.api.create_app)
    assert (UI_DIR / "index.html").is_file() and UI_DIR.resolve() == ROOT / "api" / "ui"


def test_package_data_ships_every_dashboard_file():
    """Every file under api/ui (the entry module, the ES modules under js/, the vendored library) matches one of
    pyproject's package-data patterns, so a module added in a new folder cannot be left out of the wheel unnoticed
    (tests/deploy builds the wheel itself; this is the quick check)."""
    from pathlib import PurePosixPath

    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    globs = [PurePosixPath(g) for g in patterns["raysampler.api"]]
    api = ROOT / "api"
    files = [PurePosixPath(p.relative_to(api).as_posix()) for p in (api / "ui").rglob("*") if p.is_file()]
    assert PurePosixPath("ui/app.js") in files and any(f.parent.name == "js" for f in files)
    # setuptools' `*` does not cross a `/`: a pattern matches a path of as many parts.
    missed = [str(f) for f in files if not any(len(g.parts) == len(f.parts) and f.match(str(g)) for g in globs)]
    assert not missed, f"dashboard files no package-data pattern ships: {missed}"


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


def _dist(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _modules_of_closure(requirements: list[str]) -> set[str]:
    """The top-level modules that installing `requirements` brings (theirs and their dependencies', recursively), and
    those that they import only where installed: the packages of the extras of `requirements` themselves (httpx
    imports its command line's click and rich where they are)."""
    by_dist: dict[str, set[str]] = {}
    for module, dists in importlib.metadata.packages_distributions().items():
        for d in dists:
            by_dist.setdefault(_dist(d), set()).add(module)
    seen: set[str] = set()
    optional: set[str] = set()
    todo = [Requirement(r) for r in requirements]
    while todo:
        req = todo.pop()
        if _dist(req.name) in seen or (req.marker is not None and not req.marker.evaluate({"extra": ""})):
            continue
        seen.add(_dist(req.name))
        todo += [Requirement(r) for r in importlib.metadata.requires(req.name) or []]
    for r in requirements:
        extras = importlib.metadata.metadata(Requirement(r).name).get_all("Provides-Extra") or []
        for dep in map(Requirement, importlib.metadata.requires(Requirement(r).name) or []):
            if dep.marker is not None and any(dep.marker.evaluate({"extra": e}) for e in extras):
                optional.add(_dist(dep.name))
    return {m for d in seen | optional for m in by_dist.get(d, ())}


def test_extras_list_the_modules_of_pyprojects_extras():
    """raysampler/extras names, per extra, one module of each distribution pyproject.toml lists for it, and no other."""
    extras = PROJECT["optional-dependencies"]
    dists_of = importlib.metadata.packages_distributions()
    for extra, modules in EXTRAS.items():
        listed = {_dist(Requirement(r).name) for r in extras[extra] if Requirement(r).name != "raysampler"}
        named = {_dist(d) for m in modules for d in dists_of[m]}
        assert named == listed, (extra, sorted(named ^ listed))
        included = {e for r in extras[extra] if Requirement(r).name == "raysampler" for e in Requirement(r).extras}
        assert included == set(INCLUDES[extra]), extra
    assert "raysampler[engine,service,privacy]" in extras["all"] and "raysampler[all]" in extras["dev"]


LIGHT = r"""
import contextlib, io, json, sys
import raysampler, raysampler.sdk, raysampler.client, raysampler.wire
from raysampler import cli
with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):
    cli.main(["--help"])
out = {"loaded": sorted(m for m in sys.modules if not m.startswith("_"))}

from raysampler.extras import EXTRAS, MissingExtraError
for names in EXTRAS.values():  # as where the extras are not installed: importing any of these fails
    for m in names:
        sys.modules.setdefault(m, None)

def error(call):
    try:
        call()
    except MissingExtraError as exc:
        return [exc.extra, str(exc)]
    except BaseException as exc:
        return ["other", repr(exc)]
    return None

import importlib
out["rs.sample"] = error(lambda: raysampler.sample)
out["rs.models"] = error(lambda: raysampler.models.Gaussian)
out["from raysampler.models import"] = error(lambda: importlib.import_module("raysampler.models"))
out["raysampler.api"] = error(lambda: importlib.import_module("raysampler.api"))
stderr = io.StringIO()
with contextlib.redirect_stderr(stderr):
    out["serve"] = [cli.main(["serve"]), stderr.getvalue()]
from raysampler.sdk.connection import service_address
out["served key"] = service_address("http://example.invalid", None, key_file=True)[1]
print(json.dumps(out))
"""


def test_the_light_install_imports_the_sdk_and_cli_and_names_the_extras_it_lacks(tmp_path):
    env = {**os.environ, "RAYSAMPLER_DATA_DIR": str(tmp_path), "PYTHONPATH": str(ROOT)}
    env.pop("RAYSAMPLER_API_KEY", None)
    proc = subprocess.run([sys.executable, "-c", LIGHT], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    third_party = {m.partition(".")[0] for m in out["loaded"]} - set(sys.stdlib_module_names) - {"raysampler"}
    allowed = _modules_of_closure(PROJECT["dependencies"])
    assert third_party <= allowed, f"not in `pip install raysampler`: {sorted(third_party - allowed)}"
    assert not third_party & {m for names in EXTRAS.values() for m in names}, "an extra's module on the light path"
    heavy = (
        "raysampler.service",
        "raysampler.api",
        "raysampler.models",
        "raysampler.runtime",
        "raysampler.sampling",
        "raysampler.run",
    )
    assert not [m for m in out["loaded"] if m.startswith(heavy)]
    for what in ("rs.sample", "rs.models", "from raysampler.models import"):
        extra, message = out[what]
        assert extra == "engine" and 'pip install "raysampler[engine]"' in message, (what, message)
    assert "raysampler.sample needs" in out["rs.sample"][1]
    extra, message = out["raysampler.api"]
    assert extra == "service" and 'pip install "raysampler[service]"' in message
    code, stderr = out["serve"]
    assert code == 2 and "`raysampler serve` needs" in stderr and 'pip install "raysampler[service]"' in stderr
    assert out["served key"] is None  # no service installed here, so no key it saved


def test_constraints_pin_every_dependency_of_every_extra():
    pins = {_dist(line.split("==")[0]) for line in (ROOT / "constraints.txt").read_text().splitlines() if "==" in line}
    wanted = PROJECT["dependencies"] + [r for reqs in PROJECT["optional-dependencies"].values() for r in reqs]
    names = {_dist(Requirement(r).name) for r in wanted} - {"raysampler"}
    assert names <= pins, f"not in constraints.txt: {sorted(names - pins)}"


def test_models_base_warns_naming_the_new_module_of_each_name():
    import pytest

    from raysampler import priors
    from raysampler.models import contract

    with pytest.warns(DeprecationWarning, match=r"import Model from raysampler\.models\.contract"):
        from raysampler.models.base import Model
    with pytest.warns(DeprecationWarning, match=r"import GaussianPrior from raysampler\.priors"):
        from raysampler.models.base import GaussianPrior
    assert Model is contract.Model and GaussianPrior is priors.GaussianPrior
    users = set()
    for folder in SOURCES:
        for path in (ROOT / folder).rglob("*.py"):
            if re.search(r"^\s*from (raysampler|\.+)\.?models\.base import|models\.base\.", path.read_text(), re.M):
                users.add(path.relative_to(ROOT).as_posix())
    users -= {"tests/test_packaging.py"}
    assert not users, f"import from raysampler.models.contract instead: {sorted(users)}"


def test_the_sampler_never_imports_the_test_yardsticks():
    """raysampler.testing ships for the tests, benchmarks and users' checks (its docstring says why), never for the
    sampler: no other module of raysampler imports it."""
    users = [
        path.relative_to(ROOT).as_posix()
        for path in (ROOT / "raysampler").rglob("*.py")
        if "testing" not in path.parts
        and re.search(r"^\s*(from|import) (raysampler|\.+)\.?testing\b", path.read_text(), re.M)
    ]
    assert not users, users


def test_the_id_and_site_patterns_are_defined_once():
    """raysampler/names.py holds the id and site-label patterns; no other module of raysampler or api writes them."""
    bodies = (r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", r"[A-Za-z0-9_.-]{0,61}[A-Za-z0-9]")
    copies = [
        path.relative_to(ROOT).as_posix()
        for folder in ("raysampler", "api")
        for path in (ROOT / folder).rglob("*.py")
        if path.name != "names.py" and any(b in path.read_text() for b in bodies)
    ]
    assert not copies, f"use raysampler.names instead: {copies}"
