"""docs/performance.md's generated tables are what `benchmarks/perf/tables.py` renders from benchmarks/perf/results/:
the script's `--check`, run here, fails naming each block whose table differs from its JSON (a benchmark re-run
without regenerating the doc, or a table edited by hand). Cheap: it reads JSON and markdown, nothing is measured."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "perf" / "tables.py"
DOC = ROOT / "docs" / "performance.md"
RESULTS = ROOT / "benchmarks" / "perf" / "results"


def _check(doc: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--check", "--doc", str(doc)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_performance_doc_is_what_the_script_generates():
    out = _check(DOC)
    assert out.returncode == 0, "run `python benchmarks/perf/tables.py`:\n" + out.stdout + out.stderr


def test_every_block_names_a_results_file():
    sources = re.findall(r"<!-- table: (\S+) -->", DOC.read_text(encoding="utf-8"))
    assert sources, "docs/performance.md has no generated tables"
    assert len(sources) == DOC.read_text(encoding="utf-8").count("<!-- /table -->")
    missing = [s for s in sources if not (RESULTS / s).is_file()]
    assert not missing, missing


def test_the_check_names_a_block_that_differs(tmp_path):
    text = DOC.read_text(encoding="utf-8")
    m = re.search(r"<!-- table: (\S+) -->\n", text)
    assert m is not None
    edited = text[: m.end()] + "| a hand-edited row |\n" + text[m.end() :]
    doc = tmp_path / "performance.md"
    doc.write_text(edited, encoding="utf-8")
    out = _check(doc)
    assert out.returncode == 1
    assert m.group(1) in out.stderr
    assert doc.read_text(encoding="utf-8") == edited  # --check changes nothing
