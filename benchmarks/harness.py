"""The shape every benchmark script shares, and the helpers they share. Not a benchmark itself.

A script (`python benchmarks/perf/<name>.py`, `python benchmarks/papers/<name>.py`) is

    def arguments() -> argparse.ArgumentParser:      # harness.parser(__doc__, __file__) plus its own options
    def measure(args) -> harness.Report:             # runs the benchmark: the JSON payload and the tables
    def main(argv=None) -> None:
        harness.run(arguments(), measure, argv)      # parse → measure → print the tables → write the JSON

`run` prints each `Table` as markdown and writes `<results>/<report.name>.json`: {"benchmark": name,
"environment": versions, CPUs, BLAS, date, command line, git commit, **report.payload}. `<results>` is the
script's own `results/` folder (benchmarks/perf/results, benchmarks/papers/results), or `--out DIR`, which every
script takes: a smoke run with `--out /tmp/x` leaves the stored results (and the plots in docs/) alone.

The scripts import this module after `import _path` (benchmarks/perf/_path.py, benchmarks/papers/_path.py: puts
benchmarks/ on sys.path). A Ray worker that imports a script's module by name (Ray puts the script's folder on the
workers' sys.path) finds this module the same way.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

REPO_DIR = Path(__file__).resolve().parents[1]
DOCS_DIR = REPO_DIR / "docs"
#: the options `parser` adds to every script; `options(args)` leaves them out of a run's recorded settings
_HARNESS_OPTIONS = ("out", "results_dir")

# arviz-base warns on every Result.to_arviz() about our attrs; it is noise in a benchmark log.
warnings.filterwarnings("ignore", message="Found groups in `attrs`")


# ------------------------------------------------------------------------------------ the shape


@dataclass
class Table:
    """A table to print: title, column names, rows of cells (formatted by `fmt`) and footnotes."""

    title: str
    columns: Sequence[str]
    rows: Sequence[Sequence[Any]]
    notes: Sequence[str] = ()

    @classmethod
    def of(
        cls,
        title: str,
        records: Iterable[Mapping[str, Any]],
        columns: Sequence[tuple[str, str | Callable[[Mapping[str, Any]], Any]]],
        notes: Sequence[str] = (),
    ) -> Table:
        """A row per record, a column per (header, the record's key or a function of the record)."""
        rows = [[get(r) if callable(get) else r[get] for _, get in columns] for r in records]
        return cls(title, [header for header, _ in columns], rows, notes)

    def markdown(self) -> str:
        """The table as markdown, columns padded so that it reads in a terminal too."""
        columns = [c.replace("|", "\\|") for c in self.columns]
        cells = [[fmt(v).replace("|", "\\|") for v in row] for row in self.rows]
        widths = [max([len(c), 3] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]

        # the first column (a label) left-aligned, the others (numbers) right-aligned
        pads = [str.ljust] + [str.rjust] * (len(widths) - 1)
        rule = "|".join([":" + "-" * (widths[0] + 1)] + ["-" * (w + 1) + ":" for w in widths[1:]])

        def line(values: Iterable[str]) -> str:
            return "| " + " | ".join(pad(v, w) for pad, v, w in zip(pads, values, widths)) + " |"

        out = [f"### {self.title}", "", line(columns), f"|{rule}|"]
        out += [line(r) for r in cells]
        if self.notes:
            out += [""] + [f"- {n}" for n in self.notes]
        return "\n".join(out)

    def print(self) -> str:
        text = self.markdown()
        print("\n" + text + "\n", flush=True)
        return text


@dataclass
class Report:
    """What one run of a benchmark produced: the JSON file's stem (None: write nothing), its payload, its tables."""

    name: str | None
    payload: dict[str, Any] = field(default_factory=dict)
    tables: list[Table] = field(default_factory=list)


def parser(doc: str | None, script: str, ray: bool = False) -> argparse.ArgumentParser:
    """The script's argument parser: `--help` prints its docstring; adds `--out DIR` (see `results_dir`) and, for a
    script that starts a local Ray (`ray`), `--cpus` (default: this machine's CPUs; `local_ray(num_cpus=...)`)."""
    p = argparse.ArgumentParser(
        prog=f"python {Path(script).resolve().relative_to(REPO_DIR)}",
        description=doc,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        metavar="DIR",
        help="read and write results (JSON, plots) in DIR instead of the stored results/ folder and docs/",
    )
    if ray:
        p.add_argument(
            "--cpus",
            type=int,
            default=os.cpu_count() or 1,
            help="CPUs of the local Ray (default: this machine's, %(default)s)",
        )
    p.set_defaults(results_dir=Path(script).resolve().parent / "results")
    return p


def run(
    arguments: argparse.ArgumentParser,
    measure: Callable[[argparse.Namespace], Report],
    argv: Sequence[str] | None = None,
) -> Report:
    """Parse the command line, measure, print the tables, write the JSON."""
    args = arguments.parse_args(argv)
    report = measure(args)
    for table in report.tables:
        table.print()
    if report.name is not None:
        write_json(args, report.name, report.payload)
    return report


def options(args: argparse.Namespace) -> dict[str, Any]:
    """The script's own options (the harness's left out), to record as a run's settings."""
    return {k: v for k, v in vars(args).items() if k not in _HARNESS_OPTIONS}


def results_dir(args: argparse.Namespace) -> Path:
    """Where the script's JSON results are read and written: --out, else the `results/` folder beside it."""
    path = args.out if args.out is not None else args.results_dir
    path.mkdir(parents=True, exist_ok=True)
    return path


def plot_path(args: argparse.Namespace, filename: str) -> Path:
    """Where a plot goes: --out, else docs/ (the docs show it)."""
    path = args.out if args.out is not None else DOCS_DIR
    path.mkdir(parents=True, exist_ok=True)
    return path / filename


def write_json(args: argparse.Namespace, name: str, payload: dict[str, Any]) -> Path:
    """Write `payload` (plus the environment) to <results>/<name>.json and return the path."""
    path = results_dir(args) / f"{name}.json"
    data = {"benchmark": name, "environment": environment(), **payload}
    path.write_text(json.dumps(to_jsonable(data), indent=1) + "\n")
    print(f"results written to {path}", flush=True)
    return path


def pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend, or None (with a note) where matplotlib is not installed."""
    try:
        import matplotlib
    except ImportError:
        print("matplotlib is not installed (pip install -c constraints.txt -e '.[bench]'): no plot", flush=True)
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


# --------------------------------------------------------------------------------------------- Ray


@contextlib.contextmanager
def local_ray(object_store_mb: int, num_cpus: int | None = None) -> Iterator[Any]:
    """A private local Ray (own temp dir, no dashboard, no token auth) for the block; yields the `ray` module.

    `num_cpus`: the CPUs it offers (default: this machine's). The temp dir keeps this cluster apart from any other
    Ray running on the machine (tests, other users).
    """
    num_cpus = num_cpus or os.cpu_count() or 1
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import ray

    ray.init(
        num_cpus=num_cpus,
        include_dashboard=False,
        log_to_driver=False,
        object_store_memory=int(object_store_mb) * 2**20,
        configure_logging=False,
        _temp_dir=tempfile.mkdtemp(prefix="rs-bench-ray-"),
    )
    try:
        yield ray
    finally:
        ray.shutdown()


def numpyro_on_cpu(devices: int = 1) -> None:
    """NumPyro (the NUTS anchor) on this machine's CPU in float64, with `devices` XLA CPU devices (one per parallel
    chain); call before JAX starts. Where a GPU is present JAX would take it, which is another comparison."""
    import numpyro

    numpyro.set_platform("cpu")
    numpyro.set_host_device_count(devices)
    numpyro.enable_x64()


#: JAX's monitoring events of a compilation: tracing to a jaxpr, lowering to MLIR, XLA's backend compile
_COMPILE_EVENTS = (
    "/jax/core/compile/jaxpr_trace_duration",
    "/jax/core/compile/jaxpr_to_mlir_module_duration",
    "/jax/core/compile/backend_compile_duration",
)


@contextlib.contextmanager
def jax_compile_seconds() -> Iterator[list[float]]:
    """The seconds JAX spends tracing, lowering and compiling inside the block (yields a one-element list, filled
    as it runs). NumPyro compiles its sampler again on every `MCMC.run`, even after an earlier run of the same
    model and shapes, so a NUTS timing must subtract this to leave its sampling alone."""
    import jax.monitoring as mon

    total = [0.0]

    def listen(event: str, duration: float, **_: Any) -> None:
        if event in _COMPILE_EVENTS:
            total[0] += duration

    mon.register_event_duration_secs_listener(listen)
    try:
        yield total
    finally:
        mon.unregister_event_duration_listener(listen)


SITE_LABEL = "raysampler.io/site"


@contextlib.contextmanager
def site_cluster(site_cpus: Sequence[int], head_cpus: int = 0, object_store_mb: int = 200) -> Iterator[list[str]]:
    """Simulated sites on this machine for the block: a Ray cluster (`ray.cluster_utils.Cluster`) whose head offers
    `head_cpus` CPUs (the driver, hence the coordinator, runs there) and one node per entry of `site_cpus`, labelled
    raysampler.io/site=s0, s1, ... with that many CPUs; the driver is connected to it. Yields the site names."""
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": head_cpus,
            "object_store_memory": int(object_store_mb) * 2**20,
            "include_dashboard": False,
        },
    )
    sites = [f"s{i}" for i in range(len(site_cpus))]
    try:
        for site, cpus in zip(sites, site_cpus):
            cluster.add_node(num_cpus=cpus, labels={SITE_LABEL: site}, object_store_memory=int(object_store_mb) * 2**20)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)
        yield sites
    finally:
        ray.shutdown()
        cluster.shutdown()


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
        "local_kernel": result.setup.plan.local_kernel if result.setup is not None else None,
        "transport": result.setup.transport if result.setup is not None else None,
    }


def _floats(x: Any) -> list[float] | None:
    return None if x is None else [float(v) for v in np.atleast_1d(np.asarray(x, dtype=float))]


def median(values: Iterable[float | None]) -> float:
    """Median of the finite values (NaN if there are none)."""
    vals = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    return float(np.median(vals)) if vals else float("nan")


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


def to_jsonable(obj: Any) -> Any:
    """numpy scalars/arrays, tuples, paths, dataclass-free containers → plain JSON types (NaN/inf → None)."""
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


def environment() -> dict[str, Any]:
    """Versions, CPUs, BLAS, the date, the command line and the repository state the numbers were measured with."""
    import numpy
    import scipy

    info: dict[str, Any] = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,  # 1, 5, 15 min, at the end
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
