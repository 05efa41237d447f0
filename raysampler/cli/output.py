"""What the client commands share: the client from --url/--api-key, specs read from files, flags parsed, and runs,
rows and numbers printed as tables."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..client import Client


def version_string() -> str:
    from .. import __version__

    return __version__


def connect(args: argparse.Namespace) -> Client:
    from ..client import Client, service_address

    url, key = service_address(args.url, args.api_key, key_file=True)  # else the key `serve` generated
    if not key:
        raise SystemExit("error: no API key: pass --api-key or set RAYSAMPLER_API_KEY")
    return Client(url, key)


def load_spec(path: str) -> dict[str, Any]:
    import yaml

    text = sys.stdin.read() if path == "-" else Path(path).read_text()
    spec = yaml.safe_load(text)  # YAML is a superset of JSON: one loader for both
    if not isinstance(spec, dict):
        raise SystemExit(f"error: {path}: a run spec must be a mapping (JSON object), got {type(spec).__name__}")
    return spec


def print_run(info: Mapping[str, Any], fmt: str) -> None:
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


def parse_tags(pairs: Sequence[str] | None) -> dict[str, str]:
    """--tag k=v flags as a mapping (a malformed one is a usage error)."""
    out = {}
    for pair in pairs or ():
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"error: --tag takes key=value, got {pair!r}")
        out[key] = value
    return out


def dp_body(args: argparse.Namespace) -> dict[str, float | str] | None:
    """--dp-epsilon/--dp-delta/--dp-clip/--dp-clip-rule as the run body's `privacy` (the fields given; the service
    fills the others with their defaults and checks them: a bad value is its 422 naming privacy.<field>), or None
    without them."""
    given = {k: getattr(args, f"dp_{k}") for k in ("epsilon", "delta", "clip", "clip_rule")}
    body = {k: v for k, v in given.items() if v is not None}
    return body or None


def draws_arg(value: str) -> int | str:
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


def number(value: float | None, digits: int = 2) -> str:
    return "nan" if value is None else f"{value:.{digits}f}"


def row_place(r: Mapping[str, Any]) -> str:
    """A row by position, as the service names it."""
    return f"row {r['row']} of shard {r['shard']}" + (f" (original row {r['index']})" if r["index"] is not None else "")
