"""The checks of a fit: r2, loo, compare, evaluate, predict and ppc, each computed where the run's rows are."""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    pass
from .output import connect, number, row_place


def cmd_r2(args: argparse.Namespace) -> int:
    """The Bayesian R² of a run (brms' bayes_R2), computed where its rows are."""
    with connect(args) as c:
        r2 = c.run(args.id).bayes_r2(draws=args.draws)
    if args.format == "json":
        print(json.dumps(r2))
        return 0
    print(
        f"{r2['run_id']}  Bayesian R2 {number(r2['estimate'])} (Est.Error {number(r2['est_error'])})  "
        f"95% [{number(r2['lower'])}, {number(r2['upper'])}]  ({r2['n_samples']} draws)"
    )
    return 0


def cmd_loo(args: argparse.Namespace) -> int:
    """PSIS-LOO of a run, computed where its rows are."""
    with connect(args) as c:
        lo = c.run(args.id).loo(draws=args.draws, moment_match=args.moment_match)
    if args.format == "json":
        print(json.dumps(lo))
        return 0
    print(
        f"{lo['run_id']}  elpd_loo {number(lo['elpd'])} (SE {number(lo['se'])})  p_loo {number(lo['p_loo'])}  "
        f"({lo['n_data_points']} rows, {lo['n_samples']} draws)"
    )
    print(
        f"  flat (log-lik span < {lo['flat_span']:g}, uniform weights): {lo['k_flat']}   "
        f"Pareto k < 0.7: {lo['k_ok']}   k >= 0.7: {lo['k_high']}"
    )
    for r in lo["high_k_rows"][:20]:
        print(f"  high k: {row_place(r)}")
    warned = lo.get("warning_rows") or []
    if lo["warning"] and warned:
        shown = ", ".join(f"{row_place(w['row'])} (k {number(w['k'])})" for w in warned[:10])
        more = f" and {len(warned) - 10} more" if len(warned) > 10 else ""
        print(f"  warning: {len(warned)} rows with Pareto k > {lo['good_k']:.2f}: {shown}{more}")
    matched = lo.get("moment_matched")
    if matched is not None:
        print(f"  moment matching: {len(matched)} rows, {sum(1 for m in matched if m['used'])} improved")
        for m in matched[:20]:
            print(
                f"    {row_place(m['row'])}: k {number(m['k_psis'])} -> {number(m['k_after'])}, elpd_i "
                f"{number(m['elpd_psis'], 4)} -> {number(m['elpd_after'], 4)} (MCSE {number(m['mcse_after'], 4)}), "
                f"{m['maps']} maps{'' if m['used'] else ', PSIS kept'}"
            )
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    """Runs fitted on the same rows, best first by PSIS-LOO elpd."""
    with connect(args) as c:
        table = c.compare(args.ids, draws=args.draws, method=args.method)
    if args.format == "json":
        print(table.reset_index(names="run_id").to_json(orient="records"))
    else:
        print(table.round(3).to_string())
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    """Held-out metrics of a run on an uploaded data set or a data reference (JSON, as a run spec's `data`)."""
    if (args.dataset_id is None) == (args.data is None):
        raise SystemExit("error: give --dataset-id or --data (a data reference, JSON)")
    data = {"dataset_id": args.dataset_id} if args.dataset_id else json.loads(args.data)
    with connect(args) as c:
        m: Mapping[str, Any] = c.run(args.id).evaluate(data, draws=args.draws, bins=args.bins)
    if args.format == "json":
        print(json.dumps(m))
        return 0
    keys = ("accuracy", "nll", "brier", "ece") if m["kind"] == "classification" else ("rmse", "nll", "crps")
    line = "  ".join(f"{k} {m[k]:.4f}" for k in keys)
    if m["kind"] == "regression":
        line += f"  coverage 50% {m['coverage_50']:.3f}  90% {m['coverage_90']:.3f}"
    print(f"{m['run_id']}  {m['kind']} on {m['n']} rows: {line}")
    for b in m.get("reliability") or []:
        if b["count"]:
            print(
                f"  [{b['lo']:.1f}, {b['hi']:.1f})  n={b['count']:<6} confidence {b['confidence']:.3f}  "
                f"accuracy {b['accuracy']:.3f}"
            )
    return 0


def cmd_predict(args: argparse.Namespace) -> int:
    """The posterior predictive at the rows of an uploaded data set, one line per row."""
    import numpy as np

    with connect(args) as c:
        values = c.run(args.id).predict(dataset_id=args.dataset_id, kind=args.kind, draws=args.draws)
    rows = np.moveaxis(values, 0, 1) if args.kind in ("draws", "epred", "linpred", "predict") else values  # per row
    for i, v in enumerate(rows):
        print(json.dumps({"row": i, "value": v.tolist()}) if args.format == "json" else f"{i}\t{v}")
    return 0


def cmd_ppc(args: argparse.Namespace) -> int:
    """A posterior predictive check of a run, computed where its rows are: printed, as JSON, or drawn (--plot)."""

    import numpy as np

    from ..predictive import PpcHistogram, PpcStat, PpcStatGrouped

    with connect(args) as c:
        run = c.run(args.id)
        check = run.pp_check(args.kind, args.stat, draws=args.draws, bins=args.bins, seed=args.seed, group=args.group)
    if args.plot:
        try:
            import matplotlib
        except ImportError:
            raise SystemExit('error: --plot needs matplotlib: pip install "raysampler[plot]"') from None
        matplotlib.use("Agg")  # a file, never a window
        import matplotlib.pyplot as plt

        check.plot()
        plt.savefig(args.plot, bbox_inches="tight")
    fields = {k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in dataclasses.asdict(check).items()}
    if args.format == "json":
        extra = {"p_value": check.p_value} if isinstance(check, PpcStat) else {}
        if isinstance(check, PpcStatGrouped):
            extra = {"p_values": check.p_values.tolist()}
        print(json.dumps({"run_id": run.id, **fields, **extra}))
        return 0
    if isinstance(check, PpcStatGrouped):
        print(f"{run.id}  T = {check.stat} of {check.response} by {check.group}: {len(check.labels)} groups")
        print(check.table().to_string(float_format=lambda v: f"{v:.4g}"))
        return 0
    S = len(fields["replicated"])
    head = f"{run.id}  {check.n} rows, {S} replicated data sets"
    if isinstance(check, PpcStat):
        rep = np.asarray(check.replicated)
        lo, mid, hi = np.nanquantile(rep, [0.05, 0.5, 0.95])
        print(
            f"{head}\n  T = {check.stat}:  T(y) {check.observed:.4g}   T(y_rep) median {mid:.4g}, 90% [{lo:.4g}, "
            f"{hi:.4g}]   p = P(T(y_rep) >= T(y)) = {check.p_value:.3f}"
        )
    elif isinstance(check, PpcHistogram):
        print(f"{head}\n  {'bin':>24}  {'y':>7}  y_rep median [5%, 95%]")
        q = np.quantile(np.asarray(check.replicated), [0.05, 0.5, 0.95], axis=0)
        for b, count in enumerate(np.asarray(check.observed).tolist()):
            edge = f"[{check.edges[b]:.4g}, {check.edges[b + 1]:.4g})"
            print(f"  {edge:>24}  {count:>7}  {q[1, b]:g} [{q[0, b]:g}, {q[2, b]:g}]")
    else:
        print(f"{head}: densities on {len(fields['grid'])} points; --plot FILE draws them, --format json gives them")
    return 0
