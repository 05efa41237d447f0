"""The command line's parser (every command and its flags) and `main`, the `raysampler` entry point."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass
from .checks import cmd_compare, cmd_evaluate, cmd_loo, cmd_ppc, cmd_predict, cmd_r2
from .output import draws_arg
from .runs import (
    cmd_cancel,
    cmd_delete,
    cmd_draws,
    cmd_ledger,
    cmd_models,
    cmd_resume,
    cmd_status,
    cmd_submit,
    cmd_summary,
    cmd_upload,
)
from .serve import cmd_audit, cmd_demo, cmd_serve, cmd_site_identity

#: the help's first line
DESCRIPTION = "`raysampler` command line: serve the REST API, submit runs and look at them."


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="raysampler", description=DESCRIPTION)
    sub = ap.add_subparsers(dest="command", required=True)

    def client_cmd(name: str, help: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help)
        p.add_argument("--url", default=None, help="service URL ($RAYSAMPLER_URL, default http://127.0.0.1:8000)")
        p.add_argument("--api-key", default=None, help="API key ($RAYSAMPLER_API_KEY)")
        p.add_argument("--format", choices=["table", "json"], default="table")
        return p

    s = sub.add_parser("serve", help="run the REST service (uvicorn, local Ray, SQLite or PostgreSQL)")
    s.add_argument("--host", help="bind address ($RAYSAMPLER_HOST, default 127.0.0.1)")
    s.add_argument("--port", type=int, help="port ($RAYSAMPLER_PORT, default 8000)")
    s.add_argument("--data-dir", help="state directory ($RAYSAMPLER_DATA_DIR, default ~/.raysampler)")
    s.add_argument(
        "--ray-address",
        help="Ray cluster to join ($RAYSAMPLER_RAY_ADDRESS or $RAY_ADDRESS; 'auto': the one `ray start` began here); "
        "default: a private local Ray",
    )
    s.add_argument("--executor", choices=["ray", "local"], help="$RAYSAMPLER_EXECUTOR, default ray")
    s.add_argument("--max-concurrent-runs", type=int, help="$RAYSAMPLER_MAX_CONCURRENT_RUNS, default 1")
    s.add_argument(
        "--database-url",
        help="run records: postgresql://user:password@host:5432/db (replicas share it) or sqlite:///path "
        "($RAYSAMPLER_DATABASE_URL, default SQLite in the data dir; prefer the variable for a password)",
    )
    s.add_argument(
        "--storage-url",
        help="draw files, checkpoints and uploads: s3://bucket/prefix/ (or gs://, abfs://, a path) "
        "($RAYSAMPLER_STORAGE_URL, default the data dir)",
    )
    s.add_argument("--ssl-certfile", help="serve HTTPS with this PEM certificate ($RAYSAMPLER_SSL_CERTFILE)")
    s.add_argument("--ssl-keyfile", help="the certificate's PEM private key ($RAYSAMPLER_SSL_KEYFILE)")
    s.add_argument(
        "--forwarded-allow-ips",
        help="reverse proxies whose X-Forwarded-For/-Proto to trust, comma-separated or * "
        "($RAYSAMPLER_FORWARDED_ALLOW_IPS, default 127.0.0.1,::1)",
    )
    s.add_argument("--log-level", default="warning")
    s.add_argument("--format", choices=["table", "json"], default="table")
    s.set_defaults(fn=cmd_serve)

    p = client_cmd("submit", "submit a run spec (JSON or YAML file, '-' for stdin)")
    p.add_argument("spec")
    p.add_argument("--wait", action="store_true", help="wait for the run to end (progress bar)")
    p.add_argument("--name", default=None, help="a name to find the run by (status --name)")
    p.add_argument("--tag", action="append", metavar="KEY=VALUE", help="a label to find the run by (repeatable)")
    p.add_argument(
        "--secure-sums",
        action="store_true",
        help="the sites send their terms of the coordinator's sums masked (sets the spec's secure_sums)",
    )
    p.add_argument("--dp-epsilon", type=float, default=None, help="DP mode: ε per site over the run (default 1)")
    p.add_argument("--dp-delta", type=float, default=None, help="DP mode: δ per site (default 1e-5)")
    p.add_argument("--dp-clip", type=float, default=None, help="DP mode: per-example gradient clip norm C (default 1)")
    p.add_argument(
        "--dp-clip-rule", default=None, help="DP mode: 'gradient' (default) or 'features' (logistic regression)"
    )
    p.set_defaults(fn=cmd_submit)
    p = client_cmd("status", "a run's status (ID or 'latest'), or the recent runs")
    p.add_argument("id", nargs="?")
    p.add_argument("--limit", type=int, default=20)
    p.add_argument("--name", default=None, help="only runs of this name (without ID)")
    p.add_argument("--tag", action="append", metavar="KEY=VALUE", help="only runs with this tag (repeatable)")
    p.set_defaults(fn=cmd_status)
    p = client_cmd("draws", "print a run's draws (index chain values...)")
    p.add_argument("id", help="run ID, or 'latest' for the newest run")
    p.add_argument("--follow", action="store_true", help="keep printing new draws until the run ends")
    p.add_argument("--start", type=int, default=0, help="line offset to start from")
    p.set_defaults(fn=cmd_draws)
    p = client_cmd("cancel", "cancel a run (stored draws are kept)")
    p.add_argument("id", help="run ID, or 'latest' for the newest run")
    p.set_defaults(fn=cmd_cancel)
    p = client_cmd("resume", "continue a FAILED or CANCELLED run from its checkpoint")
    p.add_argument("id", help="run ID, or 'latest' for the newest run")
    p.set_defaults(fn=cmd_resume)
    p = client_cmd("delete", "delete a finished run: its record, events and draws")
    p.add_argument("id", help="run ID, or 'latest' for the newest run")
    p.set_defaults(fn=cmd_delete)
    p = client_cmd("summary", "the fit as brms prints it (--table: per coordinate) of the stored draws")
    p.add_argument("id", help="run ID, or 'latest' for the newest run")
    p.add_argument("--ci-prob", type=float, default=None, help="the interval (default 0.95; 0.94 with --table)")
    p.add_argument("--table", action="store_true", help="every coordinate's mean, sd, HDI, ESS, R-hat and MCSE")
    p.set_defaults(fn=cmd_summary)
    p = client_cmd("ledger", "a run's release ledger: every message each site sent, by kind (masked, sealed, plain)")
    p.add_argument("id", help="run ID, or 'latest' for the newest run")
    p.add_argument("--site", default=None, help="only this site's shards (a site label, or shard-<i>)")
    p.set_defaults(fn=cmd_ledger)
    p = client_cmd("upload", "upload a data set (.npz, .csv, .parquet)")
    p.add_argument("file")
    p.add_argument("--y-column", default="y")
    p.add_argument("--x-columns", default=None, help="comma-separated feature columns (default: all others)")
    p.add_argument("--name", default=None)
    p.set_defaults(fn=cmd_upload)
    p = client_cmd("models", "the model families runs may name, with their parameters")
    p.set_defaults(fn=cmd_models)

    p = client_cmd("loo", "PSIS-LOO of a run, computed where its rows are")
    p.add_argument("id", help="run ID, or 'latest' for the newest run")
    p.add_argument("--draws", type=draws_arg, default=1000, help="at most this many draws (thinned), or 'all'")
    p.add_argument(
        "--moment-match", action="store_true", help="improve the rows with Pareto k >= 0.7 by moment matching"
    )
    p.set_defaults(fn=cmd_loo)
    p = client_cmd("r2", "the Bayesian R2 of a run (brms' bayes_R2), computed where its rows are")
    p.add_argument("id", help="run ID, or 'latest' for the newest run")
    p.add_argument("--draws", type=draws_arg, default=1000, help="at most this many draws (thinned), or 'all'")
    p.set_defaults(fn=cmd_r2)
    p = client_cmd("compare", "compare runs fitted on the same rows by PSIS-LOO")
    p.add_argument("ids", nargs="+", metavar="ID", help="run IDs ('latest' for the newest run)")
    p.add_argument("--draws", type=draws_arg, default=1000, help="at most this many draws (thinned), or 'all'")
    p.add_argument(
        "--method", choices=["pseudo-bma", "stacking"], default="pseudo-bma", help="how the models are weighed"
    )
    p.set_defaults(fn=cmd_compare)
    p = client_cmd("evaluate", "held-out metrics of a run (accuracy, NLL, Brier, ECE / RMSE, CRPS, coverage)")
    p.add_argument("id", help="run ID, or 'latest' for the newest run")
    p.add_argument("--dataset-id", default=None, help="an uploaded data set")
    p.add_argument("--data", default=None, help='a data reference as JSON, e.g. {"shards": [...], "y_column": "y"}')
    p.add_argument("--draws", type=draws_arg, default=1000)
    p.add_argument("--bins", type=int, default=10, help="confidence bins of the ECE")
    p.set_defaults(fn=cmd_evaluate)
    p = client_cmd("predict", "the posterior predictive at the rows of an uploaded data set")
    p.add_argument("id", help="run ID, or 'latest' for the newest run")
    p.add_argument("--dataset-id", required=True)
    p.add_argument(
        "--kind",
        choices=["mean", "interval", "epred", "linpred", "predict", "draws"],
        default="mean",
        help="mean, interval, or per draw: epred (E[y|x]), linpred (linear predictor), predict (= draws: y)",
    )
    p.add_argument("--draws", type=draws_arg, default=1000)
    p.set_defaults(fn=cmd_predict)
    p = client_cmd("ppc", "a posterior predictive check of a run, computed where its rows are")
    p.add_argument("id", help="run ID, or 'latest' for the newest run")
    p.add_argument(
        "--kind", choices=["dens", "hist", "stat"], default="dens", help="density overlay, histograms, a statistic"
    )
    p.add_argument(
        "--stat",
        default="mean",
        help="the statistic of --kind stat: mean, sd, var, min, max, prop_zero, median, q5, q10, q25, q75, q90, q95",
    )
    p.add_argument(
        "--draws", type=draws_arg, default=None, help="replicated data sets (default 10, 1000 for stat), or 'all'"
    )
    p.add_argument("--bins", type=int, default=None, help="bins of --kind hist (default 30)")
    p.add_argument("--seed", type=int, default=0, help="seed of the replicated data")
    p.add_argument("--plot", default=None, metavar="FILE", help="also draw it into FILE (.png, .pdf, .svg)")
    p.add_argument(
        "--group", default=None, metavar="COLUMN", help="--kind stat per label of this column of the data (grouped)"
    )
    p.set_defaults(fn=cmd_ppc)
    p = sub.add_parser("audit", help="print the service's audit log (<data dir>/audit.log and its rotated files)")
    p.add_argument("--data-dir", help="the service's data directory ($RAYSAMPLER_DATA_DIR, default ~/.raysampler)")
    p.add_argument("--tenant", help="only this tenant's records")
    p.add_argument("--since", help="only records since: a duration back from now (30m, 1h, 2d) or an ISO time")
    p.add_argument(
        "--action",
        help="only this action: submit, cancel, resume, delete_run, upload_dataset, delete_dataset, request",
    )
    p.add_argument("--format", choices=["table", "json"], default="table")
    p.set_defaults(fn=cmd_audit)
    p = sub.add_parser(
        "site-identity", help="this site's identity key, for the other sites to pin (RAYSAMPLER_SITE_PEERS)"
    )
    p.add_argument("--site", required=True, help="the site label (its key file, where no RAYSAMPLER_SITE_SECRET)")
    p.add_argument("--format", choices=["table", "json"], default="table")
    p.set_defaults(fn=cmd_site_identity)
    p = sub.add_parser("demo", help="start a local service, run DG-LMC on breast_cancer through the SDK, summarise")
    p.add_argument("--format", choices=["table", "json"], default="table")
    p.set_defaults(fn=cmd_demo)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from ..client import APIError
    from ..extras import MissingExtraError, explain

    try:
        code: int = args.fn(args)
        return code
    except APIError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as exc:  # `raysampler serve` where only the client is installed: name the extra
        error = explain(exc, f"`raysampler {args.command}`")
        if not isinstance(error, MissingExtraError):
            raise
        print(f"error: {error}", file=sys.stderr)
        return 2
    except LookupError as exc:  # "latest" with no runs yet
        print(f"error: {exc.args[0] if exc.args else exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the reader went away (`raysampler draws ID | head`): stop quietly, as on SIGPIPE
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # Python's flush of stdout at exit would complain again
        return 128 + 13
