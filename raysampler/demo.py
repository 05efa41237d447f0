"""The main job, end to end, as users run it: start the service on 127.0.0.1 (local Ray, SQLite, a temporary data
directory), submit a DG-LMC run on breast_cancer (4 shards) through the SDK that samples until it has converged
(num_rounds "auto": min bulk ESS ≥ 400 and max R-hat < 1.01), print a few draws as they stream in, follow the
progress bar, then print the posterior summary and the run's statistics.

    python -m raysampler.demo [--chains auto|N] [--rounds auto|N] [--burn-in auto|N] [--keep DIR] [--format json]

Every option defaults to the service's own default: chains "auto" (16 for a run that stops on convergence), the
warm-up "auto" (it ends once the chains are warm).
"""

from __future__ import annotations

import argparse
import json
import secrets
import tempfile
import time
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from .client import Client
from .service.local import LocalService


def summary_text(table: pd.DataFrame, max_rows: int = 40) -> str:
    """The posterior summary as a table with one header row (parameter, mean, sd, HDI bounds, ESS, R-hat, MCSE)
    over its numbers and a rule under it."""
    width = max([len("parameter"), *(len(str(name)) for name in table.index)])
    shown = table.round(3).set_axis([str(name).ljust(width) for name in table.index])
    lines = shown.to_string(max_rows=max_rows).splitlines()
    header = "parameter".ljust(width) + lines[0][width:]
    return "\n".join([header, "-" * len(header), *lines[1:]])


def _num(value: Any) -> float:
    """A diagnostic as a number to print: NaN where the service reports none (null: not finite)."""
    return float("nan") if value is None else float(value)


def _auto_or_int(value: str) -> int | str:
    return value if value == "auto" else int(value)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--chains", default="auto", type=_auto_or_int, help='chains, or "auto" (the service chooses; the default)'
    )
    ap.add_argument(
        "--rounds",
        default="auto",
        type=_auto_or_int,
        help='rounds after burn-in, or "auto" (stop once converged; the default)',
    )
    ap.add_argument(
        "--burn-in", default="auto", type=_auto_or_int, help='warm-up rounds, or "auto" (until warm; the default)'
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--keep", default=None, help="data directory to keep (default: a temporary one)")
    ap.add_argument(
        "--format",
        choices=["table", "json"],
        default="table",
        help="json: no progress output, one JSON object (run, summary, rates) at the end",
    )
    args = ap.parse_args(argv)
    quiet = args.format == "json"
    say = (lambda *a, **k: None) if quiet else print

    key = secrets.token_urlsafe(24)
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = args.keep or f"{tmp}/data"
        say(f"starting the service (local Ray, data in {data_dir}) ...", flush=True)
        t0 = time.perf_counter()
        with LocalService(data_dir, keys={"demo": key}, log=f"{tmp}/server.log") as svc:
            say(
                f"service up at {svc.url} in {time.perf_counter() - t0:.1f} s; API docs {svc.url}/docs; "
                f"API key (tenant 'demo'): {key}"
            )
            with Client(svc.url, key) as client:
                spec = {
                    "model": {"family": "logistic_regression", "prior_scale": 1.0},
                    "data": {"dataset": "builtin:breast_cancer"},
                    "num_shards": 4,
                    "algorithm": {"name": "dglmc", "params": {}},
                    "chains": args.chains,
                    "num_rounds": args.rounds,
                    "burn_in": args.burn_in,
                    "seed": args.seed,
                }
                run = client.submit(spec)
                rounds = "until converged" if args.rounds == "auto" else f"{args.rounds} rounds"
                say(
                    f"submitted {run.id}: DG-LMC on builtin:breast_cancer, 4 shards, chains {args.chains}, "
                    f"burn-in {args.burn_in}, then {rounds}"
                )
                shown = 0
                for batch in run.stream_draws(follow=True):  # the first draws, as soon as they are stored
                    for k in range(min(3 - shown, len(batch))):
                        say(
                            f"  streamed draw {batch.index[k]} chain {batch.chain[k]}: "
                            + " ".join(f"{v:+.3f}" for v in batch.values[k, :6])
                            + " ..."
                        )
                        shown += 1
                    if shown >= 3:
                        break
                info = run.wait(progress=not quiet)
                say(f"run {run.id}: {info['status']}" + (f" ({info['error']})" if info["error"] else ""))
                if info["status"] != "SUCCEEDED":
                    raise SystemExit(1)
                table = run.summary()
                draws = run.draws()
                timings, workers = info["timings"], info["workers"]
                ess = float(table["ess_bulk"].min())
                if quiet:
                    print(
                        json.dumps(
                            {
                                "run": info,
                                "draws_shape": list(draws.shape),
                                "min_ess_bulk": ess,
                                "ess_per_s": ess / timings["sampling_s"],
                                "summary": json.loads(table.reset_index().to_json(orient="records")),
                            }
                        )
                    )
                    return
                print(summary_text(table))
                diag: Mapping[str, Any] = info["diagnostics"] or {}
                nested, split, ess_ = (_num(diag.get(k)) for k in ("max_nested_rhat", "max_rhat", "min_ess_bulk"))
                rule = (
                    f"max nested R-hat {nested:.4f} over {diag.get('superchains')} superchains (the rule with "
                    f"{info['chains']} chains; split R-hat {split:.4f})"
                    if diag.get("max_nested_rhat") is not None
                    else f"max R-hat {split:.4f}"
                )
                print(
                    f"\n{rule}, min bulk ESS {ess_:.0f} after {info['progress']['rounds_done']} rounds"
                    + "".join(f"\nwarning: {w}" for w in info["warnings"])
                )
                print(
                    f"{draws.shape[0]} chains x {draws.shape[1]} draws x {draws.shape[2]} params fetched; "
                    f"min bulk ESS {ess:.0f} in {timings['sampling_s']:.1f} s of sampling = "
                    f"{ess / timings['sampling_s']:.0f} ESS/s; setup {timings['setup_s']:.1f} s"
                )
                print(
                    "per worker: "
                    + "; ".join(
                        f"shard {w['shard']}: N={w['local_steps']}, tau={1e3 * (w['tau_s'] or np.nan):.3f} ms, "
                        f"idle {w['idle_fraction']:.2f}"
                        for w in workers
                    )
                )


if __name__ == "__main__":
    main()
