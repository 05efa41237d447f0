"""Every module of raysampler imports on its own, in a fresh interpreter, whatever was imported before it.

Each module is imported in a process where no raysampler module is loaded yet, with a bare `raysampler` package (its
__init__ not run), so that a module which works only after others were imported fails here; and `raysampler` itself
(its __init__) is imported once the same way. `import raysampler.<M>` runs that __init__ first, then M: since no two
modules import each other, even lazily (test_no_import_cycle_counting_imports_inside_functions), and each imports on
its own, M then imports too, so that order needs no child of its own (it doubled this test's time).

A fresh interpreter per module would take over a minute (numpy, scipy, Ray, FastAPI at every start), so one
subprocess imports the third-party modules raysampler imports at module level, then forks a child per module. No
raysampler module is loaded in the subprocess itself.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import os
import subprocess
import sys
import traceback
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "raysampler"


def module_names() -> list[str]:
    """Every module of the package, dotted (`raysampler`, `raysampler.models`, `raysampler.models.base`, …)."""
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def _module_level_imports(tree: ast.Module) -> set[str]:
    """Absolute imports a module runs when it is imported (not those under `if TYPE_CHECKING:` or in functions)."""
    found: set[str] = set()
    stack: list[ast.stmt] = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
        elif isinstance(node, ast.If) and "TYPE_CHECKING" not in ast.unparse(node.test):
            stack.extend(node.body + node.orelse)
        elif isinstance(node, ast.Try):
            stack.extend(node.body + node.orelse + node.finalbody + [s for h in node.handlers for s in h.body])
    return found


def third_party_imports() -> list[str]:
    """The non-raysampler modules raysampler imports at module level, to load once before forking."""
    found: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        found |= _module_level_imports(ast.parse(path.read_text(encoding="utf-8")))
    return sorted(m for m in found if m.split(".")[0] != "raysampler")


def _bare_package() -> None:
    """Put an empty `raysampler` package in sys.modules: its submodules import from it, its __init__ does not run."""
    spec = importlib.util.spec_from_file_location(
        "raysampler", PACKAGE / "__init__.py", submodule_search_locations=[str(PACKAGE)]
    )
    assert spec is not None
    sys.modules["raysampler"] = importlib.util.module_from_spec(spec)


def _in_child(work: Callable[[], str | None]) -> str | None:
    """Run `work` in a forked child: what it returns (None when all is well), or its traceback if it raises."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, then exit without running the parent's cleanup
        os.close(read)
        try:
            message = work()
        except BaseException:
            message = traceback.format_exc()[-3000:]
        os.write(write, (message or "").encode())
        os.close(write)
        os._exit(0 if message is None else 1)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        message = pipe.read().decode(errors="replace")
    _, status = os.waitpid(pid, 0)
    return None if os.waitstatus_to_exitcode(status) == 0 else (message or f"exit status {status}")


def _importer(name: str, bare: bool = False) -> Callable[[], None]:
    def work() -> None:
        if bare:
            _bare_package()
        importlib.import_module(name)

    return work


def check_all() -> dict[str, str]:
    """`{"<module> (<mode>)": traceback}` for every module that does not import on its own (empty when all do)."""
    for name in third_party_imports():
        try:
            importlib.import_module(name)
        except ImportError:  # an optional dependency: the module that needs it reports it
            pass
    assert not any(m == "raysampler" or m.startswith("raysampler.") for m in sys.modules)
    names = module_names()
    failures: dict[str, str] = {}
    message = _in_child(_importer("raysampler"))  # its __init__, with nothing of raysampler loaded
    if message is not None:
        failures["raysampler"] = message
    for name in names:
        message = _in_child(_importer(name, bare=True))
        if message is not None:
            failures[f"{name} (bare package)"] = message
    return failures


def test_every_module_imports_on_its_own():
    out = subprocess.run(
        [sys.executable, str(Path(__file__).resolve())], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-5000:]
    failures = json.loads(out.stdout)
    assert not failures, "\n\n".join(f"{k}:\n{v}" for k, v in failures.items())


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    print(json.dumps(check_all()))


def _import_graph() -> dict[str, set[str]]:
    """raysampler's modules and whom each imports, at module level or inside functions alike. Importing `a.b.c` runs
    the packages `a` and `a.b` first, so that is an edge to each of them (except a module's own parent packages)."""
    mods = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        here = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(here[: len(here) - node.level + 1] + ([node.module] if node.module else []))
                subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in mods]
                targets = subs + ([base] if len(subs) < len(node.names) else [])
            else:
                continue
            for target in targets:
                parts = target.split(".")
                for k in range(1, len(parts) + 1):
                    pkg = ".".join(parts[:k])
                    if pkg in mods and pkg != mod and not mod.startswith(pkg + "."):
                        edges[mod].add(pkg)
    return edges


def test_no_import_cycle_counting_imports_inside_functions():
    """No two modules import each other, directly or through others, even lazily inside a function."""
    edges = _import_graph()
    assert len(edges) > 50 and "raysampler.priors" in edges["raysampler.models.common"]  # the graph was read
    cycles, seen, stack, on_stack, low, index = [], set(), [], set(), {}, {}

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        seen.add(v)
        for w in edges[v]:
            if w not in seen:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in sorted(edges):
        if v not in seen:
            visit(v)
    assert cycles == [], f"import cycles: {cycles}"
