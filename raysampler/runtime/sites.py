"""Sites: Ray nodes labelled `raysampler.io/site=<name>` hold a site's data. Which sites have live nodes, how many
CPUs they offer, a probe that asks a site's node about a shard file (its header only, never the data), and how many
parts a site splits its groups into (`site_parts`: counted on the site), so the driver never opens a site shard
itself."""

from __future__ import annotations

import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import Failure, FailureKind, WorkerFailed
from ..grants import AccessRefused, check_on_site
from .contracts import SITE_LABEL


def site_nodes() -> dict[str, list[dict[str, Any]]]:
    """Alive Ray nodes by site label value."""
    import ray

    out: dict[str, list[dict[str, Any]]] = {}
    for node in ray.nodes():
        site = (node.get("Labels") or {}).get(SITE_LABEL)
        if node.get("Alive") and site is not None:
            out.setdefault(site, []).append(node)
    return out


def live_site_nodes(wanted: set[str], wait_s: float) -> tuple[dict[str, list[dict[str, Any]]], float]:
    """`site_nodes()` once every site in `wanted` has a live node, or when `wait_s` has passed (a node may still be
    joining); with the seconds waited."""
    t0 = time.monotonic()
    nodes = site_nodes()
    while wanted - set(nodes) and time.monotonic() - t0 < wait_s:
        time.sleep(0.25)
        nodes = site_nodes()
    return nodes, time.monotonic() - t0


def wait_for_sites(sites: Sequence[str | None], wait_s: float) -> dict[str, int]:
    """CPUs of the live nodes of every site named in `sites` (None = no site), waiting up to `wait_s` for each site
    to have a node; a site still missing raises WorkerFailed (SITE_UNAVAILABLE) naming its first shard."""
    wanted = {s for s in sites if s is not None}
    nodes, _ = live_site_nodes(wanted, wait_s)
    missing = sorted(wanted - set(nodes))
    if missing:
        site = missing[0]
        i = list(sites).index(site)
        raise WorkerFailed(
            Failure(
                FailureKind.SITE_UNAVAILABLE,
                f"shards[{i}] needs a node labelled {SITE_LABEL}={site}; no live Ray node has that "
                f"label (waited {wait_s:g} s)",
                shard=i,
                site=site,
            )
        )
    return {s: max(1, int(sum(n["Resources"].get("CPU", 0) for n in nodes[s]))) for s in wanted}


@dataclass(frozen=True)
class ShardProbe:
    """What a site's node says about a shard file: its header (column names, rows when known, feature count), or
    the error reading it; and which node answered. `refused` is True when the path lies outside the shard's grants
    (then `error` states the rule only, whatever the file holds or whether it exists)."""

    path: str
    site: str
    ok: bool
    columns: tuple[str, ...] | None = None
    n_rows: int | None = None
    n_features: int | None = None
    error: str | None = None
    node_id: str | None = None
    hostname: str | None = None
    refused: bool = False
    waited_s: float = 0.0


def _probe(
    path: str, site: str, y_column: str, x_columns: tuple[str, ...] | None, grants: tuple[str, ...] | None
) -> ShardProbe:
    """Runs on the site's node: check the grants (symlinks resolved), then stat the file and read its header
    (never its data)."""
    import ray

    from ..shards import read_header

    if grants is not None:
        try:
            path_read = check_on_site(path, grants)
        except AccessRefused as exc:
            return ShardProbe(path, site, False, error=str(exc), refused=True)
    else:
        path_read = path
    node_id, hostname = ray.get_runtime_context().get_node_id(), socket.gethostname()
    try:
        h = read_header(path_read, y=y_column, x=x_columns)
    except Exception as exc:  # reported to the caller, who names the shard
        return ShardProbe(path, site, False, error=f"{type(exc).__name__}: {exc}", node_id=node_id, hostname=hostname)
    return ShardProbe(path, site, True, h.columns, h.n_rows, h.n_features, node_id=node_id, hostname=hostname)


def probe_shards(
    shards: Sequence[Any], timeout_s: float | None = None, wait_s: float | None = None
) -> list[ShardProbe | None]:
    """Ask a node of each site shard's site about its file (a short task pinned there by the site label); None for
    shards without a site. A site with no live node is waited for, up to `wait_s` (default: RAYSAMPLER_SITE_WAIT_S,
    read now), since its node may still be joining; one still missing then gives a probe with ok=False saying how
    long it waited. The answers are waited for together, up to `timeout_s` (default: RAYSAMPLER_STARTUP_TIMEOUT_S,
    the bound on a worker process starting on a node): a site's first task starts a Ray worker process there and
    imports raysampler, numpy and the file's reader, a few CPU seconds that take far longer in wall time when
    the machine's cores are all busy (benchmarks/perf/site_probe.py; docs/performance.md, "A site's first answer
    on a busy machine"), so a fixed short deadline named a live site
    unreachable on a loaded machine."""
    import ray

    from ..settings import EngineSettings

    engine = EngineSettings.from_env()
    wait = engine.site_wait_s if wait_s is None else wait_s
    answer_s = engine.startup_timeout_s if timeout_s is None else timeout_s
    wanted = {s.site for s in shards if getattr(s, "site", None) is not None}
    live, waited = live_site_nodes(wanted, wait)
    remote = ray.remote(num_cpus=0, max_retries=0)(_probe)
    refs: list[Any] = []
    for s in shards:
        if getattr(s, "site", None) is None:
            refs.append(None)
        elif s.site not in live:
            refs.append(
                ShardProbe(
                    s.path,
                    s.site,
                    False,
                    error=f"no live Ray node carries the label {SITE_LABEL}={s.site} (waited {waited:.0f} s, "
                    f"RAYSAMPLER_SITE_WAIT_S={wait:g})",
                    waited_s=waited,
                )
            )
        else:
            refs.append(
                remote.options(label_selector={SITE_LABEL: s.site}).remote(
                    s.path, s.site, s.y_column, s.x_columns, getattr(s, "grants", None)
                )
            )
    pending = [r for r in refs if r is not None and not isinstance(r, ShardProbe)]
    t0 = time.monotonic()
    ready = set(ray.wait(pending, num_returns=len(pending), timeout=answer_s)[0]) if pending else set()
    answered_s = time.monotonic() - t0
    out: list[ShardProbe | None] = []
    for s, ref in zip(shards, refs):
        if ref is None or isinstance(ref, ShardProbe):
            out.append(ref)
        elif ref not in ready:
            ray.cancel(ref, force=True)
            out.append(
                ShardProbe(
                    s.path,
                    s.site,
                    False,
                    error=f"the site's node is live but did not answer within {answered_s:.0f} s "
                    f"(RAYSAMPLER_STARTUP_TIMEOUT_S={answer_s:g}): its first task starts a worker process there, "
                    "which a machine whose cores are all busy makes slow",
                    waited_s=waited + answered_s,
                )
            )
        else:
            try:
                out.append(ray.get(ref))
            except Exception as exc:  # the task failed or its node died meanwhile
                reason = (str(exc).strip().splitlines() or [""])[0]
                out.append(
                    ShardProbe(
                        s.path, s.site, False, error=f"the site's node did not answer: {type(exc).__name__}: {reason}"
                    )
                )
    return out


def _group_count(shard: Any, by: str) -> int:
    """Runs on the site's node: how many groups by column `by` the shard's file holds (its rows stay there)."""
    table = shard.read()
    if table.columns is None or by not in table.columns:
        raise ValueError(f"shard file {shard.path!r} has no column {by!r} to split its groups by")
    return int(np.unique(table.X[:, table.columns.index(by)]).size)


def site_parts(shards: Sequence[Any], by: str, wait_s: float, timeout_s: float = 120.0) -> list[int]:
    """How many parts each shard is split into where it lives (`shards.split_site_groups`): a site file with
    `parts="auto"` gets its site's CPUs shared among the site's such shards, a number is taken as given; either is
    capped by the file's number of groups by column `by`, which a short task on a node of the site counts (the
    driver never reads a site's rows). Other shards: 1."""
    import ray

    eligible = [s.site is not None and s.path is not None and s.part is None and s.parts != 1 for s in shards]
    cpus = wait_for_sites([s.site for s, ok in zip(shards, eligible) if ok], wait_s)
    per_site: dict[str, int] = {}
    for s, ok in zip(shards, eligible):
        if ok:
            per_site[s.site] = per_site.get(s.site, 0) + 1
    want = [
        (max(1, cpus[s.site] // per_site[s.site]) if s.parts == "auto" else int(s.parts)) if ok else 1
        for s, ok in zip(shards, eligible)
    ]
    count = ray.remote(num_cpus=0, max_retries=0)(_group_count)
    refs = [
        count.options(label_selector={SITE_LABEL: s.site}).remote(s, by) if w > 1 else None
        for s, w in zip(shards, want)
    ]
    out = []
    for ref, w in zip(refs, want):
        try:
            out.append(1 if ref is None else max(1, min(w, int(ray.get(ref, timeout=timeout_s)))))
        except Exception:  # the file unreadable or without the column: kept whole, its worker reports why
            out.append(1)
    return out
