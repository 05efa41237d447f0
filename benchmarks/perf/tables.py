"""Write the tables of docs/performance.md from the JSON files in benchmarks/perf/results/.

A generated table sits in docs/performance.md between two marker comments that name its source:

    <!-- table: nuts.json -->
    ...the table, as this script renders it...
    <!-- /table -->

`python benchmarks/perf/tables.py` replaces every block's content with the table rendered from that JSON file;
`--check` changes nothing and exits 1, naming the blocks whose content differs (tests/test_performance_tables.py
runs it). The text around the blocks is the doc's own and is left as it is.

Rendering: a JSON file whose benchmark stored its own markdown (a `table` field, written by `harness.Table`) is shown
as stored; the others are rendered here from their numbers by a function per benchmark (RENDERERS, keyed by the
JSON's "benchmark" field). Every cell comes from the JSON; nothing is typed in.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import _path  # noqa: F401  (puts benchmarks/ on sys.path for harness)
from harness import REPO_DIR, Table, fmt

RESULTS = Path(__file__).resolve().parent / "results"
DOC = REPO_DIR / "docs" / "performance.md"

BLOCK = re.compile(r"(<!-- table: (?P<source>[^\s>]+) -->\n)(?P<body>.*?)(<!-- /table -->)", re.DOTALL)

Record = Mapping[str, Any]


# ----------------------------------------------------------------------------------------- helpers


def _range(lo: float | None, hi: float | None, digits: int = 3) -> str:
    return f"{fmt(lo, digits)}–{fmt(hi, digits)}"


def _ratio(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{fmt(value, digits)}×"


def _median(values: Iterable[float]) -> float:
    vals = sorted(values)
    n = len(vals)
    return vals[n // 2] if n % 2 else 0.5 * (vals[n // 2 - 1] + vals[n // 2])


def _command(data: Record) -> str:
    """The command line the results were measured with, as the environment recorded it."""
    argv = data.get("environment", {}).get("argv") or []
    if not argv:
        return ""
    script = Path(argv[0])
    parts = script.parts
    name = "/".join(parts[parts.index("benchmarks") :]) if "benchmarks" in parts else script.name
    return " ".join(["python", name, *argv[1:]])


def _notes(data: Record, *extra: str) -> list[str]:
    env = data.get("environment", {})
    notes = list(extra)
    if env.get("date"):
        notes.append(f"measured {env['date']}, {env.get('cpu_count')} CPUs: `{_command(data)}`")
    return notes


# --------------------------------------------------------------------------------------- renderers


def transports(data: Record) -> list[Table]:
    rows = [r for r in data["summary"] if r["setup"] == "b=4 on 2" and r["payload"] == "dglmc"]
    rows = sorted((r for r in rows if r["candidate"] != "in-process"), key=lambda r: r["median_overhead_us"])
    return [
        Table.of(
            "Transports: median overhead per round above in-process (b = 4 shards on 2 workers, DG-LMC's message)",
            rows,
            [
                ("transport", "candidate"),
                ("median overhead µs/round", lambda r: round(r["median_overhead_us"])),
                ("mean overhead µs/round", lambda r: round(r["overhead_us"])),
                ("median round µs", lambda r: round(r["median_round_us"])),
                ("repeats", "repeats"),
            ],
            _notes(data),
        )
    ]


def hot_path(data: Record) -> list[Table]:
    settings = data["settings"]

    def case(r: Record) -> str:
        if r["problem"] == "covtype_like":
            return f"covtype_like n = {settings['covtype_n']}, {settings['covtype_rounds']} rounds"
        return f"{r['problem']}, {settings['rounds']} rounds"

    return [
        Table.of(
            "The two same-node defaults (default DG-LMC, b = 4; medians of the repeats)",
            data["summary"],
            [
                ("case", case),
                ("variant", "variant"),
                ("sampling s", "sampling_time_s"),
                ("median round ms", "median_round_ms"),
                ("ESS/s", "ess_per_s"),
                ("time / both off", "time_vs_both_off"),
                ("per repeat", lambda r: fmt(r["time_vs_both_off_per_repeat"]).replace(",", ", ")),
                ("max error sd", "max_err_sd"),
            ],
            _notes(data, f"{settings['repeats']} repeats, variants interleaved"),
        )
    ]


def rounds(data: Record) -> list[Table]:
    n_local = data["settings"]["n_local"]
    return [
        Table.of(
            "Rounds per second, in-process and on Ray (b = 4, medians of the repeats, setup excluded)",
            data["summary"],
            [
                ("case", lambda r: f"{r['problem']}, K = {r['chains']}"),
                ("kernel", "kernel"),
                ("N", lambda r: n_local[r["problem"]]),
                ("local rounds/s", "local_rounds_per_s"),
                ("ray rounds/s", "ray_rounds_per_s"),
                ("ray/local", "speedup"),
                ("socket floor ms", "floor_socket_ms"),
            ],
            _notes(data, f"{data['settings']['repeats']} interleaved repeats"),
        )
    ]


def ess(data: Record) -> list[Table]:
    """ess.json (variants) and ess_algorithms*.json (every algorithm): a row per run."""
    summary = data["summary"]
    by_algorithm = any(r.get("algorithm") for r in summary)
    first = [("algorithm", lambda r: f"`{r['algorithm']}`")] if by_algorithm else [("variant", "variant")]
    columns: list[tuple[str, str | Callable[[Record], Any]]] = [
        ("problem", lambda r: f"{r['problem']}, b = 4 {r['strategy']}"),
        ("chains", "chains"),
        *first,
        ("executor", "executor"),
        ("ρ", lambda r: fmt(r["rho"], 2)),
        ("rounds/s", "rounds_per_s"),
        ("min ESS", lambda r: round(r["min_ess"])),
        ("ESS/s", "ess_per_s"),
        ("max |Δmean|/sd", "max_err_sd"),
        ("sd ratio", lambda r: _range(r["sd_ratio_min"], r["sd_ratio_max"])),
        ("max z", "max_z"),
    ]
    executors = list(dict.fromkeys(r["executor"] for r in summary))
    if by_algorithm and len(executors) > 1:
        return [_algorithms_side_by_side(data, executors)]
    if by_algorithm:
        rows = sorted(summary, key=lambda r: (r["problem"], -r["ess_per_s"]))
    else:
        rows = list(summary)
    return [
        Table.of(
            "ESS/s (min bulk ESS per second of sampling) and error against the reference, in reference sds",
            rows,
            columns,
            _notes(data),
        )
    ]


def _algorithms_side_by_side(data: Record, executors: list[str]) -> Table:
    """Every algorithm once, its ESS/s on each executor side by side; min ESS and the errors are the first
    executor's run's (in the stored runs the executors' draws agree on them)."""
    runs: dict[tuple[str, str, float | None], dict[str, Record]] = {}
    for r in data["summary"]:
        runs.setdefault((r["problem"], r["algorithm"], r["rho"]), {})[r["executor"]] = r
    rows = []
    for (_problem, algorithm, rho), by in runs.items():
        first = by.get(executors[0]) or next(iter(by.values()))
        rows.append(
            [
                f"`{algorithm}`",
                fmt(rho, 2),
                *[by[e]["ess_per_s"] if e in by else None for e in executors],
                round(first["min_ess"]),
                first["max_err_sd"],
                _range(first["sd_ratio_min"], first["sd_ratio_max"]),
                first["max_z"],
            ]
        )
    rows.sort(key=lambda row: -max((v for v in row[2 : 2 + len(executors)] if v is not None), default=0.0))
    problems = ", ".join(dict.fromkeys(f"{r['problem']} ({r['chains']} chains)" for r in data["summary"]))
    return Table(
        f"Every algorithm with its defaults on {problems}: ESS/s per executor, error against the reference in sds",
        ["algorithm", "ρ", *[f"ESS/s {e}" for e in executors], "min ESS", "max |Δmean|/sd", "sd ratio", "max z"],
        rows,
        _notes(data, "min ESS, error, sd ratio and max z: from the first executor's run"),
    )


def hessians(data: Record) -> list[Table]:
    return [
        Table.of(
            "`agent_hessians`: per chain against batched (medians)",
            data["agent_hessians"],
            [
                ("shard", "problem"),
                ("n", "n"),
                ("d", "d"),
                ("K", "K"),
                ("per chain (before) ms", "per_chain_ms"),
                ("batched ms", "batched_ms"),
                ("before / batched", "speedup"),
                ("max relative difference", lambda r: fmt(r["max_rel_diff"], 2)),
            ],
            _notes(data),
        )
    ]


def scaling(data: Record) -> list[Table]:
    tables = []
    weak, strong = data.get("weak", []), data.get("strong", [])
    if weak and "round_ms" in weak[0]:
        base = weak[0]["rounds_per_s"]
        tables.append(
            Table.of(
                "Weak scaling with sites (median round parts, ms)",
                weak,
                [
                    ("sites", "sites"),
                    ("rows", "rows"),
                    ("rounds/s", "rounds_per_s"),
                    ("efficiency", lambda r: r["rounds_per_s"] / base),
                    ("round ms", "round_ms"),
                    ("slowest worker ms", "slowest_worker_ms"),
                    ("overhead ms", "overhead_ms"),
                    ("workers idle", lambda r: _range(min(r["idle_fraction"]), max(r["idle_fraction"]), 2)),
                ],
                _notes(data),
            )
        )
    elif weak:
        cores = data["settings"].get("cpu_count") or 1
        wbase = weak[0]["rounds_per_s"]
        sbase = strong[0]["rounds_per_s"] if strong else None
        strong_by = {r["sites"]: r for r in strong}
        tables.append(
            Table.of(
                "Scaling with sites (weak: rows per site fixed; strong: total rows fixed)",
                weak,
                [
                    ("sites", "sites"),
                    ("weak: rows", "rows"),
                    ("rounds/s", "rounds_per_s"),
                    ("efficiency", lambda r: r["rounds_per_s"] / wbase),
                    (f"ideal on {cores} cores", lambda r: min(1.0, cores / r["sites"])),
                    ("strong: rows", lambda r: strong_by[r["sites"]]["rows"] if r["sites"] in strong_by else None),
                    (
                        "strong: rounds/s",
                        lambda r: strong_by[r["sites"]]["rounds_per_s"] if r["sites"] in strong_by else None,
                    ),
                    (
                        "speed-up",
                        lambda r: strong_by[r["sites"]]["rounds_per_s"] / sbase if r["sites"] in strong_by else None,
                    ),
                ],
                _notes(data),
            )
        )
    return tables


def contention(data: Record) -> list[Table]:
    runs = data["runs"]
    base = runs[0]["period_ms"]
    return [
        Table.of(
            "k processes computing a local step in lockstep, no runtime",
            runs,
            [
                ("processes", "processes"),
                ("compute ms (mean)", "compute_mean_ms"),
                ("compute ms (max)", "compute_max_ms"),
                ("lockstep period ms", "period_ms"),
                ("efficiency ceiling", lambda r: base / r["period_ms"]),
            ],
            _notes(data),
        )
    ]


def round_cost(data: Record) -> list[Table]:
    runs = data["runs"]
    tables = []
    procs = [r for r in runs if r["section"] == "processes"]
    if procs:
        cases: dict[tuple[str, int], dict[int, list[float]]] = {}
        work: dict[tuple[str, int], int] = {}
        for r in procs:
            key = (r["data"], r["chains"])
            cases.setdefault(key, {}).setdefault(r["processes"], []).append(r["round_us"])
            work[key] = r["work"]
        counts = sorted({r["processes"] for r in procs})
        rows = []
        for key, by in cases.items():
            one = _median(by[counts[0]])
            cells: list[Any] = [key[0], key[1], work[key], round(one)]
            for p in counts[1:]:
                m = _median(by[p])
                cells.append(f"{round(m)} ({fmt(m / one)}×)")
            rows.append(cells)
        header = ["data", "chains", "element-chains", f"{counts[0]} process", *map(str, counts[1:])]
        tables.append(Table("4 shards in worker processes: median round µs (median over repeats)", header, rows))
    shards = [r for r in runs if r["section"] == "shards"]
    if shards:
        by_v: dict[str, dict[int, list[float]]] = {}
        for r in shards:
            by_v.setdefault(r["variant"], {}).setdefault(r["shards"], []).append(r["round_us"])
        counts = sorted({r["shards"] for r in shards})
        rows = []
        for variant, by in by_v.items():
            med = [_median(by[b]) for b in counts]
            rows.append([variant, *[round(m) for m in med], (med[-1] - med[0]) / (counts[-1] - counts[0])])
        header = ["variant", *[f"{b} shards" for b in counts], "per extra shard"]
        tables.append(Table("The median round against the number of shards (µs; median over repeats)", header, rows))
    for t in tables:
        t.notes = _notes(data)
    return tables


def privacy_secure(data: Record) -> list[Table]:
    runs = data["runs"]
    variants = [("plain", "plain"), ("fixed_point", "fixed point"), ("secure", "secure sums")]
    rows = []
    for key, label in variants:
        rnd = _median(r[key]["round_s"] for r in runs)
        time_ratio = _median(r[key]["round_s"] / r["plain"]["round_s"] for r in runs)
        byt = _median(r[key]["bytes_per_round"] for r in runs)
        bytes_ratio = _median(r[key]["bytes_per_round"] / r["plain"]["bytes_per_round"] for r in runs)
        trips = _median(r[key]["setup_trips"] for r in runs)
        rows.append([label, f"{fmt(1e3 * rnd)} ms", time_ratio, round(byt), bytes_ratio, round(trips)])
    executor = data["settings"].get("executor")
    algorithm = data["settings"].get("algorithm", "dglmc")
    summary = data["summary"]
    which = "" if algorithm == "dglmc" else f" {algorithm},"
    return [
        Table(
            f"Secure sums,{which} executor {executor!r} (medians over {len(runs)} repeats)",
            ["variant", "round (median)", "× plain (per repeat)", "bytes/round/site", "× plain", "set-up trips"],
            rows,
            _notes(
                data,
                f"secure draws equal the fixed-point run's bit for bit: {summary['secure_equals_fixed_point_bitwise']}",
                f"largest posterior mean difference from plain: {fmt(summary['max_mean_diff_secure_vs_plain'], 2)}",
            ),
        )
    ]


def privacy_dp(data: Record) -> list[Table]:
    return [
        Table.of(
            "Differential privacy against the non-private run (error in non-private posterior sds)",
            data["records"],
            [
                ("run", "run"),
                ("max |Δmean|/sd", "max_err_sd"),
                ("median |Δmean|/sd", "median_err_sd"),
                ("coverage", "coverage"),
                ("sd ratio", lambda r: _range(r["sd_ratio_min"], r["sd_ratio_max"])),
                ("ε spent", "epsilon_spent"),
                ("clip rate", "clip_rate"),
                ("rounds", "rounds"),
                ("min ESS", "min_ess"),
                ("s", "seconds"),
                ("stop reason", "stop_reason"),
            ],
            _notes(data),
        )
    ]


def groups(data: Record) -> list[Table | str]:
    """groups*.json: each case's table, as the benchmark stored it."""
    return [case["table"] for case in data["cases"].values()]


def service(data: Record) -> list[Table]:
    paths = ["raw NDJSON lines", "json.loads per line", "SDK run.draws() → numpy", "live"]
    live = data["live"]
    latency = data["submit_latency_ms"]
    return [
        Table(
            "Draws delivered by the REST service",
            ["path", "draws/s delivered", "lines", "seconds"],
            [
                [("live run, `follow=true`" if p == "live" else f"finished run, {p}"), *_service_row(data[p])]
                for p in paths
            ],
            _notes(
                data,
                f"the live run's sampler: {fmt(live['sampler_draws_per_s'])} draws/s; "
                f"its first batch after {fmt(live['first_batch_s'])} s",
                f"submit latency (median): `POST /v1/runs` {fmt(latency['submit'])} ms, the same validation "
                f"in-process {fmt(latency['build'])} ms, `GET /v1/health` {fmt(latency['health'])} ms",
            ),
        )
    ]


def _service_row(r: Record) -> list[Any]:
    return [round(r["draws_per_s"]), r["lines"], r["seconds"]]


RENDERERS: dict[str, Callable[[Record], list[Table] | list[Table | str]]] = {
    "transports": transports,
    "hot_path": hot_path,
    "rounds": rounds,
    "ess": ess,
    "ess_algorithms": ess,
    "hessians": hessians,
    "scaling": scaling,
    "contention": contention,
    "round_cost": round_cost,
    "privacy_secure_local": privacy_secure,
    "privacy_secure_ray": privacy_secure,
    **{f"privacy_secure_{a}_{e}": privacy_secure for a in ("fald", "qlsd", "ula") for e in ("local", "ray")},
    "privacy_dp": privacy_dp,
    "groups": groups,
    "service": service,
}


# ------------------------------------------------------------------------------------------ blocks


def _as_doc(markdown: str) -> str:
    """A table's markdown as the doc shows it: its `### title` as a bold caption (not a heading of the doc)."""
    markdown = markdown.strip()
    if not markdown.lstrip().startswith(("|", "###")):  # an older benchmark's plain-text table
        return f"```\n{markdown}\n```"
    lines = markdown.splitlines()
    if lines and lines[0].startswith("### "):
        lines[0] = f"**{lines[0][4:].strip()}**"
    return "\n".join(lines)


def render(source: str) -> str:
    """The content of the block named `source` (a file of benchmarks/perf/results/)."""
    data = json.loads((RESULTS / source).read_text(encoding="utf-8"))
    if isinstance(data.get("table"), str):
        parts = [data["table"]]
    else:
        benchmark = data.get("benchmark")
        if benchmark not in RENDERERS:
            raise KeyError(f"{source}: no stored table and no renderer for benchmark {benchmark!r}")
        parts = [t if isinstance(t, str) else t.markdown() for t in RENDERERS[benchmark](data)]
    return "\n\n".join(_as_doc(p) for p in parts)


def generate(text: str) -> tuple[str, list[str]]:
    """The doc with every block's content rendered afresh, and the sources of the blocks that changed."""
    changed: list[str] = []

    def block(m: re.Match[str]) -> str:
        body = f"\n{render(m['source'])}\n\n"
        if body != m["body"]:
            changed.append(m["source"])
        return m.group(1) + body + m.group(4)

    return BLOCK.sub(block, text), changed


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python benchmarks/perf/tables.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="change nothing; exit 1 naming the blocks that differ")
    p.add_argument("--doc", type=Path, default=DOC, help="the markdown file (default: %(default)s)")
    args = p.parse_args(argv)
    text = args.doc.read_text(encoding="utf-8")
    new, changed = generate(text)
    if args.check:
        if changed:
            print(f"{args.doc}: these tables differ from their JSON: {', '.join(changed)}", file=sys.stderr)
            print("run `python benchmarks/perf/tables.py` to rewrite them", file=sys.stderr)
            return 1
        print(f"{args.doc}: {len(BLOCK.findall(text))} generated tables are up to date")
        return 0
    if new != text:
        args.doc.write_text(new, encoding="utf-8")
    print(f"{args.doc}: {len(changed)} of {len(BLOCK.findall(text))} generated tables rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main())
