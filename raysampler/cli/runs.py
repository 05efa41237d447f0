"""The run commands: submit, status, draws, cancel, resume, delete, summary, ledger, upload and models."""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass
from .output import connect, dp_body, load_spec, parse_tags, print_run


def cmd_submit(args: argparse.Namespace) -> int:
    with connect(args) as c:
        secure = True if args.secure_sums else None  # the spec's own secure_sums stands unless the flag is given
        run = c.submit(
            load_spec(args.spec), name=args.name, tags=parse_tags(args.tag), secure_sums=secure, privacy=dp_body(args)
        )
        info = run.wait(progress=args.format != "json") if args.wait else run.info()
        print_run(info, args.format)
        return 0 if info["status"] != "FAILED" else 1


def cmd_status(args: argparse.Namespace) -> int:
    with connect(args) as c:
        if args.id is None:
            runs = list(itertools.islice(c.runs(name=args.name, tags=parse_tags(args.tag)), args.limit))
            if args.format == "json":
                print(json.dumps(runs))
            for r in runs if args.format != "json" else []:
                print_run(r, "table")
            return 0
        print_run(c.run(args.id).info(), args.format)
        return 0


def cmd_draws(args: argparse.Namespace) -> int:
    """Print draw lines; the table starts with a header line naming the parameters (its columns as wide as the
    names). JSON lines are the service's own line format (NaN/±inf as strings)."""
    from ..wire import draw_line

    widths: list[int] | None = None

    def header(names: Sequence[str] | None, d: int) -> list[int]:
        labels = list(names) if names is not None and len(names) == d else [f"θ[{j}]" for j in range(d)]
        out = [max(7, len(n)) for n in labels]
        print(f"{'draw':>7} {'chain':>5}  " + " ".join(f"{n:>{w}}" for n, w in zip(labels, out)))
        return out

    with connect(args) as c:
        run = c.run(args.id)
        for batch in run.stream_draws(start=args.start, follow=args.follow):
            if args.format != "json" and widths is None:
                widths = header(run.header.param_names if run.header else None, batch.values.shape[1])
            for k in range(len(batch)):
                vals = batch.values[k]
                if args.format == "json":
                    print(draw_line(batch.offset + k, int(batch.chain[k]), int(batch.index[k]), vals), end="")
                else:
                    cells = " ".join(f"{v:>+{w}.4f}" for v, w in zip(vals, widths or ()))
                    print(f"{int(batch.index[k]):>7} {int(batch.chain[k]):>5}  {cells}")
            sys.stdout.flush()
        if args.format != "json" and widths is None and run.header is not None and run.header.dim:
            header(run.header.param_names, run.header.dim)  # no draws (yet): the header alone
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    with connect(args) as c:
        print_run(c.run(args.id).cancel(), args.format)
    return 0


def cmd_resume(args: argparse.Namespace) -> int:
    with connect(args) as c:
        print_run(c.run(args.id).resume(), args.format)
    return 0


def cmd_delete(args: argparse.Namespace) -> int:
    with connect(args) as c:
        run = c.run(args.id)
        run.delete()
    print(json.dumps({"id": run.id, "deleted": True}) if args.format == "json" else f"{run.id}  deleted")
    return 0


def cmd_summary(args: argparse.Namespace) -> int:
    """The fit as brms prints it (default), or with --table (or --format json) the summary per coordinate."""
    with connect(args) as c:
        run = c.run(args.id)
        if args.format != "json" and not args.table:
            print(run.fit_summary(prob=0.95 if args.ci_prob is None else args.ci_prob))
            return 0
        table = run.summary(ci_prob=0.94 if args.ci_prob is None else args.ci_prob)
    if args.format == "json":
        print(table.reset_index().to_json(orient="records"))
    else:
        print(table.round(3).to_string())
    return 0


def cmd_ledger(args: argparse.Namespace) -> int:
    """A run's release ledger: per shard (of --site only, where given), every kind of message its site sent, with
    how many, their bytes and whether they went masked, sealed or plain."""
    with connect(args) as c:
        ledger = c.run(args.id).ledger(site=args.site)
    if args.format == "json":
        print(json.dumps(ledger))
        return 0
    for entry in ledger["shards"]:
        site = entry["site"] or "(no site)"
        print(
            f"shard {entry['shard']}  site {site}  {entry['messages']} messages, {entry['bytes']} bytes "
            f"(masked {entry['masked_bytes']}, sealed {entry['sealed_bytes']}, plain {entry['plain_bytes']})"
        )
        print(f"  {'quantity':<28} {'shape':<12} {'messages':>9} {'bytes':>12}  mode")
        for r in entry["releases"]:
            shape = "(" + ", ".join(str(v) for v in r["shape"]) + ")"
            print(f"  {r['quantity']:<28} {shape:<12} {r['messages']:>9} {r['bytes']:>12}  {r['mode']}")
    return 0


def cmd_upload(args: argparse.Namespace) -> int:
    with connect(args) as c:
        cols = [s for s in args.x_columns.split(",") if s] if args.x_columns else None
        info = c.upload_file(args.file, y_column=args.y_column, x_columns=cols, name=args.name)
    print(json.dumps(info) if args.format == "json" else f"{info['id']}  n={info['n']} d={info['d']}  {info['name']}")
    return 0


def cmd_models(args: argparse.Namespace) -> int:
    """The service's model families (built-in and registered packages) and the parameters each takes."""
    with connect(args) as c:
        families = c.models()
    if args.format == "json":
        print(json.dumps(families))
        return 0
    for f in families:
        where = "built-in" if f["builtin"] else f"from {f['distribution']}"
        params = ", ".join(sorted(f["parameters"].get("properties", {})))
        print(f"{f['name']}  ({where})  {f['description']}\n    parameters: {params or '-'}")
    return 0
