"""`raysampler` command line: serve the REST API, submit runs and look at them.

    raysampler serve [--host 127.0.0.1] [--port 8000] [--data-dir ~/.raysampler] [--ray-address ADDR]
    raysampler submit spec.json|spec.yaml [--wait]      raysampler status [ID|latest]
    raysampler draws ID [--follow] [--start K]           raysampler cancel ID | resume ID | delete ID
    raysampler summary ID                                raysampler upload FILE [--y-column y] [--x-columns a,b]
    raysampler loo ID [--draws N|all] [--moment-match]   raysampler compare ID1 ID2 [...] [--draws N|all] [--method M]
    raysampler evaluate ID --dataset-id DS | --data REF.json    raysampler predict ID --dataset-id DS [--kind K]
    raysampler demo                                      raysampler audit [--tenant T] [--since 1h] [--action A]

Client commands take --url / $RAYSAMPLER_URL and --api-key / $RAYSAMPLER_API_KEY (else the key `serve` wrote to
<data dir>/api_keys); every command takes --format table|json. Server flags have RAYSAMPLER_* equivalents.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
import secrets
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .client import Client
    from .service.settings import Settings

KEYS_FILE = "api_keys"  # = client.KEYS_FILE, not imported from there so that the CLI starts fast


def _settings(**overrides: Any) -> Settings:
    from .service.settings import Settings

    return Settings(**{k: v for k, v in overrides.items() if v is not None})


def ensure_keys(settings: Settings) -> tuple[Settings, str | None]:
    """Settings with API keys: the configured ones, else a key generated for tenant 'default' and saved in
    <data dir>/api_keys, a file created private (0600, O_EXCL: never through a planted link, never readable for a
    moment). Returns (settings, the generated key or None); a keys file others may read raises ValueError."""
    if settings.keys():
        return settings, None
    path = settings.data_dir / KEYS_FILE
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    generated = None
    if not path.exists() or not path.read_text().strip():
        generated = secrets.token_urlsafe(24)
        path.unlink(missing_ok=True)  # an empty file left by an interrupted first start
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(f"default:{generated}\n")
    out = settings.model_copy(update={"api_keys_file": path})
    out.keys()  # a key file kept from an earlier start must parse and be private too
    return out, generated


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn
    from pydantic import ValidationError
    from uvicorn.config import STARTUP_FAILURE  # 3: what uvicorn exits with when it cannot start

    from .api import create_app
    from .service.backends import BackendError, check_storage, describe_database, open_records
    from .settings import describe

    try:
        settings = _settings(
            host=args.host,
            port=args.port,
            data_dir=args.data_dir,
            ray_address=args.ray_address,
            executor=args.executor,
            max_concurrent_runs=args.max_concurrent_runs,
            ssl_certfile=args.ssl_certfile,
            ssl_keyfile=args.ssl_keyfile,
            forwarded_allow_ips=args.forwarded_allow_ips,
            database_url=args.database_url,
            storage_url=args.storage_url,
        )
    except ValidationError as exc:  # a malformed setting: refuse to start, naming its variable
        print(f"raysampler serve: {describe(exc)}", file=sys.stderr)
        return 2
    if (settings.ssl_certfile is None) != (settings.ssl_keyfile is None):
        print("raysampler serve: HTTPS needs both --ssl-certfile and --ssl-keyfile", file=sys.stderr)
        return 2
    try:
        settings, generated = ensure_keys(settings)
        grants = settings.grants()
        open_records(settings).close()  # reachable and migrated before the first request
        storage = check_storage(settings)
    except (ValueError, OSError, BackendError) as exc:  # malformed keys or grants, unusable database or storage
        print(f"raysampler serve: {exc}", file=sys.stderr)
        return 2
    url = f"{'https' if settings.ssl_certfile else 'http'}://{settings.host}:{settings.port}"
    if args.format == "json":
        print(
            json.dumps(
                {
                    "url": url,
                    "data_dir": str(settings.data_dir),
                    "database": describe_database(settings.database_url),
                    "storage": storage.location,
                    "replica": settings.replica,
                    "executor": settings.executor,
                    "generated_api_key": generated,
                    "data_grants": [dataclasses.asdict(g) for g in grants.grants],
                }
            ),
            flush=True,
        )
    else:
        if generated:
            print(f"API key for tenant 'default': {generated}  (saved in {settings.data_dir / KEYS_FILE})")
        print(
            f"raysampler {_version()} serving on {url} (docs at /docs; data in {settings.data_dir}; executor "
            f"{settings.executor})",
            flush=True,
        )
        print(
            f"records: {describe_database(settings.database_url)}; draws and uploads: {storage.location}; "
            f"replica {settings.replica!r} (lease {settings.lease_s:g} s)"
        )
        print(
            f"data grants: {len(grants)}"
            + ("" if len(grants) else " (no tenant may use site shards; set RAYSAMPLER_DATA_GRANTS)")
        )
        for g in grants.grants:
            print(f"  tenant {g.tenant!r} on site {g.site!r}: {g.prefix}")
        sys.stdout.flush()
    config = uvicorn.Config(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_level=args.log_level,
        timeout_graceful_shutdown=3,  # open follow-streams would otherwise hold a graceful stop until their runs end
        ssl_certfile=settings.ssl_certfile,
        ssl_keyfile=settings.ssl_keyfile,
        forwarded_allow_ips=settings.forwarded_allow_ips,  # whose X-Forwarded-For/-Proto uvicorn believes
    )
    server = uvicorn.Server(config)
    # The port is bound now, before the app's start-up starts Ray: uvicorn itself binds after it, and meanwhile one
    # of Ray's own processes could take a port its caller had found free (seen: the demo's service failing with
    # "address already in use"). A port already taken exits here, with uvicorn's message, before Ray starts.
    try:
        sock = config.bind_socket()  # on failure uvicorn logs the OS's reason and exits
    except SystemExit:
        print(
            f"raysampler serve: cannot listen on {settings.host}:{settings.port} (--host/--port, RAYSAMPLER_HOST/"
            "RAYSAMPLER_PORT): the port is taken or the address is not this machine's",
            file=sys.stderr,
        )
        return STARTUP_FAILURE
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:  # the SIGINT of a graceful stop, raised again once the server has stopped
        pass
    finally:
        sock.close()
    return 0 if server.started else STARTUP_FAILURE


def _version() -> str:
    from . import __version__

    return __version__


def _client(args: argparse.Namespace) -> Client:
    from .client import Client, service_address

    url, key = service_address(args.url, args.api_key, key_file=True)  # else the key `serve` generated
    if not key:
        raise SystemExit("error: no API key: pass --api-key or set RAYSAMPLER_API_KEY")
    return Client(url, key)


def _load_spec(path: str) -> dict[str, Any]:
    import yaml

    text = sys.stdin.read() if path == "-" else Path(path).read_text()
    spec = yaml.safe_load(text)  # YAML is a superset of JSON: one loader for both
    if not isinstance(spec, dict):
        raise SystemExit(f"error: {path}: a run spec must be a mapping (JSON object), got {type(spec).__name__}")
    return spec


def _print_run(info: Mapping[str, Any], fmt: str) -> None:
    if fmt == "json":
        print(json.dumps(info))
        return
    p = info["progress"]
    label = f" {info['name']!r}" if info.get("name") else ""
    line = (
        f"{info['id']}{label}  {info['status']:<9}  {info['spec']['algorithm']['name']:<7} rounds "
        f"{p['rounds_done']}/{p['rounds_total']}  draws {p['draws_stored']}/{p['draws_total']} per chain"
    )
    if p.get("basis") == "convergence":  # num_rounds "auto": how close to the ESS and R-hat targets
        d = info.get("diagnostics") or {}
        line += f"  converged {100 * p['fraction']:.0f}%"
        nested = d.get("rule") == "nested_rhat"
        rhat = d.get("max_nested_rhat") if nested else d.get("max_rhat")
        if d.get("min_ess_bulk") is not None and rhat is not None:
            line += f" (min ESS {d['min_ess_bulk']:.0f}, max {'nested ' if nested else ''}R-hat {rhat:.3f})"
    if info.get("stop_reason"):
        line += f"  stopped: {info['stop_reason']}"
    line += _privacy_line(info)
    line += _network_lines(info)
    if info.get("error"):
        line += f"\n  error: {info['error']}"
    for w in info.get("warnings") or []:
        line += f"\n  warning: {w}"
    print(line)


def _privacy_line(info: Mapping[str, Any]) -> str:
    """The DP mode: the budget and each site's ε spent and clip rate, as an indented line ("" without it)."""
    dp = (info.get("spec") or {}).get("privacy")
    if not dp:
        return ""
    sites = [
        f"{w.get('site') or w['shard']} ε {w['epsilon_spent']:.3f} clip {100 * w['clip_rate']:.1f}%"
        for w in info.get("workers") or []
        if w.get("epsilon_spent") is not None and w.get("clip_rate") is not None
    ]
    return f"\n  privacy ε ≤ {dp['epsilon']:g}, δ {dp['delta']:g}, clip {dp['clip']:g}" + (
        ": " + ", ".join(sites) if sites else ""
    )


def _network_lines(info: Mapping[str, Any]) -> str:
    """The chains chosen by chains="auto", round trips by phase, and each site's RTT (the slowest process's), as
    indented lines; nothing before the run has started."""
    out = ""
    choice = (info.get("plan") or {}).get("chains")
    if isinstance(choice, dict) and choice.get("auto"):
        out += f"\n  chains {choice.get('chains')} (auto: {choice.get('reason')})"
    trips = (info.get("network") or {}).get("trips")
    if trips:
        out += (
            f"\n  round trips {trips['total']} (set-up {trips['setup']}, warm-up {trips['warmup']}, "
            f"sampling {trips['sampling']}, captures {trips['capture']})"
        )
    rtt: dict[str, float] = {}
    for w in info.get("workers") or []:
        value = w.get("rtt_s") if w.get("rtt_s") is not None else w.get("setup_rtt_s")
        if value is not None:
            site = w.get("site") or "(no site)"
            rtt[site] = max(rtt.get(site, 0.0), float(value))
    if rtt:
        out += "\n  RTT " + ", ".join(f"{site} {1e3 * v:.1f} ms" for site, v in sorted(rtt.items()))
    return out


def _tags(pairs: Sequence[str] | None) -> dict[str, str]:
    """--tag k=v flags as a mapping (a malformed one is a usage error)."""
    out = {}
    for pair in pairs or ():
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"error: --tag takes key=value, got {pair!r}")
        out[key] = value
    return out


def _privacy(args: argparse.Namespace) -> dict[str, float | str] | None:
    """--dp-epsilon/--dp-delta/--dp-clip/--dp-clip-rule as the run body's `privacy` (the fields given; the service
    fills the others with their defaults and checks them: a bad value is its 422 naming privacy.<field>), or None
    without them."""
    given = {k: getattr(args, f"dp_{k}") for k in ("epsilon", "delta", "clip", "clip_rule")}
    body = {k: v for k, v in given.items() if v is not None}
    return body or None


def cmd_submit(args: argparse.Namespace) -> int:
    with _client(args) as c:
        secure = True if args.secure_sums else None  # the spec's own secure_sums stands unless the flag is given
        run = c.submit(
            _load_spec(args.spec), name=args.name, tags=_tags(args.tag), secure_sums=secure, privacy=_privacy(args)
        )
        info = run.wait(progress=args.format != "json") if args.wait else run.info()
        _print_run(info, args.format)
        return 0 if info["status"] != "FAILED" else 1


def cmd_status(args: argparse.Namespace) -> int:
    with _client(args) as c:
        if args.id is None:
            runs = list(itertools.islice(c.runs(name=args.name, tags=_tags(args.tag)), args.limit))
            if args.format == "json":
                print(json.dumps(runs))
            for r in runs if args.format != "json" else []:
                _print_run(r, "table")
            return 0
        _print_run(c.run(args.id).info(), args.format)
        return 0


def cmd_draws(args: argparse.Namespace) -> int:
    """Print draw lines; the table starts with a header line naming the parameters (its columns as wide as the
    names). JSON lines are the service's own line format (NaN/±inf as strings)."""
    from .wire import draw_line

    widths: list[int] | None = None

    def header(names: Sequence[str] | None, d: int) -> list[int]:
        labels = list(names) if names is not None and len(names) == d else [f"θ[{j}]" for j in range(d)]
        out = [max(7, len(n)) for n in labels]
        print(f"{'draw':>7} {'chain':>5}  " + " ".join(f"{n:>{w}}" for n, w in zip(labels, out)))
        return out

    with _client(args) as c:
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
    with _client(args) as c:
        _print_run(c.run(args.id).cancel(), args.format)
    return 0


def cmd_resume(args: argparse.Namespace) -> int:
    with _client(args) as c:
        _print_run(c.run(args.id).resume(), args.format)
    return 0


def cmd_delete(args: argparse.Namespace) -> int:
    with _client(args) as c:
        run = c.run(args.id)
        run.delete()
    print(json.dumps({"id": run.id, "deleted": True}) if args.format == "json" else f"{run.id}  deleted")
    return 0


def cmd_summary(args: argparse.Namespace) -> int:
    """The fit as brms prints it (default), or with --table (or --format json) the summary per coordinate."""
    with _client(args) as c:
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
    with _client(args) as c:
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
    with _client(args) as c:
        cols = [s for s in args.x_columns.split(",") if s] if args.x_columns else None
        info = c.upload_file(args.file, y_column=args.y_column, x_columns=cols, name=args.name)
    print(json.dumps(info) if args.format == "json" else f"{info['id']}  n={info['n']} d={info['d']}  {info['name']}")
    return 0


def cmd_models(args: argparse.Namespace) -> int:
    """The service's model families (built-in and registered packages) and the parameters each takes."""
    with _client(args) as c:
        families = c.models()
    if args.format == "json":
        print(json.dumps(families))
        return 0
    for f in families:
        where = "built-in" if f["builtin"] else f"from {f['distribution']}"
        params = ", ".join(sorted(f["parameters"].get("properties", {})))
        print(f"{f['name']}  ({where})  {f['description']}\n    parameters: {params or '-'}")
    return 0


def _draws(value: str) -> int | str:
    """--draws: a count or 'all'."""
    if value == "all":
        return value
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"--draws takes an integer >= 1 or 'all', got {value!r}")
    return n


def cmd_r2(args: argparse.Namespace) -> int:
    """The Bayesian R² of a run (brms' bayes_R2), computed where its rows are."""
    with _client(args) as c:
        r2 = c.run(args.id).bayes_r2(draws=args.draws)
    if args.format == "json":
        print(json.dumps(r2))
        return 0
    print(
        f"{r2['run_id']}  Bayesian R2 {_num(r2['estimate'])} (Est.Error {_num(r2['est_error'])})  "
        f"95% [{_num(r2['lower'])}, {_num(r2['upper'])}]  ({r2['n_samples']} draws)"
    )
    return 0


def cmd_loo(args: argparse.Namespace) -> int:
    """PSIS-LOO of a run, computed where its rows are."""
    with _client(args) as c:
        lo = c.run(args.id).loo(draws=args.draws, moment_match=args.moment_match)
    if args.format == "json":
        print(json.dumps(lo))
        return 0
    print(
        f"{lo['run_id']}  elpd_loo {_num(lo['elpd'])} (SE {_num(lo['se'])})  p_loo {_num(lo['p_loo'])}  "
        f"({lo['n_data_points']} rows, {lo['n_samples']} draws)"
    )
    print(
        f"  flat (log-lik span < {lo['flat_span']:g}, uniform weights): {lo['k_flat']}   "
        f"Pareto k < 0.7: {lo['k_ok']}   k >= 0.7: {lo['k_high']}"
    )
    for r in lo["high_k_rows"][:20]:
        print(f"  high k: {_where(r)}")
    warned = lo.get("warning_rows") or []
    if lo["warning"] and warned:
        shown = ", ".join(f"{_where(w['row'])} (k {_num(w['k'])})" for w in warned[:10])
        more = f" and {len(warned) - 10} more" if len(warned) > 10 else ""
        print(f"  warning: {len(warned)} rows with Pareto k > {lo['good_k']:.2f}: {shown}{more}")
    matched = lo.get("moment_matched")
    if matched is not None:
        print(f"  moment matching: {len(matched)} rows, {sum(1 for m in matched if m['used'])} improved")
        for m in matched[:20]:
            print(
                f"    {_where(m['row'])}: k {_num(m['k_psis'])} -> {_num(m['k_after'])}, elpd_i "
                f"{_num(m['elpd_psis'], 4)} -> {_num(m['elpd_after'], 4)} (MCSE {_num(m['mcse_after'], 4)}), "
                f"{m['maps']} maps{'' if m['used'] else ', PSIS kept'}"
            )
    return 0


def _num(value: float | None, digits: int = 2) -> str:
    return "nan" if value is None else f"{value:.{digits}f}"


def _where(r: Mapping[str, Any]) -> str:
    """A row by position, as the service names it."""
    return f"row {r['row']} of shard {r['shard']}" + (f" (original row {r['index']})" if r["index"] is not None else "")


def cmd_compare(args: argparse.Namespace) -> int:
    """Runs fitted on the same rows, best first by PSIS-LOO elpd."""
    with _client(args) as c:
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
    with _client(args) as c:
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

    with _client(args) as c:
        values = c.run(args.id).predict(dataset_id=args.dataset_id, kind=args.kind, draws=args.draws)
    rows = np.moveaxis(values, 0, 1) if args.kind in ("draws", "epred", "linpred", "predict") else values  # per row
    for i, v in enumerate(rows):
        print(json.dumps({"row": i, "value": v.tolist()}) if args.format == "json" else f"{i}\t{v}")
    return 0


def cmd_ppc(args: argparse.Namespace) -> int:
    """A posterior predictive check of a run, computed where its rows are: printed, as JSON, or drawn (--plot)."""
    import dataclasses

    import numpy as np

    from .predictive import PpcHistogram, PpcStat, PpcStatGrouped

    with _client(args) as c:
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


def cmd_demo(args: argparse.Namespace) -> int:
    from . import demo

    demo.main(["--format", args.format])
    return 0


def cmd_audit(args: argparse.Namespace) -> int:
    """Print the audit log's records (rotated files included, oldest first) that match the filters."""
    from .service.audit import AuditQuery, log_files, parse_since, read_records

    path = _settings(data_dir=args.data_dir).audit_log_path
    if not log_files(path):
        raise SystemExit(f"error: no audit log at {path} (give the service's --data-dir)")
    try:
        since = parse_since(args.since) if args.since else None
    except ValueError as exc:
        raise SystemExit(f"error: {exc}") from None
    records = read_records(path, AuditQuery(tenant=args.tenant, since=since, action=args.action))
    if args.format == "table":
        print(
            f"{'time':<29} {'tenant':<12} {'key id':<12} {'action':<14} {'run/data set':<22} {'status':<12} "
            f"{'client':<15} path"
        )
    for r in records:
        if args.format == "json":
            print(r.to_json())
        else:
            status = f"{r.status} {r.outcome}"
            print(
                f"{r.time:<29} {r.tenant or '-':<12} {r.key_id or '-':<12} {r.action:<14} "
                f"{r.run_id or r.dataset_id or '-':<22} {status:<12} {r.client or '-':<15} {r.method} {r.path}"
            )
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="raysampler", description=__doc__.splitlines()[0] if __doc__ else None)
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
    p.add_argument("--draws", type=_draws, default=1000, help="at most this many draws (thinned), or 'all'")
    p.add_argument(
        "--moment-match", action="store_true", help="improve the rows with Pareto k >= 0.7 by moment matching"
    )
    p.set_defaults(fn=cmd_loo)
    p = client_cmd("r2", "the Bayesian R2 of a run (brms' bayes_R2), computed where its rows are")
    p.add_argument("id", help="run ID, or 'latest' for the newest run")
    p.add_argument("--draws", type=_draws, default=1000, help="at most this many draws (thinned), or 'all'")
    p.set_defaults(fn=cmd_r2)
    p = client_cmd("compare", "compare runs fitted on the same rows by PSIS-LOO")
    p.add_argument("ids", nargs="+", metavar="ID", help="run IDs ('latest' for the newest run)")
    p.add_argument("--draws", type=_draws, default=1000, help="at most this many draws (thinned), or 'all'")
    p.add_argument(
        "--method", choices=["pseudo-bma", "stacking"], default="pseudo-bma", help="how the models are weighed"
    )
    p.set_defaults(fn=cmd_compare)
    p = client_cmd("evaluate", "held-out metrics of a run (accuracy, NLL, Brier, ECE / RMSE, CRPS, coverage)")
    p.add_argument("id", help="run ID, or 'latest' for the newest run")
    p.add_argument("--dataset-id", default=None, help="an uploaded data set")
    p.add_argument("--data", default=None, help='a data reference as JSON, e.g. {"shards": [...], "y_column": "y"}')
    p.add_argument("--draws", type=_draws, default=1000)
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
    p.add_argument("--draws", type=_draws, default=1000)
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
        "--draws", type=_draws, default=None, help="replicated data sets (default 10, 1000 for stat), or 'all'"
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
    p = sub.add_parser("demo", help="start a local service, run DG-LMC on breast_cancer through the SDK, summarise")
    p.add_argument("--format", choices=["table", "json"], default="table")
    p.set_defaults(fn=cmd_demo)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from .client import APIError
    from .extras import MissingExtraError, explain

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


if __name__ == "__main__":
    sys.exit(main())
