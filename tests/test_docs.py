"""The docs name only code that exists: every backticked name in docs/architecture.md, docs/models.md and
docs/algorithms.md that looks like code — a file or folder path (`raysampler/runtime/pools.py`, `pools.py`,
`api/routers/`), a dotted name (`rs.sample`, `Result.posterior`), an identifier with an underscore or capitals
(`bind_model`, `RunConfig`), a call (`close()`), a RAYSAMPLER_* variable — must resolve: the path exists (whole, or
as the tail of a path in the repository), or the name is defined (a class, function, method, module-level or
attribute assignment, an argument, a string key such as a registry's) somewhere in raysampler/ or api/, or the
variable is read there (by name, or as a RAYSAMPLER_-prefixed settings field).

Names of other projects (Ray, NumPy, the OS) are listed in EXTERNAL; plain lowercase words (`auto`, `grad`) are
not checked, being as often prose as code.

And every code block of docs/models.md works as written (`test_every_code_block_of_the_models_doc_works`)."""

from __future__ import annotations

import ast
import builtins
import functools
import json
import re
import sys
import tomllib
import types
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ["docs/architecture.md", "docs/models.md", "docs/algorithms.md"]
PACKAGES = ("raysampler", "api")
SEARCHED = ("raysampler", "api", "tests", "benchmarks", "scripts", "docs", "deploy")

#: Names from other projects (or a shell) that the docs mention in backticks.
EXTERNAL = {
    "ray",
    "np",
    "numpy",
    "scipy",
    "arviz",
    "az",
    "SeedSequence",
    "sched_yield",
    "RAY_ADDRESS",
    "RAY_TMPDIR",
    "ray_current_cluster",
    "pyproject.toml",
    "ruff",
    "mypy",
    "pytest",
    "uvicorn",
    "fastapi",
    "httpx",
}

_SPAN = re.compile(r"`([^`\n]+)`")
_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
_DOTTED = re.compile(rf"^{_IDENT}(\.{_IDENT})*$")
_PATH = re.compile(r"^[A-Za-z0-9_.\-/]+$")


@functools.cache
def defined_names() -> frozenset[str]:
    """Every name raysampler/ and api/ define: classes, functions, assignments (module, class, attribute), args."""
    names: set[str] = set()
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            names.update(path.relative_to(ROOT).with_suffix("").parts)  # packages and modules
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                    names.add(node.name)
                elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                    names.add(node.id)
                elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                    names.add(node.attr)
                elif isinstance(node, ast.arg):
                    names.add(node.arg)
                elif isinstance(node, ast.alias):
                    names.add((node.asname or node.name).split(".")[-1])
                elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.isidentifier():
                    names.add(node.value)  # registry keys and JSON fields: "linear_regression", "predicted_sd_error"
    return frozenset(names | set(dir(builtins)))


@functools.cache
def source_text() -> str:
    return "\n".join(p.read_text(encoding="utf-8") for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


@functools.cache
def repo_paths() -> frozenset[str]:
    """Every file and folder under the searched folders, as paths relative to the repository root."""
    out: set[str] = set()
    for top in SEARCHED:
        for p in (ROOT / top).rglob("*"):
            if "__pycache__" not in p.parts:
                out.add(p.relative_to(ROOT).as_posix())
    return frozenset(out)


def path_exists(text: str) -> bool:
    tail = text.rstrip("/")
    if (ROOT / tail).exists():
        return True
    return any(p == tail or p.endswith("/" + tail) for p in repo_paths())


def code_names(text: str) -> list[str]:
    """What in one backticked span must resolve, as "path:…", "name:…" or "env:…" (empty: nothing to check)."""
    text = text.strip()
    if text.startswith(("$", "-", "<", "/", ".")) or text.split("(")[0].split(".")[0] in EXTERNAL:
        return []
    if "(" in text:  # a call: `close()`, `step(per_group, meanwhile)`, `rs.sample(..., executor="ray")`
        text = text.split("(", 1)[0]
        return [f"name:{text}"] if _DOTTED.match(text) else []
    if " " in text:  # a command or a phrase
        return []
    if "=" in text:  # RAYSAMPLER_COORDINATOR_SHARDS=0, transport="actor"
        name = text.split("=", 1)[0]
        return [f"env:{name}"] if name.startswith("RAYSAMPLER_") else []
    if text.startswith("RAYSAMPLER_"):
        return [f"env:{text}"]
    if "/" in text or re.search(r"\.(py|md|toml|yaml|yml|json|npz|html|js|css|sh)$", text):
        return [f"path:{text}"] if _PATH.match(text) else []
    if _DOTTED.match(text) and ("." in text or "_" in text.strip("_") or not text.islower()):
        if text.isupper() and "_" not in text:  # an acronym (`CPU`)
            return []
        return [f"name:{text}"]
    return []


def resolves(ref: str) -> bool:
    kind, _, text = ref.partition(":")
    if kind == "path":
        return path_exists(text)
    if kind == "env":  # read by name, or a field of a settings class with the RAYSAMPLER_ prefix
        return text in source_text() or text.removeprefix("RAYSAMPLER_").lower() in defined_names()
    parts = text.split(".")
    if parts[0] in ("rs", "raysampler", "api"):
        parts = parts[1:] or ["raysampler"]
    if path_exists("/".join(parts) + ".py") or path_exists("/".join(parts)):
        return True  # a module: raysampler.runtime.pools
    return all(p in defined_names() or p in EXTERNAL for p in parts)


def stale_names(doc: str) -> list[str]:
    out, fenced = [], False
    for lineno, line in enumerate((ROOT / doc).read_text(encoding="utf-8").splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        if fenced or line.lstrip().startswith("```"):  # a code block: an example, not a reference
            continue
        for span in _SPAN.findall(line):
            out += [f"{doc}:{lineno}: `{span}`" for ref in code_names(span) if not resolves(ref)]
    return out


def test_the_name_rules() -> None:
    assert code_names("raysampler/runtime/pools.py") == ["path:raysampler/runtime/pools.py"]
    assert code_names('rs.sample(..., executor="ray")') == ["name:rs.sample"]
    assert code_names("bind_model") == ["name:bind_model"] and code_names("RunConfig") == ["name:RunConfig"]
    assert code_names("auto") == [] and code_names("ray start") == [] and code_names("ray.init()") == []
    assert resolves("path:raysampler/runtime/pools.py") and resolves("path:pools.py") and resolves("name:rs.sample")
    assert not resolves("name:coordinator_init_that_is_not_there") and not resolves("path:raysampler/nowhere.py")


@pytest.mark.parametrize("doc", DOCS)
def test_docs_name_only_code_that_exists(doc: str) -> None:
    stale = stale_names(doc)
    assert not stale, "names in the docs that the code does not define:\n" + "\n".join(stale)


# ---- docs/models.md's code blocks ------------------------------------------------------------------------------

MODELS_DOC = ROOT / "docs" / "models.md"
MODULE = "models_md_blocks"


def code_blocks() -> list[tuple[str, int, str]]:
    """(language, line, code) of every fenced block of docs/models.md, in order."""
    text = MODELS_DOC.read_text(encoding="utf-8")
    return [
        (m.group(1), text.count("\n", 0, m.start()) + 1, m.group(2))
        for m in re.finditer(r"^```(\w*)\n(.*?)^```", text, flags=re.S | re.M)
    ]


def test_every_code_block_of_the_models_doc_works():
    """docs/models.md's blocks work as written: the Python blocks run in order as one module (as a reader would
    paste them into one session; a later block uses an earlier one's names), the JSON blocks are run specs the
    service accepts, the TOML block is valid TOML; a block in any other language fails the test."""
    import matplotlib

    from raysampler.service.schemas import ModelSpec, RunSpec

    matplotlib.use("Agg")  # the formulas section draws a check
    found = code_blocks()
    assert {lang for lang, _, _ in found} <= {"python", "json", "toml"}, [(lang, line) for lang, line, _ in found]
    module = types.ModuleType(MODULE)  # a module of its own, so that Ray could ship its classes by value
    module.__file__ = str(MODELS_DOC)
    sys.modules[MODULE] = module
    formulas: list[str] = []  # the formulas section's parameter names (its `result` is reused further down)
    try:
        for lang, line, code in found:
            where = f"{MODELS_DOC}:{line}"
            if lang == "python":
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # the examples' short runs warn about their ESS
                    exec(compile(code, where, "exec"), module.__dict__)
                if not formulas:
                    formulas = list(module.__dict__["result"].param_names)
            elif lang == "toml":
                assert tomllib.loads(code), where
            else:
                body = json.loads(code)
                if "model" in body:
                    RunSpec.model_validate(body)
                else:
                    ModelSpec.model_validate(body)
        assert formulas[:3] == ["beta[(Intercept)]", "beta[age]", "beta[C(region)[2]]"]
        names = module.__dict__
        assert names["hospital_3"].dims == ("chain", "draw", "coef")
        assert 0.0 < names["deaths"].observed < 1.0 and 0.0 <= names["deaths"].p_value <= 1.0
        assert names["res"].param_names == ["beta[(Intercept)]", "beta[dose]"]
        assert names["post"]["r_hospital"].dims == ("chain", "draw", "hospital", "hospital_effect")
        assert list(names["result"].posterior()) == ["beta", "sigma"]  # the NumPyro model's, last
    finally:
        sys.modules.pop(MODULE, None)
        import matplotlib.pyplot as plt

        plt.close("all")


def test_the_readmes_quickstart_runs_as_written():
    """The README's quickstart (its first Python block) runs as a reader pastes it: a formula fitted to
    convergence on four shards, its fixed effects, county intercepts and predictions by column name."""
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"```python\n(.*?)```", readme, re.S)
    assert block is not None, "the README has a Python quickstart"
    names: dict = {"__name__": "readme_quickstart"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(compile(block.group(1), "README.md", "exec"), names)
    result = names["result"]
    assert result.outcome.stop_reason == "converged"
    fixef = result.fixef()
    assert abs(fixef.loc["floor", "Estimate"] + 0.6) < 3 * fixef.loc["floor", "Est.Error"] + 0.05
    assert names["result"].predict(names["new"], "epred").shape[1] == 2


# ---- measured figures live in docs/performance.md, not in the code (issue 46) ----------------------------------

#: A measured result quoted in a comment or docstring: a time in ns/µs/ms, an approximate time in seconds, a speed
#: ratio ("1.4x", "0.82×"; not "2×2" or a name such as "t1x"), a "10 % less CPU", or "measured" with a figure after
#: it on the same line. Code says what it chose and why, and points to docs/performance.md for the numbers.
MEASURED = re.compile(
    r"(?<![\w.])\d+(\.\d+)?\s?(ns|µs|ms)\b"
    r"|(~|≈|about )\s?\d+(\.\d+)?\s?s\b"
    r"|(?<![\w.])\d+(\.\d+)?[x×](?![\w(])"
    r"|\d\s?%\s(less|more|faster|slower|cheaper)\b"
    r"|\bmeasured\b[^.\n]*\d",
    re.IGNORECASE,
)
#: (file, the matched text) that states a setting, not a measurement, with the reason.
MEASURED_ALLOWED = {
    ("raysampler/sampling.py", "1.5x"),  # `balance_ratio`'s default: the threshold balance="auto" applies
    # the variance ratios of the exact (computed, not timed) laws that explain why the average is the sample
    ("raysampler/algorithms/decentralized.py", "2.5×"),
    ("raysampler/algorithms/decentralized.py", "2×"),
    ("raysampler/algorithms/decentralized.py", "1.01×"),
    ("raysampler/datasets.py", "100×"),  # how the data set's scales spread (its definition), not a speed
}


def comment_and_docstring_lines(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every comment and every docstring line of one Python file."""
    import io
    import tokenize

    text = path.read_text(encoding="utf-8")
    out = [
        (tok.start[0], tok.string)
        for tok in tokenize.generate_tokens(io.StringIO(text).readline)
        if tok.type == tokenize.COMMENT
    ]
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            doc = first.value.value if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) else None
            if isinstance(doc, str):
                out += [(first.lineno + k, s) for k, s in enumerate(doc.splitlines())]
    return out


def measured_figures() -> list[str]:
    found = []
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            for lineno, line in comment_and_docstring_lines(path):
                for m in MEASURED.finditer(line):
                    if (rel, m.group(0)) not in MEASURED_ALLOWED:
                        found.append(f"{rel}:{lineno}: {m.group(0)!r} in {line.strip()[:100]!r}")
    return found


def test_the_measured_figure_rule() -> None:
    for text in (
        "takes 24 ms",
        "~70 µs of Python",
        "(≈ 0.5 s at this size)",
        "rounds 0.72x",
        "1.8× faster",
        "measured 10 % less CPU",
        "measured up to 2x",
        "Measured on the 5-ring (d = 2",
    ):
        assert MEASURED.search(text), text
    for text in (
        "2×2 Lyapunov",
        "s3://bucket/t1x/",
        "145k×54 shard",
        "RAYSAMPLER_SITE_WAIT_S (300 s)",
        "the measured RTT",
        "8 MB at S = 1,000",
        "a 25 % quantile",
    ):
        assert not MEASURED.search(text), text


def test_code_comments_quote_no_measurements() -> None:
    """Comments and docstrings state decisions and point to docs/performance.md, which alone holds the figures
    (its section "Measurements behind choices in the code")."""
    found = measured_figures()
    assert not found, "measured figures in comments or docstrings (move them to docs/performance.md):\n" + "\n".join(
        found
    )


def test_code_pointers_to_performance_md_name_its_sections() -> None:
    """Every `docs/performance.md, "Section"` a comment or docstring points to names one of its headings (the start
    of it), so that renaming a section cannot leave the code pointing nowhere."""
    headings = [
        re.sub(r"^#+\s*", "", line).strip()
        for line in (ROOT / "docs" / "performance.md").read_text(encoding="utf-8").splitlines()
        if line.startswith("#")
    ]
    pointers, dangling = 0, []
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            # a pointer may wrap across comment lines ("#: ..."), so join the lines first
            text = re.sub(r"\s*\n\s*(#:?\s*)?", " ", path.read_text(encoding="utf-8"))
            for m in re.finditer(r'docs/performance\.md, "([^"]+)"', text):
                pointers += 1
                if not any(h.startswith(m.group(1)) for h in headings):
                    dangling.append(f"{path.relative_to(ROOT).as_posix()}: {m.group(1)!r}")
    assert pointers > 0
    assert not dangling, "pointers to sections docs/performance.md does not have:\n" + "\n".join(dangling)
