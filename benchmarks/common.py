"""Shared helpers of the benchmark scripts: starting Ray, reading a run's statistics, tables and JSON output.

Not a benchmark itself; `rounds.py` and `ess.py` import it (run them as `python benchmarks/<name>.py`, which
puts this folder on `sys.path`). Nothing here is shipped to Ray workers, so it needs no import on their side.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

RESULTS_DIR = Path(__file__).resolve().parent / "results"
REPO_DIR = Path(__file__).resolve().parents[1]

# arviz-base warns on every Result.to_arviz() about our attrs; it is noise in a benchmark log.
warnings.filterwarnings("ignore", message="Found groups in `attrs`")


# --------------------------------------------------------------------------------------------- Ray


def start_ray(object_store_mb: int, num_cpus: int = 2) -> Any:
    """Start a private local Ray (own temp dir, no dashboard, no token auth) and return the `ray` module.

    The temp dir keeps this cluster apart from any other Ray running on the machine (tests, other users).
    """
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import ray

    if ray.is_initialized():
        return ray
    tmp = tempfile.mkdtemp(prefix="rs-bench-ray-")
    ray.init(
        num_cpus=num_cpus,
        include_dashboard=False,
        log_to_driver=False,
        object_store_memory=int(object_store_mb) * 2**20,
        configure_logging=False,
        _temp_dir=tmp,
    )
    return ray


def stop_ray() -> None:
    import ray

    if ray.is_initialized():
        ray.shutdown()


# ---------------------------------------------------------------------------------- run statistics


def run_metrics(result: Any) -> dict[str, Any]:
    """What every benchmark reads off a `Result`: rounds/s (setup excluded), timings, ρ, N, local acceptance."""
    st = result.stats
    rounds = int(st["rounds"])
    sampling = float(st["sampling_time_s"])
    round_time = np.asarray(st.get("round_time", []), dtype=float)
    accept = result.sample_stats.get("local_accept")
    return {
        "rounds": rounds,
        "sampling_time_s": sampling,
        "setup_time_s": float(st.get("setup_time_s", float("nan"))),
        "wall_time_s": float(st.get("wall_time_s", float("nan"))),
        "rounds_per_s": rounds / sampling if sampling > 0 else float("nan"),
        "ms_per_round": 1e3 * sampling / rounds if rounds else float("nan"),
        "median_round_ms": 1e3 * float(np.median(round_time)) if round_time.size else float("nan"),
        "rho": _floats(st.get("rho")),
        "N": [int(v) for v in np.asarray(st.get("N", []))],
        "worker_compute_s": _floats(st.get("worker_compute_s")),
        "idle_fraction": _floats(st.get("idle_fraction")),
        "local_accept": float(np.mean(accept)) if accept is not None and np.size(accept) else None,
        "local_kernel": result.info.get("setup", {}).get("plan", {}).get("local_kernel"),
        "transport": result.info.get("setup", {}).get("transport"),
    }


def _floats(x: Any) -> list[float] | None:
    return None if x is None else [float(v) for v in np.atleast_1d(np.asarray(x, dtype=float))]


def median(values: Iterable[float | None]) -> float:
    """Median of the finite values (NaN if there are none)."""
    vals = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    return float(np.median(vals)) if vals else float("nan")


# ---------------------------------------------------------------------------------------- output


def fmt(value: Any, digits: int = 3) -> str:
    """A table cell: floats to `digits` significant digits, None/NaN as '-', bools as PASS/FAIL."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "PASS" if value else "FAIL"
    if isinstance(value, (float, np.floating)):
        v = float(value)
        if not math.isfinite(v):
            return "-"
        if v == 0:
            return "0"
        if abs(v) >= 10**digits:
            return f"{v:.0f}"
        if abs(v) < 10 ** -(digits - 1):
            return f"{v:.{digits - 1}e}"
        return f"{v:.{max(0, digits - 1 - int(math.floor(math.log10(abs(v)))))}f}"
    if isinstance(value, (list, tuple)):
        return ",".join(fmt(v, digits) for v in value)
    return str(value)


def print_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], notes: Sequence[str] = ()) -> str:
    """Print (and return) a plain-text table with right-aligned columns, a title and footnotes."""
    cells = [[fmt(v) for v in row] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    line = "  ".join("-" * w for w in widths)
    out = [title, line, "  ".join(c.rjust(w) for c, w in zip(columns, widths)), line]
    out += ["  ".join(v.rjust(w) for v, w in zip(r, widths)) for r in cells]
    out.append(line)
    out += [f"  {n}" for n in notes]
    text = "\n".join(out)
    print(text + "\n", flush=True)
    return text


def to_jsonable(obj: Any) -> Any:
    """numpy scalars/arrays, tuples, dataclass-free containers → plain JSON types (NaN/inf → None)."""
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return to_jsonable(obj.tolist())
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        v = float(obj)
        return v if math.isfinite(v) else None
    if obj is None or isinstance(obj, str):
        return obj
    return str(obj)


def write_json(name: str, payload: dict[str, Any]) -> Path:
    """Write `payload` (plus the environment) to benchmarks/results/<name>.json and return the path."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{name}.json"
    data = {"benchmark": name, "environment": environment(), **payload}
    path.write_text(json.dumps(to_jsonable(data), indent=1) + "\n")
    print(f"results written to {path}", flush=True)
    return path


def environment() -> dict[str, Any]:
    """Versions, CPUs, BLAS and the repository state the numbers were measured with."""
    import numpy
    import scipy

    info: dict[str, Any] = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "numpy": numpy.__version__,
        "scipy": scipy.__version__,
        "argv": sys.argv,
    }
    try:
        import ray

        info["ray"] = ray.__version__
    except ImportError:
        info["ray"] = None
    try:
        from threadpoolctl import threadpool_info

        info["blas"] = [
            {k: p.get(k) for k in ("internal_api", "version", "num_threads", "architecture")} for p in threadpool_info()
        ]
    except ImportError:
        pass
    try:
        git = ["git", "-C", str(REPO_DIR)]
        info["git_commit"] = subprocess.run(
            git + ["rev-parse", "HEAD"], capture_output=True, text=True, timeout=10
        ).stdout.strip()
        info["git_dirty"] = bool(
            subprocess.run(
                git + ["status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True, timeout=10
            ).stdout.strip()
        )
    except (OSError, subprocess.SubprocessError):
        pass
    return info


def load_model_data(name: str, *, covtype_n: int | None = None) -> tuple[np.ndarray, np.ndarray, Any]:
    """(X, y, model) of a benchmark problem: gaussian_toy, breast_cancer (prior_scale=1) or covtype_like (n rows)."""
    import raysampler as rs

    if name == "gaussian_toy":
        X, y = rs.datasets.load("gaussian_toy")
        return X, y, rs.models.Gaussian(noise_cov=rs.datasets.gaussian_toy_noise_cov(2).tolist())
    if name == "breast_cancer":
        X, y = rs.datasets.load("breast_cancer")
        return X, y, rs.models.LogisticRegression(prior_scale=1.0)
    if name == "covtype_like":
        kwargs = {} if covtype_n is None else {"n": int(covtype_n)}
        X, y = rs.datasets.load("covtype_like", **kwargs)
        return X, y, rs.models.LogisticRegression()
    raise ValueError(f"unknown benchmark problem {name!r}")
